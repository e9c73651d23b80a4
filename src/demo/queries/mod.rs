//! The demo sandbox's queries: the teaching page's views of the demo
//! account's rows, the unguarded table of the "check, then insert"
//! algorithm, and the sandbox's own writes (reset, expire, purge, forget).
//! None of it is the application's, so none of it is in `Store`: like the
//! store, it is one trait, [`DemoTables`], reached through
//! [`Store::connection`], whose queries are written once ([`tables`]) and
//! instantiated per backend ([`postgres`], [`sqlite`]) over its schema.
//!
//! The unguarded table (`demo_unguarded_keys`) is the demo's own: no
//! production migration creates it (one drops it from databases made before
//! it moved here); [`create_tables`] makes it when the sandbox opens.

/// `$body` on the store's connection, whichever backend it is: the demo's
/// raw statements are the same text on both (see [`statement`]).
macro_rules! on_either {
    ($store:expr, |$c:ident| $body:expr) => {
        match $store.connection() {
            $crate::store::AnyConnection::Pg($c) => $body,
            $crate::store::AnyConnection::Sqlite($c) => $body,
        }
    };
}

mod locks;
mod postgres;
pub mod receiver;
pub mod sandboxes;
mod sqlite;
mod tables;

pub use locks::lock_waits;

use serde_json::Value;
use uuid::Uuid;

use crate::store::{AnyConnection, QueryResult, Store};

/// One key row as the teaching page shows it (times as RFC 3339 text).
#[derive(Debug, Clone)]
pub struct KeyView {
    pub key: String,
    pub status: String,
    pub fingerprint: String,
    pub response_status: Option<i32>,
    pub response_headers: Option<Value>,
    pub response_body: Option<Value>,
    pub created_at: String,
    pub expires_at: String,
    pub expired: bool,
    pub locked_until: String,
    pub lease_live: bool,
}

#[derive(Debug, Clone)]
pub struct UnguardedView {
    pub key: String,
    pub charge_id: String,
    pub created_at: String,
}

/// A row of the unguarded table: the key, its request and the response.
#[derive(Debug, Clone)]
pub struct Unguarded {
    pub key: String,
    pub fingerprint: String,
    pub response_body: Value,
}

/// One refund row as the page shows it: (id, charge id, amount, currency,
/// created at), as text.
pub type RefundView = (String, String, i64, String, String);

/// The demo's queries on one connection; `postgres.rs` and `sqlite.rs`
/// implement them over their backend's schema and the unguarded table's
/// declaration there.
trait DemoTables {
    /// Creates the unguarded table if it is not there.
    fn create_tables(&mut self) -> QueryResult<()>;
    /// The database's clock (SQLite: the app's, as every SQLite time).
    fn now_text(&mut self) -> QueryResult<String>;
    /// The account's key rows, newest first.
    fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>>;
    /// The account's refunds, newest first.
    fn refund_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<RefundView>>;
    /// The account's unguarded rows, newest first.
    fn unguarded_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<UnguardedView>>;
    /// The naive look-up: the first unguarded row for the key, if any.
    fn find_unguarded(&mut self, account_id: i64, key: &str) -> QueryResult<Option<Unguarded>>;
    fn insert_unguarded(
        &mut self,
        account_id: i64,
        row: &Unguarded,
        charge_id: Uuid,
    ) -> QueryResult<()>;
    /// Deletes the account's key rows, unguarded rows, refunds and charges
    /// (in that order: the last three point at charges).
    fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()>;
    /// Deletes the account's expired key rows.
    fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize>;
    /// Moves the key's `expires_at` one second into the past.
    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize>;
    /// Deletes the key's row (if any) and the charge.
    fn forget_charge(
        &mut self,
        account_id: i64,
        key: Option<&str>,
        charge_id: Uuid,
    ) -> QueryResult<()>;
}

/// The store's connection, as the demo queries it.
fn tables(store: &mut dyn Store) -> &mut dyn DemoTables {
    match store.connection() {
        AnyConnection::Pg(c) => c,
        AnyConnection::Sqlite(c) => c,
    }
}

/// The PostgreSQL statement, or on SQLite `sqlite` if given, else the same
/// one with SQLite's placeholders (`?1` for `$1`).
fn statement(store: &mut dyn Store, pg: &str, sqlite: Option<&str>) -> String {
    match store.connection() {
        AnyConnection::Pg(_) => pg.to_owned(),
        AnyConnection::Sqlite(_) => sqlite.unwrap_or(pg).replace('$', "?"),
    }
}

