//! The Idempotency-Key protocol (IETF draft-ietf-httpapi-idempotency-key-header-07).
//!
//! [`execute`] runs an operation at most once per (account, key), in one of
//! the two designs the article compares:
//!
//! ```text
//! Atomic (default): one transaction (PostgreSQL: READ COMMITTED; SQLite: BEGIN IMMEDIATE)
//!   BEGIN
//!     claim the key (INSERT ... ON CONFLICT DO UPDATE WHERE takeable)
//!       claimed    -> run the operation, store its response, COMMIT -> Executed
//!       not claimed-> read the live row -> Mismatch | Replayed | InFlight
//!
//! Key-first: two transactions
//!   1. claim the key under a lease, COMMIT  (others now see "in progress")
//!   2. run the operation, complete the row if we still hold the lease, COMMIT
//!      on failure: release the row, so the retry runs as the first
//! ```
//!
//! Atomic: the key row, the operation's writes and the stored response commit
//! together or not at all, and a concurrent request with the same key waits
//! on the unique index until the first commits (then replays its response) or
//! rolls back (then runs as the first). It never sees "in progress". (On
//! SQLite the wait is for the database's write lock, at BEGIN.)
//!
//! Key-first: a concurrent request sees the committed in-progress row and gets
//! `InFlight` (409) at once instead of waiting. The price is the window
//! between the two transactions: if the process dies there, the row stays in
//! progress until its lease runs out, and then the next request with the
//! same key takes it over (see [`store::claim`]).
//!
//! The module knows nothing about charges: the operation hands back a
//! framework-neutral [`SavedResponse`].

pub mod fingerprint;
pub mod key;
pub mod store;

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use serde_json::Value;
use uuid::Uuid;

pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};

use crate::db::Conn;
use crate::hooks::{HookFailure, TxHooks};
use crate::metrics::METRICS;

/// How often a transaction that failed with a serialization failure or a
/// deadlock is tried in all before the error is returned.
pub const MAX_ATTEMPTS: u32 = 3;

/// Where the key row is committed relative to the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Key, operation and response in one transaction: a concurrent retry waits, then replays.
    Atomic,
    /// The key is committed first: a concurrent retry gets 409 at once; stuck keys are reclaimed after their lease.
    KeyFirst,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Atomic => "atomic",
            Mode::KeyFirst => "key-first",
        }
    }
}

/// A response as stored in the key row and replayed byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedResponse {
    pub status: u16,
    /// Lowercase header names; `BTreeMap` so the order is the same every time.
    pub headers: BTreeMap<String, String>,
    pub body: Value,
}

impl SavedResponse {
    /// The body bytes: canonical JSON, identical for the first answer and
    /// every replay (jsonb does not keep the original bytes).
    pub fn body_bytes(&self) -> String {
        fingerprint::canonical_json(&self.body)
    }
}

/// What the operation created: the resource it points the key row at, and
/// the response to send now and replay later.
pub struct Created {
    pub resource_id: Option<Uuid>,
    pub response: SavedResponse,
}

/// One keyed request, scoped to the account that sent it.
pub struct KeyedRequest<'a> {
    pub account_id: i64,
    pub key: &'a IdempotencyKey,
    pub fingerprint: &'a Fingerprint,
    /// How long the key is remembered.
    pub ttl: Duration,
    /// Key-first: how long a claim is protected before others may take it over.
    pub lease: Duration,
}

