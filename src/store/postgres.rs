//! The store on PostgreSQL, the reference backend: Diesel's DSL over
//! `schema.rs`. Every time is the database's clock (`now()`), so several app
//! instances agree on what has expired.

use std::sync::LazyLock;
use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::dsl::{now, sql};
use diesel::pg::PgConnection;
use diesel::pg::data_types::PgInterval;
use diesel::prelude::*;
use diesel::sql_types::{
    BigInt, Bool, Interval, Jsonb, Nullable, SmallInt, Text, Timestamptz, Uuid as SqlUuid,
};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use serde_json::Value;
use uuid::Uuid;

use super::{
    AccountRecord, AccountStore, Backend, Charge, ChargeStore, Claim, FirstWrite, KeyRecord,
    KeyStatus, KeyStore, KeyView, NewClaim, QueryResult, RawKeyRow, SandboxStore, SavedResponse,
    Store, Unguarded, UnguardedView, time_text,
};
use crate::schema::{
    accounts, charges, demo_unguarded_keys as unguarded, idempotency_keys as keys,
};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
/// The advisory lock migrations run under: "charges" in ASCII.
const MIGRATION_LOCK: i64 = 0x0063_6861_7267_6573;

const IN_PROGRESS: &str = KeyStatus::InProgress.as_str();

thread_local! {
    /// A query on this thread failed in a way that says its connection is
    /// no longer usable for writes: dead, cut by the server, or now a read-only
    /// standby. The pool reads it when the connection comes back (on the same
    /// thread: a connection is used by one `web::block` closure at a time).
    static CONNECTION_SUSPECT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether `error` means the connection must not be used again: it went
/// away (a failover, `pg_terminate_backend`, a restart) or reached a server
/// that refuses writes (a standby, a demoted primary).
pub fn is_connection_lost(error: &diesel::result::Error) -> bool {
    use diesel::result::{DatabaseErrorKind as Kind, Error};
    match error {
        Error::DatabaseError(
            Kind::ClosedConnection | Kind::UnableToSendCommand | Kind::ReadOnlyTransaction,
            _,
        ) => true,
        // SQLSTATE 57P01 (admin shutdown), 57P02/57P03 (crash, cannot connect
        // now), which Diesel has no kinds for; PostgreSQL's texts are stable.
        Error::DatabaseError(_, info) => {
            let message = info.message();
            message.starts_with("terminating connection")
                || message.starts_with("the database system is")
                || message.contains("read-only transaction")
        }
        _ => false,
    }
}

fn note(error: &diesel::result::Error) {
    if is_connection_lost(error) {
        CONNECTION_SUSPECT.with(|s| s.set(true));
    }
}

/// Whether a query on this thread found its connection lost since the last
/// call (and forgets it).
pub(super) fn take_connection_suspect() -> bool {
    CONNECTION_SUSPECT.with(|s| s.replace(false))
}
const COMPLETED: &str = KeyStatus::Completed.as_str();

impl Store for PgConnection {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Store) -> QueryResult<()>,
    ) -> QueryResult<()> {
        use diesel::connection::{AnsiTransactionManager, TransactionManager};
        let depth =
            AnsiTransactionManager::transaction_manager_status_mut(self).transaction_depth()?;
        match depth {
            None => self
                .build_transaction()
                .read_committed()
                .run(|tx| work(tx))
                .inspect_err(note),
            // Inside a transaction already (a demo hook's): a savepoint.
            Some(_) => self.transaction(|tx| work(tx)).inspect_err(note),
        }
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
        diesel::sql_query("SELECT 1")
            .execute(self)
            .inspect_err(note)
            .map(|_| ())
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
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()> {
        Prepared(diesel::insert_into(charges::table).values((
            charges::id.eq(charge.id),
            charges::account_id.eq(charge.account_id),
            charges::amount.eq(charge.amount),
            charges::currency.eq(&charge.currency),
            charges::description.eq(charge.description.as_deref()),
            charges::created_at.eq(charge.created_at),
        )))
        .execute(self)
        .inspect_err(note)
        .map(|_| ())
    }

    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
        charges::table
            .filter(charges::id.eq(id))
            .filter(charges::account_id.eq(account_id))
            .select(ChargeRow::as_select())
            .first(self)
            .inspect_err(note)
            .optional()
            .map(|row| row.map(Charge::from))
    }

    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>> {
        let rows = charges::table
            .filter(charges::account_id.eq(account_id))
            .order((charges::created_at.desc(), charges::id.desc()))
            .limit(limit)
            .select(ChargeRow::as_select())
            .load(self)
            .inspect_err(note)?;
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

impl From<KeyRow> for RawKeyRow {
    fn from(r: KeyRow) -> RawKeyRow {
        RawKeyRow {
            fingerprint: r.fingerprint,
            status: r.status,
            lease_live: r.lease_live,
            response_status: r.response_status.map(i32::from),
            response_headers: r.response_headers,
            response_body: r.response_body,
        }
    }
}

/// A duration as a bind parameter, added to `now()` on the database's clock.
fn interval(d: Duration) -> PgInterval {
    PgInterval::from_microseconds(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// The takeover rule over the key row `k` (see `KeyStore::charge_once`),
/// written once: `fingerprint` is the new request's.
fn takeable(fingerprint: &str) -> String {
    format!(
        "(k.expires_at <= now() OR (k.status = '{IN_PROGRESS}' AND k.locked_until < now() AND k.fingerprint = {fingerprint}))"
    )
}

/// What a claim's `DO UPDATE` writes over a taken row: everything the new
/// row would have had.
const TAKE_OVER: &str = "fingerprint = excluded.fingerprint, status = excluded.status, \
    response_status = excluded.response_status, response_headers = excluded.response_headers, \
    response_body = excluded.response_body, charge_id = excluded.charge_id, \
    created_at = excluded.created_at, expires_at = excluded.expires_at, \
    locked_until = excluded.locked_until, lease_token = excluded.lease_token";

/// The atomic first request in one statement: read the live row that may
/// not be taken over; only if there is none, write the key row completed
/// (or take an expired or stuck one over) and, only if that wrote a row,
/// the charge. The foreign key from the key row to the charge is checked at
/// the end of the statement, when both exist.
static CHARGE_ONCE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH existing AS (\
           SELECT k.fingerprint, k.status, k.response_status, k.response_headers, k.response_body, \
                  k.locked_until > now() AS lease_live \
           FROM idempotency_keys k WHERE k.account_id = $1 AND k.key = $2 AND NOT {live_rule}), \
         claimed AS (\
           INSERT INTO idempotency_keys AS k (account_id, key, fingerprint, status, response_status, \
             response_headers, response_body, charge_id, created_at, expires_at, locked_until, lease_token) \
           SELECT $1, $2, $3, '{COMPLETED}', $13, $4, $5, $6, now(), now() + $7, now(), $8 \
           WHERE NOT EXISTS (SELECT 1 FROM existing) \
           ON CONFLICT (account_id, key) DO UPDATE SET {TAKE_OVER} WHERE {rule} \
           RETURNING 1), \
         charge AS (\
           INSERT INTO charges (id, account_id, amount, currency, description, created_at) \
           SELECT $6, $1, $9, $10, $11, $12 FROM claimed RETURNING 1) \
         SELECT (SELECT count(*) FROM charge) AS written, e.fingerprint, e.status, e.response_status, \
                e.response_headers, e.response_body, e.lease_live \
         FROM (SELECT 1) AS one LEFT JOIN existing e ON true",
        live_rule = takeable("$3"),
        rule = takeable("excluded.fingerprint"),
    )
});

