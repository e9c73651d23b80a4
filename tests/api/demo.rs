//! Demo mode's faults and views, and that they vanish with demo mode off.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{DEMO_KEY, charge_body, spawn_app, spawn_app_with};

const SHOP_KEY: &str = "sk_live_shop_for_tests";

crate::on_both_backends! {
    async fn lose_response_commits_the_charge_but_answers_504_and_the_retry_replays_the_real_201() {
        let app = spawn_app().await;
        let lost = app
            .demo()
            .charge_with("k-lost", &charge_body(), &[("demo-fault", "lose-response")])
            .await;
        lost.assert_problem(504, "simulated-lost-response");
        // Its type is documented at its URI, with the title the response had.
        let uri = lost.json()["type"].as_str().unwrap().to_owned();
        let documented = app.demo().get_json(&uri).await;
        assert_eq!(documented["status"], 504);
        assert_eq!(documented["title"], lost.json()["title"]);
        assert_ne!(documented["title"], "Error");
        assert_eq!(app.charges(), 1, "the work was done");
        assert_eq!(
            app.count("idempotency_keys WHERE response_status = 201"),
            1,
            "the real 201 is stored"
        );

        let retry = app.demo().charge("k-lost", &charge_body()).await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), Some("true"));
        assert_eq!(app.charges(), 1);
    }

    async fn forget_commit_answers_201_then_the_database_forgets_it_and_the_retry_charges_again() {
        let app = spawn_app().await;
        let body = charge_body();
        let first = app
            .demo()
            .charge_with("k-forgotten", &body, &[("demo-fault", "forget-commit")])
            .await;
        assert_eq!(first.status, 201, "{}", first.body);
        let held = first.charge_id();
        // The client holds an id the database no longer has.
        assert_eq!((app.charges(), app.keys()), (0, 0));
        app.get_as(crate::support::DEMO_KEY, &format!("/charges/{held}"))
            .await
            .assert_problem(404, "not-found");
        let state = app.demo().get_json("/demo/state").await;
        assert_eq!(state["charges"].as_array().unwrap().len(), 0);
        // To the key, the charge never happened: its retry is a first charge.
        let retry = app.demo().charge("k-forgotten", &body).await;
        assert_eq!(retry.status, 201);
        assert!(!retry.replayed());
        assert_ne!(retry.charge_id(), held);
        assert_eq!((app.charges(), app.keys()), (1, 1));
        // Only where a commit can be forgotten.
        let refused = app
            .demo()
            .refund_with(
                "k-forget-refund",
                &retry.charge_id().to_string(),
                &serde_json::json!({"amount": 1}),
                &[("demo-fault", "forget-commit")],
            )
            .await;
        refused.assert_problem(400, "invalid-request");
    }

    async fn abandon_leaves_a_key_first_claim_in_progress_until_its_lease_runs_out() {
        let app = spawn_app().await;
        let body = charge_body();
        let key_first = ("demo-mode", "key-first");
        let abandoned = app
            .demo()
            .charge_with(
                "k-abandoned",
                &body,
                &[key_first, ("demo-fault", "abandon, lease=1500")],
            )
            .await;
        abandoned.assert_problem(504, "simulated-lost-response");
        assert_eq!(app.charges(), 0, "abandoned before the operation");
        assert_eq!(
            app.count("idempotency_keys WHERE key = 'k-abandoned' AND status = 'in_progress'"),
            1,
            "the key stays in progress, as after a crash"
        );
        let state = app.demo().get_json("/demo/state").await;
        assert_eq!(state["idempotency_keys"][0]["lease_live"], true);
        // While the lease holds, a retry hears 409 (in either design).
        app.demo().charge_with("k-abandoned", &body, &[key_first])
            .await
            .assert_problem(409, "idempotency-key-in-flight");
        app.demo().charge("k-abandoned", &body)
            .await
            .assert_problem(409, "idempotency-key-in-flight");
        tokio::time::sleep(Duration::from_millis(1700)).await;
        let taken_over = app.demo().charge_with("k-abandoned", &body, &[key_first]).await;
        assert_eq!(taken_over.status, 201, "{}", taken_over.body);
        assert!(!taken_over.replayed());
        assert_eq!((app.charges(), app.keys()), (1, 1));
        assert_eq!(app.demo().charge("k-abandoned", &body).await.charge_id(), taken_over.charge_id());
        // abandon and lease are key-first's.
        app.demo().charge_with("k-atomic", &body, &[("demo-fault", "abandon")])
            .await
            .assert_problem(400, "invalid-request");
        app.demo().charge_with("k-lease", &body, &[key_first, ("demo-fault", "lease=500")])
            .await
            .assert_problem(400, "invalid-request");
        // Demo-Session names the request's sessions: letters and digits only, at most 8.
        for bad in ["A'; SELECT 1", "", "ABCDEFGHI", "A-B"] {
            app.demo().charge_with("k-session", &body, &[("demo-session", bad)])
                .await
                .assert_problem(400, "invalid-request");
        }
        assert_eq!(app.demo().charge_with("k-session", &body, &[("demo-session", "B")]).await.status, 201);
    }

    async fn the_page_reads_this_servers_settings_and_every_problem_type_from_demo_config() {
        let app = spawn_app_with(|s| {
            s.idempotency_lease = Duration::from_secs(7);
            s.idempotency_ttl = Duration::from_secs(600);
            s.demo_max_delayed = Some(3);
        })
        .await;
        let config = app.demo().get_json("/demo/config").await;
        let backend = match app.backend() {
            crate::support::TestBackend::Postgres => ("postgresql", "PostgreSQL"),
            crate::support::TestBackend::Sqlite => ("sqlite", "SQLite"),
        };
        assert_eq!((config["backend"].as_str(), config["backend_name"].as_str()), (Some(backend.0), Some(backend.1)));
        assert_eq!(config["idempotency_mode"], "atomic");
        assert_eq!(config["idempotency_lease_seconds"], 7);
        assert_eq!(config["default_idempotency_lease_seconds"], 30);
        assert_eq!(config["idempotency_ttl_seconds"], 600);
        assert_eq!(config["default_idempotency_ttl_seconds"], 86_400);
        // Well inside REQUEST_TIMEOUT (10 s); on SQLite a second inside the
        // busy timeout (DB_LOCK_TIMEOUT, 7 s) every writer waits with.
        let max_delay = match app.backend() {
            crate::support::TestBackend::Postgres => 8_000,
            crate::support::TestBackend::Sqlite => 6_000,
        };
        assert_eq!(config["max_delay_commit_ms"], max_delay);
        assert_eq!(config["lock_timeout_ms"], 7_000);
        assert_eq!(config["request_timeout_ms"], 10_000);
        // SQLite's write lock is global: one delay at a time, a gap after it.
        let (places, gap) = match app.backend() {
            crate::support::TestBackend::Postgres => (3, 0),
            crate::support::TestBackend::Sqlite => (1, 300),
        };
        assert_eq!(config["max_delayed_transactions"], places);
        assert_eq!(config["delayed_transaction_gap_ms"], gap);
        assert_eq!(config["in_flight_retry_after_seconds"], 1);
        assert_eq!(config["default_purge_interval_seconds"], 60);
        assert_eq!(config["purge_interval_seconds"], config["default_purge_interval_seconds"]);
        assert_eq!(config["account"]["api_key"], "sk_test_demo");
        // Every type listed is served at its URI with the same status and title.
        let types = config["problem_types"].as_array().unwrap();
        assert!(types.len() >= 14, "{types:?}");
        for listed in types {
            let served = app.demo().get_json(listed["type"].as_str().unwrap()).await;
            assert_eq!(&served, listed);
        }
    }

    async fn lose_response_without_a_key_leads_to_a_double_charge_on_retry() {
        let app = spawn_app().await;
        let lost = app.demo().charge_with(None, &charge_body(), &[("demo-fault", "lose-response")]).await;
        assert_eq!(lost.status, 504);
        assert_eq!(app.demo().charge(None, &charge_body()).await.status, 201);
        assert_eq!(app.charges(), 2);
    }

    async fn delay_commit_holds_the_transaction_open() {
        let app = spawn_app().await;
        let started = Instant::now();
        let r = app
            .demo()
            .charge_with("k-delay", &charge_body(), &[("demo-fault", "delay-commit=700")])
            .await;
        assert_eq!(r.status, 201);
        assert!(started.elapsed() >= Duration::from_millis(700));
    }

    async fn fail_before_commit_without_a_key_rolls_the_charge_back() {
        let app = spawn_app().await;
        let r = app
            .demo()
            .charge_with(None, &charge_body(), &[("demo-fault", "fail-before-commit")])
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
            let r = app.demo().charge_with("k-x", &charge_body(), &[(header, value)]).await;
            r.assert_problem(400, "invalid-request");
        }
        assert_eq!((app.charges(), app.keys()), (0, 0));
    }

    async fn check_then_insert_lets_two_concurrent_requests_with_one_key_both_charge() {
        let app = spawn_app().await;
        let naive = [("demo-mode", "check-then-insert")];
        let (a, b) = tokio::join!(
            app.demo().charge_with("k-race", &charge_body(), &naive),
            app.demo().charge_with("k-race", &charge_body(), &naive),
        );
        assert_eq!((a.status, b.status), (201, 201));
        assert_eq!(app.charges(), 2, "the race charged twice");
        assert_eq!(app.count("demo_unguarded_keys WHERE key = 'k-race'"), 2);
        assert_eq!(app.keys(), 0, "the real key table was never touched");

        // The same two with the unique constraint: one charge.
        let (a, b) = tokio::join!(
            app.demo().charge("k-race-2", &charge_body()),
            app.demo().charge("k-race-2", &charge_body()),
        );
        assert_eq!((a.status, b.status), (201, 201));
        assert_eq!(app.charges(), 3);
    }

    /// In a class the page's two requests can reach the server further
    /// apart than the pause (the pool, the demo's admission): the first
    /// waits for the second's look-up, and the lesson's race still happens.
    async fn check_then_insert_races_a_second_request_that_comes_later_than_the_pause() {
        let app = spawn_app().await;
        let naive = [("demo-mode", "check-then-insert")];
        let (a, b) = tokio::join!(
            app.demo().charge_with("k-late", &charge_body(), &naive),
            async {
                tokio::time::sleep(Duration::from_millis(600)).await;
                app.demo().charge_with("k-late", &charge_body(), &naive).await
            },
        );
        assert_eq!((a.status, b.status), (201, 201));
        assert_eq!(b.header("idempotent-replayed"), None, "the second charged too");
        assert_eq!(app.charges(), 2, "the race charged twice");
    }

    /// The wait for a partner and the pause hold no connection: with one
    /// connection for the demo, its view is read while a request waits.
    async fn check_then_insert_waits_holding_no_connection() {
        let app = spawn_app_with(|s| s.pool_size = 2).await;
        let naive = [("demo-mode", "check-then-insert")];
        let (charge, (state, read_in)) = tokio::join!(
            app.demo().charge_with("k-alone", &charge_body(), &naive),
            async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let sent = Instant::now();
                let state = app.demo().get("/demo/state").await;
                (state, sent.elapsed())
            },
        );
        assert_eq!((charge.status, state.status), (201, 200));
        assert!(
            read_in < Duration::from_millis(600),
            "the view waited {read_in:?} for the check-then-insert's connection"
        );
        assert_eq!(app.charges(), 1);
    }

    async fn check_then_insert_replays_when_it_is_not_raced() {
        let app = spawn_app().await;
        let naive = [("demo-mode", "check-then-insert")];
        let first = app.demo().charge_with("k-seq", &charge_body(), &naive).await;
        let second = app.demo().charge_with("k-seq", &charge_body(), &naive).await;
        assert_eq!(second.header("idempotent-replayed"), Some("true"));
        assert_eq!(second.body, first.body);
        assert_eq!(app.charges(), 1);
    }

    async fn the_state_view_shows_the_tables_and_reset_and_expire_change_them() {
        let app = spawn_app().await;
        app.demo().charge("k-view", &charge_body()).await;
        let state: Value = app.demo().get_json("/demo/state").await;
        let backend = match app.backend() {
            crate::support::TestBackend::Postgres => "postgresql",
            crate::support::TestBackend::Sqlite => "sqlite",
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

        // The expire answers what it did, in a few bytes; the state shows the change.
        let expired = app.post("/demo/keys/k-view/expire").await;
        assert_eq!(expired.status, 200);
        assert_eq!(expired.json(), serde_json::json!({"key": "k-view", "expired": 1}));
        assert!(expired.body.len() < 1024, "{} bytes", expired.body.len());
        let after: Value = app.demo().get_json("/demo/state").await;
        assert_eq!(after["idempotency_keys"][0]["expired"], true);
        let missing = app.post("/demo/keys/nope/expire").await;
        missing.assert_problem(404, "not-found");

        let reset: Value = app.post_json("/demo/reset").await;
        assert_eq!(reset["charges"], serde_json::json!([]));
        assert_eq!((app.charges(), app.keys()), (0, 0));
    }

    async fn with_demo_mode_off_the_demo_headers_are_ignored_and_its_routes_are_gone() {
        let app = spawn_app_with(|s| s.demo = Some(false)).await;
        app.create_account("Shop", SHOP_KEY);
        let r = app
            .charge_as(
                SHOP_KEY,
                "k-prod",
                &charge_body(),
                &[("demo-fault", "lose-response, fail-before-commit")],
            )
            .await;
        assert_eq!(r.status, 201, "faults are not honoured");
        let naive = [("demo-mode", "check-then-insert")];
        let (a, b) = tokio::join!(
            app.charge_as(SHOP_KEY, "k-prod-2", &charge_body(), &naive),
            app.charge_as(SHOP_KEY, "k-prod-2", &charge_body(), &naive),
        );
        assert_eq!((a.status, b.status), (201, 201));
        assert_eq!(
            app.charges(),
            2,
            "check-then-insert is not reachable: one charge per key"
        );
        for path in ["/demo/state", "/"] {
            app.get(path).await.assert_problem(404, "not-found");
        }
        let reset = app.post("/demo/reset").await;
        assert_eq!(reset.status, 404);
    }
}

