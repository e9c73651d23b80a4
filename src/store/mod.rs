//! The database layer: what the application stores, as traits, with one
//! implementation per backend in Diesel's query builder: [`postgres`] (over
//! `schema.rs`, the database's clock) and [`sqlite`] (over its own
//! `sqlite/schema.rs`, where UUIDs, JSON and times are TEXT, the app's
//! clock). Diesel cannot share our schema's UUID, JSONB and TIMESTAMPTZ types
//! across the two, so each backend has a file per table (`keys.rs`,
//! `charges.rs`, `accounts.rs`, `network.rs` in each); where their statements
//! agree they are written once, in `tables.rs`, and each file instantiates
//! them over its schema. The names, states and rules they share are written
//! once, here and in [`keys`].
//!
//! Callers hold a `&mut dyn Store`; which backend it is is decided only at
//! the pool's edge ([`pool`]). Diesel is synchronous: handlers call all of
//! this inside `web::block`.
//!
//! Layer: below everything but `schema`, `domain` and `metrics`; it knows
//! nothing of HTTP, settings or the idempotency protocol.

pub mod database;
pub mod keys;
pub mod pool;
pub mod postgres;
pub mod redact;
mod sqlite;
mod tables;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::pg::PgConnection;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sqlite::SqliteConnection;
use uuid::Uuid;

pub use database::SetupError;
pub use diesel::result::Error as QueryError;
pub use keys::{
    Claim, KeyRecord, KeyState, KeyStatus, KeyStore, KeyedRequest, SavedResponse, StuckKey,
};
pub use pool::{
    Backend, Checkouts, Connection, DbPool, PoolSettings, PoolTimeout, PooledStore, RunError,
};
/// The SQLite schema, for the demo's sandbox queries.
pub use sqlite::schema as sqlite_schema;

pub type QueryResult<T> = Result<T, DieselError>;

/// Everything the application stores, on one connection of either backend.
pub trait Store: KeyStore + ChargeStore + AccountStore + AuthorizationStore {
    fn backend(&self) -> Backend;

    /// Runs `work` in one transaction: committed if it returns `Ok`, rolled
    /// back otherwise. PostgreSQL: Diesel's `build_transaction()
    /// .read_committed().run(..)`, where a second insert of the same key
    /// waits on the unique index (at REPEATABLE READ it would fail instead).
    /// SQLite: Diesel's `immediate_transaction`, `BEGIN IMMEDIATE`, which
    /// takes the database's write lock up front, so a concurrent writer waits
    /// (busy timeout) for the whole transaction rather than failing halfway.
    /// Object-safe; call [`transaction`](trait.Store.html#method.transaction)
    /// instead.
    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut dyn Store) -> QueryResult<()>,
    ) -> QueryResult<()>;

    /// Runs the pending migrations; returns their names. On PostgreSQL under
    /// an advisory lock, so instances starting at once take turns.
    fn migrate(&mut self) -> Result<Vec<String>, String>;

    /// One round trip: the database answers.
    fn ping(&mut self) -> QueryResult<()>;

    /// The connection itself, kept for the demo only: its sandbox's tables
    /// and views (`demo/queries/`, one file per backend) are not the
    /// application's, so they are in no trait here. Production never calls it.
    fn connection(&mut self) -> AnyConnection<'_>;
}

/// A connection of either backend, borrowed: what [`Store::connection`]
/// gives the demo.
pub enum AnyConnection<'a> {
    Pg(&'a mut PgConnection),
    Sqlite(&'a mut SqliteConnection),
}

impl dyn Store + '_ {
    /// [`Store::in_transaction`] with a result and an error of the caller's
    /// own: any `Err` rolls back and is returned as it was.
    pub fn transaction<T, E: From<DieselError>>(
        &mut self,
        work: impl FnOnce(&mut dyn Store) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut work = Some(work);
        let mut result = None;
        let outcome = self.in_transaction(&mut |tx| {
            let work = work.take().expect("a transaction runs its work once");
            let done = work(tx);
            let failed = done.is_err();
            result = Some(done);
            // Any error rolls back; the caller's own comes back below.
            if failed {
                Err(DieselError::RollbackTransaction)
            } else {
                Ok(())
            }
        });
        match (outcome, result) {
            (Ok(()), Some(done)) => done,
            (Err(_), Some(Err(e))) => Err(e),
            // The work succeeded and the COMMIT (or BEGIN) failed.
            (Err(e), _) => Err(e.into()),
            (Ok(()), None) => unreachable!("a committed transaction ran its work"),
        }
    }
}

