//! Reading charges back, health, and the routes around the charge endpoint.

use serde_json::json;

use crate::helpers::{Captured, DEMO_KEY, charge_body, spawn_app, spawn_app_with};

crate::on_both_backends! {
    async fn a_charge_can_be_read_back_with_the_body_it_was_created_with() {
        let app = spawn_app().await;
        let created = Captured::from(app.post_charge(Some("k-get"), &charge_body()).await).await;
        let location = created.header("location").unwrap().to_owned();

        let fetched = Captured::from(
            app.client
                .get(app.url(&location))
                .bearer_auth(DEMO_KEY)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(fetched.status, 200);
        assert_eq!(fetched.json(), created.json());
    }

    async fn another_accounts_charge_is_not_found() {
        let app = spawn_app().await;
        app.create_account("Other shop", "sk_test_other");
        let created = Captured::from(app.post_charge(None, &charge_body()).await).await;
        let location = created.header("location").unwrap().to_owned();

        let theirs = app
            .client
            .get(app.url(&location))
            .bearer_auth("sk_test_other")
            .send()
            .await
            .unwrap();
        Captured::from(theirs)
            .await
            .assert_problem(404, "not-found");
        let list = app
            .client
            .get(app.url("/charges"))
            .bearer_auth("sk_test_other")
            .send()
            .await
            .unwrap();
        assert_eq!(Captured::from(list).await.json()["data"], json!([]));
    }

    async fn unknown_and_malformed_charge_ids_are_not_found() {
        let app = spawn_app().await;
        for id in ["00000000-0000-0000-0000-000000000000", "not-a-uuid"] {
            let r = app
                .client
                .get(app.url(&format!("/charges/{id}")))
                .bearer_auth(DEMO_KEY)
                .send()
                .await
                .unwrap();
            Captured::from(r).await.assert_problem(404, "not-found");
        }
    }

    async fn the_list_is_newest_first_and_bounded_by_limit() {
        let app = spawn_app().await;
        for amount in [1, 2, 3] {
            app.post_charge(None, &json!({"amount": amount, "currency": "usd"}))
                .await;
        }
        let list = app
            .client
            .get(app.url("/charges?limit=2"))
            .bearer_auth(DEMO_KEY)
            .send()
            .await
            .unwrap();
        let list = Captured::from(list).await;
        assert_eq!(list.status, 200);
        let amounts: Vec<i64> = list.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["amount"].as_i64().unwrap())
            .collect();
        assert_eq!(amounts, [3, 2]);

        for bad in ["0", "101", "abc"] {
            let r = app
                .client
                .get(app.url(&format!("/charges?limit={bad}")))
                .bearer_auth(DEMO_KEY)
                .send()
                .await
                .unwrap();
            Captured::from(r)
                .await
                .assert_problem(400, "invalid-request");
        }
    }

    async fn reading_charges_needs_an_api_key() {
        let app = spawn_app().await;
        let r = Captured::from(app.client.get(app.url("/charges")).send().await.unwrap()).await;
        r.assert_problem(401, "unauthorized");
        assert!(r.header("www-authenticate").unwrap().starts_with("Bearer"));
    }

    async fn health_and_readiness_answer() {
        let app = spawn_app().await;
        assert_eq!(
            app.client
                .get(app.url("/healthz"))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
        let ready = Captured::from(app.client.get(app.url("/readyz")).send().await.unwrap()).await;
        assert_eq!(ready.status, 200);
        assert_eq!(ready.json()["status"], "ready");
    }

    async fn unknown_paths_and_methods_are_problems() {
        let app = spawn_app().await;
        Captured::from(app.client.get(app.url("/nowhere")).send().await.unwrap())
            .await
            .assert_problem(404, "not-found");
        Captured::from(
            app.client
                .delete(app.url("/charges"))
                .bearer_auth(DEMO_KEY)
                .send()
                .await
                .unwrap(),
        )
        .await
        .assert_problem(405, "method-not-allowed");
    }

    async fn every_problem_type_is_documented_at_its_uri() {
        let app = spawn_app().await;
        for (slug, status, _) in charges::problem::TYPES {
            let doc = Captured::from(
                app.client
                    .get(app.url(&format!("/problems/{slug}")))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
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
        app.client
            .get(app.url("/charges"))
            .bearer_auth(DEMO_KEY)
            .send()
            .await
            .unwrap();
        let body = charge_body();
        let holder = app.post_charge_with(
            Some("k-hold"),
            &body,
            &[("demo-fault", "delay-commit=1500")],
        );
        let starved = async {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let started = std::time::Instant::now();
            let r = Captured::from(app.post_charge(Some("k-starved"), &body).await).await;
            (r, started.elapsed())
        };
        let (holder, (starved, waited)) = tokio::join!(holder, starved);
        assert_eq!(holder.status(), 201);
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
        assert_eq!(
            app.post_charge(Some("k-starved"), &body).await.status(),
            201
        );
    }
}
