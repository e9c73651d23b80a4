//! The database layer: what the application stores, as traits, with one
//! implementation per backend in Diesel's query builder: [`postgres`] (over
//! `schema.rs`, the database's clock) and [`sqlite`] (over its own
//! `sqlite/schema.rs`, where UUIDs, JSON and times are TEXT, the app's
//! clock). Diesel cannot share our schema's UUID, JSONB and TIMESTAMPTZ types
//! across the two, so each table's statements are written once as a macro
//! over the tables it is given (`tables.rs`: accounts, charges and refunds,
//! authorizations; `webhooks.rs`: events and endpoints; `deliveries.rs`: the
//! sender's), and each backend's `mod.rs` (`postgres/mod.rs`,
//! `sqlite/mod.rs`: a `Dialect`, a `schema.rs` and the `Store` impl; no file
//! per table) instantiates them over its schema. The names, states and rules
//! they share are written once, here and, for the key table, in the
//! protocol's contract (`idempotency::key_store`).
//!
//! The key table's trait is the protocol's: `idempotency` owns
//! [`KeyStore`], its rows and its statements (`idempotency::postgres`,
//! `idempotency::sqlite` implement it for the connections).
//! [`Store`] is every table's trait together, the connection as the
//! application holds it (`&mut dyn Store`); which backend it is is decided
//! only at the pool's edge ([`pool`]). Diesel is synchronous: every query
//! runs on tokio's blocking thread pool (`spawn_blocking`, in
//! [`DbPool::run_checkouts`]).
//!
//! Layer: above the protocol (`idempotency`), below settings and HTTP; it
//! knows nothing of HTTP or settings.

pub mod database;
pub mod deliveries;
pub mod failure;
pub mod hooks;
pub mod pool;
pub mod postgres;
pub mod redact;
mod sqlite;
// The demo's queries build their dialect on the store's.
pub(crate) mod tables;
pub mod webhooks;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::pg::PgConnection;
use diesel::result::Error as DieselError;
use diesel::sqlite::SqliteConnection;
use uuid::Uuid;

pub use database::SetupError;
pub use diesel::result::Error as QueryError;
pub use failure::{Failure, classify};
pub use hooks::{HookFailure, Hooks, RequestHooks, WriteError, write_alone};
pub use idempotency::{
    Claim, KeyRecord, KeyState, KeyStore, KeyedRequest, SavedResponse, StuckKey,
};
pub use pool::{
    Backend, Checkouts, Connection, DbPool, PoolSettings, PoolTimeout, PooledStore, RunError,
};
/// The SQLite schema, for the demo's sandbox queries.
pub use sqlite::schema as sqlite_schema;
pub use webhooks::{Endpoint, Event, WebhookStore};

pub type QueryResult<T> = Result<T, DieselError>;

/// Everything the application stores, on one connection of either backend.
pub trait Store:
    KeyStore
    + ChargeStore
    + AccountStore
    + AuthorizationStore
    + WebhookStore
    + deliveries::DeliveryStore
{
    fn backend(&self) -> Backend;

    /// Runs `work` in one transaction: committed if it returns `Ok`, rolled
    /// back otherwise (see `transaction` on `dyn Store`, which calls
    /// this). PostgreSQL: Diesel's `build_transaction().read_committed()
    /// .run(..)`. SQLite: Diesel's `immediate_transaction`, `BEGIN
    /// IMMEDIATE`. Object-safe; call `transaction` instead.
    fn in_transaction(
        &mut self,
        work: &mut dyn FnMut(&mut (dyn Store + 'static)) -> QueryResult<()>,
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

/// A transaction on the application's connection, whichever its backend:
/// on the protocol's behalf ([`Checkouts`]' `Connections::transaction`
/// calls it) and on the application's own.
impl<'a> dyn Store + 'a {
    /// Runs `work` in one transaction ([`Store::in_transaction`]): committed
    /// if it returns `Ok`, rolled back otherwise, and any `Err` comes back as
    /// it was.
    pub fn transaction<T, E: From<DieselError>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
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

/// The `charges` and `refunds` tables.
pub trait ChargeStore {
    /// Inserts a charge whose id and time were chosen by the caller: one
    /// statement.
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()>;
    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>>;
    /// One page of the account's charges, newest first (see [`Page`]).
    fn list_charges(&mut self, account_id: i64, page: &Page) -> QueryResult<Vec<Charge>>;
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
    fn find_refund(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Refund>>;
    /// One page of a charge's refunds, newest first (see [`Page`]).
    fn list_refunds(
        &mut self,
        account_id: i64,
        charge_id: Uuid,
        page: &Page,
    ) -> QueryResult<Vec<Refund>>;
}

/// Which page of a list, by keyset on `(created_at, id)`, never by offset:
/// a page starts right after (or ends right before) a row the client was
/// given, so rows made meanwhile neither shift it nor repeat in it, and its
/// cost is one index range scan however deep it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    /// Rows to return; the query reads one more, to tell `has_more`.
    pub limit: i64,
    pub cursor: Option<Cursor>,
    /// The list's filter: charges of this status (`"succeeded"`,
    /// `"failed"`), events of this type.
    pub status: Option<&'static str>,
}

/// A position in a list: a row's `(created_at, id)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cursor {
    /// Older than this row (`starting_after`): newest first from there.
    After(DateTime<Utc>, Uuid),
    /// Newer than this row (`ending_before`): the query reads oldest first
    /// from there, and the caller reverses the page.
    Before(DateTime<Utc>, Uuid),
}

impl Page {
    pub fn first(limit: i64) -> Page {
        Page {
            limit,
            cursor: None,
            status: None,
        }
    }
}

/// What came of [`ChargeStore::reserve_refund`].
#[derive(Debug, Clone, PartialEq)]
pub enum RefundReservation {
    /// Reserved: the charge with the amount added.
    Reserved(Charge),
    /// Not enough left: the charge as it is, unchanged.
    NotEnoughLeft(Charge),
    /// The charge failed (was declined): it took nothing to give back.
    ChargeFailed(Charge),
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
    /// The in-process card network's merchant key kept under `name` (in
    /// the network's database): `candidate` if none was kept yet, else the
    /// one kept, so that every instance on one database uses one key.
    fn keep_network_key(&mut self, name: &str, candidate: &str) -> QueryResult<String>;
}

#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    pub id: Uuid,
    pub account_id: i64,
    pub amount: i64,
    /// The sum of its refunds; never more than `amount`.
    pub amount_refunded: i64,
    /// The card network's authorization for it (none without a network,
    /// and none for a failed charge).
    pub authorization_id: Option<Uuid>,
    pub currency: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
    /// A test payment method's id (`payments::methods`).
    pub payment_method: String,
    /// Why it failed (a decline code); `None`: it succeeded.
    pub failure_code: Option<String>,
}

impl Charge {
    /// `succeeded`, or `failed` (declined): the `status` column.
    pub fn status(&self) -> &'static str {
        match self.failure_code {
            None => "succeeded",
            Some(_) => "failed",
        }
    }
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
