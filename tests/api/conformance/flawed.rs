//! Small idempotent APIs on loopback for the checker to measure, each done
//! right but for one flaw: `POST <any path>` creates a resource from
//! `{"amount": n > 0, …}` under `Authorization`'s scope, `GET /list` lists
//! the caller's resources, newest first.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What a flawed server gets wrong (`None`: nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// Reads the key's syntax, then ignores it: every request creates.
    NeverReplays,
    /// Replays whatever the key first answered, whatever the body or path.
    IgnoresBody,
    /// Check, then insert (200 ms apart): duplicates that arrive together all create.
    RacesDuplicates,
    /// Check, then insert 5 ms apart, behind a listen backlog of 10.
    RacesBehindBacklog,
    /// Check, then insert 20 ms apart, but only for every third key it
    /// sees: a race that one burst of duplicates can miss, as a window that
    /// opens only under some timing does.
    RacesOnEveryThirdKey,
    /// Stores a validation error under the key and replays it.
    StoresErrors,
    /// Forgets a key when it refuses a request under it, its own 422 too.
    ReleasesKeyOnError,
    /// Its list leaves out the field the marker is in.
    ListOmitsMarker,
    /// Its list shows the marker's field twice per resource.
    ListShowsMarkerTwice,
    /// Its list is oldest first and shows the caller's first 3 only.
    ListOldestFirstShort,
    /// A malformed key is ignored as RFC 8941 says: processed without a key.
    IgnoresMalformedKeys,
    /// Answers a replay with 409 and the stored resource.
    Replays409,
    /// Every request needs `Authorization: Bearer one`.
    NeedsCredential,
}

pub struct FlawedApi {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

#[derive(Default)]
pub struct Store {
    next_id: u64,
    /// Each (credential, key) pair's rank among those seen, for RacesOnEveryThirdKey.
    ordinals: HashMap<(String, String), usize>,
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
    pub fn start(flaw: Flaw) -> FlawedApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        if flaw == Flaw::RacesBehindBacklog {
            // As Django's development server: a backlog of 10. Calling
            // listen(2) again on a listening socket changes it.
            // SAFETY: a valid listening socket's descriptor.
            assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 10) }, 0);
        }
        serve_with(listener, move |stream, store| serve(stream, flaw, store))
    }

    pub fn url(&self) -> String {
        format!("http://{}/orders", self.addr)
    }
}

/// A server on `listener` that runs `handle` on a thread per connection.
pub fn serve_with(
    listener: TcpListener,
    handle: impl Fn(TcpStream, &Mutex<Store>) + Send + Sync + Copy + 'static,
) -> FlawedApi {
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
            std::thread::spawn(move || handle(stream, &store));
        }
    });
    FlawedApi { addr, stop }
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
    let media = if status < 300 || body.contains("\"id\"") {
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

/// The caller's resources as its list shows them.
fn list(store: &Store, credential: &str, flaw: Flaw) -> Value {
    let mine: Vec<&(String, Value)> = store
        .resources
        .iter()
        .filter(|(c, _)| c == credential)
        .collect();
    let shown: Vec<&(String, Value)> = match flaw {
        Flaw::ListOldestFirstShort => mine.into_iter().take(3).collect(),
        _ => mine.into_iter().rev().collect(),
    };
    let mine: Vec<Value> = shown
        .into_iter()
        .map(|(_, r)| {
            let mut shown = r.clone();
            match flaw {
                Flaw::ListOmitsMarker => {
                    shown.as_object_mut().unwrap().remove("description");
                }
                Flaw::ListShowsMarkerTwice => shown["summary"] = r["description"].clone(),
                _ => {}
            }
            shown
        })
        .collect();
    json!({ "data": mine })
}

fn serve(mut stream: TcpStream, flaw: Flaw, store: &Mutex<Store>) {
    let Some(req) = read_request(&mut stream) else {
        return;
    };
    let allowed = match flaw {
        Flaw::NeedsCredential => req.credential == "Bearer one",
        _ => !req.credential.is_empty(),
    };
    if !allowed {
        return respond(&mut stream, 401, "", &problem(401, "Unauthorized"));
    }
    if req.method == "GET" {
        let shown = list(&store.lock().unwrap(), &req.credential, flaw);
        return respond(&mut stream, 200, "", &shown.to_string());
    }
    let key = match parse_key(&req.keys) {
        Ok(key) => key,
        Err(()) if flaw == Flaw::IgnoresMalformedKeys => None,
        Err(()) => {
            let body = problem(400, "Invalid Idempotency-Key");
            return respond(&mut stream, 400, "", &body);
        }
    };
    let key = key
        .filter(|_| flaw != Flaw::NeverReplays)
        .map(|k| (req.credential.clone(), k));
    let (status, extra, body) = post(&req, key, flaw, store);
    respond(&mut stream, status, extra, &body);
}

/// A POST after its key was read: (status, extra header lines, body).
fn post(
    req: &Incoming,
    key: Option<(String, String)>,
    flaw: Flaw,
    store: &Mutex<Store>,
) -> (u16, &'static str, String) {
    let fingerprint = format!("{} {}", req.path, req.body);
    let mut guard = store.lock().unwrap();
    if let Some((seen, status, body)) = key.as_ref().and_then(|k| guard.keys.get(k)).cloned() {
        if seen != fingerprint && flaw != Flaw::IgnoresBody {
            if flaw == Flaw::ReleasesKeyOnError {
                guard.keys.remove(key.as_ref().unwrap());
            }
            return (422, "", problem(422, "Idempotency-Key reused"));
        }
        let status = if flaw == Flaw::Replays409 {
            409
        } else {
            status
        };
        return (status, "Idempotent-Replayed: true\r\n", body);
    }
    let parsed: Option<Value> = serde_json::from_str(&req.body).ok();
    let amount = parsed.as_ref().and_then(|b| b["amount"].as_i64());
    if amount.is_none_or(|a| a <= 0) {
        let body = problem(400, "Invalid body");
        if let (Some(k), Flaw::StoresErrors) = (key, flaw) {
            guard.keys.insert(k, (fingerprint, 400, body.clone()));
        }
        return (400, "", body);
    }
    let seen = guard.ordinals.len();
    let third = key
        .as_ref()
        .is_some_and(|k| (*guard.ordinals.entry(k.clone()).or_insert(seen + 1)).is_multiple_of(3));
    let window = match flaw {
        Flaw::RacesDuplicates => Some(Duration::from_millis(200)),
        Flaw::RacesBehindBacklog => Some(Duration::from_millis(5)),
        Flaw::RacesOnEveryThirdKey if third => Some(Duration::from_millis(20)),
        _ => None,
    };
    if let Some(window) = window {
        // Let go between the check and the insert, as check-then-insert does.
        drop(guard);
        std::thread::sleep(window);
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
    (201, "", body)
}
