//! The store on SQLite, the zero-setup default: Diesel's query builder over
//! [`schema`] (`migrations/sqlite`), where UUIDs, JSON and times are TEXT,
//! the statements written once for both backends instantiated below over
//! its tables, the key table the protocol crate's (`idempotency::sqlite`).
//! SQLite is one local file, so its clock is the app's:
//! every time is written by the app as fixed-width RFC 3339 text
//! ([`time_text`]), so comparing the text compares the times.

pub mod schema;

use chrono::{DateTime, Utc};
use diesel::dsl::AsExprOf;
use diesel::prelude::*;
use diesel::sql_types::Text;
use diesel::sqlite::SqliteConnection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use uuid::Uuid;

use super::tables::Dialect;
use super::{AnyConnection, Backend, QueryResult, Store, time_text};

const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// What the queries written once in `store::tables` need of SQLite: UUIDs
/// and times are TEXT, the clock is the app's.
impl Dialect for SqliteConnection {
    type Id = String;
    type Time = String;
    type Clock = AsExprOf<String, Text>;
    type Cached<Q> = Q;

    fn encode_id(id: Uuid) -> String {
        id.to_string()
    }

    fn decode_id(text: String) -> QueryResult<Uuid> {
        parse_uuid(&text)
    }

    fn encode_time(t: DateTime<Utc>) -> String {
        time_text(t)
    }

    fn decode_time(text: String) -> QueryResult<DateTime<Utc>> {
        parse_time(&text)
    }

    /// Now, on the app's clock, as SQLite stores times.
    fn clock() -> Self::Clock {
        now_text().into_sql::<Text>()
    }

    /// Diesel's SQLite connection already caches what it can.
    fn cached<Q>(statement: Q) -> Q {
        statement
    }

    /// A SQLite connection is a file: it is never lost to a failover, so
    /// no error needs noting.
    fn note(_: &diesel::result::Error) {}

    /// Every write transaction is `BEGIN IMMEDIATE`: it holds SQLite's one
    /// write lock already.
    fn lock_account(_: &mut SqliteConnection, _: i64) -> QueryResult<()> {
        Ok(())
    }
}

// The tables whose queries are written once, over `schema`. One process,
// write transactions serialized: no row locks for the sender's claim.
crate::store::tables::table_stores!(
    diesel::sqlite::SqliteConnection,
    diesel::sqlite::Sqlite,
    diesel::sql_types::Text,
    crate::store::sqlite::schema,
);

fn now_text() -> String {
    time_text(Utc::now())
}

fn parse_time(text: &str) -> QueryResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
}

fn parse_uuid(text: &str) -> QueryResult<Uuid> {
    Uuid::parse_str(text).map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
}

impl Store for SqliteConnection {
    fn backend(&self) -> Backend {
        Backend::Sqlite
    }

    /// `BEGIN IMMEDIATE`: a concurrent writer waits for the whole
    /// transaction instead of failing halfway, as in the protocol crate's
    /// own transaction on SQLite.
    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut (dyn Store + 'static)) -> QueryResult<()>,
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

    fn connection(&mut self) -> AnyConnection<'_> {
        AnyConnection::Sqlite(self)
    }
}
