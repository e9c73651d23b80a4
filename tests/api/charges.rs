//! Reading charges back, health, the routes around the charge endpoint, and
//! the problem types its errors point at.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support::{
    AppClient, Captured, DEMO_KEY, TEST_ACCOUNT, TEST_KEY, TestApp, TestBackend, TestDatabase,
    charge_body, spawn_app, spawn_app_with,
};

const SHOP_KEY: &str = "sk_live_shop_for_problem_tests";

crate::on_both_backends! {
    async fn a_charge_can_be_read_back_with_the_body_it_was_created_with() {
        let app = spawn_app().await;
        let created = app.charge("k-get", &charge_body()).await;
        let location = created.header("location").unwrap().to_owned();

        let fetched = app.get_as(TEST_KEY, &location).await;
        assert_eq!(fetched.status, 200);
        assert_eq!(fetched.json(), created.json());
    }

    async fn another_accounts_charge_is_not_found() {
        let app = spawn_app().await;
        app.create_account("Other shop", "sk_test_other");
        let created = app.charge(None, &charge_body()).await;
        let location = created.header("location").unwrap().to_owned();

        app.get_as("sk_test_other", &location)
            .await
            .assert_problem(404, "not-found");
        let list = app.get_as("sk_test_other", "/charges").await;
        assert_eq!(list.json()["data"], json!([]));
    }

    async fn unknown_and_malformed_charge_ids_are_not_found() {
        let app = spawn_app().await;
        for id in ["00000000-0000-0000-0000-000000000000", "not-a-uuid"] {
            app.get_as(TEST_KEY, &format!("/charges/{id}"))
                .await
                .assert_problem(404, "not-found");
        }
    }

    async fn the_list_is_newest_first_and_bounded_by_limit() {
        let app = spawn_app().await;
        for amount in [1, 2, 3] {
            app.charge(None, &json!({"amount": amount, "currency": "usd"})).await;
        }
        let list = app.get_as(TEST_KEY, "/charges?limit=2").await;
        assert_eq!(list.status, 200);
        let amounts: Vec<i64> = list.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["amount"].as_i64().unwrap())
            .collect();
        assert_eq!(amounts, [3, 2]);

        for bad in ["0", "101", "abc"] {
            app.get_as(TEST_KEY, &format!("/charges?limit={bad}"))
                .await
                .assert_problem(400, "invalid-request");
        }
    }

    async fn reading_charges_needs_an_api_key() {
        let app = spawn_app().await;
        let r = app.get("/charges").await;
        r.assert_problem(401, "unauthorized");
        assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    }

    async fn health_and_readiness_answer() {
        let app = spawn_app().await;
        assert_eq!(app.get("/healthz").await.status, 200);
        let ready = app.get("/readyz").await;
        assert_eq!(ready.status, 200);
        assert_eq!(ready.json()["status"], "ready");
    }

    async fn unknown_paths_and_methods_are_problems() {
        let app = spawn_app().await;
        app.get("/nowhere").await.assert_problem(404, "not-found");
        app.send(app.request(Method::DELETE, "/charges").bearer_auth(TEST_KEY))
            .await
            .assert_problem(405, "method-not-allowed");
    }

    /// Each problem type the server emits, provoked by a real request, is
    /// served at its `type` URI with the status and title the response had,
    /// and every type `/demo/config` lists (all of `problem::TYPES`) is one
    /// of them: a new type needs a case in `provoke_every_problem_type`.
    async fn every_problem_type_is_documented_at_its_uri() {
        let (app, provoked) = provoke_every_problem_type().await;
        let listed: BTreeSet<String> = app.demo().get_json("/demo/config").await["problem_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["type"].as_str().unwrap().to_owned())
            .collect();
        assert!(listed.len() >= 14, "{listed:?}");
        let emitted: BTreeSet<String> = provoked.0.keys().cloned().collect();
        let unprovoked: Vec<&String> = listed.difference(&emitted).collect();
        assert!(
            unprovoked.is_empty(),
            "/demo/config lists problem types that no request here provoked: {unprovoked:?} (provoked: {:#?})",
            provoked.0
        );
        let unlisted: Vec<&String> = emitted.difference(&listed).collect();
        assert!(
            unlisted.is_empty(),
            "the server emits problem types that /demo/config does not list: {unlisted:?}"
        );
    }

    async fn an_exhausted_pool_answers_503_with_retry_after_instead_of_hanging() {
        let app = spawn_app_with(|s| {
            s.pool_size = 1;
            s.pool_timeout = std::time::Duration::from_millis(300);
        })
        .await;
        // Authenticate once, so the API key is cached and needs no connection.
        app.get_as(DEMO_KEY, "/charges").await;
        let body = charge_body();
        let holder = app.demo().charge_with(
            "k-hold",
            &body,
            &[("demo-fault", "delay-commit=1500")],
        );
        let starved = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let r = app.demo().charge("k-starved", &body).await;
            (r, started.elapsed())
        };
        let (holder, (starved, waited)) = tokio::join!(holder, starved);
        assert_eq!(holder.status, 201);
        starved.assert_problem(503, "service-unavailable");
        assert_eq!(starved.header("retry-after"), Some("1"));
        assert!(
            waited < std::time::Duration::from_millis(1200),
            "it gave up after the pool timeout: {waited:?}"
        );
        assert_eq!(
            app.count("idempotency_keys WHERE key = 'k-starved'"),
            0,
            "nothing was stored for it"
        );
        // The same request succeeds once a connection is free.
        assert_eq!(app.demo().charge("k-starved", &body).await.status, 201);
    }
}

