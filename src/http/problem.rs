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

use crate::payments::domain::FieldError;
use crate::store::{Failure, classify};
use crate::store::{HookFailure, WriteError};
use idempotency::{self, KeyError, SavedResponse};

pub const CONTENT_TYPE: &str = "application/problem+json";

/// `Retry-After` on a 409 `idempotency-key-in-flight`, in seconds.
pub const IN_FLIGHT_RETRY_AFTER_SECS: u64 = 1;

/// One kind of problem, defined once: the last segment of its `type` URI,
/// its status and its title. The errors, `/problems/{slug}`, `/demo/config`
/// and the OpenAPI document all read them from [`TYPES`].
#[derive(Debug, PartialEq, Eq)]
pub struct ProblemType {
    pub slug: &'static str,
    pub status: u16,
    pub title: &'static str,
}

impl ProblemType {
    pub fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.status).expect("a problem type's status is valid")
    }

    /// Its `type` URI, relative to the API's origin.
    pub fn uri(&self) -> String {
        format!("/problems/{}", self.slug)
    }
}

macro_rules! problem_types {
    ($($name:ident = ($slug:literal, $status:literal, $title:literal);)*) => {
        $(pub const $name: ProblemType = ProblemType { slug: $slug, status: $status, title: $title };)*
        /// Every problem type the server answers.
        pub const TYPES: &[&ProblemType] = &[$(&$name),*];
    };
}

problem_types! {
    INVALID_REQUEST = ("invalid-request", 400, "The request is invalid");
    INVALID_IDEMPOTENCY_KEY = ("invalid-idempotency-key", 400, "The Idempotency-Key header is invalid");
    REFUND_EXCEEDS_CHARGE = ("refund-exceeds-charge", 400, "The refund is more than is left of the charge");
    CHARGE_NOT_REFUNDABLE = ("charge-not-refundable", 400, "The charge failed, so there is nothing to refund");
    WEBHOOK_TARGET_NOT_ALLOWED = ("webhook-target-not-allowed", 400, "Webhooks may not be sent to this URL");
    UNAUTHORIZED = ("unauthorized", 401, "Authentication is required");
    CARD_DECLINED = ("card-declined", 402, "The card was declined");
    ACCOUNT_REVOKED = ("account-revoked", 403, "The account was revoked before the request was completed");
    NOT_FOUND = ("not-found", 404, "Not found");
    METHOD_NOT_ALLOWED = ("method-not-allowed", 405, "Method not allowed");
    REQUEST_TIMEOUT = ("request-timeout", 408, "The request body arrived too slowly");
    IDEMPOTENCY_KEY_IN_FLIGHT = ("idempotency-key-in-flight", 409, "A request with this Idempotency-Key is still being processed");
    WEBHOOK_ENDPOINT_LIMIT = ("webhook-endpoint-limit", 409, "The account has as many webhook endpoints as it may");
    PAYLOAD_TOO_LARGE = ("payload-too-large", 413, "The request body is too large");
    UNSUPPORTED_MEDIA_TYPE = ("unsupported-media-type", 415, "The request body must be JSON");
    UNSUPPORTED_CONTENT_ENCODING = ("unsupported-content-encoding", 415, "The request body must not be compressed");
    HOST_NOT_ALLOWED = ("host-not-allowed", 421, "This service does not answer requests for this host");
    IDEMPOTENCY_KEY_REUSED = ("idempotency-key-reused", 422, "The Idempotency-Key was used with a different request");
    RATE_LIMITED = ("rate-limited", 429, "Too many requests");
    INTERNAL = ("internal", 500, "Internal server error");
    REQUEST_NOT_RECOVERABLE = ("request-not-recoverable", 500, "The request was left unfinished and cannot be completed");
    SERVICE_UNAVAILABLE = ("service-unavailable", 503, "The service is temporarily unavailable");
    DEADLINE_EXCEEDED = ("deadline-exceeded", 503, "The request did not finish in time; its outcome is unknown");
    NETWORK_UNAVAILABLE = ("network-unavailable", 503, "The card network did not answer");
    // Demo mode only (src/demo/).
    DEMO_ACCOUNT_ONLY = ("demo-account-only", 400, "Demo-* headers act only on the demo account");
    CROSS_SITE_REQUEST = ("cross-site-request", 403, "A cross-site request to the demo was refused");
    DEMO_ROOM_UNKNOWN = ("demo-room-unknown", 403, "The Demo-Room code is not one this demo hands out");
    DEMO_ROOM_FULL = ("demo-room-full", 503, "Every sandbox of the demo is in use");
    SIMULATED_LOST_RESPONSE = ("simulated-lost-response", 504, "The response was lost on purpose (Demo-Fault)");
    WEBHOOK_NOT_VERIFIED = ("webhook-not-verified", 400, "The webhook delivery did not verify");
    SIMULATED_LOST_ANSWER = ("simulated-lost-answer", 500, "The demo receiver's answer was lost on purpose");
}

