//! One database per test, on either backend, and the [`Connections`] the
//! protocol runs on: a fresh PostgreSQL database created on
//! `TEST_DATABASE_URL`'s server and dropped `WITH (FORCE)` when the guard
//! drops (a panic included), or an SQLite file in WAL mode deleted then.
//! Each gets the crate's `sql/` file and a table of the tests' own,
//! `orders`, that the operations write.
//!
//! A test is written once, generic over [`TestConn`] (the connection type,
//! which is the protocol's store), and instantiated for both backends by
//! [`on_both_backends!`]. Without `TEST_DATABASE_URL` (at build time: the
//! crate's `build.rs`) a PostgreSQL test is reported ignored, with the
//! reason; run anyway, it says `skipped: TEST_DATABASE_URL unset` and returns.

#![allow(dead_code)]

use std::io::Write as _;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::sqlite::SqliteConnection;
use idempotency::{Connections, Error, KeyState, KeyStore};

pub const POSTGRES_SQL: &str = include_str!("../../sql/postgres.sql");
pub const SQLITE_SQL: &str = include_str!("../../sql/sqlite.sql");

/// The tests' own table: what an operation writes under a key. No primary
/// key: an operation that ran twice leaves two rows, for a test to count.
const ORDERS_SQL: &str =
    "CREATE TABLE orders (account_id BIGINT NOT NULL, id TEXT NOT NULL, amount BIGINT NOT NULL);";

/// How long a connection waits for a lock another holds before it fails
/// (PostgreSQL `lock_timeout`, SQLite's busy timeout): long enough for any
/// wait a test means, short enough that a wait it does not mean fails the
/// test instead of hanging it.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// One test's database on backend `C`, gone when this drops.
pub struct TestDb<C> {
    /// PostgreSQL: the database's name; SQLite: the file's stem.
    pub name: String,
    /// What `C::establish` takes: a URL, or the SQLite file's path.
    pub url: String,
    kind: Kind,
    backend: PhantomData<fn() -> C>,
}

enum Kind {
    Postgres { admin_url: String },
    Sqlite { path: PathBuf },
}

/// A unique name for a test's database.
fn unique_name() -> String {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    format!(
        "idempotency_test_{}_{}_{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// `url` with its path (the database) replaced by `/name`, its query kept.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{name}", &base[..authority_end]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Says on the terminal, past the harness's capture of `print!`, that a
/// test did not run.
pub fn say_skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "{test}: skipped: {why}");
}

/// The connection a test runs the protocol on, per backend: how its
/// database is made, and the SQL the tests check with.
pub trait TestConn: KeyStore + SimpleConnection + Send + Sized + 'static {
    const BACKEND: &'static str;

    /// The protocol's transaction on this backend, as an application's
    /// [`Connections::transaction`] writes it.
    fn key_transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E>;

    /// A fresh database with the key table and `orders`; `None` (said on
    /// the terminal) when this backend cannot run here.
    fn create_db(test: &str) -> Option<TestDb<Self>>;

    /// A connection of its own to `db`, waiting at most `lock_wait` for a lock.
    fn open(db: &TestDb<Self>, lock_wait: Duration) -> Self;

    /// Returns once another connection of `db` waits for a lock this one's
    /// caller holds: PostgreSQL says so (`pg_stat_activity`); SQLite does
    /// not, so this gives it time to get there.
    fn until_another_waits(db: &TestDb<Self>);

    /// A transaction of its own that holds every write of the key table
    /// (reads go on) until the guard drops: PostgreSQL `LOCK TABLE … IN
    /// EXCLUSIVE MODE`, SQLite `BEGIN IMMEDIATE` (WAL readers never wait).
    fn hold_key_writes(db: &TestDb<Self>) -> WriteHold<Self>;

    fn insert_order(&mut self, account_id: i64, id: &str, amount: i64) -> QueryResult<()>;

    /// Every row of `orders`, by account and id.
    fn orders(&mut self) -> Vec<(i64, String, i64)>;

    /// The key row's columns a test reads, if it has one (live or not).
    fn key_row(&mut self, account_id: i64, key: &str) -> Option<KeyRow>;

    /// Every key row, as (account, key).
    fn keys(&mut self) -> Vec<(i64, String)>;
}

