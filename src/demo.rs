//! Demo mode: the fault injection and the database views that the teaching
//! page uses, all of it confined to the demo account (a sandbox with a public
//! key, `sk_test_demo`). Mounted only when demo mode is on; with it off none
//! of it is routed, the demo account does not authenticate, and the `Demo-*`
//! headers mean nothing.
//!
//! - `Demo-Fault` (on `POST /charges`, comma-separated): `lose-response`
//!   (commit, then answer 504 as a timed-out gateway would),
//!   `delay-commit=<ms>` (hold the transaction open before COMMIT),
//!   `fail-before-commit` (fail inside the transaction: everything rolls back),
//!   `crash-after-key` (key-first: SIGKILL this process between its two
//!   transactions, leaving an in-progress key behind; only with
//!   `DEMO_ALLOW_CRASH=true`).
//!   The transaction faults act through the `TxHooks` seam; `lose-response`
//!   wraps the handler from outside.
//! - `Demo-Mode: atomic | key-first`: run this request in that design.
//! - `Demo-Mode: check-then-insert`: the naive algorithm (look the key up,
//!   then insert it) against a table without a unique constraint, to show
//!   the race the constraint prevents.
//! - `GET /demo/state`, `POST /demo/reset`, `POST /demo/keys/{key}/expire`,
//!   `POST /demo/purge`: the demo account's rows only.
//!
//! The sandbox's walls: a `Demo-*` header from any other account is a 400
//! (after authentication, so 401 comes first); the demo account's requests
//! on `/charges` hold at most half the connection pool, and at most
//! `DEMO_MAX_DELAYED` of them hold a transaction open, so that on PostgreSQL
//! no other account waits for the demo.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, guard, web};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use crate::accounts;
use crate::api::{AppState, resource};
use crate::charges::{self, ChargeRequest};
use crate::config::Settings;
use crate::db::{Conn, DbPool, time_text};
use crate::hooks::{HookFailure, RequestHooks, TxHooks};
use crate::idempotency::{self, IdempotencyKey, Mode, SavedResponse};
use crate::problem::{self, ApiError};

/// The demo account's documented, public key.
pub const DEMO_API_KEY: &str = "sk_test_demo";
pub const DEMO_ACCOUNT_NAME: &str = "Demo account";
pub const FAULT_HEADER: &str = "demo-fault";
pub const MODE_HEADER: &str = "demo-mode";
/// Every header whose name starts with this is a demo header.
pub const HEADER_PREFIX: &str = "demo-";
pub const CHECK_THEN_INSERT: &str = "check-then-insert";
/// The longest `delay-commit` accepted: below the pool's and clients' timeouts.
pub const MAX_DELAY: Duration = Duration::from_secs(15);
/// The pause between the check and the insert that makes the race reliable.
pub const CHECK_THEN_INSERT_PAUSE: Duration = Duration::from_millis(300);

/// The demo account and the walls around it, shared by every worker.
pub struct Sandbox {
    pub account_id: i64,
    allow_crash: bool,
    delayed: Arc<DelaySlots>,
    /// The demo account's requests on `/charges` in flight: half the pool.
    in_flight: Semaphore,
    in_flight_limit: usize,
    wait: Duration,
}

impl Sandbox {
    /// Seeds the demo account (if it is not there yet) and sizes the walls
    /// from the pool.
    pub fn open(pool: &DbPool, settings: &Settings) -> Result<Sandbox, String> {
        let account_id = seed(&mut pool.get().map_err(|e| e.to_string())?.conn())
            .map_err(|e| format!("cannot seed the demo account: {e}"))?;
        let half_pool = (settings.pool_size / 2).max(1);
        let max_delayed = settings.demo_max_delayed.min(half_pool);
        if max_delayed < settings.demo_max_delayed {
            tracing::warn!(
                requested = settings.demo_max_delayed,
                allowed = max_delayed,
                "DEMO_MAX_DELAYED is capped at half of POOL_SIZE"
            );
        }
        Ok(Sandbox {
            account_id,
            allow_crash: settings.demo_allow_crash,
            delayed: Arc::new(DelaySlots {
                open: AtomicU32::new(0),
                max: max_delayed,
            }),
            in_flight: Semaphore::new(half_pool as usize),
            in_flight_limit: half_pool as usize,
            wait: settings.pool_timeout,
        })
    }
}

