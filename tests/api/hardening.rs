//! Hardening: accounts made and revoked from the command line, one
//! `Authorization` header, bounded metric labels, a deadline for the body, a
//! cap on connections, and passwords kept out of what the binary prints.

use std::time::{Duration, Instant};

use crate::support::spawn_app_with;

crate::on_both_backends! {
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
