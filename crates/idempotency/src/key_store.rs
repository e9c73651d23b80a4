//! The key table's contract: what the protocol needs of the table that
//! holds the keys (`idempotency_keys`), as a trait each backend implements
//! once ([`KeyStore`]), the rows it reads and writes,
//! and the one rule for taking a row over (`takeover`).
//!
//! One row per (account, key), its primary key. What a row says is decoded
//! once, here, into a [`KeyState`]. The table knows nothing of what ran
//! under a key: it keeps the request's fingerprint and the response to
//! replay, whatever the operation was.
//!
//! This file names no backend and no other table; this crate implements
//! the trait for Diesel's connections (the statements once, in
//! `key_table.rs`; each backend's differences in `postgres.rs` and
//! `sqlite.rs`), over the table in `sql/`.

// Without a backend (`--no-default-features`), the rows' codecs, the
// status values and the takeover rule's SQL have no caller.
#![cfg_attr(not(any(feature = "postgres", feature = "sqlite")), allow(dead_code))]

use std::collections::BTreeMap;
use std::time::Duration;

use diesel::BoolExpressionMethods;
use diesel::dsl;
use diesel::expression::{AsExpression, Expression};
use diesel::result::Error as DieselError;
use diesel::sql_types::Bool;
use serde_json::Value;
use uuid::Uuid;

use crate::fingerprint::Fingerprint;

pub(crate) type QueryResult<T> = Result<T, DieselError>;

/// The key table's steps, each one statement of Diesel's query builder
/// (written once for both backends, in `key_table.rs`).
pub trait KeyStore {
    /// The live (unexpired) row for a key, decoded, read without a lock.
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>>;

    /// `INSERT … ON CONFLICT (account_id, key) DO NOTHING RETURNING`: the
    /// key row, as `status` says, or `None` if the key has a row already.
    /// A concurrent transaction that inserted the same key and has not
    /// committed makes this wait on the unique index entry until it commits
    /// (then: `None`) or rolls back (then the row is ours).
    fn insert_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>>;

    /// Overwrites the key's row with a new one, as `insert_key` would have
    /// written it, if the takeover rule (`takeover`) lets it: one
    /// conditional `UPDATE … WHERE <takeover> RETURNING`. Of several
    /// requests racing for one row, the row lock lets exactly one take it.
    fn take_over_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>>;

    /// Completes the claimed row with `response`, if it is still in
    /// progress under this claim's lease; `false` when the lease was lost
    /// (another request took the row over): then nothing is written.
    fn complete_key(&mut self, claim: &Claim, response: &SavedResponse) -> QueryResult<bool>;

    /// Deletes a claimed, still in-progress row (key-first: the operation
    /// failed, so the retry must run as the first).
    fn release_key(&mut self, claim: &Claim) -> QueryResult<usize>;

    /// Deletes up to `batch` expired rows in one short statement.
    fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize>;

    /// Up to `limit` accounts that have stuck keys (live rows in progress
    /// whose lease has run out: their worker died between the key-first
    /// design's two transactions, or between the phases of a foreign
    /// step), the one stuck longest first: a recovery pass takes each
    /// account's in turn, so that one account's flood of stuck keys does
    /// not delay another's.
    fn find_stuck_accounts(&mut self, limit: i64) -> QueryResult<Vec<i64>>;

    /// Up to `limit` of one account's stuck keys, those this caller can
    /// finish first: rows with no foreign step, or one of `steps` (the
    /// foreign steps it can perform); rows registered with another step
    /// fill what is left, so that the caller can say it leaves them, and
    /// none of them delays one it can finish. Read without a lock; taking
    /// one over is `take_over_key`'s.
    fn find_stuck_keys(
        &mut self,
        account_id: i64,
        limit: i64,
        steps: &[String],
    ) -> QueryResult<Vec<StuckKey>>;
}