/// The demo account, created on first start in demo mode.
fn seed(conn: &mut Conn<'_>) -> Result<i64, accounts::AccountError> {
    let digest = accounts::hash_api_key(DEMO_API_KEY);
    if let Some(id) = accounts::find_by_digest(conn, &digest, true)? {
        return Ok(id);
    }
    match accounts::insert_account(conn, DEMO_ACCOUNT_NAME, DEMO_API_KEY, true) {
        // Another instance seeded it in between (or a live account already
        // has the demo's name: then the lookup finds nothing and says so).
        Err(taken @ accounts::AccountError::NameTaken(_)) => {
            accounts::find_by_digest(conn, &digest, true)?.ok_or(taken)
        }
        inserted => inserted,
    }
}

/// How many transactions `delay-commit` holds open right now, and the most
/// it may. Taken inside the transaction, by the request that really runs
/// it: a duplicate waiting on the key's index entry holds none.
struct DelaySlots {
    open: AtomicU32,
    max: u32,
}

struct DelaySlot<'a>(&'a DelaySlots);

impl DelaySlots {
    fn take(&self) -> Option<DelaySlot<'_>> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| DelaySlot(self))
    }
}

impl Drop for DelaySlot<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Faults {
    pub lose_response: bool,
    pub delay_commit: Option<Duration>,
    pub fail_before_commit: bool,
    pub crash_after_key: bool,
}

impl Faults {
    pub fn parse(header: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for item in header.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                None if item == "lose-response" => faults.lose_response = true,
                None if item == "fail-before-commit" => faults.fail_before_commit = true,
                None if item == "crash-after-key" => faults.crash_after_key = true,
                Some(("delay-commit", ms)) => {
                    let ms: u64 = ms
                        .trim()
                        .parse()
                        .map_err(|_| format!("delay-commit takes milliseconds, not {ms:?}"))?;
                    let delay = Duration::from_millis(ms);
                    if delay > MAX_DELAY {
                        return Err(format!(
                            "delay-commit is at most {} ms",
                            MAX_DELAY.as_millis()
                        ));
                    }
                    faults.delay_commit = (!delay.is_zero()).then_some(delay);
                }
                _ => {
                    return Err(format!(
                        "unknown Demo-Fault {item:?} (known: lose-response, delay-commit=<ms>, fail-before-commit, crash-after-key)"
                    ));
                }
            }
        }
        Ok(faults)
    }
}

/// The transaction faults of one request, with the process's delay slots.
struct DemoHooks {
    faults: Faults,
    delayed: Arc<DelaySlots>,
}

impl TxHooks for DemoHooks {
    fn after_operation(&self) -> Result<(), HookFailure> {
        if let Some(delay) = self.faults.delay_commit {
            let Some(_slot) = self.delayed.take() else {
                return Err(HookFailure::Overloaded(format!(
                    "Demo-Fault: delay-commit: {} transactions held open by the demo are already in flight, the most this server allows at once (so that the demo cannot take the database from other accounts). Nothing was done; retry after Retry-After.",
                    self.delayed.max
                )));
            };
            std::thread::sleep(delay);
        }
        if self.faults.fail_before_commit {
            return Err(HookFailure::Injected(
                "Demo-Fault: fail-before-commit".to_owned(),
            ));
        }
        Ok(())
    }

