//! The queries of the `accounts`, `charges`, `refunds` and `authorizations`
//! tables, written once for both backends. Their statements agree; what
//! differs is the column types (PostgreSQL's UUID and TIMESTAMPTZ, SQLite's
//! TEXT), the clock (PostgreSQL's `now()`, the app's on SQLite) and what a
//! PostgreSQL error or statement needs: that is the [`Dialect`] trait, which
//! each backend's connection implements in its `mod.rs`. Diesel cannot write
//! one generic function over two schemas, so each macro below is the body of
//! one `*Store` impl over `$conn`'s `Dialect` and the tables it is given
//! (their `diesel::table!` modules, as the protocol crate's `key_store!`
//! takes its key table); each backend's `mod.rs` instantiates them all, with
//! [`table_stores!`], over its `schema`.
//!
//! The key table is the protocol crate's (`idempotency::postgres`,
//! `idempotency::sqlite`).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::QueryResult;

/// What the queries written once here need of a backend, where the two
/// differ.
pub trait Dialect {
    /// A UUID column's Rust type.
    type Id;
    /// A time column's Rust type.
    type Time;
    /// Now, as an expression of a time column.
    type Clock;
    /// A statement as the backend runs it best.
    type Cached<Q>;

    fn encode_id(id: Uuid) -> Self::Id;
    fn decode_id(id: Self::Id) -> QueryResult<Uuid>;
    fn encode_time(t: DateTime<Utc>) -> Self::Time;
    fn decode_time(t: Self::Time) -> QueryResult<DateTime<Utc>>;
    /// Now, on the backend's clock.
    fn clock() -> Self::Clock;
    /// The statement, planned once per connection where the backend can.
    fn cached<Q>(statement: Q) -> Self::Cached<Q>;
    /// What every error passes on its way out (`.inspect_err(D::note)`).
    fn note(error: &diesel::result::Error);
    /// Locks the account's row until the transaction ends, where the
    /// backend has row locks (`store::webhooks`: the endpoint limit).
    fn lock_account(conn: &mut Self, account_id: i64) -> QueryResult<()>;
}

/// A boxed query of `$table`, ordered and bounded by a [`Cursor`] (the
/// keyset of `(created_at, id)`): `created_at <= t` bounds the index range
/// scan (Diesel has no row-value `<`), and the `OR` takes the rows of the
/// same time past the cursor's id. `Before` reads oldest first; the caller
/// reverses the page.
macro_rules! keyset {
    ($query:expr, $cursor:expr, $table:ident) => {
        match $cursor {
            None => $query.order(($table::created_at.desc(), $table::id.desc())),
            Some(Cursor::After(at, id)) => {
                let (at, id) = (D::encode_time(at), D::encode_id(id));
                $query
                    .filter($table::created_at.le(at.clone()))
                    .filter($table::created_at.lt(at).or($table::id.lt(id)))
                    .order(($table::created_at.desc(), $table::id.desc()))
            }
            Some(Cursor::Before(at, id)) => {
                let (at, id) = (D::encode_time(at), D::encode_id(id));
                $query
                    .filter($table::created_at.ge(at.clone()))
                    .filter($table::created_at.gt(at).or($table::id.gt(id)))
                    .order(($table::created_at.asc(), $table::id.asc()))
            }
        }
    };
}

