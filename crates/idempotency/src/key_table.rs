//! The key store's statements, written once for both backends: each step of
//! [`KeyStore`](crate::KeyStore) is one statement of Diesel's query builder
//! over the table in `sql/`. The statements agree; what differs is the
//! column types (PostgreSQL's UUID, SMALLINT, JSONB and TIMESTAMPTZ,
//! SQLite's TEXT and INTEGER), the clock (PostgreSQL's `now()`, the app's on
//! SQLite), the null-safe comparison, and the purge: that is the
//! [`Dialect`], which `postgres.rs` and `sqlite.rs` implement. Diesel cannot
//! write one generic function over two schemas, so [`key_store!`] is the
//! body of `impl KeyStore`, instantiated by each backend over its own
//! connection and table.

use std::borrow::Cow;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::key_store::QueryResult;

/// The transaction each backend runs the protocol in (see
/// [`Connections::transaction`](crate::Connections::transaction)). Public
/// in a private module: implemented here, for Diesel's two connections,
/// and for no one else.
#[cfg_attr(not(feature = "r2d2"), allow(dead_code))]
pub trait Backend {
    /// Runs `work` in one transaction, as the protocol needs it.
    fn key_transaction<T, E: From<diesel::result::Error>>(
        &mut self,
        work: impl FnOnce(&mut Self) -> Result<T, E>,
    ) -> Result<T, E>;
}

/// What the statements written once here need of a backend, where the two
/// differ.
pub(crate) trait Dialect {
    /// `lease_token`'s Rust type.
    type Token;
    /// `response_status`'s Rust type.
    type Code: Into<i32>;
    /// A JSON column's Rust type: as written, borrowing the value where the
    /// backend can bind it as is (`'static`: as read).
    type Json<'a>;
    /// Now, as an expression of a time column.
    type Clock;
    /// A time `d` from now, as an expression of a time column.
    type Later;
    /// A time `d` ago, as an expression of a time column (the inbox's purge).
    type Earlier;
    /// `foreign_step` is `step`, where NULL is NULL.
    type SameStep<'a>;
    /// A statement as the backend runs it best.
    type Cached<Q>;

