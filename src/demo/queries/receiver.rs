//! Lesson 8's rows: the receiver the demo hosts for each sandbox
//! (`demo_receivers`: its id in the URL, its endpoint, its faults), the
//! protocol crate's inbox (`webhook_inbox`, made from the crate's own SQL,
//! one `source` per sandbox) and the receiver's effect
//! (`demo_payments_applied`: how many times each charge's payment was
//! applied). The demo's own tables, made when the demo opens like the
//! unguarded one; a sandbox's rows go with it.
//!
//! The statements are text, as `sandboxes.rs`'s are, because they read the
//! webhook tables of both backends, whose UUID and time columns differ:
//! [`text`] takes the PostgreSQL spelling and the SQLite one where they do.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Integer, Nullable, Text};

use super::{create_in_turn, statement};
use crate::store::webhooks::Endpoint;
use crate::store::{AnyConnection, QueryResult, Store, now_micros, time_text};

const CREATE: &str = "
CREATE TABLE IF NOT EXISTS demo_receivers (
    account_id   BIGINT PRIMARY KEY REFERENCES accounts (id),
    receiver_id  TEXT NOT NULL UNIQUE,
    endpoint_id  TEXT,
    lose_answers INTEGER NOT NULL DEFAULT 0 CHECK (lose_answers >= 0),
    inbox        BOOLEAN NOT NULL DEFAULT true
);
CREATE TABLE IF NOT EXISTS demo_payments_applied (
    account_id    BIGINT NOT NULL REFERENCES accounts (id),
    charge_id     TEXT NOT NULL,
    times_applied INTEGER NOT NULL,
    last_event_id TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    PRIMARY KEY (account_id, charge_id)
);
";

/// The inbox's name for a sandbox's sender: the inbox is the crate's one
/// table, and each sandbox's events are a source of their own in it.
pub fn source(account_id: i64) -> String {
    format!("sandbox-{account_id}")
}

/// A time column as the API writes times (`store::time_text`).
const PG_TIME: &str = r#"'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'"#;

/// Creates the receiver's tables and the crate's inbox if they are not
/// there.
pub fn create_tables(store: &mut dyn Store) -> QueryResult<()> {
    let inbox = match store.connection() {
        AnyConnection::Pg(_) => idempotency::webhook::POSTGRES_INBOX,
        AnyConnection::Sqlite(_) => idempotency::webhook::SQLITE_INBOX,
    };
    // The crate's file creates; the demo opens on databases that have it.
    let inbox = inbox
        .replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        .replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ");
    // Instances opening the demo at once take turns, as at its other
    // tables.
    create_in_turn(store, &format!("{CREATE}{inbox}"))
}

/// A sandbox's receiver as a delivery finds it.
#[derive(Debug, Clone, QueryableByName)]
pub struct ReceiverRow {
    #[diesel(sql_type = BigInt)]
    pub account_id: i64,
    #[diesel(sql_type = Text)]
    pub receiver_id: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub endpoint_id: Option<String>,
    #[diesel(sql_type = Integer)]
    pub lose_answers: i32,
    #[diesel(sql_type = Bool)]
    pub inbox: bool,
}

const RECEIVER_COLUMNS: &str = "account_id, receiver_id, endpoint_id, lose_answers, inbox";

/// The receiver named `receiver_id`, if any.
pub fn find_receiver(store: &mut dyn Store, receiver_id: &str) -> QueryResult<Option<ReceiverRow>> {
    let sql = statement(
        store,
        &format!("SELECT {RECEIVER_COLUMNS} FROM demo_receivers WHERE receiver_id = $1"),
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<Text, _>(receiver_id)
        .get_result(c)
        .optional())
}

/// The sandbox's receiver, if it has one.
pub fn find_receiver_of(
    store: &mut dyn Store,
    account_id: i64,
) -> QueryResult<Option<ReceiverRow>> {
    let sql = statement(
        store,
        &format!("SELECT {RECEIVER_COLUMNS} FROM demo_receivers WHERE account_id = $1"),
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .get_result(c)
        .optional())
}

/// The sandbox's receiver, made now if it has none (its id random: the
/// URL tells nothing of the account).
pub fn receiver_of(store: &mut dyn Store, account_id: i64) -> QueryResult<ReceiverRow> {
    let insert = statement(
        store,
        "INSERT INTO demo_receivers (account_id, receiver_id) VALUES ($1, $2) \
         ON CONFLICT (account_id) DO NOTHING",
        None,
    );
    let id = format!("rcv_{}", uuid::Uuid::new_v4().simple());
    on_either!(store, |c| diesel::sql_query(&insert)
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(&id)
        .execute(c))?;
    find_receiver_of(store, account_id)?.ok_or(diesel::result::Error::NotFound)
}

