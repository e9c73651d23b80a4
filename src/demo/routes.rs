//! The routes demo mode adds: `POST /demo/sandboxes`, which makes a
//! visitor's sandbox, and, each on the caller's own sandbox only (its key,
//! `Authorization: Bearer`), the database views of the teaching page and
//! the naive "check, then insert" algorithm.

use std::sync::Mutex;

use actix_web::{HttpRequest, HttpResponse, guard, web};
use serde_json::{Value, json};

use super::queries::{self, Unguarded};
use super::sandboxes::{Admission, expiry_view};
use super::{
    CHECK_THEN_INSERT, CHECK_THEN_INSERT_PAUSE, DEMO_ACCOUNT_NAME, DEMO_API_KEY, Ledger, MAX_LEASE,
    MIN_LEASE, MODE_HEADER, Sandbox, session_label,
};
use crate::config::Settings;
use crate::http::charges;
use crate::http::problem::ApiError;
use crate::http::requests::{self, JsonRequest, KeyUse};
use crate::http::state::AppState;
use crate::http::{get, resource};
use crate::network_client::NetworkClient;
use crate::store::{Charge, Page, Store, time_text};
use idempotency::{IdempotencyKey, SavedResponse};

/// Rows of each table the page is shown at most.
const LIMIT: i64 = 200;

/// The routes demo mode adds. `POST /charges` with `Demo-Mode:
/// check-then-insert` is matched here before the real handler.
pub fn check_then_insert_route() -> actix_web::Route {
    web::post()
        .guard(guard::Header(MODE_HEADER, CHECK_THEN_INSERT))
        .to(check_then_insert)
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/demo/config").route(get().to(config)));
    cfg.service(resource("/demo/sandboxes").route(web::post().to(create_sandbox)));
    cfg.service(resource("/demo/state").route(get().to(state)));
    cfg.service(resource("/demo/slot").route(get().to(slot)));
    cfg.service(resource("/demo/reset").route(web::post().to(reset)));
    cfg.service(resource("/demo/keys/{key}/expire").route(web::post().to(expire)));
    cfg.service(resource("/demo/purge").route(web::post().to(purge)));
    cfg.service(
        resource("/demo/lesson8/endpoint").route(web::post().to(super::lesson8::lesson8_endpoint)),
    );
    cfg.service(
        resource("/demo/lesson8/faults").route(web::put().to(super::lesson8::lesson8_faults)),
    );
    cfg.service(
        resource("/demo/lesson8/receiver").route(get().to(super::lesson8::lesson8_receiver)),
    );
    cfg.service(
        resource("/demo/receivers/{id}").route(web::post().to(super::receiver::receive_webhook)),
    );
}

/// The naive algorithm, kept only to be watched failing: SELECT the key; if
/// absent, pause, then INSERT key and charge. Nothing stops two requests
/// from both passing the SELECT.
async fn check_then_insert(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let request = requests::read_json(&req, payload, &state, KeyUse::Read).await?;
    let new_charge = charges::parse_new_charge(&request.body)?;
    let fingerprint = request.fingerprint(&req);
    let JsonRequest {
        account_id,
        key,
        hooks,
        ..
    } = request;
    let key = key.ok_or_else(|| {
        ApiError::invalid("Demo-Mode: check-then-insert needs an Idempotency-Key")
    })?;
    let looked = {
        let key = key.clone();
        state
            .db(&req, move |store| {
                Ok(queries::find_unguarded(store, account_id, key.as_str())?)
            })
            .await?
    };
    if let Some(found) = looked {
        if found.fingerprint != fingerprint.as_str() {
            return Err(ApiError::IdempotencyKeyReused);
        }
        let headers = [("content-type".to_owned(), "application/json".to_owned())].into();
        let saved = SavedResponse {
            status: 201,
            headers,
            body: found.response_body,
        };
        return Ok(requests::respond(&saved, true));
    }
    // The other request looks before either inserts, however far apart they
    // reached the server (see `race`), then the pause: both holding no
    // connection, which a class of learners would otherwise wait for.
    {
        let key = key.clone();
        let sandbox = sandbox.clone();
        web::block(move || {
            sandbox
                .lookups
                .found_nothing(account_id, key.as_str(), super::race::PARTNER_WAIT)
        })
        .await?;
    }
    tokio::time::sleep(CHECK_THEN_INSERT_PAUSE).await;
    // One transaction for the charge and the unguarded key row, after the
    // look-up rather than around it, and no unique constraint: a concurrent
    // request that also found nothing inserts too.
    let saved = state
        .db(&req, move |store| -> Result<SavedResponse, ApiError> {
            let create = charges::CreateCharge::new(account_id, &new_charge);
            let row = Unguarded {
                key: key.as_str().to_owned(),
                fingerprint: fingerprint.as_str().to_owned(),
                response_body: create.response.body.clone(),
            };
            store.transaction(|tx| {
                tx.insert_charge(&create.charge)?;
                tx.write_event(&charges::charge_event(&create.charge))?;
                queries::insert_unguarded(tx, account_id, &row, create.charge.id)?;
                hooks.before_commit()?;
                Ok::<_, ApiError>(())
            })?;
            Ok(create.response)
        })
        .await?;
    Ok(requests::respond(&saved, false))
}

