//! The demo's queries on PostgreSQL: [`demo_tables`]'s queries over the
//! store's `schema.rs`, the protocol's key table and the unguarded table
//! declared here (the demo's own, made by [`DemoTables::create_tables`]),
//! with PostgreSQL's [`DemoDialect`]: its column types, its clock (`now()`)
//! and the lock that makes instances take turns at creating the table.
//!
//! [`demo_tables`]: super::tables
//! [`DemoTables::create_tables`]: super::DemoTables::create_tables

use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::dsl::sql;
use diesel::expression::SqlLiteral;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamptz};
use serde_json::Value;
use uuid::Uuid;

use super::tables::{self, DemoDialect};
use crate::store::postgres::schema::{charges, refunds};
use crate::store::{QueryResult, time_text};
use idempotency::postgres::schema::idempotency_keys as keys;

diesel::table! {
    /// The "check, then insert" algorithm's table: no unique constraint on
    /// (account_id, key), on purpose.
    demo_unguarded_keys (id) {
        id -> Int8,
        account_id -> Int8,
        key -> Text,
        fingerprint -> Text,
        charge_id -> Uuid,
        response_body -> Jsonb,
        created_at -> Timestamptz,
    }
}

/// As `migrations/postgres/2026-12-01-000004_create_demo_unguarded_keys`
/// made it before it moved to the demo.
const CREATE: &str = "
CREATE TABLE IF NOT EXISTS demo_unguarded_keys (
    id            BIGSERIAL PRIMARY KEY,
    account_id    BIGINT NOT NULL REFERENCES accounts (id),
    key           TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    charge_id     UUID NOT NULL REFERENCES charges (id),
    response_body JSONB NOT NULL,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
";
/// Instances opening the sandbox at once take turns: "demo" in ASCII.
const CREATE_LOCK: i64 = 0x6465_6d6f;

/// Runs `create` under [`CREATE_LOCK`], in a transaction that releases it.
pub(super) fn create_in_turn(c: &mut PgConnection, create: &str) -> QueryResult<()> {
    c.transaction(|c| {
        diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
            .bind::<BigInt, _>(CREATE_LOCK)
            .execute(c)?;
        c.batch_execute(create)
    })
}

/// What the demo's queries need of PostgreSQL beyond the store's
/// `Dialect`: JSONB is the value itself, `response_status` is SMALLINT, and
/// every time is the database's clock.
impl DemoDialect for PgConnection {
    type Json = Value;
    type Status = i16;
    type SecondAgo = SqlLiteral<Timestamptz>;

    fn encode_json(value: &Value) -> Value {
        value.clone()
    }

    fn decode_json(value: Value) -> QueryResult<Value> {
        Ok(value)
    }

    fn shown_id(id: Uuid) -> String {
        id.to_string()
    }

    fn shown_time(t: DateTime<Utc>) -> String {
        time_text(t)
    }

    fn a_second_ago() -> SqlLiteral<Timestamptz> {
        sql::<Timestamptz>("now() - interval '1 second'")
    }

    /// Under the lock, in a transaction that releases it.
    fn create_unguarded_table(&mut self) -> QueryResult<()> {
        create_in_turn(self, &format!("{CREATE}{}", tables::UNGUARDED_INDEX))
    }

    fn database_now(&mut self) -> QueryResult<String> {
        diesel::select(sql::<Timestamptz>("now()"))
            .get_result::<DateTime<Utc>>(self)
            .map(time_text)
    }
}

tables::demo_tables!(PgConnection, keys, charges, refunds, demo_unguarded_keys);
