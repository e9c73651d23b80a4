//! `spawn_app`: a fresh database and the real application in this process,
//! on port 0, with two workers, and the test account ([`TEST_KEY`]) its
//! requests are made as unless a test says otherwise.

use std::ops::Deref;
use std::time::{Duration, Instant};

use charges::app::Application;
use charges::config::Settings;

use super::TestBackend;
use super::client::{AppClient, TEST_KEY};
use super::db::TestDatabase;

/// The running app: a client of it (every [`AppClient`] method works on a
/// `TestApp`: `app.charge(key, &body)`) and its database.
pub struct TestApp {
    client: AppClient,
    pub db: TestDatabase,
    /// Where its `/metrics` is served (METRICS_BIND), if anywhere.
    pub metrics_url: Option<String>,
    /// The server's card network (NETWORK_URL), if any: no route of the
    /// app's tells it.
    pub network_url: Option<String>,
    /// The demo's own network's ledger, removed when the app is dropped.
    network_db: NetworkFile,
}

struct NetworkFile(std::path::PathBuf);

impl Drop for NetworkFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}

impl Deref for TestApp {
    type Target = AppClient;

    fn deref(&self) -> &AppClient {
        &self.client
    }
}

/// The app with the test defaults, on the backend of the running test.
pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

/// The app with the test defaults changed by `configure`.
pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    let db = TestDatabase::create();
    let mut settings = Settings::with_database_url(&db.url);
    settings.bind = "127.0.0.1:0".to_owned();
    settings.workers = Some(2);
    settings.pool_size = 20;
    // Tests send storms from one account and one address: the rate limits
    // are the subject of their own tests (limits.rs), which set them.
    settings.rate_limit_per_account = 0;
    settings.rate_limit_per_client = 0;
    // The sandboxes' too (tests/api/sandboxes.rs sets it).
    settings.demo_sandboxes_per_minute = 0;
    // Storms open hundreds of connections from one address too.
    settings.max_connections_per_peer = 0;
    // No card network unless a test starts one (tests/api/network.rs).
    settings.network_url = charges::config::NETWORK_OFF.to_owned();
    // The teaching page's server (`charges demo`): the demo's tests drive
    // its account (`app.demo()`); the ones about a server without it say so.
    settings.demo = Some(true);
    settings.metrics_bind = "127.0.0.1:0".to_owned();
    configure(&mut settings);
    // The demo's own card network keeps its ledger in a file of the test's
    // (SQLite, whatever the app's backend), unless the test names one.
    let network_db = std::env::temp_dir().join(format!(
        "charges-test-{}-network.db",
        uuid::Uuid::new_v4().simple()
    ));
    if settings.network_database_url.is_none() {
        settings.network_database_url = Some(format!("sqlite://{}", network_db.display()));
    }
    let app = Application::build(settings).expect("the app starts");
    // Migrated now: the real account the tests' requests are made as.
    db.create_test_account();
    let client = AppClient::new(&app.url());
    let metrics_url = app.metrics_url();
    let network_url = app.network_url().map(str::to_owned);
    tokio::spawn(app.run_until_stopped());
    TestApp {
        client,
        db,
        metrics_url,
        network_url,
        network_db: NetworkFile(network_db),
    }
}

impl TestApp {
    /// Its `/metrics` text, read on its metrics listener.
    pub async fn metrics(&self) -> String {
        let url = self.metrics_url.as_deref().expect("a metrics listener");
        let metrics = AppClient::new(url).get("/metrics").await;
        assert_eq!(metrics.status, 200, "{}", metrics.body);
        metrics.body
    }

    pub fn backend(&self) -> TestBackend {
        self.db.backend()
    }

    /// `SELECT count(*) FROM <from_where>` in the app's database.
    pub fn count(&self, from_where: &str) -> i64 {
        self.db.count(from_where)
    }

    pub fn charges(&self) -> i64 {
        self.db.charges()
    }

    pub fn keys(&self) -> i64 {
        self.db.keys()
    }

    pub fn execute(&self, sql: &str) -> usize {
        self.db.execute(sql)
    }

    /// SQL for the charge a key row `k` created (see
    /// [`TestDatabase::key_charge_id`]).
    pub fn key_charge_id(&self) -> &'static str {
        self.db.key_charge_id()
    }

    /// Holds the key table's writes until the guard drops (see
    /// [`TestDatabase::hold_key_writes`]).
    pub fn hold_key_writes(&self) -> crate::support::db::WriteHold {
        self.db.hold_key_writes()
    }

    /// Holds the key table's writes, not its reads, until the guard drops
    /// (see [`TestDatabase::hold_key_writes_not_reads`]).
    pub fn hold_key_writes_not_reads(&self) -> crate::support::db::WriteHold {
        self.db.hold_key_writes_not_reads()
    }

    /// SQL for "`offset_secs` from now" on this app's backend.
    pub fn at(&self, offset_secs: i64) -> String {
        self.db.at(offset_secs)
    }

    /// An account other than the demo's, with a key the test chooses.
    pub fn create_account(&self, name: &str, api_key: &str) -> i64 {
        self.db.create_account(name, api_key)
    }

    /// PostgreSQL only: waits (bounded) until `n` of the app's sessions have
    /// held an open transaction for 200 ms: delayed charges
    /// (`Demo-Fault: delay-commit`) are inside their hold, not between two
    /// statements of their transaction.
    pub async fn until_held(&self, n: i64) {
        assert_eq!(
            self.backend(),
            TestBackend::Postgres,
            "pg_stat_activity is PostgreSQL's"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.count(
            "pg_stat_activity WHERE datname = current_database() \
             AND state = 'idle in transaction' AND state_change < now() - interval '200 ms'",
        ) < n
        {
            assert!(
                Instant::now() < deadline,
                "the delayed charges never held their transactions"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
