//! Every error the API answers, as `application/problem+json` (RFC 9457).
//!
//! Each kind has a stable `type` URI, `/problems/<slug>` (relative, resolved
//! against the API's origin, and served there as a short description). A 500
//! logs its whole cause chain and answers an opaque body: no SQL, no traces.

use std::fmt;

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use crate::domain::FieldError;
use crate::hooks::HookFailure;
use crate::idempotency::{self, KeyError};

pub const CONTENT_TYPE: &str = "application/problem+json";

/// `Retry-After` on a 409 `idempotency-key-in-flight`, in seconds.
pub const IN_FLIGHT_RETRY_AFTER_SECS: u64 = 1;

/// The stable problem types: (slug, status, title).
pub const TYPES: &[(&str, u16, &str)] = &[
    ("invalid-request", 400, "The request is invalid"),
    (
        "invalid-idempotency-key",
        400,
        "The Idempotency-Key header is invalid",
    ),
    ("unauthorized", 401, "Authentication is required"),
    ("not-found", 404, "Not found"),
    ("method-not-allowed", 405, "Method not allowed"),
    (
        "idempotency-key-in-flight",
        409,
        "A request with this Idempotency-Key is still being processed",
    ),
    (
        "request-timeout",
        408,
        "The request body arrived too slowly",
    ),
    ("payload-too-large", 413, "The request body is too large"),
    (
        "unsupported-media-type",
        415,
        "The request body must be JSON",
    ),
    (
        "unsupported-content-encoding",
        415,
        "The request body must not be compressed",
    ),
    (
        "idempotency-key-reused",
        422,
        "The Idempotency-Key was used with a different request",
    ),
    ("internal", 500, "Internal server error"),
    (
        "service-unavailable",
        503,
        "The service is temporarily unavailable",
    ),
    // Demo mode only (src/demo.rs).
    (
        "demo-account-only",
        400,
        "Demo-* headers act only on the demo account",
    ),
    (
        "simulated-lost-response",
        504,
        "The response was lost on purpose (Demo-Fault: lose-response)",
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid request: {detail}")]
    InvalidRequest {
        detail: String,
        errors: Vec<FieldError>,
    },
    #[error(transparent)]
    InvalidIdempotencyKey(#[from] KeyError),
    #[error("this endpoint requires an Idempotency-Key header")]
    IdempotencyKeyRequired,
    #[error("missing or unknown API key")]
    Unauthorized,
    #[error("not found")]
    NotFound,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("idempotency key in flight")]
    IdempotencyKeyInFlight { retry_after_secs: u64 },
    #[error("payload too large")]
    PayloadTooLarge { limit: usize },
    #[error("unsupported media type")]
    UnsupportedMediaType,
    /// A `Content-Encoding` other than `identity` (RFC 9110 §8.4.1).
    #[error("unsupported content encoding {0:?}")]
    UnsupportedContentEncoding(String),
    #[error("idempotency key reused with another request")]
    IdempotencyKeyReused,
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// Refused for lack of capacity that this server keeps for others.
    #[error("overloaded: {detail}")]
    Overloaded { detail: String },
    #[error("the request body did not arrive within {secs} s")]
    BodyTimeout { secs: u64 },
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    pub fn invalid(detail: impl Into<String>) -> ApiError {
        ApiError::InvalidRequest {
            detail: detail.into(),
            errors: Vec::new(),
        }
    }

    pub fn internal(error: impl fmt::Display) -> ApiError {
        ApiError::Internal(error.to_string())
    }

    pub fn slug(&self) -> &'static str {
        match self {
            ApiError::InvalidRequest { .. } => "invalid-request",
            ApiError::InvalidIdempotencyKey(_) | ApiError::IdempotencyKeyRequired => {
                "invalid-idempotency-key"
            }
            ApiError::Unauthorized => "unauthorized",
            ApiError::NotFound => "not-found",
            ApiError::MethodNotAllowed => "method-not-allowed",
            ApiError::IdempotencyKeyInFlight { .. } => "idempotency-key-in-flight",
            ApiError::PayloadTooLarge { .. } => "payload-too-large",
            ApiError::UnsupportedMediaType => "unsupported-media-type",
            ApiError::UnsupportedContentEncoding(_) => "unsupported-content-encoding",
            ApiError::IdempotencyKeyReused => "idempotency-key-reused",
            ApiError::Unavailable(_) | ApiError::Overloaded { .. } => "service-unavailable",
            ApiError::BodyTimeout { .. } => "request-timeout",
            ApiError::Internal(_) => "internal",
        }
    }

    fn detail(&self) -> String {
        match self {
            ApiError::InvalidRequest { detail, .. } => detail.clone(),
            ApiError::InvalidIdempotencyKey(e) => e.to_string(),
            ApiError::IdempotencyKeyRequired => {
                "This endpoint requires an Idempotency-Key header; generate a UUID once per charge and reuse it for every retry.".into()
            }
            ApiError::Unauthorized => "Send your API key as `Authorization: Bearer <key>`.".into(),
            ApiError::NotFound => "There is nothing at this address for your account.".into(),
            ApiError::MethodNotAllowed => "This address does not accept that method.".into(),
            ApiError::IdempotencyKeyInFlight { retry_after_secs } => format!(
                "The first request with this Idempotency-Key has not finished yet. Retry the same request after {retry_after_secs} s to get its result."
            ),
            ApiError::PayloadTooLarge { limit } => format!("The request body must be at most {limit} bytes."),
            ApiError::UnsupportedMediaType => "Send the body as JSON with `Content-Type: application/json` (UTF-8).".into(),
            ApiError::UnsupportedContentEncoding(coding) => format!("The body is sent with `Content-Encoding: {coding}`; this server reads only uncompressed bodies (`identity`). Send it without Content-Encoding."),
            ApiError::IdempotencyKeyReused => {
                "This Idempotency-Key was already used with a different request body or endpoint. Use a new key for a new charge.".into()
            }
            ApiError::Unavailable(_) => "The database cannot be reached right now. Retry the same request (with the same Idempotency-Key) shortly.".into(),
            ApiError::Overloaded { detail } => detail.clone(),
            ApiError::BodyTimeout { secs } => format!("The request body did not arrive within {secs} s. Nothing was done; send the request again."),
            ApiError::Internal(_) => "Something went wrong on our side. Retrying with the same Idempotency-Key is safe.".into(),
        }
    }
}

