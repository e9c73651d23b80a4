//! The charge endpoints. `POST /charges` parses the request into a
//! `NewCharge`, then hands the database work to the idempotency protocol when
//! the request carries an `Idempotency-Key`, or runs it plainly when not.

use std::collections::BTreeMap;

use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use chrono::{Timelike, Utc};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::NewCharge;
use crate::hooks::{Moment, RequestHooks};
use crate::idempotency::{
    self, Created, Fingerprint, IdempotencyKey, KeyedRequest, Mode, Outcome, SavedResponse,
};
use crate::metrics::METRICS;
use crate::problem::{ApiError, Problem};
use crate::state::AppState;
use crate::store::{Charge, time_text};
use crate::telemetry;

pub const PATH: &str = "/charges";
pub const IDEMPOTENCY_KEY_DOC: &str = "A Structured Field string (IETF draft-ietf-httpapi-idempotency-key-header-07), e.g. `\"8e03978e-40d5-43e8-bc93-6894a57f9324\"`; an unquoted value is accepted too and taken literally. Either way 1 to 255 printable ASCII characters (space to `~`); a quoted one escapes `\\\"` and `\\\\` and has no parameters. Generate one UUID per charge and reuse it for every retry. Keys are remembered for 24 hours by default (IDEMPOTENCY_TTL); within that window the same key with the same request replays the stored 201, with a different request it is a 422.";
pub const MAX_BODY_BYTES: usize = 16 * 1024;
pub const DEFAULT_LIST_LIMIT: i64 = 20;
pub const MAX_LIST_LIMIT: i64 = 100;
/// Set on a response that was replayed from a stored key instead of executed.
pub const IDEMPOTENT_REPLAYED: HeaderName = HeaderName::from_static("idempotent-replayed");

/// A `POST /charges` that passed authentication and validation.
pub struct ChargeRequest {
    pub account_id: i64,
    pub key: Option<IdempotencyKey>,
    /// The body as parsed JSON: what the fingerprint is computed over.
    pub body: Value,
    pub new_charge: NewCharge,
    /// Faults injected for this request, if any (see `hooks`).
    pub hooks: RequestHooks,
}

impl ChargeRequest {
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(Method::POST.as_str(), PATH, &self.body)
    }
}

/// Everything that can reject a charge before the database is touched, in
/// the order a client would want to hear about it.
pub async fn parse_request(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
) -> Result<ChargeRequest, ApiError> {
    let account_id = state.accounts.authenticate(req, &state.pool).await?;
    let key = IdempotencyKey::from_headers(req.headers())?;
    if key.is_none() && state.settings.require_idempotency_key {
        return Err(ApiError::IdempotencyKeyRequired);
    }
    require_json(req)?;
    require_identity_encoding(req)?;
    let timeout = state.settings.body_timeout;
    let body = tokio::time::timeout(timeout, read_body(req, payload))
        .await
        .map_err(|_| ApiError::BodyTimeout {
            secs: timeout.as_secs_f64().ceil() as u64,
        })??;
    let body = crate::json::parse_strict(&body)
        .map_err(|e| ApiError::invalid(format!("The body is not valid JSON: {e}.")))?;
    let new_charge = NewCharge::parse(&body).map_err(|errors| ApiError::InvalidRequest {
        detail: "The charge has invalid fields; see `errors`.".to_owned(),
        errors,
    })?;
    Ok(ChargeRequest {
        account_id,
        key,
        body,
        new_charge,
        hooks: req
            .extensions()
            .get::<RequestHooks>()
            .cloned()
            .unwrap_or_default(),
    })
}

