//! The protocol's second and third users: refunds (a delta, so a key is what
//! makes a retry safe) and `PUT /charges/{id}/description` (the whole end
//! state, so it is safe to repeat without one).

use std::collections::BTreeSet;

use serde_json::json;

use crate::support::{AppClient, TestApp, charge_body, spawn_app};

const SHOP_KEY: &str = "sk_live_shop_for_refund_tests";

/// A charge of `amount` jpy, made without a key; its id.
async fn a_charge_of(app: &AppClient, amount: i64) -> String {
    let made = app
        .charge(None, &json!({"amount": amount, "currency": "jpy"}))
        .await;
    assert_eq!(made.status, 201, "{}", made.body);
    made.charge_id().to_string()
}

/// The charge as `GET /charges/{id}` shows it.
async fn charge(app: &AppClient, id: &str) -> serde_json::Value {
    app.get_json(&format!("/charges/{id}")).await
}

fn refunded(app: &TestApp, id: &str) -> i64 {
    app.count(&format!("refunds WHERE charge_id = '{id}' AND amount > 0"))
}

crate::on_both_backends! {
    async fn a_refund_sent_three_times_with_one_key_refunds_once_and_replays_its_201() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;

        let first = app.refund("k-refund", &id, 100).await;
        assert_eq!(first.status, 201, "{}", first.body);
        let body = first.json();
        assert_eq!(body["object"], "refund");
        assert_eq!(body["charge_id"], id.as_str());
        assert_eq!(body["amount"], 100);
        assert_eq!(body["currency"], "jpy");
        assert_eq!(
            first.header("location"),
            Some(format!("/charges/{id}/refunds/{}", body["id"].as_str().unwrap()).as_str())
        );
        assert!(!first.replayed());
        for _ in 0..2 {
            let retry = app.refund("k-refund", &id, 100).await;
            assert_eq!(retry.status, 201);
            assert!(retry.replayed());
            assert_eq!(retry.body, first.body, "the replay is byte-identical");
        }
        assert_eq!(refunded(&app, &id), 1);
        assert_eq!(charge(&app, &id).await["amount_refunded"], 100);
    }

    async fn a_refund_sent_three_times_without_a_key_refunds_three_times() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;
        let mut ids = BTreeSet::new();
        for _ in 0..3 {
            let r = app.refund(None, &id, 100).await;
            assert_eq!(r.status, 201, "{}", r.body);
            assert!(!r.replayed());
            ids.insert(r.json()["id"].as_str().unwrap().to_owned());
        }
        assert_eq!(ids.len(), 3, "three refunds, each its own");
        assert_eq!(refunded(&app, &id), 3);
        assert_eq!(charge(&app, &id).await["amount_refunded"], 300);
        let list = app.get_json(&format!("/charges/{id}/refunds")).await;
        assert_eq!(list["object"], "list");
        assert_eq!(list["data"].as_array().unwrap().len(), 3);
    }

    async fn concurrent_refunds_with_different_keys_never_refund_more_than_the_charge() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 1000).await;
        let keys: Vec<String> = (0..20).map(|i| format!("k-concurrent-{i}")).collect();
        let answers =
            futures::future::join_all(keys.iter().map(|k| app.refund(k.as_str(), &id, 100)))
                .await;
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        let made = statuses.iter().filter(|s| **s == 201).count();
        assert_eq!(made, 10, "{statuses:?}");
        for refused in answers.iter().filter(|a| a.status != 201) {
            refused.assert_problem(400, "refund-exceeds-charge");
        }
        assert_eq!(refunded(&app, &id), 10);
        assert_eq!(charge(&app, &id).await["amount_refunded"], 1000);
        assert_eq!(
            app.count(&format!("refunds WHERE charge_id = '{id}'")),
            10,
            "one refund row per 201"
        );
    }

    async fn a_200_way_storm_with_one_key_on_a_refund_leaves_one_refund() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;
        let answers =
            futures::future::join_all((0..200).map(|_| app.refund("k-storm", &id, 100))).await;
        let first = &answers[0];
        for a in &answers {
            assert_eq!(a.status, 201, "{}", a.body);
            assert_eq!(a.body, first.body, "every answer is the one refund");
        }
        assert_eq!(answers.iter().filter(|a| !a.replayed()).count(), 1);
        assert_eq!(refunded(&app, &id), 1);
        assert_eq!(charge(&app, &id).await["amount_refunded"], 100);
    }

    async fn more_than_is_left_is_a_400_stored_under_its_key_and_nothing_is_refunded() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;
        assert_eq!(app.refund(None, &id, 400).await.status, 201);

        let refused = app.refund("k-too-much", &id, 200).await;
        refused.assert_problem(400, "refund-exceeds-charge");
        assert!(!refused.replayed());
        let detail = refused.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("100 left"), "{detail}");
        // The operation ran: its answer is the key's, replayed as it was.
        let again = app.refund("k-too-much", &id, 200).await;
        assert_eq!(again.status, 400);
        assert!(again.replayed());
        assert_eq!(again.body, refused.body);
        assert_eq!(charge(&app, &id).await["amount_refunded"], 400);
        assert_eq!(refunded(&app, &id), 1);
    }

    async fn a_refund_of_an_unknown_charge_is_a_404_and_stores_it() {
        let app = spawn_app().await;
        let unknown = "00000000-0000-4000-8000-000000000000";
        let first = app.refund("k-nowhere", unknown, 100).await;
        first.assert_problem(404, "not-found");
        let again = app.refund("k-nowhere", unknown, 100).await;
        assert_eq!(again.status, 404);
        assert!(again.replayed());
        assert_eq!(app.count("refunds"), 0);
        // A malformed id names no charge, and never reaches the protocol.
        let malformed = app.refund("k-malformed", "NOT-A-UUID", 100).await;
        malformed.assert_problem(404, "not-found");
        assert_eq!(app.count("idempotency_keys WHERE key = 'k-malformed'"), 0);
    }

    async fn an_invalid_refund_is_a_400_that_stores_nothing() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;
        for body in [
            json!({"amount": 0}),
            json!({"amount": 1.5}),
            json!({"amount": "100"}),
            json!({}),
            json!({"amount": 100, "currency": "jpy"}),
            json!([100]),
        ] {
            let r = app.refund_with("k-invalid", &id, &body, &[]).await;
            r.assert_problem(400, "invalid-request");
        }
        assert_eq!(app.count("idempotency_keys"), 0);
        assert_eq!(charge(&app, &id).await["amount_refunded"], 0);
    }

    async fn one_key_on_a_charge_and_on_a_refund_is_a_422_both_ways() {
        let app = spawn_app().await;
        let charged = app.charge("k-shared", &charge_body()).await;
        assert_eq!(charged.status, 201);
        let id = charged.charge_id().to_string();
        // Same key, another path: another request.
        app.refund("k-shared", &id, 100)
            .await
            .assert_problem(422, "idempotency-key-reused");
        assert_eq!(app.refund("k-refund-first", &id, 100).await.status, 201);
        app.charge("k-refund-first", &charge_body())
            .await
            .assert_problem(422, "idempotency-key-reused");
        // And the same key on another charge's refunds is another path too.
        let other = a_charge_of(&app, 500).await;
        app.refund("k-refund-first", &other, 100)
            .await
            .assert_problem(422, "idempotency-key-reused");
        assert_eq!(app.count("refunds"), 1);
    }

    async fn refunds_run_under_the_key_first_design_too() {
        let app = spawn_app().await;
        let id = a_charge_of(&app.demo(), 500).await;
        let key_first = [("demo-mode", "key-first")];
        let first = app
            .demo()
            .refund_with("k-kf", &id, &json!({"amount": 100}), &key_first)
            .await;
        assert_eq!(first.status, 201, "{}", first.body);
        let again = app
            .demo()
            .refund_with("k-kf", &id, &json!({"amount": 100}), &key_first)
            .await;
        assert!(again.replayed());
        assert_eq!(again.body, first.body);
        // A refund that fails inside its transaction releases the key.
        let failed = app
            .demo()
            .refund_with(
                "k-kf-fail",
                &id,
                &json!({"amount": 100}),
                &[key_first[0], ("demo-fault", "fail-before-commit")],
            )
            .await;
        failed.assert_problem(500, "internal");
        assert_eq!(app.count("idempotency_keys WHERE key = 'k-kf-fail'"), 0);
        assert_eq!(charge(&app.demo(), &id).await["amount_refunded"], 100);
    }

    async fn a_refund_whose_answer_was_lost_is_replayed_by_its_retry() {
        let app = spawn_app().await;
        let id = a_charge_of(&app.demo(), 500).await;
        let lost = app
            .demo()
            .refund_with("k-lost", &id, &json!({"amount": 100}), &[("demo-fault", "lose-response")])
            .await;
        lost.assert_problem(504, "simulated-lost-response");
        let retry = app.demo().refund("k-lost", &id, 100).await;
        assert_eq!(retry.status, 201);
        assert!(retry.replayed());
        assert_eq!(charge(&app.demo(), &id).await["amount_refunded"], 100);
    }

    async fn refunds_are_per_account() {
        let app = spawn_app().await;
        app.create_account("Shop", SHOP_KEY);
        let id = a_charge_of(&app, 500).await;
        let path = format!("/charges/{id}/refunds");
        let theirs = app
            .send(
                app.request(reqwest::Method::POST, &path)
                    .bearer_auth(SHOP_KEY)
                    .header("content-type", "application/json")
                    .body(r#"{"amount": 100}"#),
            )
            .await;
        theirs.assert_problem(404, "not-found");
        app.get_as(SHOP_KEY, &path).await.assert_problem(404, "not-found");
        assert_eq!(charge(&app, &id).await["amount_refunded"], 0);
    }

    async fn putting_the_description_three_times_leaves_one_state_without_a_key() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;
        let mut answers = Vec::new();
        for _ in 0..3 {
            let r = app.set_description(&id, Some("a book, gift-wrapped")).await;
            assert_eq!(r.status, 200, "{}", r.body);
            answers.push(r.json());
        }
        assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
        let now = charge(&app, &id).await;
        assert_eq!(now["description"], "a book, gift-wrapped");
        assert_eq!(now, answers[0]);
        assert_eq!(app.charges(), 1);
        assert_eq!(app.count("idempotency_keys"), 0, "no key was needed or stored");
        // null removes it, as often as it is sent.
        for _ in 0..2 {
            assert_eq!(app.set_description(&id, None).await.json()["description"], json!(null));
        }
    }

    async fn a_description_put_is_validated_and_names_a_charge_of_the_caller() {
        let app = spawn_app().await;
        let id = a_charge_of(&app, 500).await;
        let long = "x".repeat(501);
        app.set_description(&id, Some(&long))
            .await
            .assert_problem(400, "invalid-request");
        app.set_description(&id, Some("tab\tok\u{7}bell"))
            .await
            .assert_problem(400, "invalid-request");
        app.set_description("00000000-0000-4000-8000-000000000000", Some("x"))
            .await
            .assert_problem(404, "not-found");
        assert_eq!(charge(&app, &id).await["description"], json!(null));
    }
}
