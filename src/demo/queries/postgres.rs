//! The demo's queries on PostgreSQL, over the store's `schema.rs` and the
//! unguarded table declared here (the demo's own, made by
//! [`DemoTables::create_tables`]).

use chrono::{DateTime, Utc};
use diesel::connection::SimpleConnection;
use diesel::dsl::{now, sql};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamptz};
use serde_json::Value;
use uuid::Uuid;

use super::{DemoTables, KeyView, RefundView, Unguarded, UnguardedView};
use crate::store::postgres::schema::{charges, idempotency_keys as k, refunds};
use crate::store::{QueryResult, time_text};

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

use demo_unguarded_keys as u;

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
CREATE INDEX IF NOT EXISTS demo_unguarded_keys_account_key_idx
    ON demo_unguarded_keys (account_id, key);
";
/// Instances opening the sandbox at once take turns: "demo" in ASCII.
const CREATE_LOCK: i64 = 0x6465_6d6f;

/// A key row and what the database's clock says of it.
#[derive(Queryable)]
struct KeyRow {
    key: String,
    status: String,
    fingerprint: String,
    response_status: Option<i16>,
    response_headers: Option<Value>,
    response_body: Option<Value>,
    created_at: DateTime<Utc>,
    expires_at: DateTime<Utc>,
    expired: bool,
    locked_until: DateTime<Utc>,
    lease_live: bool,
}

impl DemoTables for PgConnection {
    fn create_tables(&mut self) -> QueryResult<()> {
        self.transaction(|c| {
            diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
                .bind::<BigInt, _>(CREATE_LOCK)
                .execute(c)?;
            c.batch_execute(CREATE)
        })
    }

    fn now_text(&mut self) -> QueryResult<String> {
        diesel::select(sql::<Timestamptz>("now()"))
            .get_result::<DateTime<Utc>>(self)
            .map(time_text)
    }

    fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
        let rows: Vec<KeyRow> = k::table
            .filter(k::account_id.eq(account_id))
            .order((k::created_at.desc(), k::key.desc()))
            .limit(limit)
            .select((
                k::key,
                k::status,
                k::fingerprint,
                k::response_status,
                k::response_headers,
                k::response_body,
                k::created_at,
                k::expires_at,
                k::expires_at.le(now),
                k::locked_until,
                k::locked_until.gt(now),
            ))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(|r| KeyView {
                key: r.key,
                status: r.status,
                fingerprint: r.fingerprint,
                response_status: r.response_status.map(i32::from),
                response_headers: r.response_headers,
                response_body: r.response_body,
                created_at: time_text(r.created_at),
                expires_at: time_text(r.expires_at),
                expired: r.expired,
                locked_until: time_text(r.locked_until),
                lease_live: r.lease_live,
            })
            .collect())
    }

    fn refund_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<RefundView>> {
        let rows: Vec<(Uuid, Uuid, i64, String, DateTime<Utc>)> = refunds::table
            .filter(refunds::account_id.eq(account_id))
            .order((refunds::created_at.desc(), refunds::id.desc()))
            .limit(limit)
            .select((
                refunds::id,
                refunds::charge_id,
                refunds::amount,
                refunds::currency,
                refunds::created_at,
            ))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(|(id, charge, amount, currency, at)| {
                let (id, charge) = (id.to_string(), charge.to_string());
                (id, charge, amount, currency, time_text(at))
            })
            .collect())
    }

    fn unguarded_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<UnguardedView>> {
        let rows: Vec<(String, Uuid, DateTime<Utc>)> = u::table
            .filter(u::account_id.eq(account_id))
            .order((u::created_at.desc(), u::id.desc()))
            .limit(limit)
            .select((u::key, u::charge_id, u::created_at))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(|(key, charge_id, at)| UnguardedView {
                key,
                charge_id: charge_id.to_string(),
                created_at: time_text(at),
            })
            .collect())
    }

    fn find_unguarded(&mut self, account_id: i64, key: &str) -> QueryResult<Option<Unguarded>> {
        let row: Option<(String, String, Value)> = u::table
            .filter(u::account_id.eq(account_id))
            .filter(u::key.eq(key))
            .select((u::key, u::fingerprint, u::response_body))
            .first(self)
            .optional()?;
        Ok(row.map(|(key, fingerprint, response_body)| Unguarded {
            key,
            fingerprint,
            response_body,
        }))
    }

    fn insert_unguarded(
        &mut self,
        account_id: i64,
        row: &Unguarded,
        charge_id: Uuid,
    ) -> QueryResult<()> {
        diesel::insert_into(u::table)
            .values((
                u::account_id.eq(account_id),
                u::key.eq(&row.key),
                u::fingerprint.eq(&row.fingerprint),
                u::charge_id.eq(charge_id),
                u::response_body.eq(&row.response_body),
            ))
            .execute(self)
            .map(|_| ())
    }

    fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()> {
        diesel::delete(k::table.filter(k::account_id.eq(account_id))).execute(self)?;
        diesel::delete(u::table.filter(u::account_id.eq(account_id))).execute(self)?;
        diesel::delete(refunds::table.filter(refunds::account_id.eq(account_id))).execute(self)?;
        diesel::delete(charges::table.filter(charges::account_id.eq(account_id))).execute(self)?;
        Ok(())
    }

    fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize> {
        diesel::delete(
            k::table
                .filter(k::account_id.eq(account_id))
                .filter(k::expires_at.le(now)),
        )
        .execute(self)
    }

    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
        diesel::update(
            k::table
                .filter(k::account_id.eq(account_id))
                .filter(k::key.eq(key)),
        )
        .set(k::expires_at.eq(sql::<Timestamptz>("now() - interval '1 second'")))
        .execute(self)
    }

    fn forget_charge(
        &mut self,
        account_id: i64,
        key: Option<&str>,
        charge_id: Uuid,
    ) -> QueryResult<()> {
        if let Some(key) = key {
            diesel::delete(
                k::table
                    .filter(k::account_id.eq(account_id))
                    .filter(k::key.eq(key)),
            )
            .execute(self)?;
        }
        diesel::delete(
            charges::table
                .filter(charges::account_id.eq(account_id))
                .filter(charges::id.eq(charge_id)),
        )
        .execute(self)
        .map(|_| ())
    }
}