/// `impl AccountStore for $conn`: the `accounts` table, and the in-process
/// network's keys (`in_process_network_keys`) kept by account name.
macro_rules! account_store {
    ($conn:ty, $accounts:ident, $network_keys:ident) => {
        use diesel::prelude::*;
        use diesel::sql_types::Bool;
        use $crate::store::tables::Dialect;
        use $crate::store::{AccountRecord, QueryResult, time_text};

        type D = $conn;
        type Time = <D as Dialect>::Time;

        impl $crate::store::AccountStore for $conn {
            fn insert_account(
                &mut self,
                name: &str,
                key_digest: &str,
                demo: bool,
            ) -> QueryResult<i64> {
                diesel::insert_into($accounts::table)
                    .values((
                        $accounts::name.eq(name),
                        $accounts::api_key_sha256.eq(key_digest),
                        $accounts::demo.eq(demo),
                        $accounts::created_at.eq(D::clock()),
                    ))
                    .returning($accounts::id)
                    .get_result(self)
                    .inspect_err(D::note)
            }

            fn revoke_account(&mut self, name: &str) -> QueryResult<Option<i64>> {
                diesel::update(
                    $accounts::table
                        .filter($accounts::name.eq(name))
                        .filter($accounts::revoked_at.is_null())
                        .filter($accounts::demo.eq(false)),
                )
                .set($accounts::revoked_at.eq(D::clock().nullable()))
                .returning($accounts::id)
                .get_result(self)
                .inspect_err(D::note)
                .optional()
            }

            fn list_accounts(&mut self) -> QueryResult<Vec<AccountRecord>> {
                let rows: Vec<(i64, String, Time, Option<Time>, bool)> = $accounts::table
                    .order($accounts::id)
                    .select((
                        $accounts::id,
                        $accounts::name,
                        $accounts::created_at,
                        $accounts::revoked_at,
                        $accounts::demo,
                    ))
                    .load(self)
                    .inspect_err(D::note)?;
                let shown = |t: Time| D::decode_time(t).map(time_text);
                rows.into_iter()
                    .map(|(id, name, created, revoked, demo)| {
                        Ok(AccountRecord {
                            id,
                            name,
                            created_at: shown(created)?,
                            revoked_at: revoked.map(shown).transpose()?,
                            demo,
                        })
                    })
                    .collect()
            }

            fn find_account(
                &mut self,
                key_digest: &str,
                include_demo: bool,
            ) -> QueryResult<Option<i64>> {
                $accounts::table
                    .filter($accounts::api_key_sha256.eq(key_digest))
                    .filter($accounts::revoked_at.is_null())
                    .filter(
                        $accounts::demo
                            .eq(false)
                            .or(include_demo.into_sql::<Bool>()),
                    )
                    .select($accounts::id)
                    .first(self)
                    .inspect_err(D::note)
                    .optional()
            }

            fn account_is_live(&mut self, id: i64) -> QueryResult<bool> {
                diesel::select(diesel::dsl::exists(
                    $accounts::table
                        .filter($accounts::id.eq(id))
                        .filter($accounts::revoked_at.is_null()),
                ))
                .get_result(self)
                .inspect_err(D::note)
            }

            fn rekey_account(&mut self, name: &str, key_digest: &str) -> QueryResult<usize> {
                diesel::update(
                    $accounts::table
                        .filter($accounts::name.eq(name))
                        .filter($accounts::revoked_at.is_null()),
                )
                .set($accounts::api_key_sha256.eq(key_digest))
                .execute(self)
                .inspect_err(D::note)
            }

            fn keep_network_key(&mut self, name: &str, candidate: &str) -> QueryResult<String> {
                diesel::insert_into($network_keys::table)
                    .values((
                        $network_keys::name.eq(name),
                        $network_keys::api_key.eq(candidate),
                    ))
                    .on_conflict($network_keys::name)
                    .do_nothing()
                    .execute(self)
                    .inspect_err(D::note)?;
                $network_keys::table
                    .filter($network_keys::name.eq(name))
                    .select($network_keys::api_key)
                    .first(self)
                    .inspect_err(D::note)
            }
        }
    };
}

