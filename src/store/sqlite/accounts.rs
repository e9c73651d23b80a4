//! The `accounts` table on SQLite: [`account_store`]'s queries over
//! [`schema`](super::schema).
//!
//! [`account_store`]: crate::store::tables

use diesel::prelude::*;
use diesel::sql_types::Bool;
use diesel::sqlite::SqliteConnection;

use super::schema::accounts;
use super::{Time, clock, decode_time, note};
use crate::store::{AccountRecord, QueryResult, tables, time_text};

tables::account_store!(SqliteConnection);
