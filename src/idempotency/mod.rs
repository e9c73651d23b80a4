//! The Idempotency-Key protocol (IETF draft-ietf-httpapi-idempotency-key-header-07).
//!
//! [`execute`] runs an operation at most once per (account, key):
//!
//! ```text
//! BEGIN (READ COMMITTED)
//!   INSERT key row ... ON CONFLICT DO UPDATE WHERE expired RETURNING id
//!     row returned -> run the operation, store its response, COMMIT -> Executed
//!     no row       -> read the live row:
//!                       other fingerprint -> Mismatch (422)
//!                       completed         -> Replayed (the stored response)
//!                       in progress       -> InFlight (409)
//! ```
//!
//! The key row, the operation's writes and the stored response commit
//! together or not at all: a failure leaves no key behind, so the retry runs
//! as the first request, and a committed key always has its response. A
//! concurrent request with the same key waits on the unique index inside the
//! INSERT until the first commits (then replays) or rolls back (then runs).
//!
//! The module knows nothing about charges: the operation hands back a
//! framework-neutral [`SavedResponse`].

pub mod fingerprint;
pub mod key;
pub mod store;

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::PgConnection;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use serde_json::Value;
use uuid::Uuid;

pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};

use crate::hooks::{HookFailure, TxHooks};

/// How often a transaction that failed with a serialization failure or a
/// deadlock is tried in all before the error is returned.
pub const MAX_ATTEMPTS: u32 = 3;

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
    pub ttl: Duration,
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

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Database(#[from] DieselError),
    #[error(transparent)]
    Hook(#[from] HookFailure),
}

pub fn execute(
    conn: &mut PgConnection,
    request: &KeyedRequest,
    hooks: &dyn TxHooks,
    mut operation: impl FnMut(&mut PgConnection) -> Result<Created, DieselError>,
) -> Result<Outcome, Error> {
    // A completed key never changes until it expires, so its replay needs
    // one indexed read and no lock.
    if let Some(row) = store::find_live(conn, request.account_id, request.key.as_str())?
        && (row.status == store::COMPLETED || row.fingerprint != request.fingerprint.as_str())
    {
        return decide(row, request.fingerprint);
    }
    with_transient_retries(|| {
        conn.build_transaction().read_committed().run(|tx| {
            let claimed = store::claim(
                tx,
                request.account_id,
                request.key.as_str(),
                request.fingerprint.as_str(),
                request.ttl,
            )?;
            let Some(key_id) = claimed else {
                // The conflicting row is committed and locked by our INSERT:
                // this read sees its final state.
                let row = store::find_live(tx, request.account_id, request.key.as_str())?
                    .ok_or(DieselError::NotFound)?;
                return decide(row, request.fingerprint);
            };
            let created = operation(tx)?;
            let response = created.response;
            let headers = serde_json::to_value(&response.headers).expect("string map serializes");
            store::complete(
                tx,
                key_id,
                created.resource_id,
                response.status,
                &headers,
                &response.body,
            )?;
            hooks.before_commit()?;
            Ok(Outcome::Executed(response))
        })
    })
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
