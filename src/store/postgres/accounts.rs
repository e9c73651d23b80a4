//! The `accounts` table on PostgreSQL: [`account_store`]'s queries over
//! `schema.rs`.
//!
//! [`account_store`]: crate::store::tables

use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::sql_types::Bool;

use super::schema::accounts;
use super::{Time, clock, decode_time, note};
use crate::store::{AccountRecord, QueryResult, tables, time_text};

tables::account_store!(PgConnection);
