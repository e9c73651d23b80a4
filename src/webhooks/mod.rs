//! Events and signed webhooks (issue #48): the outbox written in a charge's
//! transaction, the endpoints an account registers, and their delivery.
//!
//! ```text
//! settings.rs     WEBHOOK_*: which targets are allowed, the retry schedule
//! targets.rs      where a webhook may be sent: no loopback, private, link-local,
//!                 multicast or unspecified address unless the operator allows it
//! registration.rs what an endpoint may be: its body, its URL, its target
//! endpoints.rs    /webhook_endpoints: register (keyed), list, get, delete,
//!                 rotate the secret (keyed)
//! events_api.rs   GET /events, GET /events/{id}
//! client.rs       the bounded HTTP client deliveries are sent with (the target
//!                 rule applied to every address it connects to)
//! schedule.rs     what an answer makes of a delivery: delivered, retried (when), failed
//! sender.rs       the background task: claim, send signed, record (fenced)
//! deliveries.rs   GET /events/{id}/deliveries, POST /events/{id}/redeliver
//! ```
//!
//! What an event is, its JSON and id, is the domain's (`payments::events`);
//! the outbox itself, the event written in the charge's transaction, is
//! the store's (`store::webhooks`), called by the charge and refund writes.

pub mod client;
pub mod deliveries;
pub mod endpoints;
pub mod events_api;
pub mod registration;
pub mod schedule;
pub mod sender;
pub mod settings;
pub mod targets;
