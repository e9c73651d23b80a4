//! What every write goes through before and after its handler's own work:
//! who is calling, its `Idempotency-Key`, its JSON body (read within the
//! body deadline, parsed strictly), then, for a keyed operation, the
//! protocol in `idempotency` on a pooled connection, and the answer it
//! gives, as HTTP.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;
use serde_json::Value;

use crate::http::problem::{ApiError, IN_FLIGHT_RETRY_AFTER_SECS};
use crate::http::state::AppState;
use crate::metrics::METRICS;
use crate::store::RequestHooks;
use crate::telemetry;
use idempotency::{
    self, Fingerprint, IdempotencyKey, KeyedRequest, Operation, Outcome, SavedResponse,
};

pub const MAX_BODY_BYTES: usize = 16 * 1024;
/// Whether a write reads the `Idempotency-Key` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyUse {
    /// A POST: the key is read (and required when REQUIRE_IDEMPOTENCY_KEY).
    Read,
    /// A naturally idempotent write (PUT): a key would add nothing, so the
    /// header is not read at all.
    Ignored,
}

/// A write request that passed authentication and its checks.
pub struct JsonRequest {
    pub account_id: i64,
    pub key: Option<IdempotencyKey>,
    /// The body as parsed JSON: what the fingerprint is computed over.
    pub body: Value,
    /// The state's hooks (none installed but in the demo's state).
    pub hooks: RequestHooks,
}

impl JsonRequest {
    /// What identifies this request for its key: the method, the path and
    /// the body.
    pub fn fingerprint(&self, req: &HttpRequest) -> Fingerprint {
        Fingerprint::of(req.method().as_str(), req.path(), &self.body)
    }
}

/// Everything that can reject a write before the database is touched, in
/// the order a client would want to hear about it.
pub async fn read_json(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    key_use: KeyUse,
) -> Result<JsonRequest, ApiError> {
    read(req, payload, state, key_use, false).await
}

