//! `charges conformance`, the real binary, against this API (atomic and
//! key-first, real accounts) and against small servers on loopback that
//! each get one thing wrong: it must pass every MUST and SHOULD row here,
//! and report exactly the rows each flawed server breaks, exiting 1.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use charges::idempotency::Mode;
use serde_json::{Value, json};

use crate::support::spawn_app_with;

const ALICE: &str = "sk_live_conformance_alice";
const BOB: &str = "sk_live_conformance_bob";

/// What the checker printed with `--json`, and its exit status.
struct Run {
    report: Value,
    code: i32,
}

impl Run {
    fn rows(&self, result: &str) -> BTreeSet<String> {
        self.report["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .filter(|r| r["result"] == result)
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

async fn conformance(url: &str, args: &[&str]) -> Run {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_charges"))
        .arg("conformance")
        .arg(url)
        .args(args)
        .arg("--json")
        .output()
        .await
        .expect("run charges conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    Run {
        report,
        code: out.status.code().expect("an exit status"),
    }
}

/// The checker against this API in `mode`, as two real accounts, every
/// optional check switched on.
async fn this_api_in(mode: Mode) {
    let app = spawn_app_with(|s| s.idempotency_mode = mode).await;
    app.create_account("Alice", ALICE);
    app.create_account("Bob", BOB);
    let run = conformance(
        &app.address,
        &[
            "-H",
            &format!("Authorization: Bearer {ALICE}"),
            "--second-credential",
            &format!("Authorization: Bearer {BOB}"),
            "--read-url",
            "/charges?limit=100",
            "--other-endpoint",
            "/charges/{id}/refunds",
            "--other-endpoint-body",
            r#"{"amount":100}"#,
        ],
    )
    .await;
    let not_passed: Vec<&Value> = run.report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["strength"] != "practice" && r["result"] != "PASS")
        .collect();
    assert!(
        not_passed.is_empty(),
        "MUST and SHOULD rows that did not pass in {mode:?}: {not_passed:#?}"
    );
    // Practice: marked replays, problem details, the 256-character key;
    // Retry-After only where a 409 was seen (key-first, if a duplicate
    // arrived while the first was in flight).
    assert_eq!(run.rows("FAIL"), BTreeSet::new(), "{:#}", run.report);
    let skipped = run.rows("SKIP");
    assert!(
        skipped.is_empty() || skipped == BTreeSet::from(["concurrent-retry-after".to_owned()]),
        "{skipped:?}"
    );
    assert_eq!(run.code, 0);
    assert_eq!(run.report["rows"].as_array().unwrap().len(), 22);
}

crate::on_both_backends! {
    async fn this_api_passes_every_must_and_should_row_in_atomic_mode() {
        this_api_in(Mode::Atomic).await;
    }

    async fn this_api_passes_every_must_and_should_row_in_key_first_mode() {
        this_api_in(Mode::KeyFirst).await;
    }
}

/// What a flawed server gets wrong (`None`: nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    None,
    /// Reads the key's syntax, then ignores it: every request creates.
    NeverReplays,
    /// Replays whatever the key first answered, whatever the body or path.
    IgnoresBody,
    /// Check, then insert: duplicates that arrive together all create.
    RacesDuplicates,
    /// Stores a validation error under the key and replays it.
    StoresErrors,
}

/// A small idempotent API on loopback: `POST <any path>` creates a
/// resource from `{"amount": n > 0, …}` under `Authorization`'s scope,
/// `GET /list` lists the caller's resources. Done right but for its flaw.
struct FlawedApi {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

#[derive(Default)]
struct Store {
    next_id: u64,
    /// (credential, key) -> (path and body, status, body)
    keys: HashMap<(String, String), (String, u16, String)>,
    resources: Vec<(String, Value)>,
}

struct Incoming {
    method: String,
    path: String,
    credential: String,
    keys: Vec<Vec<u8>>,
    body: String,
}

impl FlawedApi {
    fn start(flaw: Flaw) -> FlawedApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let store = Arc::new(Mutex::new(Store::default()));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let store = store.clone();
                std::thread::spawn(move || serve(stream, flaw, &store));
            }
        });
        FlawedApi { addr, stop }
    }

    fn url(&self) -> String {
        format!("http://{}/orders", self.addr)
    }
}

