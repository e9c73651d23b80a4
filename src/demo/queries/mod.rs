//! The demo sandbox's queries: the teaching page's views of the demo
//! account's rows, the unguarded table of the "check, then insert"
//! algorithm, and the sandbox's own writes (reset, expire, purge, forget).
//! None of it is the application's, so none of it is in `Store`: each
//! function takes the connection of either backend and queries it with
//! Diesel's query builder over that backend's schema.

use chrono::{DateTime, Utc};
use diesel::dsl::{now, sql};
use diesel::prelude::*;
use diesel::sql_types::Timestamptz;
use serde_json::Value;
use uuid::Uuid;

use crate::store::{AnyConnection, QueryResult, Store, time_text};

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

fn json_text(text: Option<String>) -> QueryResult<Option<Value>> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
    })
    .transpose()
}

/// The database's clock (SQLite: the app's, as every SQLite time).
pub fn now_text(store: &mut dyn Store) -> QueryResult<String> {
    match store.connection() {
        AnyConnection::Pg(c) => diesel::select(sql::<Timestamptz>("now()"))
            .get_result::<DateTime<Utc>>(c)
            .map(time_text),
        AnyConnection::Sqlite(_) => Ok(time_text(Utc::now())),
    }
}

/// The account's key rows, newest first.
pub fn key_views(store: &mut dyn Store, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
    match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::idempotency_keys as k;
            type Row = (
                String,
                String,
                String,
                Option<i16>,
                Option<Value>,
                Option<Value>,
                DateTime<Utc>,
                DateTime<Utc>,
                bool,
                DateTime<Utc>,
                bool,
            );
            let rows: Vec<Row> = k::table
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
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(|r| KeyView {
                    key: r.0,
                    status: r.1,
                    fingerprint: r.2,
                    response_status: r.3.map(i32::from),
                    response_headers: r.4,
                    response_body: r.5,
                    created_at: time_text(r.6),
                    expires_at: time_text(r.7),
                    expired: r.8,
                    locked_until: time_text(r.9),
                    lease_live: r.10,
                })
                .collect())
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::idempotency_keys as k;
            type Row = (
                String,
                String,
                String,
                Option<i32>,
                Option<String>,
                Option<String>,
                String,
                String,
                String,
            );
            let now_text = time_text(Utc::now());
            let rows: Vec<Row> = k::table
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
                .load(c)?;
            rows.into_iter()
                .map(|r| {
                    Ok(KeyView {
                        key: r.0,
                        status: r.1,
                        fingerprint: r.2,
                        response_status: r.3,
                        response_headers: json_text(r.4)?,
                        response_body: json_text(r.5)?,
                        created_at: r.6,
                        expired: r.7 <= now_text,
                        expires_at: r.7,
                        lease_live: r.8 > now_text,
                        locked_until: r.8,
                    })
                })
                .collect()
        }
    }
}

/// One refund row as the page shows it: (id, charge id, amount, currency,
/// created at), as text.
pub type RefundView = (String, String, i64, String, String);

/// The account's refunds, newest first.
pub fn refund_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<RefundView>> {
    match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::refunds as r;
            let rows: Vec<(Uuid, Uuid, i64, String, DateTime<Utc>)> = r::table
                .filter(r::account_id.eq(account_id))
                .order((r::created_at.desc(), r::id.desc()))
                .limit(limit)
                .select((r::id, r::charge_id, r::amount, r::currency, r::created_at))
                .load(c)?;
            Ok(rows
                .into_iter()
                .map(|(id, charge, amount, currency, at)| {
                    (
                        id.to_string(),
                        charge.to_string(),
                        amount,
                        currency,
                        time_text(at),
                    )
                })
                .collect())
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::refunds as r;
            r::table
                .filter(r::account_id.eq(account_id))
                .order((r::created_at.desc(), r::id.desc()))
                .limit(limit)
                .select((r::id, r::charge_id, r::amount, r::currency, r::created_at))
                .load(c)
        }
    }
}

pub fn unguarded_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<UnguardedView>> {
    let rows: Vec<(String, String, String)> = match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::demo_unguarded_keys as u;
            let rows: Vec<(String, Uuid, DateTime<Utc>)> = u::table
                .filter(u::account_id.eq(account_id))
                .order((u::created_at.desc(), u::id.desc()))
                .limit(limit)
                .select((u::key, u::charge_id, u::created_at))
                .load(c)?;
            rows.into_iter()
                .map(|(key, charge, at)| (key, charge.to_string(), time_text(at)))
                .collect()
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::demo_unguarded_keys as u;
            u::table
                .filter(u::account_id.eq(account_id))
                .order((u::created_at.desc(), u::id.desc()))
                .limit(limit)
                .select((u::key, u::charge_id, u::created_at))
                .load(c)?
        }
    };
    Ok(rows
        .into_iter()
        .map(|(key, charge_id, created_at)| UnguardedView {
            key,
            charge_id,
            created_at,
        })
        .collect())
}

/// The naive look-up: the first unguarded row for the key, if any.
pub fn find_unguarded(
    store: &mut dyn Store,
    account_id: i64,
    key: &str,
) -> QueryResult<Option<Unguarded>> {
    let row: Option<(String, String, Value)> = match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::demo_unguarded_keys as u;
            u::table
                .filter(u::account_id.eq(account_id))
                .filter(u::key.eq(key))
                .select((u::key, u::fingerprint, u::response_body))
                .first(c)
                .optional()?
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::demo_unguarded_keys as u;
            let row: Option<(String, String, String)> = u::table
                .filter(u::account_id.eq(account_id))
                .filter(u::key.eq(key))
                .select((u::key, u::fingerprint, u::response_body))
                .first(c)
                .optional()?;
            match row {
                Some((key, fingerprint, body)) => Some((
                    key,
                    fingerprint,
                    json_text(Some(body))?.unwrap_or(Value::Null),
                )),
                None => None,
            }
        }
    };
    Ok(row.map(|(key, fingerprint, response_body)| Unguarded {
        key,
        fingerprint,
        response_body,
    }))
}

