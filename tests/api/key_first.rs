//! The key-first design: the key is committed before the charge runs, so a
//! retry in flight gets 409 at once, and a key left behind by a crash is
//! taken over once its lease has run out. Also the purge of expired keys.

use std::time::{Duration, Instant};

use charges::idempotency::Fingerprint;
use serde_json::Value;

use crate::support::{
    DEMO_KEY, ServerProcess, TEST_ACCOUNT, TestApp, TestBackend, TestDatabase, charge_body,
    spawn_app, spawn_app_with,
};

const KEY_FIRST: (&str, &str) = ("demo-mode", "key-first");

fn fingerprint_of(body: &Value) -> String {
    Fingerprint::of("POST", "/charges", body)
        .as_str()
        .to_owned()
}

/// A row of `account`'s as a worker that died between the two transactions
/// leaves it.
fn insert_stuck_key(app: &TestApp, account: &str, key: &str, body: &Value, lease_left_secs: i64) {
    app.execute(&format!(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token) \
         SELECT id, '{key}', '{}', 'in_progress', {}, {}, {}, '{}' FROM accounts WHERE name = '{account}'",
        fingerprint_of(body),
        app.at(0),
        app.at(86_400),
        app.at(lease_left_secs),
        uuid::Uuid::new_v4(),
    ));
}

