//! The visitors' sandboxes: one account each, made by `POST
//! /demo/sandboxes` with a key of its own (from the OS's CSPRNG, stored
//! hashed like every key), deleted with all its rows once unused for
//! DEMO_SANDBOX_IDLE_EXPIRY. Every `/demo/*` route and `Demo-*` header acts
//! on the caller's own sandbox, found from its key here.
//!
//! The walls between visitors: a sandbox has at most
//! [`Sandboxes::in_flight_each`] requests in flight (a small share of the
//! demo's half of the pool) and one held transaction; DEMO_MAX_SANDBOXES
//! live at once (then 503, with the wait until the least recently used one
//! expires); DEMO_SANDBOXES_PER_MINUTE made per client address (then 429),
//! or, for a page that names a room code (`Demo-Room`, see [`super::rooms`]),
//! DEMO_ROOM_SANDBOXES_PER_MINUTE per room instead.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::http::header::{HeaderValue, RETRY_AFTER};
use actix_web::{HttpRequest, HttpResponse};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::queries::sandboxes as rows;
use super::rooms::{Room, Rooms};
use crate::config::Settings;
use crate::http::accounts::{self, API_KEY_PREFIX};
use crate::http::limits::{client_ip, retry_after_secs};
use crate::http::problem::{self, ApiError, DEMO_ROOM_FULL, DEMO_ROOM_UNKNOWN, RATE_LIMITED};
use crate::store::{DbPool, Store};

/// What every sandbox key starts with: a key that reaches the demo's walls
/// (`sk_live_` keys are real accounts'), and says so when pasted elsewhere.
pub const SANDBOX_KEY_PREFIX: &str = "sk_test_";
/// Sandboxes deleted per pass of the purge at most.
const PURGE_BATCH: i64 = 100;

/// What a request's key turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// A live sandbox: the account, and when it expires unless used again
    /// (milliseconds since the epoch; `None`: never, the shared one).
    Sandbox(i64, Option<i64>),
    /// A live account that is no sandbox: a real one.
    NotASandbox,
    /// An account that was a sandbox and expired (or is gone).
    Gone,
}

/// One sandbox as this process knows it between look-ups.
struct Known {
    places: Arc<Semaphore>,
    /// When the database last said it is live (`None`: not yet).
    checked: Option<Instant>,
    expires_ms: Option<i64>,
}

