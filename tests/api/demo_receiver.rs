//! Lesson 8's receiver (`POST /demo/receivers/{id}`), driven directly with
//! deliveries signed as the sender signs them (the crate's `sign`): the
//! inbox records an event once and its payment is applied once, a tampered
//! or stale delivery is refused with nothing recorded, and the sandbox's
//! faults (`lose_answers`, `inbox: false`) do what the lesson shows.

use std::time::Duration;

use charges::idempotency::webhook::{Secret, sign, unix_now};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{AppClient, Captured, TestApp, spawn_app_with};

/// A secret the test knows (the endpoint's own stays on the server).
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A sandbox with its lesson 8 endpoint, its secret set to [`SECRET`]:
/// (the sandbox, its receiver's path).
async fn receiver(app: &TestApp) -> (AppClient, String) {
    let sandbox = app.new_sandbox().await;
    let before = app.count("webhook_endpoints");
    let made = sandbox.post_as_self("/demo/lesson8/endpoint").await;
    assert_eq!(made.status, 201, "{}", made.body);
    let made = made.json();
    let again = sandbox.post_as_self("/demo/lesson8/endpoint").await;
    assert_eq!(again.status, 200, "made once per sandbox: {}", again.body);
    assert_eq!(again.json()["endpoint_id"], made["endpoint_id"]);
    let url = made["url"].as_str().unwrap();
    let receiver_id = made["receiver_id"].as_str().unwrap();
    assert!(
        url.ends_with(&format!("/demo/receivers/{receiver_id}")),
        "{url}"
    );
    assert_eq!(app.count("webhook_endpoints"), before + 1);
    let endpoint = made["endpoint_id"].as_str().unwrap();
    app.execute(&format!(
        "UPDATE webhook_endpoints SET secret = '{SECRET}' WHERE id = '{endpoint}'"
    ));
    (sandbox, format!("/demo/receivers/{receiver_id}"))
}

/// A `charge.succeeded` event's JSON for `charge`.
fn event(id: &str, charge: &str) -> String {
    json!({
        "id": id,
        "object": "event",
        "type": "charge.succeeded",
        "created_at": "2026-12-07T12:00:00.000000Z",
        "data": {"object": {"id": charge, "object": "charge", "amount": 500}},
    })
    .to_string()
}

/// Posts `body` to `path` with headers signed over `signed` at `timestamp`.
async fn deliver(
    app: &TestApp,
    path: &str,
    id: &str,
    timestamp: i64,
    signed: &str,
    body: &str,
) -> Captured {
    let secret = Secret::parse(SECRET).unwrap();
    let signature = sign(&secret, id, timestamp, signed.as_bytes());
    app.send(
        app.request(Method::POST, path)
            .header("content-type", "application/json")
            .header("webhook-id", id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_owned()),
    )
    .await
}

async fn deliver_now(app: &TestApp, path: &str, id: &str, body: &str) -> Captured {
    deliver(app, path, id, unix_now(), body, body).await
}

async fn view(sandbox: &AppClient) -> Value {
    let seen = sandbox
        .send(
            sandbox
                .request(Method::GET, "/demo/lesson8/receiver")
                .bearer_auth(sandbox.api_key()),
        )
        .await;
    assert_eq!(seen.status, 200, "{}", seen.body);
    seen.json()
}

/// How often the receiver applied `charge`'s payment (0: never).
async fn times_applied(sandbox: &AppClient, charge: &str) -> i64 {
    let seen = view(sandbox).await;
    seen["payments"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["charge_id"] == charge)
        .map_or(0, |p| p["times_applied"].as_i64().unwrap())
}

async fn inbox(sandbox: &AppClient) -> Vec<String> {
    let seen = view(sandbox).await;
    seen["inbox"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row["event_id"].as_str().unwrap().to_owned())
        .collect()
}

async fn set_faults(sandbox: &AppClient, faults: Value) {
    let set = sandbox
        .send(
            sandbox
                .request(Method::PUT, "/demo/lesson8/faults")
                .bearer_auth(sandbox.api_key())
                .json(&faults),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.json(), faults);
}

fn received(r: &Captured) -> String {
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["received"].as_str().unwrap().to_owned()
}

