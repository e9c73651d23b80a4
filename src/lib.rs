//! charges: an idempotent demo payment API.
//!
//! `POST /charges` with an `Idempotency-Key` registers the key, creates the
//! charge and stores the 201 response in one database transaction, so a
//! retried request is answered from the stored response instead of charging
//! twice; refunds run under the same protocol (`Policy::execute`). See
//! the README for the design.
//!
//! The protocol is a library of its own, `crates/idempotency` (the key, the
//! fingerprint, the three designs, recovery, the key table on both
//! backends); this crate is the application around it:
//!
//! ```text
//! store/        the database: traits, one file per table per backend, the pool
//! payments/     the operations: charges, refunds, their domain types, recovery
//! http/         the edge: accounts, limits, problems, the write pipeline
//! network/      the card network's client, which a charge calls
//! simulator.rs  the card network itself, a service of its own (`charges network`)
//! webhooks/     events (the outbox), endpoints and their signed delivery
//! demo/         demo mode: the teaching page's faults, views and sandbox
//! conformance/  a checker of any API's Idempotency-Key handling, from outside
//! openapi.rs    the contract, generated from every handler (the demo's too)
//! app/          the application: builds the pool, the networks, the sandbox, the routes
//! config.rs     settings from the environment
//! telemetry.rs, metrics.rs  logs and the metrics registry
//! ```
//!
//! Modules import downward only, in the order of [`LAYERS`] (a test,
//! `tests/rules/layers.rs`, reads every `crate::` path in `src/` and fails on
//! an upward or sideways one).

pub mod app;
pub mod config;
pub mod conformance;
pub mod demo;
pub mod http;
pub mod metrics;
pub mod network;
pub mod openapi;
pub mod payments;
pub mod simulator;
pub mod store;
pub mod telemetry;
pub mod webhooks;

/// The Idempotency-Key protocol: a library of its own (`crates/idempotency`).
pub use idempotency;

/// The modules from the bottom up: each may use only modules of the layers
/// below its own. A name is a path (`http::problem`); a module belongs to
/// the longest name its path starts with.
pub const LAYERS: &[&[&str]] = &[
    // A client of any API over HTTP: it uses nothing of the crate.
    &["conformance"],
    // The test payment methods and their declines (the network decides by them too).
    &["payments::methods"],
    // Leaves: the schema, strict JSON (and its field errors), the metrics
    // registry, the request deadline, the card network's client.
    &[
        "store::postgres::schema",
        "http::json",
        "metrics",
        "http::deadline",
        "network::client",
        "webhooks::targets",
        "webhooks::events",
    ],
    // The webhook settings (they name the target rule); the deliveries'
    // HTTP client (it applies the rule at each connect).
    &["webhooks::settings", "webhooks::client"],
    // The validated domain types (their field errors are the edge's).
    &["payments::domain"],
    // The database, one store per backend (the key table's is the protocol
    // crate's); logging.
    &["store", "telemetry"],
    // What an attempt makes of a delivery; the sender (claims, sends, records).
    &["webhooks::schedule"],
    &["webhooks::sender"],
    // Settings (they name the protocol's modes and the pool's size).
    &["config"],
    // HTTP: errors as problem+json, the route table, who is calling.
    &["http::problem"],
    // Lists' pages (their query and cursors).
    &["http::paging"],
    // Fair capacity: rate limits and connection caps.
    &["http::limits"],
    &["http", "http::accounts"],
    &["http::state"],
    // What every write goes through: its checks, the protocol, the answer.
    &["http::requests"],
    // The bodies' and parameters' schemas, for the document.
    &["payments::schemas", "webhooks::registration"],
    // The operations' handlers.
    &["payments::charges", "http::ops"],
    &["webhooks::events_api", "webhooks::endpoints"],
    &["payments::refunds"],
    // An event's deliveries and redelivery, at the edge.
    &["webhooks::deliveries"],
    // The card network, a service of its own (`charges network`); and the
    // recovery of keys left in progress.
    &["simulator", "payments::recovery"],
    &["demo"],
    // The contract, from every handler's (the demo's included).
    &["openapi"],
    // The application: builds the pool, the sandbox and the routes.
    &["app"],
];