/// The takeover rule, stated once: a key row that already exists may be
/// written over by a new request when it has **expired** (the purge has not
/// removed it yet), or when it is **in progress**, its **lease has run
/// out** (its worker died: between the key-first design's two
/// transactions, or between the phases of a foreign step) and it is **the
/// same request's** (a different request is a 422, never a takeover),
/// **registered with the same foreign step** (none, or the same service:
/// a worker without the step, or with another service's, would finish it
/// without the call the row's first worker may have made).
///
/// Why an SQL predicate and not a check in Rust: the rule must hold at the
/// instant the row is written, under its lock, so that of several requests
/// (or instances) racing for one row exactly one wins; a row read, checked
/// and then updated could change in between. So `take_over_key` is
/// `UPDATE … WHERE` this, built from the backend's columns (its clock and
/// its column types differ), and nothing else states the
/// rule: `decide` only answers the rows that need no attempt (a replay, a
/// mismatch, a live lease) and sends every other one here.
pub(crate) fn takeover<Expired, InProgress, LeaseOver, SameRequest>(
    expired: Expired,
    in_progress: InProgress,
    lease_over: LeaseOver,
    same_request: SameRequest,
) -> dsl::Or<Expired, dsl::And<dsl::And<InProgress, LeaseOver>, SameRequest>>
where
    Expired: Expression<SqlType = Bool>,
    InProgress: Expression<SqlType = Bool>,
    LeaseOver: Expression<SqlType = Bool> + AsExpression<Bool>,
    SameRequest: Expression<SqlType = Bool> + AsExpression<Bool>,
    dsl::And<InProgress, LeaseOver>: Expression<SqlType = Bool> + AsExpression<Bool>,
    dsl::And<dsl::And<InProgress, LeaseOver>, SameRequest>:
        Expression<SqlType = Bool> + AsExpression<Bool>,
{
    expired.or(in_progress.and(lease_over).and(same_request))
}

/// What a key row holds that the takeover rule reads (see
/// [`KeyStore::take_over_key`]), each column as the predicate sees it
/// against the database's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakeoverRow<'a> {
    /// `expires_at` is past.
    pub expired: bool,
    /// `status` is `in_progress`.
    pub in_progress: bool,
    /// `locked_until` is past.
    pub lease_over: bool,
    /// The fingerprint of the request that registered the row.
    pub fingerprint: &'a str,
    /// The foreign step the row was registered with, if any.
    pub foreign_step: Option<&'a str>,
}

impl TakeoverRow<'_> {
    /// The takeover rule (`takeover`) in plain Rust, for a model of the protocol that cannot
    /// run SQL: whether a request with `fingerprint` and `foreign_step` may
    /// take this row over. The SQL is the rule; this is its twin, pinned to
    /// it on every combination of the row's fields by
    /// `tests/takeover_twin.rs` on both backends, so that a change to one
    /// without the other fails there.
    pub fn may_be_taken_over(&self, fingerprint: &str, foreign_step: Option<&str>) -> bool {
        let same_request = self.fingerprint == fingerprint && self.foreign_step == foreign_step;
        self.expired || (self.in_progress && self.lease_over && same_request)
    }
}

/// A key row left in progress, with the request it was registered for.
#[derive(Debug, Clone, PartialEq)]
pub struct StuckKey {
    /// The account that sent the request.
    pub account_id: i64,
    /// The key, as the client sent it.
    pub key: String,
    /// The request's fingerprint, as registered.
    pub fingerprint: String,
    /// The request's path, as kept for recovery.
    pub path: String,
    /// The request's body.
    pub body: Value,
    /// The foreign step it was registered with (see
    /// [`NewKey::foreign_step`]), if any.
    pub foreign_step: Option<String>,
}

impl StuckKey {
    /// The request the row was registered for, as its recovery runs it again.
    pub fn request(&self) -> KeyedRequest<'_> {
        KeyedRequest {
            account_id: self.account_id,
            key: &self.key,
            fingerprint: Fingerprint::stored(self.fingerprint.clone()),
            path: &self.path,
            body: &self.body,
        }
    }
}