/// Runs `create` (`CREATE … IF NOT EXISTS` statements); on PostgreSQL under
/// the lock every demo table is made under, so that instances opening the
/// demo at once take turns (SQLite's write lock does that there).
fn create_in_turn(store: &mut dyn Store, create: &str) -> QueryResult<()> {
    match store.connection() {
        AnyConnection::Pg(c) => postgres::create_in_turn(c, create),
        AnyConnection::Sqlite(c) => diesel::connection::SimpleConnection::batch_execute(c, create),
    }
}

/// Creates the demo's own tables if they are not there (the sandbox, at
/// start, after the migrations).
pub fn create_tables(store: &mut dyn Store) -> QueryResult<()> {
    tables(store).create_tables()?;
    sandboxes::create_table(store)?;
    receiver::create_tables(store)
}

/// Runs `read` in one read-only transaction that sees the database as of
/// one moment, so that what it reads in several statements fits together
/// (a key completed and the charge its response names, both or neither).
pub fn read_at_once<T, E: From<diesel::result::Error>>(
    store: &mut dyn Store,
    read: impl FnOnce(&mut dyn Store) -> Result<T, E>,
) -> Result<T, E> {
    match store.connection() {
        // READ COMMITTED, the default, takes a snapshot per statement.
        AnyConnection::Pg(c) => c
            .build_transaction()
            .repeatable_read()
            .read_only()
            .run(|c| read(c)),
        // A deferred transaction reads one snapshot (the database is in WAL
        // mode) and, unlike the store's IMMEDIATE ones, does not wait for a
        // writer: the page must see a row a slow transaction has not yet
        // replaced.
        AnyConnection::Sqlite(c) => diesel::Connection::transaction(c, |c| read(c)),
    }
}

/// The database's clock (SQLite: the app's, as every SQLite time).
pub fn now_text(store: &mut dyn Store) -> QueryResult<String> {
    tables(store).now_text()
}

/// The account's key rows, newest first.
pub fn key_views(store: &mut dyn Store, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
    tables(store).key_views(account_id, limit)
}

/// The account's refunds, newest first.
pub fn refund_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<RefundView>> {
    tables(store).refund_views(account_id, limit)
}

/// The account's unguarded rows, newest first.
pub fn unguarded_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<UnguardedView>> {
    tables(store).unguarded_views(account_id, limit)
}

/// The naive look-up: the first unguarded row for the key, if any.
pub fn find_unguarded(
    store: &mut dyn Store,
    account_id: i64,
    key: &str,
) -> QueryResult<Option<Unguarded>> {
    tables(store).find_unguarded(account_id, key)
}

pub fn insert_unguarded(
    store: &mut dyn Store,
    account_id: i64,
    row: &Unguarded,
    charge_id: Uuid,
) -> QueryResult<()> {
    tables(store).insert_unguarded(account_id, row, charge_id)
}

/// Deletes the account's webhook rows (its events, endpoints, deliveries
/// and their attempts) and lesson 8's receiver rows (its inbox rows and
/// effects), then its key rows, unguarded rows, refunds and charges.
pub fn delete_account_rows(store: &mut dyn Store, account_id: i64) -> QueryResult<()> {
    store.delete_account_webhooks(account_id)?;
    receiver::delete_rows(store, account_id)?;
    tables(store).delete_account_rows(account_id)
}

/// Deletes the account's expired key rows.
pub fn purge_account_keys(store: &mut dyn Store, account_id: i64) -> QueryResult<usize> {
    tables(store).purge_account_keys(account_id)
}

/// Moves the key's `expires_at` one second into the past.
pub fn expire_key(store: &mut dyn Store, account_id: i64, key: &str) -> QueryResult<usize> {
    tables(store).expire_key(account_id, key)
}

/// Forgets a committed charge, its events and its key row, as a database that lost its
/// last commit would (an asynchronous standby promoted after the primary
/// acknowledged it): both in one transaction.
pub fn forget_charge(
    store: &mut dyn Store,
    account_id: i64,
    key: Option<&str>,
    charge_id: Uuid,
) -> QueryResult<()> {
    store.transaction(|tx| {
        tx.forget_charge_events(account_id, charge_id)?;
        tables(tx).forget_charge(account_id, key, charge_id)
    })
}
