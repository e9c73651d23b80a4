//! The `charges` and `refunds` tables on PostgreSQL: [`charge_store`]'s
//! queries over `schema.rs`.
//!
//! [`charge_store`]: crate::store::tables

use diesel::pg::{Pg, PgConnection};

use crate::store::tables;

tables::charge_store!(PgConnection, Pg);
