//! The store on PostgreSQL, the reference backend: Diesel's query builder
//! over `schema.rs`, the statements written once for both backends
//! (`store::tables`, `store::webhooks`, `store::deliveries`) instantiated
//! below over its tables, the key table the protocol crate's
//! (`idempotency::postgres`). Every time a key row is compared
//! with is the database's clock (`now()`), so several app instances agree
//! on what has expired.

pub mod schema;

use chrono::{DateTime, Utc};
use diesel::dsl::{AsExprOf, now};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamptz};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use idempotency::postgres::Prepared;
use uuid::Uuid;

use super::tables::Dialect;
use super::{AnyConnection, Backend, Failure, QueryResult, Store, classify};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
/// The advisory lock migrations run under: "charges" in ASCII.
const MIGRATION_LOCK: i64 = 0x0063_6861_7267_6573;

/// What the queries written once in `store::tables` need of PostgreSQL:
/// its UUIDs and times are the Rust types themselves, its clock is the
/// database's, and a statement that never varies is planned once.
impl Dialect for PgConnection {
    type Id = Uuid;
    type Time = DateTime<Utc>;
    type Clock = AsExprOf<now, Timestamptz>;
    type Cached<Q> = Prepared<Q>;

    fn encode_id(id: Uuid) -> Uuid {
        id
    }

    fn decode_id(id: Uuid) -> QueryResult<Uuid> {
        Ok(id)
    }

    fn encode_time(t: DateTime<Utc>) -> DateTime<Utc> {
        t
    }

    fn decode_time(t: DateTime<Utc>) -> QueryResult<DateTime<Utc>> {
        Ok(t)
    }

    fn clock() -> Self::Clock {
        now.into_sql::<Timestamptz>()
    }

    fn cached<Q>(statement: Q) -> Prepared<Q> {
        Prepared(statement)
    }

    fn note(error: &diesel::result::Error) {
        note(error)
    }

    /// `FOR NO KEY UPDATE`: the charges' and events' foreign keys take `FOR
    /// KEY SHARE`, which it does not wait on.
    fn lock_account(conn: &mut PgConnection, account_id: i64) -> QueryResult<()> {
        schema::accounts::table
            .filter(schema::accounts::id.eq(account_id))
            .select(schema::accounts::id)
            .for_no_key_update()
            .load::<i64>(conn)
            .map(|_| ())
    }
}

// The tables whose queries are written once, over `schema`. Several
// instances claim deliveries at once: each skips the endpoints another holds.
crate::store::tables::table_stores!(
    diesel::pg::PgConnection,
    diesel::pg::Pg,
    diesel::sql_types::Uuid,
    crate::store::postgres::schema,
    .for_no_key_update().skip_locked()
);

/// Every query's error passes here on its way out (`.inspect_err(note)`): a
/// connection found lost (dead, cut by the server, or now a read-only
/// standby) is not given back to the pool.
fn note(error: &diesel::result::Error) {
    if classify(error) == Failure::ConnectionLost {
        super::pool::discard_connection();
    }
}

impl Store for PgConnection {
    fn backend(&self) -> Backend {
        Backend::Postgres
    }

    /// READ COMMITTED: a second insert of the same key waits on the unique
    /// index entry (at REPEATABLE READ it would fail instead), the
    /// protocol crate's own transaction on PostgreSQL.
    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut (dyn Store + 'static)) -> QueryResult<()>,
    ) -> QueryResult<()> {
        self.build_transaction()
            .read_committed()
            .run(|tx| work(tx))
            .inspect_err(note)
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

    fn connection(&mut self) -> AnyConnection<'_> {
        AnyConnection::Pg(self)
    }
}
