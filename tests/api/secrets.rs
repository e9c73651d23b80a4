//! Secrets the binary is given stay out of what it prints: the help (clap
//! would show each environment variable's value), and the errors about a
//! database URL in every form libpq reads, including libpq's own message
//! when it cannot read the URL (the unit tests of `store::redact` cover every
//! form; these run the real binary).

use std::process::Command;

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
