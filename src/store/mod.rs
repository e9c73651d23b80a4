//! The database layer: what the application stores, as traits, with one
//! implementation per backend, each readable top to bottom in its own
//! dialect: [`postgres`] (Diesel's DSL over `schema.rs`, the database's
//! clock) and [`sqlite`] (plain SQL over `migrations/sqlite`, the app's
//! clock, times as fixed-width text). Diesel cannot share our schema's UUID,
//! JSONB and TIMESTAMPTZ types across the two, so each writes its own queries;
//! the names, states and rules they share are written once, here.
//!
//! Callers hold a `&mut dyn Store`; which backend it is is decided only at
//! the pool's edge ([`pool`]). Diesel is synchronous: handlers call all of
//! this inside `web::block`.
//!
//! Layer: below everything but `schema`, `domain` and `metrics`; it knows
//! nothing of HTTP, settings or the idempotency protocol.

pub mod pool;
mod postgres;
mod sqlite;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::result::Error as DieselError;
use serde_json::Value;
use uuid::Uuid;

pub use diesel::result::Error as QueryError;
pub use pool::{Backend, Connection, DbPool, PoolSettings, PoolTimeout, PooledStore, SetupError};
pub use postgres::is_connection_lost;

pub type QueryResult<T> = Result<T, DieselError>;

/// Everything the application stores, on one connection of either backend.
pub trait Store: ChargeStore + KeyStore + AccountStore + SandboxStore {
    fn backend(&self) -> Backend;

    /// Runs `work` in one transaction: committed if it returns `Ok`, rolled
    /// back otherwise. PostgreSQL: READ COMMITTED, where a second insert of
    /// the same key waits on the unique index (REPEATABLE READ would make it
    /// fail instead). SQLite: `BEGIN IMMEDIATE`, which takes the database's
    /// write lock up front, so a concurrent writer waits (busy timeout) for
    /// the whole transaction rather than failing halfway. Object-safe; call
    /// [`transaction`](trait.Store.html#method.transaction) instead.
    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Store) -> QueryResult<()>,
    ) -> QueryResult<()>;

    /// Runs the pending migrations; returns their names. On PostgreSQL under
    /// an advisory lock, so instances starting at once take turns.
    fn migrate(&mut self) -> Result<Vec<String>, String>;

    /// One round trip: the database answers.
    fn ping(&mut self) -> QueryResult<()>;
}

impl dyn Store + '_ {
    /// [`Store::in_transaction`] with a result and an error of the caller's
    /// own: any `Err` rolls back and is returned as it was.
    pub fn transaction<T, E: From<DieselError>>(
        &mut self,
        work: impl FnOnce(&mut dyn Store) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut work = Some(work);
        let mut result = None;
        let outcome = self.in_transaction(&mut |tx| {
            let work = work.take().expect("a transaction runs its work once");
            let done = work(tx);
            let failed = done.is_err();
            result = Some(done);
            // Any error rolls back; the caller's own comes back below.
            if failed {
                Err(DieselError::RollbackTransaction)
            } else {
                Ok(())
            }
        });
        match (outcome, result) {
            (Ok(()), Some(done)) => done,
            (Err(_), Some(Err(e))) => Err(e),
            // The work succeeded and the COMMIT (or BEGIN) failed.
            (Err(e), _) => Err(e.into()),
            (Ok(()), None) => unreachable!("a committed transaction ran its work"),
        }
    }
}

/// The `charges` table.
pub trait ChargeStore {
    /// Inserts a charge whose id and time were chosen by the caller: one
    /// statement (a charge without an Idempotency-Key).
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()>;
    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>>;
    /// Newest first.
    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>>;
}

/// The `idempotency_keys` table: one row per (account, key), its primary key.
pub trait KeyStore {
    /// The live (unexpired) row for a key, decoded, read without a lock.
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>>;