pub fn title_of(slug: &str) -> &'static str {
    TYPES.iter().find(|t| t.0 == slug).map_or("Error", |t| t.2)
}

/// An RFC 9457 problem: what every error answers.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A stable URI per kind of problem, e.g. `/problems/idempotency-key-reused`.
    #[serde(rename = "type")]
    #[schema(example = "/problems/idempotency-key-reused")]
    pub type_: String,
    pub title: &'static str,
    pub status: u16,
    /// What happened and what to do about it, for a person.
    pub detail: String,
    /// For `invalid-request`: every field that is wrong.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// The problem+json response for one of [`TYPES`]. Also used by the demo's
/// simulated faults, which are not `ApiError`s.
pub fn response(
    status: StatusCode,
    slug: &str,
    detail: impl Into<String>,
    errors: Vec<FieldError>,
) -> HttpResponse {
    let body = Problem {
        type_: format!("/problems/{slug}"),
        title: title_of(slug),
        status: status.as_u16(),
        detail: detail.into(),
        errors,
    };
    let mut builder = HttpResponse::build(status);
    if let Some(reason) = rfc9110_reason(status) {
        builder.reason(reason);
    }
    builder.content_type(CONTENT_TYPE).json(body)
}

/// RFC 9110 renamed two of our statuses; the `http` crate still sends the
/// old reason phrases ("Unprocessable Entity", "Payload Too Large").
fn rfc9110_reason(status: StatusCode) -> Option<&'static str> {
    match status {
        StatusCode::UNPROCESSABLE_ENTITY => Some("Unprocessable Content"),
        StatusCode::PAYLOAD_TOO_LARGE => Some("Content Too Large"),
        _ => None,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::InvalidRequest { .. }
            | ApiError::InvalidIdempotencyKey(_)
            | ApiError::IdempotencyKeyRequired => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::NotFound => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::IdempotencyKeyInFlight { .. } => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType | ApiError::UnsupportedContentEncoding(_) => {
                StatusCode::UNSUPPORTED_MEDIA_TYPE
            }
            ApiError::IdempotencyKeyReused => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::Unavailable(_) | ApiError::Overloaded { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            ApiError::Internal(cause) => tracing::error!(%cause, "request failed"),
            ApiError::Unavailable(cause) => tracing::warn!(%cause, "database unavailable"),
            _ => {}
        }
        let errors = match self {
            ApiError::InvalidRequest { errors, .. } => errors.clone(),
            _ => Vec::new(),
        };
        let mut response = response(self.status_code(), self.slug(), self.detail(), errors);
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"charges\""),
                );
            }
            ApiError::IdempotencyKeyInFlight { retry_after_secs } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            ApiError::Unavailable(_) | ApiError::Overloaded { .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            // RFC 9110 §15.5.16: say which codings are accepted.
            ApiError::UnsupportedContentEncoding(_) => {
                headers.insert(
                    header::ACCEPT_ENCODING,
                    HeaderValue::from_static("identity"),
                );
            }
            // The rest of the body may still be arriving: end the connection.
            ApiError::BodyTimeout { .. } => {
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            _ => {}
        }
        response
    }
}