/// The problem types seen, each with the requests that provoked it.
#[derive(Default)]
struct Provoked(BTreeMap<String, Vec<&'static str>>);

impl Provoked {
    /// `r`, the answer to `what`, is the problem `slug` with `status`, and
    /// its `type` URI, dereferenced on the server that answered, serves
    /// that type with the status and the title `r` had.
    async fn check(
        &mut self,
        server: &AppClient,
        what: &'static str,
        r: Captured,
        status: u16,
        slug: &str,
    ) {
        assert_eq!(r.status, status, "{what}: {}", r.body);
        r.assert_problem(status, slug);
        let problem = r.json();
        let uri = problem["type"].as_str().unwrap();
        let served = server.get(uri).await;
        assert_eq!(
            served.status, 200,
            "{what}: its type {uri} is not served: {}",
            served.body
        );
        let served = served.json();
        assert_eq!(served["type"], uri, "{what}: {served}");
        assert_eq!(
            served["status"], r.status,
            "{what}: {uri} documents another status"
        );
        assert_eq!(
            served["title"], problem["title"],
            "{what}: {uri} documents another title"
        );
        self.0.entry(uri.to_owned()).or_default().push(what);
    }
}

/// Sends, on the backend of the running test, one request for each way the
/// server answers with a problem (each `ApiError` and each demo fault), and
/// checks each answer's type at its URI. The app it returns has a short
/// `BODY_TIMEOUT` and room for one delayed transaction.
async fn provoke_every_problem_type() -> (TestApp, Provoked) {
    let mut provoked = Provoked::default();
    let app = spawn_app_with(|s| {
        s.body_timeout = Duration::from_millis(500);
        s.demo_max_delayed = Some(1);
        s.demo_max_sandboxes = 1;
    })
    .await;
    app.create_account("Shop", SHOP_KEY);
    let body = charge_body();

    let r = app
        .charge("k-invalid", &json!({"amount": 0, "currency": "jpy"}))
        .await;
    provoked
        .check(&app, "a charge of amount 0", r, 400, "invalid-request")
        .await;

    let r = app.charge("", &body).await;
    provoked
        .check(
            &app,
            "an empty Idempotency-Key",
            r,
            400,
            "invalid-idempotency-key",
        )
        .await;

    let r = app
        .charge_as("sk_test_nobody", "k-unknown-caller", &body, &[])
        .await;
    provoked
        .check(&app, "an unknown API key", r, 401, "unauthorized")
        .await;

    let r = app
        .get_as(TEST_KEY, "/charges/00000000-0000-0000-0000-000000000000")
        .await;
    provoked
        .check(&app, "an unknown charge id", r, 404, "not-found")
        .await;

    // The database does not answer within REQUEST_TIMEOUT: here the key
    // table held by a transaction of the test's own, past a deadline of 1 s.
    let hurried = spawn_app_with(|s| s.request_timeout = Duration::from_secs(1)).await;
    let hold = hurried.hold_key_writes();
    let r = hurried.charge("k-slow", &body).await;
    drop(hold);
    assert_eq!(r.header("retry-after"), Some("1"));
    provoked
        .check(
            &hurried,
            "a request the database does not answer within REQUEST_TIMEOUT",
            r,
            503,
            "deadline-exceeded",
        )
        .await;

    // The card network does not answer: 503, nothing stored.
    let network_db = TestDatabase::create();
    let network_url = network_db.url.clone();
    let networked = spawn_app_with(move |s| {
        s.network_url = charges::config::NETWORK_IN_PROCESS.to_owned();
        s.network_database_url = Some(network_url);
    })
    .await;
    let r = networked
        .demo()
        .charge_with("k-network-down", &body, &[("demo-fault", "network-down")])
        .await;
    provoked
        .check(
            &networked,
            "a charge the card network does not answer",
            r,
            503,
            "network-unavailable",
        )
        .await;

    // The account revoked while its charge waits on the card network: a
    // stored 403, nothing charged, the authorization voided (issue #27).
    let slow_network_db = TestDatabase::create();
    let slow_network_url = slow_network_db.url.clone();
    let slow = spawn_app_with(move |s| {
        s.network_url = charges::config::NETWORK_IN_PROCESS.to_owned();
        s.network_database_url = Some(slow_network_url);
        s.network_latency = Duration::from_millis(800);
        s.recovery_interval = Duration::from_millis(200);
    })
    .await;
    slow.create_account("Shop", SHOP_KEY);
    let charge = slow.charge_as(SHOP_KEY, "k-revoked", &body, &[]);
    let revoke = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        slow.execute("UPDATE accounts SET revoked_at = CURRENT_TIMESTAMP WHERE name = 'Shop'");
    };
    let (r, ()) = tokio::join!(charge, revoke);
    provoked
        .check(
            &slow,
            "an account revoked while its charge waits on the network",
            r,
            403,
            "account-revoked",
        )
        .await;

    // A key left in progress under a path this server cannot rebuild (an
    // older server kept the raw one): the recovery task stores a final
    // 500, and the key's retry replays it.
    let fingerprint = charges::idempotency::Fingerprint::of("POST", "/%63harges", &body);
    slow.execute(&format!(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token, request_path, request_body) \
         SELECT id, 'k-unrecoverable', '{}', 'in_progress', {}, {}, {}, '{}', '/%63harges', '{body}' FROM accounts WHERE name = '{TEST_ACCOUNT}'",
        fingerprint.as_str(),
        slow.at(-10),
        slow.at(86_400),
        slow.at(-1),
        uuid::Uuid::new_v4(),
    ));
    while slow.count("idempotency_keys WHERE key = 'k-unrecoverable' AND status = 'completed'") == 0
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let retry = slow
        .request(Method::POST, "/%63harges")
        .bearer_auth(TEST_KEY)
        .header("content-type", "application/json")
        .header("idempotency-key", "\"k-unrecoverable\"")
        .body(body.to_string());
    let r = slow.send(retry).await;
    assert!(r.replayed(), "{}", r.body);
    provoked
        .check(
            &slow,
            "a stuck key the recovery task cannot rebuild, replayed",
            r,
            500,
            "request-not-recoverable",
        )
        .await;

    // One account over its rate limit: 429, before anything runs.
    let limited = spawn_app_with(|s| s.rate_limit_per_account = 1).await;
    let mut r = limited.get_as(TEST_KEY, "/charges").await;
    for _ in 0..5 {
        if r.status == 429 {
            break;
        }
        r = limited.get_as(TEST_KEY, "/charges").await;
    }
    assert!(r.header("retry-after").is_some());
    provoked
        .check(
            &limited,
            "an account over its rate limit",
            r,
            429,
            "rate-limited",
        )
        .await;

    // Every sandbox of the demo in use.
    assert_eq!(app.post("/demo/sandboxes").await.status, 201);
    let r = app.post("/demo/sandboxes").await;
    provoked
        .check(
            &app,
            "a sandbox when the room is full",
            r,
            503,
            "demo-room-full",
        )
        .await;

    // A room code the demo does not hand out (it hands out none here).
    let r = app
        .send(
            app.request(Method::POST, "/demo/sandboxes")
                .header("demo-room", "no-such-room"),
        )
        .await;
    provoked
        .check(
            &app,
            "a sandbox with an unknown room code",
            r,
            403,
            "demo-room-unknown",
        )
        .await;

    // A browser's cross-site POST to the demo's routes.
    let r = app
        .send(
            app.request(Method::POST, "/demo/reset")
                .header("origin", "https://elsewhere.example")
                .header("sec-fetch-site", "cross-site"),
        )
        .await;
    provoked
        .check(
            &app,
            "a cross-site POST /demo/reset",
            r,
            403,
            "cross-site-request",
        )
        .await;

    let charged = app.charge(None, &body).await;
    assert_eq!(charged.status, 201);
    let r = app
        .refund("k-too-much", &charged.charge_id().to_string(), 1_000_000)
        .await;
    provoked
        .check(
            &app,
            "a refund of more than the charge",
            r,
            400,
            "refund-exceeds-charge",
        )
        .await;

    let declined =
        json!({"amount": 500, "currency": "jpy", "payment_method": "pm_card_chargeDeclined"});
    let r = app.charge("k-declined", &declined).await;
    let failed = r.json()["charge"].as_str().unwrap_or_default().to_owned();
    provoked
        .check(
            &app,
            "a declining test payment method",
            r,
            402,
            "card-declined",
        )
        .await;
    let r = app.refund("k-refund-failed", &failed, 100).await;
    provoked
        .check(
            &app,
            "a refund of a failed charge",
            r,
            400,
            "charge-not-refundable",
        )
        .await;

    let r = app
        .send(
            app.request(Method::DELETE, "/charges")
                .bearer_auth(TEST_KEY),
        )
        .await;
    provoked
        .check(&app, "DELETE /charges", r, 405, "method-not-allowed")
        .await;

    // One byte every 200 ms: the body is not there within 500 ms.
    let raw = app
        .send_slowly(
            "POST /charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk_live_test_account\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
            &[b' '; 20],
            Duration::from_millis(200),
        )
        .await;
    provoked
        .check(
            &app,
            "a body slower than BODY_TIMEOUT",
            Captured::parse(&raw),
            408,
            "request-timeout",
        )
        .await;

    let large = json!({"amount": 1000, "currency": "jpy", "description": "x".repeat(17 * 1024)});
    let r = app.charge("k-large", &large).await;
    provoked
        .check(&app, "a body over 16 KiB", r, 413, "payload-too-large")
        .await;

    let r = app
        .send(
            app.request(Method::POST, "/charges")
                .bearer_auth(TEST_KEY)
                .header("content-type", "text/plain")
                .body(body.to_string()),
        )
        .await;
    provoked
        .check(&app, "a text/plain body", r, 415, "unsupported-media-type")
        .await;
    let r = app
        .send(
            app.request(Method::POST, "/charges")
                .bearer_auth(TEST_KEY)
                .header("content-type", "application/json")
                .header("content-encoding", "gzip")
                .body(body.to_string()),
        )
        .await;
    assert_eq!(r.header("accept-encoding"), Some("identity"));
    provoked
        .check(
            &app,
            "a gzip-encoded body",
            r,
            415,
            "unsupported-content-encoding",
        )
        .await;

    // Key-first: the key commits first, so a retry meanwhile hears 409.
    let key_first = ("demo-mode", "key-first");
    let first = app.demo().charge_with(
        "k-in-flight",
        &body,
        &[key_first, ("demo-fault", "delay-commit=1500")],
    );
    let retry = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.demo()
            .charge_with("k-in-flight", &body, &[key_first])
            .await
    };
    let (first, retry) = tokio::join!(first, retry);
    assert_eq!(first.status, 201, "{}", first.body);
    provoked
        .check(
            &app,
            "a retry while the first request with its key runs (key-first)",
            retry,
            409,
            "idempotency-key-in-flight",
        )
        .await;

    assert_eq!(app.charge("k-reused", &body).await.status, 201);
    let other = json!({"amount": 2000, "currency": "jpy"});
    let r = app.charge("k-reused", &other).await;
    provoked
        .check(
            &app,
            "a key reused with another body",
            r,
            422,
            "idempotency-key-reused",
        )
        .await;

    let r = app
        .demo()
        .charge_with("k-internal", &body, &[("demo-fault", "fail-before-commit")])
        .await;
    provoked
        .check(&app, "Demo-Fault: fail-before-commit", r, 500, "internal")
        .await;

    let r = app
        .charge_as(
            SHOP_KEY,
            "k-shop",
            &body,
            &[("demo-fault", "lose-response")],
        )
        .await;
    provoked
        .check(
            &app,
            "a Demo-Fault from another account",
            r,
            400,
            "demo-account-only",
        )
        .await;

    // Demo mode answers this machine's names only (DNS rebinding).
    let raw = "GET /demo/state HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n";
    let r = Captured::parse(&app.send_raw(raw).await);
    provoked
        .check(
            &app,
            "a Host that is not this machine's",
            r,
            421,
            "host-not-allowed",
        )
        .await;

    let r = app
        .demo()
        .charge_with("k-lost", &body, &[("demo-fault", "lose-response")])
        .await;
    provoked
        .check(
            &app,
            "Demo-Fault: lose-response",
            r,
            504,
            "simulated-lost-response",
        )
        .await;
    provoke_lesson8_receiver(&app, &mut provoked).await;

    // PostgreSQL only: on SQLite a second delayed transaction waits for the
    // write lock of the first rather than reach the cap.
    if app.backend() == TestBackend::Postgres {
        let held = app
            .demo()
            .charge_with("k-held", &body, &[("demo-fault", "delay-commit=1500")]);
        let over = async {
            app.until_held(1).await;
            app.demo()
                .charge_with("k-over-cap", &body, &[("demo-fault", "delay-commit=100")])
                .await
        };
        let (held, over) = tokio::join!(held, over);
        assert_eq!(held.status, 201, "{}", held.body);
        provoked
            .check(
                &app,
                "a delayed transaction beyond DEMO_MAX_DELAYED",
                over,
                503,
                "service-unavailable",
            )
            .await;
    }

    // One connection of the server's own, held by a charge that waits on
    // the key table (held by the test): another account's next charge finds
    // none within POOL_TIMEOUT. The demo has connections of its own; its
    // delayed charge takes its only place among its requests in flight, so
    // its next one finds no place.
    let starved = spawn_app_with(|s| {
        s.pool_size = 1;
        s.pool_timeout = Duration::from_millis(300);
    })
    .await;
    starved.create_account("Shop", SHOP_KEY);
    // Authenticate both once, so their keys are cached and need no connection.
    assert_eq!(starved.get_as(DEMO_KEY, "/charges").await.status, 200);
    assert_eq!(starved.get_as(SHOP_KEY, "/charges").await.status, 200);
    let hold = starved.hold_key_writes();
    let waiting = starved.charge_as(SHOP_KEY, "k-waiting", &body, &[]);
    let refused = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        starved
            .charge_as(SHOP_KEY, "k-no-connection", &body, &[])
            .await
    };
    let released = async {
        tokio::time::sleep(Duration::from_millis(900)).await;
        drop(hold);
    };
    let (waiting, no_connection, ()) = tokio::join!(waiting, refused, released);
    assert_eq!(waiting.status, 201, "{}", waiting.body);
    provoked
        .check(
            &starved,
            "a charge while the server's only connection is taken",
            no_connection,
            503,
            "service-unavailable",
        )
        .await;
    let holder =
        starved
            .demo()
            .charge_with("k-holder", &body, &[("demo-fault", "delay-commit=1500")]);
    let no_place = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        starved.demo().charge("k-no-place", &body).await
    };
    let (holder, no_place) = tokio::join!(holder, no_place);
    assert_eq!(holder.status, 201, "{}", holder.body);
    provoked
        .check(
            &starved,
            "a demo charge while the demo's places in flight are taken",
            no_place,
            503,
            "service-unavailable",
        )
        .await;

    let required = spawn_app_with(|s| s.require_idempotency_key = true).await;
    let r = required.charge(None, &body).await;
    provoked
        .check(
            &required,
            "a charge without a key where one is required",
            r,
            400,
            "invalid-idempotency-key",
        )
        .await;

    provoke_webhook_problems(&app, &mut provoked).await;
    (app, provoked)
}

