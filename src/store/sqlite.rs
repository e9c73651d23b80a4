//! The store on SQLite, the zero-setup default: plain SQL over
//! `migrations/sqlite`, where UUIDs, JSON and times are TEXT. SQLite is one
//! local file, so its clock is the app's: every time is written by the app as
//! fixed-width RFC 3339 text ([`time_text`]), so comparing the text compares
//! the times.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};
use diesel::sqlite::SqliteConnection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use uuid::Uuid;

use super::{
    AccountRecord, AccountStore, Backend, Charge, ChargeStore, Claim, FirstWrite, KeyRecord,
    KeyStatus, KeyStore, KeyView, NewClaim, QueryResult, RawKeyRow, SandboxStore, SavedResponse,
    Store, Unguarded, UnguardedView, json_column, time_text,
};

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

/// One write transaction: `BEGIN IMMEDIATE`, which takes the database's
/// write lock up front, so a concurrent writer waits (busy timeout) for the
/// whole transaction rather than failing halfway; inside one already (a
/// demo hook's), a savepoint.
fn write_transaction<T>(
    conn: &mut SqliteConnection,
    work: impl FnOnce(&mut SqliteConnection) -> QueryResult<T>,
) -> QueryResult<T> {
    use diesel::connection::{AnsiTransactionManager, TransactionManager};
    match AnsiTransactionManager::transaction_manager_status_mut(conn).transaction_depth()? {
        None => conn.immediate_transaction(work),
        Some(_) => conn.transaction(work),
    }
}

impl Store for SqliteConnection {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Store) -> QueryResult<()>,
    ) -> QueryResult<()> {
        write_transaction(self, |tx| work(tx))
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
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()> {
        diesel::sql_query(format!(
            "INSERT INTO charges ({CHARGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
        ))
        .bind::<Text, _>(charge.id.to_string())
        .bind::<BigInt, _>(charge.account_id)
        .bind::<BigInt, _>(charge.amount)
        .bind::<Text, _>(&charge.currency)
        .bind::<Nullable<Text>, _>(charge.description.as_deref())
        .bind::<Text, _>(time_text(charge.created_at))
        .execute(self)
        .map(|_| ())
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

/// The takeover rule over the key row `k` (see `KeyStore::charge_once`),
/// written once; its `?`s are now, the status in progress, now, and the new
/// request's fingerprint (`fingerprint` names it).
fn takeable(fingerprint: &str) -> String {
    format!(
        "(k.expires_at <= ? OR (k.status = ? AND k.locked_until < ? AND k.fingerprint = {fingerprint}))"
    )
}

/// Binds the rule's parameters after the ones before it.
macro_rules! bind_rule {
    ($query:expr, $now:expr) => {
        $query
            .bind::<Text, _>($now)
            .bind::<Text, _>(IN_PROGRESS)
            .bind::<Text, _>($now)
    };
}

static LIVE_ROW: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT fingerprint, status, response_status, response_headers, response_body,                 locked_until > ? AS lease_live          FROM idempotency_keys k WHERE account_id = ? AND key = ? AND NOT {}",
        takeable("?")
    )
});

/// A claim: the key row, in progress or completed, over a row that may be
/// taken over. `RETURNING 1` when it wrote.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO idempotency_keys AS k (account_id, key, fingerprint, status, response_status,            response_headers, response_body, charge_id, created_at, expires_at, locked_until, lease_token)          VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)          ON CONFLICT (account_id, key) DO UPDATE SET            fingerprint = excluded.fingerprint, status = excluded.status,            response_status = excluded.response_status, response_headers = excluded.response_headers,            response_body = excluded.response_body, charge_id = excluded.charge_id,            created_at = excluded.created_at, expires_at = excluded.expires_at,            locked_until = excluded.locked_until, lease_token = excluded.lease_token          WHERE {}          RETURNING 1 AS id",
        takeable("excluded.fingerprint")
    )
});

/// A claim's row: what the key row is written as.
struct ClaimRow<'a> {
    claim: &'a NewClaim<'a>,
    status: &'static str,
    response: Option<(&'a SavedResponse, Uuid)>,
    locked_until: String,
    lease_token: Uuid,
}

fn write_claim(conn: &mut SqliteConnection, row: ClaimRow<'_>) -> QueryResult<bool> {
    let now = now_text();
    let (status, headers, body, charge_id) = match row.response {
        Some((response, charge_id)) => (
            Some(i32::from(response.status)),
            Some(serde_json::to_string(&response.headers).expect("a string map serializes")),
            Some(response.body.to_string()),
            Some(charge_id.to_string()),
        ),
        None => (None, None, None, None),
    };
    let written = bind_rule!(
        diesel::sql_query(CLAIM.as_str())
            .bind::<BigInt, _>(row.claim.account_id)
            .bind::<Text, _>(row.claim.key)
            .bind::<Text, _>(row.claim.fingerprint)
            .bind::<Text, _>(row.status)
            .bind::<Nullable<Integer>, _>(status)
            .bind::<Nullable<Text>, _>(headers)
            .bind::<Nullable<Text>, _>(body)
            .bind::<Nullable<Text>, _>(charge_id)
            .bind::<Text, _>(&now)
            .bind::<Text, _>(from_now(row.claim.ttl))
            .bind::<Text, _>(row.locked_until)
            .bind::<Text, _>(row.lease_token.to_string()),
        &now
    )
    .get_result::<Id>(conn)
    .optional()?;
    Ok(written.is_some())
}

