//! `/webhook_endpoints`: where an account's events are sent. Registering
//! one and rotating its secret are writes under the `Idempotency-Key`
//! protocol exactly as a charge is (a replay answers the same bytes, the
//! secret included: the one place it is ever shown); the rest read, or
//! delete, which is idempotent by nature.
//!
//! The signing secret (`whsec_` and 32 random bytes) is in the 201 and the
//! rotation's 200, and their stored replays, only: no list, `GET`, event or
//! log line holds it (`Endpoint`'s `Debug` leaves it out).

use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Serialize;
use uuid::Uuid;

use crate::http::paging::ListRequest;
use crate::http::problem::{ApiError, NOT_FOUND, WEBHOOK_ENDPOINT_LIMIT, saved};
use crate::http::requests::{self, JsonRequest, KeyUse, respond};
use crate::http::state::AppState;
use crate::http::webhooks::registration::{self, NewEndpoint};
use crate::store::webhooks::MAX_ENDPOINTS;
use crate::store::{AccountStore, Endpoint, Store, WebhookStore, now_micros, time_text};
use idempotency::webhook::signature::Secret;
use idempotency::{KeyRecord, KeyState, Operation, SavedResponse};

pub const PATH: &str = "/webhook_endpoints";

/// A new signing secret: 32 bytes from the operating system's CSPRNG.
pub fn new_secret() -> String {
    let mut bytes = vec![0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random number generator");
    Secret::from_bytes(bytes)
        .expect("32 bytes make a secret")
        .to_whsec()
}

/// A webhook endpoint as the API shows it: never with a secret.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EndpointView {
    pub id: Uuid,
    /// Always `"webhook_endpoint"`.
    #[schema(example = "webhook_endpoint")]
    pub object: &'static str,
    #[schema(example = "https://shop.example/webhooks")]
    pub url: String,
    /// The event types sent to it, or `["*"]`: every type.
    #[schema(example = json!(["charge.succeeded", "charge.refunded"]))]
    pub enabled_events: Vec<String>,
    pub description: Option<String>,
    /// `disabled`: it answered `410 Gone`, and nothing more is sent to it.
    #[schema(schema_with = endpoint_status)]
    pub status: String,
    /// RFC 3339, UTC, microseconds.
    #[schema(example = "2026-12-02T14:47:33.173074Z")]
    pub created_at: String,
    /// Until when the secret it had before its last rotation signs deliveries too (`null`: no rotation yet).
    #[schema(example = json!(null))]
    pub previous_secret_expires_at: Option<String>,
}

/// A webhook endpoint with its signing secret: the answer to its
/// registration and to a secret rotation (and their replays), only.
#[derive(Serialize, utoipa::ToSchema)]
pub struct EndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: EndpointView,
    /// `whsec_` and the base64 of 32 random bytes: the HMAC-SHA256 key of the `webhook-signature` header (Standard Webhooks). Shown only here; keep it.
    #[schema(pattern = "^whsec_[A-Za-z0-9+/]+={0,2}$")]
    pub secret: String,
}

#[derive(Serialize, utoipa::ToSchema)]
pub struct EndpointList {
    /// Always `"list"`.
    pub object: &'static str,
    /// Always `"/webhook_endpoints"`.
    pub url: &'static str,
    /// Whether there are more beyond this page, in the direction paged (as for charges).
    pub has_more: bool,
    /// Newest first.
    pub data: Vec<EndpointView>,
}

/// The answer to a `DELETE`.
#[derive(Serialize, utoipa::ToSchema)]
pub struct DeletedEndpoint {
    pub id: Uuid,
    /// Always `"webhook_endpoint"`.
    pub object: &'static str,
    /// Always `true`.
    pub deleted: bool,
}

fn endpoint_status() -> utoipa::openapi::schema::ObjectBuilder {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(["enabled", "disabled"]))
}

impl From<&Endpoint> for EndpointView {
    fn from(e: &Endpoint) -> Self {
        EndpointView {
            id: e.id,
            object: "webhook_endpoint",
            url: e.url.clone(),
            enabled_events: e.enabled_events.clone(),
            description: e.description.clone(),
            status: e.status.clone(),
            created_at: time_text(e.created_at),
            previous_secret_expires_at: e.previous_secret_expires_at.map(time_text),
        }
    }
}

