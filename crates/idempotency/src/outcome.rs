//! What [`Policy::execute`](crate::Policy::execute) answers: an
//! [`Outcome`] to send, or an [`Error`] that stored nothing.

use diesel::result::Error as DieselError;

use crate::key_store::SavedResponse;

/// The answer to a keyed request.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The operation ran now; send its response.
    Executed(SavedResponse),
    /// The key was completed earlier with the same request; send the stored
    /// response, marked with [`Outcome::REPLAYED_HEADER`].
    Replayed(SavedResponse),
    /// The key was used with a different request (draft: 422).
    Mismatch,
    /// The key's first request is still being processed (draft: 409).
    InFlight,
}

impl Outcome {
    /// The header a replayed response carries, `true` (Stripe's name; the
    /// draft names none), lowercase.
    pub const REPLAYED_HEADER: &'static str = "idempotent-replayed";

    /// The outcome's name, for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Executed(_) => "executed",
            Outcome::Replayed(_) => "replayed",
            Outcome::Mismatch => "mismatch",
            Outcome::InFlight => "in_flight",
        }
    }
}

/// Why a keyed request has no answer: nothing was stored under its key.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database failed (after the transient retries).
    #[error(transparent)]
    Database(#[from] DieselError),
    /// A hook stopped the request (see [`Hooks`](crate::policy::Hooks)): its own
    /// error, for the application to downcast.
    #[error(transparent)]
    Hook(Box<dyn std::error::Error + Send + Sync>),
    /// Our lease was taken over before we completed the row.
    #[error("the idempotency key's lease was taken over")]
    LeaseLost,
    /// An operation answered otherwise than the response it announced.
    #[error("the operation answered otherwise than it announced")]
    NotAsAnnounced,
    /// Something the operation depends on (another service) did not answer:
    /// nothing is stored; the client retries with the same key.
    #[error("{0}")]
    Dependency(String),
    /// Something the operation depends on, asked under a key derived from
    /// this request's, holds that key for another request: the client reused
    /// its key, and only the dependency saw the first use (its answer was
    /// lost here). Answered as the key's mismatch (422); nothing is stored,
    /// so the first request's retry still completes.
    #[error("the key was used with another request, as a dependency tells")]
    DependencyKeyReused,
    /// No connection for one of the protocol's transactions (the pool's
    /// timeout), or the request's deadline passed: the
    /// [`Connections`](crate::Connections)' own error.
    #[error(transparent)]
    Connection(Box<dyn std::error::Error + Send + Sync>),
    /// Registering the key waited longer than the database's lock timeout
    /// for a concurrent request that holds it: answered as in flight (409).
    #[error("a concurrent request held the idempotency key past the lock timeout")]
    KeyLocked,
}
