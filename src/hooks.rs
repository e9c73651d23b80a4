//! Named points inside the charge transaction where a fault can be injected.
//!
//! Production passes [`NoHooks`]; the demo and the tests pass their own, so the
//! charge and idempotency code never branches on "is this a demo".

use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
#[error("injected failure: {0}")]
pub struct HookFailure(pub String);

pub trait TxHooks: Send + Sync {
    /// Called after the charge and the stored response are written, right
    /// before COMMIT. Returning an error rolls the whole transaction back.
    fn before_commit(&self) -> Result<(), HookFailure> {
        Ok(())
    }
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