/// What a database error means for the request that met it: the one
/// classifier used by the protocol's retry loop, the pool and the HTTP
/// errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection is gone (a failover, `pg_terminate_backend`, a
    /// restart) or reached a server that refuses writes (a standby, a
    /// demoted primary): it must not be used again; the client retries.
    ConnectionLost,
    /// The database aborted the transaction to resolve a conflict
    /// (serialization failure, deadlock): the same transaction may simply
    /// run again.
    Transient,
    /// PostgreSQL waited for a lock longer than `lock_timeout` (55P03): the
    /// statement was cancelled; a concurrent transaction holds what it needs.
    LockTimeout,
    /// The database could not do it in time: SQLite's write lock stayed
    /// taken past the busy timeout, or a statement ran past
    /// `statement_timeout`. Nothing was done; the client retries.
    Busy,
    /// Anything else: a bug or a broken invariant.
    Other,
}

/// Classifies `error` (see [`Failure`]). Diesel names some kinds; for
/// SQLSTATEs it has no kind for (57P01 admin shutdown, 57P02/57P03 crash
/// or cannot connect now, 40P01 deadlock) the servers' messages are stable.
pub fn classify(error: &DieselError) -> Failure {
    let DieselError::DatabaseError(kind, info) = error else {
        return Failure::Other;
    };
    let message = info.message();
    match kind {
        DatabaseErrorKind::ClosedConnection
        | DatabaseErrorKind::UnableToSendCommand
        | DatabaseErrorKind::ReadOnlyTransaction => Failure::ConnectionLost,
        DatabaseErrorKind::SerializationFailure => Failure::Transient,
        _ if message.starts_with("terminating connection")
            || message.starts_with("the database system is")
            || message.contains("read-only transaction") =>
        {
            Failure::ConnectionLost
        }
        _ if message.starts_with("deadlock detected") => Failure::Transient,
        _ if message.starts_with("canceling statement due to lock timeout") => Failure::LockTimeout,
        _ if message.starts_with("canceling statement due to statement timeout")
            || message.starts_with("database is locked") =>
        {
            Failure::Busy
        }
        _ => Failure::Other,
    }
}

/// The `charges` and `refunds` tables.
pub trait ChargeStore {
    /// Inserts a charge whose id and time were chosen by the caller: one
    /// statement.
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()>;
    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>>;
    /// Newest first.
    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>>;
    /// Sets a charge's description (one statement); the charge after it.
    fn set_description(
        &mut self,
        account_id: i64,
        id: Uuid,
        description: Option<&str>,
    ) -> QueryResult<Option<Charge>>;
    /// Adds `amount` to the charge's `amount_refunded` if that stays within
    /// its amount, in one conditional statement: of several concurrent
    /// refunds, each waits for the row's lock and checks the sum it finds
    /// then, so their total never passes the charge.
    fn reserve_refund(
        &mut self,
        account_id: i64,
        charge_id: Uuid,
        amount: i64,
    ) -> QueryResult<RefundReservation>;
    fn insert_refund(&mut self, refund: &Refund) -> QueryResult<()>;
    /// A charge's refunds, newest first.
    fn list_refunds(&mut self, account_id: i64, charge_id: Uuid) -> QueryResult<Vec<Refund>>;
}

/// What came of [`ChargeStore::reserve_refund`].
#[derive(Debug, Clone, PartialEq)]
pub enum RefundReservation {
    /// Reserved: the charge with the amount added.
    Reserved(Charge),
    /// Not enough left: the charge as it is, unchanged.
    NotEnoughLeft(Charge),
    /// The account has no such charge.
    NoSuchCharge,
}

/// The card network's `authorizations` table (in the network's own
/// database: the network runs the same migrations on another one).
pub trait AuthorizationStore {
    fn insert_authorization(&mut self, authorization: &Authorization) -> QueryResult<()>;
    fn find_authorization(
        &mut self,
        account_id: i64,
        id: Uuid,
    ) -> QueryResult<Option<Authorization>>;
    /// Newest first.
    fn list_authorizations(
        &mut self,
        account_id: i64,
        limit: i64,
    ) -> QueryResult<Vec<Authorization>>;
    /// Marks the authorization voided (once: a voided one keeps its first
    /// time); the authorization after it, `None` if the merchant has none
    /// with this id.
    fn void_authorization(
        &mut self,
        account_id: i64,
        id: Uuid,
    ) -> QueryResult<Option<Authorization>>;
}

/// An amount the card network authorized for a merchant (one of its
/// accounts).
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    pub id: Uuid,
    pub account_id: i64,
    pub amount: i64,
    pub currency: String,
    pub created_at: DateTime<Utc>,
    /// When the merchant voided it: no charge holds it, its hold is released.
    pub voided_at: Option<DateTime<Utc>>,
}

