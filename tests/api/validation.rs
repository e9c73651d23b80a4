//! Bad input: a clear problem, and the database unchanged. What the server
//! reads as JSON (a whole number in any spelling, each member named once,
//! only `application/json` in UTF-8, no content coding) and what each
//! refusal says (an amount told its range, a repeated singleton header, the
//! framework's own rejections, a body cut off).

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support::{
    Captured, TEST_KEY, TestApp, TestBackend, charge_body, spawn_app, spawn_app_with,
};

/// One raw request: (what it tests, auth, idempotency-key header values, content type, body).
struct Bad {
    name: &'static str,
    auth: Option<&'static str>,
    keys: Vec<String>,
    content_type: Option<&'static str>,
    body: String,
    status: u16,
    slug: &'static str,
}

fn bad(name: &'static str, status: u16, slug: &'static str) -> Bad {
    Bad {
        name,
        auth: Some(TEST_KEY),
        keys: vec!["\"k-bad\"".to_owned()],
        content_type: Some("application/json"),
        body: charge_body().to_string(),
        status,
        slug,
    }
}

async fn send(app: &TestApp, case: &Bad) -> Captured {
    let mut request = app
        .request(reqwest::Method::POST, "/charges")
        .body(case.body.clone());
    if let Some(auth) = case.auth {
        request = request.header("authorization", format!("Bearer {auth}"));
    }
    for key in &case.keys {
        request = request.header("idempotency-key", key.as_str());
    }
    if let Some(ct) = case.content_type {
        request = request.header("content-type", ct);
    }
    app.send(request).await
}

fn body(case: Bad, body: serde_json::Value) -> Bad {
    Bad {
        body: body.to_string(),
        ..case
    }
}

/// `POST /charges` as the demo account with a raw body and content type.
pub(crate) fn raw_charge(
    app: &crate::support::TestApp,
    content_type: &str,
    body: &str,
) -> reqwest::RequestBuilder {
    app.request(Method::POST, "/charges")
        .bearer_auth(TEST_KEY)
        .header("content-type", content_type)
        .body(body.to_owned())
}

