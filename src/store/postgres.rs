//! The store on PostgreSQL, the reference backend: Diesel's DSL over
//! `schema.rs`. Every time is the database's clock (`now()`), so several app
//! instances agree on what has expired.

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::dsl::{now, sql};
use diesel::pg::PgConnection;
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Interval, Timestamptz};
use diesel::upsert::excluded;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use serde_json::Value;
use uuid::Uuid;

use super::{
    AccountRecord, AccountStore, Backend, Charge, ChargeStore, Claim, KeyRecord, KeyStatus,
    KeyStore, KeyView, NewClaim, QueryResult, RawKeyRow, SandboxStore, SavedResponse, Store,
    Unguarded, UnguardedView, time_text,
};
use crate::domain::NewCharge;
use crate::schema::{
    accounts, charges, demo_unguarded_keys as unguarded, idempotency_keys as keys,
};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
/// The advisory lock migrations run under: "charges" in ASCII.
const MIGRATION_LOCK: i64 = 0x0063_6861_7267_6573;

const IN_PROGRESS: &str = KeyStatus::InProgress.as_str();
const COMPLETED: &str = KeyStatus::Completed.as_str();

impl Store for PgConnection {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Store) -> QueryResult<()>,
    ) -> QueryResult<()> {
        self.build_transaction().read_committed().run(|tx| work(tx))
    }

    fn migrate(&mut self) -> Result<Vec<String>, String> {
        let lock = |conn: &mut PgConnection, sql: &str| {
            diesel::sql_query(sql)
                .bind::<BigInt, _>(MIGRATION_LOCK)
                .execute(conn)
                .map_err(|e| e.to_string())
        };
        lock(self, "SELECT pg_advisory_lock($1)")?;
        let applied = self
            .run_pending_migrations(MIGRATIONS)
            .map(|applied| applied.iter().map(|m| m.to_string()).collect())
            .map_err(|e| e.to_string());
        lock(self, "SELECT pg_advisory_unlock($1)")?;
        applied
    }

    fn ping(&mut self) -> QueryResult<()> {
        diesel::sql_query("SELECT 1").execute(self).map(|_| ())
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = charges, check_for_backend(diesel::pg::Pg))]
struct ChargeRow {
    id: Uuid,
    account_id: i64,
    amount: i64,
    currency: String,
    description: Option<String>,
    created_at: DateTime<Utc>,
}

impl From<ChargeRow> for Charge {
    fn from(r: ChargeRow) -> Charge {
        Charge {
            id: r.id,
            account_id: r.account_id,
            amount: r.amount,
            currency: r.currency,
            description: r.description,
            created_at: r.created_at,
        }
    }
}

impl ChargeStore for PgConnection {
    fn insert_charge(&mut self, account_id: i64, new: &NewCharge) -> QueryResult<Charge> {
        diesel::insert_into(charges::table)
            .values((
                charges::id.eq(Uuid::new_v4()),
                charges::account_id.eq(account_id),
                charges::amount.eq(new.amount.get()),
                charges::currency.eq(new.currency.code()),
                charges::description.eq(new.description.as_ref().map(|d| d.as_str())),
            ))
            .returning(ChargeRow::as_returning())
            .get_result(self)
            .map(Charge::from)
    }

    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
        charges::table
            .filter(charges::id.eq(id))
            .filter(charges::account_id.eq(account_id))
            .select(ChargeRow::as_select())
            .first(self)
            .optional()
            .map(|row| row.map(Charge::from))
    }

    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>> {
        let rows = charges::table
            .filter(charges::account_id.eq(account_id))
            .order((charges::created_at.desc(), charges::id.desc()))
            .limit(limit)
            .select(ChargeRow::as_select())
            .load(self)?;
        Ok(rows.into_iter().map(Charge::from).collect())
    }
}

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