/// The demo account's rows, read at once (`queries::read_at_once`): a key
/// row and the charge its response names are both there or both not.
struct Tables {
    backend: &'static str,
    now: String,
    charges: Vec<Charge>,
    refunds: Vec<queries::RefundView>,
    keys: Vec<queries::KeyView>,
    unguarded: Vec<queries::UnguardedView>,
}

fn read_tables(store: &mut dyn Store, account_id: i64) -> Result<Tables, ApiError> {
    let backend = store.backend().as_str();
    queries::read_at_once(store, |tx| {
        Ok(Tables {
            backend,
            // The database's clock, which every time below is on.
            now: queries::now_text(tx)?,
            charges: {
                let mut newest = tx.list_charges(account_id, &Page::first(LIMIT))?;
                newest.truncate(LIMIT as usize);
                newest
            },
            refunds: queries::refund_views(tx, account_id, LIMIT)?,
            keys: queries::key_views(tx, account_id, LIMIT)?,
            unguarded: queries::unguarded_views(tx, account_id, LIMIT)?,
        })
    })
}

/// What the page shows as "the database": the demo account's rows, the
/// locks its requests wait on now (`locks`, read after the rows), and the
/// card network's ledger (`network`, asked after both).
fn snapshot(
    tables: Tables,
    settings: &Settings,
    locks: Value,
    network: Option<Value>,
    yours: &Yours,
) -> Value {
    let Tables {
        backend,
        now,
        charges,
        refunds,
        keys,
        unguarded,
    } = tables;
    json!({
        "backend": backend,
        "now": now,
        "idempotency_mode": settings.idempotency_mode.as_str(),
        "idempotency_ttl_seconds": settings.idempotency_ttl.as_secs(),
        "idempotency_lease_seconds": settings.idempotency_lease.as_secs(),
        // Whose rows these are: the caller's sandbox (its key is the
        // caller's already; it is not repeated).
        "sandbox": {
            "account_id": yours.account_id,
            "expires_at": expiry_view(yours.expires_ms),
        },
        "charges": charges.iter().map(|c| json!({
            "id": c.id,
            "amount": c.amount,
            "amount_refunded": c.amount_refunded,
            "authorization_id": c.authorization_id,
            "currency": c.currency,
            "description": c.description,
            "created_at": time_text(c.created_at),
            "payment_method": c.payment_method,
            "status": c.status(),
            "failure_code": c.failure_code,
        })).collect::<Vec<_>>(),
        "refunds": refunds.into_iter().map(|(id, charge_id, amount, currency, created_at)| json!({
            "id": id,
            "charge_id": charge_id,
            "amount": amount,
            "currency": currency,
            "created_at": created_at,
        })).collect::<Vec<_>>(),
        "idempotency_keys": keys.into_iter().map(key_view).collect::<Vec<_>>(),
        "locks": locks,
        "network": network,
        "unguarded_keys": unguarded.into_iter().map(|u| json!({
            "key": u.key,
            "charge_id": u.charge_id,
            "created_at": u.created_at,
        })).collect::<Vec<_>>(),
    })
}

