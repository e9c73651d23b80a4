//! Reading charges back, health, and the routes around the charge endpoint.

use reqwest::Method;
use serde_json::json;

use crate::support::{DEMO_KEY, charge_body, spawn_app, spawn_app_with};

crate::on_both_backends! {
    async fn a_charge_can_be_read_back_with_the_body_it_was_created_with() {
        let app = spawn_app().await;
        let created = app.charge("k-get", &charge_body()).await;
        let location = created.header("location").unwrap().to_owned();

        let fetched = app.get_as(DEMO_KEY, &location).await;
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
            app.get_as(DEMO_KEY, &format!("/charges/{id}"))
                .await
                .assert_problem(404, "not-found");
        }
    }

    async fn the_list_is_newest_first_and_bounded_by_limit() {
        let app = spawn_app().await;
        for amount in [1, 2, 3] {
            app.charge(None, &json!({"amount": amount, "currency": "usd"})).await;
        }
        let list = app.get_as(DEMO_KEY, "/charges?limit=2").await;
        assert_eq!(list.status, 200);
        let amounts: Vec<i64> = list.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["amount"].as_i64().unwrap())
            .collect();
        assert_eq!(amounts, [3, 2]);

        for bad in ["0", "101", "abc"] {
            app.get_as(DEMO_KEY, &format!("/charges?limit={bad}"))
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
        app.send(app.request(Method::DELETE, "/charges").bearer_auth(DEMO_KEY))
            .await
            .assert_problem(405, "method-not-allowed");
    }

    async fn every_problem_type_is_documented_at_its_uri() {
        let app = spawn_app().await;
        for (slug, status, _) in charges::problem::TYPES {
            let doc = app.get(&format!("/problems/{slug}")).await;
            assert_eq!(doc.status, 200, "{slug}");
            assert_eq!(doc.json()["status"], *status);
        }
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
        let holder = app.charge_with(
            "k-hold",
            &body,
            &[("demo-fault", "delay-commit=1500")],
        );
        let starved = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let r = app.charge("k-starved", &body).await;
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
        assert_eq!(app.charge("k-starved", &body).await.status, 201);
    }
}
