//! `spawn_app`: a fresh database and the real application on port 0.

use std::sync::atomic::{AtomicU32, Ordering};

use charges::api::Application;
use charges::config::Settings;
use charges::store::{Connection, DbPool};
use diesel::Connection as _;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use reqwest::{Client, Response};
use serde_json::{Value, json};

pub const DEMO_KEY: &str = "sk_test_demo";

/// Which database a test runs against. Every integration test runs on
/// SQLite; with `TEST_DATABASE_URL` set at build time it runs on PostgreSQL
/// too (see `build.rs` and `on_both_backends!`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestBackend {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    pub static BACKEND: TestBackend;
}

/// The backend of the running test (SQLite outside `on_both_backends!`).
pub fn backend() -> TestBackend {
    BACKEND.try_with(|b| *b).unwrap_or(TestBackend::Sqlite)
}

/// Generates, for each `async fn name() { .. }`, a module `name` with the
/// tests `on_sqlite` and (when the PostgreSQL half is built) `on_postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($( $(#[doc = $doc:literal])* async fn $name:ident() $body:block )*) => {$(
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn on_sqlite() {
                $crate::helpers::BACKEND.scope($crate::helpers::TestBackend::Sqlite, async $body).await
            }

            #[cfg(postgres_tests)]
            #[tokio::test]
            async fn on_postgres() {
                $crate::helpers::BACKEND.scope($crate::helpers::TestBackend::Postgres, async $body).await
            }
        }
    )*};
}

