//! charges: an idempotent demo payment API.
//!
//! `POST /charges` with an `Idempotency-Key` registers the key, creates the
//! charge and stores the 201 response in one database transaction, so a
//! retried request is answered from the stored response instead of charging
//! twice; refunds run under the same protocol (`idempotency::execute`). See
//! the README for the design.
//!
//! Modules import downward only, in the order of [`LAYERS`] (a test,
//! `tests/api/layers.rs`, reads every `crate::` path in `src/` and fails on
//! an upward or sideways one).

pub mod accounts;
pub mod api;
pub mod charges;
pub mod config;
pub mod conformance;
pub mod deadline;
pub mod demo;
pub mod domain;
pub mod hooks;
pub mod http;
pub mod idempotency;
pub mod json;
pub mod limits;
pub mod metrics;
pub mod network;
pub mod network_client;
pub mod openapi;
pub mod ops;
pub mod problem;
pub mod recovery;
pub mod refunds;
pub mod requests;
pub mod schema;
pub mod state;
pub mod store;
pub mod telemetry;

/// The modules from the bottom up: each may use only modules of the layers
/// below its own.
pub const LAYERS: &[&[&str]] = &[
    // A client of any API over HTTP: it uses nothing of the crate.
    &["conformance"],
    // Leaves: the schema, the validated domain types, strict JSON, the
    // metrics registry, the request deadline.
    &[
        "schema",
        "domain",
        "json",
        "metrics",
        "deadline",
        "network_client",
    ],
    // The database, one store per backend; logging.
    &["store", "telemetry"],
    // The seam around a request's writes, where the demo injects faults.
    &["hooks"],
    // The Idempotency-Key protocol, over the store.
    &["idempotency"],
    // Settings (they name the protocol's modes and the pool's size).
    &["config"],
    // HTTP: errors as problem+json, the route table, who is calling.
    &["problem"],
    // Fair capacity: rate limits and connection caps.
    &["limits"],
    &["http", "accounts"],
    &["state"],
    // What every write goes through: its checks, the protocol, the answer.
    &["requests"],
    // Handlers.
    &["charges", "ops"],
    &["refunds"],
    // The card network, a service of its own; and the recovery of keys
    // left in progress.
    &["network", "recovery"],
    &["demo"],
    &["openapi"],
    // The application: builds the pool, the sandbox and the routes.
    &["api"],
];
