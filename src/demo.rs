//! Demo mode: the fault injection and the database views that the teaching
//! page uses. Mounted only when demo mode is on; with `--no-demo` none of it
//! is routed and the `Demo-*` headers mean nothing.
//!
//! - `Demo-Fault` (on `POST /charges`, comma-separated): `lose-response`
//!   (commit, then answer 504 as a timed-out gateway would),
//!   `delay-commit=<ms>` (hold the transaction open before COMMIT),
//!   `fail-before-commit` (fail inside the transaction: everything rolls back),
//!   `crash-after-key` (key-first: SIGKILL this process between its two
//!   transactions, leaving an in-progress key behind).
//!   The transaction faults act through the `TxHooks` seam; `lose-response`
//!   wraps the handler from outside.
//! - `Demo-Mode: atomic | key-first`: run this request in that design.
//! - `Demo-Mode: check-then-insert`: the naive algorithm (look the key up,
//!   then insert it) against a table without a unique constraint, to show
//!   the race the constraint prevents.
//! - `GET /demo/state`, `POST /demo/reset`, `POST /demo/keys/{key}/expire`,
//!   `POST /demo/purge`.

use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, HttpRequest, HttpResponse, guard, web};
use serde_json::{Value, json};

use crate::accounts::{self, DEMO_ACCOUNT_NAME, DEMO_API_KEY};
use crate::api::{AppState, resource};
use crate::charges::{self, ChargeRequest};
use crate::db::{Conn, time_text};
use crate::hooks::{HookFailure, RequestHooks, TxHooks};
use crate::idempotency::{self, Mode, SavedResponse};
use crate::problem::{self, ApiError};

pub const FAULT_HEADER: &str = "demo-fault";
pub const MODE_HEADER: &str = "demo-mode";
pub const CHECK_THEN_INSERT: &str = "check-then-insert";
/// The longest `delay-commit` accepted: below the pool's and clients' timeouts.
pub const MAX_DELAY: Duration = Duration::from_secs(15);
/// The pause between the check and the insert that makes the race reliable.
pub const CHECK_THEN_INSERT_PAUSE: Duration = Duration::from_millis(300);

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
                    faults.delay_commit = Some(delay);
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

impl TxHooks for Faults {
    fn after_operation(&self) -> Result<(), HookFailure> {
        if let Some(delay) = self.delay_commit {
            std::thread::sleep(delay);
        }
        if self.fail_before_commit {
            return Err(HookFailure("Demo-Fault: fail-before-commit".to_owned()));
        }
        Ok(())
    }

    fn after_key_committed(&self) {
        if self.crash_after_key {
            tracing::warn!("Demo-Fault: crash-after-key: killing this process with SIGKILL");
            // SIGKILL: no unwinding, no destructors, no rollback: a real crash.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

/// Middleware on `/charges`: reads `Demo-Fault`, hands the transaction faults
/// to the handler through the hooks seam, and loses the response afterwards.
pub async fn faults(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let header = req
        .headers()
        .get(FAULT_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned());
    let faults = match header.as_deref().map(Faults::parse).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(detail) => {
            return Ok(req
                .error_response(ApiError::invalid(detail))
                .map_into_boxed_body());
        }
    };
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
            return Ok(req
                .error_response(ApiError::invalid(detail))
                .map_into_boxed_body());
        }
    }
    let lose_response = faults.lose_response;
    req.extensions_mut().insert(RequestHooks(Arc::new(faults)));
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

fn demo_account(conn: &mut Conn<'_>) -> Result<i64, ApiError> {
    accounts::find_by_api_key(conn, DEMO_API_KEY)?.ok_or(ApiError::NotFound)
}

/// What the page shows as "the database": the demo account's rows.
fn snapshot(conn: &mut Conn<'_>, settings: &crate::config::Settings) -> Result<Value, ApiError> {
    let account_id = demo_account(conn)?;
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

/// Demo mode only: the demo account's charges and key rows.
#[utoipa::path(get, path = "/demo/state", tag = "demo", responses((status = 200, description = "The demo account's rows")))]
pub async fn state(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let app = state.into_inner();
    let snapshot = web::block(move || -> Result<Value, ApiError> {
        let mut conn = crate::db::checkout(&app.pool)?;
        snapshot(&mut conn.conn(), &app.settings)
    })
    .await??;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Deletes the demo account's rows (keys first: they point at charges).
#[utoipa::path(post, path = "/demo/reset", tag = "demo", responses((status = 200, description = "The emptied state")))]
pub async fn reset(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let app = state.into_inner();
    let snapshot = web::block(move || -> Result<Value, ApiError> {
        let mut pooled = crate::db::checkout(&app.pool)?;
        let mut conn = pooled.conn();
        let account_id = demo_account(&mut conn)?;
        conn.transaction(|tx| {
            for table in ["idempotency_keys", "demo_unguarded_keys", "charges"] {
                views::delete_account_rows(tx, table, account_id)?;
            }
            Ok::<_, diesel::result::Error>(())
        })?;
        snapshot(&mut conn, &app.settings)
    })
    .await??;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// Moves one key's `expires_at` into the past, as if its retention had run out.
#[utoipa::path(post, path = "/demo/keys/{key}/expire", tag = "demo",
    params(("key" = String, Path, description = "The Idempotency-Key, URL-encoded")),
    responses(
        (status = 200, description = "The state after"),
        (status = 404, description = "No such key", body = crate::problem::Problem, content_type = "application/problem+json"),
    ))]
pub async fn expire(
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let app = state.into_inner();
    let key = path.into_inner();
    let snapshot = web::block(move || -> Result<Value, ApiError> {
        let mut pooled = crate::db::checkout(&app.pool)?;
        let mut conn = pooled.conn();
        let account_id = demo_account(&mut conn)?;
        if views::expire_key(&mut conn, account_id, &key)? == 0 {
            return Err(ApiError::NotFound);
        }
        snapshot(&mut conn, &app.settings)
    })
    .await??;
    Ok(HttpResponse::Ok().json(snapshot))
}

/// One pass of the purge (the same one the background purger runs), with
/// how many rows it removed.
#[utoipa::path(post, path = "/demo/purge", tag = "demo", responses((status = 200, description = "`{\"purged\": n, \"state\": ...}`")))]
pub async fn purge(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let app = state.into_inner();
    let (purged, snapshot) = web::block(move || -> Result<(usize, Value), ApiError> {
        let mut pooled = crate::db::checkout(&app.pool)?;
        let mut conn = pooled.conn();
        let purged = idempotency::purge_expired(&mut conn, app.settings.purge_batch)?;
        Ok((purged, snapshot(&mut conn, &app.settings)?))
    })
    .await??;
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
