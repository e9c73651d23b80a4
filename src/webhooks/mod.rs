//! Signed webhooks below the edge (issue #48): where a webhook may be sent,
//! the WEBHOOK_* settings, and the delivery of events to the endpoints an
//! account registers.
//!
//! ```text
//! settings.rs     WEBHOOK_*: which targets are allowed, the retry schedule
//! targets.rs      where a webhook may be sent: no loopback, private, link-local,
//!                 multicast or unspecified address unless the operator allows it
//! client.rs       the bounded HTTP client deliveries are sent with (the target
//!                 rule applied to every address it connects to)
//! schedule.rs     what an answer makes of a delivery: delivered, retried (when), failed
//! sender.rs       the background task: claim, send signed, record (fenced)
//! ```
//!
//! What an event is, its JSON and id, is the domain's (`payments::events`);
//! the outbox itself, the event written in the charge's transaction, is
//! the store's (`store::webhooks`), called by the charge and refund writes;
//! the handlers of endpoints, events and deliveries are the edge's
//! (`http::webhooks`).

pub mod client;
pub mod schedule;
pub mod sender;
pub mod settings;
pub mod targets;
