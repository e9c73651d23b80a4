//! The charge reaches the card network (issue #22): an in-process network on
//! a database of its own, and the experiments of lesson 7, checked at both
//! ledgers: our charges, and the network's authorizations.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{DEMO_KEY, TestApp, TestDatabase, charge_body, spawn_app_with};

/// The merchant key a test that calls the network itself gives the API (the
/// in-process network otherwise takes a random one per process).
const NETWORK_KEY: &str = "sk_network_of_the_network_tests";

/// An app whose charges go through an in-process network on `network`.
async fn with_network(network: &TestDatabase, lease: Option<Duration>) -> TestApp {
    with_network_keyed(network, lease, None).await
}

async fn with_network_keyed(
    network: &TestDatabase,
    lease: Option<Duration>,
    key: Option<&str>,
) -> TestApp {
    let url = network.url.clone();
    let key = key.map(str::to_owned);
    spawn_app_with(move |s| {
        if let Some(key) = key {
            s.network_api_key = key;
        }
        s.network_url = charges::config::NETWORK_IN_PROCESS.to_owned();
        s.network_database_url = Some(url);
        s.recovery_interval = Duration::from_millis(300);
        if let Some(lease) = lease {
            s.idempotency_lease = lease;
        }
    })
    .await
}

fn authorizations(network: &TestDatabase) -> i64 {
    network.count("authorizations")
}

/// Every charge's authorization is one the network has, each used once,
/// and every authorization has its charge: nothing orphaned.
fn assert_ledgers_agree(app: &TestApp, network: &TestDatabase, state: &Value) {
    let charges = state["charges"].as_array().unwrap();
    let auths = state["network"]["authorizations"].as_array().unwrap();
    let mut held: Vec<&str> = charges
        .iter()
        .map(|c| c["authorization_id"].as_str().expect("an authorization"))
        .collect();
    held.sort();
    let mut granted: Vec<&str> = auths.iter().map(|a| a["id"].as_str().unwrap()).collect();
    granted.sort();
    assert_eq!(held, granted, "charges and authorizations are one to one");
    assert_eq!(app.charges(), authorizations(network));
}