/// Key-first's first transaction: the key in progress under a lease.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO idempotency_keys AS k (account_id, key, fingerprint, status, created_at, \
           expires_at, locked_until, lease_token) \
         VALUES ($1, $2, $3, '{IN_PROGRESS}', now(), now() + $4, now() + $5, $6) \
         ON CONFLICT (account_id, key) DO UPDATE SET {TAKE_OVER} WHERE {rule} \
         RETURNING 1::bigint AS written",
        rule = takeable("excluded.fingerprint"),
    )
});

/// Key-first's second: the key completed under the lease guard, and the
/// charge only if that happened.
static COMPLETE_WITH_CHARGE: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH done AS (\
           UPDATE idempotency_keys SET status = '{COMPLETED}', response_status = $11, \
             response_headers = $4, response_body = $5, charge_id = $6 \
           WHERE account_id = $1 AND key = $2 AND status = '{IN_PROGRESS}' AND lease_token = $3 \
           RETURNING 1), \
         charge AS (\
           INSERT INTO charges (id, account_id, amount, currency, description, created_at) \
           SELECT $6, $1, $7, $8, $9, $10 FROM done RETURNING 1) \
         SELECT count(*) AS written FROM charge"
    )
});

#[derive(QueryableByName)]
struct Written {
    #[diesel(sql_type = BigInt)]
    written: i64,
}

#[derive(QueryableByName)]
struct FirstWriteRow {
    #[diesel(sql_type = BigInt)]
    written: i64,
    #[diesel(sql_type = Nullable<Text>)]
    fingerprint: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    status: Option<String>,
    #[diesel(sql_type = Nullable<SmallInt>)]
    response_status: Option<i16>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    response_headers: Option<Value>,
    #[diesel(sql_type = Nullable<Jsonb>)]
    response_body: Option<Value>,
    #[diesel(sql_type = Nullable<Bool>)]
    lease_live: Option<bool>,
}

fn response_status(response: &SavedResponse) -> QueryResult<i16> {
    i16::try_from(response.status)
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))
}

fn headers_json(response: &SavedResponse) -> Value {
    serde_json::to_value(&response.headers).expect("a string map serializes")
}

impl KeyStore for PgConnection {
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>> {
        let row: Option<KeyRow> = keys::table
            .filter(keys::account_id.eq(account_id))
            .filter(keys::key.eq(key))
            .filter(keys::expires_at.gt(now))
            .select(KeyRow::as_select())
            .first(self)
            .inspect_err(note)
            .optional()?;
        row.map(|r| RawKeyRow::from(r).decode()).transpose()
    }

