//! The demo's queries on SQLite, over the store's SQLite schema and the
//! unguarded table declared here (the demo's own, made by
//! [`DemoTables::create_tables`]). Every time is the app's clock, as
//! fixed-width RFC 3339 text, so comparing the text compares the times.

use chrono::Utc;
use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use uuid::Uuid;

use super::{DemoTables, KeyView, RefundView, Unguarded, UnguardedView, json_text};
use crate::store::sqlite_schema::{charges, idempotency_keys as k, refunds};
use crate::store::{QueryResult, time_text};

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

use demo_unguarded_keys as u;

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
CREATE INDEX IF NOT EXISTS demo_unguarded_keys_account_key_idx
    ON demo_unguarded_keys (account_id, key);
";

/// A key row as SQLite stores it: JSON and times as text.
#[derive(Queryable)]
struct KeyRow {
    key: String,
    status: String,
    fingerprint: String,
    response_status: Option<i32>,
    response_headers: Option<String>,
    response_body: Option<String>,
    created_at: String,
    expires_at: String,
    locked_until: String,
}

fn now_text() -> String {
    time_text(Utc::now())
}

impl DemoTables for SqliteConnection {
    fn create_tables(&mut self) -> QueryResult<()> {
        self.batch_execute(CREATE)
    }

    fn now_text(&mut self) -> QueryResult<String> {
        Ok(now_text())
    }

    fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
        let now = now_text();
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
                k::locked_until,
            ))
            .load(self)?;
        rows.into_iter()
            .map(|r| {
                Ok(KeyView {
                    key: r.key,
                    status: r.status,
                    fingerprint: r.fingerprint,
                    response_status: r.response_status,
                    response_headers: r.response_headers.map(json_text).transpose()?,
                    response_body: r.response_body.map(json_text).transpose()?,
                    created_at: r.created_at,
                    expired: r.expires_at <= now,
                    expires_at: r.expires_at,
                    lease_live: r.locked_until > now,
                    locked_until: r.locked_until,
                })
            })
            .collect()
    }

    fn refund_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<RefundView>> {
        refunds::table
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
            .load(self)
    }

    fn unguarded_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<UnguardedView>> {
        let rows: Vec<(String, String, String)> = u::table
            .filter(u::account_id.eq(account_id))
            .order((u::created_at.desc(), u::id.desc()))
            .limit(limit)
            .select((u::key, u::charge_id, u::created_at))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(|(key, charge_id, created_at)| UnguardedView {
                key,
                charge_id,
                created_at,
            })
            .collect())
    }

    fn find_unguarded(&mut self, account_id: i64, key: &str) -> QueryResult<Option<Unguarded>> {
        let row: Option<(String, String, String)> = u::table
            .filter(u::account_id.eq(account_id))
            .filter(u::key.eq(key))
            .select((u::key, u::fingerprint, u::response_body))
            .first(self)
            .optional()?;
        row.map(|(key, fingerprint, body)| {
            Ok(Unguarded {
                key,
                fingerprint,
                response_body: json_text(body)?,
            })
        })
        .transpose()
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
                u::charge_id.eq(charge_id.to_string()),
                u::response_body.eq(row.response_body.to_string()),
                u::created_at.eq(now_text()),
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
                .filter(k::expires_at.le(now_text())),
        )
        .execute(self)
    }

    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
        let past = time_text(Utc::now() - chrono::Duration::seconds(1));
        diesel::update(
            k::table
                .filter(k::account_id.eq(account_id))
                .filter(k::key.eq(key)),
        )
        .set(k::expires_at.eq(past))
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
                .filter(charges::id.eq(charge_id.to_string())),
        )
        .execute(self)
        .map(|_| ())
    }
}
