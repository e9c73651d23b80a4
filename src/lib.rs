//! charges: an idempotent demo payment API.
//!
//! `POST /charges` with an `Idempotency-Key` registers the key, creates the
//! charge and stores the 201 response in one database transaction, so a
//! retried request is answered from the stored response instead of charging
//! twice. See the README for the design.

pub mod accounts;
pub mod api;
pub mod charges;
pub mod config;
pub mod db;
pub mod demo;
pub mod domain;
pub mod hooks;
pub mod idempotency;
pub mod metrics;
pub mod openapi;
pub mod problem;
pub mod schema;
pub mod telemetry;
