//! The store on SQLite, the zero-setup default: plain SQL over
//! `migrations/sqlite`, where UUIDs, JSON and times are TEXT. SQLite is one
//! local file, so its clock is the app's: every time is written by the app as
//! fixed-width RFC 3339 text ([`time_text`]), so comparing the text compares
//! the times.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
use diesel::sqlite::SqliteConnection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use uuid::Uuid;

use super::{
    AccountRecord, AccountStore, Backend, Charge, ChargeStore, Claim, KeyRecord, KeyStatus,
    KeyStore, KeyView, NewClaim, QueryResult, RawKeyRow, SandboxStore, SavedResponse, Store,
    Unguarded, UnguardedView, json_column, time_text,
};
use crate::domain::NewCharge;

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

const IN_PROGRESS: &str = KeyStatus::InProgress.as_str();
const COMPLETED: &str = KeyStatus::Completed.as_str();

fn now_text() -> String {
    time_text(Utc::now())
}

/// `now + d` as SQLite stores times.
fn from_now(d: Duration) -> String {
    time_text(Utc::now() + chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX))
}

fn parse_time(text: &str) -> QueryResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
}

fn parse_uuid(text: &str) -> QueryResult<Uuid> {
    Uuid::parse_str(text).map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

impl Store for SqliteConnection {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Store) -> QueryResult<()>,
    ) -> QueryResult<()> {
        self.immediate_transaction(|tx| work(tx))
    }

    /// SQLite's write lock makes instances starting at once take turns.
    fn migrate(&mut self) -> Result<Vec<String>, String> {
        self.run_pending_migrations(MIGRATIONS)
            .map(|applied| applied.iter().map(|m| m.to_string()).collect())
            .map_err(|e| e.to_string())
    }

    fn ping(&mut self) -> QueryResult<()> {
        diesel::sql_query("SELECT 1").execute(self).map(|_| ())
    }
}

const CHARGE_COLUMNS: &str = "id, account_id, amount, currency, description, created_at";

#[derive(QueryableByName)]
struct ChargeRow {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = BigInt)]
    account_id: i64,
    #[diesel(sql_type = BigInt)]
    amount: i64,
    #[diesel(sql_type = Text)]
    currency: String,
    #[diesel(sql_type = Nullable<Text>)]
    description: Option<String>,
    #[diesel(sql_type = Text)]
    created_at: String,
}

impl ChargeRow {
    fn decode(self) -> QueryResult<Charge> {
        Ok(Charge {
            id: parse_uuid(&self.id)?,
            account_id: self.account_id,
            amount: self.amount,
            currency: self.currency,
            description: self.description,
            created_at: parse_time(&self.created_at)?,
        })
    }
}

impl ChargeStore for SqliteConnection {
    fn insert_charge(&mut self, account_id: i64, new: &NewCharge) -> QueryResult<Charge> {
        diesel::sql_query(format!(
            "INSERT INTO charges ({CHARGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) RETURNING {CHARGE_COLUMNS}"
        ))
        .bind::<Text, _>(Uuid::new_v4().to_string())
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(new.amount.get())
        .bind::<Text, _>(new.currency.code())
        .bind::<Nullable<Text>, _>(new.description.as_ref().map(|d| d.as_str()))
        .bind::<Text, _>(now_text())
        .get_result::<ChargeRow>(self)?
        .decode()
    }

    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
        diesel::sql_query(format!(
            "SELECT {CHARGE_COLUMNS} FROM charges WHERE id = ? AND account_id = ?"
        ))
        .bind::<Text, _>(id.to_string())
        .bind::<BigInt, _>(account_id)
        .get_result::<ChargeRow>(self)
        .optional()?
        .map(ChargeRow::decode)
        .transpose()
    }

    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>> {
        diesel::sql_query(format!(
            "SELECT {CHARGE_COLUMNS} FROM charges WHERE account_id = ? \
             ORDER BY created_at DESC, id DESC LIMIT ?"
        ))
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load::<ChargeRow>(self)?
        .into_iter()
        .map(ChargeRow::decode)
        .collect()
    }
}

#[derive(QueryableByName)]
struct KeyRow {
    #[diesel(sql_type = Text)]
    fingerprint: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<Integer>)]
    response_status: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    response_headers: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    response_body: Option<String>,
    #[diesel(sql_type = Bool)]
    lease_live: bool,
}

impl KeyStore for SqliteConnection {
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>> {
        let now = now_text();
        let row: Option<KeyRow> = diesel::sql_query(
            "SELECT fingerprint, status, response_status, response_headers, response_body, \
                    locked_until > ? AS lease_live \
             FROM idempotency_keys WHERE account_id = ? AND key = ? AND expires_at > ?",
        )
        .bind::<Text, _>(&now)
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(key)
        .bind::<Text, _>(&now)
        .get_result(self)
        .optional()?;
        row.map(|r| {
            RawKeyRow {
                fingerprint: r.fingerprint,
                status: r.status,
                lease_live: r.lease_live,
                response_status: r.response_status,
                response_headers: json_column(r.response_headers)?,
                response_body: json_column(r.response_body)?,
            }
            .decode()
        })
        .transpose()
    }

