//! One database per test, created on `TEST_DATABASE_URL`'s server and dropped
//! `WITH (FORCE)` when the guard drops, plus the SQL the tests check with.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use uuid::Uuid;

/// The PostgreSQL server the test databases are created on.
pub fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub struct TestDatabase {
    pub url: String,
    pub name: String,
    admin_url: String,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// One row of `idempotency_keys`.
#[derive(Debug, Clone, QueryableByName)]
pub struct KeyRow {
    #[diesel(sql_type = Text)]
    pub key: String,
    #[diesel(sql_type = Text)]
    pub status: String,
    #[diesel(sql_type = Nullable<diesel::sql_types::Uuid>)]
    pub charge_id: Option<Uuid>,
}

impl TestDatabase {
    /// A fresh, empty database.
    pub fn create() -> TestDatabase {
        let db = TestDatabase::reserve();
        let mut admin = db.admin();
        diesel::sql_query(format!("CREATE DATABASE {}", db.name))
            .execute(&mut admin)
            .expect("create the test database");
        db
    }

    /// A name and URL for a database that does not exist yet (the server
    /// creates it); dropped all the same when the guard drops.
    pub fn reserve() -> TestDatabase {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "charges_rel_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            &Uuid::new_v4().simple().to_string()[..8]
        );
        let mut admin_url = url::Url::parse(&server_url()).expect("TEST_DATABASE_URL is a URL");
        admin_url.set_path("/postgres");
        let mut url = admin_url.clone();
        url.set_path(&format!("/{name}"));
        TestDatabase {
            url: url.to_string(),
            name,
            admin_url: admin_url.to_string(),
        }
    }

    fn connect(&self) -> PgConnection {
        PgConnection::establish(&self.url).expect("connect to the test database")
    }

    fn admin(&self) -> PgConnection {
        PgConnection::establish(&self.admin_url).expect("connect to the test PostgreSQL server")
    }

    /// `SELECT count(*) FROM <from_where>` in this test's database.
    pub fn count(&self, from_where: &str) -> i64 {
        diesel::sql_query(format!("SELECT count(*) AS n FROM {from_where}"))
            .get_result::<Count>(&mut self.connect())
            .unwrap_or_else(|e| panic!("SELECT count(*) FROM {from_where}: {e}"))
            .n
    }

    pub fn charges(&self) -> i64 {
        self.count("charges")
    }

    /// Every key row, by key.
    pub fn keys(&self) -> HashMap<String, KeyRow> {
        diesel::sql_query("SELECT key, status, charge_id FROM idempotency_keys")
            .load::<KeyRow>(&mut self.connect())
            .expect("read idempotency_keys")
            .into_iter()
            .map(|row| (row.key.clone(), row))
            .collect()
    }

    /// The invariants that hold after any failure: no charge without the key
    /// row that points at it (such a charge is the one a retry would repeat),
    /// no completed key without its charge, no key that committed half-done,
    /// no charge shared by two keys.
    pub fn assert_consistent(&self) {
        let orphans = self.count(
            "charges c LEFT JOIN idempotency_keys k ON k.charge_id = c.id WHERE k.id IS NULL",
        );
        assert_eq!(orphans, 0, "charges without a key row pointing at them");
        let hollow = self.count(
            "idempotency_keys k LEFT JOIN charges c ON c.id = k.charge_id \
             WHERE k.status = 'completed' AND c.id IS NULL",
        );
        assert_eq!(hollow, 0, "completed keys without their charge");
        let in_progress = self.count("idempotency_keys WHERE status <> 'completed'");
        assert_eq!(
            in_progress, 0,
            "committed key rows not completed (the key row, the charge and the response commit together)"
        );
        let shared = self.count(
            "(SELECT charge_id FROM idempotency_keys WHERE charge_id IS NOT NULL \
             GROUP BY charge_id HAVING count(*) > 1) s",
        );
        assert_eq!(shared, 0, "charges that two keys point at");
    }

    /// Sessions of this database in `state` (`active`, `idle in transaction`, …).
    pub fn sessions(&self, state: &str) -> i64 {
        let sql = format!(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = '{}' AND state = '{}'",
            self.name, state
        );
        diesel::sql_query(sql)
            .get_result::<Count>(&mut self.admin())
            .expect("read pg_stat_activity")
            .n
    }

    /// Terminates every backend connected to this test's database (and no
    /// other): what a failover or an administrator does to the app's pool.
    /// Returns how many were terminated in each state (`idle`, `active`,
    /// `idle in transaction`, …).
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
            self.name
        );
        diesel::sql_query(sql)
            .load::<ByState>(&mut self.admin())
            .expect("pg_terminate_backend")
            .into_iter()
            .map(|r| (r.state, r.n))
            .collect()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = PgConnection::establish(&self.admin_url) {
            let _ = diesel::sql_query(format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .execute(&mut admin);
        }
    }
}