/// The problem type with this slug.
pub fn find(slug: &str) -> Option<&'static ProblemType> {
    TYPES.iter().copied().find(|t| t.slug == slug)
}

/// Which operations of the OpenAPI document answer a problem type, told by
/// what the operation is (so a new route is documented by what it does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// Every operation: the client's rate limit comes before the route.
    Everywhere,
    /// Every operation that reads the database: all but the static ones.
    ByTheDatabase,
    /// Every operation that takes an API key.
    Authenticated,
    /// Every operation that reads a JSON body.
    WithABody,
    /// Every operation under `/charges` that reads a JSON body: where the
    /// demo's faults are mounted.
    ChargeWrites,
    /// Every operation that reads an `Idempotency-Key`.
    Keyed,
    /// Every operation on one charge (its path names `{id}`).
    OnACharge,
    /// The operations with these `operationId`s.
    By(&'static [&'static str]),
}

/// One line of the contract: where a problem type is answered, and what it
/// means there. The OpenAPI document lists them per operation and status.
#[derive(Debug)]
pub struct Answer {
    pub kind: &'static ProblemType,
    pub answered: Answered,
    pub note: &'static str,
}

/// The problem types whose answer carries `Retry-After`.
pub fn retries_after(kind: &ProblemType) -> bool {
    matches!(kind.status, 409 | 429 | 503)
}

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
    /// The same, told by the card network: the first request with this key
    /// was authorized there, and its answer was lost before we stored it.
    #[error("idempotency key reused with another request, at the card network")]
    IdempotencyKeyReusedAtNetwork,
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The card network did not answer (or refused): nothing was stored.
    #[error("card network: {0}")]
    Network(String),
    /// Over a rate limit (`scope`: whose).
    #[error("rate limited ({scope})")]
    RateLimited {
        retry_after_secs: u64,
        scope: &'static str,
    },
    /// The database did not answer within REQUEST_TIMEOUT.
    #[error("the database did not answer within {secs} s")]
    DeadlineExceeded { secs: u64 },
    /// Refused for lack of capacity that this server keeps for others.
    #[error("overloaded: {detail}")]
    Overloaded { detail: String },
    #[error("the request body did not arrive within {secs} s")]
    BodyTimeout { secs: u64 },
    #[error("internal error: {0}")]
    Internal(String),
    /// A problem of its own kind whose detail says all (a webhook target
    /// refused, say).
    #[error("{detail}")]
    Refused {
        kind: &'static ProblemType,
        detail: String,
    },
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

    pub fn problem_type(&self) -> &'static ProblemType {
        match self {
            ApiError::InvalidRequest { .. } => &INVALID_REQUEST,
            ApiError::InvalidIdempotencyKey(_) | ApiError::IdempotencyKeyRequired => {
                &INVALID_IDEMPOTENCY_KEY
            }
            ApiError::Unauthorized => &UNAUTHORIZED,
            ApiError::NotFound => &NOT_FOUND,
            ApiError::MethodNotAllowed => &METHOD_NOT_ALLOWED,
            ApiError::IdempotencyKeyInFlight { .. } => &IDEMPOTENCY_KEY_IN_FLIGHT,
            ApiError::PayloadTooLarge { .. } => &PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType => &UNSUPPORTED_MEDIA_TYPE,
            ApiError::UnsupportedContentEncoding(_) => &UNSUPPORTED_CONTENT_ENCODING,
            ApiError::IdempotencyKeyReused | ApiError::IdempotencyKeyReusedAtNetwork => {
                &IDEMPOTENCY_KEY_REUSED
            }
            ApiError::Unavailable(_) | ApiError::Overloaded { .. } => &SERVICE_UNAVAILABLE,
            ApiError::DeadlineExceeded { .. } => &DEADLINE_EXCEEDED,
            ApiError::RateLimited { .. } => &RATE_LIMITED,
            ApiError::Network(_) => &NETWORK_UNAVAILABLE,
            ApiError::BodyTimeout { .. } => &REQUEST_TIMEOUT,
            ApiError::Internal(_) => &INTERNAL,
            ApiError::Refused { kind, .. } => kind,
        }
    }

    pub fn slug(&self) -> &'static str {
        self.problem_type().slug
    }

    fn detail(&self) -> String {
        match self {
            ApiError::InvalidRequest { detail, .. } => detail.clone(),
            ApiError::InvalidIdempotencyKey(e) => e.to_string(),
            ApiError::IdempotencyKeyRequired => {
                "This endpoint requires an Idempotency-Key header; generate a UUID once per operation and reuse it for every retry.".into()
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
                "This Idempotency-Key was already used with a different request body or endpoint. Use a new key for a new operation: a new attempt after a decline (another payment method, or the same one again) is a new operation too.".into()
            }
            ApiError::IdempotencyKeyReusedAtNetwork => {
                "This Idempotency-Key was already used with a different request, which reached the card network: the network authorized it, and its answer was lost before anything was stored here. Nothing was done. Retry that first request with this key to complete it, or use a new key for this one.".into()
            }
            ApiError::Unavailable(_) => "The database cannot be reached right now. Retry the same request (with the same Idempotency-Key) shortly.".into(),
            ApiError::Overloaded { detail } | ApiError::Refused { detail, .. } => detail.clone(),
            ApiError::Network(cause) => format!("The charge could not be authorized: {cause}. Nothing was stored here, and nothing will be completed under this key unless you retry. Whether the card network authorized is not always known: retry the same request with the same Idempotency-Key. The network is asked under a key derived from yours, so it authorizes at most once however often we ask, and your retry completes the charge with that authorization."),
            ApiError::RateLimited { retry_after_secs, scope } => format!("This {scope} has sent more requests than it may; nothing was done. Retry after {retry_after_secs} s (with the same Idempotency-Key: this answer was not stored under it)."),
            ApiError::DeadlineExceeded { secs } => format!("The database did not answer within {secs} s, so this request was given up. Whether it took effect is unknown: retry it with the same Idempotency-Key, which replays its result if it took effect and runs it once if it did not."),
            ApiError::BodyTimeout { secs } => format!("The request body did not arrive within {secs} s. Nothing was done; send the request again."),
            ApiError::Internal(_) => "Something went wrong on our side. Retrying with the same Idempotency-Key is safe.".into(),
        }
    }
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
    /// For `card-declined`: why, as Stripe's codes say (`generic_decline`,
    /// `insufficient_funds`, `expired_card`, `incorrect_cvc`, `processing_error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "insufficient_funds")]
    pub decline_code: Option<&'static str>,
    /// For `card-declined`: the failed charge's id (`GET /charges/{id}` shows it, `status: failed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub charge: Option<uuid::Uuid>,
}

