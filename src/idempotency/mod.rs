//! The Idempotency-Key protocol (IETF draft-ietf-httpapi-idempotency-key-header-07).
//!
//! [`execute`] creates a charge at most once per (account, key), in one of
//! the two designs the article compares:
//!
//! ```text
//! Atomic (default): one statement (PostgreSQL; SQLite: three in BEGIN IMMEDIATE)
//!   read the live row; if there is none (or it may be taken over), write the
//!   key row completed with the 201, and the charge
//!     written      -> Executed
//!     found a row  -> Mismatch | Replayed | InFlight
//!     lost it      -> (a concurrent request took the key while we waited) read it again
//!
//! Key-first: two steps
//!   1. claim the key under a lease, committed  (others now see "in progress")
//!   2. the charge, and the row completed if we still hold the lease
//!      on failure: release the row, so the retry runs as the first
//! ```
//!
//! Atomic: the response to a first request is known before anything is
//! written (the charge's id and time are chosen first), so the key row is
//! written already completed, with its stored response, in the same
//! statement as the charge: "register the key, record the charge, store the
//! 201, in one transaction" is literally one statement, and a statement is
//! atomic. A key row exists completed, or not at all. A concurrent request
//! with the same key waits on the unique index entry until the first
//! commits (then replays its response) or rolls back (then runs as the
//! first). It never sees "in progress". (On SQLite the wait is for the
//! database's write lock.)
//!
//! Key-first: a concurrent request sees the committed in-progress row and gets
//! `InFlight` (409) at once instead of waiting. The price is the window
//! between the two steps: if the process dies there, the row stays in
//! progress until its lease runs out, and then the next request with the
//! same key takes it over (see [`KeyStore::charge_once`](crate::store::KeyStore::charge_once)).
//!
//! The protocol's one write is the store's: a charge with its key. What
//! makes it a protocol is here: the modes, the typed decision, the retries.

pub mod fingerprint;
pub mod key;

use std::time::Duration;

use diesel::result::{DatabaseErrorKind, Error as DieselError};

pub use crate::store::SavedResponse;
pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};

use crate::hooks::{HookFailure, Moment, TxHooks, WriteError};
use crate::metrics::METRICS;
use crate::store::{Charge, FirstWrite, KeyRecord, KeyState, NewClaim, Store};

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

// The stored response belongs to the store; how it is sent is the protocol's.
impl SavedResponse {
    /// The body bytes: canonical JSON, identical for the first answer and
    /// every replay (jsonb does not keep the original bytes).
    pub fn body_bytes(&self) -> String {
        fingerprint::canonical_json(&self.body)
    }
}

/// A first request, decided before anything is written: the charge (its id
/// and time chosen already) and the response to send now and replay later.
pub struct Created {
    pub charge: Charge,
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

impl From<WriteError> for Error {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::Database(e) => Error::Database(e),
            WriteError::Hook(e) => Error::Hook(e),
        }
    }
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

/// Where a key row was read: before anything was tried (the fast path), or
/// after our claim found a row it could not take (the claim was lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    FastPath,
    AfterLostClaim,
}

/// What to do about a key, given its row.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Try to claim the key and run the operation.
    Claim,
    /// Answer without running anything.
    Answer(Outcome),
}

/// The protocol's one rule, shared by the fast path and the read after a
/// lost claim: what a request with `fingerprint` does about the key's live
/// row. Pure, so it is tested table by table. The design (atomic or
/// key-first) does not change it: it changes only when a concurrent
/// request sees a row at all.
pub fn decide(row: Option<KeyRecord>, fingerprint: &Fingerprint, read: Read) -> Decision {
    let Some(row) = row else {
        return match read {
            Read::FastPath => Decision::Claim,
            // Gone between our claim and this read (released by a failed
            // key-first request): the client may retry and run as the first.
            Read::AfterLostClaim => Decision::Answer(Outcome::InFlight),
        };
    };
    if row.fingerprint != fingerprint.as_str() {
        return Decision::Answer(Outcome::Mismatch);
    }
    match row.state {
        // A completed key never changes until it expires.
        KeyState::Completed(response) => Decision::Answer(Outcome::Replayed(response)),
        // Its worker is on it: answered at once, not queued behind its row lock.
        KeyState::InProgress { lease_live: true } => Decision::Answer(Outcome::InFlight),
        // A stuck row of this same request: the claim may take it over.
        KeyState::InProgress { lease_live: false } => match read {
            Read::FastPath => Decision::Claim,
            // Someone else took it over before us.
            Read::AfterLostClaim => Decision::Answer(Outcome::InFlight),
        },
    }
}