    /// The atomic design's first request, whole: unless a live row for the
    /// key exists that may not be taken over, write the key row already
    /// completed with `response`, and the charge it points at, together.
    /// On PostgreSQL one statement (a data-modifying CTE that also reads
    /// the live row, so a replay is one round trip and takes no lock); on
    /// SQLite three (a read, the key row, the charge) in one `BEGIN IMMEDIATE`
    /// transaction.
    ///
    /// A concurrent request with the same key that has not committed yet
    /// makes this wait on the key's unique index entry until it commits
    /// (then: [`FirstWrite::Lost`], read the row again) or rolls back (then
    /// this runs as the first). On SQLite the wait happens at
    /// `BEGIN IMMEDIATE`, for the whole database.
    ///
    /// The takeover rule (each backend writes it once): an existing row is
    /// taken over, as if it were absent, when it has expired (the purge has
    /// not removed it yet), or when it is a stuck in-progress row of the
    /// same request whose lease has run out (its worker died between the
    /// key-first design's two transactions). Of several requests racing for
    /// one row, the row lock lets exactly one take it.
    fn charge_once(
        &mut self,
        claim: &NewClaim<'_>,
        charge: &Charge,
        response: &SavedResponse,
    ) -> QueryResult<FirstWrite>;

    /// Key-first, its first transaction: registers the key as in progress
    /// under a fresh lease, or returns `None` when a live row for it exists
    /// that may not be taken over (the same rule). One statement.
    fn claim_key(&mut self, claim: &NewClaim<'_>) -> QueryResult<Option<Claim>>;

    /// Key-first, its second: the charge, and the key row completed with
    /// `response`, if this request still holds the lease. `false` when the
    /// lease was lost (another request took the row over): then nothing is
    /// written. One statement on PostgreSQL.
    fn complete_with_charge(
        &mut self,
        claim: &Claim,
        charge: &Charge,
        response: &SavedResponse,
    ) -> QueryResult<bool>;

    /// Deletes a claimed, still in-progress row (key-first: the operation
    /// failed, so the retry must run as the first).
    fn release_key(&mut self, claim: &Claim) -> QueryResult<usize>;

    /// Deletes up to `batch` expired rows in one short statement.
    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize>;
}

/// What came of [`KeyStore::charge_once`].
#[derive(Debug, Clone, PartialEq)]
pub enum FirstWrite {
    /// The key row and the charge are written.
    Written,
    /// A live row for the key was there already: nothing was written.
    Found(KeyRecord),
    /// The key was taken by a concurrent request while this one waited for
    /// it: nothing was written; read the row to learn its answer.
    Lost,
}

/// The `accounts` table. Keys are stored only as SHA-256 digests.
pub trait AccountStore {
    /// A new account; a taken live name is a unique violation.
    fn insert_account(&mut self, name: &str, key_digest: &str, demo: bool) -> QueryResult<i64>;
    /// Revokes the live, non-demo account of this name; its id.
    fn revoke_account(&mut self, name: &str) -> QueryResult<Option<i64>>;
    fn list_accounts(&mut self) -> QueryResult<Vec<AccountRecord>>;
    /// The live account whose key has this digest; a demo account only
    /// when `include_demo`.
    fn find_account(&mut self, key_digest: &str, include_demo: bool) -> QueryResult<Option<i64>>;
}

/// What the demo sandbox reads and changes: one account's rows, and the
/// unguarded table of the "check, then insert" algorithm the page shows
/// failing (no unique constraint on purpose; the real protocol never
/// touches it).
pub trait SandboxStore {
    /// The account's key rows as the page shows them, newest first.
    fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>>;
    fn unguarded_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<UnguardedView>>;
    /// The naive look-up: the first unguarded row for the key, if any.
    fn find_unguarded(&mut self, account_id: i64, key: &str) -> QueryResult<Option<Unguarded>>;
    fn insert_unguarded(
        &mut self,
        account_id: i64,
        row: &Unguarded,
        charge_id: Uuid,
    ) -> QueryResult<()>;
    /// Deletes the account's key rows, unguarded rows and charges (in that
    /// order: keys point at charges).
    fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()>;
    /// Deletes the account's expired key rows.
    fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize>;
    /// Moves the key's `expires_at` one second into the past.
    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize>;
}

#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub id: Uuid,
    pub account_id: i64,
    pub amount: i64,
    pub currency: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A response as stored in a key row and replayed byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedResponse {
    pub status: u16,
    /// Lowercase header names; `BTreeMap` so the order is the same every time.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

/// The `status` column's two values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyStatus {
    InProgress,
    Completed,
}

impl KeyStatus {
    pub const fn as_str(self) -> &'static str {
        match self {
            KeyStatus::InProgress => "in_progress",
            KeyStatus::Completed => "completed",
        }
    }
}

/// A live key row, decoded once.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRecord {
    /// What identifies the request that registered the key.
    pub fingerprint: String,
    pub state: KeyState,
}

