//! The demo's card network by request, and what the page is shown of a
//! wait (issue #37): on a server without NETWORK_URL, the demo account's
//! charges are the article's one transaction unless a request asks for the
//! network (`Demo-Network: on`, or a network fault), and `/demo/state`
//! shows what a waiting duplicate waits on, as the database tells it.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{TestApp, TestBackend, charge_body, spawn_app, spawn_app_with};

const ON: &[(&str, &str)] = &[("demo-network", "on")];

/// Waits (bounded) until the demo's key row `key` is completed; its row.
async fn until_completed(app: &TestApp, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let state = app.demo().get_json("/demo/state").await;
        let row = state["idempotency_keys"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["key"] == key)
            .cloned();
        if let Some(row) = row.filter(|r| r["status"] == "completed") {
            return row;
        }
        assert!(Instant::now() < deadline, "{key} never completed: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

crate::on_both_backends! {
    /// Without NETWORK_URL a demo charge has no authorization; with
    /// `Demo-Network: on` it is authorized at the demo's own network, whose
    /// ledger `/demo/state` shows (and no address of it anywhere).
    async fn the_demo_s_charges_ask_the_network_only_when_they_say_so() {
        let app = spawn_app().await;
        let config = app.demo().get_json("/demo/config").await;
        assert_eq!(config["network"], "sandbox");
        let plain = app.demo().charge("k-plain", &charge_body()).await;
        assert_eq!(plain.status, 201, "{}", plain.body);
        assert_eq!(plain.json()["authorization_id"], Value::Null);
        let asked = app.demo().charge_with("k-net", &charge_body(), ON).await;
        assert_eq!(asked.status, 201, "{}", asked.body);
        let authorization = asked.json()["authorization_id"].clone();
        assert!(authorization.is_string(), "{}", asked.body);
        let state = app.demo().get_json("/demo/state").await;
        let ledger = state["network"]["authorizations"].as_array().unwrap().clone();
        assert_eq!(ledger.len(), 1, "{state}");
        assert_eq!(ledger[0]["id"], authorization);
        let shown = format!("{config}{state}");
        assert!(!shown.contains("127.0.0.1"), "no network address is published: {shown}");
        let wrong = app.demo().charge_with("k-bad", &charge_body(), &[("demo-network", "yes")]).await;
        wrong.assert_problem(400, "invalid-request");
        // Another account's Demo-* header is refused as ever.
        let other = app.charge_with("k-other", &charge_body(), ON).await;
        other.assert_problem(400, "demo-account-only");
        assert_eq!(app.charges(), 2);
    }

    /// Recovery finishes each abandoned key-first request as it was
    /// registered: lesson 6's without the network (no authorization),
    /// lesson 7's through the demo's own network (authorized, once).
    async fn recovery_finishes_each_stuck_demo_key_with_the_network_it_was_registered_with() {
        let app = spawn_app_with(|s| s.recovery_interval = Duration::from_millis(300)).await;
        let abandon = |network: bool| {
            let mut headers = vec![
                ("demo-mode", "key-first"),
                ("demo-fault", if network { "abandon-after-network, lease=1000" } else { "abandon, lease=1000" }),
            ];
            if network {
                headers.push(("demo-network", "on"));
            }
            headers
        };
        let lost = app.demo().charge_with("k-lesson6", &charge_body(), &abandon(false)).await;
        assert_eq!(lost.status, 504, "{}", lost.body);
        let lost = app.demo().charge_with("k-lesson7", &charge_body(), &abandon(true)).await;
        assert_eq!(lost.status, 504, "{}", lost.body);
        let six = until_completed(&app, "k-lesson6").await;
        let seven = until_completed(&app, "k-lesson7").await;
        let state = app.demo().get_json("/demo/state").await;
        let charge = |row: &Value| {
            state["charges"].as_array().unwrap().iter().find(|c| c["id"] == row["charge_id"]).cloned().unwrap()
        };
        assert_eq!(charge(&six)["authorization_id"], Value::Null, "{state}");
        assert!(charge(&seven)["authorization_id"].is_string(), "{state}");
        assert_eq!(state["network"]["authorizations"].as_array().unwrap().len(), 1, "{state}");
        let retry = app.demo().charge_with("k-lesson7", &charge_body(), ON).await;
        assert!(retry.replayed(), "{}", retry.body);
    }

    /// While a duplicate waits for the first request's held transaction,
    /// `/demo/state` shows no key row (the first's is not committed) and
    /// what the duplicate waits on: on PostgreSQL its session's lock, not
    /// granted, on the first's transaction; on SQLite, the write lock held.
    async fn the_demo_state_shows_a_duplicate_waiting_on_the_first_ones_lock() {
        let app = spawn_app().await;
        let held = app.demo().charge_with("k-held", &charge_body(), &[("demo-fault", "delay-commit=2500")]);
        let first = tokio::spawn(held);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let second = tokio::spawn(app.demo().charge("k-held", &charge_body()));
        let deadline = Instant::now() + Duration::from_secs(2);
        let state = loop {
            let state = app.demo().get_json("/demo/state").await;
            assert_eq!(state["idempotency_keys"], serde_json::json!([]), "never an uncommitted row: {state}");
            let locks = &state["locks"];
            let seen = match app.backend() {
                TestBackend::Postgres => locks["waiting"].as_array().is_some_and(|w| !w.is_empty()),
                TestBackend::Sqlite => locks["write_lock_held"] == true,
            };
            if seen {
                break state;
            }
            assert!(Instant::now() < deadline, "no wait shown: {state}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let locks = &state["locks"];
        if app.backend() == TestBackend::Postgres {
            let wait = &locks["waiting"][0];
            assert_eq!(wait["wait_event_type"], "Lock", "{locks}");
            assert_eq!(wait["lock_type"], "transactionid", "{locks}");
            assert!(wait["query"].as_str().unwrap().starts_with("INSERT INTO \"idempotency_keys\""), "{locks}");
            assert_eq!(wait["blocked_by"][0]["state"], "idle in transaction", "{locks}");
            assert_eq!(locks["write_lock_held"], Value::Null);
        } else {
            assert_eq!(locks["waiting"], serde_json::json!([]));
        }
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        assert_eq!(first.status, 201, "{}", first.body);
        assert!(second.replayed(), "{}", second.body);
        let after = app.demo().get_json("/demo/state").await;
        assert_eq!(after["locks"]["waiting"], serde_json::json!([]));
        if app.backend() == TestBackend::Sqlite {
            assert_eq!(after["locks"]["write_lock_held"], false);
        }
    }
}
