//! One database per test: a PostgreSQL database created on
//! `TEST_DATABASE_URL`'s server and dropped `WITH (FORCE)` when the guard
//! drops, or an SQLite file deleted then; plus the SQL the tests check with.
//!
//! Everything here is plain SQL on a fresh connection per call (so a test
//! never holds a session of its own on the database it watches). The two
//! things that would repeat what the crate owns come from it, and only here:
//! [`at`] (how SQLite stores a time) and [`TestDatabase::create_account`]
//! (how an API key is stored).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use diesel::connection::SimpleConnection;
use diesel::pg::Pg;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::sqlite::Sqlite;
use uuid::Uuid;

use super::client::{TEST_ACCOUNT, TEST_KEY};
use super::{TestBackend, backend};

/// The PostgreSQL server the test databases are created on.
pub fn server_url() -> String {
    // Before this binary's first libpq connection: no OpenSSL exit handler
    // to crash the test binary's exit (see init_openssl).
    charges::store::database::init_openssl();
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// SQL for "`offset_secs` from now" in the backend's own time representation,
/// e.g. `at(TestBackend::Sqlite, -1)` for one second ago.
pub fn at(backend: TestBackend, offset_secs: i64) -> String {
    match backend {
        TestBackend::Postgres => format!("(now() + interval '{offset_secs} seconds')"),
        TestBackend::Sqlite => format!(
            "'{}'",
            charges::store::time_text(chrono::Utc::now() + chrono::Duration::seconds(offset_secs))
        ),
    }
}

/// The INSERT of a real (non-demo) account named `name` whose key is
/// `api_key`, stored as the app stores one: the key's SHA-256, never the key.
fn account_insert(backend: TestBackend, name: &str, api_key: &str) -> String {
    let digest = charges::http::accounts::hash_api_key(api_key);
    format!(
        "INSERT INTO accounts (name, api_key_sha256, demo, created_at) \
         VALUES ('{}', '{digest}', false, {})",
        name.replace('\'', "''"),
        at(backend, 0)
    )
}

/// A database that exists for one test (see the module's doc).
pub struct TestDatabase {
    /// What the app's `DATABASE_URL` is.
    pub url: String,
    kind: Kind,
}

enum Kind {
    Postgres { name: String, admin_url: String },
    Sqlite { path: PathBuf },
}

enum AnyConn {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// One row of `idempotency_keys`.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub key: String,
    pub status: String,
    pub charge_id: Option<Uuid>,
}

impl TestDatabase {
    /// A fresh, empty database on the backend of the running test.
    pub fn create() -> TestDatabase {
        TestDatabase::create_for(backend())
    }

    /// A fresh, empty database on `backend` (the app migrates it).
    pub fn create_for(backend: TestBackend) -> TestDatabase {
        let db = TestDatabase::reserve_for(backend);
        if let Kind::Postgres { name, .. } = &db.kind {
            diesel::sql_query(format!("CREATE DATABASE {name}"))
                .execute(&mut db.admin())
                .expect("create the test database");
        }
        db
    }

    /// A name and URL for a database that does not exist yet (the app or
    /// `charges migrate` creates it); dropped all the same with the guard.
    pub fn reserve_for(backend: TestBackend) -> TestDatabase {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "charges_test_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            &Uuid::new_v4().simple().to_string()[..8]
        );
        match backend {
            TestBackend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.db"));
                TestDatabase {
                    url: format!("sqlite://{}", path.display()),
                    kind: Kind::Sqlite { path },
                }
            }
            TestBackend::Postgres => {
                let mut admin_url =
                    url::Url::parse(&server_url()).expect("TEST_DATABASE_URL is a URL");
                admin_url.set_path("/postgres");
                let mut url = admin_url.clone();
                url.set_path(&format!("/{name}"));
                TestDatabase {
                    url: url.to_string(),
                    kind: Kind::Postgres {
                        name,
                        admin_url: admin_url.to_string(),
                    },
                }
            }
        }
    }

    pub fn backend(&self) -> TestBackend {
        match self.kind {
            Kind::Postgres { .. } => TestBackend::Postgres,
            Kind::Sqlite { .. } => TestBackend::Sqlite,
        }
    }

    /// SQL for "`offset_secs` from now" on this database's backend.
    pub fn at(&self, offset_secs: i64) -> String {
        at(self.backend(), offset_secs)
    }

    /// A connection of its own (the schema must exist: start the app first).
    fn connect(&self) -> AnyConn {
        match &self.kind {
            Kind::Postgres { .. } => AnyConn::Pg(
                PgConnection::establish(&self.url).expect("connect to the test database"),
            ),
            Kind::Sqlite { path } => {
                let mut conn = SqliteConnection::establish(&path.to_string_lossy())
                    .expect("open the test database");
                // Wait for the app's write lock as the app does, not fail.
                conn.batch_execute("PRAGMA busy_timeout = 5000")
                    .expect("set busy_timeout");
                AnyConn::Sqlite(conn)
            }
        }
    }

    /// The PostgreSQL server's `postgres` database, for what a test does to
    /// its own database from outside.
    /// Every byte the database keeps, as far as a reader can see them: a
    /// PostgreSQL database as `pg_dump` writes it (schema and data), an
    /// SQLite one as its files (the database, its write-ahead log).
    pub fn dump(&self) -> Vec<u8> {
        match &self.kind {
            Kind::Postgres { .. } => {
                let out = std::process::Command::new("pg_dump")
                    .arg(&self.url)
                    .output()
                    .expect("run pg_dump (PostgreSQL's client tools)");
                assert!(
                    out.status.success(),
                    "pg_dump: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                out.stdout
            }
            Kind::Sqlite { path } => ["", "-wal"]
                .iter()
                .flat_map(|suffix| {
                    std::fs::read(format!("{}{suffix}", path.display())).unwrap_or_default()
                })
                .collect(),
        }
    }

    fn admin(&self) -> PgConnection {
        let Kind::Postgres { admin_url, .. } = &self.kind else {
            panic!("only a PostgreSQL test database has a server to administer");
        };
        PgConnection::establish(admin_url).expect("connect to the test PostgreSQL server")
    }

    fn load<T>(&self, sql: &str) -> Vec<T>
    where
        T: QueryableByName<Pg> + QueryableByName<Sqlite> + 'static,
    {
        match self.connect() {
            AnyConn::Pg(mut c) => diesel::sql_query(sql).load(&mut c),
            AnyConn::Sqlite(mut c) => diesel::sql_query(sql).load(&mut c),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs a script of statements (a schema file).
    pub fn batch(&self, sql: &str) {
        match self.connect() {
            AnyConn::Pg(mut c) => c.batch_execute(sql),
            AnyConn::Sqlite(mut c) => c.batch_execute(sql),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs one statement; the number of rows it changed.
    pub fn execute(&self, sql: &str) -> usize {
        match self.connect() {
            AnyConn::Pg(mut c) => diesel::sql_query(sql).execute(&mut c),
            AnyConn::Sqlite(mut c) => diesel::sql_query(sql).execute(&mut c),
        }
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The text column `value` of each row `sql` selects.
    pub fn strings(&self, sql: &str) -> Vec<String> {
        #[derive(QueryableByName)]
        struct Value {
            #[diesel(sql_type = Text)]
            value: String,
        }
        self.load::<Value>(sql)
            .into_iter()
            .map(|v| v.value)
            .collect()
    }

    /// `SELECT count(*) FROM <from_where>`.
    pub fn count(&self, from_where: &str) -> i64 {
        let rows: Vec<Count> = self.load(&format!("SELECT count(*) AS n FROM {from_where}"));
        rows[0].n
    }

    pub fn charges(&self) -> i64 {
        self.count("charges")
    }

    pub fn keys(&self) -> i64 {
        self.count("idempotency_keys")
    }

    /// Every row of `idempotency_keys`, by key.
    pub fn key_rows(&self) -> HashMap<String, KeyRow> {
        #[derive(QueryableByName)]
        struct Row {
            #[diesel(sql_type = Text)]
            key: String,
            #[diesel(sql_type = Text)]
            status: String,
            #[diesel(sql_type = Nullable<Text>)]
            charge_id: Option<String>,
        }
        self.load::<Row>(&format!(
            "SELECT key, status, {} AS charge_id FROM idempotency_keys k",
            self.key_charge_id()
        ))
        .into_iter()
        .map(|row| {
            let charge_id = row.charge_id.map(|id| {
                id.parse()
                    .unwrap_or_else(|e| panic!("charge_id {id:?} is not a UUID: {e}"))
            });
            let key = KeyRow {
                key: row.key,
                status: row.status,
                charge_id,
            };
            (key.key.clone(), key)
        })
        .collect()
    }

    /// An account other than the demo's, with an API key the test chooses;
    /// its id. Stored as the app stores one: the key's SHA-256, never the key.
    pub fn create_account(&self, name: &str, api_key: &str) -> i64 {
        #[derive(QueryableByName)]
        struct Id {
            #[diesel(sql_type = BigInt)]
            id: i64,
        }
        let sql = format!(
            "{} RETURNING id",
            account_insert(self.backend(), name, api_key)
        );
        self.load::<Id>(&sql)[0].id
    }

    /// The test account ([`TEST_ACCOUNT`], key [`TEST_KEY`]): the real
    /// account an [`AppClient`](super::AppClient) makes its requests as
    /// unless told otherwise. `spawn_app` creates it; a test that starts
    /// the binary itself creates it once the server has migrated.
    pub fn create_test_account(&self) -> i64 {
        self.create_account(TEST_ACCOUNT, TEST_KEY)
    }

    /// [`create_test_account`](Self::create_test_account) on a PostgreSQL
    /// database no `TestDatabase` stands for (a server or a formation of
    /// the test's own), by its URL, once the app has migrated it.
    pub fn create_test_account_at(url: &str) {
        let mut conn = PgConnection::establish(url).expect("connect to the app's database");
        let sql = account_insert(TestBackend::Postgres, TEST_ACCOUNT, TEST_KEY);
        diesel::sql_query(&sql)
            .execute(&mut conn)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A transaction of the test's own that holds the key table's writes
    /// until the guard drops (then rolls back): on PostgreSQL `LOCK TABLE
    /// idempotency_keys` (a key's registration waits on it), on SQLite
    /// `BEGIN IMMEDIATE` (every write waits). A database that does not
    /// answer, as the app sees it.
    pub fn hold_key_writes(&self) -> WriteHold {
        let mut conn = self.connect();
        match &mut conn {
            AnyConn::Pg(c) => c
                .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE")
                .expect("lock the key table"),
            AnyConn::Sqlite(c) => c
                .batch_execute("BEGIN IMMEDIATE")
                .expect("take the write lock"),
        }
        WriteHold(conn)
    }

    /// As [`hold_key_writes`](Self::hold_key_writes), but reads of the key
    /// table go on: on PostgreSQL `LOCK TABLE idempotency_keys IN EXCLUSIVE
    /// MODE` (a plain `SELECT` passes, any write waits), on SQLite `BEGIN
    /// IMMEDIATE` (readers of a WAL database never wait). Whatever answers
    /// meanwhile answered from a read alone.
    pub fn hold_key_writes_not_reads(&self) -> WriteHold {
        let mut conn = self.connect();
        match &mut conn {
            AnyConn::Pg(c) => c
                .batch_execute("BEGIN; LOCK TABLE idempotency_keys IN EXCLUSIVE MODE")
                .expect("lock the key table's writes"),
            AnyConn::Sqlite(c) => c
                .batch_execute("BEGIN IMMEDIATE")
                .expect("take the write lock"),
        }
        WriteHold(conn)
    }

    /// PostgreSQL: holds every access to `charges` until the guard drops (an
    /// `ACCESS EXCLUSIVE` lock in an open transaction): a charge's last
    /// transaction then waits at its INSERT, after the network answered.
    pub fn hold_charge_writes(&self) -> WriteHold {
        let mut conn = self.connect();
        match &mut conn {
            AnyConn::Pg(c) => c
                .batch_execute("BEGIN; LOCK TABLE charges IN ACCESS EXCLUSIVE MODE")
                .expect("lock the charges table"),
            AnyConn::Sqlite(_) => panic!("hold_charge_writes is PostgreSQL's"),
        }
        WriteHold(conn)
    }

    /// SQL for the charge a key row `k` created: the id in its stored
    /// response when that response is a charge, as text; NULL otherwise (an
    /// in-progress row, a refund's key, a stored problem). The key table
    /// keeps responses, not links to what ran under the key.
    pub fn key_charge_id(&self) -> &'static str {
        match self.backend() {
            TestBackend::Postgres => {
                "(CASE WHEN k.response_body->>'object' = 'charge' THEN k.response_body->>'id' END)"
            }
            TestBackend::Sqlite => {
                "(CASE WHEN json_extract(k.response_body, '$.object') = 'charge' THEN json_extract(k.response_body, '$.id') END)"
            }
        }
    }

    /// SQL for a charge row `c`'s id as text, to compare with
    /// [`key_charge_id`](Self::key_charge_id).
    pub fn charge_id_text(&self) -> &'static str {
        match self.backend() {
            TestBackend::Postgres => "CAST(c.id AS TEXT)",
            TestBackend::Sqlite => "c.id",
        }
    }

    /// The invariants that hold after any failure: no charge without the key
    /// row whose response names it (such a charge is the one a retry would
    /// repeat), no completed charge key without its charge, no key that
    /// committed half-done, no charge named by two keys.
    #[track_caller]
    pub fn assert_consistent(&self) {
        let (kid, cid) = (self.key_charge_id(), self.charge_id_text());
        let orphans = self.count(&format!(
            "charges c LEFT JOIN idempotency_keys k ON {kid} = {cid} WHERE k.key IS NULL"
        ));
        assert_eq!(orphans, 0, "charges without a key row naming them");
        let hollow = self.count(&format!(
            "idempotency_keys k LEFT JOIN charges c ON {kid} = {cid} \
             WHERE k.status = 'completed' AND {kid} IS NOT NULL AND c.id IS NULL"
        ));
        assert_eq!(hollow, 0, "completed keys without their charge");
        let in_progress = self.count("idempotency_keys WHERE status <> 'completed'");
        assert_eq!(
            in_progress, 0,
            "committed key rows not completed (the key row, the charge and the response commit together)"
        );
        let shared = self.count(&format!(
            "(SELECT {kid} AS id FROM idempotency_keys k WHERE {kid} IS NOT NULL \
             GROUP BY {kid} HAVING count(*) > 1) s"
        ));
        assert_eq!(shared, 0, "charges that two keys name");
    }

    fn pg_name(&self) -> &str {
        match &self.kind {
            Kind::Postgres { name, .. } => name,
            Kind::Sqlite { .. } => panic!("sessions are PostgreSQL's"),
        }
    }

    /// PostgreSQL: sessions of this database in `state` (`active`, `idle in
    /// transaction`, …), seen from outside it.
    pub fn sessions(&self, state: &str) -> i64 {
        let sql = format!(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = '{}' AND state = '{}'",
            self.pg_name(),
            state
        );
        diesel::sql_query(sql)
            .get_result::<Count>(&mut self.admin())
            .expect("read pg_stat_activity")
            .n
    }

    /// PostgreSQL: terminates every backend connected to this test's
    /// database (and no other): what a failover or an administrator does to
    /// the app's pool. Returns how many were terminated in each state
    /// (`idle`, `active`, `idle in transaction`, …).
    pub fn terminate_connections(&self) -> BTreeMap<String, i64> {
        #[derive(QueryableByName)]
        struct ByState {
            #[diesel(sql_type = Text)]
            state: String,
            #[diesel(sql_type = BigInt)]
            n: i64,
        }
        let sql = format!(
            "SELECT coalesce(state, '?') AS state, count(*) AS n FROM \
             (SELECT state, pg_terminate_backend(pid) AS t FROM pg_stat_activity \
              WHERE datname = '{}' AND pid <> pg_backend_pid()) s \
             WHERE t GROUP BY 1",
            self.pg_name()
        );
        diesel::sql_query(sql)
            .load::<ByState>(&mut self.admin())
            .expect("pg_terminate_backend")
            .into_iter()
            .map(|r| (r.state, r.n))
            .collect()
    }
}

/// See [`TestDatabase::hold_key_writes`].
pub struct WriteHold(AnyConn);

impl Drop for WriteHold {
    fn drop(&mut self) {
        let _ = match &mut self.0 {
            AnyConn::Pg(c) => c.batch_execute("ROLLBACK"),
            AnyConn::Sqlite(c) => c.batch_execute("ROLLBACK"),
        };
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        match &self.kind {
            Kind::Postgres { name, admin_url } => {
                if let Ok(mut admin) = PgConnection::establish(admin_url) {
                    let _ =
                        diesel::sql_query(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
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