fn live_row(conn: &mut SqliteConnection, claim: &NewClaim<'_>) -> QueryResult<Option<KeyRecord>> {
    let now = now_text();
    let row: Option<KeyRow> = bind_rule!(
        diesel::sql_query(LIVE_ROW.as_str())
            .bind::<Text, _>(&now)
            .bind::<BigInt, _>(claim.account_id)
            .bind::<Text, _>(claim.key),
        &now
    )
    .bind::<Text, _>(claim.fingerprint)
    .get_result(conn)
    .optional()?;
    row.map(KeyRow::decode).transpose()
}

impl KeyRow {
    fn decode(self) -> QueryResult<KeyRecord> {
        RawKeyRow {
            fingerprint: self.fingerprint,
            status: self.status,
            lease_live: self.lease_live,
            response_status: self.response_status,
            response_headers: json_column(self.response_headers)?,
            response_body: json_column(self.response_body)?,
        }
        .decode()
    }
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
        row.map(KeyRow::decode).transpose()
    }

    /// Three statements in one `BEGIN IMMEDIATE` transaction (SQLite has no
    /// data-modifying CTEs): the live row that may not be taken over, or
    /// else the key row completed and the charge. Foreign keys are checked
    /// at COMMIT, so the key row may name the charge written after it.
    fn charge_once(
        &mut self,
        claim: &NewClaim<'_>,
        charge: &Charge,
        response: &SavedResponse,
    ) -> QueryResult<FirstWrite> {
        write_transaction(self, |tx| {
            if let Some(found) = live_row(tx, claim)? {
                return Ok(FirstWrite::Found(found));
            }
            diesel::sql_query("PRAGMA defer_foreign_keys = ON").execute(tx)?;
            let written = write_claim(
                tx,
                ClaimRow {
                    claim,
                    status: COMPLETED,
                    response: Some((response, charge.id)),
                    locked_until: now_text(),
                    lease_token: Uuid::new_v4(),
                },
            )?;
            if !written {
                return Ok(FirstWrite::Lost);
            }
            tx.insert_charge(charge)?;
            Ok(FirstWrite::Written)
        })
    }

    fn claim_key(&mut self, claim: &NewClaim<'_>) -> QueryResult<Option<Claim>> {
        let lease_token = Uuid::new_v4();
        let written = write_claim(
            self,
            ClaimRow {
                claim,
                status: IN_PROGRESS,
                response: None,
                locked_until: from_now(claim.lease),
                lease_token,
            },
        )?;
        Ok(written.then(|| Claim {
            account_id: claim.account_id,
            key: claim.key.to_owned(),
            lease_token,
        }))
    }

    fn complete_with_charge(
        &mut self,
        claim: &Claim,
        charge: &Charge,
        response: &SavedResponse,
    ) -> QueryResult<bool> {
        write_transaction(self, |tx| {
            diesel::sql_query("PRAGMA defer_foreign_keys = ON").execute(tx)?;
            let headers =
                serde_json::to_string(&response.headers).expect("a string map serializes");
            let updated = diesel::sql_query(
                "UPDATE idempotency_keys SET status = ?, response_status = ?, response_headers = ?, \
                   response_body = ?, charge_id = ? \
                 WHERE account_id = ? AND key = ? AND status = ? AND lease_token = ?",
            )
            .bind::<Text, _>(COMPLETED)
            .bind::<Integer, _>(i32::from(response.status))
            .bind::<Text, _>(headers)
            .bind::<Text, _>(response.body.to_string())
            .bind::<Text, _>(charge.id.to_string())
            .bind::<BigInt, _>(claim.account_id)
            .bind::<Text, _>(&claim.key)
            .bind::<Text, _>(IN_PROGRESS)
            .bind::<Text, _>(claim.lease_token.to_string())
            .execute(tx)?;
            if updated != 1 {
                return Ok(false);
            }
            tx.insert_charge(charge)?;
            Ok(true)
        })
    }

    fn release_key(&mut self, claim: &Claim) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE account_id = ? AND key = ? AND status = ? AND lease_token = ?",
        )
        .bind::<BigInt, _>(claim.account_id)
        .bind::<Text, _>(&claim.key)
        .bind::<Text, _>(IN_PROGRESS)
        .bind::<Text, _>(claim.lease_token.to_string())
        .execute(self)
    }

    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE rowid IN (\
               SELECT rowid FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)",
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
             FROM idempotency_keys WHERE account_id = ? ORDER BY created_at DESC, key DESC LIMIT ?",
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