pub fn insert_unguarded(
    store: &mut dyn Store,
    account_id: i64,
    row: &Unguarded,
    charge_id: Uuid,
) -> QueryResult<()> {
    match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::demo_unguarded_keys as u;
            diesel::insert_into(u::table)
                .values((
                    u::account_id.eq(account_id),
                    u::key.eq(&row.key),
                    u::fingerprint.eq(&row.fingerprint),
                    u::charge_id.eq(charge_id),
                    u::response_body.eq(&row.response_body),
                ))
                .execute(c)?;
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::demo_unguarded_keys as u;
            diesel::insert_into(u::table)
                .values((
                    u::account_id.eq(account_id),
                    u::key.eq(&row.key),
                    u::fingerprint.eq(&row.fingerprint),
                    u::charge_id.eq(charge_id.to_string()),
                    u::response_body.eq(row.response_body.to_string()),
                    u::created_at.eq(time_text(Utc::now())),
                ))
                .execute(c)?;
        }
    }
    Ok(())
}

/// Deletes the account's key rows, unguarded rows, refunds and charges (in
/// that order: the last three point at charges).
pub fn delete_account_rows(store: &mut dyn Store, account_id: i64) -> QueryResult<()> {
    match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::{
                charges, demo_unguarded_keys, idempotency_keys, refunds,
            };
            diesel::delete(
                idempotency_keys::table.filter(idempotency_keys::account_id.eq(account_id)),
            )
            .execute(c)?;
            diesel::delete(
                demo_unguarded_keys::table.filter(demo_unguarded_keys::account_id.eq(account_id)),
            )
            .execute(c)?;
            diesel::delete(refunds::table.filter(refunds::account_id.eq(account_id))).execute(c)?;
            diesel::delete(charges::table.filter(charges::account_id.eq(account_id))).execute(c)?;
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::{
                charges, demo_unguarded_keys, idempotency_keys, refunds,
            };
            diesel::delete(
                idempotency_keys::table.filter(idempotency_keys::account_id.eq(account_id)),
            )
            .execute(c)?;
            diesel::delete(
                demo_unguarded_keys::table.filter(demo_unguarded_keys::account_id.eq(account_id)),
            )
            .execute(c)?;
            diesel::delete(refunds::table.filter(refunds::account_id.eq(account_id))).execute(c)?;
            diesel::delete(charges::table.filter(charges::account_id.eq(account_id))).execute(c)?;
        }
    }
    Ok(())
}

/// Deletes the account's expired key rows.
pub fn purge_account_keys(store: &mut dyn Store, account_id: i64) -> QueryResult<usize> {
    match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::idempotency_keys as k;
            diesel::delete(
                k::table
                    .filter(k::account_id.eq(account_id))
                    .filter(k::expires_at.le(now)),
            )
            .execute(c)
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::idempotency_keys as k;
            diesel::delete(
                k::table
                    .filter(k::account_id.eq(account_id))
                    .filter(k::expires_at.le(time_text(Utc::now()))),
            )
            .execute(c)
        }
    }
}

/// Moves the key's `expires_at` one second into the past.
pub fn expire_key(store: &mut dyn Store, account_id: i64, key: &str) -> QueryResult<usize> {
    match store.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::idempotency_keys as k;
            diesel::update(
                k::table
                    .filter(k::account_id.eq(account_id))
                    .filter(k::key.eq(key)),
            )
            .set(k::expires_at.eq(sql::<Timestamptz>("now() - interval '1 second'")))
            .execute(c)
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::idempotency_keys as k;
            let past = time_text(Utc::now() - chrono::Duration::seconds(1));
            diesel::update(
                k::table
                    .filter(k::account_id.eq(account_id))
                    .filter(k::key.eq(key)),
            )
            .set(k::expires_at.eq(past))
            .execute(c)
        }
    }
}

/// Forgets a committed charge and its key row, as a database that lost its
/// last commit would (an asynchronous standby promoted after the primary
/// acknowledged it).
pub fn forget_charge(
    store: &mut dyn Store,
    account_id: i64,
    key: Option<&str>,
    charge_id: Uuid,
) -> QueryResult<()> {
    store.transaction(|tx| match tx.connection() {
        AnyConnection::Pg(c) => {
            use crate::store::postgres::schema::{charges, idempotency_keys as k};
            if let Some(key) = key {
                diesel::delete(
                    k::table
                        .filter(k::account_id.eq(account_id))
                        .filter(k::key.eq(key)),
                )
                .execute(c)?;
            }
            diesel::delete(
                charges::table
                    .filter(charges::account_id.eq(account_id))
                    .filter(charges::id.eq(charge_id)),
            )
            .execute(c)
            .map(|_| ())
        }
        AnyConnection::Sqlite(c) => {
            use crate::store::sqlite_schema::{charges, idempotency_keys as k};
            if let Some(key) = key {
                diesel::delete(
                    k::table
                        .filter(k::account_id.eq(account_id))
                        .filter(k::key.eq(key)),
                )
                .execute(c)?;
            }
            diesel::delete(
                charges::table
                    .filter(charges::account_id.eq(account_id))
                    .filter(charges::id.eq(charge_id.to_string())),
            )
            .execute(c)
            .map(|_| ())
        }
    })
}