    fn claim_key(&mut self, claim: &NewClaim<'_>) -> QueryResult<Option<Claim>> {
        let lease_token = Uuid::new_v4();
        let now = now_text();
        // The takeover rule (see `KeyStore::claim_key`): expired, or stuck.
        let id = diesel::sql_query(
            "INSERT INTO idempotency_keys \
               (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (account_id, key) DO UPDATE SET \
               fingerprint = excluded.fingerprint, status = excluded.status, \
               response_status = NULL, response_headers = NULL, response_body = NULL, charge_id = NULL, \
               created_at = excluded.created_at, expires_at = excluded.expires_at, \
               locked_until = excluded.locked_until, lease_token = excluded.lease_token \
             WHERE idempotency_keys.expires_at <= ? \
                OR (idempotency_keys.status = ? AND idempotency_keys.locked_until < ? \
                    AND idempotency_keys.fingerprint = excluded.fingerprint) \
             RETURNING id",
        )
        .bind::<BigInt, _>(claim.account_id)
        .bind::<Text, _>(claim.key)
        .bind::<Text, _>(claim.fingerprint)
        .bind::<Text, _>(IN_PROGRESS)
        .bind::<Text, _>(&now)
        .bind::<Text, _>(from_now(claim.ttl))
        .bind::<Text, _>(from_now(claim.lease))
        .bind::<Text, _>(lease_token.to_string())
        .bind::<Text, _>(&now)
        .bind::<Text, _>(IN_PROGRESS)
        .bind::<Text, _>(&now)
        .get_result::<Id>(self)
        .optional()?;
        Ok(id.map(|r| Claim {
            id: r.id,
            lease_token,
        }))
    }

    fn complete_key(
        &mut self,
        claim: Claim,
        resource_id: Option<Uuid>,
        response: &SavedResponse,
    ) -> QueryResult<bool> {
        let headers = serde_json::to_string(&response.headers).expect("a string map serializes");
        let updated = diesel::sql_query(
            "UPDATE idempotency_keys SET status = ?, response_status = ?, response_headers = ?, \
               response_body = ?, charge_id = ? \
             WHERE id = ? AND status = ? AND lease_token = ?",
        )
        .bind::<Text, _>(COMPLETED)
        .bind::<Integer, _>(i32::from(response.status))
        .bind::<Text, _>(headers)
        .bind::<Text, _>(response.body.to_string())
        .bind::<Nullable<Text>, _>(resource_id.map(|id| id.to_string()))
        .bind::<BigInt, _>(claim.id)
        .bind::<Text, _>(IN_PROGRESS)
        .bind::<Text, _>(claim.lease_token.to_string())
        .execute(self)?;
        Ok(updated == 1)
    }

    fn release_key(&mut self, claim: Claim) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE id = ? AND status = ? AND lease_token = ?",
        )
        .bind::<BigInt, _>(claim.id)
        .bind::<Text, _>(IN_PROGRESS)
        .bind::<Text, _>(claim.lease_token.to_string())
        .execute(self)
    }

    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE id IN (\
               SELECT id FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
        )
        .bind::<Text, _>(now_text())
        .bind::<BigInt, _>(batch)
        .execute(self)
    }
}

#[derive(QueryableByName)]
struct AccountRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    created_at: String,
    #[diesel(sql_type = Nullable<Text>)]
    revoked_at: Option<String>,
    #[diesel(sql_type = Bool)]
    demo: bool,
}

impl AccountStore for SqliteConnection {
    fn insert_account(&mut self, name: &str, key_digest: &str, demo: bool) -> QueryResult<i64> {
        diesel::sql_query(
            "INSERT INTO accounts (name, api_key_sha256, demo, created_at) VALUES (?, ?, ?, ?) RETURNING id",
        )
        .bind::<Text, _>(name)
        .bind::<Text, _>(key_digest)
        .bind::<Bool, _>(demo)
        .bind::<Text, _>(now_text())
        .get_result::<Id>(self)
        .map(|r| r.id)
    }

    fn revoke_account(&mut self, name: &str) -> QueryResult<Option<i64>> {
        diesel::sql_query(
            "UPDATE accounts SET revoked_at = ? \
             WHERE name = ? AND revoked_at IS NULL AND demo = 0 RETURNING id",
        )
        .bind::<Text, _>(now_text())
        .bind::<Text, _>(name)
        .get_result::<Id>(self)
        .optional()
        .map(|r| r.map(|r| r.id))
    }

    fn list_accounts(&mut self) -> QueryResult<Vec<AccountRecord>> {
        let rows: Vec<AccountRow> = diesel::sql_query(
            "SELECT id, name, created_at, revoked_at, demo FROM accounts ORDER BY id",
        )
        .load(self)?;
        Ok(rows
            .into_iter()
            .map(|r| AccountRecord {
                id: r.id,
                name: r.name,
                created_at: r.created_at,
                revoked_at: r.revoked_at,
                demo: r.demo,
            })
            .collect())
    }

