//! Logs and request tracing: every request gets a span with a request id
//! (the client's `X-Request-Id` if it sent a sane one, else a new UUID,
//! echoed in the response), its route, status, latency and idempotency
//! outcome. Human-readable by default, JSON with `LOG_FORMAT=json`. API keys
//! and bodies are never logged.
//!
//! Refusals (401, 408, 421, 429, 431, and request heads the HTTP layer could
//! not read) are counted in `/metrics` and logged at most once per client
//! address per 10 s, with the count since its last line: a flood costs the
//! log a few hundred bytes per address and interval, not a line per request.
//!
//! What a client chooses reaches a log line only bounded and escaped (see
//! [`log_safe`]): one request cannot add more than a short line to the log,
//! nor make a line show a field or start a line the server did not write.

use std::borrow::Cow;
use std::io::IsTerminal;
use std::time::Instant;

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use actix_web::middleware::Next;
use tracing::Instrument;
use tracing::field::Empty;

use crate::metrics::METRICS;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{Layer, filter};
    let env = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,actix_server=warn".into());
    // Colour only for a person at a terminal: escape codes in a log file
    // or a collector are noise. NO_COLOR (no-color.org) turns it off too.
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let layer = if std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        layer
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .boxed()
    } else {
        layer.boxed()
    };
    // The HTTP layer's line per broken connection (a malformed request head
    // is one): counted, and summarized by `flush_refusals`, not written.
    let layer = layer.with_filter(filter::dynamic_filter_fn(|meta, _| {
        let broken = meta.target() == "actix_http::h1::dispatcher"
            && *meta.level() == tracing::Level::ERROR
            && meta.is_event();
        if broken {
            note_broken_connection();
        }
        !broken
    }));
    tracing_subscriber::registry().with(env).with(layer).init();
}

/// How often each client address's refusals are logged at most.
pub const REFUSAL_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);
/// Addresses whose refusals are tracked one by one; past it, they share
/// one line (the memory stays bounded under a flood from many addresses).
const MAX_TRACKED_ADDRESSES: usize = 10_000;

/// A refusal's status, as the metric's `reason`; `None`: not a refusal.
fn refusal_reason(status: u16) -> Option<&'static str> {
    Some(match status {
        401 => "unauthorized",
        408 => "timeout",
        // A DNS-rebinding page's requests (see `http::hosts`).
        421 => "host_not_allowed",
        429 => "rate_limited",
        431 => "header_too_large",
        _ => return None,
    })
}

/// One address's refusals since its last line.
struct Refused {
    logged_at: Instant,
    counts: std::collections::BTreeMap<u16, u64>,
}

static REFUSED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<Option<std::net::IpAddr>, Refused>>,
> = std::sync::LazyLock::new(Default::default);
static BROKEN_CONNECTIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn note_broken_connection() {
    METRICS
        .requests_refused
        .with_label_values(&["malformed"])
        .inc();
    BROKEN_CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

fn counts_text(counts: &std::collections::BTreeMap<u16, u64>) -> String {
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n}x{s}")).collect();
    parts.join(",")
}

/// Counts a refused request from `client` (unless `metered` is false) and
/// logs it, at most one line per address per [`REFUSAL_LOG_INTERVAL`]: a
/// flood costs the log a line per address and interval, whatever its rate.
fn note_refusal(
    client: Option<std::net::IpAddr>,
    status: u16,
    reason: &'static str,
    metered: bool,
) {
    if metered {
        METRICS.requests_refused.with_label_values(&[reason]).inc();
    }
    let now = Instant::now();
    let earlier = {
        let mut refused = REFUSED.lock().unwrap_or_else(|e| e.into_inner());
        let key = if refused.len() >= MAX_TRACKED_ADDRESSES && !refused.contains_key(&client) {
            None
        } else {
            client
        };
        match refused.get_mut(&key) {
            Some(r) if now.duration_since(r.logged_at) < REFUSAL_LOG_INTERVAL => {
                *r.counts.entry(status).or_default() += 1;
                return;
            }
            Some(r) => {
                r.logged_at = now;
                std::mem::take(&mut r.counts)
            }
            None => {
                let r = Refused {
                    logged_at: now,
                    counts: Default::default(),
                };
                refused.insert(key, r);
                Default::default()
            }
        }
    };
    let client = client.map_or_else(|| "-".to_owned(), |ip| ip.to_string());
    tracing::warn!(
        client = %client,
        status,
        earlier = %counts_text(&earlier),
        "request refused; further refusals from this address are counted and logged at most every 10 s"
    );
}