/// The `accounts` table. Keys are stored only as SHA-256 digests.
pub trait AccountStore {
    /// A new account; a taken live name is a unique violation.
    fn insert_account(&mut self, name: &str, key_digest: &str, demo: bool) -> QueryResult<i64>;
    /// Revokes the live, non-demo account of this name; its id.
    fn revoke_account(&mut self, name: &str) -> QueryResult<Option<i64>>;
    fn list_accounts(&mut self) -> QueryResult<Vec<AccountRecord>>;
    /// The live account whose key has this digest; a demo account only
    /// when `include_demo`.
    fn find_account(&mut self, key_digest: &str, include_demo: bool) -> QueryResult<Option<i64>>;
    /// Whether the account exists and is not revoked (a demo account is).
    fn account_is_live(&mut self, id: i64) -> QueryResult<bool>;
    /// Gives the live account of this name a new key; how many rows (0:
    /// there is none).
    fn rekey_account(&mut self, name: &str, key_digest: &str) -> QueryResult<usize>;
}

#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub id: Uuid,
    pub account_id: i64,
    pub amount: i64,
    /// The sum of its refunds; never more than `amount`.
    pub amount_refunded: i64,
    /// The card network's authorization for it (none without a network).
    pub authorization_id: Option<Uuid>,
    pub currency: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Refund {
    pub id: Uuid,
    pub charge_id: Uuid,
    pub account_id: i64,
    pub amount: i64,
    pub currency: String,
    pub created_at: DateTime<Utc>,
}

/// One account as `charges account list` shows it.
#[derive(Debug, Clone)]
pub struct AccountRecord {
    pub id: i64,
    pub name: String,
    pub created_at: String,
    pub revoked_at: Option<String>,
    pub demo: bool,
}

/// A time as fixed-width RFC 3339 UTC with microseconds, e.g.
/// `2026-12-02T14:47:33.173074Z`: how the API shows times, and how SQLite
/// stores them (fixed width, so text order is time order).
pub fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Now, to the microsecond (what both databases keep), on the app's clock.
pub fn now_micros() -> DateTime<Utc> {
    use chrono::Timelike;
    let now = Utc::now();
    now.with_nanosecond(now.nanosecond() / 1000 * 1000)
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::DatabaseErrorInformation;

    struct Info(&'static str);

    impl DatabaseErrorInformation for Info {
        fn message(&self) -> &str {
            self.0
        }
        fn details(&self) -> Option<&str> {
            None
        }
        fn hint(&self) -> Option<&str> {
            None
        }
        fn table_name(&self) -> Option<&str> {
            None
        }
        fn column_name(&self) -> Option<&str> {
            None
        }
        fn constraint_name(&self) -> Option<&str> {
            None
        }
        fn statement_position(&self) -> Option<i32> {
            None
        }
    }

    fn error(kind: DatabaseErrorKind, message: &'static str) -> DieselError {
        DieselError::DatabaseError(kind, Box::new(Info(message)))
    }

    #[test]
    fn every_database_error_is_classified_once() {
        use DatabaseErrorKind as K;
        #[rustfmt::skip]
        let table = [
            (error(K::ClosedConnection, "server closed the connection"), Failure::ConnectionLost),
            (error(K::UnableToSendCommand, "no connection to the server"), Failure::ConnectionLost),
            (error(K::ReadOnlyTransaction, "cannot execute INSERT"), Failure::ConnectionLost),
            (error(K::Unknown, "terminating connection due to administrator command"), Failure::ConnectionLost),
            (error(K::Unknown, "the database system is shutting down"), Failure::ConnectionLost),
            (error(K::Unknown, "cannot execute INSERT in a read-only transaction"), Failure::ConnectionLost),
            (error(K::SerializationFailure, "could not serialize access"), Failure::Transient),
            (error(K::Unknown, "deadlock detected"), Failure::Transient),
            (error(K::Unknown, "database is locked"), Failure::Busy),
            (error(K::Unknown, "canceling statement due to statement timeout"), Failure::Busy),
            (error(K::Unknown, "canceling statement due to lock timeout"), Failure::LockTimeout),
            (error(K::Unknown, "terminating connection due to idle-in-transaction timeout"), Failure::ConnectionLost),
            (error(K::UniqueViolation, "duplicate key value"), Failure::Other),
            (error(K::CheckViolation, "violates check constraint"), Failure::Other),
            (DieselError::NotFound, Failure::Other),
        ];
        for (e, expected) in table {
            assert_eq!(classify(&e), expected, "{e}");
        }
    }
}
