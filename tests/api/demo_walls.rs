//! The demo's walls: demo mode is on only when the operator says so, never
//! by a request's headers; the demo's routes refuse cross-site POSTs; the
//! demo waiting on its own locks holds none of the server's connections; and
//! the demo's view shows the demo's rows only, the card network's ledger
//! included.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::network_keys::demo_with_network;
use crate::support::{
    AppClient, DEMO_KEY, TestBackend, TestDatabase, charge_body, spawn_app, spawn_app_with,
};

const SHOP_KEY: &str = "sk_live_shop_for_demo_wall_tests";

/// How long `DEMO_KEY`-less `POST /charges` of another account takes, the
/// slowest of `n` one after another.
async fn slowest_charge(client: &AppClient, n: usize) -> (Duration, Vec<u16>) {
    let mut slowest = Duration::ZERO;
    let mut statuses = Vec::new();
    for _ in 0..n {
        let started = Instant::now();
        let r = client.charge_as(SHOP_KEY, None, &charge_body(), &[]).await;
        slowest = slowest.max(started.elapsed());
        statuses.push(r.status);
    }
    (slowest, statuses)
}

crate::on_both_backends! {
    /// The attack of issue #24: a key held by the demo's delayed takeover,
    /// and a dozen `/demo/keys/{key}/expire` waiting on its lock. They wait
    /// on the demo's own connections; another account's requests do not.
    async fn the_demo_waiting_on_its_own_locks_holds_none_of_the_servers_connections() {
        let app = spawn_app_with(|s| {
            s.pool_size = 10;
            s.pool_timeout = Duration::from_secs(2);
        })
        .await;
        app.create_account("Shop", SHOP_KEY);
        let body = charge_body();
        assert_eq!(app.demo().charge("k-held", &body).await.status, 201);
        app.post("/demo/keys/k-held/expire").await;
        let (before, _) = slowest_charge(&app, 5).await;
        // The takeover holds the key's row (and, on SQLite, the write lock)
        // for 6 s.
        let held = app.demo().charge_with("k-held", &body, &[("demo-fault", "delay-commit=6000")]);
        let attack = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            futures::future::join_all((0..12).map(|_| app.post("/demo/keys/k-held/expire"))).await
        };
        let other = async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            let started = Instant::now();
            let list = app.get_as(SHOP_KEY, "/charges").await;
            let read = started.elapsed();
            let (write, statuses) = slowest_charge(&app, 3).await;
            (list.status, read, write, statuses)
        };
        let (held, _, (list, read, write, statuses)) = tokio::join!(held, attack, other);
        assert_eq!(held.status, 201, "{}", held.body);
        assert_eq!(list, 200);
        assert!(read < Duration::from_secs(1), "another account's read took {read:?}");
        assert!(statuses.iter().all(|s| *s == 201), "{statuses:?}");
        match app.backend() {
            // Only the key's row is held: another account writes at once.
            TestBackend::Postgres => {
                assert!(write < Duration::from_secs(1), "another account's write took {write:?}")
            }
            // The write lock is every account's: a write waits for the one
            // hold (at most 6 s here), and is not refused.
            TestBackend::Sqlite => {
                assert!(write < Duration::from_secs(7), "another account's write took {write:?}")
            }
        }
        eprintln!(
            "{:?}: another account's charge before the attack {before:?}; during it: GET /charges {read:?}, POST /charges (slowest of 3) {write:?}",
            app.backend()
        );
    }

    async fn demo_mode_is_the_operators_choice_and_no_request_header_changes_it() {
        // Without DEMO (as `charges serve`): no demo, asked directly from this
        // machine's loopback with no forwarding header at all, as a bare
        // proxy_pass asks.
        let off = spawn_app_with(|s| s.demo = None).await;
        off.create_account("Shop", SHOP_KEY);
        let send = |app: &crate::support::TestApp, method: Method, path: &str, headers: &[(&str, &str)]| {
            let mut r = app.request(method, path);
            for (name, value) in headers {
                r = r.header(*name, *value);
            }
            r
        };
        let variants: [&[(&str, &str)]; 5] = [
            &[],
            &[("host", "127.0.0.1")],
            &[("via", "1.1 proxy")],
            &[("true-client-ip", "127.0.0.1")],
            &[("x-forwarded-server", "localhost")],
        ];
        for headers in variants {
            off.send(send(&off, Method::POST, "/demo/reset", headers))
                .await
                .assert_problem(404, "not-found");
            off.send(send(&off, Method::GET, "/demo/state", headers))
                .await
                .assert_problem(404, "not-found");
            assert_eq!(off.send(send(&off, Method::GET, "/", headers)).await.status, 404);
            off.send(send(&off, Method::GET, "/charges", headers).bearer_auth(DEMO_KEY))
                .await
                .assert_problem(401, "unauthorized");
            let doc = off.send(send(&off, Method::GET, "/openapi.json", headers)).await;
            assert!(!doc.body.contains("/demo/") && !doc.body.contains(DEMO_KEY), "the document shows the demo");
        }
        // Another account's Demo-* headers are ignored, as without demo mode.
        let r = off
            .send(off.charge_request(SHOP_KEY, "k-fwd", &charge_body(), &[("demo-fault", "lose-response")]))
            .await;
        assert_eq!(r.status, 201, "{}", r.body);
        // DEMO=true is the operator's say-so: whatever the request carries.
        // (A Host it does not know is a 421: demo mode answers only this
        // machine's names and ALLOWED_HOSTS, issue #38.)
        let told = spawn_app_with(|s| {
            s.demo = Some(true);
            s.allowed_hosts = vec!["api.example.com".to_owned()];
        })
        .await;
        for headers in [&[][..], &[("x-forwarded-for", "203.0.113.7")][..], &[("host", "api.example.com")][..]] {
            assert_eq!(told.send(send(&told, Method::GET, "/demo/state", headers)).await.status, 200);
        }
    }

    async fn a_cross_site_post_to_the_demo_is_refused_and_a_same_origin_one_is_not() {
        let app = spawn_app().await;
        app.demo().charge("k-stays", &charge_body()).await;
        let post = |headers: &[(&str, &str)]| {
            let mut r = app.request(Method::POST, "/demo/reset");
            for (name, value) in headers {
                r = r.header(*name, *value);
            }
            r
        };
        for headers in [
            &[("origin", "https://elsewhere.example"), ("sec-fetch-site", "cross-site")][..],
            &[("origin", "https://elsewhere.example")][..],
            &[("sec-fetch-site", "same-site")][..],
        ] {
            app.send(post(headers))
                .await
                .assert_problem(403, "cross-site-request");
        }
        assert_eq!(app.charges(), 1, "nothing was reset");
        let origin = app.address.clone();
        let same = app
            .send(post(&[("origin", &origin), ("sec-fetch-site", "same-origin")]))
            .await;
        assert_eq!(same.status, 200, "{}", same.body);
        assert_eq!(app.charges(), 0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_s_view_holds_no_other_account_s_authorization() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let server = demo_with_network(&db, &network);
    db.create_account("Shop", SHOP_KEY);
    let app = server.client();
    let theirs = app
        .charge_as(
            SHOP_KEY,
            "k-shop",
            &json!({"amount": 4242, "currency": "chf"}),
            &[],
        )
        .await;
    assert_eq!(theirs.status, 201, "{}", theirs.body);
    let theirs = theirs.json()["authorization_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let ours = app
        .demo()
        .charge("k-demo", &json!({"amount": 100, "currency": "jpy"}))
        .await;
    assert_eq!(ours.status, 201, "{}", ours.body);
    let ours = ours.json()["authorization_id"].as_str().unwrap().to_owned();
    // Lesson 7's orphan: the network authorized under a key of its own and
    // its answer was lost, so no charge of ours names it; the demo's view
    // still shows it, as the demo's.
    let orphaned = app
        .demo()
        .charge_with(
            "k-orphan",
            &json!({"amount": 7, "currency": "jpy"}),
            &[("demo-fault", "network-fresh-key, network-lose-answer")],
        )
        .await;
    assert_eq!(orphaned.status, 503, "{}", orphaned.body);
    assert_eq!(network.count("authorizations"), 3);

    let state = app.demo().get_json("/demo/state").await;
    let shown: Vec<&str> = state["network"]["authorizations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    assert_eq!(shown.len(), 2, "ours and the orphan: {shown:?}");
    assert!(shown.contains(&ours.as_str()), "{shown:?}");
    for answer in [
        state.to_string(),
        app.get("/demo/config").await.body,
        app.post("/demo/purge").await.body,
        app.post("/demo/reset").await.body,
    ] {
        assert!(
            !answer.contains(&theirs),
            "another account's authorization: {answer}"
        );
        assert!(
            !answer.contains("4242"),
            "another account's charge: {answer}"
        );
    }
}
