//! An operation with a foreign step (a call to another service that no
//! rollback undoes: the card network's authorization), in three phases, in
//! both modes.
//!
//! The rule, from brandur's "Implementing Stripe-like Idempotency Keys in
//! Postgres" (atomic phases; rocket-rides-atomic): **a foreign call never
//! runs inside a database transaction**. The work between two foreign calls
//! is one transaction, and each phase ends at a recovery point that a retry
//! or the recovery task resumes from. A call inside a transaction holds a
//! pooled connection idle, and the key row's lock, for as long as the other
//! service takes: with a network at 300 ms and 10 connections, at most ~33
//! charges a second, and every read queued behind them.
//!
//! ```text
//! phase 1  BEGIN; register the key in progress under a lease, with the
//!          request (its canonical path and body) and its account; COMMIT
//!          -> the connection goes back to the pool
//! phase 2  the foreign call, under a key derived from the client's
//!          (no transaction, no connection held)
//! phase 3  BEGIN; the operation's writes; its response stored, if the
//!          lease is still ours; COMMIT; then, if that answer means the
//!          foreign step's effect will never be used, undo it there
//! ```
//!
//! A failure in phase 2 releases the key if the lease is still ours (then
//! nothing was stored, and the retry runs as the first: the other service
//! replays under the derived key). If the lease was taken over meanwhile
//! (the recovery task, or the client's retry, after it ran out), the answer
//! is whatever the key's new holder makes of it: 409 while it runs, its
//! response once stored; never "nothing was stored".
//!
//! A duplicate that finds the key in progress holds no connection either:
//! atomic mode waits for the first request (polling with backoff, within
//! the request's deadline) and replays its response, as one transaction's
//! wait on the key's index entry would; key-first answers 409 at once.
//!
//! What an operation answers in phase 3 is its own: a charge whose account
//! was revoked meanwhile answers (and stores) a 403 instead of charging,
//! and its [`settle`](crate::Operation::settle) then voids the
//! authorization at the network, so that no hold stays behind that no
//! charge owns.

use std::time::{Duration, Instant};

use crate::decide::{Decision, Read, decide};
use crate::key_store::{Claim, KeyStore, KeyedRequest};
use crate::operation::{Connections, Operation};
use crate::outcome::{Error, Outcome};
use crate::policy::{Mode, Policy};
use crate::steps::{
    Registration, answer_after_lost_claim, register, run_and_store, with_transient_retries,
};

/// A waiting duplicate's first pause, and its longest.
const FIRST_POLL: Duration = Duration::from_millis(25);
const LONGEST_POLL: Duration = Duration::from_millis(400);
/// A waiting duplicate stops this long before its request's deadline, so
/// that it answers 409 (retry) rather than being cut off by the deadline.
const POLL_MARGIN: Duration = Duration::from_millis(250);

pub(crate) fn execute<C: Connections>(
    policy: &Policy,
    connections: &mut C,
    request: &KeyedRequest<'_>,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Outcome, Error> {
    // Phase 1, the row naming the foreign step it is registered for.
    let step = operation.foreign_step().map(str::to_owned);
    let claim = match register_or_wait(policy, connections, request, step.as_deref())? {
        Registration::Claimed(claim) => claim,
        Registration::Answered(outcome) => return Ok(outcome),
    };
    policy.hook(|h| h.after_key_committed())?;
    complete(policy, connections, &claim, request, operation)
}

/// Phase 1: one short transaction registers the key in progress. Atomic: a
/// key another request holds in progress is waited for, with no connection
/// held between the looks, until it is completed (replayed), released (ours
/// to run) or its lease runs out (ours to take over), or the deadline nears.
fn register_or_wait<C: Connections>(
    policy: &Policy,
    connections: &mut C,
    request: &KeyedRequest<'_>,
    step: Option<&str>,
) -> Result<Registration, Error> {
    let new_key = policy.new_key(request, step, None);
    let mut pause = FIRST_POLL;
    loop {
        let registered = connections.run(|store| {
            // A look without a lock first, as key-first's fast path: a key
            // another request holds is answered (or waited for) without
            // queueing for a write (on SQLite, the database's write lock).
            let row = store.find_live_key(request.account_id, request.key)?;
            if let Decision::Answer(outcome) =
                decide(row, request.fingerprint.as_str(), Read::FastPath)
            {
                return Ok(Registration::Answered(outcome));
            }
            with_transient_retries(|| C::transaction(store, |tx| register(policy, tx, &new_key)))
        });
        let registered = match registered {
            Err(Error::KeyLocked) => Registration::Answered(Outcome::InFlight),
            registered => registered?,
        };
        let waits = policy.mode == Mode::Atomic
            && matches!(registered, Registration::Answered(Outcome::InFlight))
            && Instant::now() + pause + POLL_MARGIN < connections.until();
        if !waits {
            return Ok(registered);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(LONGEST_POLL);
    }
}

/// Phases 2 and 3, for a claim this worker holds (a new key, or one taken
/// over by a retry or by `recovery`).
pub(crate) fn complete<C: Connections>(
    policy: &Policy,
    connections: &mut C,
    claim: &Claim,
    request: &KeyedRequest<'_>,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Outcome, Error> {
    // Phase 2: no transaction, no connection.
    let called = operation.call();
    if let Err(error) = called {
        return connections.run(|store| give_up(store, claim, request, error));
    }
    // Phase 3.
    let written = connections.run(|store| run_and_store::<C>(policy, store, claim, operation));
    match written {
        Ok(response) => {
            // The answer is stored: if it means the foreign step's effect
            // will never be used (a revoked account), undo it there.
            if let Err(e) = operation.settle(&response) {
                tracing::error!(error = %e, account = request.account_id, "could not undo a foreign step whose key will never use it; undo it by hand");
            }
            Ok(Outcome::Executed(response))
        }
        Err(Error::LeaseLost) => connections.run(|store| answer_after_lost_claim(store, request)),
        Err(error) => connections.run(|store| give_up(store, claim, request, error)),
    }
}

/// After a failure in phase 2 or 3: the key released if the lease is still
/// ours, and the failure told (nothing was stored; the retry runs as the
/// first). If it is not ours any more, someone else may still complete it:
/// the answer is theirs.
fn give_up<S: KeyStore + ?Sized>(
    store: &mut S,
    claim: &Claim,
    request: &KeyedRequest<'_>,
    error: Error,
) -> Result<Outcome, Error> {
    match store.release_key(claim) {
        Ok(0) => answer_after_lost_claim(store, request),
        Ok(_) => Err(error),
        Err(release_error) => {
            // The key stays in progress until its lease runs out, and then
            // it may be completed: "nothing was stored" would not be true.
            tracing::warn!(error = %release_error, cause = %error, "could not release the idempotency key");
            Err(Error::Database(release_error))
        }
    }
}
