//! A decline is an answer (issue #47): the test payment methods, a failed
//! charge and its `402`, stored under the key and replayed; the same key
//! with another card is a 422; a failed charge is not refundable; through
//! the card network, the network decides and a retry asks it nothing more;
//! and a real card number is refused and kept nowhere.

use serde_json::{Value, json};

use crate::support::{AppClient, ServerProcess, TEST_KEY, TestApp, TestDatabase, spawn_app};
use charges::payments::methods::PAYMENT_METHODS;

fn paid_with(method: &str) -> Value {
    json!({"amount": 1200, "currency": "jpy", "payment_method": method})
}

/// `charges WHERE …` counted.
fn failed_charges(app: &TestApp) -> i64 {
    app.count("charges WHERE status = 'failed' AND failure_code IS NOT NULL")
}

/// An app whose charges the in-process card network decides.
async fn with_network(network: &TestDatabase) -> TestApp {
    let url = network.url.clone();
    crate::support::spawn_app_with(move |s| {
        s.network_url = charges::config::NETWORK_IN_PROCESS.to_owned();
        s.network_database_url = Some(url);
    })
    .await
}

/// The decline's problem, checked whole; the failed charge's id.
fn assert_declined(answer: &crate::support::Captured, code: &str) -> String {
    answer.assert_problem(402, "card-declined");
    let problem = answer.json();
    assert_eq!(problem["decline_code"], code, "{problem}");
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("new Idempotency-Key"), "{detail}");
    problem["charge"]
        .as_str()
        .expect("the failed charge's id")
        .to_owned()
}