#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// Registered, its operation not finished (key-first: between or inside
    /// its two transactions). `lease_live`: its worker's lease
    /// (`locked_until`) has not run out.
    InProgress { lease_live: bool },
    /// Finished: the response to replay.
    Completed(SavedResponse),
}

/// A key row's columns as either backend reads them, before decoding.
pub(crate) struct RawKeyRow {
    pub fingerprint: String,
    pub status: String,
    pub lease_live: bool,
    pub response_status: Option<i32>,
    pub response_headers: Option<Value>,
    pub response_body: Option<Value>,
}

impl RawKeyRow {
    /// The one place a row's columns become a [`KeyState`].
    pub(crate) fn decode(self) -> QueryResult<KeyRecord> {
        let corrupt = |what: String| DieselError::DeserializationError(what.into());
        let state = match self.status.as_str() {
            s if s == KeyStatus::InProgress.as_str() => KeyState::InProgress {
                lease_live: self.lease_live,
            },
            s if s == KeyStatus::Completed.as_str() => {
                // The CHECK constraint rules a completed row without its
                // response out: treat one as corruption, never as a replay.
                let (Some(status), Some(headers), Some(body)) = (
                    self.response_status,
                    self.response_headers,
                    self.response_body,
                ) else {
                    return Err(corrupt("a completed key row without its response".into()));
                };
                KeyState::Completed(SavedResponse {
                    status: u16::try_from(status)
                        .map_err(|_| corrupt(format!("response status {status}")))?,
                    headers: serde_json::from_value(headers)
                        .map_err(|e| DieselError::DeserializationError(Box::new(e)))?,
                    body,
                })
            }
            other => return Err(corrupt(format!("key status {other:?}"))),
        };
        Ok(KeyRecord {
            fingerprint: self.fingerprint,
            state,
        })
    }
}

/// A key to register for one request.
pub struct NewClaim<'a> {
    pub account_id: i64,
    pub key: &'a str,
    pub fingerprint: &'a str,
    /// How long the key is remembered.
    pub ttl: Duration,
    /// How long the claim is protected before others may take it over.
    pub lease: Duration,
}

/// The row a request registered, and the lease that lets it complete it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub account_id: i64,
    pub key: String,
    pub lease_token: Uuid,
}

/// One account as `charges account list` shows it.
#[derive(Debug, Clone)]
pub struct AccountRecord {
    pub id: i64,
    pub name: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
    pub demo: bool,
}

/// One key row as the teaching page shows it (times as RFC 3339 text).
#[derive(Debug, Clone)]
pub struct KeyView {
    pub key: String,
    pub status: String,
    pub fingerprint: String,
    pub response_status: Option<i32>,
    pub charge_id: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub expired: bool,
    pub locked_until: String,
    pub lease_live: bool,
}

#[derive(Debug, Clone)]
pub struct UnguardedView {
    pub key: String,
    pub charge_id: String,
    pub created_at: String,
}

/// A row of the unguarded table: the key, its request and the response.
#[derive(Debug, Clone)]
pub struct Unguarded {
    pub key: String,
    pub fingerprint: String,
    pub response_body: Value,
}

/// A time as fixed-width RFC 3339 UTC with microseconds, e.g.
/// `2026-12-02T14:47:33.173074Z`: how the API shows times, and how SQLite
/// stores them (fixed width, so text order is time order).
pub fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn json_column(text: Option<String>) -> QueryResult<Option<Value>> {
    text.map(|t| {
        serde_json::from_str(&t).map_err(|e| DieselError::DeserializationError(Box::new(e)))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(status: &str, lease_live: bool, response: bool) -> RawKeyRow {
        RawKeyRow {
            fingerprint: "sha256:f".into(),
            status: status.into(),
            lease_live,
            response_status: response.then_some(201),
            response_headers: response.then(|| serde_json::json!({"location": "/charges/1"})),
            response_body: response.then(|| serde_json::json!({"id": 1})),
        }
    }

    #[test]
    fn a_row_decodes_into_its_state_once() {
        assert_eq!(
            raw("in_progress", true, false).decode().unwrap().state,
            KeyState::InProgress { lease_live: true }
        );
        let KeyState::Completed(response) = raw("completed", false, true).decode().unwrap().state
        else {
            panic!("completed");
        };
        assert_eq!(response.status, 201);
        assert_eq!(response.headers["location"], "/charges/1");
        assert!(raw("completed", false, false).decode().is_err());
        assert!(raw("done", false, true).decode().is_err());
    }
}
