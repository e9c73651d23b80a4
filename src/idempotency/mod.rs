//! The Idempotency-Key protocol (IETF draft-ietf-httpapi-idempotency-key-header-07),
//! for any operation.
//!
//! [`execute`] runs an [`Operation`] (a charge, a refund: anything that
//! writes and answers) at most once per (account, key), in one of the two
//! designs the article compares:
//!
//! ```text
//! Atomic (default): one transaction
//!   BEGIN
//!     1. register the key   INSERT … ON CONFLICT (account_id, key) DO NOTHING
//!                           (or take over an expired or stuck row)
//!     2. run the operation  on the same transaction
//!     3. store its response in the key row
//!   COMMIT
//!   the key had a row -> answer as the row says: Replayed | Mismatch | InFlight
//!
//! Key-first: two transactions
//!   0. read the key: a completed row is replayed, a live in-progress one is 409
//!   1. BEGIN; register the key, in progress under a lease; COMMIT
//!   2. BEGIN; run the operation; store its response if the lease is still ours; COMMIT
//!      on failure: release the key, so the retry runs as the first
//! ```
//!
//! Atomic: the key row, the operation's writes and the stored response
//! commit together or not at all, so a key row is completed or absent to
//! everyone else. A concurrent request with the same key waits on the unique
//! index entry until the first commits (then replays its response) or rolls
//! back (then runs as the first); it never sees "in progress". (On SQLite
//! the wait is for the database's write lock, at `BEGIN IMMEDIATE`.)
//!
//! Key-first: a concurrent request sees the committed in-progress row and
//! gets `InFlight` (409) at once instead of waiting. The price is the window
//! between the two transactions: if the process dies there, the row stays
//! in progress until its lease runs out, and then the next request with the
//! same key takes it over (`KeyStore::take_over_key`).
//!
//! Which operations may announce their response ([`Operation::known_response`])
//! and have their key row written completed in the very statement that
//! registers the key, one statement fewer: those whose answer cannot depend
//! on what the database holds. Creating a charge may (its id, time and 201
//! are chosen before anything is written); a refund may not (it may find
//! too little left to refund). It changes nothing else: the key row, the
//! writes and the response still commit together.
//!
//! An operation with a **foreign step** (a call to another service that no
//! rollback undoes: the card network) runs in neither shape above but in
//! three phases, in both modes (`phases`), after brandur's rule: a foreign
//! call never runs inside a database transaction. Phase 1 commits the key
//! in progress, phase 2 makes the call holding no connection, phase 3
//! writes and stores the response if the lease is still ours. So the
//! protocol takes a way to get connections ([`Connections`]: one per
//! transaction), not one connection for the whole request.
//!
//! Nothing here knows what an operation does, nor which database it runs
//! on: the key table's steps are a trait ([`KeyStore`], in `key_store`),
//! implemented once per backend by the store, and the protocol is generic
//! over it. An operation names the transaction type its own writes need.
//! This folder imports nothing else of the crate but the metrics registry:
//! it can be copied into another Diesel service (see docs/design.md).

pub mod decide;
pub mod failure;
pub mod fingerprint;
pub mod hooks;
pub mod key;
pub mod key_store;
mod phases;
pub mod recent;
#[cfg(test)]
mod tests;

use std::time::Instant;

use diesel::result::Error as DieselError;

pub use decide::{Decision, Read, decide};
pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};
pub use key_store::{
    Claim, KeyRecord, KeyState, KeyStore, KeyedRequest, NewKeyStatus, SavedResponse, StuckKey,
    Transactional,
};
pub use recent::RecentKeys;

use crate::idempotency::failure::{Failure, classify};
use crate::idempotency::hooks::{HookFailure, TxHooks};
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

/// What runs under a key: its writes, on the transaction it is handed, and
/// the response to store and send. `Tx` is the transaction type the
/// protocol runs on; an operation asks of it only what its own writes need
/// (`impl<Tx: ChargeStore + ?Sized> Operation<Tx> for …`).
pub trait Operation<Tx: ?Sized> {
    /// Runs on the transaction that holds the key. Whatever it answers is
    /// stored and replayed, a 4xx included: once the operation has run, the
    /// key has its answer. An `Err` rolls everything back, the key row
    /// included (key-first: releases the key), and nothing is stored.
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, Error>;

    /// The response, if it is known before anything is written (see the
    /// module's doc); [`run`](Operation::run) must then answer exactly it.
    fn known_response(&self) -> Option<&SavedResponse> {
        None
    }