crate::on_both_backends! {
    async fn every_rejected_request_is_a_problem_and_changes_nothing() {
        let app = spawn_app().await;
        let cases = vec![
            Bad {
                auth: None,
                ..bad("no Authorization", 401, "unauthorized")
            },
            Bad {
                auth: Some("sk_test_nobody"),
                ..bad("unknown API key", 401, "unauthorized")
            },
            Bad {
                keys: vec!["\"\"".into()],
                ..bad("empty key", 400, "invalid-idempotency-key")
            },
            Bad {
                keys: vec![format!("\"{}\"", "k".repeat(256))],
                ..bad("key of 256 characters", 400, "invalid-idempotency-key")
            },
            Bad {
                keys: vec!["\"unterminated".into()],
                ..bad("unterminated quoted key", 400, "invalid-idempotency-key")
            },
            // (A bare key with a space inside is a key like its quoted form:
            // tests/api/idempotency.rs.)
            Bad {
                keys: vec!["\"k\";x=1".into()],
                ..bad("quoted key with a parameter", 400, "invalid-idempotency-key")
            },
            Bad {
                keys: vec!["\"a\"".into(), "\"b\"".into()],
                ..bad(
                    "two Idempotency-Key headers",
                    400,
                    "invalid-idempotency-key",
                )
            },
            Bad {
                content_type: Some("text/plain"),
                ..bad("text/plain body", 415, "unsupported-media-type")
            },
            Bad {
                content_type: None,
                ..bad("no content type", 415, "unsupported-media-type")
            },
            Bad {
                body: format!(
                    "{{\"amount\":1000,\"currency\":\"jpy\",\"description\":\"{}\"}}",
                    "x".repeat(17 * 1024)
                ),
                ..bad("body over 16 KiB", 413, "payload-too-large")
            },
            Bad {
                body: "{\"amount\": 1000,".into(),
                ..bad("truncated JSON", 400, "invalid-request")
            },
            Bad {
                body: "".into(),
                ..bad("empty body", 400, "invalid-request")
            },
            body(
                bad("amount zero", 400, "invalid-request"),
                json!({"amount": 0, "currency": "jpy"}),
            ),
            body(
                bad("negative amount", 400, "invalid-request"),
                json!({"amount": -1, "currency": "jpy"}),
            ),
            body(
                bad("amount too large", 400, "invalid-request"),
                json!({"amount": 100_000_000, "currency": "jpy"}),
            ),
            body(
                bad("fractional amount", 400, "invalid-request"),
                json!({"amount": 10.5, "currency": "usd"}),
            ),
            body(
                bad("amount as a string", 400, "invalid-request"),
                json!({"amount": "1000", "currency": "jpy"}),
            ),
            body(
                bad("missing amount", 400, "invalid-request"),
                json!({"currency": "jpy"}),
            ),
            body(
                bad("uppercase currency", 400, "invalid-request"),
                json!({"amount": 1000, "currency": "JPY"}),
            ),
            body(
                bad("unknown currency", 400, "invalid-request"),
                json!({"amount": 1000, "currency": "xyz"}),
            ),
            body(
                bad("description too long", 400, "invalid-request"),
                json!({"amount": 1000, "currency": "jpy", "description": "d".repeat(501)}),
            ),
            body(
                bad("unknown field", 400, "invalid-request"),
                json!({"amount": 1000, "currency": "jpy", "customer": "c1"}),
            ),
            body(
                bad("array body", 400, "invalid-request"),
                json!([1000, "jpy"]),
            ),
        ];
        for case in &cases {
            let response = send(&app, case).await;
            assert_eq!(
                response.status, case.status,
                "{}: {}",
                case.name, response.body
            );
            response.assert_problem(case.status, case.slug);
            assert_eq!(
                (app.charges(), app.keys()),
                (0, 0),
                "{} changed the database",
                case.name
            );
        }
        // The same key still works afterwards: nothing was stored for it.
        let good = app.charge("k-bad", &charge_body()).await;
        assert_eq!(good.status, 201);
    }

    /// The amount is read from the number's decimal text, not from the
    /// double it is nearest to: 0.99999999999999999 was charged as 1.
    async fn an_amount_is_a_whole_number_exactly_or_a_400_that_changes_nothing() {
        let app = spawn_app().await;
        let post = |path: String, key: &'static str, body: String| {
            app.send(
                app.request(reqwest::Method::POST, &path)
                    .bearer_auth(TEST_KEY)
                    .header("content-type", "application/json")
                    .header("idempotency-key", key)
                    .body(body),
            )
        };
        let charge = |amount: &str| {
            post("/charges".to_owned(), "\"k-exact\"", format!(r#"{{"amount": {amount}, "currency": "jpy"}}"#))
        };
        let fractions = [
            "0.99999999999999999",
            "1.00000000000000001",
            "1000.0000000000001",
            "1000.00000000000000001",
            "99999999.0000000001",
            "1e-20",
            "1e-400",
            "-0.99999999999999999",
        ];
        for amount in fractions {
            let r = charge(amount).await;
            r.assert_problem(400, "invalid-request");
            assert_eq!(r.json()["errors"][0]["field"], "amount", "{amount}: {}", r.body);
            assert_eq!(r.json()["errors"][0]["detail"], "must be a whole number of minor units", "{amount}");
            assert_eq!((app.charges(), app.keys()), (0, 0), "{amount} changed the database");
        }
        // Beyond 2^52 no double holds a fraction: such an amount is told
        // its range (it is beyond it either way).
        for amount in ["999999999999999999999.5", "4503599627370496.5"] {
            let r = charge(amount).await;
            r.assert_problem(400, "invalid-request");
            assert_eq!(r.json()["errors"][0]["field"], "amount", "{amount}");
            assert_eq!((app.charges(), app.keys()), (0, 0), "{amount} changed the database");
        }
        // Whole, however spelled: one charge of 1000, every spelling a
        // replay of it.
        for amount in ["1000", "1000.0", "1000.000", "1e3", "1.0E3", "1E+3", "0.1e4", "10000e-1", "1000.00000000000000000000"] {
            let r = charge(amount).await;
            assert_eq!(r.status, 201, "{amount}: {}", r.body);
            assert_eq!(r.json()["amount"], 1000, "{amount}");
        }
        assert_eq!((app.charges(), app.count("charges WHERE amount = 1000")), (1, 1));
        let id = charge("1000").await.charge_id();

        // A refund's amount, the same.
        let refund = |amount: &str| {
            post(format!("/charges/{id}/refunds"), "\"k-exact-refund\"", format!(r#"{{"amount": {amount}}}"#))
        };
        for amount in fractions {
            let r = refund(amount).await;
            r.assert_problem(400, "invalid-request");
            assert_eq!(r.json()["errors"][0]["field"], "amount", "{amount}: {}", r.body);
            assert_eq!(r.json()["errors"][0]["detail"], "must be a whole number of minor units", "{amount}");
            assert_eq!((app.count("refunds"), app.keys()), (0, 1), "{amount} changed the database");
        }
        let r = refund("1.0e2").await;
        assert_eq!((r.status, r.json()["amount"].as_i64()), (201, Some(100)), "{}", r.body);
        assert_eq!(app.count("refunds WHERE amount = 100"), 1);
    }

    async fn invalid_fields_are_all_listed_with_what_to_fix() {
        let app = spawn_app().await;
        let r = app.charge("k-fields", &json!({"amount": 0, "currency": "JPY", "tip": 5})).await;
        r.assert_problem(400, "invalid-request");
        let fields: Vec<String> = r.json()["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(fields, ["tip", "amount", "currency"]);
        assert!(r.body.contains("use \\\"jpy\\\""), "{}", r.body);
    }

    async fn internal_errors_do_not_leak_sql() {
        let app = spawn_app().await;
        // Break the schema under the app: the insert fails inside the transaction.
        match app.backend() {
            TestBackend::Postgres => app.execute("ALTER TABLE charges ADD CONSTRAINT no_more CHECK (amount < 0) NOT VALID"),
            TestBackend::Sqlite => app.execute(
                "CREATE TRIGGER no_more BEFORE INSERT ON charges BEGIN SELECT RAISE(ABORT, 'no_more constraint'); END",
            ),
        };
        let r = app.charge("k-500", &charge_body()).await;
        r.assert_problem(500, "internal");
        assert!(
            !r.body.to_lowercase().contains("constraint") && !r.body.contains("no_more"),
            "{}",
            r.body
        );
        assert_eq!(app.keys(), 0, "the key rolled back with the failed charge");
    }

    async fn a_required_key_makes_a_keyless_charge_a_400() {
        let app = spawn_app_with(|s| s.require_idempotency_key = true).await;
        let r = app.charge(None, &charge_body()).await;
        r.assert_problem(400, "invalid-idempotency-key");
        assert!(
            r.json()["detail"]
                .as_str()
                .unwrap()
                .contains("requires an Idempotency-Key")
        );
        assert_eq!(app.charges(), 0);
        assert_eq!(app.charge("k-req", &charge_body()).await.status, 201);
    }

    async fn a_whole_number_is_an_integer_whatever_its_spelling_and_the_same_request() {
        let app = spawn_app().await;
        let spelled = |amount: &str| {
            raw_charge(&app, "application/json", &format!(r#"{{"amount": {amount}, "currency": "jpy"}}"#))
                .header("idempotency-key", "\"k-whole\"")
        };
        let first = app.send(spelled("612908.0")).await;
        assert_eq!(first.status, 201, "{}", first.body);
        assert_eq!(first.json()["amount"], 612908);
        let again = app.send(spelled("612908")).await;
        assert_eq!(again.status, 201);
        assert!(again.replayed(), "612908 and 612908.0 are one request for the key");
        let fraction = app.send(raw_charge(&app, "application/json", r#"{"amount": 612908.5, "currency": "jpy"}"#)).await;
        fraction.assert_problem(400, "invalid-request");
        assert_eq!(app.charges(), 1);
    }

    async fn an_out_of_range_amount_is_told_its_range_not_its_spelling() {
        let app = spawn_app().await;
        for amount in ["9223372036854775808", "-0", "1e20", "0"] {
            let r = app
                .send(raw_charge(&app, "application/json", &format!(r#"{{"amount": {amount}, "currency": "jpy"}}"#)))
                .await;
            r.assert_problem(400, "invalid-request");
            let detail = r.json()["errors"][0]["detail"].as_str().unwrap().to_owned();
            assert!(detail.starts_with("must be between 1 and 99999999"), "{amount}: {detail}");
        }
        assert_eq!(app.charges(), 0);
    }

    async fn a_member_name_given_twice_is_refused_and_named() {
        let app = spawn_app().await;
        let r = app
            .send(raw_charge(&app, "application/json", r#"{"amount":5,"currency":"xxx","currency":"usd"}"#))
            .await;
        r.assert_problem(400, "invalid-request");
        assert!(r.json()["detail"].as_str().unwrap().contains("\"currency\" appears twice"), "{}", r.body);
        let nested = app
            .send(raw_charge(&app, "application/json", r#"{"amount":5,"currency":"usd","description":null,"amount":6}"#))
            .await;
        nested.assert_problem(400, "invalid-request");
        assert_eq!(app.charges(), 0);
    }

    async fn a_compressed_body_is_a_415_that_names_the_accepted_coding() {
        let app = spawn_app().await;
        for coding in ["foo", "gzip", "identity, gzip"] {
            let r = app
                .send(raw_charge(&app, "application/json", &charge_body().to_string()).header("content-encoding", coding))
                .await;
            r.assert_problem(415, "unsupported-content-encoding");
            assert_eq!(r.header("accept-encoding"), Some("identity"), "{coding}");
        }
        let identity = app
            .send(raw_charge(&app, "application/json", &charge_body().to_string()).header("content-encoding", "identity"))
            .await;
        assert_eq!(identity.status, 201);
        assert_eq!(app.charges(), 1);
    }

    async fn only_application_json_in_utf8_is_json() {
        let app = spawn_app().await;
        let body = charge_body().to_string();
        for refused in [
            "application/merge-patch+json",
            "application/json-patch+json",
            "image/svg+json",
            "application/json; charset=latin1",
            "text/json",
        ] {
            let r = app.send(raw_charge(&app, refused, &body)).await;
            r.assert_problem(415, "unsupported-media-type");
        }
        for accepted in ["application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf-8"] {
            let r = app.send(raw_charge(&app, accepted, &body)).await;
            assert_eq!(r.status, 201, "{accepted}: {}", r.body);
        }
        assert_eq!(app.charges(), 3);
    }

    async fn a_repeated_singleton_header_is_a_400() {
        let app = spawn_app().await;
        let body = charge_body().to_string();
        let two_types = app
            .send(raw_charge(&app, "application/json", &body).header("content-type", "application/json"))
            .await;
        two_types.assert_problem(400, "invalid-request");
        assert!(two_types.json()["detail"].as_str().unwrap().contains("Content-Type"));
        let two_keys = app
            .send(raw_charge(&app, "application/json", &body).header("idempotency-key", "a").header("idempotency-key", "a"))
            .await;
        two_keys.assert_problem(400, "invalid-idempotency-key");
        let two_callers = app
            .send(raw_charge(&app, "application/json", &body).header("authorization", "Bearer sk_live_test_account"))
            .await;
        two_callers.assert_problem(400, "invalid-request");
        assert_eq!(app.charges(), 0);
    }

    async fn the_frameworks_own_rejections_are_problems_too() {
        let app = spawn_app().await;
        for path in ["/charges?limit=abc", "/charges?_=1", "/charges?limit=1&limit=2"] {
            let r = app.get_as(TEST_KEY, path).await;
            r.assert_problem(400, "invalid-request");
        }
        app.get_as(TEST_KEY, "/charges/not-a-uuid").await.assert_problem(404, "not-found");
        // Authentication comes first: an unknown caller hears 401, not about the query.
        app.get("/charges?limit=abc").await.assert_problem(401, "unauthorized");
        app.get_as(TEST_KEY, "/nothing/here").await.assert_problem(404, "not-found");
    }

    async fn a_body_cut_off_says_what_broke() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let app = spawn_app().await;
        let address = app.url("").trim_start_matches("http://").to_owned();
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream
            .write_all(
                b"POST /charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk_live_test_account\r\n\
                  Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"amo\r\n",
            )
            .await
            .unwrap();
        // The client goes away in the middle of its chunked body.
        stream.shutdown().await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
            .await
            .expect("an answer before the body deadline")
            .unwrap();
        let raw = String::from_utf8_lossy(&raw);
        let r = crate::support::Captured::parse(&raw);
        r.assert_problem(400, "invalid-request");
        assert!(r.json()["detail"].as_str().unwrap().contains("ended before it was complete"), "{raw}");
        assert_eq!(app.charges(), 0);
    }
}
