//! A card network you can run (`charges network`, or in-process beside
//! `charges serve`): it authorizes amounts for its merchants, and an
//! authorization, unlike a row of ours, is never rolled back. It keeps its
//! own database (the same migrations, another file or database), and puts
//! its one write under the same Idempotency-Key protocol as the API, the
//! protocol's second user: `POST /authorizations` with a key authorizes at
//! most once per key, and a retry is answered from the stored response.
//!
//! - `POST /authorizations {"amount": n, "currency": "jpy", "payment_method":
//!   "pm_card_visa"}` with `Idempotency-Key` (required): `201` with the
//!   authorization, or, for a declining test payment method, `402
//!   card-declined` with its `decline_code` and no authorization; either is
//!   stored under the key, so a retry hears the same decision. With
//!   `Idempotency-Key-Lifetime: <seconds>`, the key is kept no longer than
//!   that (the caller's own key's lifetime), else `IDEMPOTENCY_TTL`.
//! - `POST /authorizations/{id}/void` with `Idempotency-Key` (required):
//!   `200` with the authorization, `voided_at` set (once): the merchant
//!   gives the hold up, because no charge will ever hold it.
//! - `GET /authorizations/{id}`, `GET /authorizations?limit=N`.
//!
//! `NETWORK_LATENCY` makes it take that long to answer an authorization (a
//! sleep before anything is done, holding no connection), as real networks
//! take 100 ms to 2 s.
//!
//! Its merchants are its accounts; the API is one, with `NETWORK_API_KEY`.

use std::net::TcpListener;
use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Server, ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::{Condition, Next, from_fn};
use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use serde::{Deserialize, Serialize};
use serde_json::json;
use uuid::Uuid;

use crate::config::Settings;
use crate::http::accounts::{self, Authenticator};
use crate::http::hosts::{self, AllowedHosts};
use crate::http::limits::Peers;
use crate::http::problem::ApiError;
use crate::http::requests::{self, KeyUse};
use crate::http::state::AppState;
use crate::store::{Authorization, AuthorizationStore, DbPool, Store, now_micros, time_text};
use crate::telemetry;
use idempotency::{self, Operation, SavedResponse};

pub const PATH: &str = "/authorizations";

/// An authorization as the network shows it.
#[derive(Serialize)]
struct AuthorizationView {
    id: Uuid,
    object: &'static str,
    amount: i64,
    currency: String,
    created_at: String,
    /// Set once the merchant voided it.
    voided_at: Option<String>,
}

fn view(a: &Authorization) -> serde_json::Value {
    serde_json::to_value(AuthorizationView {
        id: a.id,
        object: "authorization",
        amount: a.amount,
        currency: a.currency.clone(),
        created_at: time_text(a.created_at),
        voided_at: a.voided_at.map(time_text),
    })
    .expect("an authorization serializes")
}

/// Authorizing, as an operation under a key: its id and time are chosen
/// first, so it announces its answer, as a charge without a network does:
/// the 201, or the 402 of a declining card (which authorizes nothing).
struct Authorize {
    /// None: the card declines.
    authorization: Option<Authorization>,
    response: SavedResponse,
}

impl<Tx: AuthorizationStore + ?Sized> Operation<Tx> for Authorize {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, idempotency::Error> {
        if let Some(authorization) = &self.authorization {
            tx.insert_authorization(authorization)?;
        }
        Ok(self.response.clone())
    }

    fn known_response(&self) -> Option<&SavedResponse> {
        Some(&self.response)
    }
}

async fn authorize(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let latency = state.settings.network_latency;
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let state = keeping_keys_as_asked(&req, &state)?;
    let request = requests::read_json(&req, payload, &state, KeyUse::Read).await?;
    // Amount, currency and payment method as a charge has them (no
    // description here).
    let new = crate::http::charges::parse_new_charge(&request.body)?;
    let authorization = Authorization {
        id: Uuid::new_v4(),
        account_id: request.account_id,
        amount: new.amount.get(),
        currency: new.currency.code().to_owned(),
        created_at: now_micros(),
        voided_at: None,
    };
    let (authorization, response) = match new.payment_method.decline {
        None => {
            let response = SavedResponse::json(
                StatusCode::CREATED.as_u16(),
                Some(format!("{PATH}/{}", authorization.id)),
                view(&authorization),
            );
            (Some(authorization), response)
        }
        Some(decline) => (
            None,
            crate::http::problem::saved_problem(crate::http::problem::Problem {
                decline_code: Some(decline.code),
                ..crate::http::problem::Problem::new(
                    &crate::http::problem::CARD_DECLINED,
                    format!("{} Nothing was authorized.", decline.message),
                )
            }),
        ),
    };
    let key = request
        .key
        .clone()
        .ok_or(ApiError::IdempotencyKeyRequired)?;
    let operation = Authorize {
        authorization,
        response,
    };
    requests::run_keyed(&req, &state, request, key, operation).await
}

