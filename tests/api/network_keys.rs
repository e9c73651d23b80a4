//! The card network's API key: the well-known default key is never taken by
//! the in-process network, and is refused by `charges network` on an address
//! other machines reach (inside a network namespace of the test's own) and
//! by `charges serve` for a separate network. The helpers that run the
//! binary here (`demo_with_network`, `run`, `Killed`) serve `demo_walls.rs`
//! and `secrets.rs` too.

use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::{ServerProcess, TestDatabase};

/// The demo server (the default command) with a card network of its own.
pub(crate) fn demo_with_network(db: &TestDatabase, network: &TestDatabase) -> ServerProcess {
    ServerProcess::start(
        &db.url,
        &[
            ("NETWORK_URL", "in-process"),
            ("NETWORK_DATABASE_URL", network.url.as_str()),
        ],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_in_process_network_refuses_the_well_known_key() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let server = demo_with_network(&db, &network);
    db.create_test_account();
    let app = server.client();
    assert_eq!(
        app.charge("k-1", &json!({"amount": 1, "currency": "jpy"}))
            .await
            .status,
        201
    );
    let url = server.network_url();
    let http = reqwest::Client::new();
    let listed = http
        .get(format!("{url}/authorizations"))
        .bearer_auth(charges::config::DEFAULT_NETWORK_API_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), 401, "the well-known key lists nothing");
    let forged = http
        .post(format!("{url}/authorizations"))
        .bearer_auth(charges::config::DEFAULT_NETWORK_API_KEY)
        .header("idempotency-key", "\"forged\"")
        .json(&json!({"amount": 99_999_999, "currency": "usd"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401, "nor authorizes");
    assert_eq!(network.count("authorizations"), 1);
    // A restart keeps the merchant (a new key, the same account), so a
    // retry after it is still the network's replay.
    drop(server);
    let server = demo_with_network(&db, &network);
    let again = server
        .client()
        .charge("k-1", &json!({"amount": 1, "currency": "jpy"}))
        .await;
    assert!(again.replayed(), "{}", again.body);
    assert_eq!(network.count("authorizations"), 1);
    assert_eq!(network.count("accounts"), 1, "one merchant");
}

/// `charges network` in a network namespace of its own (`unshare -n`):
/// only its own loopback, down, so 0.0.0.0 reaches nothing outside.
fn network_in_a_namespace(key: Option<&str>, db: &str) -> std::process::Child {
    let mut command = Command::new("unshare");
    command
        .args(["-n", env!("CARGO_BIN_EXE_charges"), "network"])
        .env("NETWORK_BIND", "0.0.0.0:0")
        .env("NETWORK_DATABASE_URL", db)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    match key {
        Some(key) => command.env("NETWORK_API_KEY", key),
        None => command.env_remove("NETWORK_API_KEY"),
    };
    command.spawn().expect("unshare -n charges network")
}

#[test]
#[cfg_attr(
    namespace_tests_unavailable,
    ignore = "needs `unshare -n` (util-linux, as root or with CAP_SYS_ADMIN)"
)]
fn charges_network_refuses_its_default_key_on_an_address_other_machines_reach() {
    let dir = std::env::temp_dir().join(format!("charges-netns-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = format!("sqlite://{}/network.db", dir.display());
    let refused = network_in_a_namespace(None, &db)
        .wait_with_output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "started with the default key on 0.0.0.0"
    );
    assert!(said.contains("NETWORK_API_KEY is the default"), "{said}");
    // With a secret of its own it starts there.
    let mut started = Killed(network_in_a_namespace(
        Some("sk_network_secret_of_the_test"),
        &db,
    ));
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(started.0.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    drop(started);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(line.starts_with("charges network is ready"), "{line}");
}

/// `charges <args>` with `env`: its exit success and all it printed.
pub(crate) fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_charges"))
        .args(args)
        .env("BIND", "127.0.0.1:0")
        .env("METRICS_BIND", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run charges");
    (out.status.success(), crate::support::printed(&out))
}

#[test]
fn serve_refuses_a_separate_network_with_the_default_key() {
    let db = TestDatabase::create();
    let (ok, printed) = run(
        &["serve"],
        &[
            ("DATABASE_URL", &db.url),
            ("NETWORK_URL", "http://netuser:NetPass123@127.0.0.1:9"),
        ],
    );
    assert!(!ok, "{printed}");
    assert!(
        printed.contains("NETWORK_API_KEY is the default"),
        "{printed}"
    );
    assert!(!printed.contains("NetPass123"), "{printed}");
}

/// A child process killed and reaped when the test ends, passed or not.
pub(crate) struct Killed(pub(crate) std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
