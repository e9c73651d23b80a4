//! [`Connections`] over an r2d2 pool of Diesel connections (feature
//! `r2d2`): one connection checked out for each of the protocol's
//! transactions and given back after, so that none is held while a foreign
//! step runs.

use std::time::Instant;

use diesel::r2d2::{ConnectionManager, Pool, R2D2Connection};
use diesel::result::Error as DieselError;

use crate::key_store::KeyStore;
use crate::key_table::Backend;
use crate::operation::Connections;
use crate::outcome::Error;

/// A request's connections from `pool`, until its deadline.
pub struct PoolConnections<'a, C: R2D2Connection + 'static> {
    pool: &'a Pool<ConnectionManager<C>>,
    until: Instant,
}

impl<'a, C: R2D2Connection + 'static> PoolConnections<'a, C> {
    /// `until`: when the request's caller stops waiting (a duplicate
    /// waiting for its first request in the phases gives up before it).
    pub fn new(pool: &'a Pool<ConnectionManager<C>>, until: Instant) -> Self {
        PoolConnections { pool, until }
    }
}

/// For Diesel's `PgConnection` and `SqliteConnection`.
impl<C: R2D2Connection + KeyStore + Backend + 'static> Connections for PoolConnections<'_, C> {
    type Store = C;

    fn run<T>(&mut self, work: impl FnOnce(&mut C) -> Result<T, Error>) -> Result<T, Error> {
        let mut conn = self.pool.get().map_err(|e| Error::Connection(e.into()))?;
        work(&mut conn)
    }

    fn transaction<T, E: From<DieselError>>(
        store: &mut C,
        work: impl FnOnce(&mut C) -> Result<T, E>,
    ) -> Result<T, E> {
        store.key_transaction(work)
    }

    fn until(&self) -> Instant {
        self.until
    }
}
