//! The contract is exact: what `/openapi.json` says the server accepts and
//! answers is what it does, and HTTP's own rules are kept. One test per rule;
//! Schemathesis (`.ci/schemathesis`) checks the whole document from outside.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{DEMO_KEY, TEST_KEY, charge_body, spawn_app, spawn_app_with};

/// `POST /charges` as the demo account with a raw body and content type.
fn raw_charge(
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
    async fn the_body_schema_and_the_key_say_exactly_what_the_code_checks() {
        let app = spawn_app().await;
        let doc = app.get_json("/openapi.json").await;
        let body = &doc["components"]["schemas"]["ChargeRequestBody"];
        assert_eq!(body["additionalProperties"], false);
        assert_eq!(body["required"], json!(["amount", "currency"]));
        let amount = &body["properties"]["amount"];
        assert_eq!((amount["type"].as_str(), amount["minimum"].as_i64(), amount["maximum"].as_i64()),
            (Some("integer"), Some(charges::payments::domain::MIN_AMOUNT), Some(charges::payments::domain::MAX_AMOUNT)));
        assert_eq!(body["properties"]["currency"]["enum"], json!(charges::payments::domain::CURRENCIES));
        let description = &body["properties"]["description"];
        assert_eq!(description["maxLength"], charges::payments::domain::MAX_DESCRIPTION_CHARS);
        assert_eq!(description["pattern"], charges::payments::domain::DESCRIPTION_PATTERN);
        let key = doc["paths"]["/charges"]["post"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap()["schema"]
            .clone();
        assert_eq!(key, json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 2 * charges::idempotency::key::MAX_LEN + 2,
            "pattern": charges::idempotency::key::HEADER_PATTERN,
        }), "a string, never null, with the parser's grammar");

        // Every currency the document lists is one the server takes.
        for (i, currency) in charges::payments::domain::CURRENCIES.iter().enumerate() {
            let r = app.charge(None, &json!({"amount": 100 + i, "currency": currency})).await;
            assert_eq!(r.status, 201, "{currency}: {}", r.body);
        }
        // And what the pattern refuses, the server refuses.
        let r = app.charge(None, &json!({"amount": 1, "currency": "usd", "description": "bell\u{7}"})).await;
        r.assert_problem(400, "invalid-request");
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

    async fn bare_and_quoted_keys_carry_the_same_characters() {
        let app = spawn_app().await;
        let send = |value: &'static str| {
            app.send(
                raw_charge(&app, "application/json", &charge_body().to_string())
                    .header("idempotency-key", value),
            )
        };
        let bare = send("two words").await;
        assert_eq!(bare.status, 201, "{}", bare.body);
        let quoted = send("\"two words\"").await;
        assert!(quoted.replayed(), "the same key: {}", quoted.body);
        let escaped = send(r#""a \"b\" \\c""#).await;
        assert_eq!(escaped.status, 201);
        assert!(send(r#"a "b" \c"#).await.replayed(), "the bare form of the same key");
        assert_eq!(app.charges(), 2);
    }

    async fn a_quoted_key_with_a_parameter_is_told_so() {
        let app = spawn_app().await;
        let r = app
            .send(raw_charge(&app, "application/json", &charge_body().to_string()).header("idempotency-key", "\"k\";x=1"))
            .await;
        r.assert_problem(400, "invalid-idempotency-key");
        assert!(r.json()["detail"].as_str().unwrap().contains("without parameters"), "{}", r.body);
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

    async fn a_charge_has_one_uri() {
        let app = spawn_app().await;
        let id = app.charge(None, &charge_body()).await.charge_id();
        assert_eq!(app.get_as(TEST_KEY, &format!("/charges/{id}")).await.status, 200);
        for other in [
            id.hyphenated().to_string().to_uppercase(),
            id.simple().to_string(),
            id.braced().to_string(),
            id.urn().to_string(),
        ] {
            app.get_as(TEST_KEY, &format!("/charges/{other}")).await.assert_problem(404, "not-found");
        }
    }

    async fn head_is_get_without_the_body_on_every_get_route() {
        let app = spawn_app().await;
        let id = app.charge(None, &charge_body()).await.charge_id();
        for (path, allow) in charges::http::ROUTES {
            assert_eq!(allow.contains("GET"), allow.contains("HEAD"), "{path}: {allow}");
            if !allow.contains("GET") {
                continue;
            }
            let path = path.replace("{id}", &id.to_string()).replace("{slug}", "not-found");
            let request = |method: Method| app.request(method, &path).bearer_auth(TEST_KEY);
            let get = app.send(request(Method::GET)).await;
            let head = app.send(request(Method::HEAD)).await;
            assert_eq!(head.status, get.status, "HEAD {path}");
            assert_eq!(head.header("content-type"), get.header("content-type"), "HEAD {path}");
            if path != "/demo/state" {
                // (It changes between the requests.)
                assert_eq!(head.header("content-length"), get.header("content-length"), "HEAD {path}");
            }
            assert!(head.body.is_empty(), "HEAD {path} has no body");
        }
        let refused = app.send(app.request(Method::DELETE, "/charges").bearer_auth(TEST_KEY)).await;
        assert_eq!(refused.header("allow"), Some("GET, HEAD, POST"));
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

    async fn every_status_an_operation_can_answer_is_documented() {
        // One connection, held by a delayed demo charge: the reads find none.
        let app = spawn_app_with(|s| {
            s.pool_size = 1;
            s.pool_timeout = Duration::from_millis(300);
        })
        .await;
        let doc = app.get_json("/openapi.json").await;
        let held = app.demo().charge_with("k-held", &charge_body(), &[("demo-fault", "delay-commit=1500")]);
        let reads = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            (app.get_as(DEMO_KEY, "/charges").await, app.get_as(DEMO_KEY, "/charges/00000000-0000-0000-0000-000000000000").await)
        };
        let (held, (list, one)) = tokio::join!(held, reads);
        assert_eq!(held.status, 201);
        for (r, path) in [(list, "/charges"), (one, "/charges/{id}")] {
            r.assert_problem(503, "service-unavailable");
            assert!(doc["paths"][path]["get"]["responses"]["503"].is_object(), "{path} documents 503");
        }
        // Every operation that touches the database documents 500 and 503.
        for (path, item) in doc["paths"].as_object().unwrap() {
            if path.starts_with("/charges") || path.starts_with("/demo/") || path == "/readyz" {
                for (method, op) in item.as_object().unwrap() {
                    for status in ["500", "503"] {
                        assert!(op["responses"][status].is_object(), "{method} {path} documents {status}");
                    }
                }
            }
        }
        assert!(doc["paths"]["/charges"]["get"]["responses"]["400"]["description"]
            .as_str()
            .unwrap()
            .contains("unknown query parameter"));
        // The demo's 504 only where demo mode is on.
        assert!(doc["paths"]["/charges"]["post"]["responses"]["504"].is_object());
        let off = spawn_app_with(|s| s.demo = Some(false)).await;
        let doc = off.demo().get_json("/openapi.json").await;
        assert!(doc["paths"]["/charges"]["post"]["responses"]["504"].is_null());
        assert!(doc["paths"].as_object().unwrap().keys().all(|p| !p.starts_with("/demo/")));
    }
}

/// The body of a valid document is also a valid JSON value everywhere: a
/// cheap guard that [`serde_json`] and the document agree (no NaN, no
/// non-string keys) before Schemathesis reads it.
#[tokio::test]
async fn the_document_is_plain_json() {
    let app = spawn_app().await;
    let text = app.get("/openapi.json").await.body;
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        charges::http::json::parse_strict(text.as_bytes()).unwrap(),
        doc,
        "no member twice"
    );
}