    fn charge_once(
        &mut self,
        claim: &NewClaim<'_>,
        charge: &Charge,
        response: &SavedResponse,
    ) -> QueryResult<FirstWrite> {
        let row: FirstWriteRow = Prepared(
            diesel::sql_query(CHARGE_ONCE.as_str())
                .bind::<BigInt, _>(claim.account_id)
                .bind::<Text, _>(claim.key)
                .bind::<Text, _>(claim.fingerprint)
                .bind::<Jsonb, _>(headers_json(response))
                .bind::<Jsonb, _>(&response.body)
                .bind::<SqlUuid, _>(charge.id)
                .bind::<Interval, _>(interval(claim.ttl))
                .bind::<SqlUuid, _>(Uuid::new_v4())
                .bind::<BigInt, _>(charge.amount)
                .bind::<Text, _>(&charge.currency)
                .bind::<Nullable<Text>, _>(charge.description.as_deref())
                .bind::<Timestamptz, _>(charge.created_at)
                .bind::<SmallInt, _>(response_status(response)?),
        )
        .get_result(self)
        .inspect_err(note)?;
        if row.written == 1 {
            return Ok(FirstWrite::Written);
        }
        let (Some(fingerprint), Some(status)) = (row.fingerprint, row.status) else {
            return Ok(FirstWrite::Lost);
        };
        let found = RawKeyRow {
            fingerprint,
            status,
            lease_live: row.lease_live.unwrap_or(false),
            response_status: row.response_status.map(i32::from),
            response_headers: row.response_headers,
            response_body: row.response_body,
        };
        Ok(FirstWrite::Found(found.decode()?))
    }

    fn claim_key(&mut self, claim: &NewClaim<'_>) -> QueryResult<Option<Claim>> {
        let lease_token = Uuid::new_v4();
        let written: Option<Written> = Prepared(
            diesel::sql_query(CLAIM.as_str())
                .bind::<BigInt, _>(claim.account_id)
                .bind::<Text, _>(claim.key)
                .bind::<Text, _>(claim.fingerprint)
                .bind::<Interval, _>(interval(claim.ttl))
                .bind::<Interval, _>(interval(claim.lease))
                .bind::<SqlUuid, _>(lease_token),
        )
        .get_result(self)
        .inspect_err(note)
        .optional()?;
        Ok(written.map(|_| Claim {
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
        let row: Written = Prepared(
            diesel::sql_query(COMPLETE_WITH_CHARGE.as_str())
                .bind::<BigInt, _>(claim.account_id)
                .bind::<Text, _>(&claim.key)
                .bind::<SqlUuid, _>(claim.lease_token)
                .bind::<Jsonb, _>(headers_json(response))
                .bind::<Jsonb, _>(&response.body)
                .bind::<SqlUuid, _>(charge.id)
                .bind::<BigInt, _>(charge.amount)
                .bind::<Text, _>(&charge.currency)
                .bind::<Nullable<Text>, _>(charge.description.as_deref())
                .bind::<Timestamptz, _>(charge.created_at)
                .bind::<SmallInt, _>(response_status(response)?),
        )
        .get_result(self)
        .inspect_err(note)?;
        Ok(row.written == 1)
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
        .inspect_err(note)
    }

    /// `SKIP LOCKED` keeps the purge off rows a request is taking over right
    /// now, and lets several instances purge at once without waiting on
    /// each other. No `ORDER BY`: any expired rows will do, found through
    /// the BRIN index on `expires_at` without sorting them.
    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
        diesel::sql_query(
            "DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(\
               SELECT ctid FROM idempotency_keys WHERE expires_at <= now() \
               LIMIT $1 FOR UPDATE SKIP LOCKED))",
        )
        .bind::<BigInt, _>(batch)
        .execute(self)
        .inspect_err(note)
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
            .order((keys::created_at.desc(), keys::key.desc()))
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
            .load(self)
            .inspect_err(note)?;
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
            .load(self)
            .inspect_err(note)?;
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
            .inspect_err(note)
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
            .inspect_err(note)
            .map(|_| ())
    }

    fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()> {
        diesel::delete(keys::table.filter(keys::account_id.eq(account_id)))
            .execute(self)
            .inspect_err(note)?;
        diesel::delete(unguarded::table.filter(unguarded::account_id.eq(account_id)))
            .execute(self)
            .inspect_err(note)?;
        diesel::delete(charges::table.filter(charges::account_id.eq(account_id)))
            .execute(self)
            .inspect_err(note)?;
        Ok(())
    }

    fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize> {
        diesel::delete(
            keys::table
                .filter(keys::account_id.eq(account_id))
                .filter(keys::expires_at.le(now)),
        )
        .execute(self)
        .inspect_err(note)
    }

    fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
        diesel::update(
            keys::table
                .filter(keys::account_id.eq(account_id))
                .filter(keys::key.eq(key)),
        )
        .set(keys::expires_at.eq(sql::<Timestamptz>("now() - interval '1 second'")))
        .execute(self)
        .inspect_err(note)
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
