//! The Idempotency-Key protocol (IETF draft-ietf-httpapi-idempotency-key-header-07)
//! for a Diesel service: any operation that writes and answers runs at most
//! once per (account, key), on the caller's own connections.
//!
//! The article's design, in one transaction ([`Mode::Atomic`]):
//!
//! ```text
//! BEGIN
//!   1. register the key   INSERT … ON CONFLICT (account_id, key) DO NOTHING
//!   2. run the operation  on the same transaction
//!   3. store its response in the key row
//! COMMIT
//! a concurrent duplicate waits on the key's index entry, then replays
//! ```
//!
//! You write the [`Operation`]; [`Policy::execute`] does the rest and
//! answers an [`Outcome`]:
//!
//! ```no_run
//! use diesel::prelude::*;
//! use idempotency::{
//!     Connections, Error, KeyedRequest, Mode, Operation, Outcome, Policy, SavedResponse,
//! };
//! use serde_json::{Value, json};
//!
//! diesel::table! {
//!     orders (id) {
//!         id -> Int8,
//!         account_id -> Int8,
//!         amount -> Int8,
//!     }
//! }
//!
//! /// The writes under the key, and the answer stored with them.
//! struct CreateOrder {
//!     id: i64,
//!     account_id: i64,
//!     amount: i64,
//! }
//!
//! impl Operation<PgConnection> for CreateOrder {
//!     fn run(&mut self, tx: &mut PgConnection) -> Result<SavedResponse, Error> {
//!         diesel::insert_into(orders::table)
//!             .values((
//!                 orders::id.eq(self.id),
//!                 orders::account_id.eq(self.account_id),
//!                 orders::amount.eq(self.amount),
//!             ))
//!             .execute(tx)?;
//!         let body = json!({"id": self.id, "amount": self.amount});
//!         Ok(SavedResponse::json(201, Some(format!("/orders/{}", self.id)), body))
//!     }
//! }
//!
//! fn create_order(
//!     policy: &Policy,
//!     connections: &mut impl Connections<Store = PgConnection>,
//!     account_id: i64,
//!     key: &str,
//!     body: &Value,
//! ) -> Result<Outcome, Error> {
//!     let request = KeyedRequest::new(account_id, key, "POST", "/orders", body);
//!     let amount = body["amount"].as_i64().unwrap_or(0);
//!     let mut order = CreateOrder { id: 1, account_id, amount };
//!     policy.execute(connections, &request, &mut order)
//! }
//! # let _ = Policy::new(Mode::Atomic);
//! ```
//!
//! [`Outcome::Executed`] and [`Outcome::Replayed`] carry the response to
//! send (a replay byte for byte, marked [`Outcome::REPLAYED_HEADER`]);
//! [`Outcome::Mismatch`] is the draft's 422 and [`Outcome::InFlight`] its
//! 409. With the feature `actix`, an `Outcome` is an actix-web `Responder`.
//!
//! The files, from the top down:
//!
//! ```text
//! execute.rs    Policy::execute: which design runs a request
//! atomic.rs     the article's design above
//! key_first.rs  the key committed first: a duplicate gets 409 at once; a key
//!               left by a dead worker is taken over once its lease runs out
//! phases.rs     an operation with a foreign step (a call no rollback undoes):
//!               key, call (no transaction, no connection), writes + response
//! recovery.rs   finish or close keys left in progress; purge expired keys
//! steps.rs      what the designs share: register, store the response, retry
//! decide.rs     the one rule for answering from a key row
//! key_store.rs  the key table's contract, KeyStore; key_table.rs writes it once
//!               for postgres.rs and sqlite.rs
//! webhook/      the other direction: a delivery's signature checked, and its
//!               event's id recorded in the transaction of the receiver's effect
//! ```
//!
//! The key table is `sql/postgres.sql` or `sql/sqlite.sql`
//! ([`postgres::CREATE_TABLE`], [`sqlite::CREATE_TABLE`]).

#![warn(missing_docs)]

#[cfg(feature = "actix")]
mod actix;
mod atomic;
mod decide;
mod execute;
mod fingerprint;
mod key;
mod key_first;
mod key_store;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod key_table;
mod operation;
mod outcome;
mod phases;
mod policy;
#[cfg(feature = "r2d2")]
mod pool;
#[cfg(feature = "postgres")]
pub mod postgres;
mod recent;
mod recovery;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod steps;
#[cfg(test)]
mod tests;
pub mod webhook;

pub use fingerprint::Fingerprint;
pub use key::{IdempotencyKey, KeyError};
pub use key_store::{
    Claim, KeyRecord, KeyState, KeyStore, KeyedRequest, NewKey, SavedResponse, StuckKey,
    TakeoverRow,
};
pub use operation::{Connections, Operation};
pub use outcome::{Error, Outcome};
pub use policy::{Hooks, Mode, Policy};
#[cfg(feature = "r2d2")]
pub use pool::PoolConnections;
pub use recent::RecentKeys;
