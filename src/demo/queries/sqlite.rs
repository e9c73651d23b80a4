//! The demo's queries on SQLite: [`demo_tables`]'s queries over the store's
//! SQLite schema, the protocol's key table and the unguarded table declared
//! here (the demo's own, made by [`DemoTables::create_tables`]), with
//! SQLite's [`DemoDialect`]: UUIDs and JSON are text; every time is the
//! app's clock, as fixed-width RFC 3339 text, so comparing the text
//! (SQLite's binary collation) compares the times.
//!
//! [`demo_tables`]: super::tables
//! [`DemoTables::create_tables`]: super::DemoTables::create_tables

use chrono::Utc;
use diesel::connection::SimpleConnection;
use diesel::dsl::AsExprOf;
use diesel::prelude::*;
use diesel::sql_types::Text;
use diesel::sqlite::SqliteConnection;
use serde_json::Value;

use super::tables::{self, DemoDialect};
use crate::store::sqlite_schema::{charges, refunds};
use crate::store::{QueryResult, time_text};
use idempotency::sqlite::schema::idempotency_keys as keys;

diesel::table! {
    /// The "check, then insert" algorithm's table: no unique constraint on
    /// (account_id, key), on purpose.
    demo_unguarded_keys (id) {
        id -> BigInt,
        account_id -> BigInt,
        key -> Text,
        fingerprint -> Text,
        charge_id -> Text,
        response_body -> Text,
        created_at -> Text,
    }
}

/// As `migrations/sqlite/2026-12-01-000001_create_schema` made it before it
/// moved to the demo. SQLite's write lock makes instances take turns.
const CREATE: &str = "
CREATE TABLE IF NOT EXISTS demo_unguarded_keys (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id    INTEGER NOT NULL REFERENCES accounts (id),
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    charge_id     TEXT NOT NULL REFERENCES charges (id),
    response_body TEXT NOT NULL,
    created_at    TEXT NOT NULL
);
";

/// What the demo's queries need of SQLite beyond the store's `Dialect`:
/// JSON is TEXT, `response_status` is INTEGER, and every time is the app's
/// clock, as the store writes it.
impl DemoDialect for SqliteConnection {
    type Json = String;
    type Status = i32;
    type SecondAgo = AsExprOf<String, Text>;

    fn encode_json(value: &Value) -> String {
        value.to_string()
    }

    fn decode_json(text: String) -> QueryResult<Value> {
        serde_json::from_str(&text)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
    }

    fn shown_id(id: String) -> String {
        id
    }

    /// Already RFC 3339 text.
    fn shown_time(t: String) -> String {
        t
    }

    fn a_second_ago() -> AsExprOf<String, Text> {
        time_text(Utc::now() - chrono::Duration::seconds(1)).into_sql::<Text>()
    }

    /// SQLite's write lock makes instances take turns.
    fn create_unguarded_table(&mut self) -> QueryResult<()> {
        self.batch_execute(&format!("{CREATE}{}", tables::UNGUARDED_INDEX))
    }

    fn database_now(&mut self) -> QueryResult<String> {
        Ok(time_text(Utc::now()))
    }
}

tables::demo_tables!(
    SqliteConnection,
    keys,
    charges,
    refunds,
    demo_unguarded_keys
);
