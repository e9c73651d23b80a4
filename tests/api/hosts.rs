//! The loopback-only services answer only this machine's names (issue #38,
//! finding 7): a web page using DNS rebinding (`Host: evil.example`) does
//! not reach the demo, `/metrics` or the in-process card network; the API
//! of `charges serve` answers any Host.

use std::time::{Duration, Instant};

use charges::app::Application;
use charges::config::{NETWORK_IN_PROCESS, Settings};

use crate::support::{AppClient, Captured, TEST_KEY, TestDatabase, spawn_app, spawn_app_with};

/// `GET path` to `address` (`http://HOST:PORT`) with this `Host`.
async fn get_with_host(address: &str, path: &str, host: &str, headers: &str) -> Captured {
    let raw = AppClient::new(address)
        .send_raw(&format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"
        ))
        .await;
    Captured::parse(&raw)
}

fn port(address: &str) -> &str {
    address.rsplit(':').next().unwrap()
}

/// On d1dbd42 all three answered evil.example 200.
#[tokio::test]
async fn the_demo_and_metrics_refuse_a_host_that_is_not_this_machines() {
    let app = spawn_app().await;
    let metrics = app.metrics_url.clone().unwrap();
    for (address, path) in [
        (&app.address, "/"),
        (&app.address, "/demo/state"),
        (&metrics, "/metrics"),
    ] {
        let refused = get_with_host(address, path, "evil.example", "").await;
        refused.assert_problem(421, "host-not-allowed");
        let refused = get_with_host(
            address,
            path,
            &format!("evil.example:{}", port(address)),
            "",
        )
        .await;
        refused.assert_problem(421, "host-not-allowed");
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            let answered =
                get_with_host(address, path, &format!("{host}:{}", port(address)), "").await;
            assert_eq!(
                answered.status,
                200,
                "{host} {path}: {}",
                answered.summary()
            );
        }
    }
    // The demo account's API too: it is the demo.
    let auth = format!("Authorization: Bearer {}\r\n", crate::support::DEMO_KEY);
    get_with_host(&app.address, "/charges", "evil.example", &auth)
        .await
        .assert_problem(421, "host-not-allowed");
}

#[tokio::test]
async fn a_name_in_allowed_hosts_is_answered() {
    let app = spawn_app_with(|s| s.allowed_hosts = vec!["Demo.Example".to_owned()]).await;
    let answered = get_with_host(&app.address, "/demo/state", "demo.example:8080", "").await;
    assert_eq!(answered.status, 200, "{}", answered.summary());
    get_with_host(&app.address, "/demo/state", "other.example", "")
        .await
        .assert_problem(421, "host-not-allowed");
}

#[tokio::test]
async fn the_api_of_charges_serve_answers_any_host() {
    let app = spawn_app_with(|s| s.demo = Some(false)).await;
    let auth = format!("Authorization: Bearer {TEST_KEY}\r\n");
    let answered = get_with_host(&app.address, "/charges", "pay.example.com", &auth).await;
    assert_eq!(answered.status, 200, "{}", answered.summary());
}

/// An app with an in-process network answering in `latency`; its network's URL.
async fn with_network(db: &TestDatabase, network: &TestDatabase, latency: Duration) -> String {
    let mut settings = Settings::with_database_url(&db.url);
    settings.bind = "127.0.0.1:0".to_owned();
    settings.workers = Some(1);
    settings.demo = Some(false);
    settings.network_url = NETWORK_IN_PROCESS.to_owned();
    settings.network_database_url = Some(network.url.clone());
    settings.network_latency = latency;
    let app = Application::build(settings).expect("the app starts");
    let url = app.network_url().expect("a network").to_owned();
    tokio::spawn(app.run_until_stopped());
    url
}

/// On d1dbd42 the network answered evil.example (a 401 for want of its
/// key, after reading the request), and a bad key waited out the
/// network's latency (1 s) before its 401.
#[tokio::test]
async fn the_in_process_network_refuses_other_hosts_and_bad_keys_at_once() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let url = with_network(&db, &network, Duration::from_secs(1)).await;
    get_with_host(&url, "/authorizations", "evil.example", "")
        .await
        .assert_problem(421, "host-not-allowed");
    let bad_key = AppClient::new(&url)
        .request(reqwest::Method::POST, "/authorizations")
        .bearer_auth("sk_network_guessed")
        .header("idempotency-key", "\"k\"")
        .header("content-type", "application/json")
        .body(r#"{"amount": 1000, "currency": "jpy"}"#);
    let started = Instant::now();
    let refused = AppClient::new(&url).send(bad_key).await;
    let took = started.elapsed();
    refused.assert_problem(401, "unauthorized");
    assert!(
        took < Duration::from_millis(300),
        "a bad key's 401 took {took:?}"
    );
}

/// Past the per-peer cap (512), one address's connections to the network
/// are shut at accept. On d1dbd42 it took all 540.
#[tokio::test]
async fn the_in_process_network_caps_one_addresss_connections() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let url = with_network(&db, &network, Duration::ZERO).await;
    let address = url.trim_start_matches("http://").to_owned();
    let source: std::net::SocketAddr = "127.0.0.7:0".parse().unwrap();
    let mut open = Vec::new();
    for _ in 0..540 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(source).unwrap();
        open.push(socket.connect(address.parse().unwrap()).await.unwrap());
    }
    // A shut connection reads as closed; an open one has nothing to read.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut byte = [0u8; 1];
    let shut = open
        .iter()
        .filter(|stream| matches!(stream.try_read(&mut byte), Ok(0)) || stream.peer_addr().is_err())
        .count();
    assert_eq!(shut, 540 - 512, "connections shut at accept");
}

/// A flood of refused Hosts is summarized like other refusals: before
/// (40f443a), each 421 wrote a `request finished` line.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_unknown_hosts_costs_the_log_a_line() {
    let db = TestDatabase::create();
    let server = crate::support::ServerProcess::start(&db.url, &[("RUST_LOG", "info")]);
    let before = server.logs().len();
    for _ in 0..200 {
        get_with_host(&server.address, "/demo/state", "evil.example", "")
            .await
            .assert_problem(421, "host-not-allowed");
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let grown = server.logs().len() - before;
    assert!(
        grown < 2048,
        "200 refused Hosts grew the log by {grown} bytes"
    );
    assert_eq!(server.log_lines("request refused").len(), 1);
}
