//! The Idempotency-Key protocol over HTTP, the header's own grammar
//! included: a bare key and its quoted form carry the same characters, and a
//! quoted key with a parameter is told so.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::support::{TEST_KEY, charge_body, spawn_app};
use crate::validation::raw_charge;

crate::on_both_backends! {
    async fn the_first_request_with_a_key_creates_the_charge_and_stores_its_201() {
        let app = spawn_app().await;
        let first = app.charge("k-first", &charge_body()).await;

        assert_eq!(first.status, 201, "{}", first.body);
        let body = first.json();
        let id = body["id"].as_str().unwrap();
        assert_eq!(
            first.header("location"),
            Some(format!("/charges/{id}").as_str())
        );
        assert_eq!(first.header("content-type"), Some("application/json"));
        assert_eq!(first.header("idempotent-replayed"), None);
        assert_eq!(body["amount"], 1000);
        assert_eq!(body["currency"], "jpy");
        assert_eq!(body["object"], "charge");
        assert_eq!(app.charges(), 1);
        assert_eq!(
            app.count(&format!(
                "idempotency_keys k WHERE key = 'k-first' AND status = 'completed' AND response_status = 201 AND {} = '{id}' AND expires_at > {}", app.key_charge_id(), app.at(86_340)
            )),
            1
        );
    }

    async fn a_retry_with_the_same_key_replays_the_stored_response_byte_for_byte() {
        let app = spawn_app().await;
        let first = app.charge("k-replay", &charge_body()).await;
        let replay = app.charge("k-replay", &charge_body()).await;

        assert_eq!(replay.status, 201);
        assert_eq!(
            replay.body, first.body,
            "the replayed body is byte-identical"
        );
        assert_eq!(replay.header("location"), first.header("location"));
        assert_eq!(replay.header("content-type"), first.header("content-type"));
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(app.charges(), 1);
    }

    async fn a_reordered_and_respaced_body_with_an_unquoted_key_is_the_same_request() {
        let app = spawn_app().await;
        let first = app.charge("k-same", &charge_body()).await;
        let retry = app
            .send(
                app.request(Method::POST, "/charges")
                    .bearer_auth(TEST_KEY)
                    .header("content-type", "application/json; charset=utf-8")
                    .header("idempotency-key", "k-same")
                    .body("{ \"description\": \"a book\",\n  \"currency\": \"jpy\", \"amount\": 1000 }"),
            )
            .await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), Some("true"));
        assert_eq!(retry.body, first.body);
        assert_eq!(app.charges(), 1);
    }

    async fn fifty_concurrent_requests_with_one_key_make_one_charge_and_fifty_identical_201s() {
        let app = spawn_app().await;
        let requests = (0..50).map(|_| async {
            app.charge("k-storm", &charge_body()).await
        });
        let responses = futures::future::join_all(requests).await;

        assert!(
            responses.iter().all(|r| r.status == 201),
            "{:?}",
            responses.iter().map(|r| r.status).collect::<Vec<_>>()
        );
        assert!(
            responses.iter().all(|r| r.body == responses[0].body),
            "all bodies identical"
        );
        assert_eq!(
            responses
                .iter()
                .filter(|r| r.header("idempotent-replayed").is_none())
                .count(),
            1,
            "exactly one executed"
        );
        assert_eq!(app.charges(), 1);
        assert_eq!(app.keys(), 1);
    }

    async fn a_key_reused_with_another_body_is_422_and_charges_nothing() {
        let app = spawn_app().await;
        let first = app.charge("k-reuse", &charge_body()).await;
        let other = json!({"amount": 2000, "currency": "jpy", "description": "a book"});
        let reused = app.charge("k-reuse", &other).await;

        reused.assert_problem(422, "idempotency-key-reused");
        assert_eq!(app.charges(), 1);
        // On the wire, with RFC 9110's reason phrase (reqwest hides it).
        let body = other.to_string();
        let response = app
            .send_raw(&format!(
                "POST /charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {TEST_KEY}\r\n\
                 Content-Type: application/json\r\nIdempotency-Key: \"k-reuse\"\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            ))
            .await;
        let status_line = response.lines().next().unwrap_or_default();
        assert_eq!(status_line, "HTTP/1.1 422 Unprocessable Content");
        // The stored response is untouched: the original request still replays.
        let again = app.charge("k-reuse", &charge_body()).await;
        assert_eq!(again.body, first.body);
    }

    async fn the_same_key_on_another_account_is_an_independent_charge() {
        let app = spawn_app().await;
        app.create_account("Other shop", "sk_test_other");
        let mine = app.charge("k-shared", &charge_body()).await;
        let theirs = app.charge_as("sk_test_other", "k-shared", &charge_body(), &[]).await;

        assert_eq!(mine.status, 201);
        assert_eq!(theirs.status, 201);
        assert_eq!(theirs.header("idempotent-replayed"), None);
        assert_ne!(mine.json()["id"], theirs.json()["id"]);
        assert_eq!(app.charges(), 2);
        assert_eq!(app.keys(), 2);
    }

    async fn without_a_key_a_retry_charges_twice() {
        let app = spawn_app().await;
        let a = app.charge(None, &charge_body()).await;
        let b = app.charge(None, &charge_body()).await;

        assert_eq!((a.status, b.status), (201, 201));
        assert_ne!(a.json()["id"], b.json()["id"]);
        assert_eq!(app.charges(), 2);
        assert_eq!(app.keys(), 0, "nothing is stored without a key");
    }

    async fn an_expired_key_is_treated_as_new() {
        let app = spawn_app().await;
        let first = app.charge("k-old", &charge_body()).await;
        app.execute(&format!("UPDATE idempotency_keys SET expires_at = {}", app.at(-1)));

        let retry = app.charge("k-old", &charge_body()).await;
        assert_eq!(retry.status, 201);
        assert_eq!(
            retry.header("idempotent-replayed"),
            None,
            "the expired key is not replayed"
        );
        assert_ne!(retry.json()["id"], first.json()["id"]);
        assert_eq!(app.charges(), 2);
        // The row was taken over: one live row, pointing at the new charge.
        assert_eq!(app.keys(), 1);
        let new_id = retry.json()["id"].as_str().unwrap().to_owned();
        assert_eq!(
            app.count(&format!(
                "idempotency_keys k WHERE {} = '{new_id}' AND expires_at > {}", app.key_charge_id(), app.at(0)
            )),
            1
        );

        // An expired key with a different body is also simply new: no 422.
        app.execute(&format!("UPDATE idempotency_keys SET expires_at = {}", app.at(-1)));
        let other = app.charge("k-old", &json!({"amount": 5, "currency": "usd"})).await;
        assert_eq!(other.status, 201);
    }

    async fn a_concurrent_retry_waits_for_the_first_to_commit_then_replays_its_response() {
        let app = spawn_app().await;
        let started = Instant::now();
        let body = charge_body();
        let first = app.demo().charge_with(
            "k-slow",
            &body,
            &[("demo-fault", "delay-commit=1500")],
        );
        let second = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let sent = Instant::now();
            let response = app.demo().charge("k-slow", &charge_body()).await;
            (response, sent.elapsed())
        };
        let (first, (second, waited)) = tokio::join!(first, second);

        assert_eq!(first.status, 201);
        assert_eq!(second.status, 201);
        assert_eq!(second.header("idempotent-replayed"), Some("true"));
        assert_eq!(second.body, first.body);
        assert!(
            waited >= Duration::from_millis(1000),
            "the retry waited on the unique index: {waited:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(app.charges(), 1);
    }

    async fn a_concurrent_retry_runs_as_the_first_when_the_first_rolls_back() {
        let app = spawn_app().await;
        let body = charge_body();
        let first = app.demo().charge_with(
            "k-rollback",
            &body,
            &[("demo-fault", "delay-commit=1000, fail-before-commit")],
        );
        let second = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            app.demo().charge("k-rollback", &charge_body()).await
        };
        let (first, second) = tokio::join!(first, second);

        first.assert_problem(500, "internal");
        assert_eq!(second.status, 201);
        assert_eq!(
            second.header("idempotent-replayed"),
            None,
            "it executed rather than replayed"
        );
        assert_eq!((app.charges(), app.keys()), (1, 1));
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
}

crate::on_both_backends! {
    async fn a_failure_inside_the_transaction_leaves_no_key_and_no_charge_so_the_retry_runs_as_the_first() {
        let app = spawn_app().await;
        let failed = app
            .demo()
            .charge_with("k-fail", &charge_body(), &[("demo-fault", "fail-before-commit")])
            .await;
        failed.assert_problem(500, "internal");
        assert!(
            !failed.body.contains("fail-before-commit"),
            "no internals leak: {}",
            failed.body
        );
        assert_eq!((app.charges(), app.keys()), (0, 0));

        let retry = app.demo().charge("k-fail", &charge_body()).await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), None);
        assert_eq!((app.charges(), app.keys()), (1, 1));
    }
}