fn with_secret(status: StatusCode, endpoint: &Endpoint) -> SavedResponse {
    let body = EndpointWithSecret {
        endpoint: endpoint.into(),
        secret: endpoint.secret.clone(),
    };
    SavedResponse::json(
        status.as_u16(),
        (status == StatusCode::CREATED).then(|| format!("{PATH}/{}", endpoint.id)),
        serde_json::to_value(body).expect("an endpoint serializes"),
    )
}

/// Registering an endpoint, as an operation under a key. Its id, time and
/// secret are chosen before anything is written; whether the account has
/// room for it is known only in the transaction, under its row's lock.
pub struct CreateEndpoint {
    pub endpoint: Endpoint,
    /// Whether the account must still be live (the recovery task's).
    pub check_account: bool,
}

impl CreateEndpoint {
    pub fn new(account_id: i64, new: &NewEndpoint) -> CreateEndpoint {
        CreateEndpoint {
            endpoint: Endpoint {
                id: Uuid::new_v4(),
                account_id,
                url: new.url.as_str().to_owned(),
                description: new.description.as_ref().map(|d| d.as_str().to_owned()),
                enabled_events: new.enabled_events.clone(),
                secret: new_secret(),
                previous_secret: None,
                previous_secret_expires_at: None,
                status: "enabled".to_owned(),
                disabled_reason: None,
                created_at: now_micros(),
            },
            check_account: false,
        }
    }
}

/// One transaction: the account's row locked, its endpoints counted, the
/// new one inserted. A full account's 409 is stored under the key like a
/// 201 (as a refund's 400 is).
impl<Tx: WebhookStore + AccountStore + ?Sized> Operation<Tx> for CreateEndpoint {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, idempotency::Error> {
        let account_id = self.endpoint.account_id;
        if self.check_account
            && let Some(refused) = crate::http::charges::refused(tx, account_id)?
        {
            return Ok(refused);
        }
        if tx.lock_endpoints(account_id)? >= MAX_ENDPOINTS {
            return Ok(saved(
                &WEBHOOK_ENDPOINT_LIMIT,
                format!(
                    "This account has {MAX_ENDPOINTS} webhook endpoints, as many as it may: delete one to register another. Nothing was registered."
                ),
            ));
        }
        tx.insert_endpoint(&self.endpoint)?;
        Ok(with_secret(StatusCode::CREATED, &self.endpoint))
    }
}

/// Rotating an endpoint's secret, as an operation under a key: the new
/// secret is chosen first, so a replay shows the one that was set.
pub struct RotateSecret {
    pub account_id: i64,
    pub id: Uuid,
    pub secret: String,
    pub expire_previous_in: Duration,
    pub check_account: bool,
}

impl<Tx: WebhookStore + AccountStore + ?Sized> Operation<Tx> for RotateSecret {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, idempotency::Error> {
        if self.check_account
            && let Some(refused) = crate::http::charges::refused(tx, self.account_id)?
        {
            return Ok(refused);
        }
        let until = now_micros()
            + chrono::Duration::from_std(self.expire_previous_in).expect("at most a day");
        Ok(
            match tx.rotate_endpoint_secret(self.account_id, self.id, &self.secret, until)? {
                Some(endpoint) => with_secret(StatusCode::OK, &endpoint),
                None => saved(
                    &NOT_FOUND,
                    "There is no such webhook endpoint for your account; no secret was changed.",
                ),
            },
        )
    }
}

/// An endpoint's id as it is given out (lowercase, hyphenated).
pub fn endpoint_id(path: &str) -> Result<Uuid, ApiError> {
    crate::http::paging::plain_id(path).ok_or(ApiError::NotFound)
}

/// Runs a write keyed, or without a key in one transaction of its own.
async fn run(
    req: &HttpRequest,
    state: &AppState,
    mut request: JsonRequest,
    mut operation: impl for<'a> Operation<dyn Store + 'a> + Send + 'static,
) -> Result<HttpResponse, ApiError> {
    match request.key.take() {
        Some(key) => requests::run_keyed(req, state, request, key, operation).await,
        None => {
            let response = state
                .db(req, move |store| {
                    Ok(store.transaction(|tx| operation.run(tx))?)
                })
                .await?;
            requests::record_outcome("no_key", "none");
            Ok(respond(&response, false))
        }
    }
}