#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The operation ran now; send its response.
    Executed(SavedResponse),
    /// The key was completed earlier with the same request; send the stored response.
    Replayed(SavedResponse),
    /// The key was used with a different request (draft: 422).
    Mismatch,
    /// The key's first request is still being processed (draft: 409).
    InFlight,
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Executed(_) => "executed",
            Outcome::Replayed(_) => "replayed",
            Outcome::Mismatch => "mismatch",
            Outcome::InFlight => "in_flight",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Database(#[from] DieselError),
    #[error(transparent)]
    Hook(#[from] HookFailure),
    /// Key-first: our lease was taken over before we completed the row.
    #[error("the idempotency key's lease was taken over")]
    LeaseLost,
}

pub fn execute(
    conn: &mut Conn<'_>,
    mode: Mode,
    request: &KeyedRequest,
    hooks: &dyn TxHooks,
    mut operation: impl FnMut(&mut Conn<'_>) -> Result<Created, DieselError>,
) -> Result<Outcome, Error> {
    // A completed key never changes until it expires, so its replay needs
    // one indexed read and no lock.
    // An in-progress row under a live lease (a key-first request running)
    // is answered the same way, without queueing behind its row lock.
    if let Some(row) = store::find_live(conn, request.account_id, request.key.as_str())?
        && (row.status == store::COMPLETED
            || row.fingerprint != request.fingerprint.as_str()
            || row.lease_live)
    {
        return decide(row, request.fingerprint);
    }
    match mode {
        Mode::Atomic => with_transient_retries(|| {
            // On SQLite the wait is at BEGIN IMMEDIATE, so the clock starts here.
            let started = std::time::Instant::now();
            conn.transaction(|tx| {
                let Some(claim) = claim(tx, request)? else {
                    // The fast path saw no finished row, so a concurrent
                    // request held the key and we waited for its commit. The
                    // conflicting row is now committed and locked by our
                    // INSERT: this read sees its final state.
                    METRICS
                        .concurrent_key_waits
                        .observe(started.elapsed().as_secs_f64());
                    return read_and_decide(tx, request);
                };
                let response = run_and_complete(tx, claim, hooks, &mut operation)?;
                Ok(Outcome::Executed(response))
            })
        }),
        Mode::KeyFirst => {
            let claimed = with_transient_retries(|| Ok(claim(conn, request)?))?;
            let Some(claim) = claimed else {
                return read_and_decide(conn, request);
            };
            hooks.after_key_committed();
            let result = with_transient_retries(|| {
                conn.transaction(|tx| run_and_complete(tx, claim, hooks, &mut operation))
            });
            match result {
                Ok(response) => Ok(Outcome::Executed(response)),
                // Someone else holds the row now: answer as they will.
                Err(Error::LeaseLost) => read_and_decide(conn, request),
                Err(e) => {
                    // If this fails too, the lease running out frees the key.
                    if let Err(release_error) = store::release(conn, claim) {
                        tracing::warn!(error = %release_error, "could not release the idempotency key");
                    }
                    Err(e)
                }
            }
        }
    }
}

fn claim(conn: &mut Conn<'_>, request: &KeyedRequest) -> Result<Option<store::Claim>, DieselError> {
    store::claim(
        conn,
        request.account_id,
        request.key.as_str(),
        request.fingerprint.as_str(),
        request.ttl,
        request.lease,
    )
}

fn run_and_complete(
    tx: &mut Conn<'_>,
    claim: store::Claim,
    hooks: &dyn TxHooks,
    operation: &mut impl FnMut(&mut Conn<'_>) -> Result<Created, DieselError>,
) -> Result<SavedResponse, Error> {
    let created = operation(tx)?;
    hooks.after_operation()?;
    let response = created.response;
    let headers = serde_json::to_value(&response.headers).expect("string map serializes");
    if !store::complete(
        tx,
        claim,
        created.resource_id,
        response.status,
        &headers,
        &response.body,
    )? {
        return Err(Error::LeaseLost);
    }
    Ok(response)
}

fn read_and_decide(conn: &mut Conn<'_>, request: &KeyedRequest) -> Result<Outcome, Error> {
    match store::find_live(conn, request.account_id, request.key.as_str())? {
        Some(row) => decide(row, request.fingerprint),
        // Gone between our claim and this read (released by a failed
        // key-first request): the client may retry and run as the first.
        None => Ok(Outcome::InFlight),
    }
}

fn decide(row: store::KeyRow, fingerprint: &Fingerprint) -> Result<Outcome, Error> {
    if row.fingerprint != fingerprint.as_str() {
        return Ok(Outcome::Mismatch);
    }
    if row.status != store::COMPLETED {
        return Ok(Outcome::InFlight);
    }
    let (Some(status), Some(headers), Some(body)) =
        (row.response_status, row.response_headers, row.response_body)
    else {
        // The CHECK constraint rules this out; treat it as corruption, not as a replay.
        return Err(DieselError::NotFound.into());
    };
    let headers: BTreeMap<String, String> = serde_json::from_value(headers)
        .map_err(|e| DieselError::DeserializationError(Box::new(e)))?;
    Ok(Outcome::Replayed(SavedResponse {
        status: status as u16,
        headers,
        body,
    }))
}

/// Runs `attempt` again after a serialization failure or a deadlock, which
/// PostgreSQL resolves by aborting one transaction that is safe to retry.
pub fn with_transient_retries<T>(
    mut attempt: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let mut tries = 1;
    loop {
        match attempt() {
            Err(Error::Database(e)) if is_transient(&e) && tries < MAX_ATTEMPTS => {
                tracing::warn!(error = %e, tries, "transient database error, retrying the transaction");
                tries += 1;
            }
            result => return result,
        }
    }
}

pub fn is_transient(error: &DieselError) -> bool {
    match error {
        DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        // Diesel has no kind for SQLSTATE 40P01; PostgreSQL's message is stable.
        DieselError::DatabaseError(_, info) => info.message().starts_with("deadlock detected"),
        _ => false,
    }
}

/// Deletes every expired key row, `batch` rows a statement; returns how many.
pub fn purge_expired(conn: &mut Conn<'_>, batch: i64) -> Result<usize, DieselError> {
    let mut total = 0;
    loop {
        let n = store::purge_expired_batch(conn, batch)?;
        METRICS.purged_keys.inc_by(n as u64);
        total += n;
        if (n as i64) < batch {
            return Ok(total);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::DatabaseErrorInformation;

    struct Info(&'static str);

    impl DatabaseErrorInformation for Info {
        fn message(&self) -> &str {
            self.0
        }
        fn details(&self) -> Option<&str> {
            None
        }
        fn hint(&self) -> Option<&str> {
            None
        }
        fn table_name(&self) -> Option<&str> {
            None
        }
        fn column_name(&self) -> Option<&str> {
            None
        }
        fn constraint_name(&self) -> Option<&str> {
            None
        }
        fn statement_position(&self) -> Option<i32> {
            None
        }
    }

    fn db_error(kind: DatabaseErrorKind, message: &'static str) -> Error {
        Error::Database(DieselError::DatabaseError(kind, Box::new(Info(message))))
    }

    #[test]
    fn serialization_failures_and_deadlocks_are_retried_a_bounded_number_of_times() {
        let mut calls = 0;
        let result = with_transient_retries(|| {
            calls += 1;
            match calls {
                1 => Err(db_error(
                    DatabaseErrorKind::SerializationFailure,
                    "could not serialize access",
                )),
                2 => Err(db_error(DatabaseErrorKind::Unknown, "deadlock detected")),
                _ => Ok(calls),
            }
        });
        assert_eq!(result.unwrap(), 3);

        let mut calls = 0;
        let result: Result<(), _> = with_transient_retries(|| {
            calls += 1;
            Err(db_error(DatabaseErrorKind::SerializationFailure, "again"))
        });
        assert!(result.is_err());
        assert_eq!(calls, MAX_ATTEMPTS);
    }

    #[test]
    fn other_errors_are_not_retried() {
        let mut calls = 0;
        let result: Result<(), _> = with_transient_retries(|| {
            calls += 1;
            Err(db_error(
                DatabaseErrorKind::UniqueViolation,
                "duplicate key",
            ))
        });
        assert!(result.is_err());
        assert_eq!(calls, 1);
    }
}