/// The webhook endpoints' own: a loopback target on a server that refuses
/// them, and a 17th endpoint.
async fn provoke_webhook_problems(app: &TestApp, provoked: &mut Provoked) {
    use crate::webhook_endpoints::{endpoint_for, register};
    let strict = spawn_app_with(|s| s.demo = Some(false)).await;
    let loopback = json!({"url": "https://127.0.0.1/hook", "enabled_events": ["*"]});
    let r = register(&strict, None, &loopback).await;
    provoked
        .check(
            app,
            "a loopback webhook target",
            r,
            400,
            "webhook-target-not-allowed",
        )
        .await;
    let shop = app.as_account(SHOP_KEY);
    for _ in 0..16 {
        endpoint_for(&shop, &["*"]).await;
    }
    let r = register(
        &shop,
        None,
        &json!({"url": crate::webhook_endpoints::HOOK, "enabled_events": ["*"]}),
    )
    .await;
    provoked
        .check(
            app,
            "a 17th webhook endpoint",
            r,
            409,
            "webhook-endpoint-limit",
        )
        .await;
}

/// Lesson 8's receiver (the demo account's): an unsigned delivery, and a
/// signed one whose answer the receiver's fault `lose_answers` throws away.
async fn provoke_lesson8_receiver(app: &TestApp, provoked: &mut Provoked) {
    use charges::idempotency::webhook::{Secret, sign, unix_now};
    let demo = app.demo();
    let made = demo.post_as_self("/demo/lesson8/endpoint").await;
    assert_eq!(made.status, 201, "{}", made.body);
    let path = format!(
        "/demo/receivers/{}",
        made.json()["receiver_id"].as_str().unwrap()
    );
    let body = r#"{"id":"evt_p","object":"event","type":"charge.succeeded","data":{"object":{"id":"ch_p"}}}"#;
    let r = app.send(app.request(Method::POST, &path).body(body)).await;
    provoked
        .check(
            app,
            "an unsigned delivery to lesson 8's receiver",
            r,
            400,
            "webhook-not-verified",
        )
        .await;
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    let endpoint = made.json()["endpoint_id"].as_str().unwrap().to_owned();
    app.execute(&format!(
        "UPDATE webhook_endpoints SET secret = '{secret}' WHERE id = '{endpoint}'"
    ));
    let faults = json!({"lose_answers": 1, "inbox": true});
    let set = demo
        .send(
            demo.request(Method::PUT, "/demo/lesson8/faults")
                .bearer_auth(demo.api_key())
                .json(&faults),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let now = unix_now();
    let signature = sign(
        &Secret::parse(secret).unwrap(),
        "evt_p",
        now,
        body.as_bytes(),
    );
    let r = app
        .send(
            app.request(Method::POST, &path)
                .header("webhook-id", "evt_p")
                .header("webhook-timestamp", now.to_string())
                .header("webhook-signature", signature)
                .body(body),
        )
        .await;
    provoked
        .check(
            app,
            "lesson 8's receiver told to lose its answer",
            r,
            500,
            "simulated-lost-answer",
        )
        .await;
}