crate::on_both_backends! {
    async fn every_test_payment_method_gives_its_documented_answer() {
        let app = spawn_app().await;
        for method in PAYMENT_METHODS {
            let answer = app.charge(None, &paid_with(method.id)).await;
            let id = match method.decline {
                None => {
                    assert_eq!(answer.status, 201, "{}: {}", method.id, answer.body);
                    answer.charge_id().to_string()
                }
                Some(decline) => assert_declined(&answer, decline.code),
            };
            let charge = app.get_json(&format!("/charges/{id}")).await;
            assert_eq!(charge["payment_method"], method.id);
            match method.decline {
                None => {
                    assert_eq!(charge["status"], "succeeded", "{charge}");
                    assert_eq!((&charge["failure_code"], &charge["failure_message"]), (&Value::Null, &Value::Null));
                }
                Some(decline) => {
                    assert_eq!(charge["status"], "failed", "{charge}");
                    assert_eq!(charge["failure_code"], decline.code);
                    assert_eq!(charge["failure_message"], decline.message);
                    assert_eq!(charge["amount_refunded"], 0);
                }
            }
        }
        // No payment method is Visa's.
        let default = app.charge(None, &json!({"amount": 1, "currency": "usd"})).await;
        assert_eq!(default.json()["payment_method"], "pm_card_visa");
        assert_eq!(app.charges(), PAYMENT_METHODS.len() as i64 + 1);
        assert_eq!(failed_charges(&app), 5);
    }

    async fn a_declined_keyed_charge_retried_replays_its_402_byte_for_byte_with_one_failed_charge() {
        let app = spawn_app().await;
        let body = paid_with("pm_card_chargeDeclinedInsufficientFunds");
        let first = app.charge("k-declined", &body).await;
        let id = assert_declined(&first, "insufficient_funds");
        assert!(!first.replayed());
        for _ in 0..2 {
            let retry = app.charge("k-declined", &body).await;
            assert_eq!(retry.status, 402);
            assert!(retry.replayed(), "the stored decline");
            assert_eq!(retry.body, first.body, "byte for byte");
            assert_eq!(retry.header("content-type"), Some("application/problem+json"));
        }
        assert_eq!((app.charges(), failed_charges(&app), app.keys()), (1, 1, 1));
        assert_eq!(app.get_json(&format!("/charges/{id}")).await["status"], "failed");
    }

    async fn the_same_key_with_another_card_is_a_422_and_a_new_key_charges() {
        let app = spawn_app().await;
        let declined = app.charge("k-retry-card", &paid_with("pm_card_chargeDeclined")).await;
        assert_declined(&declined, "generic_decline");
        let other_card = app.charge("k-retry-card", &paid_with("pm_card_visa")).await;
        other_card.assert_problem(422, "idempotency-key-reused");
        let detail = other_card.json()["detail"].as_str().unwrap().to_owned();
        assert!(detail.contains("after a decline"), "{detail}");
        assert_eq!((app.charges(), app.keys()), (1, 1), "nothing new written");
        let new_key = app.charge("k-retry-card-2", &paid_with("pm_card_visa")).await;
        assert_eq!(new_key.status, 201, "{}", new_key.body);
        assert_eq!(new_key.json()["status"], "succeeded");
        assert_eq!((app.charges(), failed_charges(&app)), (2, 1));
    }

    async fn a_failed_charge_is_not_refunded_and_the_refusal_is_stored_under_the_key() {
        let app = spawn_app().await;
        let id = assert_declined(&app.charge(None, &paid_with("pm_card_chargeDeclinedExpiredCard")).await, "expired_card");
        let refused = app.refund("k-refund-failed", &id, 100).await;
        refused.assert_problem(400, "charge-not-refundable");
        let again = app.refund("k-refund-failed", &id, 100).await;
        assert!(again.replayed());
        assert_eq!(again.body, refused.body);
        app.refund(None, &id, 1).await.assert_problem(400, "charge-not-refundable");
        assert_eq!(app.count("refunds"), 0);
        assert_eq!(app.get_json(&format!("/charges/{id}")).await["amount_refunded"], 0);
    }

    async fn through_the_network_a_decline_is_the_networks_and_its_retry_asks_the_network_nothing() {
        let network = TestDatabase::create();
        let app = with_network(&network).await;
        let body = paid_with("pm_card_chargeDeclinedIncorrectCvc");
        let first = app.charge("k-net-declined", &body).await;
        let id = assert_declined(&first, "incorrect_cvc");
        // The network decided and stored its decision under its own key; it
        // authorized nothing.
        assert_eq!(network.count("authorizations"), 0);
        assert_eq!(network.count("idempotency_keys WHERE response_status = 402"), 1);
        let charge = app.get_json(&format!("/charges/{id}")).await;
        assert_eq!((&charge["status"], &charge["authorization_id"]), (&json!("failed"), &Value::Null));
        // Had the retry asked the network, the network would register its
        // key again (a new row): the retry is our stored 402.
        network.execute("DELETE FROM idempotency_keys");
        let retry = app.charge("k-net-declined", &body).await;
        assert!(retry.replayed());
        assert_eq!(retry.body, first.body);
        assert_eq!(network.count("idempotency_keys"), 0, "the network was not asked again");
        assert_eq!((app.charges(), failed_charges(&app)), (1, 1));
        // A keyless decline through the network writes its failed charge too.
        assert_declined(&app.charge(None, &paid_with("pm_card_chargeDeclined")).await, "generic_decline");
        assert_eq!((failed_charges(&app), network.count("authorizations")), (2, 0));
        // And a card that succeeds is authorized there.
        let paid = app.charge(None, &paid_with("pm_card_mastercard")).await;
        assert_eq!(paid.status, 201, "{}", paid.body);
        assert_eq!(network.count("authorizations"), 1);
    }

    async fn a_card_number_is_refused_and_kept_in_no_table_log_or_answer() {
        // A Luhn-valid test number (Visa's), as an integrator used to a
        // raw-card API would send it, in each shape.
        const DIGITS: &str = "4242424242424242";
        let db = TestDatabase::create();
        let server = ServerProcess::start(&db.url, &[("RUST_LOG", "debug"), ("DEMO", "false")]);
        db.create_account("Shop", TEST_KEY);
        let client: AppClient = server.client().as_account(TEST_KEY);
        let bodies = [
            json!({"amount": 1000, "currency": "jpy", "payment_method": DIGITS}),
            json!({"amount": 1000, "currency": "jpy", "payment_method": "4242 4242 4242 4242"}),
            json!({"amount": 1000, "currency": "jpy", "payment_method": {"card": {"number": DIGITS}}}),
            json!({"amount": 1000, "currency": "jpy", "card": {"number": DIGITS, "exp_month": 12, "cvc": "123"}}),
            json!({"amount": 1000, "currency": "jpy", "number": DIGITS}),
        ];
        for (i, body) in bodies.iter().enumerate() {
            for key in [None, Some(format!("k-card-{i}"))] {
                let answer = client.charge(key.as_deref(), body).await;
                answer.assert_problem(400, "invalid-request");
                assert!(answer.body.contains("never accepts a real card"), "{}", answer.body);
                assert!(!answer.body.contains("4242"), "{}", answer.body);
            }
        }
        let metrics = reqwest::get(server.metrics_url()).await.unwrap().text().await.unwrap();
        drop(client);
        let logs = server.logs();
        assert!(logs.contains("POST") || logs.contains("/charges"), "the log was written: {logs}");
        let dump = db.dump();
        assert!(!dump.is_empty());
        assert_eq!(db.count("charges"), 0);
        assert_eq!(db.count("idempotency_keys"), 0, "a 400 stores nothing under the key");
        for (what, text) in [("the log", logs.as_bytes()), ("the database", &dump), ("/metrics", metrics.as_bytes())] {
            for digits in [DIGITS, "4242 4242", "424242424242"] {
                let digits = digits.as_bytes();
                assert!(!text.windows(digits.len()).any(|w| w == digits), "{what} holds the card's digits");
            }
        }
    }
}
