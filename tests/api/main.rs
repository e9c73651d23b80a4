//! Integration tests: the real app on a random port, over real HTTP, against
//! a fresh PostgreSQL database per test (dropped afterwards).

mod charges;
mod contract;
mod demo;
mod ecosystem;
mod fuzz;
mod helpers;
mod idempotency;
mod key_first;
mod startup;
mod validation;
