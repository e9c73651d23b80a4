//! The Idempotency-Key protocol (IETF draft-ietf-httpapi-idempotency-key-header-07)
//! for a Diesel service: any operation that writes and answers runs at most
//! once per (account, key), on the caller's own connections.
//!
//! ```text
//! atomic.rs     the article's design: one transaction
//!                 1. register the key   INSERT … ON CONFLICT (account_id, key) DO NOTHING
//!                 2. run the operation  on the same transaction
//!                 3. store its response in the key row
//!               a concurrent duplicate waits on the key's index entry, then replays
//! key_first.rs  the key committed first: a duplicate gets 409 at once; a key
//!               left by a dead worker is taken over once its lease runs out
//! phases.rs     an operation with a foreign step (a call no rollback undoes):
//!               key, call (no transaction, no connection), writes + response
//! recovery.rs   finish or close keys left in progress; purge expired keys
//! webhook/      the other direction: a delivery's signature checked, and its
//!               event's id recorded in the transaction of the receiver's effect
//! ```
//!
//! This file is the floor the designs stand on: the [`Policy`] (the
//! server's choices) and its [`Policy::execute`], the [`Operation`] a caller
//! runs under a key, the answers ([`Outcome`], [`Error`]), and the steps
//! every design shares: `register`, `store_response`, `run_and_store`,
//! the answer after a lost claim, and transient retries.
//!
//! The key table is a trait ([`KeyStore`], with [`Transactional`]),
//! implemented here for Diesel's `PgConnection` (feature `postgres`) and
//! `SqliteConnection` (feature `sqlite`) over the table in `sql/`, and
//! `Connections` over an r2d2 pool (feature `r2d2`). The HTTP header's
//! parser works on bytes ([`IdempotencyKey::parse`]); actix-web's headers
//! and responses are behind the feature `actix`. Metrics reach the
//! application through [`Metrics`], a trait it implements if it wants them.

#[cfg(feature = "actix")]
pub mod actix;
mod atomic;
pub mod decide;
pub mod failure;
pub mod fingerprint;
pub mod hooks;
pub mod key;
mod key_first;
pub mod key_store;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod key_table;
pub mod metrics;
mod phases;
#[cfg(feature = "r2d2")]
pub mod pool;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod recent;
mod recovery;
#[cfg(feature = "sqlite")]
pub mod sqlite;
#[cfg(test)]
mod tests;
pub mod webhook;

use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::result::Error as DieselError;

pub use decide::{Decision, Read, decide};
pub use fingerprint::Fingerprint;
pub use hooks::{HookFailure, NoHooks, RequestHooks, TxHooks};
pub use key::{IdempotencyKey, KeyError};
pub use key_store::{
    Claim, KeyRecord, KeyState, KeyStore, KeyedRequest, NewKey, NewKeyStatus, SavedResponse,
    StuckKey, Transactional,
};
pub use metrics::{Metrics, NoMetrics};
pub use recent::RecentKeys;

use failure::{Failure, classify};

/// How often a transaction that failed with a serialization failure or a
/// deadlock is tried in all before the error is returned.
pub const MAX_ATTEMPTS: u32 = 3;

/// Where the key row is committed relative to the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "atomic" => Ok(Mode::Atomic),
            "key-first" => Ok(Mode::KeyFirst),
            other => Err(format!("{other:?}: expected atomic or key-first")),
        }
    }
}

/// The server's choices, held once and used for every keyed request.
#[derive(Clone)]
pub struct Policy {
    pub mode: Mode,
    /// How long a key is remembered.
    pub ttl: Duration,
    /// How long a key in progress is protected before others may take it
    /// over (key-first; a foreign step's phases; recovery).
    pub lease: Duration,
    /// Keys completed here lately, read first in atomic mode (see `recent`).
    pub recent: Option<Arc<RecentKeys>>,
    /// What runs at the named points of the transactions: none but in a
    /// test or a demo.
    pub hooks: RequestHooks,
    pub metrics: Arc<dyn Metrics>,
}

impl Policy {
    /// `mode`, keys kept 24 hours, a 30-second lease, no hint, no hooks, no metrics.
    pub fn new(mode: Mode) -> Policy {
        Policy {
            mode,
            ttl: Duration::from_secs(24 * 60 * 60),
            lease: Duration::from_secs(30),
            recent: None,
            hooks: RequestHooks::default(),
            metrics: Arc::new(NoMetrics),
        }
    }

