//! The protocol's key store on PostgreSQL (`idempotency::key_store`): its
//! transaction, and its steps, each one statement of Diesel's query
//! builder; times on the database's clock.
//!
//! What it uses of this crate besides the protocol: the table's schema
//! (`schema.rs`, from `migrations/postgres/…_create_idempotency_keys`),
//! `Prepared` (a statement PostgreSQL plans once per connection) and `note`
//! (a lost connection is not given back to the pool), both in `mod.rs`.

use std::time::Duration;

use diesel::dsl::{AsExprOf, now, sql};
use diesel::expression::{SqlLiteral, UncheckedBind};
use diesel::pg::PgConnection;
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{Interval, Timestamptz};
use serde_json::Value;
use uuid::Uuid;

use super::{Prepared, note};
use crate::idempotency::key_store::{
    COMPLETED, Claim, IN_PROGRESS, KeyRecord, KeyStore, KeyedRequest, NewKeyStatus, QueryResult,
    RawKeyRow, SavedResponse, StuckKey, Transactional, takeover,
};
use crate::store::postgres::schema::idempotency_keys as keys;

#[derive(Queryable, Selectable)]
#[diesel(table_name = keys, check_for_backend(diesel::pg::Pg))]
struct KeyRow {
    fingerprint: String,
    status: String,
    response_status: Option<i16>,
    response_headers: Option<Value>,
    response_body: Option<Value>,
    /// `locked_until` is still ahead (meaningful for in-progress rows).
    #[diesel(select_expression = keys::locked_until.gt(now))]
    #[diesel(select_expression_type = diesel::dsl::Gt<keys::locked_until, now>)]
    lease_live: bool,
}

/// `now() + d`, on the database's clock.
fn from_now(d: Duration) -> UncheckedBind<SqlLiteral<Timestamptz>, AsExprOf<PgInterval, Interval>> {
    let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    sql::<Timestamptz>("now() + ").bind::<Interval, _>(PgInterval::from_microseconds(micros))
}

fn status_code(response: &SavedResponse) -> QueryResult<i16> {
    i16::try_from(response.status)
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
}

/// Every column of a new key row, as `insert_key` writes it and
/// `take_over_key` writes it over a row it takes. A completed row's lease
/// is over at once; an in-progress one is protected for the lease.
macro_rules! new_row {
    ($request:expr, $status:expr, $lease_token:expr) => {{
        let (status, code, headers, body, lease, request) = match $status {
            NewKeyStatus::InProgress => (
                IN_PROGRESS,
                None,
                None,
                None,
                $request.lease,
                Some(($request.path, $request.body, $request.foreign_step)),
            ),
            NewKeyStatus::Completed(response) => (
                COMPLETED,
                Some(status_code(response)?),
                Some(response.headers_json()),
                Some(&response.body),
                Duration::ZERO,
                None,
            ),
        };
        (
            keys::fingerprint.eq($request.fingerprint),
            keys::status.eq(status),
            keys::response_status.eq(code),
            keys::response_headers.eq(headers),
            keys::response_body.eq(body),
            keys::created_at.eq(now),
            keys::expires_at.eq(from_now($request.ttl)),
            keys::locked_until.eq(from_now(lease)),
            keys::lease_token.eq($lease_token),
            keys::request_path.eq(request.map(|r| r.0)),
            keys::request_body.eq(request.map(|r| r.1)),
            keys::foreign_step.eq(request.and_then(|r| r.2)),
        )
    }};
}

/// READ COMMITTED: a second insert of the same key waits on the unique
/// index entry until the first transaction commits (then finds its row) or
/// rolls back (then inserts); at REPEATABLE READ it would fail with a
/// serialization error instead.
impl Transactional for PgConnection {
    fn transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.build_transaction().read_committed().run(work)
    }
}