/// The PostgreSQL server tests create their databases on.
pub fn server_url() -> String {
    std::env::var("TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// A database that exists for one test: a PostgreSQL database dropped when
/// the guard drops, or an SQLite file deleted then.
pub struct TestDatabase {
    pub url: String,
    kind: Kind,
}

enum Kind {
    Postgres { name: String, admin_url: String },
    Sqlite { path: std::path::PathBuf },
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// `SELECT count(*) FROM <from_where>` on a connection of either backend.
pub fn count_on(conn: &mut Connection, from_where: &str) -> i64 {
    let sql = format!("SELECT count(*) AS n FROM {from_where}");
    match conn {
        Connection::Pg(c) => diesel::sql_query(sql).get_result::<Count>(c),
        Connection::Sqlite(c) => diesel::sql_query(sql).get_result::<Count>(c),
    }
    .unwrap_or_else(|e| panic!("count {from_where}: {e}"))
    .n
}

pub fn execute_on(conn: &mut Connection, sql: &str) -> usize {
    match conn {
        Connection::Pg(c) => diesel::sql_query(sql).execute(c),
        Connection::Sqlite(c) => diesel::sql_query(sql).execute(c),
    }
    .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// SQL for "`offset` from now" in the backend's own time representation,
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

impl TestDatabase {
    pub fn create() -> TestDatabase {
        TestDatabase::create_for(backend())
    }

    pub fn create_for(backend: TestBackend) -> TestDatabase {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "charges_test_{}_{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            uuid::Uuid::new_v4().simple().to_string().get(..8).unwrap()
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
                let mut admin = PgConnection::establish(admin_url.as_str())
                    .expect("connect to the test PostgreSQL server");
                diesel::sql_query(format!("CREATE DATABASE {name}"))
                    .execute(&mut admin)
                    .unwrap();
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

    /// A fresh connection (the schema must exist: start the app first).
    pub fn connect(&self) -> Connection {
        Connection::open(&self.url).unwrap()
    }

    pub fn count(&self, from_where: &str) -> i64 {
        count_on(&mut self.connect(), from_where)
    }

    pub fn execute(&self, sql: &str) -> usize {
        execute_on(&mut self.connect(), sql)
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

pub struct TestApp {
    pub address: String,
    pub client: Client,
    pub pool: DbPool,
    // Last, so the server's connections are gone before the drop.
    pub db: TestDatabase,
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(|_| {}).await
}

pub async fn spawn_app_with(configure: impl FnOnce(&mut Settings)) -> TestApp {
    let db = TestDatabase::create();
    let mut settings = Settings::with_database_url(&db.url);
    settings.bind = "127.0.0.1:0".to_owned();
    settings.workers = Some(2);
    settings.pool_size = 20;
    configure(&mut settings);
    let app = Application::build(settings).expect("the app starts");
    let address = app.url();
    let pool = app.pool().clone();
    tokio::spawn(app.run_until_stopped());
    TestApp {
        address,
        client: Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        pool,
        db,
    }
}

pub fn charge_body() -> Value {
    json!({"amount": 1000, "currency": "jpy", "description": "a book"})
}

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    /// `POST /charges` as the demo account, with the key sent as a
    /// Structured Field string when given.
    pub fn post_charge(
        &self,
        key: Option<&str>,
        body: &Value,
    ) -> impl Future<Output = Response> + 'static {
        self.post_charge_with(key, body, &[])
    }

    /// Builds the request now and sends it when awaited, so the future
    /// borrows nothing and can be raced with others.
    pub fn post_charge_with(
        &self,
        key: Option<&str>,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> impl Future<Output = Response> + 'static {
        self.post_charge_as(DEMO_KEY, key, body, headers)
    }

    pub fn count(&self, from_where: &str) -> i64 {
        self.db.count(from_where)
    }

    pub fn backend(&self) -> TestBackend {
        self.db.backend()
    }

    /// `GET path` (as the demo account), parsed as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        let r = self
            .client
            .get(self.url(path))
            .bearer_auth(DEMO_KEY)
            .send()
            .await
            .unwrap();
        r.json().await.unwrap()
    }

    /// `POST path` with no body, parsed as JSON.
    pub async fn post_json(&self, path: &str) -> Value {
        let r = self.client.post(self.url(path)).send().await.unwrap();
        r.json().await.unwrap()
    }

    /// SQL for "`offset_secs` from now" on this app's backend.
    pub fn at(&self, offset_secs: i64) -> String {
        at(self.backend(), offset_secs)
    }

    pub fn charges(&self) -> i64 {
        self.count("charges")
    }

    pub fn keys(&self) -> i64 {
        self.count("idempotency_keys")
    }

    pub fn execute(&self, sql: &str) -> usize {
        self.db.execute(sql)
    }

    /// An account other than the demo's, with a key the test chooses.
    pub fn create_account(&self, name: &str, api_key: &str) -> i64 {
        charges::accounts::insert_account(
            self.pool.checkout().unwrap().store(),
            name,
            api_key,
            false,
        )
        .unwrap()
    }

    /// `POST /charges` as the account whose key is `api_key`; built now,
    /// sent when awaited.
    pub fn post_charge_as(
        &self,
        api_key: &str,
        key: Option<&str>,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> impl Future<Output = Response> + 'static {
        let mut request = self
            .client
            .post(self.url("/charges"))
            .bearer_auth(api_key)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key {
            request = request.header("idempotency-key", format!("\"{key}\""));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        async move { request.send().await.expect("request sent") }
    }
}

/// Status, the headers a client reads, and the exact body bytes.
pub struct Captured {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Captured {
    pub async fn from(response: Response) -> Captured {
        Captured {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts a problem+json error of the given status and type.
    pub fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "status for {slug}: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.body
        );
        let body = self.json();
        assert_eq!(body["type"], format!("/problems/{slug}"), "{}", self.body);
        assert_eq!(body["status"], status);
        assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(body["detail"].as_str().is_some_and(|t| !t.is_empty()));
    }
}

/// The real `charges` binary as a child process, killed (SIGKILL) on drop.
pub struct ServerProcess {
    pub address: String,
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl ServerProcess {
    pub fn start(database_url: &str, env: &[(&str, &str)]) -> ServerProcess {
        use std::io::BufRead;
        let log = std::env::temp_dir().join(format!(
            "charges-test-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
            .env("DATABASE_URL", database_url)
            .env("BIND", "127.0.0.1:0")
            .env("WORKERS", "2")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the charges binary");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(stdout);
        stdout.read_line(&mut line).unwrap();
        // Keep reading what it prints, so that it never writes to a closed pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        let address = line
            .split("open ")
            .nth(1)
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .trim()
            .trim_end_matches('/')
            .to_owned();
        ServerProcess {
            address,
            child,
            log,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the process wrote to stderr so far (its logs).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit by itself; its exit status.
    pub fn wait_for_exit(
        &mut self,
        timeout: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("--- server logs ---\n{}", self.logs());
        }
        let _ = std::fs::remove_file(&self.log);
    }
}
