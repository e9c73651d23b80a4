//! The receiving side of a webhook, and the signature both sides share.
//!
//! A webhook is delivered **at least once**: the sender retries when the
//! receiver's answer is lost, exactly as a client retries a charge whose
//! answer was lost. The receiver's fix is the same construction as the
//! idempotency key: record the event's id under a unique constraint in the
//! transaction of its own effect, and answer a redelivery 2xx without doing
//! anything again.
//!
//! ```text
//! signature.rs  Standard Webhooks 1.0: webhook-id, webhook-timestamp and
//!               webhook-signature "v1,<base64 HMAC-SHA256 of id.timestamp.body>"
//! headers.rs    the three headers read from a request, and verify_request:
//!               what a receiver checks before it records or does anything
//! inbox.rs      receive: the event's id under a primary key, in the
//!               transaction of the receiver's effect (First / Duplicate)
//! ```

pub mod headers;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod inbox;
pub mod signature;

pub use headers::{Headers, RequestError, unix_now, verify_request};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use inbox::{InboxStore, Received, purge, receive};

/// The inbox's `CREATE` statements on PostgreSQL
/// (`sql/postgres_inbox.sql`), for a migration of a receiver's (run once);
/// its Diesel table is `postgres::schema::webhook_inbox`.
#[cfg(feature = "postgres")]
pub const POSTGRES_INBOX: &str = include_str!("../../sql/postgres_inbox.sql");

/// The inbox's `CREATE` statements on SQLite (`sql/sqlite_inbox.sql`).
#[cfg(feature = "sqlite")]
pub const SQLITE_INBOX: &str = include_str!("../../sql/sqlite_inbox.sql");

pub use signature::{
    Secret, SecretError, SignatureError, TOLERANCE, sign, signature_header, verify,
};
