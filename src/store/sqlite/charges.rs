//! The `charges` and `refunds` tables on SQLite.

use diesel::prelude::*;
use diesel::sqlite::SqliteConnection;
use uuid::Uuid;

use super::schema::{charges, refunds};
use super::{parse_time, parse_uuid};
use crate::store::{Charge, ChargeStore, QueryResult, Refund, RefundReservation, time_text};

#[derive(Queryable, Selectable)]
#[diesel(table_name = charges, check_for_backend(diesel::sqlite::Sqlite))]
struct ChargeRow {
    id: String,
    account_id: i64,
    amount: i64,
    amount_refunded: i64,
    currency: String,
    description: Option<String>,
    created_at: String,
    authorization_id: Option<String>,
}

impl ChargeRow {
    fn decode(self) -> QueryResult<Charge> {
        Ok(Charge {
            id: parse_uuid(&self.id)?,
            account_id: self.account_id,
            amount: self.amount,
            amount_refunded: self.amount_refunded,
            currency: self.currency,
            description: self.description,
            created_at: parse_time(&self.created_at)?,
            authorization_id: self
                .authorization_id
                .as_deref()
                .map(parse_uuid)
                .transpose()?,
        })
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = refunds, check_for_backend(diesel::sqlite::Sqlite))]
struct RefundRow {
    id: String,
    charge_id: String,
    account_id: i64,
    amount: i64,
    currency: String,
    created_at: String,
}

impl RefundRow {
    fn decode(self) -> QueryResult<Refund> {
        Ok(Refund {
            id: parse_uuid(&self.id)?,
            charge_id: parse_uuid(&self.charge_id)?,
            account_id: self.account_id,
            amount: self.amount,
            currency: self.currency,
            created_at: parse_time(&self.created_at)?,
        })
    }
}

impl ChargeStore for SqliteConnection {
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()> {
        diesel::insert_into(charges::table)
            .values((
                charges::id.eq(charge.id.to_string()),
                charges::account_id.eq(charge.account_id),
                charges::amount.eq(charge.amount),
                charges::amount_refunded.eq(charge.amount_refunded),
                charges::currency.eq(&charge.currency),
                charges::description.eq(charge.description.as_deref()),
                charges::created_at.eq(time_text(charge.created_at)),
                charges::authorization_id.eq(charge.authorization_id.map(|id| id.to_string())),
            ))
            .execute(self)
            .map(|_| ())
    }

    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
        charges::table
            .filter(charges::id.eq(id.to_string()))
            .filter(charges::account_id.eq(account_id))
            .select(ChargeRow::as_select())
            .first(self)
            .optional()?
            .map(ChargeRow::decode)
            .transpose()
    }

    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>> {
        charges::table
            .filter(charges::account_id.eq(account_id))
            .order((charges::created_at.desc(), charges::id.desc()))
            .limit(limit)
            .select(ChargeRow::as_select())
            .load(self)?
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
        diesel::update(
            charges::table
                .filter(charges::id.eq(id.to_string()))
                .filter(charges::account_id.eq(account_id)),
        )
        .set(charges::description.eq(description))
        .returning(ChargeRow::as_returning())
        .get_result(self)
        .optional()?
        .map(ChargeRow::decode)
        .transpose()
    }

    /// SQLite has one writer at a time (the transaction's `BEGIN
    /// IMMEDIATE`), so the conditional statement is all it takes.
    fn reserve_refund(
        &mut self,
        account_id: i64,
        charge_id: Uuid,
        amount: i64,
    ) -> QueryResult<RefundReservation> {
        let reserved: Option<ChargeRow> = diesel::update(
            charges::table
                .filter(charges::id.eq(charge_id.to_string()))
                .filter(charges::account_id.eq(account_id))
                .filter((charges::amount_refunded + amount).le(charges::amount)),
        )
        .set(charges::amount_refunded.eq(charges::amount_refunded + amount))
        .returning(ChargeRow::as_returning())
        .get_result(self)
        .optional()?;
        if let Some(charge) = reserved {
            return Ok(RefundReservation::Reserved(charge.decode()?));
        }
        Ok(match self.find_charge(account_id, charge_id)? {
            Some(charge) => RefundReservation::NotEnoughLeft(charge),
            None => RefundReservation::NoSuchCharge,
        })
    }

    fn insert_refund(&mut self, refund: &Refund) -> QueryResult<()> {
        diesel::insert_into(refunds::table)
            .values((
                refunds::id.eq(refund.id.to_string()),
                refunds::charge_id.eq(refund.charge_id.to_string()),
                refunds::account_id.eq(refund.account_id),
                refunds::amount.eq(refund.amount),
                refunds::currency.eq(&refund.currency),
                refunds::created_at.eq(time_text(refund.created_at)),
            ))
            .execute(self)
            .map(|_| ())
    }

    fn list_refunds(&mut self, account_id: i64, charge_id: Uuid) -> QueryResult<Vec<Refund>> {
        refunds::table
            .filter(refunds::charge_id.eq(charge_id.to_string()))
            .filter(refunds::account_id.eq(account_id))
            .order((refunds::created_at.desc(), refunds::id.desc()))
            .select(RefundRow::as_select())
            .load(self)?
            .into_iter()
            .map(RefundRow::decode)
            .collect()
    }
}