crate::on_both_backends! {
    async fn demo_headers_from_another_account_are_refused_after_authentication() {
        let app = spawn_app().await;
        app.create_account("Shop", SHOP_KEY);
        for headers in [
            [("demo-mode", "check-then-insert")],
            [("demo-fault", "lose-response")],
            [("demo-fault", "bogus")],
            [("demo-mode", "key-first")],
        ] {
            // An unknown caller hears 401 first, whatever the demo headers say.
            let anonymous = app.charge_as("sk_live_nobody", "k-x", &charge_body(), &headers).await;
            anonymous.assert_problem(401, "unauthorized");
            let refused = app.charge_as(SHOP_KEY, "k-x", &charge_body(), &headers).await;
            refused.assert_problem(400, "demo-account-only");
            let documented = app.demo().get_json("/problems/demo-account-only").await;
            assert_eq!(documented["title"], refused.json()["title"]);
        }
        assert_eq!((app.charges(), app.keys()), (0, 0), "nothing ran");

        // Two concurrent requests of the other account with one key: one charge.
        let (a, b) = tokio::join!(
            app.charge_as(SHOP_KEY, "k-race", &charge_body(), &[]),
            app.charge_as(SHOP_KEY, "k-race", &charge_body(), &[]),
        );
        assert_eq!((a.status, b.status), (201, 201));
        assert_eq!(app.charges(), 1, "idempotency cannot be switched off for it");
    }

    async fn a_demo_request_costs_the_demo_account_one_unit_of_its_rate_limit() {
        // 2 a second, bursts of 4. The demo's middleware authenticates the
        // demo account's request (its one charge of the limit), and the
        // handler, handed the demo's state, does not charge it again: four
        // requests in a row pass, where two did when each cost two.
        let app = spawn_app_with(|s| s.rate_limit_per_account = 2).await;
        let body = charge_body();
        let key_first = [("demo-mode", "key-first")];
        let answers = [
            app.charge_as(DEMO_KEY, "k-rate-1", &body, &key_first).await,
            app.charge_as(DEMO_KEY, "k-rate-2", &body, &[]).await,
            app.get_as(DEMO_KEY, "/charges").await,
            app.charge_as(DEMO_KEY, None, &body, &[("demo-fault", "delay-commit=1")]).await,
        ];
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        assert_eq!(statuses, [201, 201, 200, 201], "{:?}", answers.iter().map(|a| a.summary()).collect::<Vec<_>>());
        // And the limit still holds for the demo account: the bucket is empty.
        let mut limited = None;
        for _ in 0..10 {
            let r = app.get_as(DEMO_KEY, "/charges").await;
            if r.status == 429 {
                limited = Some(r);
                break;
            }
        }
        limited.expect("the demo account's limit holds").assert_problem(429, "rate-limited");
        assert_eq!(app.charges(), 3);
    }

    async fn crash_after_key_is_refused_unless_the_server_allows_it() {
        let app = spawn_app_with(|s| s.idempotency_mode = charges::idempotency::Mode::KeyFirst).await;
        let r = app
            .demo()
            .charge_with("k-crash", &charge_body(), &[("demo-fault", "crash-after-key")])
            .await;
        r.assert_problem(400, "invalid-request");
        assert!(r.json()["detail"].as_str().unwrap().contains("DEMO_ALLOW_CRASH"));
        assert_eq!((app.charges(), app.keys()), (0, 0));
        // Still alive.
        assert_eq!(app.demo().charge("k-after", &charge_body()).await.status, 201);
    }

    async fn expire_with_a_value_no_key_can_have_is_400_not_500() {
        let app = spawn_app().await;
        for path in ["/demo/keys/%00/expire", "/demo/keys/a%0Ab/expire", "/demo/keys/caf%C3%A9/expire"] {
            let r = app.post(path).await;
            r.assert_problem(400, "invalid-idempotency-key");
        }
        let long = format!("/demo/keys/{}/expire", "k".repeat(256));
        let r = app.post(&long).await;
        r.assert_problem(400, "invalid-idempotency-key");
        let r = app.post("/demo/keys/absent/expire").await;
        r.assert_problem(404, "not-found");
        // Any value the documented pattern matches is a key: absent here, so
        // 404, never 400 (spaces, quotes, `%`, `~`, the longest).
        let longest = format!("/demo/keys/{}/expire", "k".repeat(255));
        for path in ["/demo/keys/a%20b/expire", "/demo/keys/%22q%22/expire", "/demo/keys/a%25b/expire", "/demo/keys/~!*()/expire", &longest] {
            let r = app.post(path).await;
            r.assert_problem(404, "not-found");
        }
    }

    async fn the_demo_purge_deletes_only_the_demo_accounts_expired_keys() {
        let app = spawn_app().await;
        app.create_account("Shop", SHOP_KEY);
        assert_eq!(app.demo().charge("k-demo", &charge_body()).await.status, 201);
        assert_eq!(app.charge_as(SHOP_KEY, "k-shop", &charge_body(), &[]).await.status, 201);
        app.execute(&format!("UPDATE idempotency_keys SET expires_at = {}", app.at(-5)));
        // The purge answers the rows it deleted, and nothing else (not the tables).
        let purged = app.post("/demo/purge").await;
        assert_eq!(purged.status, 200);
        assert_eq!(purged.json(), serde_json::json!({"purged": 1}));
        assert!(purged.body.len() < 1024, "{} bytes", purged.body.len());
        assert_eq!(app.count("idempotency_keys WHERE key = 'k-shop'"), 1, "another account's row is not the demo's to delete");
    }

    async fn with_demo_mode_off_the_demo_key_is_refused_and_nothing_mentions_it() {
        let app = spawn_app_with(|s| s.demo = Some(false)).await;
        let r = app.demo().charge("k", &charge_body()).await;
        r.assert_problem(401, "unauthorized");
        assert!(!r.body.contains("sk_test_demo"), "{}", r.body);
        let doc = app.get("/openapi.json").await.body;
        assert!(!doc.contains("sk_test_demo"), "the document mentions the demo key");
        let doc: Value = serde_json::from_str(&doc).unwrap();
        let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        assert!(paths.iter().all(|p| !p.starts_with("/demo/")), "{paths:?}");
        assert!(paths.iter().any(|p| *p == "/charges"));
        assert_eq!(app.count("accounts WHERE demo"), 0, "no demo account is seeded");
    }

    async fn with_demo_mode_on_the_document_lists_the_demo_routes() {
        let app = spawn_app().await;
        let doc = app.demo().get_json("/openapi.json").await;
        assert!(doc["paths"]["/demo/state"].is_object());
    }
}

