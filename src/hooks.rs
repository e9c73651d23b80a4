//! The seam around a request's writes, where a fault can be injected.
//!
//! Production passes [`NoHooks`]: the writes run as they are, and a charge
//! (with or without its key) is one statement that commits on its own. The
//! demo passes its own hooks, which wrap the same writes in a transaction to
//! hold it open or fail it, so the charge and idempotency code never
//! branches on "is this a demo".

use std::sync::Arc;

use crate::store::{QueryError, Store};

/// Why a hook stopped the transaction. Either way everything rolls back.
#[derive(Debug, thiserror::Error)]
pub enum HookFailure {
    /// An injected failure: the request answers 500.
    #[error("injected failure: {0}")]
    Injected(String),
    /// The hook had no capacity to do what it was asked: the request answers
    /// 503 with this text as its detail.
    #[error("{0}")]
    Overloaded(String),
}

/// What stopped the writes: the database, or a hook.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Database(#[from] QueryError),
    #[error(transparent)]
    Hook(#[from] HookFailure),
}

/// The writes of one request. `Ok(true)` when they wrote what the request
/// is for (the charge), `Ok(false)` when they found nothing to do (a
/// replay).
pub type Writes<'a> = dyn FnMut(&mut dyn Store) -> Result<bool, QueryError> + 'a;

/// Where, inside the transaction a hook wraps around the writes, its
/// faults act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// After the writes, before COMMIT, and only if they wrote: the key row
    /// and the charge exist, uncommitted (the atomic design; a charge
    /// without a key).
    AfterWrites,
    /// Before the writes: the operation itself is slow or fails while its
    /// key is committed in progress (the key-first design's second step,
    /// whose writes are one guarded statement at its end).
    BeforeWrites,
}

pub trait TxHooks: Send + Sync {
    /// Runs the request's writes. By default as they are, with no
    /// transaction around them (each statement is atomic on its own). A
    /// hook that must act inside the transaction wraps them in one and acts
    /// at `moment`; its error rolls everything back.
    fn run(
        &self,
        store: &mut dyn Store,
        moment: Moment,
        writes: &mut Writes<'_>,
    ) -> Result<(), WriteError> {
        let _ = moment;
        writes(store)?;
        Ok(())
    }

    /// Key-first design only: called after the key row is committed and
    /// before the operation's writes (the crash window).
    fn after_key_committed(&self) {}
}

pub struct NoHooks;

impl TxHooks for NoHooks {}

/// What a request carries in its extensions when something injected hooks.
#[derive(Clone)]
pub struct RequestHooks(pub Arc<dyn TxHooks>);

impl Default for RequestHooks {
    fn default() -> Self {
        RequestHooks(Arc::new(NoHooks))
    }
}