/// What a test reads of a key row.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct KeyRow {
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    pub response_status: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    pub foreign_step: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    pub request_path: Option<String>,
}

#[derive(QueryableByName)]
struct OrderRow {
    #[diesel(sql_type = BigInt)]
    account_id: i64,
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = BigInt)]
    amount: i64,
}

#[derive(QueryableByName)]
struct KeyName {
    #[diesel(sql_type = BigInt)]
    account_id: i64,
    #[diesel(sql_type = Text)]
    key: String,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The SQL every backend runs the same (values are the tests' own, never
/// a client's: formatted in, quotes doubled).
macro_rules! same_sql {
    () => {
        fn insert_order(&mut self, account_id: i64, id: &str, amount: i64) -> QueryResult<()> {
            diesel::sql_query(format!(
                "INSERT INTO orders (account_id, id, amount) VALUES ({account_id}, '{}', {amount})",
                id.replace('\'', "''")
            ))
            .execute(self)
            .map(drop)
        }

        fn orders(&mut self) -> Vec<(i64, String, i64)> {
            diesel::sql_query("SELECT account_id, id, amount FROM orders ORDER BY account_id, id")
                .load::<OrderRow>(self)
                .expect("read orders")
                .into_iter()
                .map(|o| (o.account_id, o.id, o.amount))
                .collect()
        }

        fn key_row(&mut self, account_id: i64, key: &str) -> Option<KeyRow> {
            diesel::sql_query(format!(
                "SELECT status, CAST(response_status AS BIGINT) AS response_status, \
                 foreign_step, request_path FROM idempotency_keys \
                 WHERE account_id = {account_id} AND key = '{}'",
                key.replace('\'', "''")
            ))
            .get_result::<KeyRow>(self)
            .optional()
            .expect("read the key row")
        }

        fn keys(&mut self) -> Vec<(i64, String)> {
            diesel::sql_query(
                "SELECT account_id, key FROM idempotency_keys ORDER BY account_id, key",
            )
            .load::<KeyName>(self)
            .expect("read the key rows")
            .into_iter()
            .map(|k| (k.account_id, k.key))
            .collect()
        }
    };
}

impl TestConn for PgConnection {
    const BACKEND: &'static str = "PostgreSQL";

    /// READ COMMITTED: a second insert of the same key waits on the unique
    /// index entry (at REPEATABLE READ it would fail instead).
    fn key_transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.build_transaction().read_committed().run(work)
    }

    fn create_db(test: &str) -> Option<TestDb<Self>> {
        let Some(server) = std::env::var("TEST_DATABASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
        else {
            say_skipped(test, "TEST_DATABASE_URL unset");
            return None;
        };
        // Before this binary's first libpq connection: no OpenSSL exit
        // handler to crash the test binary as it exits.
        openssl_sys::init();
        let name = unique_name();
        let admin_url = with_database(&server, "postgres");
        let mut admin = PgConnection::establish(&admin_url).expect("connect to TEST_DATABASE_URL");
        diesel::sql_query(format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .expect("create the test database");
        // The guard first, so that the database is dropped if what follows fails.
        let db = TestDb {
            url: with_database(&server, &name),
            name,
            kind: Kind::Postgres { admin_url },
            backend: PhantomData,
        };
        let mut conn = PgConnection::establish(&db.url).expect("connect to the test database");
        conn.batch_execute(POSTGRES_SQL)
            .expect("apply sql/postgres.sql");
        conn.batch_execute(ORDERS_SQL).expect("create orders");
        Some(db)
    }

    fn open(db: &TestDb<Self>, lock_wait: Duration) -> Self {
        let mut conn = PgConnection::establish(&db.url).expect("connect to the test database");
        conn.batch_execute(&format!(
            "SET lock_timeout = {}; SET statement_timeout = 30000;",
            lock_wait.as_millis()
        ))
        .expect("set the session's timeouts");
        conn
    }

    fn until_another_waits(db: &TestDb<Self>) {
        let Kind::Postgres { admin_url } = &db.kind else {
            unreachable!()
        };
        let mut admin = PgConnection::establish(admin_url).expect("connect to the server");
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let waiting = diesel::sql_query(format!(
                "SELECT count(*) AS n FROM pg_stat_activity \
                 WHERE datname = '{}' AND wait_event_type = 'Lock'",
                db.name
            ))
            .get_result::<Count>(&mut admin)
            .expect("read pg_stat_activity")
            .n;
            if waiting > 0 {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "no session of the test database came to wait for a lock"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn hold_key_writes(db: &TestDb<Self>) -> WriteHold<Self> {
        let mut conn = Self::open(db, LOCK_WAIT);
        conn.batch_execute("BEGIN; LOCK TABLE idempotency_keys IN EXCLUSIVE MODE")
            .expect("lock the key table's writes");
        WriteHold(conn)
    }

    same_sql!();
}

impl TestConn for SqliteConnection {
    const BACKEND: &'static str = "SQLite";

    /// `BEGIN IMMEDIATE`: a concurrent writer waits for the whole
    /// transaction instead of failing halfway.
    fn key_transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.immediate_transaction(work)
    }

    fn create_db(_test: &str) -> Option<TestDb<Self>> {
        let name = unique_name();
        let path = std::env::temp_dir().join(format!("{name}.db"));
        let db = TestDb {
            url: path.to_string_lossy().into_owned(),
            name,
            kind: Kind::Sqlite { path },
            backend: PhantomData,
        };
        // WAL once, on one connection, before any other opens (as the
        // app's pool does): readers then never wait for the writer.
        let mut conn = Self::open(&db, LOCK_WAIT);
        conn.batch_execute("PRAGMA journal_mode = WAL;")
            .expect("switch to WAL");
        conn.batch_execute(SQLITE_SQL)
            .expect("apply sql/sqlite.sql");
        conn.batch_execute(ORDERS_SQL).expect("create orders");
        Some(db)
    }

    fn open(db: &TestDb<Self>, lock_wait: Duration) -> Self {
        let mut conn = SqliteConnection::establish(&db.url).expect("open the test database");
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {}; PRAGMA synchronous = NORMAL;",
            lock_wait.as_millis()
        ))
        .expect("set the connection's pragmas");
        conn
    }

    fn until_another_waits(_db: &TestDb<Self>) {
        std::thread::sleep(Duration::from_millis(300));
    }

    fn hold_key_writes(db: &TestDb<Self>) -> WriteHold<Self> {
        let mut conn = Self::open(db, LOCK_WAIT);
        conn.batch_execute("BEGIN IMMEDIATE")
            .expect("take the write lock");
        WriteHold(conn)
    }

    same_sql!();
}

impl<C: TestConn> TestDb<C> {
    /// A fresh database for the test named `test`, or `None` (said).
    pub fn create(test: &str) -> Option<TestDb<C>> {
        C::create_db(test)
    }

    /// A connection of its own, for what the test reads.
    pub fn conn(&self) -> C {
        C::open(self, LOCK_WAIT)
    }

    /// [`Connections`] for one request (or recovery pass).
    pub fn connections(&self) -> Conns<'_, C> {
        self.connections_waiting(LOCK_WAIT)
    }

    /// As [`connections`](Self::connections), waiting at most `lock_wait`
    /// for a lock.
    pub fn connections_waiting(&self, lock_wait: Duration) -> Conns<'_, C> {
        Conns {
            db: self,
            conn: None,
            lock_wait,
            until: Instant::now() + Duration::from_secs(20),
            checked_out: Arc::new(AtomicBool::new(false)),
        }
    }

