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
//! store/        the database: traits, one macro per table family over both backends, the pool
//! payments/     the domain: charges and refunds as values, their field errors, the test cards,
//!               what an event is (its JSON and id)
//! http/         the edge: accounts, limits, problems, the write pipeline, the handlers
//!               (webhooks/: endpoints, events, deliveries) and the operations they run
//!               under a key, their OpenAPI schemas
//! network/      the card network itself, a service of its own (`charges network`,
//!               simulator.rs), built on the edge
//! webhooks/     below the edge: where a webhook may go, its settings, its signed delivery
//! demo/         demo mode: the teaching page's faults, views and sandbox
//! conformance/  a checker of any API's Idempotency-Key handling, from outside
//! openapi.rs    the contract, generated from every handler (the demo's too)
//! app/          the application: builds the pool, the networks, the sandbox, the routes;
//!               recovers keys left in progress through those routes
//! config.rs     settings from the environment
//! network_client.rs  the card network's client, which a charge calls (a leaf)
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
pub mod network_client;
pub mod openapi;
pub mod payments;
pub mod store;
pub mod telemetry;
pub mod webhooks;

/// The Idempotency-Key protocol: a library of its own (`crates/idempotency`).
pub use idempotency;

/// The modules from the bottom up: each may use only modules of the layers
/// below its own. A name is a path (`http`, `network`); a module belongs to
/// the longest name its path starts with. Every name is a folder or a file
/// of `src/`, so a folder never imports one above it.
pub const LAYERS: &[&[&str]] = &[
    // A client of any API over HTTP: it uses nothing of the crate.
    &["conformance"],
    // The domain: charges and refunds as validated values, the test payment
    // methods and their declines, what an event is. Nothing of HTTP or SQL.
    &["payments"],
    // Leaves: the metrics registry; the card network's client (a charge's
    // foreign step), below the edge while the network itself is above it.
    &["metrics", "network_client"],
    // The database (the key table's is the protocol crate's); logging.
    &["store", "telemetry"],
    // Webhooks below the edge: the target rule, the settings, the sender
    // and its HTTP client.
    &["webhooks"],
    // Settings (they name the protocol's modes, the pool's size and the
    // webhooks' targets).
    &["config"],
    // The edge: problems, accounts, limits, the write pipeline, the API's
    // handlers (the webhooks' included) and the operations they run under
    // a key.
    &["http"],
    // The card network itself, a service of its own on the edge.
    &["network"],
    &["demo"],
    // The contract, from every handler's (the demo's included).
    &["openapi"],
    // The application: builds the pool, the sandbox and the routes, and
    // recovers keys left in progress through those routes.
    &["app"],
];
