//! The `accounts` table on PostgreSQL: [`account_store`]'s queries over
//! `schema.rs`.
//!
//! [`account_store`]: crate::store::tables

use diesel::pg::PgConnection;

use crate::store::tables;

tables::account_store!(PgConnection);
