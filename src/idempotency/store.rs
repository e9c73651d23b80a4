//! The `idempotency_keys` table. Every time here is the database's clock, so
//! several app instances agree on what has expired.

use std::time::Duration;

use diesel::dsl::{now, sql};
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{Interval, Timestamptz};
use diesel::upsert::excluded;
use serde_json::Value;
use uuid::Uuid;

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
}

/// The live (unexpired) row for a key, read without taking any lock.
pub fn find_live(
    conn: &mut PgConnection,
    account_id: i64,
    key: &str,
) -> QueryResult<Option<KeyRow>> {
    keys::table
        .filter(keys::account_id.eq(account_id))
        .filter(keys::key.eq(key))
        .filter(keys::expires_at.gt(now))
        .select(KeyRow::as_select())
        .first(conn)
        .optional()
}

/// Registers the key as in progress and returns its row id, or `None` when a
/// live row for the key already exists.
///
/// The unique index makes this statement wait while another transaction holds
/// an uncommitted row for the same key: when that one commits we get `None`,
/// when it rolls back we insert and go on as the first request. An expired
/// row that the purge has not removed yet is taken over, as if it were absent.
pub fn claim(
    conn: &mut PgConnection,
    account_id: i64,
    key: &str,
    fingerprint: &str,
    ttl: Duration,
) -> QueryResult<Option<i64>> {
    let ttl = PgInterval::from_microseconds(i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX));
    let upsert = diesel::insert_into(keys::table)
        .values((
            keys::account_id.eq(account_id),
            keys::key.eq(key),
            keys::fingerprint.eq(fingerprint),
            keys::status.eq(IN_PROGRESS),
            keys::created_at.eq(now),
            keys::expires_at.eq(sql::<Timestamptz>("now() + ").bind::<Interval, _>(ttl)),
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
        ));
    // `ON CONFLICT ... DO UPDATE ... WHERE`: only an expired row is taken over.
    diesel::query_dsl::methods::FilterDsl::filter(upsert, keys::expires_at.le(now))
        .returning(keys::id)
        .get_result(conn)
        .optional()
}

/// Marks the key completed with the response to replay.
pub fn complete(
    conn: &mut PgConnection,
    id: i64,
    charge_id: Option<Uuid>,
    status: u16,
    headers: &Value,
    body: &Value,
) -> QueryResult<()> {
    let updated = diesel::update(keys::table.find(id))
        .filter(keys::status.eq(IN_PROGRESS))
        .set((
            keys::status.eq(COMPLETED),
            keys::response_status.eq(status as i16),
            keys::response_headers.eq(headers),
            keys::response_body.eq(body),
            keys::charge_id.eq(charge_id),
        ))
        .execute(conn)?;
    if updated == 1 {
        Ok(())
    } else {
        Err(diesel::result::Error::NotFound)
    }
}