impl KeyStore for PgConnection {
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::account_id.eq(account_id))
            .filter(keys::key.eq(key))
            .filter(keys::expires_at.gt(now))
            .select(KeyRow::as_select())
            .first(self)
            .inspect_err(note)
            .optional()?;
        row.map(|r| {
            RawKeyRow {
                fingerprint: r.fingerprint,
                status: r.status,
                lease_live: r.lease_live,
                response_status: r.response_status.map(i32::from),
                response_headers: r.response_headers,
                response_body: r.response_body,
            }
            .decode()
        })
        .transpose()
    }

    fn insert_key(
        &mut self,
        request: &KeyedRequest<'_>,
        status: NewKeyStatus<'_>,
    ) -> QueryResult<Option<Claim>> {
        let lease_token = Uuid::new_v4();
        let inserted: Option<Uuid> = Prepared(
            diesel::insert_into(keys::table)
                .values((
                    keys::account_id.eq(request.account_id),
                    keys::key.eq(request.key),
                    new_row!(request, status, lease_token),
                ))
                .on_conflict((keys::account_id, keys::key))
                .do_nothing()
                .returning(keys::lease_token),
        )
        .get_result(self)
        .inspect_err(note)
        .optional()?;
        Ok(inserted.map(|token| Claim::new(request, token, status)))
    }

    fn take_over_key(
        &mut self,
        request: &KeyedRequest<'_>,
        status: NewKeyStatus<'_>,
    ) -> QueryResult<Option<Claim>> {
        let lease_token = Uuid::new_v4();
        let takeable = takeover(
            keys::expires_at.le(now),
            keys::status.eq(IN_PROGRESS),
            keys::locked_until.lt(now),
            keys::fingerprint.eq(request.fingerprint),
        );
        let taken: Option<Uuid> = Prepared(
            diesel::update(
                keys::table
                    .filter(keys::account_id.eq(request.account_id))
                    .filter(keys::key.eq(request.key))
                    .filter(takeable),
            )
            .set(new_row!(request, status, lease_token))
            .returning(keys::lease_token),
        )
        .get_result(self)
        .inspect_err(note)
        .optional()?;
        Ok(taken.map(|token| Claim::new(request, token, status)))
    }

    fn complete_key(&mut self, claim: &Claim, response: &SavedResponse) -> QueryResult<bool> {
        let completed: Option<Uuid> = Prepared(
            diesel::update(
                keys::table
                    .filter(keys::account_id.eq(claim.account_id))
                    .filter(keys::key.eq(&claim.key))
                    .filter(keys::status.eq(IN_PROGRESS))
                    .filter(keys::lease_token.eq(claim.lease_token)),
            )
            .set((
                keys::status.eq(COMPLETED),
                keys::response_status.eq(status_code(response)?),
                keys::response_headers.eq(response.headers_json()),
                keys::response_body.eq(&response.body),
            ))
            .returning(keys::lease_token),
        )
        .get_result(self)
        .inspect_err(note)
        .optional()?;
        Ok(completed.is_some())
    }

    fn release_key(&mut self, claim: &Claim) -> QueryResult<usize> {
        diesel::delete(
            keys::table
                .filter(keys::account_id.eq(claim.account_id))
                .filter(keys::key.eq(&claim.key))
                .filter(keys::status.eq(IN_PROGRESS))
                .filter(keys::lease_token.eq(claim.lease_token)),
        )
        .execute(self)
        .inspect_err(note)
    }

    fn find_stuck_accounts(&mut self, limit: i64) -> QueryResult<Vec<i64>> {
        keys::table
            .filter(keys::status.eq(IN_PROGRESS))
            .filter(keys::locked_until.lt(now))
            .filter(keys::expires_at.gt(now))
            .filter(keys::request_path.is_not_null())
            .group_by(keys::account_id)
            .order(diesel::dsl::min(keys::locked_until))
            .limit(limit)
            .select(keys::account_id)
            .load(self)
            .inspect_err(note)
    }

    fn find_stuck_keys(
        &mut self,
        account_id: i64,
        limit: i64,
        steps: &[String],
    ) -> QueryResult<Vec<StuckKey>> {
        type Row = (
            i64,
            String,
            String,
            Option<String>,
            Option<Value>,
            Option<String>,
        );
        let performable = keys::foreign_step
            .is_null()
            .or(keys::foreign_step.eq_any(steps));
        let rows: Vec<Row> = keys::table
            .filter(keys::account_id.eq(account_id))
            .filter(keys::status.eq(IN_PROGRESS))
            .filter(keys::locked_until.lt(now))
            .filter(keys::expires_at.gt(now))
            .filter(keys::request_path.is_not_null())
            .order((performable.desc(), keys::locked_until))
            .limit(limit)
            .select((
                keys::account_id,
                keys::key,
                keys::fingerprint,
                keys::request_path,
                keys::request_body,
                keys::foreign_step,
            ))
            .load(self)
            .inspect_err(note)?;
        Ok(rows
            .into_iter()
            .filter_map(|(account_id, key, fingerprint, path, body, foreign_step)| {
                Some(StuckKey {
                    account_id,
                    key,
                    fingerprint,
                    path: path?,
                    body: body?,
                    foreign_step,
                })
            })
            .collect())
    }

    /// `SKIP LOCKED` keeps the purge off rows a request is taking over right
    /// now, and lets several instances purge at once without waiting on
    /// each other. No `ORDER BY`: any expired rows will do, found through
    /// the BRIN index on `expires_at` without sorting them. (Diesel's query
    /// builder has no `ctid` nor `FOR UPDATE` in a subquery: plain SQL.)
    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(\
               SELECT ctid FROM idempotency_keys WHERE expires_at <= now() \
               LIMIT $1 FOR UPDATE SKIP LOCKED))",
        )
        .bind::<diesel::sql_types::BigInt, _>(batch)
        .execute(self)
        .inspect_err(note)
    }
}
