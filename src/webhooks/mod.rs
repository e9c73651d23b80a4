//! Events and signed webhooks (issue #48): the outbox written in a charge's
//! transaction, the endpoints an account registers, and their delivery.
//!
//! ```text
//! events.rs   an event's JSON and id, the same bytes for the API and every delivery
//! settings.rs WEBHOOK_*: which targets are allowed, the retry schedule
//! targets.rs  where a webhook may be sent: no loopback, private, link-local,
//!             multicast or unspecified address unless the operator allows it
//! ```

pub mod events;
pub mod settings;
pub mod targets;
