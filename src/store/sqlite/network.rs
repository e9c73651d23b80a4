//! The card network's `authorizations` table on SQLite:
//! [`authorization_store`]'s queries over [`schema`](super::schema).
//!
//! [`authorization_store`]: crate::store::tables

use diesel::sqlite::{Sqlite, SqliteConnection};

use crate::store::tables;

tables::authorization_store!(SqliteConnection, Sqlite);
