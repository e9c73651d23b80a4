//! The protocol's answers as actix-web responses (feature `actix`): what
//! every service would otherwise write the same way around
//! [`Policy::execute`](crate::Policy::execute).
//!
//! - [`key`]: the `Idempotency-Key` header, once, parsed as the draft says;
//! - [`respond`]: an [`Outcome`] as HTTP: the response executed now, or the
//!   stored one replayed byte for byte with `Idempotent-Replayed: true`; a
//!   mismatch as `422`; a key in flight as `409` with `Retry-After: 1`;
//! - [`refuse`]: a malformed key as `400`.
//!
//! Errors are RFC 9457 problem details, as the draft's own examples answer.

use actix_web::HttpResponse;
use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderMap};
use serde_json::json;

use crate::{IdempotencyKey, KeyError, Outcome, SavedResponse};

/// The header a replay carries.
pub const REPLAYED: &str = "idempotent-replayed";

/// The request's key: `Ok(None)` without the header; a header sent twice
/// or malformed is the draft's `400` ([`refuse`]).
pub fn key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, KeyError> {
    IdempotencyKey::from_headers(headers)
}

/// The protocol's outcome as the draft answers it.
pub fn respond(outcome: &Outcome) -> HttpResponse {
    match outcome {
        Outcome::Executed(saved) => stored(saved, false),
        Outcome::Replayed(saved) => stored(saved, true),
        Outcome::Mismatch => problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "This Idempotency-Key was used with another request.",
        ),
        Outcome::InFlight => {
            let mut conflict = problem(
                StatusCode::CONFLICT,
                "This Idempotency-Key's first request is still being processed; retry.",
            );
            let retry_after = header::HeaderValue::from_static("1");
            conflict
                .headers_mut()
                .insert(header::RETRY_AFTER, retry_after);
            conflict
        }
    }
}

/// A malformed or repeated key.
pub fn refuse(error: &KeyError) -> HttpResponse {
    problem(StatusCode::BAD_REQUEST, &error.to_string())
}

/// A stored response: the same bytes every time, a replay marked as one.
fn stored(saved: &SavedResponse, replayed: bool) -> HttpResponse {
    let status = StatusCode::from_u16(saved.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    for (name, value) in &saved.headers {
        response.insert_header((name.as_str(), value.as_str()));
    }
    if replayed {
        response.insert_header((REPLAYED, "true"));
    }
    response.body(saved.body_bytes())
}

/// RFC 9457 problem details.
pub fn problem(status: StatusCode, detail: &str) -> HttpResponse {
    let body =
        json!({"title": status.canonical_reason(), "status": status.as_u16(), "detail": detail});
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, "application/problem+json"))
        .body(body.to_string())
}
