//! Recovery finishes a key the way it was started (issue #38, finding 2):
//! a charge whose worker died during its card network call leaves its key
//! in progress, registered with that network. An instance without the
//! network leaves the key alone (and says so once) instead of completing it
//! as a charge with no authorization; an instance with the same network
//! finishes it, authorized once. Real processes, killed with SIGKILL; the
//! test account's request.

use std::time::{Duration, Instant};

use crate::support::{ServerProcess, TestDatabase, charge_body};

/// A lease as short as the network's timeout and the pool's allow.
const FAST: &[(&str, &str)] = &[
    ("NETWORK_TIMEOUT", "2s"),
    ("POOL_TIMEOUT", "1s"),
    ("IDEMPOTENCY_LEASE", "4s"),
    ("RECOVERY_INTERVAL", "300ms"),
];

fn start(db: &TestDatabase, name: &str, env: &[(&str, &str)]) -> ServerProcess {
    let env: Vec<(&str, &str)> = FAST.iter().chain(env).copied().collect();
    ServerProcess::try_start_with(name, &["serve"], &db.url, &env).unwrap_or_else(|e| panic!("{e}"))
}

/// The key row's status and, once completed, its charge's authorization.
fn key_state(db: &TestDatabase) -> (String, Option<String>) {
    let status = db.strings("SELECT status AS value FROM idempotency_keys");
    let authorized =
        db.strings("SELECT coalesce(CAST(authorization_id AS TEXT), 'none') AS value FROM charges");
    (status.concat(), authorized.first().cloned())
}

