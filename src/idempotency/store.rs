//! The `idempotency_keys` table, on both backends side by side. On
//! PostgreSQL every time is the database's clock, so several app instances
//! agree on what has expired; SQLite is one local file, and its times are
//! the app's clock, written as fixed-width RFC 3339 text.

use std::time::Duration;

use chrono::Utc;
use diesel::dsl::{now, sql};
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Interval, Nullable, Text, Timestamptz};
use diesel::upsert::excluded;
use serde_json::Value;
use uuid::Uuid;

use crate::db::{Conn, Prepared, time_text};
use crate::schema::idempotency_keys as keys;

pub const IN_PROGRESS: &str = "in_progress";
pub const COMPLETED: &str = "completed";

#[derive(Debug, Queryable, Selectable)]
#[diesel(table_name = keys, check_for_backend(diesel::pg::Pg))]
pub struct KeyRow {
    pub id: i64,
    pub fingerprint: String,
    pub status: String,
    pub response_status: Option<i16>,
    pub response_headers: Option<Value>,
    pub response_body: Option<Value>,
    /// `locked_until` is still ahead (meaningful for in-progress rows).
    #[diesel(select_expression = keys::locked_until.gt(now))]
    #[diesel(select_expression_type = diesel::dsl::Gt<keys::locked_until, now>)]
    pub lease_live: bool,
}

/// The same row as SQLite returns it (JSON as TEXT).
#[derive(QueryableByName)]
struct SqliteKeyRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    fingerprint: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Integer>)]
    response_status: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    response_headers: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    response_body: Option<String>,
    #[diesel(sql_type = Bool)]
    lease_live: bool,
}

fn json_text(text: Option<String>) -> QueryResult<Option<Value>> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
    })
    .transpose()
}

impl SqliteKeyRow {
    fn into_row(self) -> QueryResult<KeyRow> {
        Ok(KeyRow {
            id: self.id,
            fingerprint: self.fingerprint,
            status: self.status,
            response_status: self.response_status.map(|s| s as i16),
            response_headers: json_text(self.response_headers)?,
            response_body: json_text(self.response_body)?,
            lease_live: self.lease_live,
        })
    }
}