/// One key row as the page shows it.
fn key_view(k: queries::KeyView) -> Value {
    let location = k
        .response_headers
        .as_ref()
        .and_then(|h| h.get("location"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    // The charge the key's response is about: the one it created, the
    // one its refund is of, or the failed one its decline names.
    let charge_id =
        k.response_body
            .as_ref()
            .and_then(|b| match b.get("object").and_then(Value::as_str) {
                Some("charge") => b.get("id").cloned(),
                Some("refund") => b.get("charge_id").cloned(),
                _ => b.get("decline_code").and(b.get("charge")).cloned(),
            });
    json!({
        "key": k.key,
        // Enough of the digest to tell two requests apart on screen.
        "fingerprint": k.fingerprint.chars().take("sha256:".len() + 12).collect::<String>(),
        "response_status": k.response_status,
        "location": location,
        "charge_id": charge_id,
        "created_at": k.created_at,
        "expires_at": k.expires_at,
        "expired": k.expired,
        // Key-first: an in-progress row is protected until then.
        "locked_until": k.locked_until,
        "lease_live": k.status == "in_progress" && k.lease_live,
        "status": k.status,
    })
}

/// The card network's own ledger, as the network shows it, but only the
/// sandbox's authorizations (those the demo's ledger recorded for it, and
/// those its charges hold: `authorized`): the network has one merchant for
/// every account.
fn network_view(
    n: &NetworkClient,
    ledger: &Mutex<Ledger>,
    account: i64,
    authorized: &[uuid::Uuid],
) -> Value {
    match n.list(LIMIT as u32) {
        Ok(list) => {
            let ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            let ours = |id: Option<uuid::Uuid>| {
                id.is_some_and(|id| {
                    ledger.ids.contains_key(&(account, id)) || authorized.contains(&id)
                })
            };
            let authorizations: Vec<&Value> = list["data"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|a| ours(a["id"].as_str().and_then(|id| id.parse().ok())))
                .collect();
            json!({"authorizations": authorizations})
        }
        // Its address is not the page's business (nor anyone's on it).
        Err(_) => json!({"error": "the card network did not answer"}),
    }
}

/// The caller's sandbox, and when it expires.
struct Yours {
    account_id: i64,
    expires_ms: Option<i64>,
}

/// The caller's sandbox, from its key (`Authorization: Bearer`): 401 for
/// an unknown or expired one; 400 for an account that is no sandbox.
/// Using it keeps it alive.
async fn yours(req: &HttpRequest, app: &AppState, sandbox: &Sandbox) -> Result<Yours, ApiError> {
    // Without a key: the shared `sk_test_demo` account of the loopback
    // demo (as before sandboxes), which never expires; none when hosted.
    if crate::http::accounts::bearer_token(req)?.is_none() {
        let account_id = sandbox.shared_account.ok_or(ApiError::Unauthorized)?;
        return Ok(Yours {
            account_id,
            expires_ms: None,
        });
    }
    let account = app.accounts.authenticate(req, &app.pool).await?;
    let left = crate::http::limits::deadline_left(req, app.settings.request_timeout);
    match sandbox
        .sandboxes
        .admit(&sandbox.pool, account, left)
        .await?
    {
        Admission::Sandbox(account_id, expires_ms) => Ok(Yours {
            account_id,
            expires_ms,
        }),
        Admission::Gone => Err(ApiError::Unauthorized),
        Admission::NotASandbox => Err(ApiError::invalid(
            "The /demo/* routes act only on a demo sandbox (POST /demo/sandboxes makes one); this key is another account's.",
        )),
    }
}

/// Runs `work` on one of the demo's own connections (as every /demo/*
/// route: one that waits holds none of the server's) with the caller's
/// sandbox's id, and answers what it returned.
pub(super) async fn on_your_connection<T: Send + 'static>(
    req: &HttpRequest,
    app: &AppState,
    sandbox: &Sandbox,
    work: impl FnOnce(&mut dyn Store, i64) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let account_id = yours(req, app, sandbox).await?.account_id;
    let left = crate::http::limits::deadline_left(req, app.settings.request_timeout);
    sandbox
        .pool
        .named(session_label(account_id))
        .run(left, move |store| work(store, account_id))
        .await
}

/// Runs `work` on a pooled connection with the caller's sandbox's id, then
/// answers the state after it.
async fn on_your_sandbox<T: Send + 'static>(
    req: &HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
    work: impl FnOnce(&mut dyn Store, i64, &Settings) -> Result<T, ApiError> + Send + 'static,
) -> Result<(T, Value), ApiError> {
    let yours = yours(req, &app, &sandbox).await?;
    let settings = app.settings.clone();
    let network = sandbox.network.clone();
    let ledger = sandbox.ledger.clone();
    let slots = sandbox.delayed.clone();
    let account_id = yours.account_id;
    let label = session_label(account_id);
    // On the demo's own connections: a /demo/* route that waits (on a key
    // a held transaction locks) holds none of the server's.
    let left = crate::http::limits::deadline_left(req, settings.request_timeout);
    sandbox
        .pool
        .named(label.clone())
        .run_checkouts(left, move |checkouts| {
            let (done, tables, locks) = checkouts.with(|store| -> Result<_, ApiError> {
                let done = work(store, account_id, &settings)?;
                let tables = read_tables(store, account_id)?;
                // Outside the tables' snapshot: PostgreSQL keeps its
                // activity views as of a transaction's first look.
                Ok((done, tables, queries::lock_waits(store, &label)?))
            })?;
            // The network is another service: asked with no connection held.
            let authorized: Vec<uuid::Uuid> = tables
                .charges
                .iter()
                .filter_map(|c| c.authorization_id)
                .collect();
            let network = network
                .as_deref()
                .map(|n| network_view(n, &ledger, account_id, &authorized));
            Ok((done, snapshot(tables, &settings, locks, network, &yours)))
        })
        .await
        .map(|(done, mut snapshot)| {
            // The held-transaction slots as of now: whether this sandbox
            // holds one (lesson 4 sends its retry only once it does), and
            // how many of the demo's are held.
            let (yours, held) = slots.view(account_id);
            snapshot["sandbox"]["holds_transaction"] = json!(yours);
            snapshot["held_transactions"] = json!({"held": held, "max": slots.max});
            (done, snapshot)
        })
}