    fn after_key_committed(&self) {
        if self.faults.crash_after_key {
            tracing::warn!("Demo-Fault: crash-after-key: killing this process with SIGKILL");
            // SIGKILL: no unwinding, no destructors, no rollback: a real crash.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

fn has_demo_headers(req: &ServiceRequest) -> bool {
    req.headers()
        .keys()
        .any(|name| name.as_str().starts_with(HEADER_PREFIX))
}

fn refuse(req: ServiceRequest, error: ApiError) -> ServiceResponse<BoxBody> {
    req.error_response(error).map_into_boxed_body()
}

/// Middleware on `/charges`. Requests of other accounts pass untouched
/// unless they carry a `Demo-*` header (then 400). The demo account's
/// requests take a place among its in-flight requests, have `Demo-Fault`
/// and `Demo-Mode` read and handed to the handler (transaction faults
/// through the hooks seam), and lose their response afterwards if asked.
pub async fn faults(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let demo_headers = has_demo_headers(&req);
    let token = match accounts::bearer_token(req.request()) {
        Ok(token) => token,
        Err(e) => return Ok(refuse(req, e)),
    };
    if !demo_headers && token != Some(DEMO_API_KEY) {
        // Not the demo's business: the handler authenticates as always.
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let (sandbox, state) = (
        req.app_data::<web::Data<Sandbox>>()
            .expect("demo::faults is mounted with its Sandbox")
            .clone(),
        req.app_data::<web::Data<AppState>>()
            .expect("the app state")
            .clone(),
    );
    // Authentication first: an unknown caller hears 401, not about demos.
    let account = match state
        .accounts
        .authenticate(req.request(), &state.pool)
        .await
    {
        Ok(account) => account,
        Err(e) => return Ok(refuse(req, e)),
    };
    if account != sandbox.account_id {
        let refused = problem::response(
            StatusCode::BAD_REQUEST,
            "demo-account-only",
            "Demo-Fault and Demo-Mode act only on the demo account, the sandbox of the teaching page; this request is another account's. Send it without Demo-* headers.",
            Vec::new(),
        );
        return Ok(req.into_response(refused));
    }
    let Ok(_place) = tokio::time::timeout(sandbox.wait, sandbox.in_flight.acquire()).await else {
        let detail = format!(
            "The demo account already has {} requests in flight on this server, the most it may (half the connection pool, so that the demo cannot take the database from other accounts). Retry after Retry-After.",
            sandbox.in_flight_limit
        );
        return Ok(refuse(req, ApiError::Overloaded { detail }));
    };
    let header = req
        .headers()
        .get(FAULT_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned());
    let faults = match header.as_deref().map(Faults::parse).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(detail) => return Ok(refuse(req, ApiError::invalid(detail))),
    };
    if faults.crash_after_key && !sandbox.allow_crash {
        return Ok(refuse(
            req,
            ApiError::invalid(
                "Demo-Fault: crash-after-key kills the server process, so this server refuses it; it is for crash tests, on a server started with DEMO_ALLOW_CRASH=true.",
            ),
        ));
    }
    match req.headers().get(MODE_HEADER).map(|v| v.as_bytes()) {
        None | Some(b"check-then-insert") => {}
        Some(b"atomic") => {
            req.extensions_mut().insert(Mode::Atomic);
        }
        Some(b"key-first") => {
            req.extensions_mut().insert(Mode::KeyFirst);
        }
        Some(other) => {
            let detail = format!(
                "unknown Demo-Mode {:?} (known: atomic, key-first, {CHECK_THEN_INSERT})",
                String::from_utf8_lossy(other)
            );
            return Ok(refuse(req, ApiError::invalid(detail)));
        }
    }
    let lose_response = faults.lose_response;
    req.extensions_mut()
        .insert(RequestHooks(Arc::new(DemoHooks {
            faults,
            delayed: sandbox.delayed.clone(),
        })));
    let response = next.call(req).await?;
    if !lose_response {
        return Ok(response.map_into_boxed_body());
    }
    // The work is done and committed; only the answer goes missing.
    let (req, _) = response.into_parts();
    let lost = problem::response(
        StatusCode::GATEWAY_TIMEOUT,
        "simulated-lost-response",
        "Demo-Fault: lose-response. The server processed this request, but its response was thrown away, as a gateway that timed out would. Retry to find out what happened.",
        Vec::new(),
    );
    Ok(ServiceResponse::new(req, lost))
}

/// The routes demo mode adds. `POST /charges` with `Demo-Mode:
/// check-then-insert` is matched here before the real handler.
pub fn check_then_insert_route() -> actix_web::Route {
    web::post()
        .guard(guard::Header(MODE_HEADER, CHECK_THEN_INSERT))
        .to(check_then_insert)
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(resource("/demo/config", "GET").route(web::get().to(config)));
    cfg.service(resource("/demo/state", "GET").route(web::get().to(state)));
    cfg.service(resource("/demo/reset", "POST").route(web::post().to(reset)));
    cfg.service(resource("/demo/keys/{key}/expire", "POST").route(web::post().to(expire)));
    cfg.service(resource("/demo/purge", "POST").route(web::post().to(purge)));
}

/// The naive algorithm, kept only to be watched failing: SELECT the key; if
/// absent, pause, then INSERT key and charge. Nothing stops two requests
/// from both passing the SELECT.
async fn check_then_insert(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let request = charges::parse_request(&req, payload, &state).await?;
    let fingerprint = request.fingerprint();
    let ChargeRequest {
        account_id,
        key,
        new_charge,
        hooks,
        ..
    } = request;
    let key = key.ok_or_else(|| {
        ApiError::invalid("Demo-Mode: check-then-insert needs an Idempotency-Key")
    })?;
    let pool = state.pool.clone();
    let (saved, replayed) = web::block(move || -> Result<(SavedResponse, bool), ApiError> {
        let mut pooled = crate::db::checkout(&pool)?;
        let mut conn = pooled.conn();
        if let Some((stored, body)) = views::find_unguarded(&mut conn, account_id, key.as_str())? {
            if stored != fingerprint.as_str() {
                return Err(ApiError::IdempotencyKeyReused);
            }
            let headers = [("content-type".to_owned(), "application/json".to_owned())].into();
            return Ok((
                SavedResponse {
                    status: 201,
                    headers,
                    body,
                },
                true,
            ));
        }
        std::thread::sleep(CHECK_THEN_INSERT_PAUSE);
        // No BEGIN IMMEDIATE-style lock, no unique constraint: a plain
        // transaction for the charge and the unguarded key row.
        let created = conn.transaction(|tx| {
            let created = charges::create_charge(tx, account_id, &new_charge)?;
            let charge_id = created.resource_id.expect("a charge has an id");
            views::insert_unguarded(
                tx,
                account_id,
                key.as_str(),
                fingerprint.as_str(),
                charge_id,
                &created.response.body,
            )?;
            hooks.0.after_operation()?;
            Ok::<_, crate::idempotency::Error>(created)
        })?;
        Ok((created.response, false))
    })
    .await??;
    Ok(charges::respond(&saved, replayed))
}

/// What the page shows as "the database": the demo account's rows.
fn snapshot(conn: &mut Conn<'_>, account_id: i64, settings: &Settings) -> Result<Value, ApiError> {
    let charges = crate::db::list_charges(conn, account_id, views::LIMIT)?;
    let keys = views::keys(conn, account_id)?;
    let unguarded = views::unguarded(conn, account_id)?;
    Ok(json!({
        "backend": conn.backend().as_str(),
        "idempotency_mode": settings.idempotency_mode.as_str(),
        "idempotency_ttl_seconds": settings.idempotency_ttl.as_secs(),
        "idempotency_lease_seconds": settings.idempotency_lease.as_secs(),
        "account": {"name": DEMO_ACCOUNT_NAME, "api_key": DEMO_API_KEY},
        "charges": charges.iter().map(|c| json!({
            "id": c.id,
            "amount": c.amount,
            "currency": c.currency,
            "description": c.description,
            "created_at": time_text(c.created_at),
        })).collect::<Vec<_>>(),
        "idempotency_keys": keys.into_iter().map(|k| json!({
            "key": k.key,
            // Enough of the digest to tell two requests apart on screen.
            "fingerprint": k.fingerprint.chars().take("sha256:".len() + 12).collect::<String>(),
            "response_status": k.response_status,
            "charge_id": k.charge_id,
            "created_at": k.created_at,
            "expires_at": k.expires_at,
            "expired": k.expired,
            // Key-first: an in-progress row is protected until then.
            "locked_until": k.locked_until,
            "lease_live": k.status == idempotency::store::IN_PROGRESS && k.leased,
            "status": k.status,
        })).collect::<Vec<_>>(),
        "unguarded_keys": unguarded.into_iter().map(|u| json!({
            "key": u.key,
            "charge_id": u.charge_id,
            "created_at": u.created_at,
        })).collect::<Vec<_>>(),
    }))
}

/// Runs `work` on a pooled connection with the demo account's id, then
/// answers the state after it.
async fn on_demo_account<T: Send + 'static>(
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
    work: impl FnOnce(&mut Conn<'_>, i64, &Settings) -> Result<T, ApiError> + Send + 'static,
) -> Result<(T, Value), ApiError> {
    web::block(move || {
        let mut pooled = crate::db::checkout(&app.pool)?;
        let mut conn = pooled.conn();
        let done = work(&mut conn, sandbox.account_id, &app.settings)?;
        Ok((
            done,
            snapshot(&mut conn, sandbox.account_id, &app.settings)?,
        ))
    })
    .await?
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
        "in_flight_retry_after_seconds": crate::problem::IN_FLIGHT_RETRY_AFTER_SECS,
        "purge_batch": s.purge_batch,
        "max_delay_commit_ms": MAX_DELAY.as_millis() as u64,
        "max_delayed_transactions": sandbox.delayed.max,
        "check_then_insert_pause_ms": CHECK_THEN_INSERT_PAUSE.as_millis() as u64,
        "account": {"name": DEMO_ACCOUNT_NAME, "api_key": DEMO_API_KEY},
        "problem_types": crate::problem::TYPES.iter().map(|(slug, status, title)| json!({
            "type": format!("/problems/{slug}"),
            "status": status,
            "title": title,
        })).collect::<Vec<_>>(),
    }))
}

