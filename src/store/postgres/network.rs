//! The card network's `authorizations` table on PostgreSQL:
//! [`authorization_store`]'s queries over `schema.rs`.
//!
//! [`authorization_store`]: crate::store::tables

use diesel::pg::{Pg, PgConnection};

use crate::store::tables;

tables::authorization_store!(PgConnection, Pg);