/// Register a webhook endpoint. With an `Idempotency-Key`, at most once per key.
#[utoipa::path(
    post, path = "/webhook_endpoints", tag = "webhooks", operation_id = "create_webhook_endpoint",
    request_body(content = EndpointRequestBody, content_type = "application/json"),
    params(crate::http::schemas::KeyParam),
    responses(
        (status = 201, description = "Registered now, or replayed from the key (then with `Idempotent-Replayed: true`), byte-identical: the only answers that show the secret.", body = EndpointWithSecret,
            headers(
                ("Location" = String, description = "`/webhook_endpoints/{id}`"),
                ("Idempotent-Replayed" = String, description = "`true` when this response was stored earlier for the same key and request"),
            )),
    ),
    security(("api_key" = []))
)]
pub async fn create(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let request = requests::read_json(&req, payload, &state, KeyUse::Read).await?;
    if state.settings.webhook_registration_closed() {
        return Err(registration::not_allowed(
            "This is a demo hosted for others: it sends a sandbox's events only to the receiver it hosts for it, never to a URL a visitor gives (the operator can allow that with DEMO_PUBLIC_WEBHOOKS=true).",
        ));
    }
    let policy = state.settings.webhook_target_policy();
    let new = registration::parse_new_endpoint(&request.body, &policy)?;
    // The name is resolved now (and again at every connect, by the sender).
    let url = new.url.clone();
    if let Err(refused) = web::block(move || registration::check_target(&url, &policy)).await? {
        // A key already answered is answered as before (replayed, or a 422
        // for another body), whatever the name resolves to now.
        if !answered(&req, &state, &request).await? {
            return Err(refused);
        }
    }
    let create = CreateEndpoint::new(request.account_id, &new);
    run(&req, &state, request, create).await
}

/// Whether the request's key, if any, was completed already.
async fn answered(
    req: &HttpRequest,
    state: &AppState,
    request: &JsonRequest,
) -> Result<bool, ApiError> {
    let Some(key) = &request.key else {
        return Ok(false);
    };
    let (account_id, key) = (request.account_id, key.as_str().to_owned());
    let found = state
        .db(req, move |store| Ok(store.find_live_key(account_id, &key)?))
        .await?;
    Ok(matches!(
        found,
        Some(KeyRecord {
            state: KeyState::Completed(_),
            ..
        })
    ))
}

/// The body of `POST /webhook_endpoints`. An unknown member, or a member given twice, is a 400.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Documentation only: parsed by `registration::parse_new_endpoint`.
pub struct EndpointRequestBody {
    /// An absolute `https://` URL of at most 2048 bytes (`http://` only where the server allows it), with no user name or password. Its host must resolve to public addresses only (unless the operator allows others): else a 400 `webhook-target-not-allowed`.
    #[schema(examples("https://shop.example/webhooks"), max_length = 2048)]
    url: String,
    /// The event types to send, without repeats, or `["*"]` for every type.
    #[schema(schema_with = enabled_events)]
    enabled_events: Vec<String>,
    #[schema(schema_with = description)]
    description: Option<String>,
}

fn description() -> utoipa::openapi::schema::ObjectBuilder {
    crate::http::schemas::description("; for you, to tell your endpoints apart", "shop orders")
}

fn enabled_events() -> utoipa::openapi::schema::ArrayBuilder {
    let mut types: Vec<&str> = crate::payments::events::TYPES.to_vec();
    types.push("*");
    utoipa::openapi::schema::ArrayBuilder::new()
        .items(
            utoipa::openapi::schema::ObjectBuilder::new()
                .schema_type(utoipa::openapi::schema::Type::String)
                .enum_values(Some(types)),
        )
        .min_items(Some(1))
        .max_items(Some(crate::payments::events::TYPES.len()))
        .unique_items(true)
        .examples([serde_json::json!(["charge.succeeded", "charge.refunded"])])
}

/// The body of `POST /webhook_endpoints/{id}/rotate_secret`, which may be left out (or `{}`).
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Documentation only: parsed by `registration::parse_rotation`.
pub struct RotationBody {
    /// Seconds the previous secret keeps signing deliveries (beside the new one), 0 to 86400; 86400 when left out.
    // Not `Option`: the field may be left out, but `null` is not a number
    // of seconds (the schema says so, and the parser refuses it).
    #[schema(minimum = 0, maximum = 86400, default = 86400)]
    #[serde(default)]
    expire_previous_in: u32,
}

