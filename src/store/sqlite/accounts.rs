//! The `accounts` table on SQLite: [`account_store`]'s queries over
//! [`schema`](super::schema).
//!
//! [`account_store`]: crate::store::tables

use diesel::sqlite::SqliteConnection;

use crate::store::tables;

tables::account_store!(SqliteConnection);
