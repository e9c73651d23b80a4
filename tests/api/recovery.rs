//! Recovery finishes a key the way it was started (issue #38, finding 2):
//! a charge whose worker died during its card network call leaves its key
//! in progress, registered with that network. An instance without the
//! network leaves the key alone (and says so once) instead of completing it
//! as a charge with no authorization; an instance with the same network
//! finishes it, authorized once. Real processes, killed with SIGKILL; the
//! test account's request.

use std::time::{Duration, Instant};

use crate::support::{ServerProcess, TestDatabase, charge_body};

/// A lease as short as the network's timeout and the pool's allow.
const FAST: &[(&str, &str)] = &[
    ("NETWORK_TIMEOUT", "2s"),
    ("POOL_TIMEOUT", "1s"),
    ("IDEMPOTENCY_LEASE", "4s"),
    ("RECOVERY_INTERVAL", "300ms"),
];

fn start(db: &TestDatabase, name: &str, env: &[(&str, &str)]) -> ServerProcess {
    let env: Vec<(&str, &str)> = FAST.iter().chain(env).copied().collect();
    ServerProcess::try_start_with(name, &["serve"], &db.url, &env).unwrap_or_else(|e| panic!("{e}"))
}

/// The key row's status and, once completed, its charge's authorization.
fn key_state(db: &TestDatabase) -> (String, Option<String>) {
    let status = db.strings("SELECT status AS value FROM idempotency_keys");
    let authorized =
        db.strings("SELECT coalesce(CAST(authorization_id AS TEXT), 'none') AS value FROM charges");
    (status.concat(), authorized.first().cloned())
}

crate::on_both_backends! {
    async fn a_key_left_during_the_network_call_is_finished_only_through_that_network() {
        let (db, ledger) = (TestDatabase::create(), TestDatabase::create());
        let network: &[(&str, &str)] = &[
            ("NETWORK_URL", "in-process"),
            ("NETWORK_DATABASE_URL", &ledger.url),
        ];
        // 1. The first instance dies while the network thinks.
        let slow: Vec<(&str, &str)> = network.iter().copied().chain([("NETWORK_LATENCY", "1500ms"), ("RECOVERY_INTERVAL", "0s")]).collect();
        let mut first = start(&db, "with the network", &slow);
        db.create_test_account();
        let api = first.client();
        let request = api.charge_request(crate::support::TEST_KEY, "k-stuck", &charge_body(), &[]);
        let sent = tokio::spawn(async move { api.try_send(request).await });
        let deadline = Instant::now() + Duration::from_secs(5);
        while key_state(&db).0 != "in_progress" {
            assert!(Instant::now() < deadline, "the key was never registered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        first.kill();
        assert!(sent.await.unwrap().is_err(), "no answer from a killed server");
        // 2. An instance without a network: past the lease and several
        //    passes, the key is still in progress, and it said why.
        let without = start(&db, "without a network", &[("NETWORK_URL", "off")]);
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!(key_state(&db), ("in_progress".to_owned(), None), "never a charge without its authorization");
        let said = without.logs().matches("left for an instance that does").count();
        assert_eq!(said, 1, "said once: {}", without.logs());
        // 3. An instance with the same network finishes it, authorized.
        let with = start(&db, "with the network again", network);
        let deadline = Instant::now() + Duration::from_secs(10);
        while key_state(&db).0 != "completed" {
            assert!(Instant::now() < deadline, "never recovered: {}", with.logs());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (_, authorized) = key_state(&db);
        assert!(authorized.is_some_and(|a| a != "none"), "the charge holds its authorization");
        assert_eq!(ledger.count("authorizations"), 1, "authorized once");
        let retry = with.client().charge("k-stuck", &charge_body()).await;
        assert!(retry.replayed(), "{}", retry.body);
        drop(without);
    }
}

/// `n` rows stuck in progress for `account` (their lease over `ago`
/// seconds ago), as dead workers leave them: the request each was for kept.
fn stuck_rows(app: &crate::support::TestApp, account: i64, prefix: &str, n: i64, ago: i64) {
    let series = match app.backend() {
        crate::support::TestBackend::Postgres => format!("generate_series(1, {n}) AS s(i)"),
        crate::support::TestBackend::Sqlite => format!(
            "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n}) SELECT i FROM s) AS s"
        ),
    };
    let token = match app.backend() {
        crate::support::TestBackend::Postgres => "gen_random_uuid()",
        crate::support::TestBackend::Sqlite => "lower(hex(randomblob(16)))",
    };
    app.execute(&format!(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, \
         locked_until, lease_token, request_path, request_body) \
         SELECT {account}, '{prefix}-' || s.i, 'sha256:stuck', 'in_progress', {now}, {tomorrow}, {past}, \
         {token}, '/charges', '{{\"amount\": 100, \"currency\": \"jpy\"}}' FROM {series}",
        now = app.at(0),
        tomorrow = app.at(86_400),
        past = app.at(-ago),
    ));
}

crate::on_both_backends! {
    /// Recovery is fair across accounts (issue #38, finding 5): with 1 000
    /// of one account's keys stuck longer (a flood the public demo key can
    /// make), another account's stuck key is finished in the first pass,
    /// not after ten passes of the flood.
    async fn one_account_s_flood_of_stuck_keys_does_not_delay_another_account_s() {
        let interval = Duration::from_secs(2);
        let app = crate::support::spawn_app_with(|s| s.recovery_interval = interval).await;
        let flooder = app.create_account("Flooder", "sk_live_flooder");
        let test = app.db.strings(&format!(
            "SELECT CAST(id AS TEXT) AS value FROM accounts WHERE name = '{}'",
            crate::support::TEST_ACCOUNT
        ));
        let test: i64 = test[0].parse().unwrap();
        stuck_rows(&app, flooder, "flood", 1000, 3600);
        stuck_rows(&app, test, "mine", 1, 60);
        let started = Instant::now();
        let mine = "idempotency_keys WHERE key = 'mine-1' AND status = 'completed'";
        while app.count(mine) == 0 {
            assert!(
                started.elapsed() < interval * 2 + Duration::from_secs(1),
                "another account's stuck key waited behind the flood: {} of 1000 done",
                app.count("idempotency_keys WHERE key LIKE 'flood-%' AND status = 'completed'")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