/// Records the endpoint the sandbox's receiver is for.
pub fn set_endpoint(store: &mut dyn Store, account_id: i64, endpoint_id: &str) -> QueryResult<()> {
    let sql = statement(
        store,
        "UPDATE demo_receivers SET endpoint_id = $2 WHERE account_id = $1",
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(endpoint_id)
        .execute(c))?;
    Ok(())
}

/// Sets the receiver's faults.
pub fn set_faults(
    store: &mut dyn Store,
    account_id: i64,
    lose_answers: i32,
    inbox: bool,
) -> QueryResult<()> {
    let sql = statement(
        store,
        "UPDATE demo_receivers SET lose_answers = $2, inbox = $3 WHERE account_id = $1",
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<Integer, _>(lose_answers)
        .bind::<Bool, _>(inbox)
        .execute(c))?;
    Ok(())
}

/// One answer to lose, if any are left: whether this took one (in the
/// delivery's transaction, so a rolled-back delivery loses none).
pub fn take_lost_answer(store: &mut dyn Store, account_id: i64) -> QueryResult<bool> {
    let sql = statement(
        store,
        "UPDATE demo_receivers SET lose_answers = lose_answers - 1 \
         WHERE account_id = $1 AND lose_answers > 0",
        None,
    );
    let taken = on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .execute(c))?;
    Ok(taken > 0)
}

/// The receiver's effect: the charge's payment applied once more.
pub fn apply_payment(
    store: &mut dyn Store,
    account_id: i64,
    charge_id: &str,
    event_id: &str,
) -> QueryResult<()> {
    let sql = statement(
        store,
        "INSERT INTO demo_payments_applied \
         (account_id, charge_id, times_applied, last_event_id, updated_at) \
         VALUES ($1, $2, 1, $3, $4) ON CONFLICT (account_id, charge_id) DO UPDATE \
         SET times_applied = demo_payments_applied.times_applied + 1, \
             last_event_id = excluded.last_event_id, updated_at = excluded.updated_at",
        None,
    );
    let now = time_text(now_micros());
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<Text, _>(charge_id)
        .bind::<Text, _>(event_id)
        .bind::<Text, _>(&now)
        .execute(c))?;
    Ok(())
}

/// The secrets the sandbox's endpoint signs with: the current one, and the
/// previous one while its rotation lasts (none if it has no such endpoint,
/// or it was deleted).
pub fn endpoint_secrets(
    store: &mut dyn Store,
    account_id: i64,
    endpoint_id: &str,
) -> QueryResult<Vec<String>> {
    let Ok(id) = uuid::Uuid::parse_str(endpoint_id) else {
        return Ok(Vec::new());
    };
    let Some(endpoint) = store.find_endpoint(account_id, id)? else {
        return Ok(Vec::new());
    };
    let secrets = crate::store::webhooks::signing_secrets(
        &endpoint.secret,
        endpoint.previous_secret.as_deref(),
        endpoint.previous_secret_expires_at,
        chrono::Utc::now(),
    );
    Ok(secrets.into_iter().map(str::to_owned).collect())
}

/// Registers the sandbox's endpoint, with the endpoints' own store
/// function: `url`, every event type, `secret`. The endpoint's id.
pub fn insert_endpoint(
    store: &mut dyn Store,
    account_id: i64,
    url: &str,
    secret: &str,
) -> QueryResult<String> {
    let endpoint = Endpoint {
        id: uuid::Uuid::new_v4(),
        account_id,
        url: url.to_owned(),
        description: Some("lesson 8: the demo's receiver".to_owned()),
        enabled_events: vec!["*".to_owned()],
        secret: secret.to_owned(),
        previous_secret: None,
        previous_secret_expires_at: None,
        status: "enabled".to_owned(),
        disabled_reason: None,
        created_at: now_micros(),
    };
    store.insert_endpoint(&endpoint)?;
    Ok(endpoint.id.to_string())
}

/// Deletes the sandbox's receiver, its inbox rows and its effects (its
/// webhook rows are the store's to delete: `delete_account_webhooks`).
pub fn delete_rows(store: &mut dyn Store, account_id: i64) -> QueryResult<()> {
    let statements = [
        "DELETE FROM demo_payments_applied WHERE account_id = $1",
        "DELETE FROM demo_receivers WHERE account_id = $1",
    ];
    for each in statements {
        let sql = statement(store, each, None);
        on_either!(store, |c| diesel::sql_query(&sql)
            .bind::<BigInt, _>(account_id)
            .execute(c))?;
    }
    let inbox = statement(store, "DELETE FROM webhook_inbox WHERE source = $1", None);
    on_either!(store, |c| diesel::sql_query(&inbox)
        .bind::<Text, _>(source(account_id))
        .execute(c))?;
    Ok(())
}

/// One inbox row of the sandbox's.
#[derive(Debug, QueryableByName, serde::Serialize)]
pub struct InboxView {
    #[diesel(sql_type = Text)]
    pub event_id: String,
    #[diesel(sql_type = Text)]
    pub received_at: String,
}