    /// Runs `operation` at most once for `request`'s key. Without a foreign
    /// step: on one connection, in one transaction (atomic) or two
    /// (key-first); with one, in three phases, each on a connection of its
    /// own (`phases`).
    pub fn execute<C: Connections>(
        &self,
        connections: &mut C,
        request: &KeyedRequest<'_>,
        operation: &mut dyn Operation<C::Store>,
    ) -> Result<Outcome, Error> {
        let foreign = operation.foreign_step().is_some();
        // Atomic mode reads nothing before its transaction, so a retry would
        // cost what its first request cost. A key completed here lately is
        // most likely a retry's: read its row first (key-first and the
        // phases always do).
        let hint = self
            .recent
            .as_deref()
            .filter(|_| self.mode == Mode::Atomic && !foreign);
        if let Some(recent) = hint
            && recent.contains(request.account_id, request.key)
            && let Some(outcome) = read_completed(connections, request)?
        {
            return Ok(outcome);
        }
        let done = match (foreign, self.mode) {
            (true, _) => phases::execute(self, connections, request, operation),
            (false, Mode::Atomic) => {
                connections.run(|store| atomic::execute(self, store, request, operation))
            }
            (false, Mode::KeyFirst) => {
                connections.run(|store| key_first::execute(self, store, request, operation))
            }
        };
        match done {
            Ok(outcome @ (Outcome::Executed(_) | Outcome::Replayed(_))) => {
                if let Some(recent) = hint {
                    recent.remember(request.account_id, request.key);
                }
                Ok(outcome)
            }
            // Its first request is still running: the draft's answer, not a hang.
            Err(Error::KeyLocked) => Ok(Outcome::InFlight),
            done => done,
        }
    }

    /// The key row `request` writes as `status`, under this policy.
    fn new_key<'a>(
        &self,
        request: &'a KeyedRequest<'a>,
        foreign_step: Option<&'a str>,
        status: NewKeyStatus<'a>,
    ) -> NewKey<'a> {
        NewKey {
            request,
            ttl: self.ttl,
            lease: self.lease,
            foreign_step,
            status,
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

    /// The response, if it is known before anything is written and cannot
    /// depend on what the database holds (a new charge's 201: its id and
    /// time are chosen first; not a refund's, which may find too little
    /// left): then the key row is written completed in the statement that
    /// registers it, one statement fewer. [`run`](Operation::run) must
    /// answer exactly it.
    fn known_response(&self) -> Option<&SavedResponse> {
        None
    }

    /// The call to another service that this operation makes first, if any
    /// (see [`ForeignStep`]): then it runs in phases.
    fn foreign_step(&mut self) -> Option<&mut dyn ForeignStep> {
        None
    }
}

/// Any closure over the transaction is an operation whose response is not
/// known in advance.
impl<Tx: ?Sized, F: FnMut(&mut Tx) -> Result<SavedResponse, Error>> Operation<Tx> for F {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, Error> {
        self(tx)
    }
}

/// A call to another service that no rollback undoes (the card network's
/// authorization): never made inside a transaction nor holding a
/// connection (brandur's atomic phases, see `phases`).
pub trait ForeignStep {
    /// The service's name, kept in the key row: only a worker that calls
    /// the same service finishes the key if this one dies (`recovery`).
    fn name(&self) -> &str;

    /// The call, under a key derived from the client's, so that asking
    /// again is a replay there. An `Err` stores nothing.
    fn call(&mut self) -> Result<(), Error>;

    /// Once the operation's answer is stored: if that answer means the
    /// call's effect will never be used (a charge refused because its
    /// account was revoked meanwhile), undo it there, with a compensating
    /// call that is itself idempotent.
    fn settle(&mut self, _stored: &SavedResponse) -> Result<(), Error> {
        Ok(())
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
    /// Our lease was taken over before we completed the row.
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
    policy: &Policy,
    tx: &mut S,
    row: &NewKey<'_>,
) -> Result<Registration, Error> {
    let request = row.request;
    let started = Instant::now();
    let inserted = tx.insert_key(row).map_err(|e| match classify(&e) {
        Failure::LockTimeout => Error::KeyLocked,
        _ => Error::Database(e),
    })?;
    if let Some(claim) = inserted {
        return Ok(Registration::Claimed(claim));
    }
    // A round trip when the row was committed already; the first request's
    // whole transaction when it was not (a concurrent duplicate).
    policy.metrics.key_conflict(started.elapsed());
    let found = tx.find_live_key(request.account_id, request.key)?;
    if let Decision::Answer(outcome) = decide(found, request.fingerprint, Read::FastPath) {
        return Ok(Registration::Answered(outcome));
    }
    if let Some(claim) = tx.take_over_key(row)? {
        return Ok(Registration::Claimed(claim));
    }
    Ok(Registration::Answered(answer_after_lost_claim(
        tx, request,
    )?))
}

/// The operation's writes and its response stored under `claim`, in one
/// transaction (key-first's second; a foreign step's phase 3).
pub(crate) fn run_and_store<S: Transactional + ?Sized>(
    policy: &Policy,
    store: &mut S,
    claim: &Claim,
    operation: &mut dyn Operation<S>,
) -> Result<SavedResponse, Error> {
    with_transient_retries(|| {
        store.transaction(|tx| {
            let response = operation.run(tx)?;
            policy.hooks.get().before_commit()?;
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

/// The answer when the row we claimed (or meant to) is someone else's now:
/// theirs, as the row says.
fn answer_after_lost_claim<S: KeyStore + ?Sized>(
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