    pub fn orders(&self) -> Vec<(i64, String, i64)> {
        self.conn().orders()
    }

    pub fn key_row(&self, account_id: i64, key: &str) -> Option<KeyRow> {
        self.conn().key_row(account_id, key)
    }

    pub fn keys(&self) -> Vec<(i64, String)> {
        self.conn().keys()
    }

    /// Waits (polling, at most 10 s) until the key's row is in progress
    /// under a lease that has run out: its worker counts as dead.
    #[track_caller]
    pub fn until_lease_runs_out(&self, account_id: i64, key: &str) {
        let mut conn = self.conn();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let row = conn
                .find_live_key(account_id, key)
                .expect("read the key")
                .expect("the key has a live row");
            match row.state {
                KeyState::InProgress { lease_live: false } => return,
                KeyState::InProgress { lease_live: true } => {}
                KeyState::Completed(_) => panic!("the key was completed"),
            }
            assert!(Instant::now() < deadline, "the lease never ran out");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl<C> Drop for TestDb<C> {
    fn drop(&mut self) {
        match &self.kind {
            Kind::Postgres { admin_url } => {
                if let Ok(mut admin) = PgConnection::establish(admin_url) {
                    let _ = diesel::sql_query(format!(
                        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                        self.name
                    ))
                    .execute(&mut admin);
                }
            }
            Kind::Sqlite { path } => {
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
        }
    }
}

/// See [`TestConn::hold_key_writes`]: rolled back on drop.
pub struct WriteHold<C: TestConn>(C);

impl<C: TestConn> Drop for WriteHold<C> {
    fn drop(&mut self) {
        let _ = self.0.batch_execute("ROLLBACK");
    }
}

/// The protocol's [`Connections`] for one request: one connection of its
/// own, opened at the first `run` and handed out to each. `checked_out`
/// says whether a `run` is under way, for a foreign step to check that it
/// is never called holding a connection.
pub struct Conns<'db, C> {
    db: &'db TestDb<C>,
    conn: Option<C>,
    lock_wait: Duration,
    until: Instant,
    pub checked_out: Arc<AtomicBool>,
}

impl<C> Conns<'_, C> {
    /// The request's deadline `after` from now (20 s unless told).
    pub fn deadline(mut self, after: Duration) -> Self {
        self.until = Instant::now() + after;
        self
    }
}

impl<C: TestConn> Connections for Conns<'_, C> {
    type Store = C;

