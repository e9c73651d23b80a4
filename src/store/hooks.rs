//! The seam at the named points of a request, where a fault can be
//! injected: the protocol's own points (before COMMIT, after a key-first
//! key's commit: `idempotency::Hooks`) and the application's (around a call
//! to the card network), and a keyless write's transaction.
//!
//! Production installs none; a test or the teaching demo installs its own.
//! A hook fails in the terms below; what a demo makes of them (an answer
//! thrown away, a worker that stops as a dead process would) is its own.

use std::sync::Arc;

use diesel::result::Error as QueryError;

use super::Store;

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

/// The protocol's points, and the application's own around a foreign call.
pub trait Hooks: idempotency::Hooks {
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

/// The hooks a state's requests run with: none by default (production),
/// or hooks installed by a test or a demo.
#[derive(Clone, Default)]
pub struct RequestHooks(Option<Arc<dyn Hooks>>);

impl RequestHooks {
    pub fn installed(hooks: Arc<dyn Hooks>) -> RequestHooks {
        RequestHooks(Some(hooks))
    }

    /// The installed hooks, if any.
    pub fn get(&self) -> Option<&dyn Hooks> {
        self.0.as_deref()
    }

    /// The installed hooks as the protocol runs them.
    pub fn protocol(&self) -> Option<Arc<dyn idempotency::Hooks>> {
        self.0
            .clone()
            .map(|hooks| hooks as Arc<dyn idempotency::Hooks>)
    }

    /// `before_commit`, for a transaction of the application's own.
    pub fn before_commit(&self) -> Result<(), WriteError> {
        self.get()
            .map_or(Ok(()), |h| h.before_commit())
            .map_err(WriteError::Hook)
    }

    pub fn before_remote_call(&self) -> Result<(), HookFailure> {
        self.get().map_or(Ok(()), |h| h.before_remote_call())
    }

    pub fn after_remote_call(&self) -> Result<(), HookFailure> {
        self.get().map_or(Ok(()), |h| h.after_remote_call())
    }
}

/// What stopped a write: the database, or a hook.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Database(#[from] QueryError),
    #[error(transparent)]
    Hook(Box<dyn std::error::Error + Send + Sync>),
}

/// Runs `write`, one statement that is atomic on its own (a charge without a
/// key, a new description), alone; or, when hooks are installed, in a
/// transaction with `before_commit` after it, so that the hook has a
/// transaction to act in as it has on every other write.
pub fn write_alone<T>(
    store: &mut dyn Store,
    hooks: &RequestHooks,
    write: impl FnOnce(&mut dyn Store) -> Result<T, QueryError>,
) -> Result<T, WriteError> {
    if hooks.get().is_none() {
        return Ok(write(store)?);
    }
    store.transaction(|tx| {
        let written = write(tx)?;
        hooks.before_commit()?;
        Ok(written)
    })
}
