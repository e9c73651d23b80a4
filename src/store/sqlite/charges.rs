//! The `charges` and `refunds` tables on SQLite: [`charge_store`]'s queries
//! over [`schema`](super::schema).
//!
//! [`charge_store`]: crate::store::tables

use diesel::sqlite::{Sqlite, SqliteConnection};

use crate::store::tables;

tables::charge_store!(SqliteConnection, Sqlite);
