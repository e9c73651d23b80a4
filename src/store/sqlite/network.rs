//! The card network's `authorizations` table on SQLite:
//! [`authorization_store`]'s queries over [`schema`](super::schema).
//!
//! [`authorization_store`]: crate::store::tables

use diesel::prelude::*;
use diesel::sqlite::{Sqlite, SqliteConnection};
use uuid::Uuid;

use super::schema::authorizations as auth;
use super::{Id, Time, clock, decode_id, decode_time, encode_id, encode_time, note};
use crate::store::{Authorization, QueryResult, tables};

tables::authorization_store!(SqliteConnection, Sqlite);
