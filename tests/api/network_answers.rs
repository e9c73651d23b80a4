//! What our client of the card network takes from it (issue #38, finding
//! 4): a redirect is not followed (the derived key goes to no other host,
//! and another host's 201 is no authorization), and an answer of megabytes
//! is not read to its end.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{TestApp, charge_body, spawn_app_with};

/// Reads one request (its head, and a body of `Content-Length`).
async fn read_request(stream: &mut TcpStream) -> String {
    let (mut seen, mut buf) = (Vec::new(), [0u8; 4096]);
    loop {
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&seen).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|n| n.trim().to_owned())
                })
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(0);
            if seen.len() >= end + 4 + length {
                return text;
            }
        }
    }
    String::from_utf8_lossy(&seen).to_string()
}

/// A server on loopback that answers every request with `answer`, counting
/// the requests it got; its URL.
async fn serve(
    answer: impl Fn() -> Vec<u8> + Send + Sync + 'static,
    requests: Arc<AtomicUsize>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (answer, requests) = (answer.clone(), requests.clone());
            tokio::spawn(async move {
                read_request(&mut stream).await;
                requests.fetch_add(1, Ordering::SeqCst);
                let _ = stream.write_all(&answer()).await;
            });
        }
    });
    url
}

async fn app_on(network_url: String) -> TestApp {
    spawn_app_with(move |s| {
        s.network_url = network_url;
        s.network_api_key = "sk_network_of_the_answer_tests".to_owned();
        s.network_timeout = Duration::from_secs(3);
    })
    .await
}

/// On d1dbd42 the client followed the 302 to the other host (as a GET,
/// with the derived key), and its 201 made the charge.
#[tokio::test]
async fn a_redirect_from_the_network_is_not_followed() {
    let elsewhere = Arc::new(AtomicUsize::new(0));
    let other = serve(
        || {
            let body = format!(r#"{{"id":"{}"}}"#, uuid::Uuid::new_v4());
            format!("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).into_bytes()
        },
        elsewhere.clone(),
    )
    .await;
    let location = format!("{other}/authorizations");
    let network = serve(
        move || format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").into_bytes(),
        Arc::new(AtomicUsize::new(0)),
    )
    .await;
    let app = app_on(network).await;
    let charged = app.charge("k-redirected", &charge_body()).await;
    charged.assert_problem(503, "network-unavailable");
    assert_eq!(
        elsewhere.load(Ordering::SeqCst),
        0,
        "the other host was asked"
    );
    assert_eq!(app.charges(), 0);
}

/// On d1dbd42 the client read all 10 MB of the 422.
#[tokio::test]
async fn a_10_mb_error_answer_is_not_read_to_its_end() {
    const SIZE: usize = 10 * 1024 * 1024;
    // A small send buffer, not tuned up by the kernel: what was written is
    // about what our client read.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(32 * 1024).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(16).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    // Bytes the network wrote before our client stopped taking them.
    let sent = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        read_request(&mut stream).await;
        let head = format!(
            "HTTP/1.1 422 Unprocessable Content\r\nContent-Type: application/problem+json\r\nContent-Length: {SIZE}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let (chunk, mut sent) = (vec![b' '; 16 * 1024], 0);
        while sent < SIZE {
            match tokio::time::timeout(Duration::from_secs(2), stream.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                // Closed, or no longer read.
                _ => break,
            }
        }
        sent
    });
    let app = app_on(url).await;
    let charged = app.charge("k-huge", &charge_body()).await;
    charged.assert_problem(503, "network-unavailable");
    let sent = sent.await.unwrap();
    eprintln!("the network wrote {sent} bytes of its 10 MB answer before our client stopped");
    assert!(
        sent < 1024 * 1024,
        "{sent} bytes read of a 10 MB error answer"
    );
}
