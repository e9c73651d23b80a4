//! The key store on SQLite: the table (`sql/sqlite.sql`), its transaction,
//! and what its statements (written once, in `key_table.rs`) need of it,
//! its `Dialect`: times on the app's clock, as text (`time_text`).

use std::borrow::Cow;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::dsl;
use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use serde_json::Value;
use uuid::Uuid;

use crate::key_store::QueryResult;
use crate::key_table::{self, Backend, Dialect};
use crate::webhook::inbox;
use schema::{idempotency_keys as keys, webhook_inbox};

/// The key table's `CREATE` statements (`sql/sqlite.sql`), for a migration
/// of yours (run once; add your foreign key to your accounts table).
pub const CREATE_TABLE: &str = include_str!("../sql/sqlite.sql");

/// The tables, as `sql/sqlite.sql` and `sql/sqlite_inbox.sql` create them.
#[allow(missing_docs)] // Diesel's table! writes the columns.
pub mod schema {
    diesel::table! {
        idempotency_keys (account_id, key) {
            account_id -> BigInt,
            key -> Text,
            fingerprint -> Text,
            status -> Text,
            response_status -> Nullable<Integer>,
            response_headers -> Nullable<Text>,
            response_body -> Nullable<Text>,
            created_at -> Text,
            expires_at -> Text,
            locked_until -> Text,
            lease_token -> Text,
            request_path -> Nullable<Text>,
            request_body -> Nullable<Text>,
            foreign_step -> Nullable<Text>,
        }
    }

    diesel::table! {
        webhook_inbox (source, event_id) {
            source -> Text,
            event_id -> Text,
            received_at -> Text,
        }
    }
}

/// A time as SQLite stores it: RFC 3339 in UTC with microseconds, a fixed
/// width, so that text order is time order.
pub(crate) fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// What the statements written once in `key_table` need of SQLite: its
/// UUIDs and JSON are text, its times are `time_text` on the app's clock,
/// and every statement is left to Diesel's own cache.
impl Dialect for SqliteConnection {
    type Token = String;
    type Code = i32;
    type Json<'a> = String;
    type Clock = String;
    type Later = String;
    type Earlier = String;
    type SameStep<'a> = dsl::Is<keys::foreign_step, Option<&'a str>>;
    type Cached<Q> = Q;

    fn token(token: Uuid) -> String {
        token.to_string()
    }

    fn code(status: u16) -> QueryResult<i32> {
        Ok(i32::from(status))
    }

    fn json(value: Cow<'_, Value>) -> String {
        value.to_string()
    }

    fn read_json(json: String) -> QueryResult<Value> {
        serde_json::from_str(&json)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
    }

    fn clock() -> String {
        time_text(Utc::now())
    }

    /// `now + d` as SQLite stores times.
    fn from_now(d: Duration) -> String {
        time_text(Utc::now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
    }

    /// `now - d` as SQLite stores times.
    fn ago(d: Duration) -> String {
        time_text(Utc::now() - chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
    }

    fn same_step(step: Option<&str>) -> Self::SameStep<'_> {
        keys::foreign_step.is(step)
    }

    fn cached<Q>(statement: Q) -> Q {
        statement
    }

    /// Oldest first, by rowid (the primary key is a pair, which Diesel's
    /// `IN` cannot spell): plain SQL.
    fn purge(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys \
             WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        )
        .bind::<diesel::sql_types::Text, _>(Self::clock())
        .bind::<diesel::sql_types::BigInt, _>(batch)
        .execute(self)
    }
}

/// `BEGIN IMMEDIATE`: the database's write lock is taken up front, so a
/// concurrent writer (a second insert of the same key among them) waits for
/// the whole transaction (the busy timeout) instead of failing halfway
/// when a deferred transaction upgrades its lock.
impl Backend for SqliteConnection {
    fn key_transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.immediate_transaction(work)
    }
}

key_table::key_store!(SqliteConnection, keys);
inbox::inbox_store!(SqliteConnection, webhook_inbox);
