//! Safe to expose, rounds two and three: one client or the demo cannot take
//! the others' capacity. The demo runs on connections of its own; demo mode
//! is on only when the operator asks, never by a request's headers; the
//! demo's routes refuse cross-site POSTs; rate limits per account and per
//! client address; unknown keys cached; connections per address capped, and
//! idle ones closed first near MAX_CONNECTIONS; `/metrics` on a listener of
//! its own only.
//!
//! Two clients on one machine are told apart by their source address: the
//! whole of 127.0.0.0/8 is loopback, so a flood comes from 127.0.0.2 while
//! the client it must not starve talks from 127.0.0.1.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{AppClient, TEST_KEY, charge_body, spawn_app_with};

const SHOP_KEY: &str = "sk_live_shop_for_capacity_tests";

/// A raw connection to the app from `source`, or why none could be used.
async fn connect_from(source: &str, app: &AppClient) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse().unwrap(), 0))
        .unwrap();
    let addr: SocketAddr = app.socket_address().parse().unwrap();
    socket.connect(addr).await.unwrap()
}

/// Sends one keep-alive `GET /healthz` on `stream`; its status, or `None`
/// when the connection is closed instead.
async fn healthz_on(stream: &mut tokio::net::TcpStream) -> Option<String> {
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .is_err()
    {
        return None;
    }
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

crate::on_both_backends! {
    async fn an_account_over_its_rate_limit_hears_429_and_nothing_is_stored_for_it() {
        let app = spawn_app_with(|s| s.rate_limit_per_account = 5).await;
        app.create_account("Shop", SHOP_KEY);
        let body = charge_body();
        // A burst of 10 (twice the rate), then the bucket is empty.
        let keys: Vec<String> = (0..15).map(|i| format!("k-{i}")).collect();
        let answers =
            futures::future::join_all(keys.iter().map(|k| app.charge(k.as_str(), &body))).await;
        let limited: Vec<_> = answers.iter().filter(|a| a.status == 429).collect();
        assert!(limited.len() >= 3, "{:?}", answers.iter().map(|a| a.status).collect::<Vec<_>>());
        for a in &limited {
            a.assert_problem(429, "rate-limited");
            assert!(a.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
        }
        let made = answers.iter().filter(|a| a.status == 201).count() as i64;
        assert_eq!(app.charges(), made);
        assert_eq!(app.keys(), made, "a 429 is never stored under its key");
        // Another account is not held by this one's limit.
        assert_eq!(app.get_as(SHOP_KEY, "/charges").await.status, 200);
        // After Retry-After the same keys work.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let i = answers.iter().position(|a| a.status == 429).unwrap();
        assert_eq!(app.charge(keys[i].as_str(), &body).await.status, 201);
    }

    async fn a_client_address_over_its_rate_limit_hears_429_before_any_key_is_looked_up() {
        let app = spawn_app_with(|s| s.rate_limit_per_client = 5).await;
        let flooder = AppClient::from_source(&app.address, "127.0.0.2");
        let mut statuses = Vec::new();
        for i in 0..20 {
            let r = flooder
                .send(flooder.request(Method::GET, "/charges").bearer_auth(format!("sk_made_up_{i}")))
                .await;
            statuses.push(r.status);
        }
        assert!(statuses.contains(&429), "{statuses:?}");
        assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
        // Another address is served.
        assert_eq!(app.get_as(TEST_KEY, "/charges").await.status, 200);
        // No key was looked up for a 429: a key looked up and not found is
        // refused from the cache for a few seconds after its account is made
        // (the next test), while the key of a 429, made now, works at once.
        let key = |status: u16| format!("sk_made_up_{}", statuses.iter().position(|s| *s == status).unwrap());
        let (limited, looked_up) = (key(429), key(401));
        app.create_account("Made after its 429", &limited);
        app.create_account("Made after its 401", &looked_up);
        assert_eq!(app.get_as(&limited, "/charges").await.status, 200, "the 429 looked its key up");
        app.get_as(&looked_up, "/charges").await.assert_problem(401, "unauthorized");
    }
}

/// One address may hold `MAX_CONNECTIONS_PER_PEER` connections; one more is
/// shut at once, and another address is served meanwhile.
#[tokio::test]
async fn connections_beyond_the_per_address_cap_are_shut_and_others_are_served() {
    let app = spawn_app_with(|s| s.max_connections_per_peer = 4).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut c = connect_from("127.0.0.2", &app).await;
        let status = healthz_on(&mut c).await.expect("served");
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        held.push(c);
    }
    let mut fifth = connect_from("127.0.0.2", &app).await;
    assert_eq!(healthz_on(&mut fifth).await, None, "the fifth is shut");
    // Another address, meanwhile.
    let mut other = connect_from("127.0.0.3", &app).await;
    assert!(healthz_on(&mut other).await.is_some());
    // One closed, one more may open.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = connect_from("127.0.0.2", &app).await;
    assert!(healthz_on(&mut again).await.is_some());
}

/// A keep-alive connection past its lifetime is closed after its next
/// response: nobody keeps a connection slot for ever.
#[tokio::test]
async fn a_keep_alive_connection_past_its_lifetime_is_closed_after_its_next_response() {
    let app = spawn_app_with(|s| s.keep_alive_lifetime = Duration::from_secs(1)).await;
    let mut c = connect_from("127.0.0.1", &app).await;
    let first = healthz_on(&mut c).await.unwrap();
    assert!(
        !first.to_ascii_lowercase().contains("connection: close"),
        "{first}"
    );
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let second = healthz_on(&mut c).await.unwrap();
    assert!(
        second.to_ascii_lowercase().contains("connection: close"),
        "{second}"
    );
}

const PER_PEER: usize = 16;

/// Issue #24's flood, bounded to seconds: one address opens more keep-alive
/// connections than `MAX_CONNECTIONS` lets the server hold, each pinging
/// `/healthz` every second; another client is served at its usual latency.
#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_connections_from_one_address_leaves_another_client_served() {
    let app = spawn_app_with(|s| {
        s.max_connections = 64;
        s.max_connections_per_peer = PER_PEER;
    })
    .await;
    // A new connection for each of its requests: it needs a free slot.
    let other = AppClient::one_connection_per_request(&app.address);
    let before = {
        let started = Instant::now();
        assert_eq!(other.get("/healthz").await.status, 200);
        started.elapsed()
    };
    let address = AppClient::new(&app.address);
    let flood = tokio::spawn(async move {
        let mut tasks = Vec::new();
        for _ in 0..100 {
            let address = address.clone();
            tasks.push(tokio::spawn(async move {
                // Reconnects when shut, pinging every second, for 4 s.
                let until = Instant::now() + Duration::from_secs(4);
                while Instant::now() < until {
                    let mut c = connect_from("127.0.0.2", &address).await;
                    while Instant::now() < until && healthz_on(&mut c).await.is_some() {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }));
        }
        futures::future::join_all(tasks).await;
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut during = Duration::ZERO;
    for _ in 0..10 {
        let started = Instant::now();
        let r = other.get("/healthz").await;
        assert_eq!(r.status, 200);
        during = during.max(started.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    flood.await.unwrap();
    assert!(
        during < Duration::from_secs(1),
        "another client waited {during:?}"
    );
    eprintln!(
        "another client's GET /healthz: {before:?} before the flood, slowest {during:?} during it (100 connections from one address, MAX_CONNECTIONS 64, 16 per address)"
    );
}
