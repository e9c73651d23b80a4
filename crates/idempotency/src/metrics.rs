//! What the protocol counts, for the application to record as it likes
//! (Prometheus, logs, nothing): a trait with empty defaults.

use std::time::Duration;

pub trait Metrics: Send + Sync {
    /// A key's INSERT found a row (committed, or a concurrent duplicate's
    /// it waited for): how long that took.
    fn key_conflict(&self, _waited: Duration) {}

    /// Expired key rows deleted by one statement of the purge.
    fn keys_purged(&self, _rows: u64) {}
}

/// Counts nothing.
pub struct NoMetrics;

impl Metrics for NoMetrics {}
