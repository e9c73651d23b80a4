//! Keys left behind: finished, closed, or purged.
//!
//! A key stays in progress when its worker died between key-first's two
//! transactions, or between the phases of a foreign step. Once its lease
//! has run out, [`Policy::recover`] takes it over and runs the operation
//! (rebuilt by the caller from the request the row kept) as that worker
//! would have; [`Policy::close_unrecoverable`] gives one the caller cannot
//! rebuild a stored terminal answer instead. Expired keys of every kind are
//! deleted by [`Policy::purge_expired`], a batch a statement.

use diesel::result::Error as DieselError;

use crate::key_first::run_claimed;
use crate::key_store::{KeyStore, KeyedRequest, SavedResponse};
use crate::operation::{Connections, Operation};
use crate::outcome::{Error, Outcome};
use crate::phases;
use crate::policy::Policy;
use crate::steps::with_transient_retries;

impl Policy {
    /// Finishes a stuck key (see the module's doc), foreign step included.
    /// Whether it may still act for the key's account is the operation's to
    /// check, in its writes. `Ok(None)`: another instance, or the client's
    /// own retry, took it first; the row lock lets only one do it.
    pub fn recover<C: Connections>(
        &self,
        connections: &mut C,
        request: &KeyedRequest<'_>,
        operation: &mut dyn Operation<C::Store>,
    ) -> Result<Option<SavedResponse>, Error> {
        let step = operation.foreign_step().map(str::to_owned);
        let new_key = self.new_key(request, step.as_deref(), None);
        let claimed = connections.run(|store| {
            with_transient_retries(|| C::transaction(store, |tx| Ok(tx.take_over_key(&new_key)?)))
        })?;
        let Some(claim) = claimed else {
            return Ok(None);
        };
        let outcome = match step {
            Some(_) => phases::complete(self, connections, &claim, request, operation)?,
            None => connections
                .run(|store| run_claimed::<C>(self, store, &claim, request, operation))?,
        };
        match outcome {
            Outcome::Executed(response) => Ok(Some(response)),
            _ => Ok(None),
        }
    }

    /// Gives a stuck key whose request cannot be run again (the caller
    /// cannot rebuild it) a stored terminal answer, `response`, so that it
    /// stops being found as stuck. `step`: the foreign step the row names
    /// ([`StuckKey::foreign_step`](crate::StuckKey::foreign_step)), as the takeover rule asks. `false`:
    /// someone else took it first.
    pub fn close_unrecoverable<C: Connections>(
        &self,
        connections: &mut C,
        request: &KeyedRequest<'_>,
        step: Option<&str>,
        response: &SavedResponse,
    ) -> Result<bool, Error> {
        let new_key = self.new_key(request, step, Some(response));
        connections.run(|store| {
            with_transient_retries(|| {
                C::transaction(store, |tx| Ok(tx.take_over_key(&new_key)?.is_some()))
            })
        })
    }

    /// Deletes every expired key row, `batch` rows a statement; returns how many.
    pub fn purge_expired<S: KeyStore + ?Sized>(
        &self,
        store: &mut S,
        batch: i64,
    ) -> Result<usize, DieselError> {
        let mut total = 0;
        loop {
            let n = store.purge_expired_keys(batch)?;
            self.hooks.iter().for_each(|h| h.keys_purged(n as u64));
            total += n;
            if (n as i64) < batch {
                return Ok(total);
            }
        }
    }
}