crate::on_both_backends! {
    async fn a_keyed_charge_is_authorized_once_and_its_retry_replays_the_authorization() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        let first = app.demo().charge("k-net", &charge_body()).await;
        assert_eq!(first.status, 201, "{}", first.body);
        let auth = first.json()["authorization_id"].as_str().unwrap().to_owned();
        let again = app.demo().charge("k-net", &charge_body()).await;
        assert!(again.replayed());
        assert_eq!(again.json()["authorization_id"], auth.as_str());
        assert_eq!(authorizations(&network), 1);
        let state = app.demo().get_json("/demo/state").await;
        assert_eq!(state["network"]["authorizations"][0]["id"], auth.as_str());
        assert_ledgers_agree(&app, &network, &state);
        let config = app.demo().get_json("/demo/config").await;
        assert_eq!(config["network"], "server", "its address is not published");
    }

    async fn the_networks_answer_lost_and_our_retry_with_the_derived_key_makes_one_authorization() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        let lost = app
            .demo()
            .charge_with("k-lost-answer", &charge_body(), &[("demo-fault", "network-lose-answer")])
            .await;
        lost.assert_problem(503, "network-unavailable");
        assert_eq!(lost.header("retry-after"), Some("1"));
        // The network authorized; we stored nothing, and the key is free.
        assert_eq!((authorizations(&network), app.charges(), app.keys()), (1, 0, 0));
        let retry = app.demo().charge("k-lost-answer", &charge_body()).await;
        assert_eq!(retry.status, 201);
        assert!(!retry.replayed(), "a first run for us");
        // ... and a replay at the network: still one authorization.
        assert_eq!(authorizations(&network), 1);
        assert_ledgers_agree(&app, &network, &app.demo().get_json("/demo/state").await);
    }

    async fn a_key_reused_after_a_lost_network_answer_is_a_422_and_the_first_request_still_completes() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        let first = json!({"amount": 1000, "currency": "jpy"});
        let lost = app
            .demo()
            .charge_with("k-reused", &first, &[("demo-fault", "network-lose-answer")])
            .await;
        lost.assert_problem(503, "network-unavailable");
        // Only the network saw the first use; the same key with another
        // body is the client's mistake, as it would be here.
        let other = app
            .demo()
            .charge("k-reused", &json!({"amount": 2000, "currency": "jpy"}))
            .await;
        other.assert_problem(422, "idempotency-key-reused");
        assert!(other.json()["detail"].as_str().unwrap().contains("card network"));
        assert_eq!((app.charges(), app.keys()), (0, 0));
        // Nothing was stored under the key: the first request's retry completes it.
        let retry = app.demo().charge("k-reused", &first).await;
        assert_eq!(retry.status, 201, "{}", retry.body);
        assert_eq!((app.charges(), authorizations(&network)), (1, 1));
    }

    async fn without_passing_the_key_on_the_network_authorizes_twice_for_our_one_charge() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        let fresh = ("demo-fault", "network-fresh-key, network-lose-answer");
        let lost = app.demo().charge_with("k-not-passed", &charge_body(), &[fresh]).await;
        lost.assert_problem(503, "network-unavailable");
        // The detail's promise of the derived key is taken back under this fault.
        let detail = lost.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("did not pass your key on"), "{detail}");
        let retry = app
            .demo()
            .charge_with("k-not-passed", &charge_body(), &[("demo-fault", "network-fresh-key")])
            .await;
        assert_eq!(retry.status, 201);
        // One charge here, two authorizations there: one is orphaned.
        assert_eq!((app.charges(), authorizations(&network)), (1, 2));
    }

    async fn a_keyless_retry_is_authorized_again_at_the_network_too() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        let lost = app
            .demo()
            .charge_with(None, &charge_body(), &[("demo-fault", "lose-response")])
            .await;
        lost.assert_problem(504, "simulated-lost-response");
        assert_eq!(app.demo().charge(None, &charge_body()).await.status, 201);
        assert_eq!((app.charges(), authorizations(&network)), (2, 2));
        assert_ledgers_agree(&app, &network, &app.demo().get_json("/demo/state").await);
    }

    async fn a_network_that_is_down_is_a_503_that_stores_nothing_and_frees_the_key() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        for mode in ["atomic", "key-first"] {
            let key = format!("k-down-{mode}");
            let down = app
                .demo()
                .charge_with(key.as_str(), &charge_body(), &[("demo-fault", "network-down"), ("demo-mode", mode)])
                .await;
            down.assert_problem(503, "network-unavailable");
            assert_eq!(app.count(&format!("idempotency_keys WHERE key = '{key}'")), 0, "{mode}");
            assert_eq!(app.demo().charge(key.as_str(), &charge_body()).await.status, 201, "{mode}");
        }
        assert_eq!((app.charges(), authorizations(&network)), (2, 2));
    }

    async fn a_slow_network_holds_the_key_and_a_concurrent_duplicate_waits_for_it() {
        let network = TestDatabase::create();
        let app = with_network(&network, None).await;
        let first = app.demo().charge_with("k-slow-net", &charge_body(), &[("demo-fault", "network-delay=1500")]);
        let duplicate = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            app.demo().charge("k-slow-net", &charge_body()).await
        };
        let (first, duplicate) = tokio::join!(first, duplicate);
        assert_eq!(first.status, 201);
        assert_eq!(duplicate.status, 201);
        assert!(duplicate.replayed());
        assert_eq!(duplicate.body, first.body);
        assert_eq!((app.charges(), authorizations(&network)), (1, 1));
    }

    async fn a_key_first_request_abandoned_after_the_network_is_recovered_and_its_retry_replays() {
        let network = TestDatabase::create();
        let app = with_network(&network, Some(Duration::from_secs(30))).await;
        let key_first = ("demo-mode", "key-first");
        let abandoned = app
            .demo()
            .charge_with(
                "k-abandoned-net",
                &charge_body(),
                // Long enough for the two checks below to see it in progress
                // on a loaded machine (the recovery task runs every 300 ms).
                &[key_first, ("demo-fault", "abandon-after-network, lease=4000")],
            )
            .await;
        abandoned.assert_problem(504, "simulated-lost-response");
        // Half done: the key in progress, an authorization, no charge.
        assert_eq!(
            app.count("idempotency_keys WHERE key = 'k-abandoned-net' AND status = 'in_progress'"),
            1
        );
        assert_eq!((authorizations(&network), app.charges()), (1, 0));
        app.demo().charge_with("k-abandoned-net", &charge_body(), &[key_first])
            .await
            .assert_problem(409, "idempotency-key-in-flight");
        // After the lease, the recovery task finishes it (no client needed).
        let mut waited = Duration::ZERO;
        while app.charges() == 0 {
            assert!(waited < Duration::from_secs(10), "never recovered");
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += Duration::from_millis(100);
        }
        let replay = app.demo().charge_with("k-abandoned-net", &charge_body(), &[key_first]).await;
        assert_eq!(replay.status, 201);
        assert!(replay.replayed(), "the recovered charge, replayed");
        assert_eq!((app.charges(), authorizations(&network)), (1, 1), "no orphaned authorization");
        assert_ledgers_agree(&app, &network, &app.demo().get_json("/demo/state").await);
        // (The registry is the process's: other tests' recoveries count too.)
        let metrics = app.metrics().await;
        let recovered: u64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix(r#"idempotency_keys_recovered_total{result="completed"} "#))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(recovered >= 1, "{metrics}");
    }

    async fn the_network_puts_its_own_endpoint_under_the_same_protocol() {
        let network = TestDatabase::create();
        let app = with_network_keyed(&network, None, Some(NETWORK_KEY)).await;
        let url = app.network_url.clone().expect("the in-process network");
        let http = reqwest::Client::new();
        let authorize = |key: Option<&str>, amount: i64| {
            let mut r = http
                .post(format!("{url}/authorizations"))
                .bearer_auth(NETWORK_KEY)
                .json(&json!({"amount": amount, "currency": "jpy"}));
            if let Some(key) = key {
                r = r.header("idempotency-key", format!("\"{key}\""));
            }
            r.send()
        };
        let first = authorize(Some("n-1"), 100).await.unwrap();
        assert_eq!(first.status(), 201);
        let id = first.json::<Value>().await.unwrap()["id"].clone();
        let again = authorize(Some("n-1"), 100).await.unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "true");
        assert_eq!(again.json::<Value>().await.unwrap()["id"], id);
        assert_eq!(authorize(Some("n-1"), 200).await.unwrap().status(), 422);
        assert_eq!(authorize(None, 100).await.unwrap().status(), 400, "a key is required");
        let unknown = http
            .post(format!("{url}/authorizations"))
            .bearer_auth(DEMO_KEY)
            .header("idempotency-key", "\"n-2\"")
            .json(&json!({"amount": 1, "currency": "jpy"}))
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status(), 401, "the demo key is no merchant's");
        let public = http
            .get(format!("{url}/authorizations"))
            .bearer_auth(charges::config::DEFAULT_NETWORK_API_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(public.status(), 401, "nor the well-known default");
        let got = http
            .get(format!("{url}/authorizations/{}", id.as_str().unwrap()))
            .bearer_auth(NETWORK_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(got.status(), 200);
        assert_eq!(authorizations(&network), 1);
    }
}
