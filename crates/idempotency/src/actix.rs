//! The protocol's answers as actix-web responses (feature `actix`), as
//! trait implementations: what every service would otherwise write the
//! same way around [`Policy::execute`](crate::Policy::execute).
//!
//! - an [`Outcome`] is a `Responder`: the response executed now, or the
//!   stored one replayed byte for byte with `Idempotent-Replayed: true`; a
//!   mismatch as `422`; a key in flight as `409` with `Retry-After: 1`;
//! - a [`KeyError`] is a `ResponseError`: a malformed or repeated key is
//!   `400`;
//! - a [`SavedResponse`] becomes an `HttpResponse`
//!   ([`SavedResponse::to_http`]), for a service that answers a mismatch or
//!   a key in flight in its own words.
//!
//! Errors are RFC 9457 problem details, as the draft's own examples answer.

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, Responder, ResponseError};
use serde_json::json;

use crate::key::KeyError;
use crate::key_store::SavedResponse;
use crate::outcome::Outcome;

impl SavedResponse {
    /// The stored response as HTTP: the same bytes every time, a replay
    /// marked with [`Outcome::REPLAYED_HEADER`]. A header that is not valid
    /// HTTP is left out.
    pub fn to_http(&self, replayed: bool) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = HttpResponse::build(status);
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::try_from(value.as_str()),
            ) {
                response.insert_header((name, value));
            }
        }
        if replayed {
            response.insert_header((Outcome::REPLAYED_HEADER, "true"));
        }
        response.body(self.body_bytes())
    }
}

impl Responder for Outcome {
    type Body = actix_web::body::BoxBody;

    /// The outcome as the draft answers it.
    fn respond_to(self, _req: &HttpRequest) -> HttpResponse {
        match self {
            Outcome::Executed(saved) => saved.to_http(false),
            Outcome::Replayed(saved) => saved.to_http(true),
            Outcome::Mismatch => problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "This Idempotency-Key was used with another request.",
            ),
            Outcome::InFlight => {
                let mut conflict = problem(
                    StatusCode::CONFLICT,
                    "This Idempotency-Key's first request is still being processed; retry.",
                );
                let retry_after = HeaderValue::from_static("1");
                conflict
                    .headers_mut()
                    .insert(header::RETRY_AFTER, retry_after);
                conflict
            }
        }
    }
}

/// A malformed or repeated key: `400`, nothing run.
impl ResponseError for KeyError {
    fn status_code(&self) -> StatusCode {
        StatusCode::BAD_REQUEST
    }

    fn error_response(&self) -> HttpResponse {
        problem(StatusCode::BAD_REQUEST, &self.to_string())
    }
}

/// RFC 9457 problem details.
fn problem(status: StatusCode, detail: &str) -> HttpResponse {
    let body =
        json!({"title": status.canonical_reason(), "status": status.as_u16(), "detail": detail});
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, "application/problem+json"))
        .body(body.to_string())
}