pub struct Sandboxes {
    pub max: u32,
    pub idle_expiry: Duration,
    /// A look-up that found the sandbox live is trusted this long before
    /// the database is asked (and its last use moved) again.
    recheck: Duration,
    pub in_flight_each: usize,
    per_client: Option<DefaultKeyedRateLimiter<IpAddr>>,
    rooms: Rooms,
    trusted_proxies: Vec<IpAddr>,
    known: Mutex<HashMap<i64, Known>>,
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Sandboxes {
    pub fn new(settings: &Settings, half_pool: u32) -> Sandboxes {
        let idle_expiry = settings
            .demo_sandbox_idle_expiry
            .max(Duration::from_secs(1));
        Sandboxes {
            max: settings.demo_max_sandboxes,
            idle_expiry,
            recheck: (idle_expiry / 8).min(Duration::from_secs(30)),
            // Lesson 4's two requests at once, and no more than a few.
            in_flight_each: (half_pool as usize / 4).clamp(2, 4).min(half_pool as usize),
            per_client: NonZeroU32::new(settings.demo_sandboxes_per_minute)
                .map(|n| RateLimiter::keyed(Quota::per_minute(n))),
            rooms: Rooms::new(
                &settings.demo_room_codes,
                settings.demo_room_sandboxes_per_minute,
            ),
            trusted_proxies: settings.trusted_proxies.clone(),
            known: Mutex::default(),
        }
    }

    fn idle_ms(&self) -> i64 {
        self.idle_expiry.as_millis() as i64
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Known>> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `POST /demo/sandboxes`: a new sandbox, or the refusal (429 for this
    /// client address, 503 when the room is full).
    pub async fn create(
        &self,
        req: &HttpRequest,
        pool: &DbPool,
        deadline: Duration,
    ) -> Result<Value, HttpResponse> {
        self.allowance(req).map_err(|refused| *refused)?;
        let (max, idle_ms) = (self.max as i64, self.idle_ms());
        let made = pool
            .run(deadline, move |store| make(store, max, idle_ms))
            .await
            .map_err(|e: ApiError| HttpResponse::from_error(e))?;
        let (account_id, api_key, now) = match made {
            Made::Full { retry_after } => {
                return Err(with_retry_after(
                    problem::response(
                        &DEMO_ROOM_FULL,
                        format!(
                            "All {max} sandboxes of this demo are in use; nothing was made. The least recently used one expires after {} s unused: retry after Retry-After.",
                            self.idle_expiry.as_secs()
                        ),
                        Vec::new(),
                    ),
                    retry_after,
                ));
            }
            Made::Sandbox {
                account_id,
                api_key,
                now,
            } => (account_id, api_key, now),
        };
        let expires_ms = now + idle_ms;
        self.remember(account_id, Some(expires_ms));
        Ok(json!({
            "object": "sandbox",
            "account_id": account_id,
            "api_key": api_key,
            "expires_at": rfc3339(expires_ms),
            "idle_expiry_seconds": self.idle_expiry.as_secs(),
        }))
    }

    /// Counts a new sandbox against its room (a known `Demo-Room`) or else
    /// its client address; the refusal when that has made its allowance, or
    /// when the room code is unknown.
    fn allowance(&self, req: &HttpRequest) -> Result<(), Box<HttpResponse>> {
        let refused = |detail: &str, wait: Duration| {
            Box::new(with_retry_after(
                problem::response(&RATE_LIMITED, detail, Vec::new()),
                retry_after_secs(wait),
            ))
        };
        match self.rooms.of(req) {
            Room::Unknown => Err(Box::new(problem::response(
                &DEMO_ROOM_UNKNOWN,
                "The Demo-Room code is not one this demo hands out (DEMO_ROOM_CODES); nothing was made. Check the code, or open the page without ?room= to make a sandbox counted against your address.",
                Vec::new(),
            ))),
            Room::Known(room) => self.rooms.take(room).map_err(|wait| {
                refused(
                    "This room has made as many sandboxes as it may for now (DEMO_ROOM_SANDBOXES_PER_MINUTE); nothing was made. Retry after Retry-After.",
                    wait,
                )
            }),
            Room::None => match (&self.per_client, client_ip(req, &self.trusted_proxies)) {
                (Some(limit), Some(ip)) => limit.check_key(&ip).map_err(|not_until| {
                    refused(
                        "This client address has made as many sandboxes as it may for now; nothing was made. Keep using the one you have, or retry after Retry-After.",
                        not_until.wait_time_from(DefaultClock::default().now()),
                    )
                }),
                _ => Ok(()),
            },
        }
    }

    fn remember(&self, account_id: i64, expires_ms: Option<i64>) {
        let mut known = self.known();
        let entry = known.entry(account_id).or_insert_with(|| Known {
            places: Arc::new(Semaphore::new(self.in_flight_each)),
            checked: None,
            expires_ms,
        });
        entry.checked = Some(Instant::now());
        entry.expires_ms = expires_ms;
    }

    /// Whether `account_id` (authenticated) is a live sandbox; using it
    /// makes it live for another DEMO_SANDBOX_IDLE_EXPIRY.
    pub async fn admit(
        &self,
        pool: &DbPool,
        account_id: i64,
        deadline: Duration,
    ) -> Result<Admission, ApiError> {
        if let Some(k) = self.known().get(&account_id)
            && k.checked.is_some_and(|at| at.elapsed() < self.recheck)
        {
            return Ok(Admission::Sandbox(account_id, k.expires_ms));
        }
        let idle_ms = self.idle_ms();
        // SQLite's write lock is the whole database's: a visitor's held
        // transaction would hold every look-up that moves a last use. There
        // the look-up reads, and the last use is moved beside the request.
        let sqlite = pool.backend() == crate::store::Backend::Sqlite;
        let found = pool
            .run(deadline, move |store| -> Result<_, ApiError> {
                let now = now_ms();
                let row = match sqlite {
                    true => rows::find_live(store, account_id, now - idle_ms)?,
                    false => rows::touch(store, account_id, now, now - idle_ms)?,
                };
                match row {
                    Some(row) => Ok(Ok(row)),
                    None => Ok(Err(store.account_is_live(account_id)?)),
                }
            })
            .await?;
        if sqlite && found.is_ok() {
            let pool = pool.clone();
            actix_web::rt::spawn(async move {
                let touched = pool.run(deadline, move |store| {
                    let now = now_ms();
                    rows::touch(store, account_id, now, now - idle_ms).map_err(ApiError::from)
                });
                if let Err(e) = touched.await {
                    tracing::debug!(error = %e, "demo sandbox: its last use was not moved");
                }
            });
        }
        Ok(match found {
            Ok(row) => {
                let expires = (!row.permanent).then_some(row.last_used_ms + idle_ms);
                self.remember(account_id, expires);
                Admission::Sandbox(account_id, expires)
            }
            Err(live) => {
                self.forget(account_id);
                if live && !self.was_sandbox(pool, account_id).await {
                    Admission::NotASandbox
                } else {
                    Admission::Gone
                }
            }
        })
    }

    /// A live account found no sandbox row: a real account, unless it is a
    /// demo account (an expired sandbox the purge has not reached yet).
    async fn was_sandbox(&self, pool: &DbPool, account_id: i64) -> bool {
        pool.run(Duration::from_secs(5), move |store| {
            rows::is_demo_account(store, account_id).map_err(ApiError::from)
        })
        .await
        .unwrap_or(true)
    }

    fn forget(&self, account_id: i64) {
        self.known().remove(&account_id);
    }

    /// The sandbox's own places among the demo's requests in flight.
    pub fn places(&self, account_id: i64) -> Arc<Semaphore> {
        let mut known = self.known();
        let entry = known.entry(account_id).or_insert_with(|| Known {
            places: Arc::new(Semaphore::new(self.in_flight_each)),
            // Not a look-up: the next request asks the database.
            checked: None,
            expires_ms: None,
        });
        entry.places.clone()
    }

    /// Deletes the sandboxes unused for DEMO_SANDBOX_IDLE_EXPIRY, with all
    /// their rows: the accounts it deleted.
    pub fn purge_expired(&self, store: &mut dyn Store) -> Result<Vec<i64>, ApiError> {
        let cutoff = now_ms() - self.idle_ms();
        let mut deleted = Vec::new();
        for account_id in rows::expired(store, cutoff, PURGE_BATCH)? {
            if rows::delete_expired(store, account_id, cutoff)? {
                deleted.push(account_id);
            }
        }
        let mut known = self.known();
        for id in &deleted {
            known.remove(id);
        }
        Ok(deleted)
    }

    /// How often the purge runs: often enough that a sandbox outlives its
    /// expiry by a small part of it at most.
    pub fn purge_every(&self) -> Duration {
        (self.idle_expiry / 4).clamp(Duration::from_millis(250), Duration::from_secs(60))
    }
}

enum Made {
    Sandbox {
        account_id: i64,
        api_key: String,
        now: i64,
    },
    Full {
        retry_after: u64,
    },
}

/// Counts the live sandboxes and makes one if there is room, in one
/// transaction (on PostgreSQL under a lock, so that two at once cannot both
/// take the last place; SQLite's write lock does that there).
fn make(store: &mut dyn Store, max: i64, idle_ms: i64) -> Result<Made, ApiError> {
    store.transaction(|tx| {
        rows::lock_room(tx)?;
        let now = now_ms();
        let cutoff = now - idle_ms;
        if rows::count_live(tx, cutoff)? >= max {
            let oldest = rows::oldest_use(tx, cutoff)?.unwrap_or(now);
            let wait = Duration::from_millis((oldest + idle_ms - now).max(0) as u64);
            return Ok(Made::Full {
                retry_after: retry_after_secs(wait),
            });
        }
        let api_key = sandbox_key();
        // A name unique among live accounts, and nothing of the key's.
        let name = format!("demo sandbox {}", uuid::Uuid::new_v4().simple());
        let account_id = accounts::insert_account(tx, &name, &api_key, true)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        rows::register(tx, account_id, now, false)?;
        Ok(Made::Sandbox {
            account_id,
            api_key,
            now,
        })
    })
}

/// `charges sandbox`: a sandbox made by the operator, on the database
/// (its tables made if no demo server made them yet): its account and key.
pub fn create_for_operator(store: &mut dyn Store) -> Result<(i64, String), String> {
    super::queries::create_tables(store).map_err(|e| e.to_string())?;
    // No room cap: the operator's own, counted among the live ones after.
    match make(store, i64::MAX, 0) {
        Ok(Made::Sandbox {
            account_id,
            api_key,
            ..
        }) => Ok((account_id, api_key)),
        Ok(Made::Full { .. }) => Err("no room".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

/// A key like the app's others (32 bytes of the OS's CSPRNG), marked as a
/// sandbox's.
fn sandbox_key() -> String {
    let key = accounts::generate_api_key();
    format!("{SANDBOX_KEY_PREFIX}{}", &key[API_KEY_PREFIX.len()..])
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// When a sandbox expires, as the page shows it.
pub fn expiry_view(expires_ms: Option<i64>) -> Value {
    expires_ms.map_or(Value::Null, |ms| Value::String(rfc3339(ms)))
}

fn with_retry_after(mut response: HttpResponse, secs: u64) -> HttpResponse {
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}

/// Deletes expired sandboxes with all their rows, every
/// [`Sandboxes::purge_every`], on the demo's own connections; and forgets
/// their entries of the demo's view of the card network's ledger.
pub async fn purge_periodically(sandbox: actix_web::web::Data<super::Sandbox>) {
    // The first pass one period after start, not at once: a server that
    // starts opens none of the demo's connections before the demo is used.
    let every = sandbox.sandboxes.purge_every();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let demo = sandbox.clone();
        let deleted = sandbox
            .pool
            .run(Duration::from_secs(30), move |store| {
                demo.sandboxes.purge_expired(store)
            })
            .await;
        match deleted {
            Ok(deleted) if deleted.is_empty() => {}
            Ok(deleted) => {
                let mut ledger = sandbox.ledger.lock().unwrap_or_else(|e| e.into_inner());
                for account in &deleted {
                    ledger.forget(*account);
                }
                tracing::info!(
                    deleted = deleted.len(),
                    "deleted expired demo sandboxes with all their rows"
                );
            }
            // The pool logs an outage once, as it starts and as it ends.
            Err(e @ (ApiError::Unavailable(_) | ApiError::DeadlineExceeded { .. })) => {
                tracing::debug!(error = %e, "demo sandbox purge: no database; will retry")
            }
            Err(e) => tracing::warn!(error = %e, "demo sandbox purge failed; will retry"),
        }
    }
}
