//! The article's design: the key, the operation and its stored response in
//! one transaction.
//!
//! ```text
//! BEGIN
//!   1. register the key   INSERT … ON CONFLICT (account_id, key) DO NOTHING
//!                         (or take over an expired row)
//!   2. run the operation  on the same transaction
//!   3. store its response in the key row
//! COMMIT
//! the key had a row -> answer as the row says: Replayed | Mismatch | InFlight
//! ```
//!
//! The key row, the operation's writes and the stored response commit
//! together or not at all, so to everyone else a key row is completed or
//! absent, never in progress. A concurrent request with the same key waits
//! on the unique index entry until the first commits (then replays its
//! response) or rolls back (then runs as the first). On SQLite the wait is
//! for the database's write lock, at `BEGIN IMMEDIATE`.

use crate::key_store::KeyedRequest;
use crate::operation::{Connections, Operation};
use crate::outcome::{Error, Outcome};
use crate::policy::Policy;
use crate::steps::{Registration, register, store_response, with_transient_retries};

pub(crate) fn execute<C: Connections>(
    policy: &Policy,
    store: &mut C::Store,
    request: &KeyedRequest<'_>,
    operation: &mut dyn Operation<C::Store>,
) -> Result<Outcome, Error> {
    with_transient_retries(|| {
        C::transaction(store, |tx| {
            // 1. Register the key. A concurrent request with the same key
            //    makes this wait until it commits or rolls back. A response
            //    known in advance is written with the key, completed.
            let known = operation.known_response();
            let claim = match register(policy, tx, &policy.new_key(request, None, known))? {
                Registration::Claimed(claim) => claim,
                Registration::Answered(outcome) => return Ok(outcome),
            };
            // 2. Run the operation, on the same transaction.
            let response = operation.run(tx)?;
            policy.hook(|h| h.before_commit())?;
            // 3. Store its response.
            store_response(tx, &claim, &response, operation)?;
            Ok(Outcome::Executed(response))
        })
    })
}
