//! The steps every design shares, below the designs: register the key,
//! store the response, run and store in one transaction, answer after a
//! lost claim, and retry a transaction the database aborted.

use std::time::Instant;

use diesel::result::{DatabaseErrorKind, Error as DieselError};

use crate::decide::{Decision, Read, decide};
use crate::key_store::{Claim, KeyStore, KeyedRequest, NewKey, SavedResponse};
use crate::operation::{Connections, Operation};
use crate::outcome::{Error, Outcome};
use crate::policy::Policy;

/// How often a transaction that failed with a serialization failure or a
/// deadlock is tried in all before the error is returned.
pub(crate) const MAX_ATTEMPTS: u32 = 3;

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
    let inserted = tx.insert_key(row).map_err(|e| match lock_timeout(&e) {
        true => Error::KeyLocked,
        false => Error::Database(e),
    })?;
    if let Some(claim) = inserted {
        return Ok(Registration::Claimed(claim));
    }
    // A round trip when the row was committed already; the first request's
    // whole transaction when it was not (a concurrent duplicate).
    let waited = started.elapsed();
    policy.hooks.iter().for_each(|h| h.key_conflict(waited));
    let found = tx.find_live_key(request.account_id, request.key)?;
    if let Decision::Answer(outcome) = decide(found, request.fingerprint.as_str(), Read::FastPath) {
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
pub(crate) fn run_and_store<C: Connections>(
    policy: &Policy,
    store: &mut C::Store,
    claim: &Claim,
    operation: &mut dyn Operation<C::Store>,
) -> Result<SavedResponse, Error> {
    with_transient_retries(|| {
        C::transaction(store, |tx| {
            let response = operation.run(tx)?;
            policy.hook(|h| h.before_commit())?;
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
pub(crate) fn answer_after_lost_claim<S: KeyStore + ?Sized>(
    store: &mut S,
    request: &KeyedRequest<'_>,
) -> Result<Outcome, Error> {
    let row = store.find_live_key(request.account_id, request.key)?;
    match decide(row, request.fingerprint.as_str(), Read::AfterLostClaim) {
        Decision::Answer(outcome) => Ok(outcome),
        Decision::Claim => unreachable!("after a lost claim every row is answered"),
    }
}

/// Runs `attempt` again after a serialization failure or a deadlock, which
/// PostgreSQL resolves by aborting one transaction that is safe to retry.
pub(crate) fn with_transient_retries<T>(
    mut attempt: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let mut tries = 1;
    loop {
        match attempt() {
            Err(Error::Database(e)) if transient(&e) && tries < MAX_ATTEMPTS => {
                tracing::warn!(error = %e, tries, "transient database error, retrying the transaction");
                tries += 1;
            }
            result => return result,
        }
    }
}

/// A serialization failure or a deadlock (40P01, which Diesel has no kind
/// for: its message is stable): the database aborted this transaction to
/// let another through, and the same transaction may simply run again.
fn transient(error: &DieselError) -> bool {
    match error {
        DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, _) => true,
        DieselError::DatabaseError(_, info) => info.message().starts_with("deadlock detected"),
        _ => false,
    }
}

/// PostgreSQL waited for a lock longer than `lock_timeout` (55P03): a
/// concurrent request holds the key.
fn lock_timeout(error: &DieselError) -> bool {
    matches!(error, DieselError::DatabaseError(_, info)
        if info.message().starts_with("canceling statement due to lock timeout"))
}
