//! The `accounts` table on PostgreSQL.

use chrono::{DateTime, Utc};
use diesel::dsl::now;
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{Bool, Timestamptz};

use super::note;
use crate::store::postgres::schema::accounts;
use crate::store::{AccountRecord, AccountStore, QueryResult, time_text};

impl AccountStore for PgConnection {
    fn insert_account(&mut self, name: &str, key_digest: &str, demo: bool) -> QueryResult<i64> {
        diesel::insert_into(accounts::table)
            .values((
                accounts::name.eq(name),
                accounts::api_key_sha256.eq(key_digest),
                accounts::demo.eq(demo),
            ))
            .returning(accounts::id)
            .get_result(self)
            .inspect_err(note)
    }

    fn revoke_account(&mut self, name: &str) -> QueryResult<Option<i64>> {
        diesel::update(
            accounts::table
                .filter(accounts::name.eq(name))
                .filter(accounts::revoked_at.is_null())
                .filter(accounts::demo.eq(false)),
        )
        .set(accounts::revoked_at.eq(now.into_sql::<Timestamptz>().nullable()))
        .returning(accounts::id)
        .get_result(self)
        .inspect_err(note)
        .optional()
    }

    fn list_accounts(&mut self) -> QueryResult<Vec<AccountRecord>> {
        type Row = (i64, String, DateTime<Utc>, Option<DateTime<Utc>>, bool);
        let rows: Vec<Row> = accounts::table
            .order(accounts::id)
            .select((
                accounts::id,
                accounts::name,
                accounts::created_at,
                accounts::revoked_at,
                accounts::demo,
            ))
            .load(self)
            .inspect_err(note)?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created, revoked, demo)| AccountRecord {
                id,
                name,
                created_at: time_text(created),
                revoked_at: revoked.map(time_text),
                demo,
            })
            .collect())
    }

    fn find_account(&mut self, key_digest: &str, include_demo: bool) -> QueryResult<Option<i64>> {
        accounts::table
            .filter(accounts::api_key_sha256.eq(key_digest))
            .filter(accounts::revoked_at.is_null())
            .filter(accounts::demo.eq(false).or(include_demo.into_sql::<Bool>()))
            .select(accounts::id)
            .first(self)
            .inspect_err(note)
            .optional()
    }

    fn account_is_live(&mut self, id: i64) -> QueryResult<bool> {
        diesel::select(diesel::dsl::exists(
            accounts::table
                .filter(accounts::id.eq(id))
                .filter(accounts::revoked_at.is_null()),
        ))
        .get_result(self)
        .inspect_err(note)
    }
    fn rekey_account(&mut self, name: &str, key_digest: &str) -> QueryResult<usize> {
        diesel::update(
            accounts::table
                .filter(accounts::name.eq(name))
                .filter(accounts::revoked_at.is_null()),
        )
        .set(accounts::api_key_sha256.eq(key_digest))
        .execute(self)
        .inspect_err(note)
    }
}
