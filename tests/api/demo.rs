//! Demo mode's faults and views, and that they vanish with demo mode off.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::helpers::{Captured, charge_body, spawn_app, spawn_app_with};

crate::on_both_backends! {
    async fn lose_response_commits_the_charge_but_answers_504_and_the_retry_replays_the_real_201() {
        let app = spawn_app().await;
        let lost = Captured::from(
            app.post_charge_with(
                Some("k-lost"),
                &charge_body(),
                &[("demo-fault", "lose-response")],
            )
            .await,
        )
        .await;
        lost.assert_problem(504, "simulated-lost-response");
        assert_eq!(app.charges(), 1, "the work was done");
        assert_eq!(
            app.count("idempotency_keys WHERE response_status = 201"),
            1,
            "the real 201 is stored"
        );

        let retry = Captured::from(app.post_charge(Some("k-lost"), &charge_body()).await).await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), Some("true"));
        assert_eq!(app.charges(), 1);
    }

    async fn lose_response_without_a_key_leads_to_a_double_charge_on_retry() {
        let app = spawn_app().await;
        let lost = app
            .post_charge_with(None, &charge_body(), &[("demo-fault", "lose-response")])
            .await;
        assert_eq!(lost.status(), 504);
        assert_eq!(app.post_charge(None, &charge_body()).await.status(), 201);
        assert_eq!(app.charges(), 2);
    }

    async fn delay_commit_holds_the_transaction_open() {
        let app = spawn_app().await;
        let started = Instant::now();
        let r = app
            .post_charge_with(
                Some("k-delay"),
                &charge_body(),
                &[("demo-fault", "delay-commit=700")],
            )
            .await;
        assert_eq!(r.status(), 201);
        assert!(started.elapsed() >= Duration::from_millis(700));
    }

    async fn fail_before_commit_without_a_key_rolls_the_charge_back() {
        let app = spawn_app().await;
        let r = Captured::from(
            app.post_charge_with(
                None,
                &charge_body(),
                &[("demo-fault", "fail-before-commit")],
            )
            .await,
        )
        .await;
        r.assert_problem(500, "internal");
        assert_eq!(app.charges(), 0);
    }

    async fn unknown_or_out_of_range_faults_are_rejected_before_anything_runs() {
        let app = spawn_app().await;
        for (header, value) in [
            ("demo-fault", "explode"),
            ("demo-fault", "delay-commit=15001"),
            ("demo-fault", "delay-commit=soon"),
            ("demo-mode", "optimistic"),
        ] {
            let r = Captured::from(
                app.post_charge_with(Some("k-x"), &charge_body(), &[(header, value)])
                    .await,
            )
            .await;
            r.assert_problem(400, "invalid-request");
        }
        assert_eq!((app.charges(), app.keys()), (0, 0));
    }

    async fn check_then_insert_lets_two_concurrent_requests_with_one_key_both_charge() {
        let app = spawn_app().await;
        let naive = [("demo-mode", "check-then-insert")];
        let (a, b) = tokio::join!(
            app.post_charge_with(Some("k-race"), &charge_body(), &naive),
            app.post_charge_with(Some("k-race"), &charge_body(), &naive),
        );
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (201, 201));
        assert_eq!(app.charges(), 2, "the race charged twice");
        assert_eq!(app.count("demo_unguarded_keys WHERE key = 'k-race'"), 2);
        assert_eq!(app.keys(), 0, "the real key table was never touched");

        // The same two with the unique constraint: one charge.
        let (a, b) = tokio::join!(
            app.post_charge(Some("k-race-2"), &charge_body()),
            app.post_charge(Some("k-race-2"), &charge_body()),
        );
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (201, 201));
        assert_eq!(app.charges(), 3);
    }

    async fn check_then_insert_replays_when_it_is_not_raced() {
        let app = spawn_app().await;
        let naive = [("demo-mode", "check-then-insert")];
        let first = Captured::from(
            app.post_charge_with(Some("k-seq"), &charge_body(), &naive)
                .await,
        )
        .await;
        let second = Captured::from(
            app.post_charge_with(Some("k-seq"), &charge_body(), &naive)
                .await,
        )
        .await;
        assert_eq!(second.header("idempotent-replayed"), Some("true"));
        assert_eq!(second.body, first.body);
        assert_eq!(app.charges(), 1);
    }

    async fn the_state_view_shows_the_tables_and_reset_and_expire_change_them() {
        let app = spawn_app().await;
        app.post_charge(Some("k-view"), &charge_body()).await;
        let state: Value = app.get_json("/demo/state").await;
        let backend = match app.backend() {
            crate::helpers::TestBackend::Postgres => "postgresql",
            crate::helpers::TestBackend::Sqlite => "sqlite",
        };
        assert_eq!(state["backend"], backend);
        assert_eq!(state["idempotency_ttl_seconds"], 86400);
        assert_eq!(state["charges"].as_array().unwrap().len(), 1);
        let key = &state["idempotency_keys"][0];
        assert_eq!(key["key"], "k-view");
        assert_eq!(key["status"], "completed");
        assert_eq!(key["response_status"], 201);
        assert_eq!(key["expired"], false);
        assert_eq!(key["charge_id"], state["charges"][0]["id"]);

        let expired: Value = app.post_json("/demo/keys/k-view/expire").await;
        assert_eq!(expired["idempotency_keys"][0]["expired"], true);
        let missing = Captured::from(
            app.client
                .post(app.url("/demo/keys/nope/expire"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        missing.assert_problem(404, "not-found");

        let reset: Value = app.post_json("/demo/reset").await;
        assert_eq!(reset["charges"], serde_json::json!([]));
        assert_eq!((app.charges(), app.keys()), (0, 0));
    }

    async fn with_demo_mode_off_the_demo_headers_are_ignored_and_its_routes_are_gone() {
        let app = spawn_app_with(|s| s.demo = false).await;
        let r = app
            .post_charge_with(
                Some("k-prod"),
                &charge_body(),
                &[("demo-fault", "lose-response, fail-before-commit")],
            )
            .await;
        assert_eq!(r.status(), 201, "faults are not honoured");
        let naive = [("demo-mode", "check-then-insert")];
        let (a, b) = tokio::join!(
            app.post_charge_with(Some("k-prod-2"), &charge_body(), &naive),
            app.post_charge_with(Some("k-prod-2"), &charge_body(), &naive),
        );
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (201, 201));
        assert_eq!(
            app.charges(),
            2,
            "check-then-insert is not reachable: one charge per key"
        );
        for path in ["/demo/state", "/"] {
            Captured::from(app.client.get(app.url(path)).send().await.unwrap())
                .await
                .assert_problem(404, "not-found");
        }
        let reset = app
            .client
            .post(app.url("/demo/reset"))
            .send()
            .await
            .unwrap();
        assert_eq!(reset.status(), 404);
    }
}
