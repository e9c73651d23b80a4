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
//!
//! They run on PostgreSQL, the reference backend, only: built without
//! `TEST_DATABASE_URL` (see `build.rs`) this binary holds one ignored test
//! that says so.
#![cfg_attr(not(postgres_tests), allow(dead_code, unused_imports))]

#[path = "../support/mod.rs"]
mod support;

#[cfg(postgres_tests)]
mod client;
#[cfg(postgres_tests)]
mod ha;
#[cfg(postgres_tests)]
mod pg_node;
#[cfg(postgres_tests)]
mod proxy;
#[cfg(postgres_tests)]
mod server;

#[cfg(postgres_tests)]
mod crash;
#[cfg(postgres_tests)]
mod db_cut;
#[cfg(postgres_tests)]
mod deadlines;
#[cfg(postgres_tests)]
mod failover;
#[cfg(postgres_tests)]
mod instances;
#[cfg(postgres_tests)]
mod lossy_network;
#[cfg(postgres_tests)]
mod network;
#[cfg(postgres_tests)]
mod retry_storm;
#[cfg(postgres_tests)]
mod webhooks;

#[cfg(not(postgres_tests))]
#[test]
#[ignore = "TEST_DATABASE_URL is not set: the reliability tests run on PostgreSQL only"]
fn postgresql_only() {}

use std::future::Future;
use std::time::Duration;

/// Fails the test instead of hanging when `future` takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not finish within {limit:?}"),
    }
}
