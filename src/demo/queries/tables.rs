//! The demo's queries, written once for both backends. Their statements
//! agree; what differs is the column types (PostgreSQL's UUID, JSONB,
//! SMALLINT and TIMESTAMPTZ, SQLite's TEXT and INTEGER), the clock
//! (PostgreSQL's `now()`, the app's on SQLite) and how the unguarded table
//! is made: that is the [`DemoDialect`] trait, the store's [`Dialect`] (the
//! UUID and time columns, the clock) and what only the demo needs, which
//! `postgres.rs` and `sqlite.rs` implement for their connection. Diesel
//! cannot write one generic function over two schemas, so, as the store
//! does in `src/store/tables.rs`, [`demo_tables!`] is the body of the
//! `DemoTables` impl, instantiated by each backend over its connection and
//! its tables.
//!
//! The unguarded table's declaration and its `CREATE TABLE` stay in the
//! backend files.

use serde_json::Value;

use crate::store::QueryResult;
use crate::store::tables::Dialect;

/// The unguarded table's one index, the same on both backends (its
/// `CREATE TABLE` is each backend's: the column types differ).
pub(super) const UNGUARDED_INDEX: &str = "
CREATE INDEX IF NOT EXISTS demo_unguarded_keys_account_key_idx
    ON demo_unguarded_keys (account_id, key);
";

/// What the demo's queries need of a backend beyond the store's
/// [`Dialect`], where the two backends differ.
pub(super) trait DemoDialect: Dialect {
    /// A JSON column's Rust type.
    type Json;
    /// `response_status`'s Rust type: PostgreSQL's SMALLINT, SQLite's
    /// INTEGER.
    type Status: Into<i32>;
    /// One second before now, as an expression of a time column.
    type SecondAgo;

    /// A JSON value as its column stores it.
    fn encode_json(value: &Value) -> Self::Json;
    /// A JSON column's value, read back.
    fn decode_json(json: Self::Json) -> QueryResult<Value>;
    /// A UUID column as the page shows it.
    fn shown_id(id: Self::Id) -> String;
    /// A time column as the page shows it: RFC 3339 text.
    fn shown_time(t: Self::Time) -> String;
    /// One second before now (what `expire_key` sets), on the backend's
    /// clock so that every query comparing with [`Dialect::clock`] sees the
    /// key expired.
    fn a_second_ago() -> Self::SecondAgo;
    /// Makes the unguarded table if it is not there (no migration makes
    /// it: it is the demo's own).
    fn create_unguarded_table(&mut self) -> QueryResult<()>;
    /// The clock's time, as RFC 3339 text: what the page says "now" is.
    fn database_now(&mut self) -> QueryResult<String>;
}