    /// The name of the other service the operation calls, which no
    /// rollback undoes ([`foreign_step`](Operation::foreign_step)), if it
    /// calls one: then the protocol runs it in phases (see `phases`), never
    /// inside a transaction, and the key row records the name, so that only
    /// a worker that calls the same service finishes the key if this one
    /// dies (see [`recover`]).
    fn foreign_step_name(&self) -> Option<&str> {
        None
    }

    fn has_foreign_step(&self) -> bool {
        self.foreign_step_name().is_some()
    }

    /// The call to another service, made under a key derived from the
    /// client's (so that asking again is a replay there), before
    /// [`run`](Operation::run) and with no database connection held. An
    /// `Err` stores nothing.
    fn foreign_step(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Called once the answer of [`run`](Operation::run) is stored, after a
    /// foreign step: if that answer means the foreign step's effect will
    /// never be used (a charge refused because its account was revoked
    /// meanwhile), undoes it at the other service, with a compensating call
    /// that is itself idempotent; otherwise does nothing.
    fn compensate(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// Any closure over the transaction is an operation whose response is not
/// known in advance.
impl<Tx: ?Sized, F: FnMut(&mut Tx) -> Result<SavedResponse, Error>> Operation<Tx> for F {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, Error> {
        self(tx)
    }
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
    /// An operation answered otherwise than the response it announced.
    #[error("the operation answered otherwise than it announced")]
    NotAsAnnounced,
    /// Something the operation depends on (the card network) did not answer:
    /// nothing is stored; the client retries with the same key.
    #[error("{0}")]
    Dependency(String),
    /// Something the operation depends on, asked under a key derived from
    /// this request's, holds that key for another request: the client reused
    /// its key, and only the dependency saw the first use (its answer was
    /// lost here). Answered as the key's mismatch (422); nothing is stored,
    /// so the first request's retry still completes.
    #[error("the key was used with another request, as a dependency tells")]
    DependencyKeyReused,
    /// No connection for one of the protocol's transactions (the pool's
    /// timeout), or the request's deadline passed: the [`Connections`]'
    /// own error.
    #[error(transparent)]
    Connection(Box<dyn std::error::Error + Send + Sync>),
    /// Registering the key waited longer than the database's lock timeout
    /// for a concurrent request that holds it: answered as in flight (409).
    #[error("a concurrent request held the idempotency key past the lock timeout")]
    KeyLocked,
}

/// Where the protocol gets a connection for each of its transactions, and
/// gives it back after: one held for the whole request would sit idle while
/// a foreign call runs (see `phases`).
pub trait Connections {
    /// The connection: a key store that runs transactions, and whatever the
    /// operations run on it write.
    type Store: Transactional + ?Sized;

    /// Runs `work` on a connection, given back when it returns.
    fn run<T>(
        &mut self,
        work: impl FnOnce(&mut Self::Store) -> Result<T, Error>,
    ) -> Result<T, Error>;

    /// When the caller stops waiting (the request's deadline): a duplicate
    /// waiting for its first request gives up before it.
    fn until(&self) -> Instant;
}

/// Runs `operation` at most once for `request`'s key, in `mode`; `hooks`
/// are called at the named points (production: none). An operation without
/// a foreign step runs on one connection, in one transaction (atomic) or
/// two (key-first); one with a foreign step in three phases (`phases`),
/// each on a connection of its own. `recent`: the keys this process
/// completed lately (atomic mode reads those first, see `recent`).
pub fn execute<C: Connections>(
    connections: &mut C,
    mode: Mode,
    request: &KeyedRequest<'_>,
    recent: &RecentKeys,
    hooks: &dyn TxHooks,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Outcome, Error> {
    // Atomic mode reads nothing before its transaction, so a retry would
    // cost what its first request cost. A key completed here lately is most
    // likely a retry's: read its row first (key-first and the phases of a
    // foreign step always do).
    let reads_first = mode == Mode::KeyFirst || operation.has_foreign_step();
    let hinted = !reads_first && recent.contains(request.account_id, request.key);
    if hinted && let Some(outcome) = read_completed(connections, request)? {
        return Ok(outcome);
    }
    let done = if operation.has_foreign_step() {
        phases::execute(connections, mode, request, hooks, operation)
    } else {
        connections.run(|store| match mode {
            Mode::Atomic => atomic(store, request, hooks, operation),
            Mode::KeyFirst => key_first(store, request, hooks, operation),
        })
    };
    match done {
        Ok(outcome @ (Outcome::Executed(_) | Outcome::Replayed(_))) => {
            if !reads_first {
                recent.remember(request.account_id, request.key);
            }
            Ok(outcome)
        }
        // Its first request is still running: the draft's answer, not a hang.
        Err(Error::KeyLocked) => Ok(Outcome::InFlight),
        done => done,
    }
}

/// A completed key's answer, read in one statement without a transaction:
/// its replay, or 422 for another request. Anything else (no live row: it
/// expired or was purged; a row in progress) is `None`, for the protocol
/// to decide in its transaction as if nothing had been read.
fn read_completed<C: Connections>(
    connections: &mut C,
    request: &KeyedRequest<'_>,
) -> Result<Option<Outcome>, Error> {
    let row = connections.run(|store| Ok(store.find_live_key(request.account_id, request.key)?))?;
    if !matches!(&row, Some(r) if matches!(r.state, KeyState::Completed(_))) {
        return Ok(None);
    }
    match decide(row, request.fingerprint, Read::FastPath) {
        Decision::Answer(outcome) => Ok(Some(outcome)),
        Decision::Claim => Ok(None),
    }
}

fn atomic<S: Transactional + ?Sized>(
    store: &mut S,
    request: &KeyedRequest<'_>,
    hooks: &dyn TxHooks,
    operation: &mut dyn Operation<S>,
) -> Result<Outcome, Error> {
    with_transient_retries(|| {
        store.transaction(|tx| {
            // 1. Register the key. A concurrent request with the same key
            //    makes this wait until it commits or rolls back.
            let status = match operation.known_response() {
                Some(response) => NewKeyStatus::Completed(response),
                None => NewKeyStatus::InProgress,
            };
            let claim = match register(tx, request, status)? {
                Registration::Claimed(claim) => claim,
                Registration::Answered(outcome) => return Ok(outcome),
            };
            // 2. Run the operation, on the same transaction.
            let response = operation.run(tx)?;
            hooks.before_commit()?;
            // 3. Store its response.
            store_response(tx, &claim, &response, operation)?;
            Ok(Outcome::Executed(response))
        })
    })
}

fn key_first<S: Transactional + ?Sized>(
    store: &mut S,
    request: &KeyedRequest<'_>,
    hooks: &dyn TxHooks,
    operation: &mut dyn Operation<S>,
) -> Result<Outcome, Error> {
    // 0. A completed key never changes until it expires, so its replay
    //    needs one indexed read and no lock; an in-progress row under a live
    //    lease is answered the same way, without queueing.
    let row = store.find_live_key(request.account_id, request.key)?;
    if let Decision::Answer(outcome) = decide(row, request.fingerprint, Read::FastPath) {
        return Ok(outcome);
    }
    // 1. Register the key in progress and commit: from now on a concurrent
    //    request sees it and gets 409.
    let registered = with_transient_retries(|| {
        store.transaction(|tx| register(tx, request, NewKeyStatus::InProgress))
    })?;
    let claim = match registered {
        Registration::Claimed(claim) => claim,
        Registration::Answered(outcome) => return Ok(outcome),
    };
    hooks.after_key_committed()?;
    // 2. Run the operation and store its response, if the lease is still
    //    ours, in one transaction.
    run_claimed(store, &claim, request, hooks, operation)
}

/// Key-first's second transaction, for a claim this worker holds: the
/// operation and its stored response, or, on failure, the claim released.
fn run_claimed<S: Transactional + ?Sized>(
    store: &mut S,
    claim: &Claim,
    request: &KeyedRequest<'_>,
    hooks: &dyn TxHooks,
    operation: &mut dyn Operation<S>,
) -> Result<Outcome, Error> {
    match run_and_store(store, claim, hooks, operation) {
        Ok(response) => Ok(Outcome::Executed(response)),
        // Someone else holds the row now: answer as they will.
        Err(Error::LeaseLost) => answer_after_lost_claim(store, request),
        Err(e) => {
            // If this fails too, the lease running out frees the key.
            if let Err(release_error) = store.release_key(claim) {
                tracing::warn!(error = %release_error, "could not release the idempotency key");
            }
            Err(e)
        }
    }
}

/// Finishes a key left in progress by a worker that died (key-first:
/// between its two transactions; either mode: between the phases of an
/// operation with a foreign step) once its lease has run out: takes the row
/// over under a fresh lease, as a retry of the same request would, and runs
/// the operation (rebuilt from the request the row kept) as that worker
/// would have, foreign step included. (Whether it may still act for the
/// key's account is the operation's to check, in its writes.) `Ok(None)`:
/// another instance, or the client's own retry, took it first; the row lock
/// lets only one do it.
pub fn recover<C: Connections>(
    connections: &mut C,
    request: &KeyedRequest<'_>,
    hooks: &dyn TxHooks,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Option<SavedResponse>, Error> {
    let claimed = connections.run(|store| {
        with_transient_retries(|| {
            store.transaction(|tx| Ok(tx.take_over_key(request, NewKeyStatus::InProgress)?))
        })
    })?;
    let Some(claim) = claimed else {
        return Ok(None);
    };
    let outcome = if operation.has_foreign_step() {
        phases::complete(connections, &claim, request, hooks, operation)?
    } else {
        connections.run(|store| run_claimed(store, &claim, request, hooks, operation))?
    };
    match outcome {
        Outcome::Executed(response) => Ok(Some(response)),
        _ => Ok(None),
    }
}

/// Gives a key left in progress whose request cannot be run again (this
/// server cannot rebuild it) a stored terminal answer, `response`, once its
/// lease has run out, so that it stops being found as stuck. `false`:
/// someone else took it first.
pub fn close_unrecoverable<C: Connections>(
    connections: &mut C,
    request: &KeyedRequest<'_>,
    response: &SavedResponse,
) -> Result<bool, Error> {
    connections.run(|store| {
        with_transient_retries(|| {
            store.transaction(|tx| {
                Ok(tx
                    .take_over_key(request, NewKeyStatus::Completed(response))?
                    .is_some())
            })
        })
    })
}

/// What came of registering a key.
pub(crate) enum Registration {
    /// The key row is this request's: run the operation.
    Claimed(Claim),
    /// The key is another request's: this is the answer.
    Answered(Outcome),
}

/// Registers the key: inserts its row, or takes over the row it has if that
/// may be taken over (expired; stuck in progress under a dead lease).
pub(crate) fn register<S: KeyStore + ?Sized>(
    tx: &mut S,
    request: &KeyedRequest<'_>,
    status: NewKeyStatus<'_>,
) -> Result<Registration, Error> {
    let started = Instant::now();
    let inserted = tx
        .insert_key(request, status)
        .map_err(|e| match classify(&e) {
            Failure::LockTimeout => Error::KeyLocked,
            _ => Error::Database(e),
        })?;
    if let Some(claim) = inserted {
        return Ok(Registration::Claimed(claim));
    }
    // A round trip when the row was committed already; the first request's
    // whole transaction when it was not (a concurrent duplicate).
    METRICS
        .key_conflicts
        .observe(started.elapsed().as_secs_f64());
    let row = tx.find_live_key(request.account_id, request.key)?;
    if let Decision::Answer(outcome) = decide(row, request.fingerprint, Read::FastPath) {
        return Ok(Registration::Answered(outcome));
    }
    if let Some(claim) = tx.take_over_key(request, status)? {
        return Ok(Registration::Claimed(claim));
    }
    Ok(Registration::Answered(answer_after_lost_claim(
        tx, request,
    )?))
}

/// The operation's writes and its response stored under `claim`, in one
/// transaction (key-first's second; a foreign step's phase 3).
pub(crate) fn run_and_store<S: Transactional + ?Sized>(
    store: &mut S,
    claim: &Claim,
    hooks: &dyn TxHooks,
    operation: &mut dyn Operation<S>,
) -> Result<SavedResponse, Error> {
    with_transient_retries(|| {
        store.transaction(|tx| {
            let response = operation.run(tx)?;
            hooks.before_commit()?;
            store_response(tx, claim, &response, operation)?;
            Ok(response)
        })
    })
}

/// Stores the response in the claimed row (or, when the row was written
/// completed with the announced response, checks that this is it).
pub(crate) fn store_response<S: KeyStore + ?Sized>(
    tx: &mut S,
    claim: &Claim,
    response: &SavedResponse,
    operation: &dyn Operation<S>,
) -> Result<(), Error> {
    if claim.completed {
        return match operation.known_response() == Some(response) {
            true => Ok(()),
            false => Err(Error::NotAsAnnounced),
        };
    }
    match tx.complete_key(claim, response)? {
        true => Ok(()),
        // Rolls back the operation's writes with it.
        false => Err(Error::LeaseLost),
    }
}

pub(crate) fn answer_after_lost_claim<S: KeyStore + ?Sized>(
    store: &mut S,
    request: &KeyedRequest<'_>,
) -> Result<Outcome, Error> {
    let row = store.find_live_key(request.account_id, request.key)?;
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
            Err(Error::Database(e))
                if classify(&e) == Failure::Transient && tries < MAX_ATTEMPTS =>
            {
                tracing::warn!(error = %e, tries, "transient database error, retrying the transaction");
                tries += 1;
            }
            result => return result,
        }
    }
}

/// Deletes every expired key row, `batch` rows a statement; returns how many.
pub fn purge_expired<S: KeyStore + ?Sized>(
    store: &mut S,
    batch: i64,
) -> Result<usize, DieselError> {
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