crate::on_both_backends! {
    async fn a_retry_while_the_first_is_in_flight_gets_409_at_once_and_later_the_stored_201() {
        let app = spawn_app().await;
        let body = charge_body();
        let first = app.demo().charge_with(
            "k-kf",
            &body,
            &[KEY_FIRST, ("demo-fault", "delay-commit=1500")],
        );
        let retry = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let sent = Instant::now();
            let r = app.demo().charge_with("k-kf", &body, &[KEY_FIRST]).await;
            (r, sent.elapsed())
        };
        let (first, (retry, took)) = tokio::join!(first, retry);

        retry.assert_problem(409, "idempotency-key-in-flight");
        assert_eq!(retry.header("retry-after"), Some("1"));
        assert!(
            took < Duration::from_millis(700),
            "409 comes at once, not after the wait: {took:?}"
        );
        assert_eq!(first.status, 201);

        let later = app.demo().charge_with("k-kf", &body, &[KEY_FIRST]).await;
        assert_eq!(later.status, 201);
        assert_eq!(later.header("idempotent-replayed"), Some("true"));
        assert_eq!(later.body, first.body);
        assert_eq!(app.charges(), 1);
    }

    async fn the_setting_makes_key_first_the_default_and_a_reused_key_is_still_422() {
        let app = spawn_app_with(|s| s.idempotency_mode = charges::idempotency::Mode::KeyFirst).await;
        let first = app.charge("k-kf-set", &charge_body()).await;
        assert_eq!(first.status, 201);
        let replay = app.charge("k-kf-set", &charge_body()).await;
        assert_eq!(replay.body, first.body);
        let other = serde_json::json!({"amount": 1, "currency": "usd"});
        app.charge("k-kf-set", &other).await
            .assert_problem(422, "idempotency-key-reused");
        assert_eq!(app.charges(), 1);
    }

    async fn a_business_failure_releases_the_key_so_the_retry_runs_as_the_first() {
        let app = spawn_app().await;
        let failed = app
            .demo()
            .charge_with(
                "k-kf-fail",
                &charge_body(),
                &[KEY_FIRST, ("demo-fault", "fail-before-commit")],
            )
            .await;
        failed.assert_problem(500, "internal");
        assert_eq!(
            (app.charges(), app.keys()),
            (0, 0),
            "the key row was released"
        );
        let retry = app.demo().charge_with("k-kf-fail", &charge_body(), &[KEY_FIRST]).await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), None);
    }

    async fn a_stuck_key_is_409_while_its_lease_lives_and_is_reclaimed_after() {
        let app = spawn_app().await;
        let body = charge_body();
        insert_stuck_key(&app, "Demo account", "k-stuck", &body, 3600);
        for mode in ["key-first", "atomic"] {
            let r = app.demo().charge_with("k-stuck", &body, &[("demo-mode", mode)]).await;
            r.assert_problem(409, "idempotency-key-in-flight");
        }
        assert_eq!(app.charges(), 0);

        app.execute(&format!("UPDATE idempotency_keys SET locked_until = {}", app.at(-1)));
        let other = serde_json::json!({"amount": 7, "currency": "usd"});
        let mismatch = app.demo().charge_with("k-stuck", &other, &[KEY_FIRST]).await;
        mismatch.assert_problem(422, "idempotency-key-reused");

        let reclaimed = app.demo().charge_with("k-stuck", &body, &[KEY_FIRST]).await;
        assert_eq!(reclaimed.status, 201);
        assert_eq!(reclaimed.header("idempotent-replayed"), None);
        assert_eq!((app.charges(), app.keys()), (1, 1));
        assert_eq!(
            app.count(&format!(
                "idempotency_keys k WHERE status = 'completed' AND {} IS NOT NULL",
                app.key_charge_id()
            )),
            1
        );
    }

    async fn of_many_concurrent_reclaimers_exactly_one_charges() {
        let app = spawn_app_with(|s| s.idempotency_mode = charges::idempotency::Mode::KeyFirst).await;
        let body = charge_body();
        insert_stuck_key(&app, TEST_ACCOUNT, "k-reclaim", &body, -1);
        let requests = (0..20).map(|_| async {
            app.charge("k-reclaim", &body).await
            .status
        });
        let statuses = futures::future::join_all(requests).await;
        assert!(
            statuses.iter().all(|s| *s == 201 || *s == 409),
            "{statuses:?}"
        );
        assert!(statuses.contains(&201));
        assert_eq!(app.charges(), 1);
    }

    async fn fifty_concurrent_requests_with_one_key_never_charge_twice_in_either_mode() {
        for mode in ["atomic", "key-first"] {
            let app = spawn_app().await;
            let body = charge_body();
            let headers = [("demo-mode", mode), ("demo-fault", "delay-commit=200")];
            let requests = (0..50).map(|_| async {
                app.demo().charge_with("k-50", &body, &headers).await
            });
            let responses = futures::future::join_all(requests).await;
            let created: Vec<_> = responses.iter().filter(|r| r.status == 201).collect();
            assert!(
                responses
                    .iter()
                    .all(|r| r.status == 201 || (mode == "key-first" && r.status == 409)),
                "{mode}"
            );
            assert!(
                created.iter().all(|r| r.body == created[0].body),
                "{mode}: one response for all"
            );
            assert_eq!(app.charges(), 1, "{mode}");
            // Every client converges on the same 201 once the first has finished.
            let retry = app.demo().charge_with("k-50", &body, &[("demo-mode", mode)]).await;
            assert_eq!(retry.body, created[0].body, "{mode}");
        }
    }

    async fn the_purge_removes_exactly_the_expired_keys_and_a_retry_after_it_is_new() {
        let app = spawn_app().await;
        for key in ["k-p1", "k-p2", "k-p3"] {
            app.demo().charge(key, &charge_body()).await;
        }
        app.execute(&format!(
            "UPDATE idempotency_keys SET expires_at = {} WHERE key IN ('k-p1', 'k-p2')",
            app.at(-1)
        ));
        let purged: Value = app.post_json("/demo/purge").await;
        assert_eq!(purged["purged"], 2);
        assert_eq!(app.keys(), 1);
        assert_eq!(app.count("idempotency_keys WHERE key = 'k-p3'"), 1);
        assert_eq!(app.charges(), 3, "the purge deletes keys, never charges");

        let retry = app.demo().charge("k-p1", &charge_body()).await;
        assert_eq!(retry.status, 201);
        assert_eq!(retry.header("idempotent-replayed"), None);
        assert_eq!(app.charges(), 4);
    }

    async fn the_purge_command_and_the_background_purger_delete_expired_keys_in_batches() {
        let app = spawn_app().await;
        let past = app.at(-60);
        let token = match app.backend() {
            TestBackend::Postgres => "gen_random_uuid()",
            TestBackend::Sqlite => "'lease-' || n.i",
        };
        app.execute(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500) \
             INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token) \
             SELECT a.id, 'old-' || n.i, 'sha256:x', 'in_progress', {past}, {past}, {past}, {token} \
             FROM accounts a, n WHERE a.name = '{TEST_ACCOUNT}'"
        ));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
            .args([
                "purge-expired",
                "--database-url",
                &app.db.url,
                "--purge-batch",
                "1000",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).starts_with("purged 2500 expired"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert_eq!(app.keys(), 0);

        // The purger in `serve`, on a short interval.
        let db = TestDatabase::create();
        let server = ServerProcess::start(&db.url, &[("PURGE_INTERVAL", "200ms")]);
        db.create_test_account();
        assert_eq!(server.client().charge("k-bg", &charge_body()).await.status, 201);
        db.execute(&format!("UPDATE idempotency_keys SET expires_at = {}", db.at(-1)));
        let deadline = Instant::now() + Duration::from_secs(5);
        while db.count("idempotency_keys") > 0 {
            assert!(
                Instant::now() < deadline,
                "the background purger did not run"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

crate::on_both_backends! {
    async fn a_worker_whose_lease_was_taken_over_cannot_complete_and_answers_with_the_winners_response() {
        let app = spawn_app_with(|s| s.idempotency_lease = Duration::from_millis(300)).await;
        let body = charge_body();
        // A: slow, outlives its 300 ms lease. B: arrives after the lease ran out.
        let slow = app.demo().charge_with(
            "k-lease",
            &body,
            &[KEY_FIRST, ("demo-fault", "delay-commit=1500")],
        );
        let late = async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            app.demo().charge_with("k-lease", &body, &[KEY_FIRST]).await
        };
        let (slow, late) = tokio::join!(slow, late);

        assert_eq!((slow.status, late.status), (201, 201), "{} {}", slow.body, late.body);
        match app.backend() {
            // B took the expired lease over and ran; A's guarded completion
            // found another lease, rolled back, and answers B's result.
            TestBackend::Postgres => {
                assert!(!late.replayed(), "B took the key over and ran");
                assert!(slow.replayed(), "A rolled back and answers B's result");
            }
            // SQLite locks the whole database for A's transaction: B's
            // takeover waits for A's commit, then finds the key completed.
            TestBackend::Sqlite => {
                assert!(!slow.replayed(), "A completed under its lease");
                assert!(late.replayed(), "B waited for A and replays its result");
            }
        }
        assert_eq!(slow.body, late.body);
        assert_eq!(app.charges(), 1);
    }

    /// The crash window of the key-first design, for real: the process is killed
    /// with SIGKILL after committing the key and before the charge's transaction.
    async fn a_process_killed_between_the_two_transactions_leaves_a_key_that_is_409_until_its_lease_runs_out() {
        let db = TestDatabase::create();
        let env = [
            ("IDEMPOTENCY_MODE", "key-first"),
            ("IDEMPOTENCY_LEASE", "2s"),
            ("DEMO_ALLOW_CRASH", "true"),
        ];
        let mut server = ServerProcess::start(&db.url, &env);
        let api = server.client();
        let crash = [("demo-fault", "crash-after-key")];
        let crashed = api
            .try_send(api.charge_request(DEMO_KEY, "k-crash", &charge_body(), &crash))
            .await;
        assert!(
            crashed.is_err(),
            "the connection died with the process: {crashed:?}"
        );
        let status = server
            .wait_for_exit(Duration::from_secs(5))
            .expect("the process is gone");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "killed by SIGKILL");

        let restarted = ServerProcess::start(&db.url, &env);
        let api = restarted.client();
        let in_flight = api.demo().charge("k-crash", &charge_body()).await;
        in_flight.assert_problem(409, "idempotency-key-in-flight");

        tokio::time::sleep(Duration::from_millis(2100)).await;
        let after_lease = api.demo().charge("k-crash", &charge_body()).await;
        assert_eq!(after_lease.status, 201, "{}", after_lease.body);
        assert_eq!(after_lease.header("idempotent-replayed"), None);
        let replay = api.demo().charge("k-crash", &charge_body()).await;
        assert_eq!(replay.body, after_lease.body);

        assert_eq!(db.count("charges"), 1);
    }
}