    fn run<T>(&mut self, work: impl FnOnce(&mut C) -> Result<T, Error>) -> Result<T, Error> {
        let (db, lock_wait) = (self.db, self.lock_wait);
        let conn = self.conn.get_or_insert_with(|| C::open(db, lock_wait));
        assert!(
            !self.checked_out.swap(true, Ordering::SeqCst),
            "a run inside a run"
        );
        let done = work(conn);
        self.checked_out.store(false, Ordering::SeqCst);
        done
    }

    fn transaction<T, E: From<diesel::result::Error>>(
        store: &mut C,
        work: impl FnOnce(&mut C) -> Result<T, E>,
    ) -> Result<T, E> {
        store.key_transaction(work)
    }

    fn until(&self) -> Instant {
        self.until
    }
}

/// Generates, for each generic `fn name<C: TestConn>()`, the tests
/// `on_postgres::name` and `on_sqlite::name`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod on_postgres {
            $(
                #[test]
                #[cfg_attr(not(postgres_tests), ignore = "TEST_DATABASE_URL is not set: PostgreSQL was not tested")]
                fn $name() {
                    super::$name::<diesel::pg::PgConnection>(concat!("on_postgres::", stringify!($name)));
                }
            )*
        }
        mod on_sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name::<diesel::sqlite::SqliteConnection>(concat!("on_sqlite::", stringify!($name)));
                }
            )*
        }
    };
}