/// One keyed request, scoped to the account that sent it: its identity.
#[derive(Debug, Clone)]
pub struct KeyedRequest<'a> {
    /// The account that sent it: a key is one account's.
    pub account_id: i64,
    /// The key, as [`IdempotencyKey`](crate::IdempotencyKey) parsed it.
    pub key: &'a str,
    /// What identifies the request (method, path, body).
    pub fingerprint: Fingerprint,
    /// The request itself (its route's path and its body), kept in a row
    /// registered in progress so that a recovery task can run it again if
    /// its worker dies.
    pub path: &'a str,
    /// The request's body.
    pub body: &'a Value,
}

impl<'a> KeyedRequest<'a> {
    /// `account_id`'s request under `key`: `method` and `path` as received,
    /// and the parsed `body`, fingerprinted together.
    pub fn new(
        account_id: i64,
        key: &'a str,
        method: &str,
        path: &'a str,
        body: &'a Value,
    ) -> KeyedRequest<'a> {
        KeyedRequest {
            account_id,
            key,
            fingerprint: Fingerprint::of(method, path, body),
            path,
            body,
        }
    }

    /// The same request, kept for recovery under `path` (the route's, as a
    /// router decoded it) rather than the one fingerprinted as received.
    pub fn routed_as(self, path: &'a str) -> KeyedRequest<'a> {
        KeyedRequest { path, ..self }
    }
}

/// A key row as it is written (inserted, or written over a row taken
/// over): the request's, under the policy's terms.
#[derive(Debug, Clone, Copy)]
pub struct NewKey<'a> {
    /// The request it is registered for.
    pub request: &'a KeyedRequest<'a>,
    /// How long the key is remembered.
    pub ttl: Duration,
    /// How long an in-progress row is protected before others may take it over.
    pub lease: Duration,
    /// The foreign step the operation performs (the card network, by its
    /// name), kept in a row registered in progress: only a worker that can
    /// perform that same step may finish the row, never one without it nor
    /// one at another service.
    pub foreign_step: Option<&'a str>,
    /// `None`: registered in progress, its operation to run, under a fresh
    /// lease. `Some`: already completed with this response (an operation
    /// whose response is known before it writes, see
    /// [`Operation::known_response`](crate::Operation::known_response)).
    pub completed: Option<&'a SavedResponse>,
}

/// The row a request registered, and the lease that lets it complete it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The row's account.
    pub account_id: i64,
    /// The row's key.
    pub key: String,
    /// The lease the row was written under: only its holder completes it.
    pub lease_token: Uuid,
    /// Whether the row was written completed already.
    pub completed: bool,
}

impl Claim {
    /// The claim on `row`, written under `lease_token`.
    pub fn new(row: &NewKey<'_>, lease_token: Uuid) -> Claim {
        Claim {
            account_id: row.request.account_id,
            key: row.request.key.to_owned(),
            lease_token,
            completed: row.completed.is_some(),
        }
    }
}

/// A response as stored in a key row and replayed byte for byte.
#[derive(Debug, Clone, PartialEq)]
pub struct SavedResponse {
    /// The HTTP status.
    pub status: u16,
    /// Lowercase header names; `BTreeMap` so the order is the same every time.
    pub headers: BTreeMap<String, String>,
    /// The JSON body.
    pub body: Value,
}

impl SavedResponse {
    /// A JSON answer: `status`, `content-type: application/json`, and
    /// `location` if the operation created something there.
    pub fn json(status: u16, location: Option<String>, body: Value) -> SavedResponse {
        let mut headers =
            BTreeMap::from([("content-type".to_owned(), "application/json".to_owned())]);
        if let Some(location) = location {
            headers.insert("location".to_owned(), location);
        }
        SavedResponse {
            status,
            headers,
            body,
        }
    }

