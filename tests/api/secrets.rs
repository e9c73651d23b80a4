//! Secrets the binary is given stay out of what it prints and what it
//! answers: the help (clap would show each environment variable's value); a
//! database URL's password in every form libpq reads, including libpq's own
//! message when it cannot read the URL and a password holding an `@` and a
//! `/`, refused as malformed (the unit tests of `store::redact` cover every
//! form; these run the real binary); and the card network's credentials and
//! bodies, which reach no output and no client.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::network_keys::{Killed, run};
use crate::support::{ServerProcess, TestDatabase, free_port};

/// `charges <args>` with `DATABASE_URL` set to `url`: its exit success and
/// everything it printed.
fn charges_with_url(url: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_charges"))
        .args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "info")
        .output()
        .expect("run the charges binary");
    (out.status.success(), crate::support::printed(&out))
}

#[test]
fn the_help_names_environment_variables_but_never_shows_their_values() {
    let url = "postgres://u:s3cret@h/db";
    for args in [
        &["--help"][..],
        &["serve", "--help"],
        &["migrate", "--help"],
        &["purge-expired", "--help"],
        &["account", "create", "--help"],
        &["account", "revoke", "--help"],
        &["account", "list", "--help"],
    ] {
        let (ok, printed) = charges_with_url(url, args);
        assert!(ok, "{args:?}: {printed}");
        assert!(
            !printed.contains("s3cret"),
            "{args:?} shows the password:\n{printed}"
        );
        assert!(
            printed.contains("[env: DATABASE_URL]"),
            "{args:?}:\n{printed}"
        );
    }
}

/// None of these reaches a database: libpq refuses each URL before it
/// connects, and its error quotes the part it could not read; or the server
/// refuses a `key=value` string itself.
#[test]
fn a_password_in_a_url_libpq_cannot_read_is_never_printed() {
    for (url, hidden) in [
        // libpq reads "pa" as the port, and says so.
        (
            "postgres://u:pa/ss@127.0.0.1:5432/db",
            &["pa/ss", "\"pa\""][..],
        ),
        ("postgres://u:pass word@127.0.0.1:5432/db", &["pass word"]),
        ("postgres://u:s3c%ZZret@127.0.0.1:5432/db", &["s3c%ZZret"]),
        ("host=127.0.0.1 password=s3cret user=u", &["s3cret"]),
        ("host=127.0.0.1 password='se cret' user=u", &["se cret"]),
    ] {
        let (ok, printed) = charges_with_url(url, &["migrate"]);
        assert!(!ok, "{url}: {printed}");
        assert!(printed.starts_with("charges: "), "one line: {printed}");
        for secret in hidden {
            assert!(
                !printed.contains(secret),
                "{url} shows {secret}:\n{printed}"
            );
        }
        assert!(printed.contains("***"), "{url}:\n{printed}");
    }
}

/// PostgreSQL only (trust authentication ignores the password, so the URL
/// connects): a password with an unencoded `?` or `#`, which libpq reads as
/// the password's, is kept whole when the server adds its connection
/// defaults (they went into the database's name), and never printed.
#[cfg(postgres_tests)]
#[test]
fn a_password_with_a_question_mark_or_hash_connects_and_is_never_printed() {
    let db = crate::support::TestDatabase::create_for(crate::support::TestBackend::Postgres);
    for password in ["pa?ss", "pa#s?s"] {
        let url = db
            .url
            .replacen("://postgres@", &format!("://postgres:{password}@"), 1);
        assert_ne!(
            url, db.url,
            "the test database's URL names the postgres role"
        );
        let (ok, printed) = charges_with_url(&url, &["migrate"]);
        assert!(ok, "{printed}");
        assert!(printed.contains("postgres:***@"), "{printed}");
        assert!(!printed.contains(password), "{printed}");
    }
}

/// PostgreSQL only: an SQLite URL has no password to hide (the unit tests of
/// `db::redact` cover every form).
#[cfg(postgres_tests)]
#[test]
fn a_password_in_the_database_url_is_never_printed() {
    let db = TestDatabase::create_for(crate::support::TestBackend::Postgres);
    // Trust authentication ignores the password, so these URLs connect.
    let with_query = format!("{}?password=hunter2-query", db.url);
    let mut userinfo = url::Url::parse(&db.url).unwrap();
    userinfo.set_password(Some("hunter2-userinfo")).unwrap();
    for url in [with_query.as_str(), userinfo.as_str()] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
            .arg("migrate")
            .env("DATABASE_URL", url)
            .output()
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{printed}");
        assert!(!printed.contains("hunter2"), "{printed}");
        assert!(printed.contains("***"), "{printed}");
    }
}

#[test]
fn a_password_holding_an_at_and_a_slash_is_refused_as_malformed_and_never_printed() {
    let url = "postgres://app:p@ss/word@127.0.0.1:1/charges";
    for args in [
        &["serve"][..],
        &["migrate"],
        &["demo"],
        &["account", "list"],
    ] {
        let (ok, printed) = run(args, &[("DATABASE_URL", url)]);
        assert!(!ok, "{args:?}: {printed}");
        assert!(printed.contains("malformed"), "{args:?}: {printed}");
        for piece in ["ss/word", "p@ss", "word@"] {
            assert!(
                !printed.contains(piece),
                "{args:?} shows {piece:?}: {printed}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_network_s_credentials_and_its_bodies_reach_no_output_and_no_client() {
    let (db, network_db) = (TestDatabase::create(), TestDatabase::create());
    // A real network, with a key the API does not hold.
    let port = free_port();
    let network = Command::new(env!("CARGO_BIN_EXE_charges"))
        .arg("network")
        .env("NETWORK_BIND", format!("127.0.0.1:{port}"))
        .env("NETWORK_DATABASE_URL", &network_db.url)
        .env("NETWORK_API_KEY", "sk_network_the_right_one")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _network = Killed(network);
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "charges network did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("http://netuser:NetPass123@127.0.0.1:{port}");
    let server = ServerProcess::start(
        &db.url,
        &[
            ("NETWORK_URL", url.as_str()),
            ("NETWORK_API_KEY", "sk_network_a_wrong_one"),
        ],
    );
    db.create_test_account();
    let app = server.client();
    let refused = app
        .charge("k-wrong-key", &json!({"amount": 5, "currency": "jpy"}))
        .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused.body.contains("HTTP 401"),
        "the network's status at most: {}",
        refused.body
    );
    assert!(
        !refused.body.contains("/problems/unauthorized"),
        "{}",
        refused.body
    );
    assert!(!refused.body.contains("Bearer"), "{}", refused.body);
    let config = app.get("/demo/config").await.body;
    assert!(
        server.network_url().contains("netuser:***@127.0.0.1"),
        "{}",
        server.stdout()
    );
    assert!(
        !config.contains("127.0.0.1"),
        "its address is not published: {config}"
    );
    let shown = [
        config,
        app.get("/demo/state").await.body,
        server.stdout(),
        server.logs(),
    ];
    for text in shown {
        assert!(!text.contains("NetPass123"), "{text}");
        assert!(!text.contains("sk_network_"), "{text}");
    }
}
