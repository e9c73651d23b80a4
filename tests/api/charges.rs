//! Reading charges back, health, the routes around the charge endpoint, and
//! the problem types its errors point at.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::json;

use crate::problem_types::provoke_every_problem_type;
use crate::support::{DEMO_KEY, TEST_KEY, charge_body, spawn_app, spawn_app_with};

crate::on_both_backends! {
    async fn a_charge_can_be_read_back_with_the_body_it_was_created_with() {
        let app = spawn_app().await;
        let created = app.charge("k-get", &charge_body()).await;
        let location = created.header("location").unwrap().to_owned();

        let fetched = app.get_as(TEST_KEY, &location).await;
        assert_eq!(fetched.status, 200);
        assert_eq!(fetched.json(), created.json());
    }

    async fn another_accounts_charge_is_not_found() {
        let app = spawn_app().await;
        app.create_account("Other shop", "sk_test_other");
        let created = app.charge(None, &charge_body()).await;
        let location = created.header("location").unwrap().to_owned();

        app.get_as("sk_test_other", &location)
            .await
            .assert_problem(404, "not-found");
        let list = app.get_as("sk_test_other", "/charges").await;
        assert_eq!(list.json()["data"], json!([]));
    }

    async fn unknown_and_malformed_charge_ids_are_not_found() {
        let app = spawn_app().await;
        for id in ["00000000-0000-0000-0000-000000000000", "not-a-uuid"] {
            app.get_as(TEST_KEY, &format!("/charges/{id}"))
                .await
                .assert_problem(404, "not-found");
        }
    }

    async fn the_list_is_newest_first_and_bounded_by_limit() {
        let app = spawn_app().await;
        for amount in [1, 2, 3] {
            app.charge(None, &json!({"amount": amount, "currency": "usd"})).await;
        }
        let list = app.get_as(TEST_KEY, "/charges?limit=2").await;
        assert_eq!(list.status, 200);
        let amounts: Vec<i64> = list.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["amount"].as_i64().unwrap())
            .collect();
        assert_eq!(amounts, [3, 2]);

        for bad in ["0", "101", "abc"] {
            app.get_as(TEST_KEY, &format!("/charges?limit={bad}"))
                .await
                .assert_problem(400, "invalid-request");
        }
    }

    async fn reading_charges_needs_an_api_key() {
        let app = spawn_app().await;
        let r = app.get("/charges").await;
        r.assert_problem(401, "unauthorized");
        assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    }

    async fn health_and_readiness_answer() {
        let app = spawn_app().await;
        assert_eq!(app.get("/healthz").await.status, 200);
        let ready = app.get("/readyz").await;
        assert_eq!(ready.status, 200);
        assert_eq!(ready.json()["status"], "ready");
    }

    async fn unknown_paths_and_methods_are_problems() {
        let app = spawn_app().await;
        app.get("/nowhere").await.assert_problem(404, "not-found");
        app.send(app.request(Method::DELETE, "/charges").bearer_auth(TEST_KEY))
            .await
            .assert_problem(405, "method-not-allowed");
    }

    /// Each problem type the server emits, provoked by a real request, is
    /// served at its `type` URI with the status and title the response had,
    /// and every type `/demo/config` lists (all of `problem::TYPES`) is one
    /// of them: a new type needs a row in the table of `problem_types.rs`
    /// (`CASES`) or `problem_cases.rs`.
    async fn every_problem_type_is_documented_at_its_uri() {
        let (app, provoked) = provoke_every_problem_type().await;
        let listed: BTreeSet<String> = app.demo().get_json("/demo/config").await["problem_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["type"].as_str().unwrap().to_owned())
            .collect();
        assert!(listed.len() >= 14, "{listed:?}");
        let emitted: BTreeSet<String> = provoked.0.keys().cloned().collect();
        let unprovoked: Vec<&String> = listed.difference(&emitted).collect();
        assert!(
            unprovoked.is_empty(),
            "/demo/config lists problem types that no request here provoked: {unprovoked:?} (provoked: {:#?})",
            provoked.0
        );
        let unlisted: Vec<&String> = emitted.difference(&listed).collect();
        assert!(
            unlisted.is_empty(),
            "the server emits problem types that /demo/config does not list: {unlisted:?}"
        );
    }

    async fn an_exhausted_pool_answers_503_with_retry_after_instead_of_hanging() {
        let app = spawn_app_with(|s| {
            s.pool_size = 1;
            s.pool_timeout = std::time::Duration::from_millis(300);
        })
        .await;
        // Authenticate once, so the API key is cached and needs no connection.
        app.get_as(DEMO_KEY, "/charges").await;
        let body = charge_body();
        let holder = app.demo().charge_with(
            "k-hold",
            &body,
            &[("demo-fault", "delay-commit=1500")],
        );
        let starved = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let r = app.demo().charge("k-starved", &body).await;
            (r, started.elapsed())
        };
        let (holder, (starved, waited)) = tokio::join!(holder, starved);
        assert_eq!(holder.status, 201);
        starved.assert_problem(503, "service-unavailable");
        assert_eq!(starved.header("retry-after"), Some("1"));
        assert!(
            waited < std::time::Duration::from_millis(1200),
            "it gave up after the pool timeout: {waited:?}"
        );
        assert_eq!(
            app.count("idempotency_keys WHERE key = 'k-starved'"),
            0,
            "nothing was stored for it"
        );
        // The same request succeeds once a connection is free.
        assert_eq!(app.demo().charge("k-starved", &body).await.status, 201);
    }
}
