//! Webhooks at the edge (issue #48): the handlers of the endpoints an
//! account registers, of its events and of their deliveries, with their
//! OpenAPI schemas.
//!
//! ```text
//! registration.rs what an endpoint may be: its body, its URL, its target
//! endpoints.rs    /webhook_endpoints: register (keyed), list, get, delete,
//!                 rotate the secret (keyed)
//! events_api.rs   GET /events, GET /events/{id}
//! deliveries.rs   GET /events/{id}/deliveries, POST /events/{id}/redeliver
//! ```
//!
//! What sits below the edge is `crate::webhooks` (the target rule, the
//! settings, the sender and its client); what an event is, `payments::events`.

pub mod deliveries;
pub mod endpoints;
pub mod events_api;
pub mod registration;
