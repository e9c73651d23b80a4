//! The key store on SQLite (`key_store`): its transaction, and its steps,
//! each one statement of Diesel's query builder, over the table in
//! `sql/sqlite.sql`; times on the app's clock, as text ([`time_text`]).

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use uuid::Uuid;

use crate::key_store::{
    COMPLETED, Claim, IN_PROGRESS, KeyRecord, KeyStore, NewKey, NewKeyStatus, QueryResult,
    RawKeyRow, SavedResponse, StuckKey, Transactional, takeover,
};
use schema::idempotency_keys as keys;

/// The key table's `CREATE` statements (`sql/sqlite.sql`), for a migration
/// of yours (run once; add your foreign key to your accounts table).
pub const CREATE_TABLE: &str = include_str!("../sql/sqlite.sql");

/// The table, as `sql/sqlite.sql` creates it.
pub mod schema {
    diesel::table! {
        idempotency_keys (account_id, key) {
            account_id -> BigInt,
            key -> Text,
            fingerprint -> Text,
            status -> Text,
            response_status -> Nullable<Integer>,
            response_headers -> Nullable<Text>,
            response_body -> Nullable<Text>,
            created_at -> Text,
            expires_at -> Text,
            locked_until -> Text,
            lease_token -> Text,
            request_path -> Nullable<Text>,
            request_body -> Nullable<Text>,
            foreign_step -> Nullable<Text>,
        }
    }
}

/// A time as SQLite stores it: RFC 3339 in UTC with microseconds, a fixed
/// width, so that text order is time order.
pub fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn now_text() -> String {
    time_text(Utc::now())
}

/// `now + d` as SQLite stores times.
fn from_now(d: Duration) -> String {
    time_text(Utc::now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
}

fn json_column(text: Option<String>) -> QueryResult<Option<serde_json::Value>> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
    })
    .transpose()
}

/// Every column of a new key row, as `insert_key` writes it and
/// `take_over_key` writes it over a row it takes. A completed row's lease
/// is over at once; an in-progress one is protected for the lease.
macro_rules! new_row {
    ($row:expr, $lease_token:expr) => {{
        let now = now_text();
        let (status, code, headers, body, locked_until, request) = match $row.status {
            NewKeyStatus::InProgress => (
                IN_PROGRESS,
                None,
                None,
                None,
                from_now($row.lease),
                Some((
                    $row.request.path,
                    $row.request.body.to_string(),
                    $row.foreign_step,
                )),
            ),
            NewKeyStatus::Completed(response) => (
                COMPLETED,
                Some(i32::from(response.status)),
                Some(response.headers_json().to_string()),
                Some(response.body.to_string()),
                now.clone(),
                None,
            ),
        };
        let (request_path, request_body, foreign_step) = match request {
            Some((path, body, step)) => (Some(path), Some(body), step),
            None => (None, None, None),
        };
        (
            keys::fingerprint.eq($row.request.fingerprint),
            keys::status.eq(status),
            keys::response_status.eq(code),
            keys::response_headers.eq(headers),
            keys::response_body.eq(body),
            keys::created_at.eq(now),
            keys::expires_at.eq(from_now($row.ttl)),
            keys::locked_until.eq(locked_until),
            keys::lease_token.eq($lease_token.to_string()),
            keys::request_path.eq(request_path),
            keys::request_body.eq(request_body),
            keys::foreign_step.eq(foreign_step),
        )
    }};
}

/// `BEGIN IMMEDIATE`: the database's write lock is taken up front, so a
/// concurrent writer (a second insert of the same key among them) waits for
/// the whole transaction (the busy timeout) instead of failing halfway
/// when a deferred transaction upgrades its lock.
impl Transactional for SqliteConnection {
    fn transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E> {
        self.immediate_transaction(work)
    }
}

impl KeyStore for SqliteConnection {
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>> {
        type Row = (
            String,
            String,
            Option<i32>,
            Option<String>,
            Option<String>,
            String,
        );
        let now = now_text();
        let row: Option<Row> = keys::table
            .filter(keys::account_id.eq(account_id))
            .filter(keys::key.eq(key))
            .filter(keys::expires_at.gt(&now))
            .select((
                keys::fingerprint,
                keys::status,
                keys::response_status,
                keys::response_headers,
                keys::response_body,
                keys::locked_until,
            ))
            .first(self)
            .optional()?;
        row.map(|(fingerprint, status, code, headers, body, locked_until)| {
            RawKeyRow {
                fingerprint,
                status,
                lease_live: locked_until > now,
                response_status: code,
                response_headers: json_column(headers)?,
                response_body: json_column(body)?,
            }
            .decode()
        })
        .transpose()
    }