/// Demo mode only: what the teaching page must know of this server instead
/// of repeating it: the backend, the idempotency settings and their
/// defaults, the demo's limits, and every problem type.
#[utoipa::path(get, path = "/demo/config", tag = "demo", responses((status = 200, description = "This server's settings, as the teaching page uses them")))]
pub async fn config(app: web::Data<AppState>, sandbox: web::Data<Sandbox>) -> HttpResponse {
    let s = &app.settings;
    let backend = app.pool.backend();
    HttpResponse::Ok().json(json!({
        "backend": backend.as_str(),
        "backend_name": backend.name(),
        "idempotency_mode": s.idempotency_mode.as_str(),
        "idempotency_ttl_seconds": s.idempotency_ttl.as_secs(),
        "default_idempotency_ttl_seconds": crate::config::DEFAULT_IDEMPOTENCY_TTL.as_secs(),
        "idempotency_lease_seconds": s.idempotency_lease.as_secs(),
        "default_idempotency_lease_seconds": crate::config::DEFAULT_IDEMPOTENCY_LEASE.as_secs(),
        "in_flight_retry_after_seconds": crate::http::problem::IN_FLIGHT_RETRY_AFTER_SECS,
        "purge_batch": s.purge_batch,
        "purge_interval_seconds": s.purge_interval.as_secs(),
        "default_purge_interval_seconds": crate::config::DEFAULT_PURGE_INTERVAL.as_secs(),
        "max_delay_commit_ms": sandbox.max_delay.as_millis() as u64,
        "request_timeout_ms": s.request_timeout.as_millis() as u64,
        "lock_timeout_ms": s.db_lock_timeout.as_millis() as u64,
        "max_delayed_transactions": sandbox.delayed.max,
        "delayed_transaction_gap_ms": sandbox.delayed.gap.as_millis() as u64,
        "check_then_insert_pause_ms": CHECK_THEN_INSERT_PAUSE.as_millis() as u64,
        // The shared account of the loopback curl examples; none when the
        // demo is hosted for others (every visitor makes a sandbox).
        "account": sandbox.shared_account.map(|_| json!({"name": DEMO_ACCOUNT_NAME, "api_key": DEMO_API_KEY})),
        "public": sandbox.public,
        "sandboxes": {
            "max": sandbox.sandboxes.max,
            "idle_expiry_seconds": sandbox.sandboxes.idle_expiry.as_secs(),
            "in_flight_each": sandbox.sandboxes.in_flight_each,
        },
        "min_lease_ms": MIN_LEASE.as_millis() as u64,
        // The card network: the server's, which every charge asks
        // ("server"), the demo's own, which only a request with
        // `Demo-Network: on` asks ("sandbox"), or none (null).
        "network": match (&sandbox.network, sandbox.network_by_default) {
            (None, _) => None,
            (Some(_), true) => Some("server"),
            (Some(_), false) => Some("sandbox"),
        },
        "recovery_interval_ms": s.recovery_interval.as_millis() as u64,
        // Lesson 8: when the sender retries (the demo's short schedule).
        "webhook_retry_schedule_seconds": s.webhooks.retry_schedule.iter().map(|d| d.as_secs_f64()).collect::<Vec<_>>(),
        "max_lease_ms": MAX_LEASE.as_millis() as u64,
        "problem_types": crate::http::problem::TYPES.iter().map(|t| json!({
            "type": t.uri(),
            "status": t.status,
            "title": t.title,
        })).collect::<Vec<_>>(),
    }))
}