crate::on_both_backends! {
    /// `charges serve` has no demo behaviour and no demo account, on
    /// loopback as on any address; `charges` (the default command, `demo`)
    /// refuses an address other machines reach; `serve` with `DEMO=true`
    /// has both, and logs a warning saying what that exposes.
    async fn serve_has_no_demo_unless_told_and_the_default_command_refuses_a_network_address() {
        let db = crate::support::TestDatabase::create_for(crate::support::backend());
        for bind in ["0.0.0.0:0", "127.0.0.1:0"] {
            let server = crate::support::ServerProcess::start_with(&["serve"], &db.url, &[("BIND", bind)]);
            let app = crate::support::AppClient::new(&format!("http://{}", server.addr()));
            for path in ["/demo/state", "/demo/config", "/"] {
                app.get(path).await.assert_problem(404, "not-found");
            }
            assert_eq!(app.post("/demo/reset").await.status, 404);
            app.demo().charge("k-net", &charge_body()).await.assert_problem(401, "unauthorized");
            let naive = [("demo-mode", "check-then-insert"), ("demo-fault", "crash-after-key")];
            app.demo().charge_with("k-net", &charge_body(), &naive).await.assert_problem(401, "unauthorized");
            let doc = app.get("/openapi.json").await.body;
            assert!(!doc.contains("/demo/") && !doc.contains("sk_test_demo"), "the document offers demo powers");
            assert_eq!(db.count("accounts"), 0, "no demo account is seeded");
            assert!(!server.logs().contains("DEMO=true on an address"));
            assert!(server.stdout().contains("demo mode: off"), "{}", server.stdout());
            assert!(app.get("/healthz").await.status == 200);
        }
        let refused = crate::support::ServerProcess::try_start_with("demo", &[], &db.url, &[("BIND", "0.0.0.0:0")])
            .err()
            .expect("the default command refuses 0.0.0.0");
        assert!(refused.contains("loopback only") && refused.contains("charges serve"), "{refused}");
        assert_eq!(db.count("accounts"), 0, "no demo account is seeded");

        let server = crate::support::ServerProcess::start_with(&["serve"], &db.url, &[("BIND", "0.0.0.0:0"), ("DEMO", "true")]);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !server.logs().contains("DEMO=true on an address") && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(server.logs().contains("DEMO=true on an address"), "{}", server.logs());
        let app = crate::support::AppClient::new(&format!("http://{}", server.addr()));
        assert_eq!(app.demo().charge("k-net", &charge_body()).await.status, 201, "told, it is a demo");
        assert_eq!(db.count("accounts WHERE demo"), 1);
    }
}

