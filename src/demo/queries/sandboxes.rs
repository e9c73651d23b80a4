//! The visitors' sandboxes as rows: `demo_sandboxes` (the demo's own table,
//! made when the demo opens, like the unguarded one) names each sandbox
//! account and when it was last used. Times are the app's clock in
//! milliseconds since the epoch on both backends, so the same statements
//! serve both (only the placeholders differ: `$1` here, `?1` on SQLite).
//!
//! A sandbox is deleted with everything of its account in one transaction:
//! key rows, unguarded rows, refunds, charges, its sandbox row and the
//! account itself.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool};

use super::{create_in_turn, statement};
use crate::store::{AnyConnection, QueryResult, Store};

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS demo_sandboxes (
    account_id   BIGINT PRIMARY KEY REFERENCES accounts (id),
    created_ms   BIGINT NOT NULL,
    last_used_ms BIGINT NOT NULL,
    permanent    BOOLEAN NOT NULL DEFAULT false
);
";

/// A sandbox as a request finds it.
#[derive(Debug, Clone, Copy, QueryableByName)]
pub struct SandboxRow {
    #[diesel(sql_type = BigInt)]
    pub last_used_ms: i64,
    /// The loopback demo's shared `sk_test_demo` account: never expires.
    #[diesel(sql_type = Bool)]
    pub permanent: bool,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Oldest {
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    ms: Option<i64>,
}

#[derive(QueryableByName)]
struct AccountId {
    #[diesel(sql_type = BigInt)]
    account_id: i64,
}

/// Creates the table if it is not there; on PostgreSQL under the lock the
/// unguarded table is made under, so that instances starting at once take
/// turns (SQLite's write lock does that there).
pub fn create_table(store: &mut dyn Store) -> QueryResult<()> {
    create_in_turn(store, CREATE)
}

/// Registers `account_id` as a sandbox (no-op if it is one already).
pub fn register(
    store: &mut dyn Store,
    account_id: i64,
    now_ms: i64,
    permanent: bool,
) -> QueryResult<()> {
    let sql = statement(
        store,
        "INSERT INTO demo_sandboxes (account_id, created_ms, last_used_ms, permanent) \
         VALUES ($1, $2, $2, $3) ON CONFLICT (account_id) DO NOTHING",
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(now_ms)
        .bind::<Bool, _>(permanent)
        .execute(c))?;
    Ok(())
}

/// Sandboxes used since `cutoff_ms` (the permanent one not counted).
pub fn count_live(store: &mut dyn Store, cutoff_ms: i64) -> QueryResult<i64> {
    let sql = statement(
        store,
        "SELECT count(*) AS n FROM demo_sandboxes WHERE NOT permanent AND last_used_ms >= $1",
        None,
    );
    let row: Count = on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(cutoff_ms)
        .get_result(c))?;
    Ok(row.n)
}

/// When the live sandbox least recently used was last used.
pub fn oldest_use(store: &mut dyn Store, cutoff_ms: i64) -> QueryResult<Option<i64>> {
    let sql = statement(
        store,
        "SELECT min(last_used_ms) AS ms FROM demo_sandboxes WHERE NOT permanent AND last_used_ms >= $1",
        None,
    );
    let row: Oldest = on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(cutoff_ms)
        .get_result(c))?;
    Ok(row.ms)
}

/// Marks the sandbox used now, if it is live (used since `cutoff_ms`, or
/// permanent): the row as it is after, or `None` (not a sandbox, or
/// expired: then the purge deletes it, and it is never live again).
pub fn touch(
    store: &mut dyn Store,
    account_id: i64,
    now_ms: i64,
    cutoff_ms: i64,
) -> QueryResult<Option<SandboxRow>> {
    let sql = statement(
        store,
        "UPDATE demo_sandboxes SET last_used_ms = $2 \
         WHERE account_id = $1 AND (permanent OR last_used_ms >= $3) \
         RETURNING last_used_ms, permanent",
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(now_ms)
        .bind::<BigInt, _>(cutoff_ms)
        .get_result(c)
        .optional())
}

