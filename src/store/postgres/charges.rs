//! The `charges` and `refunds` tables on PostgreSQL.

use chrono::{DateTime, Utc};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use uuid::Uuid;

use super::{Prepared, note};
use crate::store::postgres::schema::{charges, refunds};
use crate::store::{Charge, ChargeStore, QueryResult, Refund, RefundReservation};

#[derive(Queryable, Selectable)]
#[diesel(table_name = charges, check_for_backend(diesel::pg::Pg))]
struct ChargeRow {
    id: Uuid,
    account_id: i64,
    amount: i64,
    amount_refunded: i64,
    currency: String,
    description: Option<String>,
    created_at: DateTime<Utc>,
    authorization_id: Option<Uuid>,
}

impl From<ChargeRow> for Charge {
    fn from(r: ChargeRow) -> Charge {
        Charge {
            id: r.id,
            account_id: r.account_id,
            amount: r.amount,
            amount_refunded: r.amount_refunded,
            currency: r.currency,
            description: r.description,
            created_at: r.created_at,
            authorization_id: r.authorization_id,
        }
    }
}

#[derive(Queryable, Selectable)]
#[diesel(table_name = refunds, check_for_backend(diesel::pg::Pg))]
struct RefundRow {
    id: Uuid,
    charge_id: Uuid,
    account_id: i64,
    amount: i64,
    currency: String,
    created_at: DateTime<Utc>,
}

impl From<RefundRow> for Refund {
    fn from(r: RefundRow) -> Refund {
        Refund {
            id: r.id,
            charge_id: r.charge_id,
            account_id: r.account_id,
            amount: r.amount,
            currency: r.currency,
            created_at: r.created_at,
        }
    }
}

impl ChargeStore for PgConnection {
    fn insert_charge(&mut self, charge: &Charge) -> QueryResult<()> {
        Prepared(diesel::insert_into(charges::table).values((
            charges::id.eq(charge.id),
            charges::account_id.eq(charge.account_id),
            charges::amount.eq(charge.amount),
            charges::amount_refunded.eq(charge.amount_refunded),
            charges::currency.eq(&charge.currency),
            charges::description.eq(charge.description.as_deref()),
            charges::created_at.eq(charge.created_at),
            charges::authorization_id.eq(charge.authorization_id),
        )))
        .execute(self)
        .inspect_err(note)
        .map(|_| ())
    }

    fn find_charge(&mut self, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
        charges::table
            .filter(charges::id.eq(id))
            .filter(charges::account_id.eq(account_id))
            .select(ChargeRow::as_select())
            .first(self)
            .inspect_err(note)
            .optional()
            .map(|row| row.map(Charge::from))
    }

    fn list_charges(&mut self, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>> {
        let rows = charges::table
            .filter(charges::account_id.eq(account_id))
            .order((charges::created_at.desc(), charges::id.desc()))
            .limit(limit)
            .select(ChargeRow::as_select())
            .load(self)
            .inspect_err(note)?;
        Ok(rows.into_iter().map(Charge::from).collect())
    }

    fn set_description(
        &mut self,
        account_id: i64,
        id: Uuid,
        description: Option<&str>,
    ) -> QueryResult<Option<Charge>> {
        Prepared(
            diesel::update(
                charges::table
                    .filter(charges::id.eq(id))
                    .filter(charges::account_id.eq(account_id)),
            )
            .set(charges::description.eq(description))
            .returning(ChargeRow::as_returning()),
        )
        .get_result(self)
        .inspect_err(note)
        .optional()
        .map(|row| row.map(Charge::from))
    }

    fn reserve_refund(
        &mut self,
        account_id: i64,
        charge_id: Uuid,
        amount: i64,
    ) -> QueryResult<RefundReservation> {
        let this_charge = charges::table
            .filter(charges::id.eq(charge_id))
            .filter(charges::account_id.eq(account_id));
        // READ COMMITTED: a concurrent refund of the same charge makes this
        // wait for the row, then the condition is checked again on the row
        // as that one left it.
        let reserved: Option<ChargeRow> = Prepared(
            diesel::update(
                this_charge.filter((charges::amount_refunded + amount).le(charges::amount)),
            )
            .set(charges::amount_refunded.eq(charges::amount_refunded + amount))
            .returning(ChargeRow::as_returning()),
        )
        .get_result(self)
        .inspect_err(note)
        .optional()?;
        if let Some(charge) = reserved {
            return Ok(RefundReservation::Reserved(charge.into()));
        }
        Ok(match self.find_charge(account_id, charge_id)? {
            Some(charge) => RefundReservation::NotEnoughLeft(charge),
            None => RefundReservation::NoSuchCharge,
        })
    }

    fn insert_refund(&mut self, refund: &Refund) -> QueryResult<()> {
        Prepared(diesel::insert_into(refunds::table).values((
            refunds::id.eq(refund.id),
            refunds::charge_id.eq(refund.charge_id),
            refunds::account_id.eq(refund.account_id),
            refunds::amount.eq(refund.amount),
            refunds::currency.eq(&refund.currency),
            refunds::created_at.eq(refund.created_at),
        )))
        .execute(self)
        .inspect_err(note)
        .map(|_| ())
    }

    fn list_refunds(&mut self, account_id: i64, charge_id: Uuid) -> QueryResult<Vec<Refund>> {
        let rows = refunds::table
            .filter(refunds::charge_id.eq(charge_id))
            .filter(refunds::account_id.eq(account_id))
            .order((refunds::created_at.desc(), refunds::id.desc()))
            .select(RefundRow::as_select())
            .load(self)
            .inspect_err(note)?;
        Ok(rows.into_iter().map(Refund::from).collect())
    }
}