impl Problem {
    pub fn new(kind: &ProblemType, detail: impl Into<String>) -> Problem {
        Problem {
            type_: kind.uri(),
            title: kind.title,
            status: kind.status,
            detail: detail.into(),
            errors: Vec::new(),
            decline_code: None,
            charge: None,
        }
    }
}

/// A problem as a response to store under a key and replay (a terminal
/// answer the protocol or the recovery task decides on).
pub fn saved(kind: &ProblemType, detail: impl Into<String>) -> SavedResponse {
    saved_problem(Problem::new(kind, detail))
}

/// A problem with members of its own (a decline's), to store and replay.
pub fn saved_problem(problem: Problem) -> SavedResponse {
    SavedResponse {
        status: problem.status,
        headers: [("content-type".to_owned(), CONTENT_TYPE.to_owned())].into(),
        body: serde_json::to_value(problem).expect("a problem serializes"),
    }
}

/// The problem+json response for one of [`TYPES`]. Also used by the demo's
/// simulated faults, which are not `ApiError`s.
pub fn response(
    kind: &ProblemType,
    detail: impl Into<String>,
    errors: Vec<FieldError>,
) -> HttpResponse {
    let status = kind.status_code();
    let body = Problem {
        errors,
        ..Problem::new(kind, detail)
    };
    let mut builder = HttpResponse::build(status);
    if let Some(reason) = rfc9110_reason(status) {
        builder.reason(reason);
    }
    builder.content_type(CONTENT_TYPE).json(body)
}