/// As [`read_json`] for a keyed write whose body is optional: no body at
/// all (and then no `Content-Type` needed) reads as `{}`.
pub async fn read_optional_json(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<JsonRequest, ApiError> {
    read(req, payload, state, KeyUse::Read, true).await
}

async fn read(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    key_use: KeyUse,
    optional: bool,
) -> Result<JsonRequest, ApiError> {
    let account_id = state.accounts.authenticate(req, &state.pool).await?;
    let key = match key_use {
        KeyUse::Read => IdempotencyKey::from_headers(req.headers())?,
        KeyUse::Ignored => None,
    };
    if key_use == KeyUse::Read && key.is_none() && state.settings.require_idempotency_key {
        return Err(ApiError::IdempotencyKeyRequired);
    }
    if !optional {
        require_json(req)?;
    }
    require_identity_encoding(req)?;
    let timeout = state.settings.body_timeout;
    let body = tokio::time::timeout(timeout, read_body(req, payload))
        .await
        .map_err(|_| ApiError::BodyTimeout {
            secs: timeout.as_secs_f64().ceil() as u64,
        })??;
    let body = if optional && body.is_empty() {
        Value::Object(Default::default())
    } else {
        if optional {
            require_json(req)?;
        }
        crate::http::json::parse_strict(&body)
            .map_err(|e| ApiError::invalid(format!("The body is not valid JSON: {e}.")))?
    };
    Ok(JsonRequest {
        account_id,
        key,
        body,
        hooks: state.hooks.clone(),
    })
}

/// Runs `operation` under the request's key with the protocol, on pooled
/// connections (one per transaction, none held while an operation's foreign
/// step runs), and answers as it says: the response executed now, the one
/// replayed (with `Idempotent-Replayed: true`), 422 or 409.
pub async fn run_keyed(
    req: &HttpRequest,
    state: &AppState,
    request: JsonRequest,
    key: IdempotencyKey,
    mut operation: impl Operation<dyn crate::store::Store> + Send + 'static,
) -> Result<HttpResponse, ApiError> {
    let method = req.method().clone();
    let received = req.path().to_owned();
    let policy = state.key_policy(request.hooks);
    let mode = policy.mode;
    let (account_id, body) = (request.account_id, request.body);
    // The route's path as routing decoded it (`/%63harges` is `/charges`):
    // what the recovery task rebuilds the request from.
    let path = req.match_info().as_str().to_owned();
    let outcome = state
        .db_checkouts(req, move |checkouts| {
            // The fingerprint is the request's as received (a client that
            // spells the path otherwise sent another request).
            let keyed =
                KeyedRequest::new(account_id, key.as_str(), method.as_str(), &received, &body)
                    .routed_as(&path);
            Ok(policy.execute(checkouts, &keyed, &mut operation)?)
        })
        .await?;
    // A service beside the API (the in-process network) is not the API's
    // traffic: its keys are not counted a second time.
    if telemetry::metered(req) {
        record_outcome(outcome.label(), mode.as_str());
    } else {
        telemetry::record_outcome(outcome.label());
    }
    match outcome {
        Outcome::Executed(response) => Ok(respond(&response, false)),
        Outcome::Replayed(response) => Ok(respond(&response, true)),
        Outcome::Mismatch => Err(ApiError::IdempotencyKeyReused),
        Outcome::InFlight => Err(ApiError::IdempotencyKeyInFlight {
            retry_after_secs: IN_FLIGHT_RETRY_AFTER_SECS,
        }),
    }
}

pub fn record_outcome(outcome: &'static str, mode: &str) {
    telemetry::record_outcome(outcome);
    METRICS
        .idempotency_outcomes
        .with_label_values(&[outcome, mode])
        .inc();
}

/// A stored (or just made) response as HTTP, with RFC 9110's reason
/// phrases.
pub fn respond(saved: &SavedResponse, replayed: bool) -> HttpResponse {
    let mut response = saved.to_http(replayed);
    if let Some(reason) = crate::http::problem::rfc9110_reason(response.status()) {
        response.head_mut().reason = Some(reason);
    }
    response
}

/// `Content-Type: application/json` exactly once, in any case, with no
/// charset but UTF-8 (RFC 8259 §8.1). Other `+json` types have meanings of
/// their own (a merge patch is not a charge), so they are refused too.
fn require_json(req: &HttpRequest) -> Result<(), ApiError> {
    let mut values = req.headers().get_all(header::CONTENT_TYPE);
    let (Some(value), None) = (values.next(), values.next()) else {
        return match req.headers().contains_key(header::CONTENT_TYPE) {
            true => Err(ApiError::invalid("Send exactly one Content-Type header.")),
            false => Err(ApiError::UnsupportedMediaType),
        };
    };
    let mime: mime::Mime = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or(ApiError::UnsupportedMediaType)?;
    let utf8 = mime
        .get_param(mime::CHARSET)
        .is_none_or(|c| c.as_str().eq_ignore_ascii_case("utf-8"));
    if mime.type_() == mime::APPLICATION
        && mime.subtype() == mime::JSON
        && mime.suffix().is_none()
        && utf8
    {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType)
    }
}

/// The body is read as sent: a `Content-Encoding` other than `identity` is a
/// 415 with `Accept-Encoding: identity` (RFC 9110 §8.4.1), never JSON
/// parsed from compressed bytes.
fn require_identity_encoding(req: &HttpRequest) -> Result<(), ApiError> {
    for value in req.headers().get_all(header::CONTENT_ENCODING) {
        let text = value.to_str().unwrap_or("\u{fffd}");
        for coding in text.split(',').map(str::trim).filter(|c| !c.is_empty()) {
            if !coding.eq_ignore_ascii_case("identity") {
                return Err(ApiError::UnsupportedContentEncoding(coding.to_owned()));
            }
        }
    }
    Ok(())
}

async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
) -> Result<web::BytesMut, ApiError> {
    let too_large = ApiError::PayloadTooLarge {
        limit: MAX_BODY_BYTES,
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(too_large);
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(256));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid(body_error(&e)))?;
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(too_large);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// What went wrong while the body arrived, in the client's terms.
fn body_error(e: &actix_web::error::PayloadError) -> String {
    use actix_web::error::PayloadError;
    match e {
        PayloadError::Incomplete(_) => "The body ended before it was complete: the connection closed early or its chunked encoding was cut off. Send the request again.".to_owned(),
        PayloadError::EncodingCorrupted => "The body's encoding is corrupted (for example a malformed chunk size in Transfer-Encoding: chunked).".to_owned(),
        PayloadError::Overflow => format!("The request body must be at most {MAX_BODY_BYTES} bytes."),
        other => format!("The body could not be read: {other}."),
    }
}
