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
