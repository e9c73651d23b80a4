//! Reliability tests: real `charges` server processes (the binary Cargo built
//! for this package), real sockets on loopback, and one fresh PostgreSQL
//! database per test on `TEST_DATABASE_URL`.
//!
//! Each test injects one kind of failure — a retry storm, a lossy network, a
//! `kill -9` in the middle of open transactions, the database cutting the
//! app's connections, several instances sharing one database — and then checks
//! in the database that every idempotency key has exactly one charge (or, where
//! that is the honest expectation, none), that no charge lost its key row, and
//! that every client holds the charge id the database has for its key.
//!
//! Every loop is bounded in count and in time, every server process is killed
//! when its guard drops, and a failing test prints each server's stderr.

mod client;
mod db;
mod proxy;
mod server;

mod crash;
mod db_cut;
mod instances;
mod lossy_network;
mod retry_storm;

use std::future::Future;
use std::time::Duration;

/// Fails the test instead of hanging when `future` takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}