/// `impl DemoTables for $conn` over its tables, the modules of
/// `diesel::table!` in this order: `idempotency_keys`, `charges`, `refunds`
/// and `demo_unguarded_keys`; its differences taken from `$conn`'s
/// [`DemoDialect`].
macro_rules! demo_tables {
    ($conn:ty, $keys:ident, $charges:ident, $refunds:ident, $unguarded:ident) => {
        const _: () = {
            use diesel::prelude::*;
            use uuid::Uuid;

            use $crate::demo::queries::tables::DemoDialect;
            use $crate::demo::queries::{
                DemoTables, KeyView, RefundView, Unguarded, UnguardedView,
            };
            use $crate::store::QueryResult;
            use $crate::store::tables::Dialect;

            type D = $conn;
            type Id = <D as Dialect>::Id;
            type Time = <D as Dialect>::Time;
            type Json = <D as DemoDialect>::Json;
            type Status = <D as DemoDialect>::Status;

            /// A key row and what the clock says of it.
            #[derive(Queryable)]
            struct KeyRow {
                key: String,
                status: String,
                fingerprint: String,
                response_status: Option<Status>,
                response_headers: Option<Json>,
                response_body: Option<Json>,
                created_at: Time,
                expires_at: Time,
                expired: bool,
                locked_until: Time,
                lease_live: bool,
            }

            impl KeyRow {
                fn view(self) -> QueryResult<KeyView> {
                    Ok(KeyView {
                        key: self.key,
                        status: self.status,
                        fingerprint: self.fingerprint,
                        response_status: self.response_status.map(Into::into),
                        response_headers: self.response_headers.map(D::decode_json).transpose()?,
                        response_body: self.response_body.map(D::decode_json).transpose()?,
                        created_at: D::shown_time(self.created_at),
                        expires_at: D::shown_time(self.expires_at),
                        expired: self.expired,
                        locked_until: D::shown_time(self.locked_until),
                        lease_live: self.lease_live,
                    })
                }
            }

            impl DemoTables for $conn {
                fn create_tables(&mut self) -> QueryResult<()> {
                    D::create_unguarded_table(self)
                }

                fn now_text(&mut self) -> QueryResult<String> {
                    D::database_now(self)
                }

                fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
                    // One time for the whole page.
                    let now = D::clock();
                    let rows: Vec<KeyRow> = $keys::table
                        .filter($keys::account_id.eq(account_id))
                        .order(($keys::created_at.desc(), $keys::key.desc()))
                        .limit(limit)
                        .select((
                            $keys::key,
                            $keys::status,
                            $keys::fingerprint,
                            $keys::response_status,
                            $keys::response_headers,
                            $keys::response_body,
                            $keys::created_at,
                            $keys::expires_at,
                            $keys::expires_at.le(now.clone()),
                            $keys::locked_until,
                            $keys::locked_until.gt(now),
                        ))
                        .load(self)?;
                    rows.into_iter().map(KeyRow::view).collect()
                }

                fn refund_views(
                    &mut self,
                    account_id: i64,
                    limit: i64,
                ) -> QueryResult<Vec<RefundView>> {
                    let rows: Vec<(Id, Id, i64, String, Time)> = $refunds::table
                        .filter($refunds::account_id.eq(account_id))
                        .order(($refunds::created_at.desc(), $refunds::id.desc()))
                        .limit(limit)
                        .select((
                            $refunds::id,
                            $refunds::charge_id,
                            $refunds::amount,
                            $refunds::currency,
                            $refunds::created_at,
                        ))
                        .load(self)?;
                    Ok(rows
                        .into_iter()
                        .map(|(id, charge, amount, currency, at)| {
                            (
                                D::shown_id(id),
                                D::shown_id(charge),
                                amount,
                                currency,
                                D::shown_time(at),
                            )
                        })
                        .collect())
                }

                fn unguarded_views(
                    &mut self,
                    account_id: i64,
                    limit: i64,
                ) -> QueryResult<Vec<UnguardedView>> {
                    let rows: Vec<(String, Id, Time)> = $unguarded::table
                        .filter($unguarded::account_id.eq(account_id))
                        .order(($unguarded::created_at.desc(), $unguarded::id.desc()))
                        .limit(limit)
                        .select((
                            $unguarded::key,
                            $unguarded::charge_id,
                            $unguarded::created_at,
                        ))
                        .load(self)?;
                    Ok(rows
                        .into_iter()
                        .map(|(key, charge_id, at)| UnguardedView {
                            key,
                            charge_id: D::shown_id(charge_id),
                            created_at: D::shown_time(at),
                        })
                        .collect())
                }

                fn find_unguarded(
                    &mut self,
                    account_id: i64,
                    key: &str,
                ) -> QueryResult<Option<Unguarded>> {
                    let row: Option<(String, String, Json)> = $unguarded::table
                        .filter($unguarded::account_id.eq(account_id))
                        .filter($unguarded::key.eq(key))
                        .select((
                            $unguarded::key,
                            $unguarded::fingerprint,
                            $unguarded::response_body,
                        ))
                        .first(self)
                        .optional()?;
                    row.map(|(key, fingerprint, body)| {
                        Ok(Unguarded {
                            key,
                            fingerprint,
                            response_body: D::decode_json(body)?,
                        })
                    })
                    .transpose()
                }

                fn insert_unguarded(
                    &mut self,
                    account_id: i64,
                    row: &Unguarded,
                    charge_id: Uuid,
                ) -> QueryResult<()> {
                    diesel::insert_into($unguarded::table)
                        .values((
                            $unguarded::account_id.eq(account_id),
                            $unguarded::key.eq(&row.key),
                            $unguarded::fingerprint.eq(&row.fingerprint),
                            $unguarded::charge_id.eq(D::encode_id(charge_id)),
                            $unguarded::response_body.eq(D::encode_json(&row.response_body)),
                            $unguarded::created_at.eq(D::clock()),
                        ))
                        .execute(self)
                        .map(|_| ())
                }

                fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()> {
                    diesel::delete($keys::table.filter($keys::account_id.eq(account_id)))
                        .execute(self)?;
                    diesel::delete($unguarded::table.filter($unguarded::account_id.eq(account_id)))
                        .execute(self)?;
                    diesel::delete($refunds::table.filter($refunds::account_id.eq(account_id)))
                        .execute(self)?;
                    diesel::delete($charges::table.filter($charges::account_id.eq(account_id)))
                        .execute(self)?;
                    Ok(())
                }

                fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize> {
                    diesel::delete(
                        $keys::table
                            .filter($keys::account_id.eq(account_id))
                            .filter($keys::expires_at.le(D::clock())),
                    )
                    .execute(self)
                }

                fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
                    diesel::update(
                        $keys::table
                            .filter($keys::account_id.eq(account_id))
                            .filter($keys::key.eq(key)),
                    )
                    .set($keys::expires_at.eq(D::a_second_ago()))
                    .execute(self)
                }

                fn forget_charge(
                    &mut self,
                    account_id: i64,
                    key: Option<&str>,
                    charge_id: Uuid,
                ) -> QueryResult<()> {
                    if let Some(key) = key {
                        diesel::delete(
                            $keys::table
                                .filter($keys::account_id.eq(account_id))
                                .filter($keys::key.eq(key)),
                        )
                        .execute(self)?;
                    }
                    diesel::delete(
                        $charges::table
                            .filter($charges::account_id.eq(account_id))
                            .filter($charges::id.eq(D::encode_id(charge_id))),
                    )
                    .execute(self)
                    .map(|_| ())
                }
            }
        };
    };
}

pub(super) use demo_tables;
