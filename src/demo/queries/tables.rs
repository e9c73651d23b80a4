//! The demo's queries, written once for both backends. Their statements
//! agree; what differs is the column types (PostgreSQL's UUID, JSONB,
//! SMALLINT and TIMESTAMPTZ, SQLite's TEXT and INTEGER), the clock
//! (PostgreSQL's `now()`, the app's on SQLite) and how the unguarded table
//! is made. Diesel cannot write one generic function over two schemas, so,
//! as the store does in `src/store/tables.rs`, [`demo_tables`] is the body
//! of the `DemoTables` impl, and `postgres.rs` and `sqlite.rs` each
//! instantiate it over their own tables (`k`: `idempotency_keys`,
//! `refunds`, `charges`, `u`: `demo_unguarded_keys`) and these names:
//!
//! - `Id`, `encode_id(Uuid) -> Id`, `shown_id(Id) -> String`: a UUID column;
//! - `Time`, `shown_time(Time) -> String`: a time column, and the RFC 3339
//!   text the page shows;
//! - `Json`, `encode_json(&Value) -> Json`,
//!   `decode_json(Json) -> QueryResult<Value>`: a JSON column;
//! - `Status`: the integer of `response_status`;
//! - `clock()`: now, as an expression of a time column (the backend's clock);
//! - `a_second_ago()`: one second before it, as the same;
//! - `create(conn)`: makes the unguarded table if it is not there;
//! - `database_now(conn)`: the clock's time, as RFC 3339 text.
//!
//! The table's declaration and its `CREATE TABLE` stay in the backend files.

/// `impl DemoTables for $conn`, in a module of its own (`written_once`)
/// that takes the names above from the backend file.
macro_rules! demo_tables {
    ($conn:ty) => {
        mod written_once {
            use diesel::prelude::*;
            use uuid::Uuid;

            use super::{Id, Json, Status, Time, a_second_ago, clock, create, database_now};
            use super::{charges, k, refunds, u};
            use super::{decode_json, encode_id, encode_json, shown_id, shown_time};
            use $crate::demo::queries::{
                DemoTables, KeyView, RefundView, Unguarded, UnguardedView,
            };
            use $crate::store::QueryResult;

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
                        response_status: self.response_status.map(i32::from),
                        response_headers: self.response_headers.map(decode_json).transpose()?,
                        response_body: self.response_body.map(decode_json).transpose()?,
                        created_at: shown_time(self.created_at),
                        expires_at: shown_time(self.expires_at),
                        expired: self.expired,
                        locked_until: shown_time(self.locked_until),
                        lease_live: self.lease_live,
                    })
                }
            }

            impl DemoTables for $conn {
                fn create_tables(&mut self) -> QueryResult<()> {
                    create(self)
                }

                fn now_text(&mut self) -> QueryResult<String> {
                    database_now(self)
                }

                fn key_views(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<KeyView>> {
                    // One time for the whole page.
                    let now = clock();
                    let rows: Vec<KeyRow> = k::table
                        .filter(k::account_id.eq(account_id))
                        .order((k::created_at.desc(), k::key.desc()))
                        .limit(limit)
                        .select((
                            k::key,
                            k::status,
                            k::fingerprint,
                            k::response_status,
                            k::response_headers,
                            k::response_body,
                            k::created_at,
                            k::expires_at,
                            k::expires_at.le(now.clone()),
                            k::locked_until,
                            k::locked_until.gt(now),
                        ))
                        .load(self)?;
                    rows.into_iter().map(KeyRow::view).collect()
                }

                fn refund_views(
                    &mut self,
                    account_id: i64,
                    limit: i64,
                ) -> QueryResult<Vec<RefundView>> {
                    let rows: Vec<(Id, Id, i64, String, Time)> = refunds::table
                        .filter(refunds::account_id.eq(account_id))
                        .order((refunds::created_at.desc(), refunds::id.desc()))
                        .limit(limit)
                        .select((
                            refunds::id,
                            refunds::charge_id,
                            refunds::amount,
                            refunds::currency,
                            refunds::created_at,
                        ))
                        .load(self)?;
                    Ok(rows
                        .into_iter()
                        .map(|(id, charge, amount, currency, at)| {
                            (
                                shown_id(id),
                                shown_id(charge),
                                amount,
                                currency,
                                shown_time(at),
                            )
                        })
                        .collect())
                }

                fn unguarded_views(
                    &mut self,
                    account_id: i64,
                    limit: i64,
                ) -> QueryResult<Vec<UnguardedView>> {
                    let rows: Vec<(String, Id, Time)> = u::table
                        .filter(u::account_id.eq(account_id))
                        .order((u::created_at.desc(), u::id.desc()))
                        .limit(limit)
                        .select((u::key, u::charge_id, u::created_at))
                        .load(self)?;
                    Ok(rows
                        .into_iter()
                        .map(|(key, charge_id, at)| UnguardedView {
                            key,
                            charge_id: shown_id(charge_id),
                            created_at: shown_time(at),
                        })
                        .collect())
                }

                fn find_unguarded(
                    &mut self,
                    account_id: i64,
                    key: &str,
                ) -> QueryResult<Option<Unguarded>> {
                    let row: Option<(String, String, Json)> = u::table
                        .filter(u::account_id.eq(account_id))
                        .filter(u::key.eq(key))
                        .select((u::key, u::fingerprint, u::response_body))
                        .first(self)
                        .optional()?;
                    row.map(|(key, fingerprint, body)| {
                        Ok(Unguarded {
                            key,
                            fingerprint,
                            response_body: decode_json(body)?,
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
                    diesel::insert_into(u::table)
                        .values((
                            u::account_id.eq(account_id),
                            u::key.eq(&row.key),
                            u::fingerprint.eq(&row.fingerprint),
                            u::charge_id.eq(encode_id(charge_id)),
                            u::response_body.eq(encode_json(&row.response_body)),
                            u::created_at.eq(clock()),
                        ))
                        .execute(self)
                        .map(|_| ())
                }

                fn delete_account_rows(&mut self, account_id: i64) -> QueryResult<()> {
                    diesel::delete(k::table.filter(k::account_id.eq(account_id))).execute(self)?;
                    diesel::delete(u::table.filter(u::account_id.eq(account_id))).execute(self)?;
                    diesel::delete(refunds::table.filter(refunds::account_id.eq(account_id)))
                        .execute(self)?;
                    diesel::delete(charges::table.filter(charges::account_id.eq(account_id)))
                        .execute(self)?;
                    Ok(())
                }

                fn purge_account_keys(&mut self, account_id: i64) -> QueryResult<usize> {
                    diesel::delete(
                        k::table
                            .filter(k::account_id.eq(account_id))
                            .filter(k::expires_at.le(clock())),
                    )
                    .execute(self)
                }

                fn expire_key(&mut self, account_id: i64, key: &str) -> QueryResult<usize> {
                    diesel::update(
                        k::table
                            .filter(k::account_id.eq(account_id))
                            .filter(k::key.eq(key)),
                    )
                    .set(k::expires_at.eq(a_second_ago()))
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
                            k::table
                                .filter(k::account_id.eq(account_id))
                                .filter(k::key.eq(key)),
                        )
                        .execute(self)?;
                    }
                    diesel::delete(
                        charges::table
                            .filter(charges::account_id.eq(account_id))
                            .filter(charges::id.eq(encode_id(charge_id))),
                    )
                    .execute(self)
                    .map(|_| ())
                }
            }
        }
    };
}

pub(super) use demo_tables;
