//! The key store on PostgreSQL (`key_store`): its transaction, and its
//! steps, each one statement of Diesel's query builder, over the table in
//! `sql/postgres.sql`; times on the database's clock.

use std::time::Duration;

use diesel::dsl::{AsExprOf, now, sql};
use diesel::expression::{SqlLiteral, UncheckedBind};
use diesel::pg::PgConnection;
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{Interval, Timestamptz};
use serde_json::Value;
use uuid::Uuid;

use crate::key_store::{
    COMPLETED, Claim, IN_PROGRESS, KeyRecord, KeyStore, NewKey, NewKeyStatus, QueryResult,
    RawKeyRow, SavedResponse, StuckKey, Transactional, takeover,
};
use schema::idempotency_keys as keys;

/// The key table's `CREATE` statements (`sql/postgres.sql`), for a migration
/// of yours (run once; add your foreign key to your accounts table).
pub const CREATE_TABLE: &str = include_str!("../sql/postgres.sql");

/// The table, as `sql/postgres.sql` creates it.
pub mod schema {
    diesel::table! {
        idempotency_keys (account_id, key) {
            account_id -> Int8,
            key -> Text,
            fingerprint -> Text,
            status -> Text,
            response_status -> Nullable<Int2>,
            response_headers -> Nullable<Jsonb>,
            response_body -> Nullable<Jsonb>,
            created_at -> Timestamptz,
            expires_at -> Timestamptz,
            locked_until -> Timestamptz,
            lease_token -> Uuid,
            request_path -> Nullable<Text>,
            request_body -> Nullable<Jsonb>,
            foreign_step -> Nullable<Text>,
        }
    }
}

/// A statement whose SQL text is the same every time it runs: no optional
/// parts, no IN lists. Diesel never caches upserts, UPDATEs or SQL literals
/// as prepared statements, because in general their text can vary; ours
/// cannot, and wrapping them lets PostgreSQL plan them once per connection
/// instead of on every request (the cache is keyed by the SQL text). Run it
/// with `get_result`/`load`: Diesel's `execute` path ignores the wrapper.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<Q>(pub Q);

impl<Q> diesel::query_builder::QueryId for Prepared<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: diesel::query_builder::Query> diesel::query_builder::Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}

impl<Q, DB> diesel::query_builder::QueryFragment<DB> for Prepared<Q>
where
    DB: diesel::backend::Backend,
    Q: diesel::query_builder::QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, pass: diesel::query_builder::AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q, Conn> RunQueryDsl<Conn> for Prepared<Q> {}

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
    ($row:expr, $lease_token:expr) => {{
        let (status, code, headers, body, lease, request) = match $row.status {
            NewKeyStatus::InProgress => (
                IN_PROGRESS,
                None,
                None,
                None,
                $row.lease,
                Some(($row.request.path, $row.request.body, $row.foreign_step)),
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
            keys::fingerprint.eq($row.request.fingerprint),
            keys::status.eq(status),
            keys::response_status.eq(code),
            keys::response_headers.eq(headers),
            keys::response_body.eq(body),
            keys::created_at.eq(now),
            keys::expires_at.eq(from_now($row.ttl)),
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

    fn insert_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>> {
        let request = row.request;
        let lease_token = Uuid::new_v4();
        let inserted: Option<Uuid> = Prepared(
            diesel::insert_into(keys::table)
                .values((
                    keys::account_id.eq(request.account_id),
                    keys::key.eq(request.key),
                    new_row!(row, lease_token),
                ))
                .on_conflict((keys::account_id, keys::key))
                .do_nothing()
                .returning(keys::lease_token),
        )
        .get_result(self)
        .optional()?;
        Ok(inserted.map(|token| Claim::new(row, token)))
    }

    fn take_over_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>> {
        let request = row.request;
        let lease_token = Uuid::new_v4();
        let takeable = takeover(
            keys::expires_at.le(now),
            keys::status.eq(IN_PROGRESS),
            keys::locked_until.lt(now),
            keys::fingerprint
                .eq(request.fingerprint)
                .and(keys::foreign_step.is_not_distinct_from(row.foreign_step)),
        );
        let taken: Option<Uuid> = Prepared(
            diesel::update(
                keys::table
                    .filter(keys::account_id.eq(request.account_id))
                    .filter(keys::key.eq(request.key))
                    .filter(takeable),
            )
            .set(new_row!(row, lease_token))
            .returning(keys::lease_token),
        )
        .get_result(self)
        .optional()?;
        Ok(taken.map(|token| Claim::new(row, token)))
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
                // A completed row answers from its response: the request
                // it kept for recovery is not needed any more.
                keys::request_path.eq(None::<String>),
                keys::request_body.eq(None::<serde_json::Value>),
                keys::foreign_step.eq(None::<String>),
            ))
            .returning(keys::lease_token),
        )
        .get_result(self)
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
            .load(self)?;
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
    }
}