/// The header a caller names how long it remembers its own key with, in
/// seconds: the network keeps the key no longer (nor longer than its own
/// `IDEMPOTENCY_TTL`). So a caller's key and the key it asks here under
/// are forgotten together: a retry after the caller forgot its key is a new
/// request at both, never a new charge holding the old authorization.
pub const KEY_LIFETIME_HEADER: &str = "idempotency-key-lifetime";

/// The state an authorization runs with: the network's, keeping its key as
/// long as the caller keeps its own, if it says so and that is shorter.
fn keeping_keys_as_asked(
    req: &HttpRequest,
    state: &web::Data<AppState>,
) -> Result<web::Data<AppState>, ApiError> {
    let Some(value) = req.headers().get(KEY_LIFETIME_HEADER) else {
        return Ok(state.clone());
    };
    let seconds: u64 = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|s| *s > 0)
        .ok_or_else(|| {
            ApiError::invalid("Idempotency-Key-Lifetime is a whole number of seconds, at least 1.")
        })?;
    let asked = std::time::Duration::from_secs(seconds);
    if asked >= state.settings.idempotency_ttl {
        return Ok(state.clone());
    }
    let mut settings = (*state.settings).clone();
    settings.idempotency_ttl = asked;
    Ok(web::Data::new(state.with_settings(settings)))
}

/// `POST /authorizations/{id}/void`: under a key like every write of the
/// network's, and idempotent by nature too (a voided authorization keeps its
/// first `voided_at`). Its answer (the authorization, or 404) is stored.
async fn void(
    req: HttpRequest,
    path: web::Path<String>,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let request = requests::read_json(&req, payload, &state, KeyUse::Read).await?;
    let id = Uuid::parse_str(&path).map_err(|_| ApiError::NotFound)?;
    let key = request
        .key
        .clone()
        .ok_or(ApiError::IdempotencyKeyRequired)?;
    let account_id = request.account_id;
    let operation =
        move |tx: &mut (dyn Store + 'static)| -> Result<SavedResponse, idempotency::Error> {
            Ok(match tx.void_authorization(account_id, id)? {
                Some(voided) => SavedResponse::json(StatusCode::OK.as_u16(), None, view(&voided)),
                None => crate::http::problem::saved(
                    &crate::http::problem::NOT_FOUND,
                    "This merchant has no authorization with this id.",
                ),
            })
        };
    requests::run_keyed(&req, &state, request, key, operation).await
}