impl From<diesel::result::Error> for ApiError {
    fn from(e: diesel::result::Error) -> Self {
        // The connection is gone, or reached a read-only server (a failover
        // in progress): the pool replaces it; the client retries shortly.
        if crate::store::is_connection_lost(&e) {
            return ApiError::Unavailable(e.to_string());
        }
        match e {
            // SQLite's write lock stayed taken past the busy timeout.
            diesel::result::Error::DatabaseError(_, info)
                if info.message().starts_with("database is locked") =>
            {
                ApiError::Unavailable(info.message().to_owned())
            }
            other => ApiError::internal(other),
        }
    }
}

impl From<crate::store::PoolTimeout> for ApiError {
    fn from(e: crate::store::PoolTimeout) -> Self {
        e.0.into()
    }
}

impl From<r2d2::Error> for ApiError {
    /// The pool gave no connection within its timeout.
    fn from(e: r2d2::Error) -> Self {
        ApiError::Unavailable(e.to_string())
    }
}

impl From<actix_web::error::BlockingError> for ApiError {
    fn from(e: actix_web::error::BlockingError) -> Self {
        ApiError::internal(e)
    }
}

impl From<HookFailure> for ApiError {
    fn from(e: HookFailure) -> Self {
        match e {
            HookFailure::Overloaded(detail) => ApiError::Overloaded { detail },
            e @ HookFailure::Injected(_) => ApiError::internal(e),
        }
    }
}

impl From<crate::hooks::WriteError> for ApiError {
    fn from(e: crate::hooks::WriteError) -> Self {
        match e {
            crate::hooks::WriteError::Database(e) => e.into(),
            crate::hooks::WriteError::Hook(e) => e.into(),
        }
    }
}

impl From<idempotency::Error> for ApiError {
    fn from(e: idempotency::Error) -> Self {
        match e {
            idempotency::Error::Database(e) => e.into(),
            idempotency::Error::Hook(e) => e.into(),
            idempotency::Error::LeaseLost => ApiError::internal("lease lost"),
        }
    }
}
