//! The protocol's named points, where an application counts what happened
//! and a test or a teaching demo injects a fault: before COMMIT, after a
//! key-first key's commit, a key that was found taken, keys purged.
//!
//! Production installs none, or only its metrics. A fault is the hook's own
//! error type, boxed: the protocol rolls the transaction back and returns
//! it as [`Error::Hook`](crate::Error::Hook), and what it means (a 500, a
//! 503) is the application's to say, by downcasting to its type.

use std::time::Duration;

/// What a hook returns to stop the request.
pub(crate) type HookError = Box<dyn std::error::Error + Send + Sync>;

/// Every method does nothing by default: implement the ones you need and
/// add the hooks to [`Policy::hooks`](crate::Policy::hooks).
pub trait Hooks: Send + Sync {
    /// Inside the transaction, after the operation's writes, before its
    /// response is stored and committed (the atomic design; the key-first
    /// design's second transaction; a foreign step's phase 3). An `Err`
    /// rolls all of it back.
    fn before_commit(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }

    /// Key-first and phases only: after the key row is committed and before
    /// the operation (the window a crash leaves an in-progress key in). An
    /// `Err` leaves the key in progress until its lease runs out.
    fn after_key_committed(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }

    /// A key's INSERT found a row (committed, or a concurrent duplicate's
    /// it waited for): how long that took.
    fn key_conflict(&self, _waited: Duration) {}

    /// Expired key rows deleted by one statement of the purge.
    fn keys_purged(&self, _rows: u64) {}
}
