//! `examples/receiver.rs`, compiled into this test and started in-process
//! on a fresh PostgreSQL database, driven over real HTTP as a sender
//! drives it: refused deliveries record nothing; a first delivery whose
//! answer is lost, then concurrent redeliveries signed anew, pay the order
//! once and are all answered 200.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use diesel::pg::PgConnection;
use idempotency::webhook::{Secret, signature_header, unix_now};
use serde_json::{Value, json};

use super::{inbox_db, inbox_rows, secret};

#[allow(dead_code)]
#[path = "../../examples/receiver.rs"]
mod receiver;

/// A request written on a connection of its own (`Connection: close`).
fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect to the receiver");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    stream
}

/// The answer's status and body.
fn answer(mut stream: TcpStream) -> (u16, String) {
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the answer");
    let status = response[9..12].parse().expect("a status line");
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_owned())
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String) {
    answer(send(addr, method, path, headers, body))
}

/// The three headers of an attempt at `at`, signed with `secrets`.
fn attempt(secrets: &[&Secret], id: &str, at: i64, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("webhook-id", id.to_owned()),
        ("webhook-timestamp", at.to_string()),
        ("webhook-signature", signature_header(secrets, id, at, body)),
    ]
}

fn times_paid(addr: SocketAddr) -> i64 {
    let (status, body) = request(addr, "GET", "/orders/ord_1", &[], b"");
    assert_eq!(status, 200, "{body}");
    let order: Value = serde_json::from_str(&body).unwrap();
    order["times_paid"].as_i64().unwrap()
}

pub fn the_example_receiver_pays_an_order_once(test: &str) {
    let Some(db) = inbox_db::<PgConnection>(test) else {
        return;
    };
    let (new, old) = (secret(2), secret(1));
    let (started_tx, started) = mpsc::channel();
    let (url, secrets) = (db.url.clone(), vec![new.clone(), old.clone()]);
    let server = thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let (server, addr) = receiver::start(&url, secrets, 0).expect("start the receiver");
            started_tx.send((server.handle(), addr)).unwrap();
            server.await
        })
    });
    let (handle, addr) = started.recv().unwrap();

    let (status, _) = request(addr, "POST", "/orders", &[], br#"{"id": "ord_1"}"#);
    assert_eq!(status, 201);
    let event = json!({
        "id": "evt_1", "object": "event", "type": "charge.succeeded", "created_at": "2026-12-07T08:00:00Z",
        "data": {"object": {"id": "ch_1", "object": "charge", "amount": 1000, "currency": "jpy",
                            "description": "ord_1", "status": "succeeded"}}
    });
    let body = serde_json::to_vec(&event).unwrap();

    // Refused before anything is recorded: forged, tampered, stale, unsigned.
    let now = unix_now();
    let tampered = String::from_utf8_lossy(&body)
        .replace("1000", "1")
        .into_bytes();
    let refusals = [
        (
            attempt(&[&secret(9)], "evt_1", now, &body),
            body.clone(),
            401,
        ),
        (attempt(&[&new], "evt_1", now, &body), tampered, 401),
        (
            attempt(&[&new], "evt_1", now - 6 * 60, &body),
            body.clone(),
            401,
        ),
        (
            attempt(&[&new], "evt_1", now, &body)[..2].to_vec(),
            body.clone(),
            400,
        ),
    ];
    for (headers, sent, expected) in refusals {
        let (status, answer) = request(addr, "POST", "/webhooks", &headers, &sent);
        assert_eq!(status, expected, "{answer}");
    }
    assert_eq!(inbox_rows(&db), 0);
    assert_eq!(times_paid(addr), 0);

    // The first delivery is handled, but its answer never read: lost.
    let lost = send(
        addr,
        "POST",
        "/webhooks",
        &attempt(&[&new], "evt_1", unix_now(), &body),
        &body,
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while inbox_rows(&db) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first delivery was never recorded"
        );
        thread::sleep(Duration::from_millis(10));
    }
    drop(lost);

    // The sender retries, signing each attempt anew (some with the previous
    // secret, mid-rotation), twenty at once: every one answered 200.
    let redeliveries: Vec<_> = (0..20)
        .map(|i| {
            let body = body.clone();
            let signer = if i % 2 == 0 { new.clone() } else { old.clone() };
            thread::spawn(move || {
                let headers = attempt(&[&signer], "evt_1", unix_now(), &body);
                request(addr, "POST", "/webhooks", &headers, &body)
            })
        })
        .collect();
    for redelivery in redeliveries {
        let (status, answer) = redelivery.join().unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer, r#"{"received":"duplicate"}"#);
    }
    assert_eq!(times_paid(addr), 1);
    assert_eq!(inbox_rows(&db), 1);

    actix_web::rt::System::new().block_on(handle.stop(true));
    server.join().unwrap().expect("the receiver ran");
}
