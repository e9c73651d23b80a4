//! The card network's `authorizations` table on PostgreSQL.

use chrono::{DateTime, Utc};
use diesel::dsl::now;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::Timestamptz;
use uuid::Uuid;

use super::note;
use crate::store::postgres::schema::authorizations as auth;
use crate::store::{Authorization, AuthorizationStore, QueryResult};

type Row = (Uuid, i64, i64, String, DateTime<Utc>, Option<DateTime<Utc>>);

fn decode((id, account_id, amount, currency, created_at, voided_at): Row) -> Authorization {
    Authorization {
        id,
        account_id,
        amount,
        currency,
        created_at,
        voided_at,
    }
}

const COLUMNS: (
    auth::id,
    auth::account_id,
    auth::amount,
    auth::currency,
    auth::created_at,
    auth::voided_at,
) = (
    auth::id,
    auth::account_id,
    auth::amount,
    auth::currency,
    auth::created_at,
    auth::voided_at,
);

impl AuthorizationStore for PgConnection {
    fn insert_authorization(&mut self, a: &Authorization) -> QueryResult<()> {
        diesel::insert_into(auth::table)
            .values((
                auth::id.eq(a.id),
                auth::account_id.eq(a.account_id),
                auth::amount.eq(a.amount),
                auth::currency.eq(&a.currency),
                auth::created_at.eq(a.created_at),
            ))
            .execute(self)
            .inspect_err(note)
            .map(|_| ())
    }

    fn find_authorization(
        &mut self,
        account_id: i64,
        id: Uuid,
    ) -> QueryResult<Option<Authorization>> {
        auth::table
            .filter(auth::id.eq(id))
            .filter(auth::account_id.eq(account_id))
            .select(COLUMNS)
            .first::<Row>(self)
            .inspect_err(note)
            .optional()
            .map(|r| r.map(decode))
    }

    fn list_authorizations(
        &mut self,
        account_id: i64,
        limit: i64,
    ) -> QueryResult<Vec<Authorization>> {
        let rows: Vec<Row> = auth::table
            .filter(auth::account_id.eq(account_id))
            .order((auth::created_at.desc(), auth::id.desc()))
            .limit(limit)
            .select(COLUMNS)
            .load(self)
            .inspect_err(note)?;
        Ok(rows.into_iter().map(decode).collect())
    }

    fn void_authorization(
        &mut self,
        account_id: i64,
        id: Uuid,
    ) -> QueryResult<Option<Authorization>> {
        // A voided one keeps its first time.
        diesel::update(
            auth::table
                .filter(auth::id.eq(id))
                .filter(auth::account_id.eq(account_id))
                .filter(auth::voided_at.is_null()),
        )
        .set(auth::voided_at.eq(now.into_sql::<Timestamptz>().nullable()))
        .execute(self)
        .inspect_err(note)?;
        self.find_authorization(account_id, id)
    }
}
