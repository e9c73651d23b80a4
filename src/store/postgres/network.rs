//! The card network's `authorizations` table on PostgreSQL:
//! [`authorization_store`]'s queries over `schema.rs`.
//!
//! [`authorization_store`]: crate::store::tables

use diesel::pg::{Pg, PgConnection};
use diesel::prelude::*;
use uuid::Uuid;

use super::schema::authorizations as auth;
use super::{Id, Time, clock, decode_id, decode_time, encode_id, encode_time, note};
use crate::store::{Authorization, QueryResult, tables};

tables::authorization_store!(PgConnection, Pg);