async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id = Uuid::parse_str(&path).map_err(|_| ApiError::NotFound)?;
    let found = state
        .db(&req, move |store| {
            Ok(store.find_authorization(account_id, id)?)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(view(&found)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    limit: Option<i64>,
}

async fn list(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let query = web::Query::<ListQuery>::from_query(req.query_string())
        .map_err(|e| ApiError::invalid(format!("Bad query string: {e}.")))?;
    let limit = query.limit.unwrap_or(20).clamp(1, 200);
    let found = state
        .db(&req, move |store| {
            Ok(store.list_authorizations(account_id, limit)?)
        })
        .await?;
    Ok(HttpResponse::Ok().json(json!({
        "object": "list",
        "data": found.iter().map(view).collect::<Vec<_>>(),
    })))
}

/// Connections one address may hold open at the network: its client, the
/// API, makes at most one per blocking thread (actix's 512 in all), and
/// another process on loopback must not take the rest.
pub const MAX_CONNECTIONS_PER_PEER: usize = 512;

/// The settings of a network on `database_url`, from the API's: it
/// requires a key on every authorization, has no demo and no rate limit of
/// its own (its one client is the API, which limits its callers), and caps
/// the connections one address may hold.
pub fn settings(api: &Settings, database_url: String, api_key: &str) -> Settings {
    let mut s = Settings::with_database_url(database_url);
    s.require_idempotency_key = true;
    s.demo = Some(false);
    s.rate_limit_per_account = 0;
    s.rate_limit_per_client = 0;
    s.max_connections_per_peer = MAX_CONNECTIONS_PER_PEER;
    s.max_connections = 2 * MAX_CONNECTIONS_PER_PEER;
    s.allowed_hosts = api.allowed_hosts.clone();
    s.network_url = crate::config::NETWORK_OFF.to_owned();
    s.network_api_key = api_key.to_owned();
    s.request_timeout = api.request_timeout;
    s.idempotency_ttl = api.idempotency_ttl;
    s.network_latency = api.network_latency;
    // Short transactions of its own: a few connections serve the API.
    s.pool_size = api.pool_size.min(8);
    s.workers = Some(1);
    s
}

/// A network running: where, and its server (to await or stop).
pub struct Network {
    pub url: String,
    pub server: Server,
}

/// Opens the network's database (migrating it), makes sure its merchant
/// with `settings.network_api_key` exists, and starts serving on `listener`.
/// A request without that key is refused before anything else is done (no
/// look-up, no body read). On loopback (the in-process network, or one
/// bound there), only this machine's names (and ALLOWED_HOSTS) are
/// answered: a web page must not reach it by DNS rebinding.
pub fn start(settings: Settings, listener: TcpListener) -> Result<Network, String> {
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let pool = DbPool::open(&settings.pool()).map_err(|e| e.to_string())?;
    seed_merchant(&pool, &settings.network_api_key)?;
    let accounts = Arc::new(Authenticator::new(
        settings.account_cache_ttl,
        false,
        settings.request_timeout,
        0,
    ));
    let state = web::Data::new(AppState::new(pool, accounts, false, None, settings.clone()));
    let merchant = Arc::new(accounts::hash_api_key(&settings.network_api_key));
    let loopback = local.ip().is_loopback();
    let allowed = Arc::new(AllowedHosts::new(&settings.allowed_hosts));
    // Its refusals are not the API's: not in the API's metrics.
    let peers = Peers::unmetered(
        settings.max_connections_per_peer,
        Vec::new(),
        settings.max_connections,
    );
    let workers = settings.workers.unwrap_or(1);
    let server = HttpServer::new(move || {
        let (merchant, allowed) = (merchant.clone(), allowed.clone());
        App::new()
            .wrap(from_fn(move |req, next| {
                merchant_only(merchant.clone(), req, next)
            }))
            .wrap(Condition::new(
                loopback,
                from_fn(move |req, next| hosts::check(allowed.clone(), req, next)),
            ))
            // Logged, but not counted as the API's traffic.
            .wrap(from_fn(telemetry::observe_unmetered))
            .wrap(from_fn(crate::http::limits::close_unread))
            .app_data(state.clone())
            .service(
                web::resource(PATH)
                    .route(web::post().to(authorize))
                    .route(web::get().to(list)),
            )
            .service(web::resource("/authorizations/{id}").route(web::get().to(get)))
            .service(web::resource("/authorizations/{id}/void").route(web::post().to(void)))
            .default_service(web::to(crate::http::not_found))
    })
    .on_connect(move |connection, data| peers.on_connect(connection, data))
    .workers(workers)
    // actix counts per worker.
    .max_connections(settings.max_connections.div_ceil(workers).max(1))
    .disable_signals()
    .shutdown_timeout(5)
    .listen(listener)
    .map_err(|e| e.to_string())?
    .run();
    Ok(Network {
        url: format!("http://{local}"),
        server,
    })
}

/// Middleware: a request without the merchant's key (its SHA-256 digest
/// here) is a 401 at once, before its body is read, its latency slept, or
/// the database asked: a flood of made-up keys costs a hash each.
async fn merchant_only(
    merchant: Arc<String>,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let known = match accounts::bearer_token(req.request()) {
        Ok(Some(token)) => accounts::hash_api_key(token) == *merchant,
        Ok(None) => false,
        Err(e) => return Ok(req.error_response(e).map_into_boxed_body()),
    };
    if !known {
        return Ok(req
            .error_response(ApiError::Unauthorized)
            .map_into_boxed_body());
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}

/// The API's merchant account at the network, made on first start.
fn seed_merchant(pool: &DbPool, api_key: &str) -> Result<(), String> {
    let mut conn = pool.checkout().map_err(|e| e.to_string())?;
    let store = conn.store();
    let digest = accounts::hash_api_key(api_key);
    if store
        .find_account(&digest, false)
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Ok(());
    }
    let name = format!("Merchant {}", &digest[..12]);
    match accounts::insert_account(store, &name, api_key, false) {
        // Another process made it in between.
        Ok(_) | Err(accounts::AccountError::NameTaken(_)) => Ok(()),
        Err(e) => Err(format!("cannot seed the network's merchant: {e}")),
    }
}

/// The in-process network's merchant: the API, under the name the default
/// key's merchant always had, so that its authorizations (and the keys they
/// were made under) stay its own across restarts.
fn in_process_merchant() -> String {
    let digest = accounts::hash_api_key(crate::config::DEFAULT_NETWORK_API_KEY);
    format!("Merchant {}", &digest[..12])
}

/// The in-process network's merchant key, on the network database at
/// `database_url`: the one kept there, made at random by the first instance
/// to start, and given to the merchant (created on first start). One key
/// for every instance on one network database, so that each of them
/// charges; the same merchant across restarts, so that a retry after a
/// restart is still a replay at the network. (A key of the process's own
/// would be taken from the others by the last to start.)
pub fn in_process_key(database_url: &str) -> Result<String, String> {
    let mut conn = crate::store::Connection::open(database_url).map_err(|e| e.to_string())?;
    let store = conn.store();
    store.migrate()?;
    let name = in_process_merchant();
    let key = store
        .keep_network_key(&name, &accounts::generate_api_key())
        .map_err(|e| format!("cannot keep the network's merchant key: {e}"))?;
    let digest = accounts::hash_api_key(&key);
    let updated = store
        .rekey_account(&name, &digest)
        .map_err(|e| format!("cannot give the network's merchant its key: {e}"))?;
    if updated == 0 {
        match accounts::insert_account(store, &name, &key, false) {
            // Another instance made it in between, with the same key.
            Ok(_) | Err(accounts::AccountError::NameTaken(_)) => {}
            Err(e) => return Err(format!("cannot seed the network's merchant: {e}")),
        }
    }
    Ok(key)
}
