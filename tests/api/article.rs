//! The article's design by default (issue #37): `charges serve` with every
//! default has no card network, so a keyed charge is one transaction that
//! registers the key, inserts the charge and stores the 201; a concurrent
//! duplicate waits on the first one's lock, replays after its commit, and
//! runs as the first after its rollback. Each claim is read from the
//! database itself (triggers, PostgreSQL's locks, SQLite's WAL), not from
//! the app's own logs. The requests are the test account's, a real one.

#[cfg(postgres_tests)]
use std::time::{Duration, Instant};

#[cfg(postgres_tests)]
use crate::support::AppClient;
use crate::support::server::UNSET;
use crate::support::{ServerProcess, TestBackend, TestDatabase, charge_body};

/// `charges serve` with the binary's own default for NETWORK_URL (the test
/// harness sets `off` explicitly otherwise).
fn serve_with_defaults(db: &TestDatabase) -> ServerProcess {
    let server = ServerProcess::start_with(&["serve"], &db.url, &[("NETWORK_URL", UNSET)]);
    db.create_test_account();
    server
}

/// Triggers that record, as the database runs them, every INSERT and UPDATE
/// of a key row or a charge, the key row's status, and (PostgreSQL) the
/// transaction it ran in.
fn audit(db: &TestDatabase) {
    let statements: &[&str] = match db.backend() {
        TestBackend::Postgres => &[
            "CREATE TABLE audit (seq bigserial PRIMARY KEY, tbl text, op text, status text, txid bigint)",
            "CREATE FUNCTION audit_key() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             INSERT INTO audit (tbl, op, status, txid) VALUES ('key', TG_OP, NEW.status, txid_current()); \
             RETURN NEW; END $$",
            "CREATE FUNCTION audit_charge() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
             INSERT INTO audit (tbl, op, status, txid) VALUES ('charge', TG_OP, NULL, txid_current()); \
             RETURN NEW; END $$",
            "CREATE TRIGGER audit_keys AFTER INSERT OR UPDATE ON idempotency_keys \
             FOR EACH ROW EXECUTE FUNCTION audit_key()",
            "CREATE TRIGGER audit_charges AFTER INSERT OR UPDATE ON charges \
             FOR EACH ROW EXECUTE FUNCTION audit_charge()",
        ],
        TestBackend::Sqlite => &[
            "CREATE TABLE audit (seq INTEGER PRIMARY KEY, tbl TEXT, op TEXT, status TEXT, txid INTEGER)",
            "CREATE TRIGGER audit_keys_insert AFTER INSERT ON idempotency_keys BEGIN \
             INSERT INTO audit (tbl, op, status) VALUES ('key', 'INSERT', NEW.status); END",
            "CREATE TRIGGER audit_keys_update AFTER UPDATE ON idempotency_keys BEGIN \
             INSERT INTO audit (tbl, op, status) VALUES ('key', 'UPDATE', NEW.status); END",
            "CREATE TRIGGER audit_charges_insert AFTER INSERT ON charges BEGIN \
             INSERT INTO audit (tbl, op) VALUES ('charge', 'INSERT'); END",
            "CREATE TRIGGER audit_charges_update AFTER UPDATE ON charges BEGIN \
             INSERT INTO audit (tbl, op) VALUES ('charge', 'UPDATE'); END",
        ],
    };
    for sql in statements {
        db.execute(sql);
    }
}

/// The audit's rows, in order: "key INSERT completed", "charge INSERT", ….
fn audited(db: &TestDatabase) -> Vec<String> {
    let rows = db.strings(
        "SELECT tbl || ' ' || op || coalesce(' ' || status, '') AS value FROM audit ORDER BY seq",
    );
    rows.into_iter().collect()
}

/// SQLite: the commits in the database's write-ahead log (frames whose
/// header gives the database's size after a commit), and the log's salt:
/// what SQLite itself wrote, counted from its file.
fn wal_commits(db: &TestDatabase) -> (Vec<u8>, usize) {
    let path = db.url.strip_prefix("sqlite://").expect("an SQLite URL");
    let wal = std::fs::read(format!("{path}-wal")).unwrap_or_default();
    if wal.len() < 32 {
        return (Vec::new(), 0);
    }
    let page = u32::from_be_bytes(wal[8..12].try_into().unwrap()) as usize;
    let salt = wal[16..24].to_vec();
    let mut commits = 0;
    let mut at = 32;
    while at + 24 + page <= wal.len() && wal[at + 8..at + 16] == salt[..] {
        if wal[at + 4..at + 8] != [0, 0, 0, 0] {
            commits += 1;
        }
        at += 24 + page;
    }
    (salt, commits)
}

