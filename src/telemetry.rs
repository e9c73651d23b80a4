//! Logs and request tracing: every request gets a span with a request id
//! (the client's `X-Request-Id` if it sent a sane one, else a new UUID,
//! echoed in the response), its route, status, latency and idempotency
//! outcome. Human-readable by default, JSON with `LOG_FORMAT=json`. API keys
//! and bodies are never logged.

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
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,actix_server=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal: escape codes in a log file
        // or a collector are noise. NO_COLOR (no-color.org) turns it off too.
        .with_ansi(
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        );
    if std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        builder.init();
    }
}

/// Records the idempotency outcome on the current request's span.
pub fn record_outcome(outcome: &'static str) {
    tracing::Span::current().record("idempotency", outcome);
}

fn acceptable_request_id(value: &HeaderValue) -> Option<&str> {
    let id = value.to_str().ok()?;
    (!id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())).then_some(id)
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
    let span = tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %method,
        route = %route,
        status = Empty,
        idempotency = Empty,
    );
    let mut response = next.call(req).instrument(span.clone()).await?;
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    span.record("status", status);
    span.in_scope(|| {
        tracing::info!(
            elapsed_ms = elapsed.as_secs_f64() * 1000.0,
            "request finished"
        )
    });
    let status_label = status.to_string();
    METRICS
        .http_requests
        .with_label_values(&[route.as_str(), method_label, status_label.as_str()])
        .inc();
    METRICS
        .http_duration
        .with_label_values(&[route.as_str(), method_label])
        .observe(elapsed.as_secs_f64());
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    Ok(response)
}