/// RFC 9110 renamed two of our statuses; the `http` crate still sends the
/// old reason phrases ("Unprocessable Entity", "Payload Too Large").
pub fn rfc9110_reason(status: StatusCode) -> Option<&'static str> {
    match status {
        StatusCode::UNPROCESSABLE_ENTITY => Some("Unprocessable Content"),
        StatusCode::PAYLOAD_TOO_LARGE => Some("Content Too Large"),
        _ => None,
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.problem_type().status_code()
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            ApiError::Internal(cause) => tracing::error!(%cause, "request failed"),
            ApiError::Unavailable(cause) => tracing::warn!(%cause, "database unavailable"),
            ApiError::Network(cause) => tracing::warn!(%cause, "card network unavailable"),
            ApiError::DeadlineExceeded { secs } => {
                tracing::warn!(
                    secs,
                    "the database did not answer in time; request given up"
                )
            }
            _ => {}
        }
        self.unlogged_response()
    }
}

impl ApiError {
    /// Its response, with nothing logged (a probe's: the pool logs an
    /// outage once, not at every probe).
    pub fn unlogged_response(&self) -> HttpResponse {
        let errors = match self {
            ApiError::InvalidRequest { errors, .. } => errors.clone(),
            _ => Vec::new(),
        };
        let mut response = response(self.problem_type(), self.detail(), errors);
        let headers = response.headers_mut();
        match self {
            ApiError::Unauthorized => {
                headers.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"charges\""),
                );
            }
            ApiError::IdempotencyKeyInFlight { retry_after_secs }
            | ApiError::RateLimited {
                retry_after_secs, ..
            } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            ApiError::Unavailable(_)
            | ApiError::Overloaded { .. }
            | ApiError::Network(_)
            | ApiError::DeadlineExceeded { .. } => {
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
        match classify(&e) {
            // The connection is gone, or reached a read-only server (a
            // failover in progress): the pool replaces it; or SQLite's write
            // lock stayed taken past the busy timeout. The client retries.
            Failure::ConnectionLost | Failure::Busy | Failure::LockTimeout => {
                ApiError::Unavailable(e.to_string())
            }
            Failure::Transient | Failure::Other => ApiError::internal(e),
        }
    }
}

impl From<crate::store::PoolTimeout> for ApiError {
    fn from(e: crate::store::PoolTimeout) -> Self {
        e.0.into()
    }
}

impl From<crate::store::RunError> for ApiError {
    fn from(e: crate::store::RunError) -> Self {
        match e {
            crate::store::RunError::Pool(e) => e.into(),
            crate::store::RunError::Deadline(d) => ApiError::DeadlineExceeded {
                secs: d.as_secs_f64().ceil() as u64,
            },
            e @ crate::store::RunError::Panicked => ApiError::internal(e),
        }
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
            HookFailure::Unavailable(cause) => ApiError::Network(cause),
            e @ HookFailure::Injected(_) => ApiError::internal(e),
        }
    }
}

impl From<WriteError> for ApiError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Database(e) => e.into(),
            WriteError::Hook(e) => hook_failure(e),
        }
    }
}

/// A hook's failure, as the protocol hands it back: the application's own
/// [`HookFailure`], or any other error (a 500).
fn hook_failure(e: Box<dyn std::error::Error + Send + Sync>) -> ApiError {
    match e.downcast::<HookFailure>() {
        Ok(failure) => (*failure).into(),
        Err(e) => ApiError::internal(e),
    }
}

impl From<idempotency::Error> for ApiError {
    fn from(e: idempotency::Error) -> Self {
        match e {
            idempotency::Error::Database(e) => e.into(),
            idempotency::Error::Hook(e) => hook_failure(e),
            idempotency::Error::Connection(e) => match e.downcast::<crate::store::RunError>() {
                Ok(e) => (*e).into(),
                Err(e) => ApiError::internal(e),
            },
            idempotency::Error::Dependency(cause) => ApiError::Network(cause),
            idempotency::Error::DependencyKeyReused => ApiError::IdempotencyKeyReusedAtNetwork,
            idempotency::Error::KeyLocked => ApiError::IdempotencyKeyInFlight {
                retry_after_secs: IN_FLIGHT_RETRY_AFTER_SECS,
            },
            e @ (idempotency::Error::LeaseLost | idempotency::Error::NotAsAnnounced) => {
                ApiError::internal(e)
            }
        }
    }
}
