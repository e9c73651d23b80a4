//! The inbox: the events a receiver has acted on, one row per
//! `(source, event_id)` under the table's primary key, written in the same
//! transaction as the receiver's own effect. It is the idempotency key seen
//! from the other end, and the same construction as the atomic design:
//!
//! ```text
//! BEGIN
//!   INSERT INTO webhook_inbox … ON CONFLICT (source, event_id) DO NOTHING
//!     a row   → Received::First: do the effect now, on this transaction
//!     no row  → Received::Duplicate: do nothing (and still answer 2xx)
//!   the effect (UPDATE orders SET paid …)
//! COMMIT     the event's row and its effect, together or not at all
//! ```
//!
//! A concurrent delivery of the same event waits on the first one's
//! uncommitted index entry (PostgreSQL at READ COMMITTED; SQLite's write
//! lock under `BEGIN IMMEDIATE`), then sees `Duplicate` once the first
//! commits, or `First` if it rolled back: the effect happens once either
//! way. The table is `sql/postgres_inbox.sql` or `sql/sqlite_inbox.sql`
//! (`webhook::POSTGRES_INBOX`, `webhook::SQLITE_INBOX`).

use std::time::Duration;

use diesel::result::QueryResult;

/// What [`receive`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Recorded now, by this transaction: do the effect in it.
    First,
    /// Already recorded by a committed transaction: its effect is done. Do
    /// nothing, and answer 2xx so that the sender stops retrying.
    Duplicate,
}

/// The inbox table on a backend (implemented for Diesel's `PgConnection`
/// and `SqliteConnection`); call [`receive`] and [`purge`].
pub trait InboxStore {
    /// Inserts the event's row unless it is there: whether this inserted it.
    fn record_event(&mut self, source: &str, event_id: &str) -> QueryResult<bool>;

    /// Deletes the rows received more than `older_than` ago.
    fn purge_events(&mut self, older_than: Duration) -> QueryResult<usize>;
}

/// Records the event `event_id` from `source` (the sender, if you receive
/// from several) on `tx`, which must be the transaction of the effect:
/// [`Received::First`] to do it now, [`Received::Duplicate`] to do nothing.
/// Verify the delivery's signature first
/// ([`verify_request`](super::verify_request)): a forged id must not take
/// a real event's place.
///
/// On PostgreSQL run it at READ COMMITTED (as Diesel's `transaction` and
/// [`Connections::transaction`](crate::Connections::transaction) do): at
/// REPEATABLE READ a concurrent delivery fails with a serialization error
/// instead of waiting. On SQLite use `immediate_transaction`.
pub fn receive<C: InboxStore + ?Sized>(
    tx: &mut C,
    source: &str,
    event_id: &str,
) -> QueryResult<Received> {
    Ok(match tx.record_event(source, event_id)? {
        true => Received::First,
        false => Received::Duplicate,
    })
}

/// Deletes the inbox rows received more than `older_than` ago; run it now
/// and then (daily). Keep rows longer than the sender retries one event
/// (and re-sends it by hand): a redelivery that comes after its row is gone
/// is a first delivery again. A captured delivery replayed later is no
/// concern here: its timestamp is refused past the tolerance (5 minutes).
pub fn purge<C: InboxStore + ?Sized>(conn: &mut C, older_than: Duration) -> QueryResult<usize> {
    conn.purge_events(older_than)
}

/// `impl InboxStore for $conn` over its table `$inbox` (the module of
/// `diesel::table!`), its clock taken from `$conn`'s `Dialect`, as the key
/// table's statements are (`key_table.rs`).
macro_rules! inbox_store {
    ($conn:ty, $inbox:ident) => {
        const _: () = {
            use diesel::prelude::*;

            use $crate::key_table::Dialect;
            use $crate::webhook::inbox::InboxStore;

            type D = $conn;

            impl InboxStore for $conn {
                fn record_event(
                    &mut self,
                    source: &str,
                    event_id: &str,
                ) -> diesel::result::QueryResult<bool> {
                    let inserted: Option<String> = D::cached(
                        diesel::insert_into($inbox::table)
                            .values((
                                $inbox::source.eq(source),
                                $inbox::event_id.eq(event_id),
                                $inbox::received_at.eq(D::clock()),
                            ))
                            .on_conflict(($inbox::source, $inbox::event_id))
                            .do_nothing()
                            .returning($inbox::event_id),
                    )
                    .get_result(self)
                    .optional()?;
                    Ok(inserted.is_some())
                }

                fn purge_events(
                    &mut self,
                    older_than: std::time::Duration,
                ) -> diesel::result::QueryResult<usize> {
                    diesel::delete($inbox::table.filter($inbox::received_at.lt(D::ago(older_than))))
                        .execute(self)
                }
            }
        };
    };
}

pub(crate) use inbox_store;
