//! From a client's charge to the integrator's server (#48), through the API
//! alone: an endpoint registered with `POST /webhook_endpoints`, a charge, a
//! decline and a refund made as any client makes them, and the sender
//! delivering each event once, signed with the secret the 201 showed, as
//! the very bytes `GET /events/{id}` answers. A replayed charge writes no
//! event, so nothing more is sent.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::receiver::Receiver;
use crate::support::{charge_body, spawn_app_with};
use crate::webhook_endpoints::register;
use crate::webhooks_delivery::verifies;

crate::on_both_backends! {
    async fn every_event_a_client_causes_reaches_its_endpoint_once_signed_with_the_secret_it_was_shown() {
        let app = spawn_app_with(|s| {
            s.webhooks.retry_schedule = vec![Duration::ZERO; 3];
            s.webhooks.poll_interval = Duration::from_millis(50);
            s.webhooks.timeout = Duration::from_secs(2);
        })
        .await;
        // No script: every request is answered 200.
        let receiver = Receiver::start(vec![]).await;
        let made = register(&app, "k-endpoint", &json!({"url": receiver.url(), "enabled_events": ["*"]})).await;
        assert_eq!(made.status, 201, "{}", made.body);
        let secret = made.json()["secret"].as_str().unwrap().to_owned();

        let paid = app.charge("k-paid", &charge_body()).await;
        assert_eq!(paid.status, 201, "{}", paid.body);
        assert!(app.charge("k-paid", &charge_body()).await.replayed());
        let declined = json!({"amount": 700, "currency": "jpy", "payment_method": "pm_card_chargeDeclined"});
        let failed = app.charge("k-declined", &declined).await;
        assert_eq!(failed.status, 402, "{}", failed.body);
        assert!(app.charge("k-declined", &declined).await.replayed());
        let failed = failed.json()["charge"].as_str().map(str::to_owned);
        let id = paid.charge_id().to_string();
        assert_eq!(app.refund("k-refund", &id, 200).await.status, 201);

        let got = receiver.until(3, Duration::from_secs(15)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(receiver.received().len(), 3, "one delivery per event, no more");
        let mut types = Vec::new();
        for r in &got {
            assert!(verifies(r, &secret), "{r:?}");
            let event = app.get_as(app.api_key(), &format!("/events/{}", r.header("webhook-id"))).await;
            assert_eq!(event.status, 200, "{}", event.body);
            assert_eq!(event.body, r.body, "the delivery is the event's bytes");
            let body: Value = serde_json::from_str(&r.body).unwrap();
            let (kind, charge) = (body["type"].as_str().unwrap(), &body["data"]["object"]["id"]);
            match kind {
                "charge.failed" => assert_eq!(charge.as_str().map(str::to_owned), failed),
                _ => assert_eq!(charge, id.as_str()),
            }
            types.push(kind.to_owned());

            let deliveries = app.get_json(&format!("/events/{}/deliveries", r.header("webhook-id"))).await;
            let delivery = &deliveries["data"][0];
            assert_eq!(delivery["status"], "succeeded", "{deliveries}");
            assert_eq!(delivery["attempts"], 1, "{deliveries}");
        }
        types.sort();
        assert_eq!(types, ["charge.failed", "charge.refunded", "charge.succeeded"]);
    }
}