/// Logs what `note_refusal` counted without logging and the broken
/// connections since the last call, and forgets quiet addresses. Called
/// every [`REFUSAL_LOG_INTERVAL`].
pub fn flush_refusals() {
    let now = Instant::now();
    let mut lines = Vec::new();
    {
        let mut refused = REFUSED.lock().unwrap_or_else(|e| e.into_inner());
        refused.retain(|client, r| {
            if now.duration_since(r.logged_at) < REFUSAL_LOG_INTERVAL {
                return true;
            }
            if !r.counts.is_empty() {
                lines.push((*client, counts_text(&r.counts)));
            }
            false
        });
    }
    for (client, counts) in lines {
        let client = client.map_or_else(|| "-".to_owned(), |ip| ip.to_string());
        tracing::warn!(client = %client, refused = %counts, "requests refused from this address since its last line");
    }
    let broken = BROKEN_CONNECTIONS.swap(0, std::sync::atomic::Ordering::Relaxed);
    if broken > 0 {
        tracing::warn!(
            connections = broken,
            "connections ended by the HTTP layer (malformed request heads and the like) since the last line"
        );
    }
}

/// Records the idempotency outcome on the current request's span.
pub fn record_outcome(outcome: &'static str) {
    tracing::Span::current().record("idempotency", outcome);
}

/// The longest `X-Request-Id` used as it came: room for any scheme's id (a
/// UUID is 36 characters, a W3C trace id 32) with a prefix.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The longest method logged as it came: the longest registered method
/// (`UPDATEREDIRECTREF`, 17 characters) fits with room to spare. actix reads
/// a method as long as the request head (up to 128 KiB), and each one was
/// logged whole.
pub const MAX_LOGGED_METHOD_LEN: usize = 64;

/// Characters a logged value keeps as they are; [`log_safe`] writes any
/// other as `%XX`. Letters, digits and HTTP's token punctuation except `%`
/// (the escape itself), plus `/`, `:` and `@`: nothing that ends a field or a
/// line in either format (white space, `"`, `=`, `\`, `{` and `}`, control
/// characters), and nothing that is not ASCII.
fn kept_in_logs(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-._~!#$&'*+^`|/:@".contains(c)
}

/// `value` as it may appear in a log line: each character outside
/// `kept_in_logs` written as `%XX` (per UTF-8 byte), at most `max` bytes
/// of that, and `...` after a value cut short. For any value a client
/// chooses: the text format would show `x}"route=/admin` as a field of its
/// own, and a value is otherwise as long as the client makes it.
pub fn log_safe(value: &str, max: usize) -> Cow<'_, str> {
    if value.len() <= max && value.chars().all(kept_in_logs) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(max + 3);
    for c in value.chars() {
        let mut piece = String::new();
        if kept_in_logs(c) {
            piece.push(c);
        } else {
            for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                piece.push_str(&format!("%{byte:02X}"));
            }
        }
        if out.len() + piece.len() > max {
            out.push_str("...");
            break;
        }
        out.push_str(&piece);
    }
    Cow::Owned(out)
}

/// A client's `X-Request-Id`, if it is used (logged and echoed) rather than
/// replaced by a new UUID: 1 to [`MAX_REQUEST_ID_LEN`] letters, digits and
/// `-._~+/:@`. That is what ids are made of (UUIDs, hex, base64 without
/// padding, `prefix:id`), and nothing that could end a field or a line in a
/// log, ours or a proxy's, so the id is logged and echoed as it came.
fn acceptable_request_id(value: &HeaderValue) -> Option<&str> {
    let id = value.to_str().ok()?;
    let sane = |c: char| c.is_ascii_alphanumeric() || "-._~+/:@".contains(c);
    (!id.is_empty() && id.len() <= MAX_REQUEST_ID_LEN && id.chars().all(sane)).then_some(id)
}

/// A metric label from a fixed set: a client that makes up methods must not
/// make up time series (the route is already the matched pattern or
/// `unmatched`).
fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::TRACE => "TRACE",
        Method::CONNECT => "CONNECT",
        _ => "OTHER",
    }
}

