//! The binary's start: migrations, database creation, and one-line errors.

use std::process::Command;

use charges::app::Application;
use charges::config::Settings;

use crate::support::TestDatabase;

fn charges_bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_charges"));
    // The card network (in-process by default) has tests of its own, on
    // databases that are dropped afterwards.
    cmd.env_remove("DATABASE_URL")
        .env_remove("BIND")
        .env("METRICS_BIND", "127.0.0.1:0")
        .env("NETWORK_URL", "off");
    cmd
}

#[test]
fn starting_twice_on_one_database_applies_the_migrations_once() {
    let db = TestDatabase::create();
    let mut settings = Settings::with_database_url(&db.url);
    settings.bind = "127.0.0.1:0".into();
    settings.network_url = charges::config::NETWORK_OFF.into();
    drop(Application::build(settings.clone()).expect("first start"));
    drop(Application::build(settings).expect("second start"));
    let out = charges_bin()
        .args(["migrate", "--database-url", &db.url])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied 0 migration(s)"));
}

#[cfg(postgres_tests)]
#[test]
fn migrate_creates_a_missing_database() {
    // Named but never created: `migrate` has to create it (the guard drops it).
    let db = TestDatabase::reserve_for(crate::support::TestBackend::Postgres);
    let out = charges_bin()
        .args(["migrate", "--database-url", &db.url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/postgres"))
        .unwrap()
        .count();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&format!("applied {expected} migration(s)"))
    );
}

#[track_caller]
fn assert_one_line_failure(args: &[&str], env: &[(&str, &str)], expected: &str) {
    let line = one_line_failure(args, env);
    assert!(line.contains(expected), "{line}");
}

/// The one `charges:` line a failing start prints.
#[track_caller]
fn one_line_failure(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = charges_bin()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("charges:"))
        .collect();
    assert_eq!(lines.len(), 1, "one error line: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    lines[0].to_owned()
}

/// Issue #27: a lease that a call to the card network could outlast is
/// refused at start, by `serve` and by `demo`, before anything else (the
/// database here is one nothing listens for). The security review's
/// settings: a 3 s lease, a 5 s network timeout, the pool's default 5 s.
#[test]
fn a_lease_shorter_than_the_network_timeout_plus_the_pool_timeout_is_refused_at_start() {
    let short = [
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/x"),
        ("NETWORK_URL", "in-process"),
        ("IDEMPOTENCY_LEASE", "3s"),
        ("NETWORK_TIMEOUT", "5s"),
        ("POOL_TIMEOUT", "5s"),
    ];
    let expected = "charges: IDEMPOTENCY_LEASE (3s) is shorter than NETWORK_TIMEOUT (5s) + POOL_TIMEOUT (5s) + 1s: a charge still waiting on the card network could have its key taken over. Set IDEMPOTENCY_LEASE to at least 11s, or shorten NETWORK_TIMEOUT or POOL_TIMEOUT.";
    for command in ["serve", "demo"] {
        let line = one_line_failure(&[command, "--bind", "127.0.0.1:0"], &short);
        assert_eq!(line, expected, "{command}");
    }
    // The same lease without a card network: no call to outlast.
    let db = TestDatabase::create();
    let off = [("IDEMPOTENCY_LEASE", "3s"), ("NETWORK_URL", "off")];
    drop(crate::support::ServerProcess::start(&db.url, &off));
}

/// Every default (a 30 s lease; NETWORK_TIMEOUT and POOL_TIMEOUT 5 s) with
/// the default in-process card network: the server starts and charges.
#[tokio::test]
async fn the_default_lease_starts_with_the_in_process_network_and_charges() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let env = [
        ("NETWORK_URL", "in-process"),
        ("NETWORK_DATABASE_URL", network.url.as_str()),
    ];
    let server = crate::support::ServerProcess::start(&db.url, &env);
    db.create_test_account();
    let r = server
        .client()
        .charge("k-default-lease", &crate::support::charge_body())
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.json()["authorization_id"].is_string(), "{}", r.body);
}