    /// The headers as the row's JSON column keeps them.
    pub(crate) fn headers_json(&self) -> Value {
        serde_json::to_value(&self.headers).expect("a string map serializes")
    }

    /// The body bytes: canonical JSON, identical for the first answer and
    /// every replay (jsonb does not keep the original bytes).
    pub fn body_bytes(&self) -> String {
        crate::fingerprint::canonical_json(&self.body)
    }
}

/// The `status` column's two values, as each backend's queries write them.
pub(crate) const IN_PROGRESS: &str = KeyStatus::InProgress.as_str();
pub(crate) const COMPLETED: &str = KeyStatus::Completed.as_str();

/// The `status` column's two values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyStatus {
    InProgress,
    Completed,
}

impl KeyStatus {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            KeyStatus::InProgress => "in_progress",
            KeyStatus::Completed => "completed",
        }
    }
}

/// A live key row, decoded once.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyRecord {
    /// What identifies the request that registered the key.
    pub fingerprint: String,
    /// What the row says.
    pub state: KeyState,
}

/// What a live key row says.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// Registered, its operation not finished (key-first: between or inside
    /// its two transactions). `lease_live`: its worker's lease
    /// (`locked_until`) has not run out.
    InProgress {
        /// The lease has not run out.
        lease_live: bool,
    },
    /// Finished: the response to replay.
    Completed(SavedResponse),
}

/// A key row's columns as a backend reads them, before decoding.
pub(crate) struct RawKeyRow {
    pub(crate) fingerprint: String,
    pub(crate) status: String,
    pub(crate) lease_live: bool,
    pub(crate) response_status: Option<i32>,
    pub(crate) response_headers: Option<Value>,
    pub(crate) response_body: Option<Value>,
}

impl RawKeyRow {
    /// The one place a row's columns become a [`KeyState`].
    pub(crate) fn decode(self) -> QueryResult<KeyRecord> {
        let corrupt = |what: String| DieselError::DeserializationError(what.into());
        let state = match self.status.as_str() {
            s if s == KeyStatus::InProgress.as_str() => KeyState::InProgress {
                lease_live: self.lease_live,
            },
            s if s == KeyStatus::Completed.as_str() => {
                // The CHECK constraint rules a completed row without its
                // response out: treat one as corruption, never as a replay.
                let (Some(status), Some(headers), Some(body)) = (
                    self.response_status,
                    self.response_headers,
                    self.response_body,
                ) else {
                    return Err(corrupt("a completed key row without its response".into()));
                };
                KeyState::Completed(SavedResponse {
                    status: u16::try_from(status)
                        .map_err(|_| corrupt(format!("response status {status}")))?,
                    headers: serde_json::from_value(headers)
                        .map_err(|e| DieselError::DeserializationError(Box::new(e)))?,
                    body,
                })
            }
            other => return Err(corrupt(format!("key status {other:?}"))),
        };
        Ok(KeyRecord {
            fingerprint: self.fingerprint,
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(status: &str, lease_live: bool, response: bool) -> RawKeyRow {
        RawKeyRow {
            fingerprint: "sha256:f".into(),
            status: status.into(),
            lease_live,
            response_status: response.then_some(201),
            response_headers: response.then(|| serde_json::json!({"location": "/charges/1"})),
            response_body: response.then(|| serde_json::json!({"id": 1})),
        }
    }

    #[test]
    fn a_row_decodes_into_its_state_once() {
        assert_eq!(
            raw("in_progress", true, false).decode().unwrap().state,
            KeyState::InProgress { lease_live: true }
        );
        let KeyState::Completed(response) = raw("completed", false, true).decode().unwrap().state
        else {
            panic!("completed");
        };
        assert_eq!(response.status, 201);
        assert_eq!(response.headers["location"], "/charges/1");
        assert!(raw("completed", false, false).decode().is_err());
        assert!(raw("done", false, true).decode().is_err());
    }
}