/// Demo mode only: the caller's sandbox's charges and key rows.
#[utoipa::path(get, path = "/demo/state", tag = "demo", responses((status = 200, description = "The caller's sandbox's rows")))]
pub async fn state(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let ((), snapshot) = on_your_sandbox(&req, app, sandbox, |_, _, _| Ok(())).await?;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Whether the caller's sandbox holds a held-transaction slot now, how long
/// it still holds it, and how many of the demo's are held: read from
/// memory, no database (lesson 4 asks it while A is being sent, and sends
/// B only once A holds its transaction, with time left to wait on it).
#[utoipa::path(get, path = "/demo/slot", tag = "demo", responses((status = 200, description = "`{\"holds_transaction\": bool, \"left_ms\": ms or null, \"held\": n, \"max\": m}`: the caller's sandbox's held transaction, and the demo's")))]
pub async fn slot(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let yours = yours(&req, &app, &sandbox).await?;
    let (left, held) = sandbox.delayed.left(yours.account_id);
    Ok(HttpResponse::Ok().json(json!({
        "holds_transaction": left.is_some(),
        "left_ms": left.map(|l| l.as_millis() as u64),
        "held": held,
        "max": sandbox.delayed.max,
    })))
}

/// Deletes the caller's sandbox's rows (keys first: they point at charges).
#[utoipa::path(post, path = "/demo/reset", tag = "demo", responses((status = 200, description = "The emptied state")))]
pub async fn reset(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let ((), snapshot) = on_your_sandbox(&req, app, sandbox, |store, account_id, _| {
        Ok(store.transaction(|tx| queries::delete_account_rows(tx, account_id))?)
    })
    .await?;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Moves one of the caller's sandbox's keys' `expires_at` into the past, as if
/// its retention had run out. Answers what it did (the key, the rows it
/// changed), not the tables: `GET /demo/state` shows those.
#[utoipa::path(post, path = "/demo/keys/{key}/expire", tag = "demo",
    params(("key" = String, Path, description = "The Idempotency-Key, URL-encoded")),
    responses(
        (status = 200, description = "`{\"key\": k, \"expired\": 1}`: the key and the rows it expired"),
        (status = 400, description = "`invalid-idempotency-key`: not a value an Idempotency-Key can have", body = crate::http::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such key", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
pub async fn expire(
    req: HttpRequest,
    path: web::Path<String>,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    // Only what a key can be reaches the database (no NUL, no 256-byte key).
    let key = IdempotencyKey::from_value(&path.into_inner())?;
    let value = key.as_str().to_owned();
    let expired =
        on_your_connection(
            &req,
            &app,
            &sandbox,
            move |store, account_id| match queries::expire_key(store, account_id, key.as_str())? {
                0 => Err(ApiError::NotFound),
                n => Ok(n),
            },
        )
        .await?;
    Ok(HttpResponse::Ok().json(json!({"key": value, "expired": expired})))
}

/// Deletes the caller's sandbox's expired keys (the background purge does the
/// same for every account). Answers how many rows it removed, not the
/// tables: `GET /demo/state` shows those.
#[utoipa::path(post, path = "/demo/purge", tag = "demo", responses((status = 200, description = "`{\"purged\": n}`: the expired key rows it deleted")))]
pub async fn purge(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let purged = on_your_connection(&req, &app, &sandbox, |store, account_id| {
        Ok(queries::purge_account_keys(store, account_id)?)
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({"purged": purged})))
}

/// Demo mode only: a sandbox of the caller's own: an account with a key of
/// its own (shown this once), its own rows and idempotency keys, on which
/// every `/demo/*` route and `Demo-*` header acts when called with that
/// key. Deleted with all its rows once unused for
/// DEMO_SANDBOX_IDLE_EXPIRY.
#[utoipa::path(post, path = "/demo/sandboxes", tag = "demo", responses(
    (status = 201, description = "`{\"object\": \"sandbox\", \"account_id\", \"api_key\", \"expires_at\", \"idle_expiry_seconds\"}`"),
    (status = 403, description = "`demo-room-unknown`: the `Demo-Room` code is not one of DEMO_ROOM_CODES (nothing was made; `cross-site-request` is a 403 too)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    (status = 429, description = "`rate-limited`: this client address made DEMO_SANDBOXES_PER_MINUTE already, or this room (`Demo-Room`) DEMO_ROOM_SANDBOXES_PER_MINUTE (with `Retry-After`)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    (status = 503, description = "`demo-room-full`: DEMO_MAX_SANDBOXES are in use (with `Retry-After`: until the least recently used one expires)", body = crate::http::problem::Problem, content_type = "application/problem+json"),
))]
pub async fn create_sandbox(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> HttpResponse {
    let left = crate::http::limits::deadline_left(&req, app.settings.request_timeout);
    match sandbox.sandboxes.create(&req, &sandbox.pool, left).await {
        Ok(made) => HttpResponse::Created().json(made),
        Err(refused) => refused,
    }
}