/// `impl ChargeStore for $conn`: the `charges` and `refunds` tables, with
/// their row types checked against `$backend`.
macro_rules! charge_store {
    ($conn:ty, $backend:ty, $charges:ident, $refunds:ident) => {
        use diesel::prelude::*;
        use uuid::Uuid;
        use $crate::store::tables::Dialect;
        use $crate::store::{Charge, Cursor, Page, QueryResult, Refund, RefundReservation};

        type D = $conn;
        type Id = <D as Dialect>::Id;
        type Time = <D as Dialect>::Time;

        #[derive(Queryable, Selectable)]
        #[diesel(table_name = $charges, check_for_backend($backend))]
        struct ChargeRow {
            id: Id,
            account_id: i64,
            amount: i64,
            amount_refunded: i64,
            currency: String,
            description: Option<String>,
            created_at: Time,
            authorization_id: Option<Id>,
            payment_method: String,
            failure_code: Option<String>,
        }

        impl ChargeRow {
            fn decode(self) -> QueryResult<Charge> {
                Ok(Charge {
                    id: D::decode_id(self.id)?,
                    account_id: self.account_id,
                    amount: self.amount,
                    amount_refunded: self.amount_refunded,
                    currency: self.currency,
                    description: self.description,
                    created_at: D::decode_time(self.created_at)?,
                    authorization_id: self.authorization_id.map(D::decode_id).transpose()?,
                    payment_method: self.payment_method,
                    failure_code: self.failure_code,
                })
            }
        }

        #[derive(Queryable, Selectable)]
        #[diesel(table_name = $refunds, check_for_backend($backend))]
        struct RefundRow {
            id: Id,
            charge_id: Id,
            account_id: i64,
            amount: i64,
            currency: String,
            created_at: Time,
        }

        impl RefundRow {
            fn decode(self) -> QueryResult<Refund> {
                Ok(Refund {
                    id: D::decode_id(self.id)?,
                    charge_id: D::decode_id(self.charge_id)?,
                    account_id: self.account_id,
                    amount: self.amount,
                    currency: self.currency,
                    created_at: D::decode_time(self.created_at)?,
                })
            }
        }

        impl $crate::store::ChargeStore for $conn {
            fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()> {
                D::cached(diesel::insert_into($charges::table).values((
                    $charges::id.eq(D::encode_id(charge.id)),
                    $charges::account_id.eq(charge.account_id),
                    $charges::amount.eq(charge.amount),
                    $charges::amount_refunded.eq(charge.amount_refunded),
                    $charges::currency.eq(&charge.currency),
                    $charges::description.eq(charge.description.as_deref()),
                    $charges::created_at.eq(D::encode_time(charge.created_at)),
                    $charges::authorization_id.eq(charge.authorization_id.map(D::encode_id)),
                    $charges::payment_method.eq(&charge.payment_method),
                    $charges::status.eq(charge.status()),
                    $charges::failure_code.eq(charge.failure_code.as_deref()),
                )))
                .execute(self)
                .inspect_err(D::note)
                .map(|_| ())
            }

            fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
                $charges::table
                    .filter($charges::id.eq(D::encode_id(id)))
                    .filter($charges::account_id.eq(account_id))
                    .select(ChargeRow::as_select())
                    .first(self)
                    .inspect_err(D::note)
                    .optional()?
                    .map(ChargeRow::decode)
                    .transpose()
            }

            fn list_charges(&mut self, account_id: i64, page: &Page) -> QueryResult<Vec<Charge>> {
                let mut query = $charges::table
                    .filter($charges::account_id.eq(account_id))
                    .select(ChargeRow::as_select())
                    .limit(page.limit + 1)
                    .into_boxed();
                if let Some(status) = page.status {
                    query = query.filter($charges::status.eq(status));
                }
                query = $crate::store::tables::keyset!(query, page.cursor, $charges);
                query
                    .load(self)
                    .inspect_err(D::note)?
                    .into_iter()
                    .map(ChargeRow::decode)
                    .collect()
            }

            fn set_description(
                &mut self,
                account_id: i64,
                id: Uuid,
                description: Option<&str>,
            ) -> QueryResult<Option<Charge>> {
                D::cached(
                    diesel::update(
                        $charges::table
                            .filter($charges::id.eq(D::encode_id(id)))
                            .filter($charges::account_id.eq(account_id)),
                    )
                    .set($charges::description.eq(description))
                    .returning(ChargeRow::as_returning()),
                )
                .get_result(self)
                .inspect_err(D::note)
                .optional()?
                .map(ChargeRow::decode)
                .transpose()
            }

            /// PostgreSQL (READ COMMITTED): a concurrent refund of the same
            /// charge makes the UPDATE wait for the row, then its condition
            /// is checked again on the row as that one left it. SQLite has
            /// one writer at a time (the transaction's `BEGIN IMMEDIATE`).
            /// Either way the conditional statement is all it takes.
            fn reserve_refund(
                &mut self,
                account_id: i64,
                charge_id: Uuid,
                amount: i64,
            ) -> QueryResult<RefundReservation> {
                let reserved: Option<ChargeRow> = D::cached(
                    diesel::update(
                        $charges::table
                            .filter($charges::id.eq(D::encode_id(charge_id)))
                            .filter($charges::account_id.eq(account_id))
                            .filter($charges::status.eq("succeeded"))
                            .filter(($charges::amount_refunded + amount).le($charges::amount)),
                    )
                    .set($charges::amount_refunded.eq($charges::amount_refunded + amount))
                    .returning(ChargeRow::as_returning()),
                )
                .get_result(self)
                .inspect_err(D::note)
                .optional()?;
                if let Some(charge) = reserved {
                    return Ok(RefundReservation::Reserved(charge.decode()?));
                }
                Ok(match self.find_charge(account_id, charge_id)? {
                    Some(charge) if charge.failure_code.is_some() => {
                        RefundReservation::ChargeFailed(charge)
                    }
                    Some(charge) => RefundReservation::NotEnoughLeft(charge),
                    None => RefundReservation::NoSuchCharge,
                })
            }

            fn insert_refund(&mut self, refund: &Refund) -> QueryResult<()> {
                D::cached(diesel::insert_into($refunds::table).values((
                    $refunds::id.eq(D::encode_id(refund.id)),
                    $refunds::charge_id.eq(D::encode_id(refund.charge_id)),
                    $refunds::account_id.eq(refund.account_id),
                    $refunds::amount.eq(refund.amount),
                    $refunds::currency.eq(&refund.currency),
                    $refunds::created_at.eq(D::encode_time(refund.created_at)),
                )))
                .execute(self)
                .inspect_err(D::note)
                .map(|_| ())
            }

            fn find_refund(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Refund>> {
                $refunds::table
                    .filter($refunds::id.eq(D::encode_id(id)))
                    .filter($refunds::account_id.eq(account_id))
                    .select(RefundRow::as_select())
                    .first(self)
                    .inspect_err(D::note)
                    .optional()?
                    .map(RefundRow::decode)
                    .transpose()
            }

            fn list_refunds(
                &mut self,
                account_id: i64,
                charge_id: Uuid,
                page: &Page,
            ) -> QueryResult<Vec<Refund>> {
                let mut query = $refunds::table
                    .filter($refunds::charge_id.eq(D::encode_id(charge_id)))
                    .filter($refunds::account_id.eq(account_id))
                    .select(RefundRow::as_select())
                    .limit(page.limit + 1)
                    .into_boxed();
                query = $crate::store::tables::keyset!(query, page.cursor, $refunds);
                query
                    .load(self)
                    .inspect_err(D::note)?
                    .into_iter()
                    .map(RefundRow::decode)
                    .collect()
            }
        }
    };
}

