//! Integration tests: the real app on a random port, over real HTTP, against
//! a fresh database per test (dropped afterwards): an SQLite file always, and
//! a PostgreSQL database too when `TEST_DATABASE_URL` is set.

mod accounts;
mod article;
mod charges;
mod conformance;
mod contract;
mod database;
mod declines;
mod demo;
mod demo_network;
mod demo_receiver;
mod demo_walls;
mod deploy;
mod early_close;
mod ecosystem;
mod events;
mod fuzz;
mod hosts;
mod idempotency;
mod key_first;
mod key_table;
mod keyless;
mod limits;
mod logs;
mod network;
mod network_answers;
mod network_keys;
mod paging;
mod phases;
mod problem_cases;
mod problem_types;
mod recovery;
mod refunds;
mod replays;
mod rooms;
mod sandboxes;
mod secrets;
mod startup;
mod telemetry;
mod validation;
mod webhook_endpoints;
mod webhook_targets;
mod webhooks_delivery;
mod webhooks_end_to_end;

#[path = "../support/mod.rs"]
mod support;

/// Says, in the test list, that only the SQLite half ran.
#[cfg(not(postgres_tests))]
#[test]
#[ignore = "TEST_DATABASE_URL is not set: the PostgreSQL half of the suite was not run"]
fn postgresql_half() {}