crate::on_both_backends! {
    /// With every default, one keyed charge is one transaction: the key row
    /// inserted already completed (its 201 stored in the statement that
    /// registers it) and the charge inserted, committed together, nothing
    /// updated afterwards. (With a card network the key would be committed
    /// in progress first, and completed by a second transaction.)
    async fn a_keyed_charge_is_one_transaction_of_key_charge_and_stored_response_by_default() {
        let db = TestDatabase::create();
        let server = serve_with_defaults(&db);
        let banner = server.banner_line("card network: ");
        assert!(banner.contains("off: a charge is one transaction"), "{banner}");
        audit(&db);
        let before = (db.backend() == TestBackend::Sqlite).then(|| wal_commits(&db));
        let api = server.client();
        let first = api.charge("k-article", &charge_body()).await;
        assert_eq!(first.status, 201, "{}", first.body);
        assert_eq!(first.json()["authorization_id"], serde_json::Value::Null);
        assert_eq!(audited(&db), ["key INSERT completed", "charge INSERT"]);
        match before {
            // The two writes ran in one transaction, as PostgreSQL numbers them.
            None => assert_eq!(db.count("(SELECT DISTINCT txid FROM audit) t"), 1),
            // One commit in SQLite's log, and no checkpoint in between.
            Some((salt, commits)) => {
                let (salt_after, commits_after) = wal_commits(&db);
                assert_eq!(salt_after, salt, "the WAL was not reset meanwhile");
                assert_eq!(commits_after, commits + 1, "one commit");
            }
        }
        // The retry is answered from the stored response: nothing written.
        let retry = api.charge("k-article", &charge_body()).await;
        assert!(retry.replayed());
        assert_eq!(retry.body, first.body);
        assert_eq!(audited(&db).len(), 2);
    }
}

/// PostgreSQL: waits until `from_where` counts one row (bounded).
#[cfg(postgres_tests)]
async fn until_one(db: &TestDatabase, what: &str, from_where: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.count(from_where) != 1 {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A's session, held at its charge's INSERT (the test holds the charges
/// table), after its key's INSERT.
#[cfg(postgres_tests)]
const A_AT_ITS_CHARGE: &str = "pg_stat_activity WHERE datname = current_database() \
     AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO \"charges\"%'";

/// B's session, its key's INSERT waiting on a lock not granted (pg_locks) of
/// A's transaction (`pg_blocking_pids`), A being held at its charge.
#[cfg(postgres_tests)]
const B_WAITING_ON_A: &str = "pg_stat_activity b JOIN pg_locks l ON l.pid = b.pid AND NOT l.granted \
     WHERE b.datname = current_database() AND l.locktype = 'transactionid' \
     AND b.query LIKE 'INSERT INTO \"idempotency_keys\"%' \
     AND EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = ANY (pg_blocking_pids(b.pid)) \
                 AND a.query LIKE 'INSERT INTO \"charges\"%')";

/// A first request held inside its transaction, and a duplicate sent while
/// it is: the duplicate's key INSERT waits on the first's transaction.
#[cfg(postgres_tests)]
async fn first_held_and_duplicate_waiting(
    db: &TestDatabase,
    api: &AppClient,
    key: &'static str,
) -> (
    tokio::task::JoinHandle<crate::support::Captured>,
    tokio::task::JoinHandle<crate::support::Captured>,
) {
    let a = tokio::spawn({
        let api = api.clone();
        async move { api.charge(key, &charge_body()).await }
    });
    until_one(db, "A held at its charge's INSERT", A_AT_ITS_CHARGE).await;
    assert_eq!(db.keys(), 0, "A's key row is invisible until A commits");
    let b = tokio::spawn({
        let api = api.clone();
        async move { api.charge(key, &charge_body()).await }
    });
    until_one(db, "B waiting on A's transaction", B_WAITING_ON_A).await;
    (a, b)
}

/// With every default, a duplicate sent while the first holds its
/// transaction waits on a lock (its key's INSERT, on the first's
/// transaction: `pg_locks`, not granted), and replays once the first
/// commits: one charge.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_concurrent_duplicate_waits_on_the_first_ones_lock_then_replays() {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let server = serve_with_defaults(&db);
    let api = server.client();
    let hold = db.hold_charge_writes();
    let (a, b) = first_held_and_duplicate_waiting(&db, &api, "k-wait").await;
    drop(hold);
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(!a.replayed());
    assert_eq!(b.status, 201, "{}", b.body);
    assert!(b.replayed(), "B waited, then replayed A's stored response");
    assert_eq!(b.body, a.body);
    assert_eq!(db.charges(), 1);
}

/// The rollback path: the first's transaction ends without a commit (its
/// session is ended while it holds the key), so the duplicate that waited
/// on it inserts the key itself and runs as the first: one charge, its own
/// 201, not a replay.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_duplicate_runs_as_the_first_when_the_first_rolls_back() {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let server = serve_with_defaults(&db);
    let api = server.client();
    let hold = db.hold_charge_writes();
    let (a, b) = first_held_and_duplicate_waiting(&db, &api, "k-rollback").await;
    let ended = db.count(&format!(
        "(SELECT pg_terminate_backend(pid) FROM {A_AT_ITS_CHARGE}) t"
    ));
    assert_eq!(ended, 1, "A's session ended: its transaction rolls back");
    let a = a.await.unwrap();
    assert_ne!(a.status, 201, "A's transaction never committed: {}", a.body);
    // B took the key and now waits at its own charge's INSERT.
    until_one(&db, "B held at its charge's INSERT", A_AT_ITS_CHARGE).await;
    drop(hold);
    let b = b.await.unwrap();
    assert_eq!(b.status, 201, "{}", b.body);
    assert!(!b.replayed(), "B ran as the first");
    assert_eq!(db.charges(), 1);
    let again = api.charge("k-rollback", &charge_body()).await;
    assert!(again.replayed());
    assert_eq!(again.body, b.body);
}