/// Create a charge. With an `Idempotency-Key`, at most once per key.
#[utoipa::path(
    post, path = "/charges", tag = "charges",
    request_body(content = ChargeRequestBody, content_type = "application/json"),
    params(
        ("Idempotency-Key" = Option<String>, Header, description = IDEMPOTENCY_KEY_DOC),
    ),
    responses(
        (status = 201, description = "Created now, or replayed from the key (then with `Idempotent-Replayed: true`); the replay is byte-identical.", body = ChargeView,
            headers(
                ("Location" = String, description = "`/charges/{id}`"),
                ("Idempotent-Replayed" = String, description = "`true` when this response was stored earlier for the same key and request"),
            )),
        (status = 400, description = "`invalid-request` or `invalid-idempotency-key`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "`request-timeout`: the body did not arrive within BODY_TIMEOUT (10 s by default)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`idempotency-key-in-flight`: the key's first request is still running (key-first mode); retry after `Retry-After` seconds", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "seconds"))),
        (status = 413, description = "`payload-too-large`: over 16 KiB", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "`unsupported-media-type`", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`idempotency-key-reused`: the key was used with a different request (body or endpoint)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`internal`: nothing was stored; retrying with the same key is safe", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`service-unavailable`: database unreachable or busy", body = Problem, content_type = "application/problem+json",
            headers(("Retry-After" = u32, description = "seconds"))),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let request = parse_request(&req, payload, &state).await?;
    // Only a keyed request needs to know what "the same request" is.
    let fingerprint = request.key.as_ref().map(|_| request.fingerprint());
    let ChargeRequest {
        account_id,
        key,
        new_charge,
        hooks,
        ..
    } = request;
    let pool = state.pool.clone();
    // The charge and its 201 are decided before anything is written.
    let created = new_charge_for(account_id, &new_charge);

    let (Some(key), Some(fingerprint)) = (key, fingerprint) else {
        // No key: nothing can tell a retry from a new charge. One INSERT.
        let created = web::block(move || -> Result<Created, ApiError> {
            let mut conn = pool.checkout()?;
            hooks
                .0
                .run(conn.store(), Moment::AfterWrites, &mut |s| {
                    s.insert_charge(&created.charge)?;
                    Ok(true)
                })
                .map_err(idempotency::Error::from)?;
            Ok(created)
        })
        .await??;
        record_outcome("no_key", "none");
        return Ok(respond(&created.response, false));
    };

    let ttl = state.settings.idempotency_ttl;
    let lease = state.settings.idempotency_lease;
    // A request may carry its own mode (the demo compares both side by side).
    let mode = req
        .extensions()
        .get::<Mode>()
        .copied()
        .unwrap_or(state.settings.idempotency_mode);
    let outcome = web::block(move || -> Result<Outcome, ApiError> {
        let mut conn = pool.checkout()?;
        let request = KeyedRequest {
            account_id,
            key: &key,
            fingerprint: &fingerprint,
            ttl,
            lease,
        };
        Ok(idempotency::execute(
            conn.store(),
            mode,
            &request,
            hooks.0.as_ref(),
            &created,
        )?)
    })
    .await??;
    record_outcome(outcome.label(), mode.as_str());
    match outcome {
        Outcome::Executed(response) => Ok(respond(&response, false)),
        Outcome::Replayed(response) => Ok(respond(&response, true)),
        Outcome::Mismatch => Err(ApiError::IdempotencyKeyReused),
        Outcome::InFlight => Err(ApiError::IdempotencyKeyInFlight {
            retry_after_secs: crate::problem::IN_FLIGHT_RETRY_AFTER_SECS,
        }),
    }
}

fn record_outcome(outcome: &'static str, mode: &str) {
    telemetry::record_outcome(outcome);
    METRICS
        .idempotency_outcomes
        .with_label_values(&[outcome, mode])
        .inc();
}

/// A new charge, its id and time chosen now, and the 201 that is sent and
/// stored: all of it known before anything is written, so that the atomic
/// design can write the key row completed in the charge's own statement.
/// The time is the app's clock to the microsecond (what the database keeps).
pub fn new_charge_for(account_id: i64, new: &NewCharge) -> Created {
    let now = Utc::now();
    let charge = Charge {
        id: Uuid::new_v4(),
        account_id,
        amount: new.amount.get(),
        currency: new.currency.code().to_owned(),
        description: new.description.as_ref().map(|d| d.as_str().to_owned()),
        created_at: now
            .with_nanosecond(now.nanosecond() / 1000 * 1000)
            .unwrap_or(now),
    };
    let headers = BTreeMap::from([
        ("content-type".to_owned(), "application/json".to_owned()),
        ("location".to_owned(), format!("{PATH}/{}", charge.id)),
    ]);
    let response = SavedResponse {
        status: StatusCode::CREATED.as_u16(),
        headers,
        body: charge_json(&charge),
    };
    Created { charge, response }
}

/// A charge as the API shows it.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ChargeView {
    pub id: Uuid,
    /// Always `"charge"`.
    #[schema(example = "charge")]
    pub object: &'static str,
    /// In the currency's minor unit (yen for `jpy`, cents for `usd`).
    #[schema(example = 1000, minimum = 1, maximum = 99_999_999)]
    pub amount: i64,
    #[schema(example = "jpy")]
    pub currency: String,
    pub description: Option<String>,
    /// RFC 3339, UTC, microseconds.
    #[schema(example = "2026-12-02T14:47:33.173074Z")]
    pub created_at: String,
}

