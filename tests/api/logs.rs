//! Logs a client cannot use against the host: what it chooses (the method,
//! the request id) reaches a log line bounded and unable to end a field or
//! a line, in the human-readable format and in JSON; a request id that could
//! is not echoed either, but replaced.

use std::time::{Duration, Instant};

use crate::support::{ServerProcess, TestDatabase};

const FORMATS: [&str; 2] = ["text", "json"];

/// The server's own fields on a `request finished` line's span.
const SPAN_FIELDS: [&str; 5] = ["request_id", "method", "route", "status", "idempotency"];

fn start(format: &str, db: &TestDatabase) -> ServerProcess {
    ServerProcess::start(&db.url, &[("LOG_FORMAT", format), ("RUST_LOG", "info")])
}

/// Waits (bounded) until the log holds `n` `request finished` lines.
async fn finished_lines(server: &ServerProcess, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines = server.log_lines("request finished");
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The span fields of one `request finished` line, as (name, value), after
/// checking that the line is exactly what the server writes: in JSON, one
/// object with the span's fields and nothing else; in text,
/// `… request{k=v k=v …}: charges::telemetry: request finished elapsed_ms=…`.
fn span_fields(format: &str, line: &str) -> Vec<(String, String)> {
    if format == "json" {
        let value: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let span = value["span"].as_object().expect("a span");
        return span
            .iter()
            .filter(|(k, _)| *k != "name")
            .map(|(k, v)| {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                (k.clone(), v)
            })
            .collect();
    }
    let (_, rest) = line
        .split_once(" request{")
        .unwrap_or_else(|| panic!("no span: {line}"));
    let (fields, tail) = rest
        .split_once("}: ")
        .unwrap_or_else(|| panic!("no end of span: {line}"));
    let tail = tail
        .strip_prefix("charges::telemetry: request finished elapsed_ms=")
        .unwrap_or_else(|| panic!("not the server's message: {line}"));
    assert!(
        tail.parse::<f64>().is_ok(),
        "something after elapsed_ms: {line}"
    );
    fields
        .split(' ')
        .map(|field| {
            let (k, v) = field
                .split_once('=')
                .unwrap_or_else(|| panic!("not k=v: {field:?} in {line}"));
            assert!(
                !v.contains(['=', '"', '{', '}', '\\']) || k == "idempotency",
                "{field:?} in {line}"
            );
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// The line has the server's fields, each once, and nothing else.
fn assert_own_fields(format: &str, line: &str) -> Vec<(String, String)> {
    let fields = span_fields(format, line);
    let mut names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "a field twice: {line}");
    for name in &names {
        assert!(
            SPAN_FIELDS.contains(name),
            "a field {name:?} the server does not write: {line}"
        );
    }
    for name in ["request_id", "method", "route", "status"] {
        assert!(names.contains(&name), "no {name}: {line}");
    }
    fields
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> &'a str {
    &fields.iter().find(|(k, _)| k == name).unwrap().1
}

/// Writes `method /healthz …` on a connection of its own, and reads what
/// comes back; a write or read the server cuts short is no error.
async fn send_and_forget(addr: std::net::SocketAddr, method: String) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head =
        format!("{method} /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// A 120 000-character method is within what actix reads (a request head
/// up to 128 KiB: the method then answers 405), and was logged whole: about
/// 120 KB of log per request. A longer one is a 431 from actix itself.
#[tokio::test]
async fn a_huge_method_adds_a_bounded_line_to_the_log_in_either_format() {
    const REQUESTS: usize = 20;
    for format in FORMATS {
        let db = TestDatabase::create();
        let server = start(format, &db);
        let client = server.client();
        let before = server.logs().len();
        for i in 0..REQUESTS {
            // Every character a method may hold, or the plainest one.
            let method = if i % 2 == 0 {
                "A".repeat(120_000)
            } else {
                "b!~".repeat(40_000)
            };
            let answer = client
                .send_raw(&format!(
                    "{method} /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                ))
                .await;
            assert!(
                answer.starts_with("HTTP/1.1 405"),
                "{}",
                &answer[..answer.len().min(200)]
            );
        }
        let lines = finished_lines(&server, REQUESTS).await;
        assert_eq!(lines.len(), REQUESTS, "{format}: one line per request");
        let growth = server.logs().len() - before;
        assert!(
            growth / REQUESTS < 2048,
            "{format}: the log grew by {growth} bytes, {} per request",
            growth / REQUESTS
        );
        for line in &lines {
            let fields = assert_own_fields(format, line);
            let method = field(&fields, "method");
            assert!(
                method.len() <= 64 + 3 && method.ends_with("..."),
                "{format}: {method}"
            );
        }
        // Beyond 128 KiB, actix answers 431 (and closes while the client
        // still writes) and logs at most a line of its own.
        let before = server.logs().len();
        let answer = send_and_forget(server.addr(), "A".repeat(200_000)).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
            "{answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            server.logs().len() - before < 2048,
            "{format}: {}",
            &server.logs()[before..]
        );
    }
}

/// Each value tries to end the field (space, `=`, a quote, `}`), to add a
/// line (a newline, raw or escaped), or is just too long or not ASCII.
#[tokio::test]
async fn a_request_id_that_could_forge_log_fields_or_lines_is_replaced() {
    let forgeries: &[&[u8]] = &[
        b"x}\"route=/admin",
        b"x route=/admin",
        b"x=1",
        b"\"quoted\"",
        b"x\\\" route=/admin",
        b"x\\nINFO forged line",
        b"x%0aINFO forged line",
        b"{\"forged\":true}",
        "caf\u{e9}".as_bytes(),
        b"x\tforged",
        &[b'x'; 129],
    ];
    for format in FORMATS {
        let db = TestDatabase::create();
        let server = start(format, &db);
        let client = server.client();
        let mut served = 0;
        for id in forgeries {
            let r = client
                .send(client.request(reqwest::Method::GET, "/healthz").header(
                    "x-request-id",
                    reqwest::header::HeaderValue::from_bytes(id).unwrap(),
                ))
                .await;
            assert_eq!(r.status, 200);
            served += 1;
            let echoed = r.header("x-request-id").unwrap();
            assert!(
                uuid::Uuid::parse_str(echoed).is_ok(),
                "{format}: {:?} was echoed as {echoed:?}",
                String::from_utf8_lossy(id)
            );
        }
        // A header that would carry a line break is refused by actix before
        // any log line of ours: obs-fold, a bare CR.
        for raw in ["x\r\n\tINFO forged line", "x\rINFO forged line"] {
            let answer = client
                .send_raw(&format!(
                    "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Request-Id: {raw}\r\nConnection: close\r\n\r\n"
                ))
                .await;
            if answer.starts_with("HTTP/1.1 200") {
                served += 1;
            } else {
                assert!(answer.starts_with("HTTP/1.1 400"), "{format}: {answer}");
            }
        }
        // A sane id is still echoed and logged as sent.
        let sane = "req-7.a_b:c/d+e@f~g";
        let r = client
            .send(
                client
                    .request(reqwest::Method::GET, "/healthz")
                    .header("x-request-id", sane),
            )
            .await;
        assert_eq!(r.header("x-request-id"), Some(sane));
        served += 1;

        let lines = finished_lines(&server, served).await;
        assert_eq!(lines.len(), served, "{format}: {}", server.logs());
        for line in &lines[..served - 1] {
            let fields = assert_own_fields(format, line);
            assert_eq!(field(&fields, "route"), "/healthz", "{line}");
            let id = field(&fields, "request_id");
            assert!(
                uuid::Uuid::parse_str(id).is_ok(),
                "{format}: logged id {id:?}"
            );
        }
        let last = assert_own_fields(format, &lines[served - 1]);
        assert_eq!(field(&last, "request_id"), sane);
        let logs = server.logs();
        for forged in ["admin", "forged", "caf\u{e9}", "%C3%A9"] {
            assert!(
                !logs.contains(forged),
                "{format}: {forged:?} reached the log:\n{logs}"
            );
        }
    }
}