    fn insert_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>> {
        let request = row.request;
        let lease_token = Uuid::new_v4();
        let inserted = diesel::insert_into(keys::table)
            .values((
                keys::account_id.eq(request.account_id),
                keys::key.eq(request.key),
                new_row!(row, lease_token),
            ))
            .on_conflict((keys::account_id, keys::key))
            .do_nothing()
            .execute(self)?;
        Ok((inserted == 1).then(|| Claim::new(row, lease_token)))
    }

    fn take_over_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>> {
        let request = row.request;
        let lease_token = Uuid::new_v4();
        let now = now_text();
        let takeable = takeover(
            keys::expires_at.le(now.clone()),
            keys::status.eq(IN_PROGRESS),
            keys::locked_until.lt(now),
            keys::fingerprint
                .eq(request.fingerprint)
                .and(keys::foreign_step.is(row.foreign_step)),
        );
        let taken = diesel::update(
            keys::table
                .filter(keys::account_id.eq(request.account_id))
                .filter(keys::key.eq(request.key))
                .filter(takeable),
        )
        .set(new_row!(row, lease_token))
        .execute(self)?;
        Ok((taken == 1).then(|| Claim::new(row, lease_token)))
    }

    fn complete_key(&mut self, claim: &Claim, response: &SavedResponse) -> QueryResult<bool> {
        let completed = diesel::update(
            keys::table
                .filter(keys::account_id.eq(claim.account_id))
                .filter(keys::key.eq(&claim.key))
                .filter(keys::status.eq(IN_PROGRESS))
                .filter(keys::lease_token.eq(claim.lease_token.to_string())),
        )
        .set((
            keys::status.eq(COMPLETED),
            keys::response_status.eq(i32::from(response.status)),
            keys::response_headers.eq(response.headers_json().to_string()),
            keys::response_body.eq(response.body.to_string()),
            // A completed row answers from its response: the request it
            // kept for recovery is not needed any more.
            keys::request_path.eq(None::<String>),
            keys::request_body.eq(None::<String>),
            keys::foreign_step.eq(None::<String>),
        ))
        .execute(self)?;
        Ok(completed == 1)
    }

    fn release_key(&mut self, claim: &Claim) -> QueryResult<usize> {
        diesel::delete(
            keys::table
                .filter(keys::account_id.eq(claim.account_id))
                .filter(keys::key.eq(&claim.key))
                .filter(keys::status.eq(IN_PROGRESS))
                .filter(keys::lease_token.eq(claim.lease_token.to_string())),
        )
        .execute(self)
    }

    fn find_stuck_accounts(&mut self, limit: i64) -> QueryResult<Vec<i64>> {
        let now = now_text();
        keys::table
            .filter(keys::status.eq(IN_PROGRESS))
            .filter(keys::locked_until.lt(&now))
            .filter(keys::expires_at.gt(&now))
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
            Option<String>,
            Option<String>,
        );
        let now = now_text();
        let performable = keys::foreign_step
            .is_null()
            .or(keys::foreign_step.eq_any(steps));
        let rows: Vec<Row> = keys::table
            .filter(keys::account_id.eq(account_id))
            .filter(keys::status.eq(IN_PROGRESS))
            .filter(keys::locked_until.lt(&now))
            .filter(keys::expires_at.gt(&now))
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
        let mut stuck = Vec::new();
        for (account_id, key, fingerprint, path, body, foreign_step) in rows {
            if let (Some(path), Some(body)) = (path, json_column(body)?) {
                stuck.push(StuckKey {
                    account_id,
                    key,
                    fingerprint,
                    path,
                    body,
                    foreign_step,
                });
            }
        }
        Ok(stuck)
    }

    /// Oldest first, by rowid (the primary key is a pair, which Diesel's
    /// `IN` cannot spell): plain SQL.
    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE rowid IN (SELECT rowid FROM idempotency_keys \
             WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        )
        .bind::<diesel::sql_types::Text, _>(now_text())
        .bind::<diesel::sql_types::BigInt, _>(batch)
        .execute(self)
    }
}
