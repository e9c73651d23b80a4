//! What the caller hands the protocol: the [`Operation`] that runs under a
//! key, and the [`Connections`] it runs on.

use std::time::Instant;

use diesel::result::Error as DieselError;

use crate::key_store::{KeyStore, SavedResponse};
use crate::outcome::Error;

/// What runs under a key: its writes, on the transaction it is handed, and
/// the response to store and send. `Tx` is the transaction type the
/// protocol runs on; an operation asks of it only what its own writes need
/// (`impl<Tx: OrderStore + ?Sized> Operation<Tx> for …`).
///
/// An operation may first make one call to another service that no
/// rollback undoes (a card network's authorization): it names the service
/// in [`foreign_step`](Operation::foreign_step) and makes the call in
/// [`call`](Operation::call), and then it runs in phases, the call never
/// inside a transaction nor holding a connection.
pub trait Operation<Tx: ?Sized> {
    /// Runs on the transaction that holds the key. Whatever it answers is
    /// stored and replayed, a 4xx included: once the operation has run, the
    /// key has its answer. An `Err` rolls everything back, the key row
    /// included (key-first: releases the key), and nothing is stored.
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, Error>;

    /// The response, if it is known before anything is written and cannot
    /// depend on what the database holds (a new order's 201: its id and
    /// time are chosen first; not a refund's, which may find too little
    /// left): then the key row is written completed in the statement that
    /// registers it, one statement fewer. [`run`](Operation::run) must
    /// answer exactly it.
    fn known_response(&self) -> Option<&SavedResponse> {
        None
    }

    /// The other service this operation calls first, by name, if any. The
    /// name is kept in the key row: only a worker that calls the same
    /// service finishes the key if this one dies.
    fn foreign_step(&self) -> Option<&str> {
        None
    }

    /// The call to that service, under a key derived from the client's, so
    /// that asking again is a replay there. An `Err` stores nothing.
    fn call(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Once the operation's answer is stored: if that answer means the
    /// call's effect will never be used (an order refused because its
    /// account was closed meanwhile), undo it there, with a compensating
    /// call that is itself idempotent.
    fn settle(&mut self, _stored: &SavedResponse) -> Result<(), Error> {
        Ok(())
    }
}

/// Any closure over the transaction is an operation whose response is not
/// known in advance and that calls no other service.
impl<Tx: ?Sized, F: FnMut(&mut Tx) -> Result<SavedResponse, Error>> Operation<Tx> for F {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, Error> {
        self(tx)
    }
}

/// Where the protocol gets a connection for each of its transactions, and
/// gives it back after: one held for the whole request would sit idle while
/// a foreign call runs. [`PoolConnections`](crate::PoolConnections) is one
/// over an r2d2 pool.
pub trait Connections {
    /// The connection: the key table's store, and whatever the operations
    /// run on it write.
    type Store: KeyStore + ?Sized;

    /// Runs `work` on a connection, given back when it returns.
    fn run<T>(
        &mut self,
        work: impl FnOnce(&mut Self::Store) -> Result<T, Error>,
    ) -> Result<T, Error>;

    /// Runs `work` in one transaction on `store`: committed if it returns
    /// `Ok`, rolled back otherwise (the error comes back as it was).
    /// PostgreSQL: at READ COMMITTED, where a second insert of the same key
    /// waits on the unique index (at REPEATABLE READ it would fail
    /// instead). SQLite: `BEGIN IMMEDIATE`, so a concurrent writer waits
    /// for the whole transaction rather than failing halfway.
    fn transaction<T, E: From<DieselError>>(
        store: &mut Self::Store,
        work: impl FnOnce(&mut Self::Store) -> Result<T, E>,
    ) -> Result<T, E>;

    /// When the caller stops waiting (the request's deadline): a duplicate
    /// waiting for its first request gives up before it.
    fn until(&self) -> Instant;
}