    fn find_account(&mut self, key_digest: &str, include_demo: bool) -> QueryResult<Option<i64>> {
        diesel::sql_query(
            "SELECT id FROM accounts \
             WHERE api_key_sha256 = ? AND revoked_at IS NULL AND (demo = 0 OR ?)",
        )
        .bind::<Text, _>(key_digest)
        .bind::<Bool, _>(include_demo)
        .get_result::<Id>(self)
        .optional()
        .map(|r| r.map(|r| r.id))
    }
}

#[derive(QueryableByName)]
struct KeyViewRow {
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Text)]
    fingerprint: String,
    #[diesel(sql_type = Nullable<Integer>)]
    response_status: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    charge_id: Option<String>,
    #[diesel(sql_type = Text)]
    created_at: String,
    #[diesel(sql_type = Text)]
    expires_at: String,
    #[diesel(sql_type = Bool)]
    expired: bool,
    #[diesel(sql_type = Text)]
    locked_until: String,
    #[diesel(sql_type = Bool)]
    lease_live: bool,
}

#[derive(QueryableByName)]
struct UnguardedRow {
    #[diesel(sql_type = Text)]
    key: String,
    #[diesel(sql_type = Text)]
    fingerprint: String,
    #[diesel(sql_type = Text)]
    charge_id: String,
    #[diesel(sql_type = Text)]
    response_body: String,
    #[diesel(sql_type = Text)]
    created_at: String,
}

impl SandboxStore for SqliteConnection {
    fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
        let now = now_text();
        let rows: Vec<KeyViewRow> = diesel::sql_query(
            "SELECT key, status, fingerprint, response_status, charge_id, created_at, expires_at, \
                    expires_at <= ? AS expired, locked_until, locked_until > ? AS lease_live \
             FROM idempotency_keys WHERE account_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind::<Text, _>(&now)
        .bind::<Text, _>(&now)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load(self)?;
        Ok(rows
            .into_iter()
            .map(|r| KeyView {
                key: r.key,
                status: r.status,
                fingerprint: r.fingerprint,
                response_status: r.response_status,
                charge_id: r.charge_id,
                created_at: r.created_at,
                expires_at: r.expires_at,
                expired: r.expired,
                locked_until: r.locked_until,
                lease_live: r.lease_live,
            })
            .collect())
    }

    fn unguarded_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<UnguardedView>> {
        let rows: Vec<UnguardedRow> = diesel::sql_query(
            "SELECT key, fingerprint, charge_id, response_body, created_at FROM demo_unguarded_keys \
             WHERE account_id = ? ORDER BY created_at DESC, id DESC LIMIT ?",
        )
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load(self)?;
        Ok(rows
            .into_iter()
            .map(|r| UnguardedView {
                key: r.key,
                charge_id: r.charge_id,
                created_at: r.created_at,
            })
            .collect())
    }

    fn find_unguarded(&mut self, account_id: i64, key: &str) -> QueryResult<Option<Unguarded>> {
        let row: Option<UnguardedRow> = diesel::sql_query(
            "SELECT key, fingerprint, charge_id, response_body, created_at FROM demo_unguarded_keys \
             WHERE account_id = ? AND key = ? LIMIT 1",
        )
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(key)
        .get_result(self)
        .optional()?;
        row.map(|r| {
            Ok(Unguarded {
                key: r.key,
                fingerprint: r.fingerprint,
                response_body: json_column(Some(r.response_body))?.expect("a body"),
            })
        })
        .transpose()
    }

    fn insert_unguarded(
        &mut self,
        account_id: i64,
        row: &Unguarded,
        charge_id: Uuid,
    ) -> QueryResult<()> {
        diesel::sql_query(
            "INSERT INTO demo_unguarded_keys \
               (account_id, key, fingerprint, charge_id, response_body, created_at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(&row.key)
        .bind::<Text, _>(&row.fingerprint)
        .bind::<Text, _>(charge_id.to_string())
        .bind::<Text, _>(row.response_body.to_string())
        .bind::<Text, _>(now_text())
        .execute(self)
        .map(|_| ())
    }

    fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()> {
        for table in ["idempotency_keys", "demo_unguarded_keys", "charges"] {
            diesel::sql_query(format!("DELETE FROM {table} WHERE account_id = ?"))
                .bind::<BigInt, _>(account_id)
                .execute(self)?;
        }
        Ok(())
    }

    fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize> {
        diesel::sql_query("DELETE FROM idempotency_keys WHERE account_id = ? AND expires_at <= ?")
            .bind::<BigInt, _>(account_id)
            .bind::<Text, _>(now_text())
            .execute(self)
    }

    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
        diesel::sql_query(
            "UPDATE idempotency_keys SET expires_at = ? WHERE account_id = ? AND key = ?",
        )
        .bind::<Text, _>(time_text(Utc::now() - chrono::Duration::seconds(1)))
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(key)
        .execute(self)
    }
}
