//! Named points inside the charge transaction where a fault can be injected.
//!
//! Production passes [`NoHooks`]; the demo and the tests pass their own, so the
//! charge and idempotency code never branches on "is this a demo".

use std::sync::Arc;

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

pub trait TxHooks: Send + Sync {
    /// Called inside the transaction after the operation's writes (the
    /// charge) and before the key row is completed and the transaction
    /// commits. Returning an error rolls the whole transaction back.
    fn after_operation(&self) -> Result<(), HookFailure> {
        Ok(())
    }

    /// Key-first design only: called after the key row is committed and
    /// before the operation's transaction begins (the crash window).
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