crate::on_both_backends! {
    async fn a_key_left_during_the_network_call_is_finished_only_through_that_network() {
        let (db, ledger) = (TestDatabase::create(), TestDatabase::create());
        let network: &[(&str, &str)] = &[
            ("NETWORK_URL", "in-process"),
            ("NETWORK_DATABASE_URL", &ledger.url),
        ];
        // 1. The first instance dies while the network thinks.
        let slow: Vec<(&str, &str)> = network.iter().copied().chain([("NETWORK_LATENCY", "1500ms"), ("RECOVERY_INTERVAL", "0s")]).collect();
        let mut first = start(&db, "with the network", &slow);
        db.create_test_account();
        let api = first.client();
        let request = api.charge_request(crate::support::TEST_KEY, "k-stuck", &charge_body(), &[]);
        let sent = tokio::spawn(async move { api.try_send(request).await });
        let deadline = Instant::now() + Duration::from_secs(5);
        while key_state(&db).0 != "in_progress" {
            assert!(Instant::now() < deadline, "the key was never registered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        first.kill();
        assert!(sent.await.unwrap().is_err(), "no answer from a killed server");
        // 2. An instance without a network: past the lease and several
        //    passes, the key is still in progress, and it said why.
        let without = start(&db, "without a network", &[("NETWORK_URL", "off")]);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(key_state(&db), ("in_progress".to_owned(), None), "never a charge without its authorization");
        let said = without.logs().matches("left for an instance that does").count();
        assert_eq!(said, 1, "said once: {}", without.logs());
        // 3. An instance with the same network finishes it, authorized.
        let with = start(&db, "with the network again", network);
        let deadline = Instant::now() + Duration::from_secs(10);
        while key_state(&db).0 != "completed" {
            assert!(Instant::now() < deadline, "never recovered: {}", with.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (_, authorized) = key_state(&db);
        assert!(authorized.is_some_and(|a| a != "none"), "the charge holds its authorization");
        assert_eq!(ledger.count("authorizations"), 1, "authorized once");
        let retry = with.client().charge("k-stuck", &charge_body()).await;
        assert!(retry.replayed(), "{}", retry.body);
        drop(without);
    }
}

/// `n` rows stuck in progress for `account` (their lease over `ago`
/// seconds ago), as dead workers leave them: the request each was for kept.
fn stuck_rows(app: &crate::support::TestApp, account: i64, prefix: &str, n: i64, ago: i64) {
    let series = match app.backend() {
        crate::support::TestBackend::Postgres => format!("generate_series(1, {n}) AS s(i)"),
        crate::support::TestBackend::Sqlite => format!(
            "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) SELECT i FROM s) AS s"
        ),
    };
    let token = match app.backend() {
        crate::support::TestBackend::Postgres => "gen_random_uuid()",
        crate::support::TestBackend::Sqlite => "lower(hex(randomblob(16)))",
    };
    app.execute(&format!(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, \
         locked_until, lease_token, request_path, request_body) \
         SELECT {account}, '{prefix}-' || s.i, 'sha256:stuck', 'in_progress', {now}, {tomorrow}, {past}, \
         {token}, '/charges', '{{\"amount\": 100, \"currency\": \"jpy\"}}' FROM {series}",
        now = app.at(0),
        tomorrow = app.at(86_400),
        past = app.at(-ago),
    ));
}

crate::on_both_backends! {
    /// Recovery is fair across accounts (issue #38, finding 5): with 1 000
    /// of one account's keys stuck longer (a flood the public demo key can
    /// make), another account's stuck key is finished in the first pass,
    /// not after ten passes of the flood.
    async fn one_account_s_flood_of_stuck_keys_does_not_delay_another_account_s() {
        let interval = Duration::from_secs(2);
        let app = crate::support::spawn_app_with(|s| s.recovery_interval = interval).await;
        let flooder = app.create_account("Flooder", "sk_live_flooder");
        let test = app.db.strings(&format!(
            "SELECT CAST(id AS TEXT) AS value FROM accounts WHERE name = '{}'",
            crate::support::TEST_ACCOUNT
        ));
        let test: i64 = test[0].parse().unwrap();
        stuck_rows(&app, flooder, "flood", 1000, 3600);
        stuck_rows(&app, test, "mine", 1, 60);
        let started = Instant::now();
        let mine = "idempotency_keys WHERE key = 'mine-1' AND status = 'completed'";
        while app.count(mine) == 0 {
            assert!(
                started.elapsed() < interval * 2 + Duration::from_secs(1),
                "another account's stuck key waited behind the flood: {} of 1000 done",
                app.count("idempotency_keys WHERE key LIKE 'flood-%' AND status = 'completed'")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The body of an operation's request, from the contract's examples (each
/// required member's first example).
fn example_body(document: &serde_json::Value, operation: &serde_json::Value) -> serde_json::Value {
    let reference = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        .as_str()
        .expect("a keyed operation takes a JSON body");
    let name = reference.rsplit('/').next().unwrap();
    let schema = &document["components"]["schemas"][name];
    let mut body = serde_json::Map::new();
    // A body with no required member (a rotation's) is `{}`.
    for member in schema["required"].as_array().into_iter().flatten() {
        let member = member.as_str().unwrap();
        let example = schema["properties"][member]["examples"][0].clone();
        assert!(!example.is_null(), "{name}.{member} has an example");
        body.insert(member.to_owned(), example);
    }
    serde_json::Value::Object(body)
}

/// Every keyed route the application serves (each operation of the
/// OpenAPI document that takes an `Idempotency-Key`) is one the recovery
/// task can rebuild: a request of each, left stuck in progress by a dead
/// worker, is finished with its operation's own answer, not closed with
/// `request-not-recoverable` (issue #40: a keyed route added without
/// teaching recovery fails here, not a customer).
#[tokio::test]
async fn the_recovery_task_rebuilds_every_keyed_route_the_api_serves() {
    let app =
        crate::support::spawn_app_with(|s| s.recovery_interval = Duration::from_millis(300)).await;
    let document = app.get_json("/openapi.json").await;
    let charge = app.charge("k-for-the-routes", &charge_body()).await;
    assert_eq!(charge.status, 201, "{}", charge.body);
    let charge_id = charge.charge_id().to_string();
    let endpoint_id = crate::webhook_endpoints::endpoint_for(&app, &["*"]).await;
    let test = app.db.strings(&format!(
        "SELECT CAST(id AS TEXT) AS value FROM accounts WHERE name = '{}'",
        crate::support::TEST_ACCOUNT
    ))[0]
        .parse::<i64>()
        .unwrap();
    let mut keyed = Vec::new();
    for (path, operations) in document["paths"].as_object().unwrap() {
        for (method, operation) in operations.as_object().unwrap() {
            let keyed_route = operation["parameters"]
                .as_array()
                .is_some_and(|p| p.iter().any(|p| p["name"] == "Idempotency-Key"));
            if !keyed_route {
                continue;
            }
            assert_eq!(method, "post", "{path}: a keyed write is a POST");
            // A route on an endpoint names one of the account's.
            let id = match path.starts_with("/webhook_endpoints/") {
                true => &endpoint_id,
                false => &charge_id,
            };
            let route = path.replace("{id}", id);
            let body = example_body(&document, operation);
            let key = format!("k-route-{}", keyed.len());
            let fingerprint = charges::idempotency::Fingerprint::of("POST", &route, &body);
            app.execute(&format!(
                "INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, \
                 locked_until, lease_token, request_path, request_body) \
                 VALUES ({test}, '{key}', '{}', 'in_progress', {}, {}, {}, '{}', '{route}', '{body}')",
                fingerprint.as_str(),
                app.at(-10),
                app.at(86_400),
                app.at(-1),
                uuid::Uuid::new_v4(),
            ));
            keyed.push((key, route, body));
        }
    }
    assert!(
        keyed.len() >= 2,
        "POST /charges and its refunds at least: {keyed:?}"
    );
    let started = Instant::now();
    for (key, route, body) in &keyed {
        let done = format!("idempotency_keys WHERE key = '{key}' AND status = 'completed'");
        while app.count(&done) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{route} was never finished"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let answered = app.count(&format!("{done} AND response_status BETWEEN 200 AND 299"));
        assert_eq!(
            answered, 1,
            "{route} was rebuilt and run, not closed as not recoverable"
        );
        // The client's retry replays what recovery stored.
        let retry = app
            .send(app.write_request(
                reqwest::Method::POST,
                route,
                crate::support::TEST_KEY,
                key.as_str(),
                body,
                &[],
            ))
            .await;
        assert!(retry.replayed(), "{route}: {}", retry.body);
    }
}
