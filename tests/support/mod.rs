//! What every test binary (`tests/api`, `tests/reliability`, `tests/browser.rs`)
//! needs to talk to the app and look at its database, in one place. Each
//! includes it with `#[path = ".../support/mod.rs"] mod support;`.
//!
//! - [`db`]: [`TestDatabase`], a fresh database per test on either backend,
//!   dropped with the guard, and the SQL the tests check with. The only file
//!   here that uses the crate's database API.
//! - [`app`]: [`spawn_app`], the real application in this process on port 0,
//!   with its database: a [`TestApp`].
//! - [`server`]: [`ServerProcess`], the real `charges` binary as a child
//!   process, killed on drop, its log printed when the test fails.
//! - [`client`]: [`AppClient`], requests to the app that read as sentences
//!   (`app.charge(key, &body)` as the test account, a real one;
//!   `app.demo().charge(..)` as the demo's), and [`Captured`], what came back.
//!
//! Which backend a test runs on is a task-local set by [`on_both_backends!`]
//! (SQLite outside it).

// Each test binary uses a part of it.
#![allow(dead_code, unused_imports)]

pub mod app;
pub mod client;
pub mod db;
pub mod receiver;
pub mod server;
pub mod webhooks;

pub use app::{TestApp, spawn_app, spawn_app_with};
pub use client::{AppClient, Captured, DEMO_KEY, TEST_ACCOUNT, TEST_KEY, charge_body};
pub use db::{KeyRow, TestDatabase};
pub use server::ServerProcess;

/// A free port on loopback, for a process that must be told one (the port
/// may be taken again before it binds; the tests that use it start at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// What a child process printed, as text: its stdout, then its stderr.
pub fn printed(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Which database a test runs against. Every integration test of
/// `tests/api` runs on SQLite; with `TEST_DATABASE_URL` set at build time it
/// runs on PostgreSQL too (see `build.rs` and [`on_both_backends!`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestBackend {
    Sqlite,
    Postgres,
}

tokio::task_local! {
    pub static BACKEND: TestBackend;
}

/// The backend of the running test (SQLite outside `on_both_backends!`).
pub fn backend() -> TestBackend {
    BACKEND.try_with(|b| *b).unwrap_or(TestBackend::Sqlite)
}

/// Generates, for each `async fn name() { .. }`, a module `name` with the
/// tests `on_sqlite` and (when the PostgreSQL half is built) `on_postgres`.
#[macro_export]
macro_rules! on_both_backends {
    ($( $(#[doc = $doc:literal])* async fn $name:ident() $body:block )*) => {$(
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn on_sqlite() {
                $crate::support::BACKEND.scope($crate::support::TestBackend::Sqlite, async $body).await
            }

            #[cfg(postgres_tests)]
            #[tokio::test]
            async fn on_postgres() {
                $crate::support::BACKEND.scope($crate::support::TestBackend::Postgres, async $body).await
            }
        }
    )*};
}