/// PostgreSQL only: SQLite's global write lock admits one delayed
/// transaction at a time anyway (the README says so).
#[cfg(postgres_tests)]
#[tokio::test]
async fn delayed_transactions_beyond_the_cap_get_503_and_other_accounts_do_not_wait() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let app = spawn_app_with(|s| s.demo_max_delayed = Some(2)).await;
            app.create_account("Shop", SHOP_KEY);
            let held = [("demo-fault", "delay-commit=1500")];
            let body = charge_body();
            // One held transaction per sandbox: three sandboxes for three.
            let (one, two, three) = (app.demo(), app.new_sandbox().await, app.new_sandbox().await);
            let started = Instant::now();
            let (a, b, (c, other)) = tokio::join!(
                one.charge_with("k-d1", &charge_body(), &held),
                two.charge_with("k-d2", &charge_body(), &held),
                async {
                    app.until_held(2).await;
                    // The third is sent before the waiters below, which would
                    // otherwise take the demo's in-flight places first
                    // and make it wait until a place is free again.
                    let c = three.charge_with("k-d3", &charge_body(), &held).await;
                    // While the cap is full, and ten of the demo's requests wait
                    // on one held key, another account is served at once.
                    let waiters: Vec<_> = (0..10).map(|_| one.charge("k-d1", &body)).collect();
                    let waiting = futures::future::join_all(waiters);
                    let other = async {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let sent = Instant::now();
                        let r = app.charge_as(SHOP_KEY, "k-shop", &charge_body(), &[]).await;
                        (r.status, sent.elapsed())
                    };
                    let (_, other) = tokio::join!(waiting, other);
                    (c, other)
                },
            );
            assert_eq!(other.0, 201);
            assert!(
                other.1 < Duration::from_millis(500),
                "another account waited {:?}",
                other.1
            );
            assert_eq!((a.status, b.status), (201, 201));
            c.assert_problem(503, "service-unavailable");
            // It says that every slot is held, and Retry-After is when the
            // first is given back (the 1.5 s holds began before it was sent).
            assert_eq!(c.header("demo-slots"), Some("held=2, max=2"));
            let retry_after: u64 = c.header("retry-after").unwrap().parse().unwrap();
            assert!((1..=2).contains(&retry_after), "Retry-After: {retry_after}");
            assert!(
                c.json()["detail"]
                    .as_str()
                    .unwrap()
                    .contains("delay-commit"),
                "{}",
                c.body
            );
            assert!(started.elapsed() >= Duration::from_millis(1500));
            assert_eq!(
                app.charges(),
                3,
                "two demo charges and the shop's; the refused one rolled back"
            );
            assert_eq!(app.count("idempotency_keys WHERE key = 'k-d3'"), 0);
            // Its retry, once a place is free, runs.
            let retry = three.charge_with("k-d3", &charge_body(), &held).await;
            assert_eq!(retry.status, 201);
        })
        .await
}