#[derive(QueryableByName)]
struct SqliteId {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

/// The row a request registered, and the lease that lets it complete it.
#[derive(Debug, Clone, Copy)]
pub struct Claim {
    pub id: i64,
    pub lease_token: Uuid,
}

/// A duration as a bind parameter, added to `now()` on the database's clock.
fn interval(d: Duration) -> PgInterval {
    PgInterval::from_microseconds(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// `now + d` as SQLite stores times.
fn sqlite_from_now(d: Duration) -> String {
    time_text(Utc::now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
}

/// The live (unexpired) row for a key, read without taking any lock.
pub fn find_live(conn: &mut Conn<'_>, account_id: i64, key: &str) -> QueryResult<Option<KeyRow>> {
    match conn {
        Conn::Pg(c) => keys::table
            .filter(keys::account_id.eq(account_id))
            .filter(keys::key.eq(key))
            .filter(keys::expires_at.gt(now))
            .select(KeyRow::as_select())
            .first(*c)
            .optional(),
        Conn::Sqlite(c) => {
            let now_text = time_text(Utc::now());
            diesel::sql_query(
                "SELECT id, fingerprint, status, response_status, response_headers, response_body, \
                        locked_until > ? AS lease_live \
                 FROM idempotency_keys WHERE account_id = ? AND key = ? AND expires_at > ?",
            )
            .bind::<Text, _>(&now_text)
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(key)
            .bind::<Text, _>(&now_text)
            .get_result::<SqliteKeyRow>(*c)
            .optional()?
            .map(SqliteKeyRow::into_row)
            .transpose()
        }
    }
}

/// Registers the key as in progress under a fresh lease, or returns `None`
/// when a live row for it already exists. One statement, so it is atomic
/// whichever transaction it runs in.
///
/// The row is taken over, as if it were absent, when it has expired (the
/// purge has not removed it yet) or when it is a stuck in-progress row of the
/// same request whose lease has run out (its worker died between the
/// key-first design's two transactions). Of several requests racing for one
/// row, the row lock lets exactly one take it; the others see the new lease.
///
/// In the atomic design this INSERT also makes a concurrent request with the
/// same key wait on the unique index until the first transaction commits (we
/// get `None`) or rolls back (we insert and go on as the first). On SQLite
/// the wait happens earlier, at `BEGIN IMMEDIATE`, for the whole database.
pub fn claim(
    conn: &mut Conn<'_>,
    account_id: i64,
    key: &str,
    fingerprint: &str,
    ttl: Duration,
    lease: Duration,
) -> QueryResult<Option<Claim>> {
    let lease_token = Uuid::new_v4();
    let id: Option<i64> = match conn {
        Conn::Pg(c) => {
            let upsert = diesel::insert_into(keys::table)
                .values((
                    keys::account_id.eq(account_id),
                    keys::key.eq(key),
                    keys::fingerprint.eq(fingerprint),
                    keys::status.eq(IN_PROGRESS),
                    keys::created_at.eq(now),
                    keys::expires_at
                        .eq(sql::<Timestamptz>("now() + ").bind::<Interval, _>(interval(ttl))),
                    keys::locked_until
                        .eq(sql::<Timestamptz>("now() + ").bind::<Interval, _>(interval(lease))),
                    keys::lease_token.eq(lease_token),
                ))
                .on_conflict((keys::account_id, keys::key))
                .do_update()
                .set((
                    keys::fingerprint.eq(excluded(keys::fingerprint)),
                    keys::status.eq(excluded(keys::status)),
                    keys::response_status.eq(None::<i16>),
                    keys::response_headers.eq(None::<Value>),
                    keys::response_body.eq(None::<Value>),
                    keys::charge_id.eq(None::<Uuid>),
                    keys::created_at.eq(excluded(keys::created_at)),
                    keys::expires_at.eq(excluded(keys::expires_at)),
                    keys::locked_until.eq(excluded(keys::locked_until)),
                    keys::lease_token.eq(excluded(keys::lease_token)),
                ));
            // ON CONFLICT ... DO UPDATE ... WHERE: the two cases in which a row may be taken over.
            let expired = keys::expires_at.le(now);
            let stuck = keys::status
                .eq(IN_PROGRESS)
                .and(keys::locked_until.lt(now))
                .and(keys::fingerprint.eq(excluded(keys::fingerprint)));
            Prepared(
                diesel::query_dsl::methods::FilterDsl::filter(upsert, expired.or(stuck))
                    .returning(keys::id),
            )
            .get_result(*c)
            .optional()?
        }
        Conn::Sqlite(c) => {
            let now_text = time_text(Utc::now());
            diesel::sql_query(
                "INSERT INTO idempotency_keys \
                   (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token) \
                 VALUES (?, ?, ?, 'in_progress', ?, ?, ?, ?) \
                 ON CONFLICT (account_id, key) DO UPDATE SET \
                   fingerprint = excluded.fingerprint, status = excluded.status, \
                   response_status = NULL, response_headers = NULL, response_body = NULL, charge_id = NULL, \
                   created_at = excluded.created_at, expires_at = excluded.expires_at, \
                   locked_until = excluded.locked_until, lease_token = excluded.lease_token \
                 WHERE idempotency_keys.expires_at <= ? \
                    OR (idempotency_keys.status = 'in_progress' AND idempotency_keys.locked_until < ? \
                        AND idempotency_keys.fingerprint = excluded.fingerprint) \
                 RETURNING id",
            )
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(key)
            .bind::<Text, _>(fingerprint)
            .bind::<Text, _>(&now_text)
            .bind::<Text, _>(sqlite_from_now(ttl))
            .bind::<Text, _>(sqlite_from_now(lease))
            .bind::<Text, _>(lease_token.to_string())
            .bind::<Text, _>(&now_text)
            .bind::<Text, _>(&now_text)
            .get_result::<SqliteId>(*c)
            .optional()?
            .map(|r| r.id)
        }
    };
    Ok(id.map(|id| Claim { id, lease_token }))
}

/// Marks the key completed with the response to replay. `false` when the
/// lease was lost: another request took the row over, so this one must not
/// complete it (its transaction then rolls back).
pub fn complete(
    conn: &mut Conn<'_>,
    claim: Claim,
    charge_id: Option<Uuid>,
    status: u16,
    headers: &Value,
    body: &Value,
) -> QueryResult<bool> {
    let updated = match conn {
        // RETURNING, so that Diesel prepares it through its load path (its
        // execute path never caches an UPDATE, wrapper or not).
        Conn::Pg(c) => Prepared(
            diesel::update(keys::table.find(claim.id))
                .filter(keys::status.eq(IN_PROGRESS))
                .filter(keys::lease_token.eq(claim.lease_token))
                .set((
                    keys::status.eq(COMPLETED),
                    keys::response_status.eq(status as i16),
                    keys::response_headers.eq(headers),
                    keys::response_body.eq(body),
                    keys::charge_id.eq(charge_id),
                ))
                .returning(keys::id),
        )
        .get_result::<i64>(*c)
        .optional()?
        .map_or(0, |_| 1),
        Conn::Sqlite(c) => diesel::sql_query(
            "UPDATE idempotency_keys SET status = 'completed', response_status = ?, response_headers = ?, \
               response_body = ?, charge_id = ? \
             WHERE id = ? AND status = 'in_progress' AND lease_token = ?",
        )
        .bind::<Integer, _>(i32::from(status))
        .bind::<Text, _>(headers.to_string())
        .bind::<Text, _>(body.to_string())
        .bind::<Nullable<Text>, _>(charge_id.map(|id| id.to_string()))
        .bind::<BigInt, _>(claim.id)
        .bind::<Text, _>(claim.lease_token.to_string())
        .execute(*c)?,
    };
    Ok(updated == 1)
}

/// Gives a claimed key back after the operation failed, so that the retry
/// runs as the first request (key-first design; the atomic design's rollback
/// does this by itself).
pub fn release(conn: &mut Conn<'_>, claim: Claim) -> QueryResult<usize> {
    match conn {
        Conn::Pg(c) => diesel::delete(keys::table.find(claim.id))
            .filter(keys::status.eq(IN_PROGRESS))
            .filter(keys::lease_token.eq(claim.lease_token))
            .execute(*c),
        Conn::Sqlite(c) => {
            diesel::sql_query("DELETE FROM idempotency_keys WHERE id = ? AND status = 'in_progress' AND lease_token = ?")
                .bind::<BigInt, _>(claim.id)
                .bind::<Text, _>(claim.lease_token.to_string())
                .execute(*c)
        }
    }
}

/// Deletes up to `batch` expired rows in one short statement. On PostgreSQL
/// `SKIP LOCKED` keeps the purge off rows a request is taking over right
/// now, and lets several instances purge at once without waiting on each
/// other.
pub fn purge_expired_batch(conn: &mut Conn<'_>, batch: i64) -> QueryResult<usize> {
    match conn {
        Conn::Pg(c) => diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE id IN (\
               SELECT id FROM idempotency_keys WHERE expires_at <= now() \
               ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        )
        .bind::<BigInt, _>(batch)
        .execute(*c),
        Conn::Sqlite(c) => diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE id IN (\
               SELECT id FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        )
        .bind::<Text, _>(time_text(Utc::now()))
        .bind::<BigInt, _>(batch)
        .execute(*c),
    }
}
