//! Events and signed webhooks (issue #48): the outbox written in a charge's
//! transaction, the endpoints an account registers, and their delivery.
//!
//! ```text
//! targets.rs  where a webhook may be sent: no loopback, private, link-local,
//!             multicast or unspecified address unless the operator allows it
//! ```

pub mod targets;