/// The caller's webhook endpoints, newest first, a page at a time (no secrets).
#[utoipa::path(
    get, path = "/webhook_endpoints", tag = "webhooks", operation_id = "list_webhook_endpoints",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20", minimum = 1, maximum = 100),
        ("starting_after" = inline(Option<crate::http::schemas::ListCursor>), Query, description = "The page after this endpoint: older ones. Not with `ending_before`."),
        ("ending_before" = inline(Option<crate::http::schemas::ListCursor>), Query, description = "The page before this endpoint: newer ones. Not with `starting_after`."),
    ),
    responses(
        (status = 200, body = EndpointList),
    ),
    security(("api_key" = []))
)]
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let list = ListRequest::parse(req.query_string(), &[])?;
    let (endpoints, has_more) = state
        .db(&req, move |store| {
            let page =
                list.page(|id| Ok(store.find_endpoint(account_id, id)?.map(|e| e.created_at)))?;
            Ok(list.finish(store.list_endpoints(account_id, &page)?))
        })
        .await?;
    Ok(HttpResponse::Ok().json(EndpointList {
        object: "list",
        url: PATH,
        has_more,
        data: endpoints.iter().map(EndpointView::from).collect(),
    }))
}

/// One of the caller's webhook endpoints (no secret).
#[utoipa::path(
    get, path = "/webhook_endpoints/{id}", tag = "webhooks", operation_id = "get_webhook_endpoint",
    params(("id" = inline(crate::http::schemas::ChargeId), Path)),
    responses(
        (status = 200, body = EndpointView),
    ),
    security(("api_key" = []))
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id = endpoint_id(&path)?;
    let endpoint = state
        .db(&req, move |store| Ok(store.find_endpoint(account_id, id)?))
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(EndpointView::from(&endpoint)))
}

/// Delete a webhook endpoint: nothing more is sent to it, and its pending
/// deliveries go with it. Idempotent by nature (a second `DELETE` is a 404),
/// so it needs no `Idempotency-Key`.
#[utoipa::path(
    delete, path = "/webhook_endpoints/{id}", tag = "webhooks", operation_id = "delete_webhook_endpoint",
    params(("id" = inline(crate::http::schemas::ChargeId), Path)),
    responses(
        (status = 200, body = DeletedEndpoint),
    ),
    security(("api_key" = []))
)]
pub async fn delete(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id = endpoint_id(&path)?;
    let deleted = state
        .db(
            &req,
            move |store| Ok(store.delete_endpoint(account_id, id)?),
        )
        .await?;
    if !deleted {
        return Err(ApiError::NotFound);
    }
    Ok(HttpResponse::Ok().json(DeletedEndpoint {
        id,
        object: "webhook_endpoint",
        deleted: true,
    }))
}

/// Give an endpoint a new signing secret. Deliveries are signed with both
/// the new and the previous secret (the `webhook-signature` header carries
/// both) until `previous_secret_expires_at`. With an `Idempotency-Key`, at
/// most once per key: a replay shows the same new secret.
#[utoipa::path(
    post, path = "/webhook_endpoints/{id}/rotate_secret", tag = "webhooks", operation_id = "rotate_webhook_endpoint_secret",
    params(
        ("id" = inline(crate::http::schemas::ChargeId), Path),
        crate::http::schemas::KeyParam,
    ),
    request_body(content = RotationBody, content_type = "application/json", description = "Optional: no body at all, or `{}`, keeps the previous secret for a day. Not `null` (a 400)."),
    responses(
        (status = 200, description = "Rotated now, or replayed from the key (then with `Idempotent-Replayed: true`): the only answers that show the new secret.", body = EndpointWithSecret,
            headers(
                ("Idempotent-Replayed" = String, description = "`true` when this response was stored earlier for the same key and request"),
            )),
    ),
    security(("api_key" = []))
)]
pub async fn rotate_secret(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let request = requests::read_optional_json(&req, payload, &state).await?;
    let id = endpoint_id(&path)?;
    let expire_previous_in = registration::parse_rotation(&request.body)?;
    let rotate = RotateSecret {
        account_id: request.account_id,
        id,
        secret: new_secret(),
        expire_previous_in,
        check_account: false,
    };
    run(&req, &state, request, rotate).await
}
