//! [`Policy::execute`]: which design runs a keyed request, at the top of
//! the crate (the designs below it never call back up).

use crate::decide::{Decision, Read, decide};
use crate::key_store::{KeyState, KeyStore, KeyedRequest};
use crate::operation::{Connections, Operation};
use crate::outcome::{Error, Outcome};
use crate::policy::{Mode, Policy};
use crate::{atomic, key_first, phases};

impl Policy {
    /// Runs `operation` at most once for `request`'s key. Without a foreign
    /// step: on one connection, in one transaction (atomic) or two
    /// (key-first); with one, in three phases, each on a connection of its
    /// own.
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
                connections.run(|store| atomic::execute::<C>(self, store, request, operation))
            }
            (false, Mode::KeyFirst) => {
                connections.run(|store| key_first::execute::<C>(self, store, request, operation))
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
    match decide(row, request.fingerprint.as_str(), Read::FastPath) {
        Decision::Answer(outcome) => Ok(Some(outcome)),
        Decision::Claim => Ok(None),
    }
}