pub fn execute(
    store: &mut dyn Store,
    mode: Mode,
    request: &KeyedRequest,
    hooks: &dyn TxHooks,
    first: &Created,
) -> Result<Outcome, Error> {
    let claim = NewClaim {
        account_id: request.account_id,
        key: request.key.as_str(),
        fingerprint: request.fingerprint.as_str(),
        ttl: request.ttl,
        lease: request.lease,
    };
    match mode {
        Mode::Atomic => {
            // The clock starts before the statement: a concurrent request
            // makes it wait on the key's index entry (SQLite: at BEGIN).
            let started = std::time::Instant::now();
            let mut result = None;
            with_transient_retries(|| {
                Ok(hooks.run(store, Moment::AfterWrites, &mut |s| {
                    let written = s.charge_once(&claim, &first.charge, &first.response)?;
                    let wrote = written == FirstWrite::Written;
                    result = Some(written);
                    Ok(wrote)
                })?)
            })?;
            match result.expect("the writes ran") {
                FirstWrite::Written => Ok(Outcome::Executed(first.response.clone())),
                FirstWrite::Found(row) => {
                    // The statement's own read: one round trip for a replay.
                    match decide(Some(row), request.fingerprint, Read::FastPath) {
                        Decision::Answer(outcome) => Ok(outcome),
                        // Rows that may be taken over are not returned.
                        Decision::Claim => Ok(Outcome::InFlight),
                    }
                }
                FirstWrite::Lost => {
                    // We waited for a concurrent request's commit; its row
                    // is committed now.
                    METRICS
                        .concurrent_key_waits
                        .observe(started.elapsed().as_secs_f64());
                    read_after_lost_claim(store, request)
                }
            }
        }
        Mode::KeyFirst => {
            // A completed key never changes until it expires, so its replay
            // needs one indexed read and no lock; an in-progress row under a
            // live lease is answered the same way, without queueing.
            let row = store.find_live_key(request.account_id, request.key.as_str())?;
            if let Decision::Answer(outcome) = decide(row, request.fingerprint, Read::FastPath) {
                return Ok(outcome);
            }
            let claimed = with_transient_retries(|| Ok(store.claim_key(&claim)?))?;
            let Some(claim) = claimed else {
                return read_after_lost_claim(store, request);
            };
            hooks.after_key_committed();
            let mut completed = false;
            let result = with_transient_retries(|| {
                hooks.run(store, Moment::BeforeWrites, &mut |s| {
                    completed = s.complete_with_charge(&claim, &first.charge, &first.response)?;
                    Ok(completed)
                })?;
                if completed {
                    Ok(())
                } else {
                    Err(Error::LeaseLost)
                }
            });
            match result {
                Ok(()) => Ok(Outcome::Executed(first.response.clone())),
                // Someone else holds the row now: answer as they will.
                Err(Error::LeaseLost) => read_after_lost_claim(store, request),
                Err(e) => {
                    // If this fails too, the lease running out frees the key.
                    if let Err(release_error) = store.release_key(&claim) {
                        tracing::warn!(error = %release_error, "could not release the idempotency key");
                    }
                    Err(e)
                }
            }
        }
    }
}

fn read_after_lost_claim(store: &mut dyn Store, request: &KeyedRequest) -> Result<Outcome, Error> {
    let row = store.find_live_key(request.account_id, request.key.as_str())?;
    match decide(row, request.fingerprint, Read::AfterLostClaim) {
        Decision::Answer(outcome) => Ok(outcome),
        Decision::Claim => unreachable!("after a lost claim every row is answered"),
    }
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
pub fn purge_expired(store: &mut dyn Store, batch: i64) -> Result<usize, DieselError> {
    let mut total = 0;
    loop {
        let n = store.purge_expired_keys(batch)?;
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

    /// Every (row state, fingerprint, where it was read) and what follows.
    /// The design is no input: atomic and key-first differ only in whether a
    /// concurrent request gets to see an in-progress row at all.
    #[test]
    fn every_key_state_fingerprint_and_read_decides_one_outcome() {
        use Read::{AfterLostClaim as Lost, FastPath as Fast};
        let mine = Fingerprint::of("POST", "/charges", &serde_json::json!({"amount": 1}));
        let response = SavedResponse {
            status: 201,
            headers: [("location".to_owned(), "/charges/1".to_owned())].into(),
            body: serde_json::json!({"id": 1}),
        };
        let row = |state: &KeyState, same: bool| KeyRecord {
            fingerprint: if same {
                mine.as_str().to_owned()
            } else {
                "sha256:other".to_owned()
            },
            state: state.clone(),
        };
        let live = KeyState::InProgress { lease_live: true };
        let over = KeyState::InProgress { lease_live: false };
        let done = KeyState::Completed(response.clone());
        let claim = || Decision::Claim;
        let answer = Decision::Answer;
        #[rustfmt::skip]
        let table: Vec<(Option<&KeyState>, bool, Read, Decision)> = vec![
            // state         same request  read   decision
            (None,           true,  Fast, claim()),
            (None,           true,  Lost, answer(Outcome::InFlight)),
            (Some(&live),    true,  Fast, answer(Outcome::InFlight)),
            (Some(&live),    true,  Lost, answer(Outcome::InFlight)),
            (Some(&live),    false, Fast, answer(Outcome::Mismatch)),
            (Some(&live),    false, Lost, answer(Outcome::Mismatch)),
            (Some(&over),    true,  Fast, claim()),
            (Some(&over),    true,  Lost, answer(Outcome::InFlight)),
            (Some(&over),    false, Fast, answer(Outcome::Mismatch)),
            (Some(&over),    false, Lost, answer(Outcome::Mismatch)),
            (Some(&done),    true,  Fast, answer(Outcome::Replayed(response.clone()))),
            (Some(&done),    true,  Lost, answer(Outcome::Replayed(response.clone()))),
            (Some(&done),    false, Fast, answer(Outcome::Mismatch)),
            (Some(&done),    false, Lost, answer(Outcome::Mismatch)),
        ];
        for (state, same, read, expected) in table {
            let got = decide(state.map(|s| row(s, same)), &mine, read);
            assert_eq!(
                got, expected,
                "{state:?}, same request: {same}, read {read:?}"
            );
        }
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
