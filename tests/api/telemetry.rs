//! What the server tells, and whom it counts: metrics on a listener of
//! their own, never the API's, with series bounded whatever methods and paths
//! a client makes up; no transport error in a problem's detail; the API's
//! metrics count the API's traffic only, not the in-process network's; a
//! refusal behind a trusted proxy is logged under the client's address; a
//! database outage is logged once when it starts and once when it ends.

use std::time::Duration;

use reqwest::Method;

use crate::support::{
    AppClient, ServerProcess, TestDatabase, charge_body, spawn_app, spawn_app_with,
};

/// On d1dbd42 the detail ended "…: the card network did not answer: io:
/// Connection refused".
#[tokio::test]
async fn a_network_that_refuses_connections_is_a_503_that_names_no_transport_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let app = spawn_app_with(move |s| {
        s.network_url = url;
        s.network_api_key = "sk_network_of_the_telemetry_tests".to_owned();
    })
    .await;
    let refused = app.charge("k-refused", &charge_body()).await;
    refused.assert_problem(503, "network-unavailable");
    let detail = refused.json()["detail"].as_str().unwrap().to_owned();
    for told in ["io:", "refused:", "onnection refused", "127.0.0.1"] {
        assert!(!detail.contains(told), "{detail}");
    }
}

/// On d1dbd42 the metrics had `route="/authorizations"` series, and one
/// keyed charge counted 2 `executed`.
#[tokio::test(flavor = "multi_thread")]
async fn the_in_process_networks_traffic_is_not_counted_in_the_apis_metrics() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let server = ServerProcess::start(
        &db.url,
        &[
            ("NETWORK_URL", "in-process"),
            ("NETWORK_DATABASE_URL", &network.url),
        ],
    );
    db.create_test_account();
    let charged = server.client().charge("k-counted", &charge_body()).await;
    assert_eq!(charged.status, 201, "{}", charged.summary());
    let metrics = AppClient::new(server.metrics_url().trim_end_matches("/metrics"));
    let text = metrics.get("/metrics").await.body;
    assert!(!text.contains("/authorizations"), "{text}");
    let executed: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("idempotency_requests_total") && l.contains("outcome=\"executed\"")
        })
        .collect();
    assert_eq!(
        executed,
        ["idempotency_requests_total{mode=\"atomic\",outcome=\"executed\"} 1"]
    );
}

/// On d1dbd42 the line named 127.0.0.1, the proxy.
#[tokio::test(flavor = "multi_thread")]
async fn behind_a_trusted_proxy_a_refusal_is_logged_under_the_clients_address() {
    let db = TestDatabase::create();
    let server = ServerProcess::start(&db.url, &[("TRUSTED_PROXIES", "127.0.0.1")]);
    let refused = server
        .client()
        .send(
            server
                .client()
                .request(reqwest::Method::GET, "/charges")
                .bearer_auth("sk_live_nobody")
                .header("x-forwarded-for", "203.0.113.9"),
        )
        .await;
    assert_eq!(refused.status, 401);
    let mut lines = Vec::new();
    for _ in 0..50 {
        lines = server.log_lines("request refused");
        if !lines.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("client=203.0.113.9"), "{}", lines[0]);
    // The API key a refused client sent is not logged either.
    assert!(!server.logs().contains("sk_live_nobody"));
}

/// A TCP forwarder from a port of its own to `target`, until it is
/// stopped: a database that goes away (connections cut, then refused) and
/// comes back on the same address. (Only the PostgreSQL tests use it.)
#[cfg(postgres_tests)]
struct Forwarder {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    connections: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>,
}

#[cfg(postgres_tests)]
impl Forwarder {
    async fn start(port: u16, target: std::net::SocketAddr) -> Forwarder {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let connections = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let held = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let copy = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                held.lock().unwrap().push(copy.abort_handle());
            }
        });
        Forwarder {
            tasks: vec![task],
            connections,
        }
    }

    /// Cuts every connection and stops listening.
    fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}

