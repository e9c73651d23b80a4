//! What one client or one account may take of the server: rate limits per
//! account and per client address (a 429 stores nothing and looks no key
//! up), a deadline for the body (408), the connection caps (overall, where
//! idle connections make room, and per address), the keep-alive lifetime,
//! and floods of connections or of refusals that leave other clients served
//! and the log small. Two clients on one machine are told apart by their
//! source address: the whole of 127.0.0.0/8 is loopback, so a flood comes
//! from 127.0.0.2 while the client it must not starve talks from 127.0.0.1.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{
    AppClient, ServerProcess, TEST_KEY, TestDatabase, charge_body, spawn_app_with,
};

const SHOP_KEY: &str = "sk_live_shop_for_limit_tests";

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

    async fn a_body_that_arrives_too_slowly_gets_408() {
        let app = spawn_app_with(|s| s.body_timeout = Duration::from_millis(800)).await;
        let started = Instant::now();
        // One byte every 300 ms: the body never completes in time.
        let answer = app
            .send_slowly(
                "POST /charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk_live_test_account\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
                &[b' '; 20],
                Duration::from_millis(300),
            )
            .await;
        assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
        assert!(answer.contains("application/problem+json") && answer.contains("/problems/request-timeout"), "{answer}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(app.charges(), 0);
        let documented = app.get_json("/problems/request-timeout").await;
        assert_eq!(documented["status"], 408);
    }

    async fn connections_beyond_the_cap_wait_until_a_busy_one_closes_and_an_idle_one_makes_room() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // One worker, so that the per-worker count actix keeps is the cap.
        let app = spawn_app_with(|s| {
            s.workers = Some(1);
            s.max_connections = 2;
        })
        .await;
        let address = app.url("").trim_start_matches("http://").trim_end_matches('/').to_owned();
        let healthz = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
        // A request in flight: its head, and half its body (read within BODY_TIMEOUT).
        let busy = b"POST /charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk_live_test_account\r\n\
                     Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{";
        // Reads until one whole (small) answer is in, or `limit` passes.
        async fn answer(stream: &mut tokio::net::TcpStream, limit: Duration) -> Option<String> {
            let mut buf = vec![0u8; 4096];
            let n = tokio::time::timeout(limit, stream.read(&mut buf)).await.ok()?.ok()?;
            (n > 0).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
        }
        // Two busy connections: none of them may be closed to make room.
        let mut open = Vec::new();
        for _ in 0..2 {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            stream.write_all(busy).await.unwrap();
            open.push(stream);
            // In flight before the next connects (until then it is idle, and
            // the next would close it to make room).
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let mut third = tokio::net::TcpStream::connect(&address).await.unwrap();
        third.write_all(healthz).await.unwrap();
        assert_eq!(
            answer(&mut third, Duration::from_millis(800)).await,
            None,
            "a third connection is not served while two busy ones are open"
        );
        drop(open.pop());
        let late = answer(&mut third, Duration::from_secs(5)).await;
        assert!(late.is_some_and(|a| a.starts_with("HTTP/1.1 200")), "served once one closed");
        drop(open);
        drop(third);
        tokio::time::sleep(Duration::from_millis(300)).await;

        // Two idle keep-alive connections: the one idle the longest is
        // closed for a new one, which is served at once.
        let mut idle = Vec::new();
        for _ in 0..2 {
            let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
            stream.write_all(healthz).await.unwrap();
            let first = answer(&mut stream, Duration::from_secs(5)).await;
            assert!(first.is_some_and(|a| a.starts_with("HTTP/1.1 200")), "within the cap");
            idle.push(stream);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut new = tokio::net::TcpStream::connect(&address).await.unwrap();
        new.write_all(healthz).await.unwrap();
        let served = answer(&mut new, Duration::from_secs(1)).await;
        assert!(served.is_some_and(|a| a.starts_with("HTTP/1.1 200")), "an idle one made room");
        let mut oldest = idle.remove(0);
        assert_eq!(answer(&mut oldest, Duration::from_secs(2)).await, None, "the longest idle is closed");
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
