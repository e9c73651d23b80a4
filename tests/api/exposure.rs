//! Safe to expose, round three (issue #28), each finding run through the
//! real binary: the demo's view holds the demo's rows only, the network's
//! ledger included; the card network takes no well-known key (refused on an
//! address other machines reach, inside a network namespace of the test's
//! own; never accepted by the in-process network); no output shows a URL's
//! password or the network's credentials, and no network body reaches a
//! client; a flood of refusals costs the log kilobytes; connections held
//! idle from four addresses do not keep a fifth's requests waiting.
//! (The bare `proxy_pass` in front of `charges serve` is in `deploy.rs`.)

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{AppClient, ServerProcess, TEST_KEY, TestDatabase};

/// The log's size now (bytes).
fn log_size(server: &ServerProcess) -> usize {
    server.logs().len()
}

#[tokio::test(flavor = "multi_thread")]
async fn five_thousand_429s_from_one_address_grow_the_log_by_kilobytes() {
    let db = TestDatabase::create();
    let server = ServerProcess::start(
        &db.url,
        &[
            ("RATE_LIMIT_PER_CLIENT", "1"),
            ("RUST_LOG", "info"),
            ("LOG_FORMAT", "json"),
        ],
    );
    let app = AppClient::from_source(&server.address, "127.0.0.7");
    let before = log_size(&server);
    let mut refused = 0;
    // Waves of 50 concurrent requests, 100 of them.
    for _ in 0..100 {
        let wave = (0..50).map(|_| app.send(app.request(Method::GET, "/healthz")));
        refused += futures::future::join_all(wave)
            .await
            .iter()
            .filter(|r| r.status == 429)
            .count();
    }
    assert!(refused >= 4_990, "{refused} refused");
    // Broken request heads: counted, summarized.
    for _ in 0..500 {
        let mut s = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let _ = s
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
            .await;
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut sink)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = log_size(&server) - before;
    assert!(grown < 200 * 1024, "the log grew by {grown} bytes");
    let metrics = AppClient::new(server.metrics_url().trim_end_matches("/metrics"));
    let text = metrics.get("/metrics").await.body;
    let count = |reason: &str| -> u64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(&format!("requests_refused_total{{reason=\"{reason}\"}} "))
            })
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    assert!(count("rate_limited") >= refused as u64, "{text}");
    assert!(count("malformed") >= 500, "{text}");
    eprintln!(
        "5 000 requests, {refused} refused with 429, and 500 malformed heads: the log grew by {grown} bytes"
    );
}

/// One connection from `source` held as an attacker holds it: a keep-alive
/// `GET /healthz` every 2 s (inside actix's 5 s keep-alive), reconnecting
/// whenever the server closes it. Counts its answered requests in `answered`.
async fn hoard(source: IpAddr, to: SocketAddr, answered: Arc<AtomicUsize>) {
    loop {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(source, 0)).unwrap();
        let Ok(mut stream) = socket.connect(to).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        loop {
            if stream
                .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                .await
                .is_err()
            {
                break;
            }
            let mut buf = [0u8; 1024];
            match stream.read(&mut buf).await {
                Ok(n) if n > 0 => answered.fetch_add(1, Ordering::Relaxed),
                _ => break,
            };
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn connections_held_idle_from_four_addresses_do_not_keep_a_fifth_waiting() {
    let db = TestDatabase::create();
    // Four addresses may hold more than MAX_CONNECTIONS between them.
    let server = ServerProcess::start(
        &db.url,
        &[
            ("MAX_CONNECTIONS", "100"),
            ("MAX_CONNECTIONS_PER_PEER", "30"),
        ],
    );
    db.create_test_account();
    let to = server.addr();
    let answered = Arc::new(AtomicUsize::new(0));
    let mut hoarders = Vec::new();
    for source in ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"] {
        for _ in 0..30 {
            let source = source.parse().unwrap();
            hoarders.push(tokio::spawn(hoard(source, to, answered.clone())));
        }
    }
    // Until the hoard holds every slot it can (100 answered at least).
    let deadline = Instant::now() + Duration::from_secs(10);
    while answered.load(Ordering::Relaxed) < 100 {
        assert!(Instant::now() < deadline, "the hoard never got going");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let active = AppClient::from_source(&server.address, "127.0.0.6");
    let mut slowest = Duration::ZERO;
    // Three seconds of an active client, a request every 100 ms.
    for _ in 0..30 {
        let started = Instant::now();
        let r = active
            .send(
                active
                    .request(Method::GET, "/charges")
                    .bearer_auth(TEST_KEY),
            )
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        slowest = slowest.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for h in &hoarders {
        h.abort();
    }
    assert!(
        slowest < Duration::from_secs(1),
        "the active client waited {slowest:?}"
    );
    let text = AppClient::new(server.metrics_url().trim_end_matches("/metrics"))
        .get("/metrics")
        .await
        .body;
    assert!(
        !text.contains("idle_connections_closed_total 0\n"),
        "{text}"
    );
    eprintln!(
        "120 connections kept alive from 4 addresses; the fifth's slowest of 30 requests: {slowest:?}"
    );
}
