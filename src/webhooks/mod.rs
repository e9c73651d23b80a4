//! Events and signed webhooks (issue #48): the outbox written in a charge's
//! transaction, the endpoints an account registers, and their delivery.
//!
//! ```text
//! events.rs   an event's JSON and id, the same bytes for the API and every delivery
//! settings.rs WEBHOOK_*: which targets are allowed, the retry schedule
//! targets.rs  where a webhook may be sent: no loopback, private, link-local,
//!             multicast or unspecified address unless the operator allows it
//! registration.rs what an endpoint may be: its body, its URL, its target
//! endpoints.rs   /webhook_endpoints: register (keyed), list, get, delete,
//!                rotate the secret (keyed)
//! events_api.rs  GET /events, GET /events/{id}
//! ```
//!
//! The outbox itself, the event written in the charge's transaction, is
//! the store's (`store::webhooks`), called by the charge and refund writes.

pub mod endpoints;
pub mod events;
pub mod events_api;
pub mod registration;
pub mod settings;
pub mod targets;
