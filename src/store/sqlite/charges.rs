//! The `charges` and `refunds` tables on SQLite: [`charge_store`]'s queries
//! over [`schema`](super::schema).
//!
//! [`charge_store`]: crate::store::tables

use diesel::prelude::*;
use diesel::sqlite::{Sqlite, SqliteConnection};
use uuid::Uuid;

use super::schema::{charges, refunds};
use super::{Id, Time, cached, decode_id, decode_time, encode_id, encode_time, note};
use crate::store::{Charge, QueryResult, Refund, RefundReservation, tables};

tables::charge_store!(SqliteConnection, Sqlite);