/// A duration as a bind parameter, added to `now()` on the database's clock.
fn interval(d: Duration) -> PgInterval {
    PgInterval::from_microseconds(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
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

    fn claim_key(&mut self, claim: &NewClaim<'_>) -> QueryResult<Option<Claim>> {
        let lease_token = Uuid::new_v4();
        let upsert = diesel::insert_into(keys::table)
            .values((
                keys::account_id.eq(claim.account_id),
                keys::key.eq(claim.key),
                keys::fingerprint.eq(claim.fingerprint),
                keys::status.eq(IN_PROGRESS),
                keys::created_at.eq(now),
                keys::expires_at
                    .eq(sql::<Timestamptz>("now() + ").bind::<Interval, _>(interval(claim.ttl))),
                keys::locked_until
                    .eq(sql::<Timestamptz>("now() + ").bind::<Interval, _>(interval(claim.lease))),
                keys::lease_token.eq(lease_token),
            ))
            .on_conflict((keys::account_id, keys::key))
            .do_update()
            .set((
                keys::fingerprint.eq(excluded(keys::fingerprint)),
                keys::status.eq(excluded(keys::status)),
                keys::response_status.eq(None::<i16>),
                keys::response_headers.eq(None::<Value>),
                keys::response_body.eq(None::<Value>),
                keys::charge_id.eq(None::<Uuid>),
                keys::created_at.eq(excluded(keys::created_at)),
                keys::expires_at.eq(excluded(keys::expires_at)),
                keys::locked_until.eq(excluded(keys::locked_until)),
                keys::lease_token.eq(excluded(keys::lease_token)),
            ));
        // The takeover rule (see `KeyStore::claim_key`): expired, or stuck.
        let expired = keys::expires_at.le(now);
        let stuck = keys::status
            .eq(IN_PROGRESS)
            .and(keys::locked_until.lt(now))
            .and(keys::fingerprint.eq(excluded(keys::fingerprint)));
        let id: Option<i64> = Prepared(
            diesel::query_dsl::methods::FilterDsl::filter(upsert, expired.or(stuck))
                .returning(keys::id),
        )
        .get_result(self)
        .optional()?;
        Ok(id.map(|id| Claim { id, lease_token }))
    }

    fn complete_key(
        &mut self,
        claim: Claim,
        resource_id: Option<Uuid>,
        response: &SavedResponse,
    ) -> QueryResult<bool> {
        let headers = serde_json::to_value(&response.headers).expect("a string map serializes");
        // RETURNING, so that Diesel prepares it through its load path (its
        // execute path never caches an UPDATE, wrapper or not).
        let updated: Option<i64> = Prepared(
            diesel::update(keys::table.find(claim.id))
                .filter(keys::status.eq(IN_PROGRESS))
                .filter(keys::lease_token.eq(claim.lease_token))
                .set((
                    keys::status.eq(COMPLETED),
                    keys::response_status.eq(response.status as i16),
                    keys::response_headers.eq(&headers),
                    keys::response_body.eq(&response.body),
                    keys::charge_id.eq(resource_id),
                ))
                .returning(keys::id),
        )
        .get_result(self)
        .optional()?;
        Ok(updated.is_some())
    }

    fn release_key(&mut self, claim: Claim) -> QueryResult<usize> {
        diesel::delete(keys::table.find(claim.id))
            .filter(keys::status.eq(IN_PROGRESS))
            .filter(keys::lease_token.eq(claim.lease_token))
            .execute(self)
    }

    /// `SKIP LOCKED` keeps the purge off rows a request is taking over right
    /// now, and lets several instances purge at once without waiting on
    /// each other.
    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE id IN (\
               SELECT id FROM idempotency_keys WHERE expires_at <= now() \
               ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED)",
        )
        .bind::<BigInt, _>(batch)
        .execute(self)
    }
}

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
            .load(self)?;
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
            .optional()
    }
}