crate::on_both_backends! {
    /// A first delivery is recorded and applied; the same event again is a
    /// 2xx that does nothing.
    async fn the_inbox_records_an_event_once_and_a_redelivery_applies_nothing_again() {
        let app = spawn_app_with(|_| {}).await;
        let (sandbox, path) = receiver(&app).await;
        let body = event("evt_first", "ch_1");
        assert_eq!(received(&deliver_now(&app, &path, "evt_first", &body).await), "first");
        assert_eq!(received(&deliver_now(&app, &path, "evt_first", &body).await), "duplicate");
        assert_eq!(inbox(&sandbox).await, ["evt_first"]);
        assert_eq!(times_applied(&sandbox, "ch_1").await, 1);
    }

    /// A tampered body and a stale timestamp are 400 `webhook-not-verified`,
    /// and nothing of them is recorded or applied.
    async fn a_tampered_body_or_a_stale_timestamp_is_refused_with_nothing_recorded() {
        let app = spawn_app_with(|_| {}).await;
        let (sandbox, path) = receiver(&app).await;
        let signed = event("evt_t", "ch_1");
        let tampered = signed.replace("500", "50000");
        let refused = deliver(&app, &path, "evt_t", unix_now(), &signed, &tampered).await;
        refused.assert_problem(400, "webhook-not-verified");
        let stale = deliver(&app, &path, "evt_t", unix_now() - 6 * 60, &signed, &signed).await;
        stale.assert_problem(400, "webhook-not-verified");
        assert!(stale.body.contains("tolerance"), "{}", stale.body);
        let unsigned = app
            .send(app.request(Method::POST, &path).body(signed.clone()))
            .await;
        unsigned.assert_problem(400, "webhook-not-verified");
        assert!(inbox(&sandbox).await.is_empty());
        assert_eq!(times_applied(&sandbox, "ch_1").await, 0);
        assert_eq!(app.count("webhook_inbox"), 0);
        // The untouched delivery still verifies: it is the first.
        assert_eq!(received(&deliver_now(&app, &path, "evt_t", &signed).await), "first");
    }

    /// `lose_answers: 2`: two deliveries are recorded and applied, then
    /// answered 500; the retries are duplicates, applied once in all.
    async fn a_lost_answer_is_committed_and_its_retries_are_duplicates() {
        let app = spawn_app_with(|_| {}).await;
        let (sandbox, path) = receiver(&app).await;
        set_faults(&sandbox, json!({"lose_answers": 2, "inbox": true})).await;
        let body = event("evt_lost", "ch_2");
        let lost = deliver_now(&app, &path, "evt_lost", &body).await;
        lost.assert_problem(500, "simulated-lost-answer");
        assert_eq!(inbox(&sandbox).await, ["evt_lost"], "recorded before the answer was lost");
        assert_eq!(times_applied(&sandbox, "ch_2").await, 1);
        deliver_now(&app, &path, "evt_lost", &body).await.assert_problem(500, "simulated-lost-answer");
        assert_eq!(received(&deliver_now(&app, &path, "evt_lost", &body).await), "duplicate");
        assert_eq!(times_applied(&sandbox, "ch_2").await, 1);
        assert_eq!(view(&sandbox).await["receiver"]["lose_answers"], 0, "both were used");
    }

    /// `inbox: false`: every delivery applies the payment again.
    async fn without_the_inbox_a_redelivery_is_applied_twice() {
        let app = spawn_app_with(|_| {}).await;
        let (sandbox, path) = receiver(&app).await;
        set_faults(&sandbox, json!({"lose_answers": 0, "inbox": false})).await;
        let body = event("evt_twice", "ch_3");
        for _ in 0..2 {
            let r = deliver_now(&app, &path, "evt_twice", &body).await;
            assert_eq!(received(&r), "applied-without-inbox");
        }
        assert_eq!(times_applied(&sandbox, "ch_3").await, 2);
        assert!(inbox(&sandbox).await.is_empty());
        // Faults the lesson cannot use are refused.
        for bad in [json!({"lose_answers": 9, "inbox": true}), json!({"inbox": true}), json!({"lose_answers": 0, "inbox": true, "x": 1})] {
            let r = sandbox.send(sandbox.request(Method::PUT, "/demo/lesson8/faults").bearer_auth(sandbox.api_key()).json(&bad)).await;
            r.assert_problem(400, "invalid-request");
        }
    }

    /// A delivery signed for one sandbox is refused by another's receiver,
    /// which records nothing; an unknown receiver is a 404.
    async fn another_sandboxs_receiver_refuses_a_delivery_not_signed_for_it() {
        let app = spawn_app_with(|_| {}).await;
        let (a, a_path) = receiver(&app).await;
        let b = app.new_sandbox().await;
        let made = b.post_as_self("/demo/lesson8/endpoint").await;
        assert_eq!(made.status, 201, "{}", made.body);
        let b_path = format!("/demo/receivers/{}", made.json()["receiver_id"].as_str().unwrap());
        let body = event("evt_a", "ch_a");
        deliver_now(&app, &b_path, "evt_a", &body).await.assert_problem(400, "webhook-not-verified");
        assert!(inbox(&b).await.is_empty());
        assert_eq!(times_applied(&b, "ch_a").await, 0);
        deliver_now(&app, "/demo/receivers/rcv_nobody", "evt_a", &body).await.assert_problem(404, "not-found");
        // A's own receiver takes it; B's view shows none of A's rows.
        assert_eq!(received(&deliver_now(&app, &a_path, "evt_a", &body).await), "first");
        let seen = view(&b).await.to_string();
        assert!(!seen.contains("evt_a") && !seen.contains("ch_a"), "{seen}");
        assert_eq!(inbox(&a).await, ["evt_a"]);
    }

    /// Reset and the sandbox's expiry delete its receiver, its inbox rows,
    /// its applied payments and its endpoint.
    async fn a_sandboxs_receiver_rows_go_with_its_reset_and_its_expiry() {
        let app = spawn_app_with(|s| s.demo_sandbox_idle_expiry = Duration::from_secs(2)).await;
        let (sandbox, path) = receiver(&app).await;
        assert_eq!(received(&deliver_now(&app, &path, "evt_r", &event("evt_r", "ch_r")).await), "first");
        assert_eq!(sandbox.post_as_self("/demo/reset").await.status, 200);
        for table in ["webhook_inbox", "demo_payments_applied", "demo_receivers", "webhook_endpoints"] {
            assert_eq!(app.count(table), 0, "{table} kept a reset sandbox's rows");
        }
        let (gone, path) = receiver(&app).await;
        assert_eq!(received(&deliver_now(&app, &path, "evt_g", &event("evt_g", "ch_g")).await), "first");
        drop(gone);
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while app.count("demo_receivers") > 0 {
            assert!(std::time::Instant::now() < deadline, "the idle sandbox was not deleted");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        for table in ["webhook_inbox", "demo_payments_applied", "webhook_endpoints"] {
            assert_eq!(app.count(table), 0, "{table} kept a deleted sandbox's rows");
        }
    }
}
