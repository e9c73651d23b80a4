//! Secrets the binary is given stay out of what it prints: the help (clap
//! would show each environment variable's value).

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
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), printed)
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
