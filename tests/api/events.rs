//! Events (#48): written in the transaction of the charge or refund they
//! describe (on PostgreSQL the two rows have one `xmin`), never without it
//! (a rolled-back charge leaves none), with a pending delivery for each
//! enabled endpoint subscribed to their type; and `GET /events`,
//! `GET /events/{id}`, paged and scoped like the charges.

use serde_json::{Value, json};

use crate::support::{DEMO_KEY, TestBackend, charge_body, spawn_app};
use crate::webhook_endpoints::endpoint_for;

fn paid_with(method: &str) -> Value {
    json!({"amount": 700, "currency": "jpy", "payment_method": method})
}

crate::on_both_backends! {
    async fn a_charge_writes_its_event_in_its_own_transaction() {
        let app = spawn_app().await;
        let keyed = app.charge("k-event", &charge_body()).await;
        assert_eq!(keyed.status, 201, "{}", keyed.body);
        let unkeyed = app.charge(None, &charge_body()).await;
        assert_eq!(unkeyed.status, 201, "{}", unkeyed.body);
        // The replay writes nothing more.
        assert!(app.charge("k-event", &charge_body()).await.replayed());
        assert_eq!(app.count("events"), 2);
        assert_eq!(app.count("events WHERE type = 'charge.succeeded'"), 2);
        if app.backend() == TestBackend::Postgres {
            // One transaction each: the charge's row and its event's were
            // written by the same one, and the two charges' by two.
            assert_eq!(app.count("charges c JOIN events e ON c.xmin::text = e.xmin::text"), 2);
        }
        let list = app.get_json("/events").await;
        let charge = app.get_json(&format!("/charges/{}", unkeyed.charge_id())).await;
        assert_eq!(list["data"][0]["type"], "charge.succeeded");
        assert_eq!(list["data"][0]["data"]["object"], charge, "the charge as GET shows it");
        assert_eq!(list["data"][1]["data"]["object"]["id"], keyed.charge_id().to_string());
    }

    async fn a_charge_rolled_back_leaves_no_event_and_no_delivery() {
        let app = spawn_app().await;
        let demo = app.demo();
        endpoint_for(&demo, &["*"]).await;
        let fail = [("demo-fault", "fail-before-commit")];
        for key in [Some("k-rolled-back"), None] {
            let r = demo.charge_with(key, &charge_body(), &fail).await;
            assert_eq!(r.status, 500, "{}", r.body);
        }
        assert_eq!(app.charges(), 0);
        assert_eq!(app.count("events"), 0);
        assert_eq!(app.count("webhook_deliveries"), 0);
        // And the same charge committed has both.
        assert_eq!(demo.charge("k-committed", &charge_body()).await.status, 201);
        assert_eq!((app.count("events"), app.count("webhook_deliveries")), (1, 1));
        // A commit the database loses (the demo's forget-commit) takes the
        // event with it.
        let forgotten = demo.charge_with("k-forgotten", &charge_body(), &[("demo-fault", "forget-commit")]).await;
        assert_eq!(forgotten.status, 201, "{}", forgotten.body);
        assert_eq!((app.charges(), app.count("events"), app.count("webhook_deliveries")), (1, 1, 1));
    }

    async fn a_decline_writes_charge_failed_with_its_failure() {
        let app = spawn_app().await;
        let declined = app.charge("k-declined", &paid_with("pm_card_chargeDeclinedInsufficientFunds")).await;
        assert_eq!(declined.status, 402, "{}", declined.body);
        let events = app.get_json("/events").await;
        let event = &events["data"][0];
        assert_eq!(event["type"], "charge.failed");
        let object = &event["data"]["object"];
        assert_eq!(object["status"], "failed");
        assert_eq!(object["failure_code"], "insufficient_funds");
        assert!(object["failure_message"].is_string());
        assert_eq!(app.get_json("/events?type=charge.failed").await["data"].as_array().unwrap().len(), 1);
        assert_eq!(app.get_json("/events?type=charge.succeeded").await["data"], json!([]));
    }

    async fn a_refund_writes_charge_refunded_about_the_charge_after_it() {
        let app = spawn_app().await;
        let id = app.charge(None, &json!({"amount": 500, "currency": "jpy"})).await.charge_id().to_string();
        assert_eq!(app.refund("k-refund", &id, 200).await.status, 201);
        assert_eq!(app.refund(None, &id, 100).await.status, 201);
        // One over what is left: no refund, no event.
        assert_eq!(app.refund(None, &id, 201).await.status, 400);
        let refunded = app.get_json("/events?type=charge.refunded").await;
        let data = refunded["data"].as_array().unwrap();
        assert_eq!(data.len(), 2);
        assert_eq!(data[0]["data"]["object"], app.get_json(&format!("/charges/{id}")).await);
        assert_eq!(data[0]["data"]["object"]["amount_refunded"], 300);
        assert_eq!(data[1]["data"]["object"]["amount_refunded"], 200);
        if app.backend() == TestBackend::Postgres {
            assert_eq!(app.count("refunds r JOIN events e ON r.xmin::text = e.xmin::text"), 2);
        }
    }

    async fn only_enabled_endpoints_subscribed_to_the_type_get_a_delivery() {
        let app = spawn_app().await;
        let all = endpoint_for(&app, &["*"]).await;
        let succeeded = endpoint_for(&app, &["charge.succeeded"]).await;
        let refunded = endpoint_for(&app, &["charge.refunded"]).await;
        let disabled = endpoint_for(&app, &["*"]).await;
        app.db.execute(&format!("UPDATE webhook_endpoints SET status = 'disabled' WHERE id = '{disabled}'"));
        // Another account's endpoint hears nothing of this one's charges.
        app.db.create_account("Other", "sk_live_other_for_events");
        let others = endpoint_for(&app.as_account("sk_live_other_for_events"), &["*"]).await;
        let id = app.charge(None, &charge_body()).await.charge_id().to_string();
        let deliveries = |endpoint: &str| app.count(&format!("webhook_deliveries WHERE endpoint_id = '{endpoint}'"));
        assert_eq!([&all, &succeeded, &refunded, &disabled, &others].map(|e| deliveries(e)), [1, 1, 0, 0, 0]);
        assert_eq!(app.refund(None, &id, 10).await.status, 201);
        assert_eq!([&all, &succeeded, &refunded, &disabled, &others].map(|e| deliveries(e)), [2, 1, 1, 0, 0]);
        let pending = "webhook_deliveries WHERE status = 'pending' AND attempts = 0 AND next_attempt_at IS NOT NULL AND claim_token IS NULL";
        assert_eq!(app.count(pending), 4);
    }

    async fn an_event_is_the_same_bytes_alone_and_in_the_list_and_only_its_accounts() {
        let app = spawn_app().await;
        app.charge(None, &charge_body()).await;
        let list = app.get_as(app.api_key(), "/events").await;
        assert_eq!(list.status, 200);
        let listed = list.json()["data"][0].clone();
        let id = listed["id"].as_str().unwrap().to_owned();
        assert!(id.starts_with("evt_"), "{id}");
        let one = app.get_as(app.api_key(), &format!("/events/{id}")).await;
        assert_eq!(one.status, 200);
        assert_eq!(one.header("content-type"), Some("application/json"));
        assert!(list.body.contains(&one.body), "the list splices the same bytes");
        assert_eq!(one.json(), listed);
        assert_eq!(one.json()["object"], "event");
        for other in [
            app.get_as(DEMO_KEY, &format!("/events/{id}")).await,
            app.get_as(app.api_key(), &format!("/events/{}", id.trim_start_matches("evt_"))).await,
            app.get_as(app.api_key(), &format!("/events/{}", id.to_uppercase())).await,
        ] {
            other.assert_problem(404, "not-found");
        }
        assert_eq!(app.get_json("/events").await["data"].as_array().unwrap().len(), 1);
        assert_eq!(app.demo().get_json("/events").await["data"], json!([]));
    }

    async fn events_are_paged_like_the_charges() {
        let app = spawn_app().await;
        for _ in 0..3 {
            app.charge(None, &charge_body()).await;
        }
        let all = app.get_json("/events").await["data"].clone();
        let id = |i: usize| all[i]["id"].as_str().unwrap().to_owned();
        let first = app.get_json("/events?limit=2").await;
        assert_eq!((first["has_more"].clone(), first["data"][0]["id"].clone()), (json!(true), json!(id(0))));
        let next = app.get_json(&format!("/events?limit=2&starting_after={}", id(1))).await;
        assert_eq!((next["has_more"].clone(), next["data"].as_array().unwrap().len()), (json!(false), 1));
        assert_eq!(next["data"][0]["id"], id(2));
        let before = app.get_json(&format!("/events?ending_before={}", id(2))).await;
        assert_eq!(before["data"].as_array().unwrap().iter().map(|e| e["id"].clone()).collect::<Vec<_>>(), [json!(id(0)), json!(id(1))]);
        for bad in ["type=charge.created", "status=succeeded", "limit=0", "starting_after=00000000-0000-0000-0000-000000000000", &format!("starting_after={}&ending_before={}", id(0), id(1))] {
            app.get_as(app.api_key(), &format!("/events?{bad}")).await.assert_problem(400, "invalid-request");
        }
    }
}
