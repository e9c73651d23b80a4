//! The seam at the named points of a request's transactions, where a fault
//! can be injected: before COMMIT, after a key-first key's commit, around
//! a call to another service.
//!
//! Production passes [`NoHooks`], whose every hook does nothing; the demo's
//! state carries hooks of its own (from `Demo-Fault`), and tests may pass
//! theirs. A hook fails in the terms below, which are the protocol's own;
//! what the demo makes of them (an answer thrown away, a worker that stops
//! as a dead process would) is done in `demo/`, around the handler or
//! inside its hooks, and the protocol names none of it.

use std::sync::Arc;

use diesel::result::Error as QueryError;

use crate::Transactional;

/// Why a hook stopped the request. Everything its transaction wrote rolls
/// back.
#[derive(Debug, thiserror::Error)]
pub enum HookFailure {
    /// An injected failure: the request answers 500 (key-first: its key is
    /// released, so the retry runs as the first).
    #[error("injected failure: {0}")]
    Injected(String),
    /// The hook had no capacity to do what it was asked: the request answers
    /// 503 with this text as its detail.
    #[error("{0}")]
    Overloaded(String),
    /// A service the request depends on did not answer (the request answers
    /// 503; nothing is stored).
    #[error("{0}")]
    Unavailable(String),
}

pub trait TxHooks: Send + Sync {
    /// Inside the transaction, after the operation's writes, before its
    /// response is stored and committed (the atomic design; a charge without
    /// a key; the key-first design's second transaction).
    fn before_commit(&self) -> Result<(), HookFailure> {
        Ok(())
    }

    /// Key-first only: after the key row is committed and before the
    /// operation (the window a crash leaves an in-progress key in).
    fn after_key_committed(&self) -> Result<(), HookFailure> {
        Ok(())
    }

    /// Before a call to another service (the card network), inside the
    /// operation.
    fn before_remote_call(&self) -> Result<(), HookFailure> {
        Ok(())
    }

    /// After that call answered (the other service did its part).
    fn after_remote_call(&self) -> Result<(), HookFailure> {
        Ok(())
    }
}

pub struct NoHooks;

impl TxHooks for NoHooks {}

/// The hooks a state's requests run with: none by default (production),
/// or hooks installed by a test or the demo.
#[derive(Clone, Default)]
pub struct RequestHooks(Option<Arc<dyn TxHooks>>);

impl RequestHooks {
    pub fn installed(hooks: Arc<dyn TxHooks>) -> RequestHooks {
        RequestHooks(Some(hooks))
    }

    /// The installed hooks, or [`NoHooks`].
    pub fn get(&self) -> &dyn TxHooks {
        self.0.as_deref().unwrap_or(&NoHooks)
    }
}

/// What stopped a write: the database, or a hook.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Database(#[from] QueryError),
    #[error(transparent)]
    Hook(#[from] HookFailure),
}

/// Runs `write`, one statement that is atomic on its own (a charge without a
/// key, a new description), alone; or, when hooks are installed, in a
/// transaction with
/// [`before_commit`](TxHooks::before_commit) after it, so that the hook has
/// a transaction to act in as it has on every other write.
pub fn write_alone<S: Transactional + ?Sized, T>(
    store: &mut S,
    hooks: &RequestHooks,
    write: impl FnOnce(&mut S) -> Result<T, QueryError>,
) -> Result<T, WriteError> {
    let Some(hooks) = &hooks.0 else {
        return Ok(write(store)?);
    };
    store.transaction(|tx| {
        let written = write(tx)?;
        hooks.before_commit()?;
        Ok(written)
    })
}