/// SQLite only: its write lock is global, so a delayed transaction holds
/// every account's writes. One delay at a time, and none starts within a
/// gap after one ends: another account's write waits for at most one delay,
/// however many the demo sends, and is never refused for it.
#[tokio::test]
async fn on_sqlite_delays_go_one_at_a_time_and_another_account_waits_for_one_at_most() {
    let app = spawn_app_with(|s| s.demo_max_delayed = Some(2)).await;
    assert_eq!(app.backend(), crate::support::TestBackend::Sqlite);
    app.create_account("Shop", SHOP_KEY);
    const HOLD_MS: u64 = 2500;
    let held = [("demo-fault", "delay-commit=2500")];
    let started = Instant::now();
    let (first, (others, shop)) = tokio::join!(
        app.demo().charge_with("k-d0", &charge_body(), &held),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            // Four more delays queue for the write lock behind the first…
            let app = &app;
            let others: Vec<_> = (1..=4)
                .map(|i| async move {
                    let key = format!("k-d{i}");
                    app.demo()
                        .charge_with(key.as_str(), &charge_body(), &held)
                        .await
                })
                .collect();
            let others = futures::future::join_all(others);
            // …and so does another account's charge, sent after them.
            let shop = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let sent = Instant::now();
                let r = app.charge_as(SHOP_KEY, "k-shop", &charge_body(), &[]).await;
                (r.status, sent.elapsed())
            };
            tokio::join!(others, shop)
        },
    );
    assert_eq!(first.status, 201);
    assert_eq!(shop.0, 201, "another account's write is not refused");
    assert!(
        shop.1 < Duration::from_millis(HOLD_MS + 1000),
        "another account waited {:?}: more than the one delay it was sent into",
        shop.1
    );
    for other in &others {
        match other.status {
            503 => {
                other.assert_problem(503, "service-unavailable");
                assert!(
                    other.json()["detail"]
                        .as_str()
                        .unwrap()
                        .contains("delay-commit"),
                    "{}",
                    other.body
                );
            }
            201 => {}
            status => panic!("a queued delay answered {status}: {}", other.body),
        }
    }
    let refused = others.iter().filter(|r| r.status == 503).count();
    assert!(
        refused >= 3,
        "the delays that queued behind the first were refused: {refused} of 4"
    );
    assert_eq!(
        app.charges(),
        2 + (4 - refused as i64),
        "refused delays rolled back"
    );
    assert!(started.elapsed() < Duration::from_millis(3 * HOLD_MS));
}