/// Up to `limit` sandboxes unused since `cutoff_ms`.
pub fn expired(store: &mut dyn Store, cutoff_ms: i64, limit: i64) -> QueryResult<Vec<i64>> {
    let sql = statement(
        store,
        "SELECT account_id FROM demo_sandboxes WHERE NOT permanent AND last_used_ms < $1 \
         ORDER BY last_used_ms LIMIT $2",
        None,
    );
    let rows: Vec<AccountId> = on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(cutoff_ms)
        .bind::<BigInt, _>(limit)
        .load(c))?;
    Ok(rows.into_iter().map(|r| r.account_id).collect())
}

/// Deletes the sandbox and all its rows, if it is still unused since
/// `cutoff_ms` (a request may have used it since it was listed): whether
/// it did. One transaction: the sandbox row goes first, so that a request
/// touching it at the same time either finds it live (and this deletes
/// nothing) or finds none.
pub fn delete_expired(store: &mut dyn Store, account_id: i64, cutoff_ms: i64) -> QueryResult<bool> {
    let claim = statement(
        store,
        "DELETE FROM demo_sandboxes WHERE account_id = $1 AND NOT permanent AND last_used_ms < $2",
        None,
    );
    let account = statement(store, "DELETE FROM accounts WHERE id = $1 AND demo", None);
    store.transaction(|tx| {
        let claimed = on_either!(tx, |c| diesel::sql_query(&claim)
            .bind::<BigInt, _>(account_id)
            .bind::<BigInt, _>(cutoff_ms)
            .execute(c))?;
        if claimed == 0 {
            return Ok(false);
        }
        super::delete_account_rows(tx, account_id)?;
        on_either!(tx, |c| diesel::sql_query(&account)
            .bind::<BigInt, _>(account_id)
            .execute(c))?;
        Ok(true)
    })
}

/// Deletes a demo account that is no sandbox (the shared `sk_test_demo`
/// one, on a server hosted for others) with all its rows.
pub fn delete_account(store: &mut dyn Store, account_id: i64) -> QueryResult<()> {
    let sandbox = statement(
        store,
        "DELETE FROM demo_sandboxes WHERE account_id = $1",
        None,
    );
    let account = statement(store, "DELETE FROM accounts WHERE id = $1 AND demo", None);
    store.transaction(|tx| {
        on_either!(tx, |c| diesel::sql_query(&sandbox)
            .bind::<BigInt, _>(account_id)
            .execute(c))?;
        super::delete_account_rows(tx, account_id)?;
        on_either!(tx, |c| diesel::sql_query(&account)
            .bind::<BigInt, _>(account_id)
            .execute(c))?;
        Ok(())
    })
}

/// "room" in ASCII: the lock `POST /demo/sandboxes` counts and inserts
/// under (PostgreSQL; on SQLite the store's transactions take the write
/// lock first).
const ROOM_LOCK: i64 = 0x726f_6f6d;

/// Inside a transaction: waits for the other makers of sandboxes.
pub fn lock_room(store: &mut dyn Store) -> QueryResult<()> {
    if let AnyConnection::Pg(c) = store.connection() {
        diesel::sql_query("SELECT pg_advisory_xact_lock($1)")
            .bind::<BigInt, _>(ROOM_LOCK)
            .execute(c)?;
    }
    Ok(())
}

/// Whether the account is flagged a demo account (a sandbox's, or the
/// shared one), live or not.
pub fn is_demo_account(store: &mut dyn Store, account_id: i64) -> QueryResult<bool> {
    let sql = statement(
        store,
        "SELECT count(*) AS n FROM accounts WHERE id = $1 AND demo",
        None,
    );
    let row: Count = on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .get_result(c))?;
    Ok(row.n > 0)
}

/// The sandbox if it is live, read only (SQLite: a read never waits for
/// the write lock a held transaction keeps; see `Sandboxes::admit`).
pub fn find_live(
    store: &mut dyn Store,
    account_id: i64,
    cutoff_ms: i64,
) -> QueryResult<Option<SandboxRow>> {
    let sql = statement(
        store,
        "SELECT last_used_ms, permanent FROM demo_sandboxes \
         WHERE account_id = $1 AND (permanent OR last_used_ms >= $2)",
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(cutoff_ms)
        .get_result(c)
        .optional())
}
