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
    /// `locked_until` is still ahead (meaningful for in-progress rows).
    #[diesel(select_expression = keys::locked_until.gt(now))]
    #[diesel(select_expression_type = diesel::dsl::Gt<keys::locked_until, now>)]
    pub lease_live: bool,
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
/// get `None`) or rolls back (we insert and go on as the first).
pub fn claim(
    conn: &mut PgConnection,
    account_id: i64,
    key: &str,
    fingerprint: &str,
    ttl: Duration,
    lease: Duration,
) -> QueryResult<Option<Claim>> {
    let lease_token = Uuid::new_v4();
    let upsert = diesel::insert_into(keys::table)
        .values((
            keys::account_id.eq(account_id),
            keys::key.eq(key),
            keys::fingerprint.eq(fingerprint),
            keys::status.eq(IN_PROGRESS),
            keys::created_at.eq(now),
            keys::expires_at.eq(sql::<Timestamptz>("now() + ").bind::<Interval, _>(interval(ttl))),
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
    diesel::query_dsl::methods::FilterDsl::filter(upsert, expired.or(stuck))
        .returning(keys::id)
        .get_result(conn)
        .optional()
        .map(|id| id.map(|id| Claim { id, lease_token }))
}

/// Marks the key completed with the response to replay. `false` when the
/// lease was lost: another request took the row over, so this one must not
/// complete it (its transaction then rolls back).
pub fn complete(
    conn: &mut PgConnection,
    claim: Claim,
    charge_id: Option<Uuid>,
    status: u16,
    headers: &Value,
    body: &Value,
) -> QueryResult<bool> {
    let updated = diesel::update(keys::table.find(claim.id))
        .filter(keys::status.eq(IN_PROGRESS))
        .filter(keys::lease_token.eq(claim.lease_token))
        .set((
            keys::status.eq(COMPLETED),
            keys::response_status.eq(status as i16),
            keys::response_headers.eq(headers),
            keys::response_body.eq(body),
            keys::charge_id.eq(charge_id),
        ))
        .execute(conn)?;
    Ok(updated == 1)
}

/// Gives a claimed key back after the operation failed, so that the retry
/// runs as the first request (key-first design; the atomic design's rollback
/// does this by itself).
pub fn release(conn: &mut PgConnection, claim: Claim) -> QueryResult<usize> {
    diesel::delete(keys::table.find(claim.id))
        .filter(keys::status.eq(IN_PROGRESS))
        .filter(keys::lease_token.eq(claim.lease_token))
        .execute(conn)
}

/// Deletes up to `batch` expired rows in one short statement. `SKIP LOCKED`
/// keeps the purge off rows a request is taking over right now, and lets
/// several instances purge at once without waiting on each other.
pub fn purge_expired_batch(conn: &mut PgConnection, batch: i64) -> QueryResult<usize> {
    diesel::sql_query(
        "DELETE FROM idempotency_keys WHERE id IN (\
           SELECT id FROM idempotency_keys WHERE expires_at <= now() \
           ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
    )
    .bind::<diesel::sql_types::BigInt, _>(batch)
    .execute(conn)
}