impl SandboxStore for PgConnection {
    fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
        type Row = (
            String,
            String,
            String,
            Option<i16>,
            Option<Uuid>,
            DateTime<Utc>,
            DateTime<Utc>,
            bool,
            DateTime<Utc>,
            bool,
        );
        let rows: Vec<Row> = keys::table
            .filter(keys::account_id.eq(account_id))
            .order((keys::created_at.desc(), keys::id.desc()))
            .limit(limit)
            .select((
                keys::key,
                keys::status,
                keys::fingerprint,
                keys::response_status,
                keys::charge_id,
                keys::created_at,
                keys::expires_at,
                keys::expires_at.le(now),
                keys::locked_until,
                keys::locked_until.gt(now),
            ))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(
                |(
                    key,
                    status,
                    fingerprint,
                    response_status,
                    charge_id,
                    created,
                    expires,
                    expired,
                    locked,
                    leased,
                )| {
                    KeyView {
                        key,
                        status,
                        fingerprint,
                        response_status: response_status.map(i32::from),
                        charge_id: charge_id.map(|id| id.to_string()),
                        created_at: time_text(created),
                        expires_at: time_text(expires),
                        expired,
                        locked_until: time_text(locked),
                        lease_live: leased,
                    }
                },
            )
            .collect())
    }

    fn unguarded_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<UnguardedView>> {
        let rows: Vec<(String, Uuid, DateTime<Utc>)> = unguarded::table
            .filter(unguarded::account_id.eq(account_id))
            .order((unguarded::created_at.desc(), unguarded::id.desc()))
            .limit(limit)
            .select((unguarded::key, unguarded::charge_id, unguarded::created_at))
            .load(self)?;
        Ok(rows
            .into_iter()
            .map(|(key, charge_id, created)| UnguardedView {
                key,
                charge_id: charge_id.to_string(),
                created_at: time_text(created),
            })
            .collect())
    }

    fn find_unguarded(&mut self, account_id: i64, key: &str) -> QueryResult<Option<Unguarded>> {
        let row: Option<(String, String, Value)> = unguarded::table
            .filter(unguarded::account_id.eq(account_id))
            .filter(unguarded::key.eq(key))
            .select((
                unguarded::key,
                unguarded::fingerprint,
                unguarded::response_body,
            ))
            .first(self)
            .optional()?;
        Ok(row.map(|(key, fingerprint, response_body)| Unguarded {
            key,
            fingerprint,
            response_body,
        }))
    }

    fn insert_unguarded(
        &mut self,
        account_id: i64,
        row: &Unguarded,
        charge_id: Uuid,
    ) -> QueryResult<()> {
        diesel::insert_into(unguarded::table)
            .values((
                unguarded::account_id.eq(account_id),
                unguarded::key.eq(&row.key),
                unguarded::fingerprint.eq(&row.fingerprint),
                unguarded::charge_id.eq(charge_id),
                unguarded::response_body.eq(&row.response_body),
            ))
            .execute(self)
            .map(|_| ())
    }

    fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()> {
        diesel::delete(keys::table.filter(keys::account_id.eq(account_id))).execute(self)?;
        diesel::delete(unguarded::table.filter(unguarded::account_id.eq(account_id)))
            .execute(self)?;
        diesel::delete(charges::table.filter(charges::account_id.eq(account_id))).execute(self)?;
        Ok(())
    }

    fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize> {
        diesel::delete(
            keys::table
                .filter(keys::account_id.eq(account_id))
                .filter(keys::expires_at.le(now)),
        )
        .execute(self)
    }

    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
        diesel::update(
            keys::table
                .filter(keys::account_id.eq(account_id))
                .filter(keys::key.eq(key)),
        )
        .set(keys::expires_at.eq(sql::<Timestamptz>("now() - interval '1 second'")))
        .execute(self)
    }
}

/// A statement whose SQL text is the same every time it runs: no optional
/// parts, no IN lists. Diesel never caches upserts, UPDATEs or SQL literals
/// as prepared statements, because in general their text can vary; ours
/// cannot, and wrapping them lets PostgreSQL plan them once per connection
/// instead of on every request (the cache is keyed by the SQL text). Run it
/// with `get_result`/`load`: Diesel's `execute` path ignores the wrapper.
#[derive(Debug, Clone, Copy)]
struct Prepared<Q>(Q);

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