/// The sandbox's inbox rows, oldest first.
pub fn inbox_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<InboxView>> {
    let pg = format!(
        "SELECT event_id, to_char(received_at AT TIME ZONE 'UTC', {PG_TIME}) AS received_at \
         FROM webhook_inbox WHERE source = $1 ORDER BY received_at, event_id LIMIT $2"
    );
    let sqlite = "SELECT event_id, received_at FROM webhook_inbox WHERE source = $1 \
                  ORDER BY received_at, event_id LIMIT $2";
    let sql = statement(store, &pg, Some(sqlite));
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<Text, _>(source(account_id))
        .bind::<BigInt, _>(limit)
        .load(c))
}

/// One charge's payment as the receiver applied it.
#[derive(Debug, QueryableByName, serde::Serialize)]
pub struct PaymentView {
    #[diesel(sql_type = Text)]
    pub charge_id: String,
    #[diesel(sql_type = Integer)]
    pub times_applied: i32,
    #[diesel(sql_type = Text)]
    pub last_event_id: String,
    #[diesel(sql_type = Text)]
    pub updated_at: String,
}

/// The sandbox's applied payments, oldest first.
pub fn payment_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<PaymentView>> {
    let sql = statement(
        store,
        "SELECT charge_id, times_applied, last_event_id, updated_at FROM demo_payments_applied \
         WHERE account_id = $1 ORDER BY updated_at, charge_id LIMIT $2",
        None,
    );
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load(c))
}

/// One of the sandbox's events, with what its delivery needs to be signed
/// again (its stored `data` and `created_at` as text) and how its delivery
/// stands (NULL: no delivery row).
#[derive(Debug, QueryableByName)]
pub struct EventView {
    #[diesel(sql_type = Text)]
    pub id: String,
    #[diesel(sql_type = Text)]
    pub event_type: String,
    #[diesel(sql_type = Text)]
    pub created_at: String,
    #[diesel(sql_type = Text)]
    pub data: String,
    #[diesel(sql_type = Nullable<Text>)]
    pub delivery_status: Option<String>,
    #[diesel(sql_type = Nullable<Integer>)]
    pub delivery_attempts: Option<i32>,
}

/// The sandbox's newest events, newest first.
pub fn event_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<EventView>> {
    let pg = format!(
        "SELECT e.id::text AS id, e.type AS event_type, \
         to_char(e.created_at AT TIME ZONE 'UTC', {PG_TIME}) AS created_at, e.data, \
         d.status AS delivery_status, d.attempts AS delivery_attempts \
         FROM events e LEFT JOIN webhook_deliveries d ON d.event_id = e.id \
         WHERE e.account_id = $1 ORDER BY e.created_at DESC, e.id DESC LIMIT $2"
    );
    let sqlite = "SELECT e.id AS id, e.type AS event_type, e.created_at AS created_at, e.data, \
                  d.status AS delivery_status, d.attempts AS delivery_attempts \
                  FROM events e LEFT JOIN webhook_deliveries d ON d.event_id = e.id \
                  WHERE e.account_id = $1 ORDER BY e.created_at DESC, e.id DESC LIMIT $2";
    let sql = statement(store, &pg, Some(sqlite));
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load(c))
}

/// One delivery attempt of one of the sandbox's events.
#[derive(Debug, QueryableByName)]
pub struct AttemptView {
    #[diesel(sql_type = Text)]
    pub event_id: String,
    #[diesel(sql_type = Integer)]
    pub attempt: i32,
    #[diesel(sql_type = BigInt)]
    pub webhook_timestamp: i64,
    #[diesel(sql_type = Text)]
    pub attempted_at: String,
    #[diesel(sql_type = Nullable<Integer>)]
    pub response_status: Option<i32>,
    #[diesel(sql_type = Nullable<Text>)]
    pub error: Option<String>,
}

/// The attempts to deliver the sandbox's events, in the order they were
/// made.
pub fn attempt_views(
    store: &mut dyn Store,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<AttemptView>> {
    let pg = format!(
        "SELECT a.event_id::text AS event_id, a.attempt, a.webhook_timestamp, \
         to_char(a.attempted_at AT TIME ZONE 'UTC', {PG_TIME}) AS attempted_at, \
         a.response_status, a.error \
         FROM webhook_attempts a JOIN events e ON e.id = a.event_id \
         WHERE e.account_id = $1 ORDER BY a.attempted_at, a.attempt LIMIT $2"
    );
    let sqlite = "SELECT a.event_id AS event_id, a.attempt, a.webhook_timestamp, \
                  a.attempted_at AS attempted_at, a.response_status, a.error \
                  FROM webhook_attempts a JOIN events e ON e.id = a.event_id \
                  WHERE e.account_id = $1 ORDER BY a.attempted_at, a.attempt LIMIT $2";
    let sql = statement(store, &pg, Some(sqlite));
    on_either!(store, |c| diesel::sql_query(&sql)
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load(c))
}
