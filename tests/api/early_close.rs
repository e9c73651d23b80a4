//! A connection whose request was answered before its body was read (401,
//! 408, 413) is closed, not drained (issue #38, finding 6): a client that
//! keeps sending a chunked body after its answer cannot keep the
//! connection open, slowly or fast.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{TEST_KEY, TestApp, spawn_app_with};

const BODY_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a test watches a connection at most.
const WATCH: Duration = Duration::from_secs(6);

/// What a client that sends `chunk` every `pause`, after a chunked
/// request's head, saw: the status it was answered, and when (from the
/// head's sending) the server closed the connection, if within [`WATCH`];
/// and how many bytes of body it wrote.
struct Seen {
    status: Option<u16>,
    closed_after: Option<Duration>,
    written: usize,
}

async fn send_chunks(app: &TestApp, api_key: &str, chunk: &[u8], pause: Duration) -> Seen {
    send_chunks_to(&app.socket_address(), "/charges", api_key, chunk, pause).await
}

/// [`send_chunks`] to `path` at `address` (`HOST:PORT`).
async fn send_chunks_to(
    address: &str,
    path: &str,
    api_key: &str,
    chunk: &[u8],
    pause: Duration,
) -> Seen {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut from_server, mut to_server) = stream.into_split();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {api_key}\r\n\
         Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    let started = Instant::now();
    to_server.write_all(head.as_bytes()).await.unwrap();
    let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
    let writer = async {
        let mut written = 0;
        // Until the server stops taking it (closed, or reset).
        let deadline = (started + WATCH).into();
        while let Ok(Ok(())) = tokio::time::timeout_at(deadline, to_server.write_all(&framed)).await
        {
            written += chunk.len();
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        written
    };
    let reader = async {
        let (mut answer, mut buf) = (Vec::new(), vec![0u8; 4096]);
        let closed = loop {
            match tokio::time::timeout_at((started + WATCH).into(), from_server.read(&mut buf))
                .await
            {
                Ok(Ok(0) | Err(_)) => break Some(started.elapsed()),
                Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                Err(_) => break None,
            }
        };
        let status = String::from_utf8_lossy(&answer)
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok());
        (status, closed)
    };
    let (written, (status, closed_after)) = tokio::join!(writer, reader);
    Seen {
        status,
        closed_after,
        written,
    }
}

async fn app() -> TestApp {
    spawn_app_with(|s| s.body_timeout = BODY_TIMEOUT).await
}

/// On d1dbd42 the 401 came at once and the connection stayed open for as
/// long as the drip went on (the test's 6 s).
#[tokio::test]
async fn a_body_dripping_after_a_401_is_closed_within_the_body_timeout() {
    let app = app().await;
    let seen = send_chunks(&app, "sk_live_nobody", b"x", Duration::from_millis(100)).await;
    assert_eq!(seen.status, Some(401));
    let closed = seen
        .closed_after
        .expect("the connection was still open after 6 s");
    assert!(closed < BODY_TIMEOUT, "closed after {closed:?}");
}

/// On d1dbd42 the server read on for the test's 6 s.
#[tokio::test]
async fn a_fast_stream_after_a_413_is_not_drained() {
    let app = app().await;
    let seen = send_chunks(&app, TEST_KEY, &[b' '; 64 * 1024], Duration::ZERO).await;
    assert_eq!(seen.status, Some(413));
    let closed = seen
        .closed_after
        .expect("the connection was still open after 6 s");
    assert!(
        closed < BODY_TIMEOUT,
        "closed after {closed:?}, {} bytes sent",
        seen.written
    );
}

/// The body deadline's own answer closes too: on d1dbd42 the drip went on
/// being read after the 408.
#[tokio::test]
async fn a_body_still_dripping_after_its_408_is_closed() {
    let app = app().await;
    let seen = send_chunks(&app, TEST_KEY, b" ", Duration::from_millis(200)).await;
    assert_eq!(seen.status, Some(408));
    let closed = seen
        .closed_after
        .expect("the connection was still open after 6 s");
    assert!(
        closed < BODY_TIMEOUT + Duration::from_secs(2),
        "closed after {closed:?}"
    );
}

/// The metrics listener too: before, its 405 drained the body.
#[tokio::test]
async fn a_body_dripping_to_the_metrics_listener_is_closed() {
    let app = app().await;
    let metrics = app.metrics_url.clone().unwrap();
    let address = metrics.trim_start_matches("http://");
    let seen = send_chunks_to(address, "/metrics", "-", b"x", Duration::from_millis(100)).await;
    assert_eq!(seen.status, Some(405));
    let closed = seen
        .closed_after
        .expect("the connection was still open after 6 s");
    assert!(closed < BODY_TIMEOUT, "closed after {closed:?}");
}
