//! The `accounts` table on SQLite.

use diesel::prelude::*;
use diesel::sql_types::Bool;
use diesel::sqlite::SqliteConnection;

use super::now_text;
use super::schema::accounts;
use crate::store::{AccountRecord, AccountStore, QueryResult};

impl AccountStore for SqliteConnection {
    fn insert_account(&mut self, name: &str, key_digest: &str, demo: bool) -> QueryResult<i64> {
        diesel::insert_into(accounts::table)
            .values((
                accounts::name.eq(name),
                accounts::api_key_sha256.eq(key_digest),
                accounts::demo.eq(demo),
                accounts::created_at.eq(now_text()),
            ))
            .returning(accounts::id)
            .get_result(self)
    }

    fn revoke_account(&mut self, name: &str) -> QueryResult<Option<i64>> {
        diesel::update(
            accounts::table
                .filter(accounts::name.eq(name))
                .filter(accounts::revoked_at.is_null())
                .filter(accounts::demo.eq(false)),
        )
        .set(accounts::revoked_at.eq(now_text()))
        .returning(accounts::id)
        .get_result(self)
        .optional()
    }

    fn list_accounts(&mut self) -> QueryResult<Vec<AccountRecord>> {
        let rows: Vec<(i64, String, String, Option<String>, bool)> = accounts::table
            .order(accounts::id)
            .select((
                accounts::id,
                accounts::name,
                accounts::created_at,
                accounts::revoked_at,
                accounts::demo,
            ))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at, revoked_at, demo)| AccountRecord {
                id,
                name,
                created_at,
                revoked_at,
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
            .optional()
    }

    fn account_is_live(&mut self, id: i64) -> QueryResult<bool> {
        diesel::select(diesel::dsl::exists(
            accounts::table
                .filter(accounts::id.eq(id))
                .filter(accounts::revoked_at.is_null()),
        ))
        .get_result(self)
    }
    fn rekey_account(&mut self, name: &str, key_digest: &str) -> QueryResult<usize> {
        diesel::update(
            accounts::table
                .filter(accounts::name.eq(name))
                .filter(accounts::revoked_at.is_null()),
        )
        .set(accounts::api_key_sha256.eq(key_digest))
        .execute(self)
    }
}
