//! The `charges` and `refunds` tables on PostgreSQL: [`charge_store`]'s
//! queries over `schema.rs`.
//!
//! [`charge_store`]: crate::store::tables

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use uuid::Uuid;

use super::schema::{charges, refunds};
use super::{Id, Time, cached, decode_id, decode_time, encode_id, encode_time, note};
use crate::store::{Charge, QueryResult, Refund, RefundReservation, tables};

tables::charge_store!(PgConnection, Pg);
