//! The key store on PostgreSQL: the table (`sql/postgres.sql`), its
//! transaction, and what its statements (written once, in `key_table.rs`)
//! need of it, its `Dialect`: times on the database's clock.

use std::borrow::Cow;
use std::time::Duration;

use diesel::dsl::{self, AsExprOf, now, sql};
use diesel::expression::{SqlLiteral, UncheckedBind};
use diesel::pg::PgConnection;
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{Interval, Timestamptz};
use serde_json::Value;
use uuid::Uuid;

use crate::key_store::QueryResult;
use crate::key_table::{self, Backend, Dialect};
use crate::webhook::inbox;
use schema::{idempotency_keys as keys, webhook_inbox};

/// The key table's `CREATE` statements (`sql/postgres.sql`), for a migration
/// of yours (run once; add your foreign key to your accounts table).
pub const CREATE_TABLE: &str = include_str!("../sql/postgres.sql");

/// The tables, as `sql/postgres.sql` and `sql/postgres_inbox.sql` create them.
#[allow(missing_docs)] // Diesel's table! writes the columns.
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

    diesel::table! {
        webhook_inbox (source, event_id) {
            source -> Text,
            event_id -> Text,
            received_at -> Timestamptz,
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

/// What the statements written once in `key_table` need of PostgreSQL: its
/// UUIDs and JSON are the Rust types themselves (a body is bound borrowed,
/// never copied), its clock is the database's, and a statement that never
/// varies is planned once.
impl Dialect for PgConnection {
    type Token = Uuid;
    type Code = i16;
    type Json<'a> = Cow<'a, Value>;
    type Clock = AsExprOf<now, Timestamptz>;
    type Later = UncheckedBind<SqlLiteral<Timestamptz>, AsExprOf<PgInterval, Interval>>;
    type Earlier = Self::Later;
    type SameStep<'a> = dsl::IsNotDistinctFrom<keys::foreign_step, Option<&'a str>>;
    type Cached<Q> = Prepared<Q>;

    fn token(token: Uuid) -> Uuid {
        token
    }

    fn code(status: u16) -> QueryResult<i16> {
        i16::try_from(status).map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
    }

    fn json(value: Cow<'_, Value>) -> Cow<'_, Value> {
        value
    }

    fn read_json(json: Cow<'static, Value>) -> QueryResult<Value> {
        Ok(json.into_owned())
    }

    fn clock() -> Self::Clock {
        now.into_sql::<Timestamptz>()
    }

    /// `now() + d`, on the database's clock.
    fn from_now(d: Duration) -> Self::Later {
        sql::<Timestamptz>("now() + ").bind::<Interval, _>(interval(d))
    }

    /// `now() - d`, on the database's clock.
    fn ago(d: Duration) -> Self::Earlier {
        sql::<Timestamptz>("now() - ").bind::<Interval, _>(interval(d))
    }

    fn same_step(step: Option<&str>) -> Self::SameStep<'_> {
        keys::foreign_step.is_not_distinct_from(step)
    }

    fn cached<Q>(statement: Q) -> Prepared<Q> {
        Prepared(statement)
    }

    /// `SKIP LOCKED` keeps the purge off rows a request is taking over right
    /// now, and lets several instances purge at once without waiting on
    /// each other. No `ORDER BY`: any expired rows will do, found through
    /// the BRIN index on `expires_at` without sorting them. (Diesel's query
    /// builder has no `ctid` nor `FOR UPDATE` in a subquery: plain SQL.)
    fn purge(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(\
               SELECT ctid FROM idempotency_keys WHERE expires_at <= now() \
               LIMIT $1 FOR UPDATE SKIP LOCKED))",
        )
        .bind::<diesel::sql_types::BigInt, _>(batch)
        .execute(self)
    }
}

/// READ COMMITTED: a second insert of the same key waits on the unique
/// index entry until the first transaction commits (then finds its row) or
/// rolls back (then inserts); at REPEATABLE READ it would fail with a
/// serialization error instead.
impl Backend for PgConnection {
    fn key_transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.build_transaction().read_committed().run(work)
    }
}

/// `d` as a PostgreSQL interval (microseconds, saturating).
fn interval(d: Duration) -> PgInterval {
    PgInterval::from_microseconds(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

key_table::key_store!(PgConnection, keys);
inbox::inbox_store!(PgConnection, webhook_inbox);
