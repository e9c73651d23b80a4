//! The design that commits the key first, in two transactions.
//!
//! ```text
//! 0. read the key: a completed row is replayed, a live in-progress one is 409
//! 1. BEGIN; register the key, in progress under a lease; COMMIT
//! 2. BEGIN; run the operation; store its response if the lease is still ours; COMMIT
//!    on failure: release the key, so that the retry runs as the first
//! ```
//!
//! A concurrent request sees the committed in-progress row and gets
//! `InFlight` (409) at once instead of waiting. The price is the window
//! between the two transactions: if the process dies there, the row stays
//! in progress until its lease runs out, and then the next request with the
//! same key, or `recovery`, takes it over (`KeyStore::take_over_key`).

use crate::decide::{Decision, Read, decide};
use crate::key_store::{Claim, KeyStore, KeyedRequest};
use crate::operation::{Connections, Operation};
use crate::outcome::{Error, Outcome};
use crate::policy::Policy;
use crate::steps::{
    Registration, answer_after_lost_claim, register, run_and_store, with_transient_retries,
};

pub(crate) fn execute<C: Connections>(
    policy: &Policy,
    store: &mut C::Store,
    request: &KeyedRequest<'_>,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Outcome, Error> {
    // 0. A completed key never changes until it expires, so its replay
    //    needs one indexed read and no lock; an in-progress row under a live
    //    lease is answered the same way, without queueing.
    let row = store.find_live_key(request.account_id, request.key)?;
    if let Decision::Answer(outcome) = decide(row, request.fingerprint.as_str(), Read::FastPath) {
        return Ok(outcome);
    }
    // 1. Register the key in progress and commit: from now on a concurrent
    //    request sees it and gets 409.
    let new_key = policy.new_key(request, None, None);
    let registered =
        with_transient_retries(|| C::transaction(store, |tx| register(policy, tx, &new_key)))?;
    let claim = match registered {
        Registration::Claimed(claim) => claim,
        Registration::Answered(outcome) => return Ok(outcome),
    };
    policy.hook(|h| h.after_key_committed())?;
    // 2. Run the operation and store its response, if the lease is still
    //    ours, in one transaction.
    run_claimed::<C>(policy, store, &claim, request, operation)
}

/// The second transaction, for a claim this worker holds (a new key, or
/// one `recovery` took over): the operation and its stored response, or,
/// on failure, the claim released.
pub(crate) fn run_claimed<C: Connections>(
    policy: &Policy,
    store: &mut C::Store,
    claim: &Claim,
    request: &KeyedRequest<'_>,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Outcome, Error> {
    match run_and_store::<C>(policy, store, claim, operation) {
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