/// Demo mode only: the demo account's charges and key rows.
#[utoipa::path(get, path = "/demo/state", tag = "demo", responses((status = 200, description = "The demo account's rows")))]
pub async fn state(
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let ((), snapshot) = on_demo_account(app, sandbox, |_, _, _| Ok(())).await?;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Deletes the demo account's rows (keys first: they point at charges).
#[utoipa::path(post, path = "/demo/reset", tag = "demo", responses((status = 200, description = "The emptied state")))]
pub async fn reset(
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let ((), snapshot) = on_demo_account(app, sandbox, |conn, account_id, _| {
        Ok(conn.transaction(|tx| {
            for table in ["idempotency_keys", "demo_unguarded_keys", "charges"] {
                views::delete_account_rows(tx, table, account_id)?;
            }
            Ok::<_, diesel::result::Error>(())
        })?)
    })
    .await?;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Moves one of the demo account's keys' `expires_at` into the past, as if
/// its retention had run out.
#[utoipa::path(post, path = "/demo/keys/{key}/expire", tag = "demo",
    params(("key" = String, Path, description = "The Idempotency-Key, URL-encoded")),
    responses(
        (status = 200, description = "The state after"),
        (status = 400, description = "`invalid-idempotency-key`: not a value an Idempotency-Key can have", body = crate::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such key", body = crate::problem::Problem, content_type = "application/problem+json"),
    ))]
pub async fn expire(
    path: web::Path<String>,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    // Only what a key can be reaches the database (no NUL, no 256-byte key).
    let key = IdempotencyKey::from_value(&path.into_inner())?;
    let ((), snapshot) =
        on_demo_account(
            app,
            sandbox,
            move |conn, account_id, _| match views::expire_key(conn, account_id, key.as_str())? {
                0 => Err(ApiError::NotFound),
                _ => Ok(()),
            },
        )
        .await?;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Deletes the demo account's expired keys (the background purge does the
/// same for every account), with how many rows it removed.
#[utoipa::path(post, path = "/demo/purge", tag = "demo", responses((status = 200, description = "`{\"purged\": n, \"state\": ...}`")))]
pub async fn purge(
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let (purged, snapshot) = on_demo_account(app, sandbox, |conn, account_id, _| {
        Ok(views::purge_expired(conn, account_id)?)
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({"purged": purged, "state": snapshot})))
}

/// The demo's own queries, on both backends.
mod views {
    use chrono::{DateTime, Utc};
    use diesel::dsl::now;
    use diesel::prelude::*;
    use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
    use serde_json::Value;
    use uuid::Uuid;

    use crate::db::{Conn, time_text};
    use crate::schema::{demo_unguarded_keys as unguarded, idempotency_keys as keys};

    pub const LIMIT: i64 = 200;

    /// One key row as the page shows it (times as RFC 3339 text).
    #[derive(QueryableByName)]
    pub struct KeyView {
        #[diesel(sql_type = Text)]
        pub key: String,
        #[diesel(sql_type = Text)]
        pub status: String,
        #[diesel(sql_type = Text)]
        pub fingerprint: String,
        #[diesel(sql_type = Nullable<Integer>)]
        pub response_status: Option<i32>,
        #[diesel(sql_type = Nullable<Text>)]
        pub charge_id: Option<String>,
        #[diesel(sql_type = Text)]
        pub created_at: String,
        #[diesel(sql_type = Text)]
        pub expires_at: String,
        #[diesel(sql_type = Bool)]
        pub expired: bool,
        #[diesel(sql_type = Text)]
        pub locked_until: String,
        #[diesel(sql_type = Bool)]
        pub leased: bool,
    }

    #[derive(QueryableByName)]
    pub struct UnguardedView {
        #[diesel(sql_type = Text)]
        pub key: String,
        #[diesel(sql_type = Text)]
        pub charge_id: String,
        #[diesel(sql_type = Text)]
        pub created_at: String,
    }

    type PgKeyRow = (
        String,
        String,
        String,
        Option<i16>,
        Option<Uuid>,
        DateTime<Utc>,
        DateTime<Utc>,
        bool,
        DateTime<Utc>,
        bool,
    );

    pub fn keys(conn: &mut Conn<'_>, account_id: i64) -> QueryResult<Vec<KeyView>> {
        match conn {
            Conn::Pg(c) => {
                let rows: Vec<PgKeyRow> = keys::table
                    .filter(keys::account_id.eq(account_id))
                    .order((keys::created_at.desc(), keys::id.desc()))
                    .limit(LIMIT)
                    .select((
                        keys::key,
                        keys::status,
                        keys::fingerprint,
                        keys::response_status,
                        keys::charge_id,
                        keys::created_at,
                        keys::expires_at,
                        keys::expires_at.le(now),
                        keys::locked_until,
                        keys::locked_until.gt(now),
                    ))
                    .load(*c)?;
                Ok(rows
                    .into_iter()
                    .map(
                        |(
                            key,
                            status,
                            fingerprint,
                            response_status,
                            charge_id,
                            created_at,
                            expires_at,
                            expired,
                            locked_until,
                            leased,
                        )| KeyView {
                            key,
                            status,
                            fingerprint,
                            response_status: response_status.map(i32::from),
                            charge_id: charge_id.map(|id| id.to_string()),
                            created_at: time_text(created_at),
                            expires_at: time_text(expires_at),
                            expired,
                            locked_until: time_text(locked_until),
                            leased,
                        },
                    )
                    .collect())
            }
            Conn::Sqlite(c) => {
                let now_text = time_text(Utc::now());
                diesel::sql_query(
                    "SELECT key, status, fingerprint, response_status, charge_id, created_at, expires_at,                             expires_at <= ? AS expired, locked_until, locked_until > ? AS leased                      FROM idempotency_keys WHERE account_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
                )
                .bind::<Text, _>(&now_text)
                .bind::<Text, _>(&now_text)
                .bind::<BigInt, _>(account_id)
                .bind::<BigInt, _>(LIMIT)
                .load(*c)
            }
        }
    }

    pub fn unguarded(conn: &mut Conn<'_>, account_id: i64) -> QueryResult<Vec<UnguardedView>> {
        match conn {
            Conn::Pg(c) => {
                let rows: Vec<(String, Uuid, DateTime<Utc>)> = unguarded::table
                    .filter(unguarded::account_id.eq(account_id))
                    .order((unguarded::created_at.desc(), unguarded::id.desc()))
                    .limit(LIMIT)
                    .select((unguarded::key, unguarded::charge_id, unguarded::created_at))
                    .load(*c)?;
                Ok(rows
                    .into_iter()
                    .map(|(key, charge_id, created_at)| UnguardedView {
                        key,
                        charge_id: charge_id.to_string(),
                        created_at: time_text(created_at),
                    })
                    .collect())
            }
            Conn::Sqlite(c) => diesel::sql_query(
                "SELECT key, charge_id, created_at FROM demo_unguarded_keys WHERE account_id = ?                  ORDER BY created_at DESC, id DESC LIMIT ?",
            )
            .bind::<BigInt, _>(account_id)
            .bind::<BigInt, _>(LIMIT)
            .load(*c),
        }
    }

    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = Text)]
        fingerprint: String,
        #[diesel(sql_type = Text)]
        response_body: String,
    }

    /// The naive algorithm's look-up: the first row for the key, if any.
    pub fn find_unguarded(
        conn: &mut Conn<'_>,
        account_id: i64,
        key: &str,
    ) -> QueryResult<Option<(String, Value)>> {
        match conn {
            Conn::Pg(c) => unguarded::table
                .filter(unguarded::account_id.eq(account_id))
                .filter(unguarded::key.eq(key))
                .select((unguarded::fingerprint, unguarded::response_body))
                .first(*c)
                .optional(),
            Conn::Sqlite(c) => diesel::sql_query(
                "SELECT fingerprint, response_body FROM demo_unguarded_keys WHERE account_id = ? AND key = ? LIMIT 1",
            )
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(key)
            .get_result::<Found>(*c)
            .optional()?
            .map(|f| {
                let body = serde_json::from_str(&f.response_body)
                    .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))?;
                Ok((f.fingerprint, body))
            })
            .transpose(),
        }
    }

    pub fn insert_unguarded(
        conn: &mut Conn<'_>,
        account_id: i64,
        key: &str,
        fingerprint: &str,
        charge_id: Uuid,
        body: &Value,
    ) -> QueryResult<usize> {
        match conn {
            Conn::Pg(c) => diesel::insert_into(unguarded::table)
                .values((
                    unguarded::account_id.eq(account_id),
                    unguarded::key.eq(key),
                    unguarded::fingerprint.eq(fingerprint),
                    unguarded::charge_id.eq(charge_id),
                    unguarded::response_body.eq(body),
                ))
                .execute(*c),
            Conn::Sqlite(c) => diesel::sql_query(
                "INSERT INTO demo_unguarded_keys (account_id, key, fingerprint, charge_id, response_body, created_at)                  VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(key)
            .bind::<Text, _>(fingerprint)
            .bind::<Text, _>(charge_id.to_string())
            .bind::<Text, _>(body.to_string())
            .bind::<Text, _>(time_text(Utc::now()))
            .execute(*c),
        }
    }

    /// `table` is one of our own table names, never input.
    pub fn delete_account_rows(
        conn: &mut Conn<'_>,
        table: &'static str,
        account_id: i64,
    ) -> QueryResult<usize> {
        match conn {
            Conn::Pg(c) => diesel::sql_query(format!("DELETE FROM {table} WHERE account_id = $1"))
                .bind::<BigInt, _>(account_id)
                .execute(*c),
            Conn::Sqlite(c) => {
                diesel::sql_query(format!("DELETE FROM {table} WHERE account_id = ?"))
                    .bind::<BigInt, _>(account_id)
                    .execute(*c)
            }
        }
    }

    /// Deletes the account's expired key rows.
    pub fn purge_expired(conn: &mut Conn<'_>, account_id: i64) -> QueryResult<usize> {
        match conn {
            Conn::Pg(c) => diesel::delete(
                keys::table
                    .filter(keys::account_id.eq(account_id))
                    .filter(keys::expires_at.le(now)),
            )
            .execute(*c),
            Conn::Sqlite(c) => diesel::sql_query(
                "DELETE FROM idempotency_keys WHERE account_id = ? AND expires_at <= ?",
            )
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(time_text(Utc::now()))
            .execute(*c),
        }
    }

    /// Sets the key's `expires_at` one second into the past.
    pub fn expire_key(conn: &mut Conn<'_>, account_id: i64, key: &str) -> QueryResult<usize> {
        match conn {
            Conn::Pg(c) => diesel::update(
                keys::table
                    .filter(keys::account_id.eq(account_id))
                    .filter(keys::key.eq(key)),
            )
            .set(
                keys::expires_at.eq(diesel::dsl::sql::<diesel::sql_types::Timestamptz>(
                    "now() - interval '1 second'",
                )),
            )
            .execute(*c),
            Conn::Sqlite(c) => diesel::sql_query(
                "UPDATE idempotency_keys SET expires_at = ? WHERE account_id = ? AND key = ?",
            )
            .bind::<Text, _>(time_text(Utc::now() - chrono::Duration::seconds(1)))
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(key)
            .execute(*c),
        }
    }
}