/// On d1dbd42 the outage wrote r2d2's errors (several lines each) and a
/// WARN per `/readyz`.
#[cfg(postgres_tests)]
#[tokio::test(flavor = "multi_thread")]
async fn a_database_outage_is_logged_once_as_it_starts_and_once_as_it_ends() {
    let db = crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            TestDatabase::create()
        })
        .await;
    let mut url = url::Url::parse(&db.url).unwrap();
    let target: std::net::SocketAddr =
        format!("{}:{}", url.host_str().unwrap(), url.port().unwrap_or(5432))
            .parse()
            .unwrap();
    let port = crate::support::free_port();
    url.set_port(Some(port)).unwrap();
    let forwarder = Forwarder::start(port, target).await;
    let server = ServerProcess::start(
        url.as_str(),
        &[
            ("RECOVERY_INTERVAL", "0s"),
            ("PURGE_INTERVAL", "0s"),
            ("POOL_TIMEOUT", "1s"),
        ],
    );
    let app = server.client();
    assert_eq!(app.get("/readyz").await.status, 200);
    forwarder.stop();
    for _ in 0..4 {
        assert_eq!(app.get("/readyz").await.status, 503);
    }
    let forwarder = Forwarder::start(port, target).await;
    let mut ready = 0;
    for _ in 0..100 {
        ready = app.get("/readyz").await.status;
        if ready == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(ready, 200, "{}", server.logs());
    let logs = server.logs();
    let lines: Vec<&str> = logs.lines().collect();
    assert_eq!(lines.len(), 2, "{logs}");
    assert!(lines[0].contains("the database is unreachable"), "{logs}");
    assert!(
        lines[1].contains("the database is reachable again"),
        "{logs}"
    );
    eprintln!("{logs}");
    forwarder.stop();
}

/// Before, the connections the in-process network shut past its per-peer
/// cap counted in the API's `connections_refused_total`.
#[tokio::test(flavor = "multi_thread")]
async fn the_in_process_networks_refused_connections_are_not_the_apis() {
    let (db, network) = (TestDatabase::create(), TestDatabase::create());
    let server = ServerProcess::start(
        &db.url,
        &[
            ("NETWORK_URL", "in-process"),
            ("NETWORK_DATABASE_URL", &network.url),
        ],
    );
    let url = server.network_url();
    let address: std::net::SocketAddr = url.trim_start_matches("http://").parse().unwrap();
    let mut open = Vec::new();
    for _ in 0..520 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.9:0".parse().unwrap()).unwrap();
        open.push(socket.connect(address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut byte = [0u8; 1];
    let shut = open
        .iter()
        .filter(|s| matches!(s.try_read(&mut byte), Ok(0)))
        .count();
    assert_eq!(shut, 8, "the network shut the connections past its cap");
    let metrics = AppClient::new(server.metrics_url().trim_end_matches("/metrics"));
    let text = metrics.get("/metrics").await.body;
    assert!(
        text.lines().any(|l| l == "connections_refused_total 0"),
        "{text}"
    );
}

crate::on_both_backends! {
    async fn made_up_methods_and_paths_do_not_make_up_metric_series() {
        let app = spawn_app().await;
        let series = |text: &str| text.lines().filter(|l| l.starts_with("http_requests_total{")).count();
        let before = series(&app.metrics().await);
        for i in 0..1000u32 {
            let method = reqwest::Method::from_bytes(format!("M{i:x}X").as_bytes()).unwrap();
            let _ = app.send(app.request(method, &format!("/random/{i}"))).await;
        }
        let text = app.metrics().await;
        let after = series(&text);
        assert!(after <= before + 4, "series grew from {before} to {after}");
        assert!(text.contains("method=\"OTHER\""), "made-up methods are OTHER");
        assert!(!text.contains("/random/"), "unmatched paths are not labels");
    }

    async fn metrics_are_served_on_their_own_listener_and_never_on_the_api_s() {
        let app = spawn_app().await;
        for headers in [&[][..], &[("x-forwarded-for", "203.0.113.7")][..]] {
            let mut r = app.request(Method::GET, "/metrics");
            for (name, value) in headers {
                r = r.header(*name, *value);
            }
            app.send(r).await.assert_problem(404, "not-found");
        }
        assert!(app.metrics().await.contains("http_requests_total"));
        // Only /metrics there.
        let metrics = AppClient::new(app.metrics_url.as_deref().unwrap());
        assert_eq!(metrics.get("/charges").await.status, 404);
        let none = spawn_app_with(|s| s.metrics_bind = "off".into()).await;
        assert_eq!(none.metrics_url, None);
        none.get("/metrics").await.assert_problem(404, "not-found");
    }
}
