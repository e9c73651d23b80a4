//! What the demo's requests wait on, as the database itself tells it: the
//! teaching page shows it while a duplicate waits for the first request
//! (lesson 4). System views, which Diesel's query builder does not know:
//! plain SQL.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Integer, Nullable, Text};
use diesel::{PgConnection, SqliteConnection};
use serde_json::{Value, json};

use crate::store::{AnyConnection, QueryResult, Store};

/// PostgreSQL: each of the demo's own sessions that waits for a lock now,
/// with the sessions that hold it (`pg_blocking_pids`) and what kind of
/// lock it asked for (`pg_locks`, not granted): a duplicate's INSERT of a
/// key waits for the first request's transaction (`transactionid`).
const WAITS: &str = "\
SELECT w.pid AS pid, w.wait_event_type AS wait_event_type, w.wait_event AS wait_event, \
       (extract(epoch FROM clock_timestamp() - w.query_start) * 1000)::bigint AS waiting_ms, \
       left(w.query, 2000) AS query, length(w.query) AS query_length, w.application_name AS label, \
       (SELECT l.locktype FROM pg_locks l WHERE l.pid = w.pid AND NOT l.granted LIMIT 1) AS lock_type, \
       (SELECT l.mode FROM pg_locks l WHERE l.pid = w.pid AND NOT l.granted LIMIT 1) AS lock_mode, \
       (SELECT l.granted FROM pg_locks l WHERE l.pid = w.pid AND NOT l.granted LIMIT 1) AS granted, \
       b.pid AS blocker_pid, b.state AS blocker_state, b.application_name AS blocker_label, \
       (extract(epoch FROM clock_timestamp() - b.xact_start) * 1000)::bigint AS blocker_transaction_ms \
FROM pg_stat_activity w \
CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS blocking(pid) \
JOIN pg_stat_activity b ON b.pid = blocking.pid \
WHERE w.datname = current_database() \
  AND (w.application_name = $1 OR starts_with(w.application_name, $1 || '-')) \
  AND w.wait_event_type = 'Lock' AND w.pid <> pg_backend_pid() \
ORDER BY w.pid, b.pid";

#[derive(QueryableByName)]
struct Wait {
    #[diesel(sql_type = Integer)]
    pid: i32,
    #[diesel(sql_type = Nullable<Text>)]
    wait_event_type: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    wait_event: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    waiting_ms: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    query: Option<String>,
    #[diesel(sql_type = Nullable<Integer>)]
    query_length: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    label: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lock_type: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    lock_mode: Option<String>,
    #[diesel(sql_type = Nullable<diesel::sql_types::Bool>)]
    granted: Option<bool>,
    #[diesel(sql_type = Integer)]
    blocker_pid: i32,
    #[diesel(sql_type = Nullable<Text>)]
    blocker_state: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    blocker_label: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    blocker_transaction_ms: Option<i64>,
}

#[derive(QueryableByName)]
struct BusyTimeout {
    #[diesel(sql_type = Integer)]
    timeout: i32,
}

/// `{"backend", "waiting": [...], "write_lock_held"}`: on PostgreSQL the
/// sandbox's sessions (named `label`) waiting for a lock and who holds it; on SQLite, whose one
/// lock is the database's write lock, whether another connection holds it
/// now (a waiting writer sits in SQLite's busy handler, where no view
/// shows it).
pub fn lock_waits(store: &mut dyn Store, label: &str) -> QueryResult<Value> {
    match store.connection() {
        AnyConnection::Pg(c) => postgres_waits(c, label),
        AnyConnection::Sqlite(c) => Ok(json!({
            "backend": "sqlite",
            "waiting": [],
            "write_lock_held": sqlite_write_lock_held(c)?,
        })),
    }
}

/// The waits of the sessions named `label` (one sandbox's: see
/// `demo::session_label`).
fn postgres_waits(c: &mut PgConnection, label: &str) -> QueryResult<Value> {
    let rows: Vec<Wait> = diesel::sql_query(WAITS).bind::<Text, _>(label).load(c)?;
    let mut waiting: Vec<Value> = Vec::new();
    for row in rows {
        let blocker = json!({
            "pid": row.blocker_pid,
            "state": row.blocker_state,
            "application_name": row.blocker_label,
            "transaction_ms": row.blocker_transaction_ms,
        });
        match waiting.last_mut() {
            Some(last) if last["pid"] == row.pid => {
                if let Some(list) = last["blocked_by"].as_array_mut() {
                    list.push(blocker);
                }
            }
            _ => waiting.push(json!({
                "pid": row.pid,
                "wait_event_type": row.wait_event_type,
                "wait_event": row.wait_event,
                "lock_type": row.lock_type,
                // The mode asked for (a duplicate's INSERT: ShareLock on the
                // first's transaction id), and that it is not granted.
                "lock_mode": row.lock_mode,
                "granted": row.granted,
                "application_name": row.label,
                "waiting_ms": row.waiting_ms,
                // The statement (its first 2000 characters) and its whole
                // length, so that a page can say where it is cut.
                "query": row.query,
                "query_length": row.query_length,
                "blocked_by": [blocker],
            })),
        }
    }
    Ok(json!({"backend": "postgres", "waiting": waiting, "write_lock_held": null}))
}

/// Asks SQLite itself: `BEGIN IMMEDIATE` with no busy wait answers
/// SQLITE_BUSY while another connection holds the write lock. If it gets
/// the lock, it gives it back at once (a writer waiting for it retries in
/// its busy handler within milliseconds).
fn sqlite_write_lock_held(c: &mut SqliteConnection) -> QueryResult<bool> {
    let BusyTimeout { timeout } = diesel::sql_query("PRAGMA busy_timeout").get_result(c)?;
    c.batch_execute("PRAGMA busy_timeout = 0")?;
    let held = match c.batch_execute("BEGIN IMMEDIATE") {
        Ok(()) => c.batch_execute("ROLLBACK").map(|()| false),
        Err(diesel::result::Error::DatabaseError(_, info))
            if info.message().contains("locked") || info.message().contains("busy") =>
        {
            Ok(true)
        }
        Err(e) => Err(e),
    };
    c.batch_execute(&format!("PRAGMA busy_timeout = {timeout}"))?;
    held
}