    fn token(token: Uuid) -> Self::Token;
    fn code(status: u16) -> QueryResult<Self::Code>;
    fn json(value: Cow<'_, Value>) -> Self::Json<'_>;
    fn read_json(json: Self::Json<'static>) -> QueryResult<Value>;
    /// Now, on the backend's clock.
    fn clock() -> Self::Clock;
    fn from_now(d: Duration) -> Self::Later;
    fn ago(d: Duration) -> Self::Earlier;
    fn same_step(step: Option<&str>) -> Self::SameStep<'_>;
    /// The statement, planned once per connection where the backend can.
    fn cached<Q>(statement: Q) -> Self::Cached<Q>;
    /// Deletes up to `batch` expired rows in one short statement: the one
    /// step that needs what Diesel's query builder cannot say, and says it
    /// differently on each backend.
    fn purge(&mut self, batch: i64) -> QueryResult<usize>;
}

/// `impl KeyStore for $conn` over its table `$keys` (the module of
/// `diesel::table!`), its differences taken from `$conn`'s [`Dialect`].
macro_rules! key_store {
    ($conn:ty, $keys:ident) => {
        const _: () = {
            use std::borrow::Cow;

            use diesel::dsl;
            use diesel::prelude::*;
            use uuid::Uuid;

            use $crate::key_store::{
                COMPLETED, Claim, IN_PROGRESS, KeyRecord, KeyStore, NewKey, QueryResult, RawKeyRow,
                SavedResponse, StuckKey, takeover,
            };
            use $crate::key_table::Dialect;

            type D = $conn;
            type Json<'a> = <D as Dialect>::Json<'a>;
            /// A JSON column as read.
            type JsonRead = Json<'static>;
            type Code = <D as Dialect>::Code;

            /// Every column of a new key row but the key, as `insert_key`
            /// writes it and `take_over_key` writes it over a row it takes.
            type NewRow<'a> = (
                dsl::Eq<$keys::fingerprint, &'a str>,
                dsl::Eq<$keys::status, &'static str>,
                dsl::Eq<$keys::response_status, Option<Code>>,
                dsl::Eq<$keys::response_headers, Option<Json<'a>>>,
                dsl::Eq<$keys::response_body, Option<Json<'a>>>,
                dsl::Eq<$keys::created_at, <D as Dialect>::Clock>,
                dsl::Eq<$keys::expires_at, <D as Dialect>::Later>,
                dsl::Eq<$keys::locked_until, <D as Dialect>::Later>,
                dsl::Eq<$keys::lease_token, <D as Dialect>::Token>,
                dsl::Eq<$keys::request_path, Option<&'a str>>,
                dsl::Eq<$keys::request_body, Option<Json<'a>>>,
                dsl::Eq<$keys::foreign_step, Option<&'a str>>,
            );

            /// A completed row's lease is over at once; an in-progress one
            /// is protected for the lease, and keeps its request for
            /// recovery.
            fn new_row<'a>(row: &NewKey<'a>, lease_token: Uuid) -> QueryResult<NewRow<'a>> {
                let (status, code, headers, body, lease, request) = match row.completed {
                    None => {
                        let request = (
                            row.request.path,
                            D::json(Cow::Borrowed(row.request.body)),
                            row.foreign_step,
                        );
                        (IN_PROGRESS, None, None, None, row.lease, Some(request))
                    }
                    Some(response) => (
                        COMPLETED,
                        Some(D::code(response.status)?),
                        Some(D::json(Cow::Owned(response.headers_json()))),
                        Some(D::json(Cow::Borrowed(&response.body))),
                        std::time::Duration::ZERO,
                        None,
                    ),
                };
                let (path, request_body, step) = match request {
                    Some((path, body, step)) => (Some(path), Some(body), step),
                    None => (None, None, None),
                };
                Ok((
                    $keys::fingerprint.eq(row.request.fingerprint.as_str()),
                    $keys::status.eq(status),
                    $keys::response_status.eq(code),
                    $keys::response_headers.eq(headers),
                    $keys::response_body.eq(body),
                    $keys::created_at.eq(D::clock()),
                    $keys::expires_at.eq(D::from_now(row.ttl)),
                    $keys::locked_until.eq(D::from_now(lease)),
                    $keys::lease_token.eq(D::token(lease_token)),
                    $keys::request_path.eq(path),
                    $keys::request_body.eq(request_body),
                    $keys::foreign_step.eq(step),
                ))
            }

            impl KeyStore for $conn {
                fn find_live_key(
                    &mut self,
                    account_id: i64,
                    key: &str,
                ) -> QueryResult<Option<KeyRecord>> {
                    let row: Option<(
                        String,
                        String,
                        Option<Code>,
                        Option<JsonRead>,
                        Option<JsonRead>,
                        bool,
                    )> = $keys::table
                        .filter($keys::account_id.eq(account_id))
                        .filter($keys::key.eq(key))
                        .filter($keys::expires_at.gt(D::clock()))
                        .select((
                            $keys::fingerprint,
                            $keys::status,
                            $keys::response_status,
                            $keys::response_headers,
                            $keys::response_body,
                            // The lease is live (meaningful in progress).
                            $keys::locked_until.gt(D::clock()),
                        ))
                        .first(self)
                        .optional()?;
                    let Some((fingerprint, status, code, headers, body, lease_live)) = row else {
                        return Ok(None);
                    };
                    RawKeyRow {
                        fingerprint,
                        status,
                        lease_live,
                        response_status: code.map(Into::into),
                        response_headers: headers.map(D::read_json).transpose()?,
                        response_body: body.map(D::read_json).transpose()?,
                    }
                    .decode()
                    .map(Some)
                }

                fn insert_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>> {
                    let request = row.request;
                    let lease_token = Uuid::new_v4();
                    let inserted: Option<i64> = D::cached(
                        diesel::insert_into($keys::table)
                            .values((
                                $keys::account_id.eq(request.account_id),
                                $keys::key.eq(request.key),
                                new_row(row, lease_token)?,
                            ))
                            .on_conflict(($keys::account_id, $keys::key))
                            .do_nothing()
                            .returning($keys::account_id),
                    )
                    .get_result(self)
                    .optional()?;
                    Ok(inserted.map(|_| Claim::new(row, lease_token)))
                }

                fn take_over_key(&mut self, row: &NewKey<'_>) -> QueryResult<Option<Claim>> {
                    let request = row.request;
                    let lease_token = Uuid::new_v4();
                    let takeable = takeover(
                        $keys::expires_at.le(D::clock()),
                        $keys::status.eq(IN_PROGRESS),
                        $keys::locked_until.lt(D::clock()),
                        $keys::fingerprint
                            .eq(request.fingerprint.as_str())
                            .and(D::same_step(row.foreign_step)),
                    );
                    let taken: Option<i64> = D::cached(
                        diesel::update(
                            $keys::table
                                .filter($keys::account_id.eq(request.account_id))
                                .filter($keys::key.eq(request.key))
                                .filter(takeable),
                        )
                        .set(new_row(row, lease_token)?)
                        .returning($keys::account_id),
                    )
                    .get_result(self)
                    .optional()?;
                    Ok(taken.map(|_| Claim::new(row, lease_token)))
                }

                fn complete_key(
                    &mut self,
                    claim: &Claim,
                    response: &SavedResponse,
                ) -> QueryResult<bool> {
                    let completed: Option<i64> = D::cached(
                        diesel::update(
                            $keys::table
                                .filter($keys::account_id.eq(claim.account_id))
                                .filter($keys::key.eq(&claim.key))
                                .filter($keys::status.eq(IN_PROGRESS))
                                .filter($keys::lease_token.eq(D::token(claim.lease_token))),
                        )
                        .set((
                            $keys::status.eq(COMPLETED),
                            $keys::response_status.eq(D::code(response.status)?),
                            $keys::response_headers
                                .eq(D::json(Cow::Owned(response.headers_json()))),
                            $keys::response_body.eq(D::json(Cow::Borrowed(&response.body))),
                            // A completed row answers from its response: the
                            // request it kept for recovery is not needed any more.
                            $keys::request_path.eq(None::<String>),
                            $keys::request_body.eq(None::<JsonRead>),
                            $keys::foreign_step.eq(None::<String>),
                        ))
                        .returning($keys::account_id),
                    )
                    .get_result(self)
                    .optional()?;
                    Ok(completed.is_some())
                }

                fn release_key(&mut self, claim: &Claim) -> QueryResult<usize> {
                    diesel::delete(
                        $keys::table
                            .filter($keys::account_id.eq(claim.account_id))
                            .filter($keys::key.eq(&claim.key))
                            .filter($keys::status.eq(IN_PROGRESS))
                            .filter($keys::lease_token.eq(D::token(claim.lease_token))),
                    )
                    .execute(self)
                }

                fn purge_expired_keys(&mut self, batch: i64) -> QueryResult<usize> {
                    Dialect::purge(self, batch)
                }

                fn find_stuck_accounts(&mut self, limit: i64) -> QueryResult<Vec<i64>> {
                    $keys::table
                        .filter($keys::status.eq(IN_PROGRESS))
                        .filter($keys::locked_until.lt(D::clock()))
                        .filter($keys::expires_at.gt(D::clock()))
                        .filter($keys::request_path.is_not_null())
                        .group_by($keys::account_id)
                        .order(dsl::min($keys::locked_until))
                        .limit(limit)
                        .select($keys::account_id)
                        .load(self)
                }

                fn find_stuck_keys(
                    &mut self,
                    account_id: i64,
                    limit: i64,
                    steps: &[String],
                ) -> QueryResult<Vec<StuckKey>> {
                    type Row = (
                        i64,
                        String,
                        String,
                        Option<String>,
                        Option<JsonRead>,
                        Option<String>,
                    );
                    let performable = $keys::foreign_step
                        .is_null()
                        .or($keys::foreign_step.eq_any(steps));
                    let rows: Vec<Row> = $keys::table
                        .filter($keys::account_id.eq(account_id))
                        .filter($keys::status.eq(IN_PROGRESS))
                        .filter($keys::locked_until.lt(D::clock()))
                        .filter($keys::expires_at.gt(D::clock()))
                        .filter($keys::request_path.is_not_null())
                        .order((performable.desc(), $keys::locked_until))
                        .limit(limit)
                        .select((
                            $keys::account_id,
                            $keys::key,
                            $keys::fingerprint,
                            $keys::request_path,
                            $keys::request_body,
                            $keys::foreign_step,
                        ))
                        .load(self)?;
                    let mut stuck = Vec::with_capacity(rows.len());
                    for (account_id, key, fingerprint, path, body, foreign_step) in rows {
                        let body = body.map(D::read_json).transpose()?;
                        if let (Some(path), Some(body)) = (path, body) {
                            stuck.push(StuckKey {
                                account_id,
                                key,
                                fingerprint,
                                path,
                                body,
                                foreign_step,
                            });
                        }
                    }
                    Ok(stuck)
                }
            }
        };
    };
}

pub(crate) use key_store;