#[test]
fn bad_configuration_is_one_clear_line_and_a_failing_exit() {
    // Port 0: the database's error, whatever else listens on 8080.
    assert_one_line_failure(
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            "mysql://localhost/x",
        ],
        &[],
        "neither a PostgreSQL URL",
    );
    assert_one_line_failure(
        &[
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--database-url",
            "postgres://postgres@127.0.0.1:1/x",
        ],
        &[],
        "cannot connect to the database",
    );
    assert_one_line_failure(
        &["serve", "--bind", "256.0.0.1:80"],
        &[("DATABASE_URL", &TestDatabase::create().url)],
        "cannot listen on 256.0.0.1:80",
    );
}

#[test]
fn a_taken_port_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let db = TestDatabase::create();
    assert_one_line_failure(
        &["serve", "--bind", &addr, "--database-url", &db.url],
        &[],
        "cannot listen on",
    );
}

#[test]
fn without_database_url_it_serves_from_charges_db_in_the_working_directory() {
    let dir = std::env::temp_dir().join(format!("charges-cwd-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut child = charges_bin()
        .current_dir(&dir)
        .env("BIND", "127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let ready = lines.next().unwrap().unwrap();
    let database = lines.next().unwrap().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        ready.starts_with("charges is ready: open http://127.0.0.1:"),
        "{ready}"
    );
    assert!(
        database.contains("charges.db") && database.contains("sqlite"),
        "{database}"
    );
    assert!(
        dir.join("charges.db").exists(),
        "the SQLite file was created in the working directory"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A libpq multi-host URL (the shape a primary with a standby is named by):
/// the first host refuses connections, libpq goes on to the next, and the
/// server migrates and serves there.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_multi_host_url_reaches_the_host_that_answers() {
    let db = TestDatabase::create_for(crate::support::TestBackend::Postgres);
    let closed = crate::support::free_port();
    let at = db.url.find('@').expect("a user in TEST_DATABASE_URL") + 1;
    let url = format!(
        "{}127.0.0.1:{closed},{}?target_session_attrs=read-write",
        &db.url[..at],
        &db.url[at..]
    );
    let mut settings = Settings::with_database_url(&url);
    settings.demo = Some(true);
    settings.bind = "127.0.0.1:0".into();
    settings.network_url = charges::config::NETWORK_OFF.into();
    let app = Application::build(settings).expect("starts on the second host");
    assert_eq!(app.pool().backend().as_str(), "postgresql");
    db.create_test_account();
    let client = crate::support::AppClient::new(&app.url());
    tokio::spawn(app.run_until_stopped());
    let r = client
        .charge("k-multi-host", &crate::support::charge_body())
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(db.charges(), 1);
}

/// `charges serve` with every default (the in-process card network
/// included) on a two-host URL, as an HA manager gives it: both databases,
/// the API's and the network's beside it, are created on the host that
/// answers (on main, 343f942: "database … does not exist").
#[cfg(postgres_tests)]
#[tokio::test]
async fn serve_with_every_default_on_a_two_host_url_creates_both_databases_and_charges() {
    use diesel::{Connection, RunQueryDsl};
    /// Drops the network's database, which no `TestDatabase` owns.
    struct DropNetworkDatabase(String);
    impl Drop for DropNetworkDatabase {
        fn drop(&mut self) {
            let admin = crate::support::db::server_url();
            if let Ok(mut c) = diesel::PgConnection::establish(&admin) {
                let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.0);
                let _ = diesel::sql_query(drop).execute(&mut c);
            }
        }
    }
    // Named, not created: the server creates it.
    let db = TestDatabase::reserve_for(crate::support::TestBackend::Postgres);
    let name = db.url.rsplit('/').next().unwrap().to_owned();
    let _network_db = DropNetworkDatabase(format!("{name}_network"));
    let closed = crate::support::free_port();
    let at = db.url.find('@').expect("a user in TEST_DATABASE_URL") + 1;
    let url = format!("{}127.0.0.1:{closed},{}", &db.url[..at], &db.url[at..]);
    let server = crate::support::ServerProcess::start(&url, &[("NETWORK_URL", "in-process")]);
    db.create_test_account();
    let r = server
        .client()
        .charge("k-two-hosts", &crate::support::charge_body())
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.json()["authorization_id"].is_string(), "{}", r.body);
    assert_eq!(db.charges(), 1);
}

/// The first run never fails on a port it does not need (issue #37):
/// `charges demo` starts while another program holds METRICS_BIND's default,
/// 127.0.0.1:9464, and serves without metrics; `charges serve` told to use
/// that port still refuses, naming the setting.
#[test]
fn the_demo_starts_while_another_program_holds_the_default_metrics_port() {
    let port = charges::config::DEFAULT_METRICS_BIND;
    // Held by this test, or already by someone else: held either way.
    let _held = std::net::TcpListener::bind(port).ok();
    assert!(std::net::TcpListener::bind(port).is_err(), "{port} is held");
    let db = TestDatabase::create();
    let unset = crate::support::server::UNSET;
    let demo = crate::support::ServerProcess::try_start_with(
        "demo",
        &["demo"],
        &db.url,
        &[("METRICS_BIND", unset), ("DEMO", unset)],
    )
    .unwrap_or_else(|e| panic!("charges demo must start: {e}"));
    // The banner's last line comes after the ready line, read as it comes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !demo.stdout().contains("metrics:") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(demo.stdout().contains("metrics: off"), "{}", demo.stdout());
    assert!(
        demo.logs().contains("the demo runs without metrics"),
        "{}",
        demo.logs()
    );
    drop(demo);
    let serve = crate::support::ServerProcess::try_start_with(
        "serve",
        &["serve"],
        &db.url,
        &[("METRICS_BIND", port)],
    );
    let refused = serve.err().expect("serve refuses a taken METRICS_BIND");
    assert!(refused.contains("METRICS_BIND"), "{refused}");
}

/// A newcomer's mistakes are named with their setting and their fix (issue
/// #40): a demo pointed at a folder without the page refuses to start (it
/// would serve a 404 for every page) and creates no database; a taken BIND
/// names BIND.
#[test]
fn a_wrong_web_dir_and_a_taken_bind_are_named_with_their_fix() {
    let dir = std::env::temp_dir().join(format!("charges-web-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let database = dir.join("charges.db");
    let out = charges_bin()
        .args(["demo", "--web-dir"])
        .arg(&dir)
        .env("DATABASE_URL", format!("sqlite://{}", database.display()))
        .env("BIND", "127.0.0.1:0")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("has no index.html") && stderr.contains("WEB_DIR"),
        "{stderr}"
    );
    assert!(
        !database.exists(),
        "a failed start leaves no database behind"
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let out = charges_bin()
        .arg("serve")
        .env("DATABASE_URL", format!("sqlite://{}", database.display()))
        .env("BIND", taken.local_addr().unwrap().to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("(BIND: set it to a free address"),
        "{stderr}"
    );
    let help = charges_bin().args(["demo", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        !help.contains(env!("CARGO_MANIFEST_DIR")),
        "no build machine's path: {help}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue #40: every start refused for its settings says which setting and
/// leaves no database behind: a pool of no connections was a panic that
/// created `./charges.db`, and a separate card network with the public
/// key was refused only after the database was created.
#[test]
fn a_start_refused_for_its_settings_names_them_and_creates_no_database() {
    let dir =
        std::env::temp_dir().join(format!("charges-refused-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let refused = [
        (("POOL_SIZE", "0"), "POOL_SIZE"),
        (
            ("NETWORK_URL", "http://127.0.0.1:9"),
            "NETWORK_API_KEY is the default",
        ),
    ];
    for ((name, value), expected) in refused {
        let out = charges_bin()
            .arg("serve")
            .current_dir(&dir)
            .env("BIND", "127.0.0.1:0")
            .env(name, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}={value}");
        assert!(!stderr.contains("panicked"), "{name}={value}: {stderr}");
        assert!(stderr.contains(expected), "{name}={value}: {stderr}");
        assert!(
            !dir.join("charges.db").exists(),
            "{name}={value} left ./charges.db behind"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