/// The body of `POST /charges`. Unknown fields are rejected.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // Documentation only: the body is parsed by `NewCharge::parse`.
pub struct ChargeRequestBody {
    /// In the currency's minor unit; never a float.
    #[schema(example = 1000, minimum = 1, maximum = 99_999_999)]
    amount: i64,
    /// Lowercase ISO 4217 code from the allow-list.
    #[schema(example = "jpy", pattern = "^[a-z]{3}$")]
    currency: String,
    /// At most 500 characters.
    #[schema(example = "a book", max_length = 500)]
    description: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct ChargeList {
    /// Always `"list"`.
    pub object: &'static str,
    /// Newest first.
    pub data: Vec<ChargeView>,
}

impl From<&Charge> for ChargeView {
    fn from(charge: &Charge) -> Self {
        ChargeView {
            id: charge.id,
            object: "charge",
            amount: charge.amount,
            currency: charge.currency.clone(),
            description: charge.description.clone(),
            created_at: time_text(charge.created_at),
        }
    }
}

pub fn charge_json(charge: &Charge) -> Value {
    serde_json::to_value(ChargeView::from(charge)).expect("a charge serializes")
}

pub fn respond(saved: &SavedResponse, replayed: bool) -> HttpResponse {
    let status = StatusCode::from_u16(saved.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = HttpResponse::build(status);
    for (name, value) in &saved.headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(name.as_str()),
            HeaderValue::try_from(value.as_str()),
        ) {
            response.insert_header((name, value));
        }
    }
    if replayed {
        response.insert_header((IDEMPOTENT_REPLAYED, HeaderValue::from_static("true")));
    }
    response.body(saved.body_bytes())
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<i64>,
}

/// The caller's charges, newest first.
#[utoipa::path(
    get, path = "/charges", tag = "charges",
    params(("limit" = Option<i64>, Query, description = "1 to 100, default 20", minimum = 1, maximum = 100)),
    responses(
        (status = 200, body = ChargeList),
        (status = 400, description = "`invalid-request`", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
    ),
    security(("api_key" = []))
)]
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    // Read after authentication, so an unknown caller hears 401 first.
    let query = web::Query::<ListQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid(format!("Bad query string: {e}.")))?;
    let limit = query.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if !(1..=MAX_LIST_LIMIT).contains(&limit) {
        return Err(ApiError::invalid(format!(
            "`limit` must be between 1 and {MAX_LIST_LIMIT}."
        )));
    }
    let pool = state.pool.clone();
    let charges = web::block(move || -> Result<Vec<Charge>, ApiError> {
        Ok(pool.checkout()?.store().list_charges(account_id, limit)?)
    })
    .await??;
    Ok(HttpResponse::Ok().json(ChargeList {
        object: "list",
        data: charges.iter().map(ChargeView::from).collect(),
    }))
}

/// One of the caller's charges.
#[utoipa::path(
    get, path = "/charges/{id}", tag = "charges",
    params(("id" = Uuid, Path)),
    responses(
        (status = 200, body = ChargeView),
        (status = 401, description = "`unauthorized`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not-found` (also another account's charge)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("api_key" = []))
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    // A charge has one URI, its id in the canonical form it is given out in
    // (lowercase, hyphenated): any other spelling, like a malformed id,
    // names no charge.
    let id = Uuid::parse_str(&path)
        .ok()
        .filter(|id| id.hyphenated().to_string() == *path)
        .ok_or(ApiError::NotFound)?;
    let pool = state.pool.clone();
    let charge = web::block(move || -> Result<Option<Charge>, ApiError> {
        Ok(pool.checkout()?.store().find_charge(account_id, id)?)
    })
    .await??
    .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(charge_json(&charge)))
}