/// Marks a request to a service beside the API (the in-process card
/// network): logged, but not counted in the API's metrics, which count the
/// API's own traffic only.
#[derive(Debug, Clone, Copy)]
pub struct Unmetered;

/// The client a request came from, as the limits tell it (the peer, or
/// behind a trusted proxy the address its `X-Forwarded-For` names): set by
/// `http::limits`, and logged instead of the peer.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub std::net::IpAddr);

/// [`observe`] for a service beside the API: see [`Unmetered`].
pub async fn observe_unmetered(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    use actix_web::HttpMessage;
    req.extensions_mut().insert(Unmetered);
    observe(req, next).await
}

/// Whether `req`'s traffic is counted in the API's metrics.
pub fn metered(req: &actix_web::HttpRequest) -> bool {
    use actix_web::HttpMessage;
    req.extensions().get::<Unmetered>().is_none()
}

pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let started = Instant::now();
    let request_id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(acceptable_request_id)
        .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_owned);
    let route = req
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().clone();
    let method_label = method_label(&method);
    let client = req.peer_addr().map(|a| a.ip());
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %log_safe(method.as_str(), MAX_LOGGED_METHOD_LEN),
        route = %route,
        status = Empty,
        idempotency = Empty,
    );
    let mut response = next.call(req).instrument(span.clone()).await?;
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    span.record("status", status);
    let metered = metered(response.request());
    // Behind a trusted proxy, the client it names, not the proxy.
    let client = {
        use actix_web::HttpMessage;
        let told = response
            .request()
            .extensions()
            .get::<ClientAddress>()
            .copied();
        told.map(|c| c.0).or(client)
    };
    match refusal_reason(status) {
        // A refusal is cheap to send by the thousand: summarized instead.
        Some(reason) => span.in_scope(|| note_refusal(client, status, reason, metered)),
        None => span.in_scope(|| {
            tracing::info!(
                elapsed_ms = elapsed.as_secs_f64() * 1000.0,
                "request finished"
            )
        }),
    }
    if metered {
        let status_label = status.to_string();
        METRICS
            .http_requests
            .with_label_values(&[route.as_str(), method_label, status_label.as_str()])
            .inc();
        METRICS
            .http_duration
            .with_label_values(&[route.as_str(), method_label])
            .observe(elapsed.as_secs_f64());
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(value: &[u8]) -> Option<String> {
        acceptable_request_id(&HeaderValue::from_bytes(value).unwrap()).map(str::to_owned)
    }

    #[test]
    fn a_request_id_is_used_only_if_it_cannot_touch_a_log_line() {
        for sane in [
            "req-42",
            "0f8fad5b-d9cb-469f-a165-70867728950e",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "svc:a.b_c~d/e+f@g",
        ] {
            assert_eq!(id(sane.as_bytes()).as_deref(), Some(sane));
        }
        assert_eq!(
            id("x".repeat(MAX_REQUEST_ID_LEN).as_bytes()).map(|i| i.len()),
            Some(MAX_REQUEST_ID_LEN)
        );
        for forged in [
            &b"x}\"route=/admin"[..],
            b"x route=/admin",
            b"a=b",
            b"\"q\"",
            b"x\\ny",
            b"{}",
            b"a\tb",
            b"x%0ay",
            b"caf\xc3\xa9",
            b"",
            &[b'x'; MAX_REQUEST_ID_LEN + 1],
        ] {
            assert_eq!(id(forged), None, "{}", String::from_utf8_lossy(forged));
        }
    }

    #[test]
    fn a_logged_value_is_bounded_and_escaped() {
        assert_eq!(log_safe("GET", 64), "GET");
        assert_eq!(log_safe("PROPFIND", 64), "PROPFIND");
        let long = "A".repeat(120_000);
        assert_eq!(log_safe(&long, 64), format!("{}...", "A".repeat(64)));
        assert_eq!(
            log_safe("x}\"route=/admin y\n\u{7f}%é", 200),
            "x%7D%22route%3D/admin%20y%0A%7F%25%C3%A9"
        );
        // An escape is never cut in half.
        assert_eq!(log_safe("ab\"", 4), "ab...");
        for bound in 0..10 {
            assert!(log_safe("\"\"\"\"\"", bound).len() <= bound + 3);
        }
    }
}