impl Drop for FlawedApi {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Incoming> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let mut lines = buf[..end]
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = String::from_utf8_lossy(lines.next()?).into_owned();
    let mut parts = request_line.split(' ');
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let (mut credential, mut keys, mut length) = (String::new(), Vec::new(), 0);
    for line in lines {
        let colon = line.iter().position(|&b| b == b':')?;
        let name = String::from_utf8_lossy(&line[..colon]).to_ascii_lowercase();
        let value = line[colon + 1..].trim_ascii().to_vec();
        match name.as_str() {
            "authorization" => credential = String::from_utf8_lossy(&value).into_owned(),
            "idempotency-key" => keys.push(value),
            "content-length" => length = String::from_utf8_lossy(&value).parse().ok()?,
            _ => {}
        }
    }
    let mut body = buf[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Incoming {
        method,
        path,
        credential,
        keys,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn respond(stream: &mut TcpStream, status: u16, extra: &str, body: &str) {
    let media = if status < 300 {
        "application/json"
    } else {
        "application/problem+json"
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: {media}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
        body.len()
    );
}

fn problem(status: u16, title: &str) -> String {
    json!({"type": "about:blank", "title": title, "status": status}).to_string()
}

/// A key as the draft's sf-string: quoted, 1 to 255 printable ASCII, no escapes.
fn parse_key(lines: &[Vec<u8>]) -> Result<Option<String>, ()> {
    match lines {
        [] => Ok(None),
        [value] => {
            let inner = value
                .strip_prefix(b"\"")
                .and_then(|v| v.strip_suffix(b"\""))
                .ok_or(())?;
            let ok = (1..=255).contains(&inner.len())
                && inner
                    .iter()
                    .all(|&b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\');
            if ok {
                Ok(Some(String::from_utf8(inner.to_vec()).unwrap()))
            } else {
                Err(())
            }
        }
        _ => Err(()),
    }
}

fn serve(mut stream: TcpStream, flaw: Flaw, store: &Mutex<Store>) {
    let Some(req) = read_request(&mut stream) else {
        return;
    };
    if req.credential.is_empty() {
        return respond(&mut stream, 401, "", &problem(401, "Unauthorized"));
    }
    if req.method == "GET" {
        let store = store.lock().unwrap();
        let mine: Vec<&Value> = store
            .resources
            .iter()
            .filter(|(c, _)| *c == req.credential)
            .map(|(_, r)| r)
            .collect();
        return respond(&mut stream, 200, "", &json!(mine).to_string());
    }
    let Ok(key) = parse_key(&req.keys) else {
        return respond(
            &mut stream,
            400,
            "",
            &problem(400, "Invalid Idempotency-Key"),
        );
    };
    let key = key
        .filter(|_| flaw != Flaw::NeverReplays)
        .map(|k| (req.credential.clone(), k));
    let fingerprint = format!("{} {}", req.path, req.body);
    let mut guard = store.lock().unwrap();
    if let Some((seen, status, body)) = key.as_ref().and_then(|k| guard.keys.get(k)).cloned() {
        if seen != fingerprint && flaw != Flaw::IgnoresBody {
            return respond(
                &mut stream,
                422,
                "",
                &problem(422, "Idempotency-Key reused"),
            );
        }
        return respond(&mut stream, status, "Idempotent-Replayed: true\r\n", &body);
    }
    let parsed: Option<Value> = serde_json::from_str(&req.body).ok();
    let amount = parsed.as_ref().and_then(|b| b["amount"].as_i64());
    if amount.is_none_or(|a| a <= 0) {
        let body = problem(400, "Invalid body");
        if let (Some(k), Flaw::StoresErrors) = (key, flaw) {
            guard.keys.insert(k, (fingerprint, 400, body.clone()));
        }
        return respond(&mut stream, 400, "", &body);
    }
    if flaw == Flaw::RacesDuplicates {
        // Let go between the check and the insert, as check-then-insert does.
        drop(guard);
        std::thread::sleep(Duration::from_millis(200));
        guard = store.lock().unwrap();
    }
    guard.next_id += 1;
    let mut resource = parsed.unwrap();
    resource["id"] = json!(format!("r{}", guard.next_id));
    guard
        .resources
        .push((req.credential.clone(), resource.clone()));
    let body = resource.to_string();
    if let Some(k) = key {
        guard.keys.insert(k, (fingerprint, 201, body.clone()));
    }
    respond(&mut stream, 201, "", &body)
}

async fn check_flawed(flaw: Flaw) -> Run {
    let api = FlawedApi::start(flaw);
    conformance(
        &api.url(),
        &[
            "-H",
            "Authorization: Bearer one",
            "--second-credential",
            "Authorization: Bearer two",
            "--read-url",
            "/list",
            "--other-endpoint",
            "/other",
        ],
    )
    .await
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn a_server_done_right_passes_every_row_it_can() {
    let run = check_flawed(Flaw::None).await;
    assert_eq!(run.rows("FAIL"), set(&[]), "{:#}", run.report);
    // It serializes duplicates: no 409 to look at.
    assert_eq!(run.rows("SKIP"), set(&["concurrent-retry-after"]));
    assert_eq!(run.code, 0);
}

#[tokio::test]
async fn a_server_that_never_replays_fails_every_retry_and_duplicate_row() {
    let run = check_flawed(Flaw::NeverReplays).await;
    let expected = set(&[
        "retry-same-answer",
        "retry-one-resource",
        "replay-marker",
        "other-body-refused",
        "other-body-422",
        "other-endpoint-refused",
        "other-endpoint-422",
        "concurrent-one-resource",
        "concurrent-answers",
        "lost-response-one-resource",
    ]);
    assert_eq!(run.rows("FAIL"), expected, "{:#}", run.report);
    assert_eq!(run.code, 1);
}

#[tokio::test]
async fn a_server_that_ignores_the_body_when_replaying_fails_the_reuse_rows() {
    let run = check_flawed(Flaw::IgnoresBody).await;
    let expected = set(&[
        "other-body-refused",
        "other-body-422",
        "other-endpoint-refused",
        "other-endpoint-422",
    ]);
    assert_eq!(run.rows("FAIL"), expected, "{:#}", run.report);
    assert_eq!(run.code, 1);
}

#[tokio::test]
async fn a_server_that_runs_concurrent_duplicates_fails_the_concurrent_rows() {
    let run = check_flawed(Flaw::RacesDuplicates).await;
    let expected = set(&["concurrent-one-resource", "concurrent-answers"]);
    assert_eq!(run.rows("FAIL"), expected, "{:#}", run.report);
    assert_eq!(run.code, 1);
}

#[tokio::test]
async fn a_server_that_stores_a_validation_error_under_the_key_fails_error_not_result() {
    let run = check_flawed(Flaw::StoresErrors).await;
    assert_eq!(
        run.rows("FAIL"),
        set(&["error-not-result"]),
        "{:#}",
        run.report
    );
    assert_eq!(run.code, 1);
}

#[tokio::test]
async fn https_and_unreachable_servers_exit_2_with_a_reason() {
    for url in ["https://127.0.0.1:1/charges", "http://127.0.0.1:1/charges"] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_charges"))
            .args(["conformance", url])
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{url}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.starts_with("charges conformance: "), "{stderr}");
    }
}