/// `impl AuthorizationStore for $conn`: the card network's
/// `authorizations` table.
macro_rules! authorization_store {
    ($conn:ty, $backend:ty, $auth:ident) => {
        use diesel::prelude::*;
        use uuid::Uuid;
        use $crate::store::tables::Dialect;
        use $crate::store::{Authorization, QueryResult};

        type D = $conn;
        type Id = <D as Dialect>::Id;
        type Time = <D as Dialect>::Time;

        #[derive(Queryable, Selectable)]
        #[diesel(table_name = $auth, check_for_backend($backend))]
        struct AuthorizationRow {
            id: Id,
            account_id: i64,
            amount: i64,
            currency: String,
            created_at: Time,
            voided_at: Option<Time>,
        }

        impl AuthorizationRow {
            fn decode(self) -> QueryResult<Authorization> {
                Ok(Authorization {
                    id: D::decode_id(self.id)?,
                    account_id: self.account_id,
                    amount: self.amount,
                    currency: self.currency,
                    created_at: D::decode_time(self.created_at)?,
                    voided_at: self.voided_at.map(D::decode_time).transpose()?,
                })
            }
        }

        impl $crate::store::AuthorizationStore for $conn {
            fn insert_authorization(&mut self, a: &Authorization) -> QueryResult<()> {
                diesel::insert_into($auth::table)
                    .values((
                        $auth::id.eq(D::encode_id(a.id)),
                        $auth::account_id.eq(a.account_id),
                        $auth::amount.eq(a.amount),
                        $auth::currency.eq(&a.currency),
                        $auth::created_at.eq(D::encode_time(a.created_at)),
                    ))
                    .execute(self)
                    .inspect_err(D::note)
                    .map(|_| ())
            }

            fn find_authorization(
                &mut self,
                account_id: i64,
                id: Uuid,
            ) -> QueryResult<Option<Authorization>> {
                $auth::table
                    .filter($auth::id.eq(D::encode_id(id)))
                    .filter($auth::account_id.eq(account_id))
                    .select(AuthorizationRow::as_select())
                    .first(self)
                    .inspect_err(D::note)
                    .optional()?
                    .map(AuthorizationRow::decode)
                    .transpose()
            }

            fn list_authorizations(
                &mut self,
                account_id: i64,
                limit: i64,
            ) -> QueryResult<Vec<Authorization>> {
                $auth::table
                    .filter($auth::account_id.eq(account_id))
                    .order(($auth::created_at.desc(), $auth::id.desc()))
                    .limit(limit)
                    .select(AuthorizationRow::as_select())
                    .load(self)
                    .inspect_err(D::note)?
                    .into_iter()
                    .map(AuthorizationRow::decode)
                    .collect()
            }

            /// A voided one keeps its first time.
            fn void_authorization(
                &mut self,
                account_id: i64,
                id: Uuid,
            ) -> QueryResult<Option<Authorization>> {
                diesel::update(
                    $auth::table
                        .filter($auth::id.eq(D::encode_id(id)))
                        .filter($auth::account_id.eq(account_id))
                        .filter($auth::voided_at.is_null()),
                )
                .set($auth::voided_at.eq(D::clock().nullable()))
                .execute(self)
                .inspect_err(D::note)?;
                self.find_authorization(account_id, id)
            }
        }
    };
}

