//! The card network's `authorizations` table on SQLite.

use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use uuid::Uuid;

use super::schema::authorizations as auth;
use super::{parse_time, parse_uuid};
use crate::store::{Authorization, AuthorizationStore, QueryResult, time_text};

type Row = (String, i64, i64, String, String, Option<String>);

fn decode(
    (id, account_id, amount, currency, created_at, voided_at): Row,
) -> QueryResult<Authorization> {
    Ok(Authorization {
        id: parse_uuid(&id)?,
        account_id,
        amount,
        currency,
        created_at: parse_time(&created_at)?,
        voided_at: voided_at.as_deref().map(parse_time).transpose()?,
    })
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

impl AuthorizationStore for SqliteConnection {
    fn insert_authorization(&mut self, a: &Authorization) -> QueryResult<()> {
        diesel::insert_into(auth::table)
            .values((
                auth::id.eq(a.id.to_string()),
                auth::account_id.eq(a.account_id),
                auth::amount.eq(a.amount),
                auth::currency.eq(&a.currency),
                auth::created_at.eq(time_text(a.created_at)),
            ))
            .execute(self)
            .map(|_| ())
    }

    fn find_authorization(
        &mut self,
        account_id: i64,
        id: Uuid,
    ) -> QueryResult<Option<Authorization>> {
        auth::table
            .filter(auth::id.eq(id.to_string()))
            .filter(auth::account_id.eq(account_id))
            .select(COLUMNS)
            .first::<Row>(self)
            .optional()?
            .map(decode)
            .transpose()
    }

    fn list_authorizations(
        &mut self,
        account_id: i64,
        limit: i64,
    ) -> QueryResult<Vec<Authorization>> {
        auth::table
            .filter(auth::account_id.eq(account_id))
            .order((auth::created_at.desc(), auth::id.desc()))
            .limit(limit)
            .select(COLUMNS)
            .load::<Row>(self)?
            .into_iter()
            .map(decode)
            .collect()
    }

    fn void_authorization(
        &mut self,
        account_id: i64,
        id: Uuid,
    ) -> QueryResult<Option<Authorization>> {
        // The app's clock, as every SQLite time; a voided one keeps its first.
        diesel::update(
            auth::table
                .filter(auth::id.eq(id.to_string()))
                .filter(auth::account_id.eq(account_id))
                .filter(auth::voided_at.is_null()),
        )
        .set(auth::voided_at.eq(time_text(crate::store::now_micros())))
        .execute(self)?;
        self.find_authorization(account_id, id)
    }
}