/// Every `*Store` impl of the tables written once, for `$conn` (rows
/// checked against `$backend`) over `$schema`, the backend's `diesel::table!`
/// module by its full path: each macro given the tables it reads, as the
/// protocol crate's `key_store!` is given its key table. `$id_sql` is a UUID
/// column's SQL type there; `$lock` how the sender's claim locks the
/// endpoints it picks (`delivery_store!`).
macro_rules! table_stores {
    ($conn:ty, $backend:ty, $id_sql:ty, $schema:path, $($lock:tt)*) => {
        mod accounts {
            use $schema as schema;
            use schema::{accounts, in_process_network_keys};
            $crate::store::tables::account_store!($conn, accounts, in_process_network_keys);
        }
        mod charges {
            use $schema as schema;
            use schema::{charges, refunds};
            $crate::store::tables::charge_store!($conn, $backend, charges, refunds);
        }
        mod deliveries {
            use $schema as schema;
            use schema::{events, webhook_attempts, webhook_deliveries, webhook_endpoints};
            $crate::store::deliveries::delivery_store!(
                $conn,
                events,
                webhook_attempts,
                webhook_deliveries,
                webhook_endpoints,
                $($lock)*
            );
        }
        mod network {
            use $schema as schema;
            use schema::authorizations;
            $crate::store::tables::authorization_store!($conn, $backend, authorizations);
        }
        mod webhooks {
            use $schema as schema;
            use schema::{events, webhook_attempts, webhook_deliveries, webhook_endpoints};
            $crate::store::webhooks::webhook_store!(
                $conn,
                $backend,
                $id_sql,
                events,
                webhook_attempts,
                webhook_deliveries,
                webhook_endpoints
            );
        }
    };
}

pub(super) use {account_store, authorization_store, charge_store, keyset, table_stores};
