//! What a database error means to the application: the pool (a lost
//! connection is never handed out again), the webhook sender and the HTTP
//! errors. Diesel's errors only: no backend, no table. (The protocol crate
//! retries its own transient errors.)

use diesel::result::{DatabaseErrorKind, Error as DieselError};

/// What a database error means for the request that met it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The connection is gone (a failover, `pg_terminate_backend`, a
    /// restart) or reached a server that refuses writes (a standby, a
    /// demoted primary): it must not be used again; the client retries.
    ConnectionLost,
    /// The database aborted the transaction to resolve a conflict
    /// (serialization failure, deadlock): the same transaction may simply
    /// run again.
    Transient,
    /// PostgreSQL waited for a lock longer than `lock_timeout` (55P03): the
    /// statement was cancelled; a concurrent transaction holds what it needs.
    LockTimeout,
    /// The database could not do it in time: SQLite's write lock stayed
    /// taken past the busy timeout, or a statement ran past
    /// `statement_timeout`. Nothing was done; the client retries.
    Busy,
    /// Anything else: a bug or a broken invariant.
    Other,
}

/// Classifies `error` (see [`Failure`]). Diesel names some kinds; for
/// SQLSTATEs it has no kind for (57P01 admin shutdown, 57P02/57P03 crash
/// or cannot connect now, 40P01 deadlock) the servers' messages are stable.
pub fn classify(error: &DieselError) -> Failure {
    let DieselError::DatabaseError(kind, info) = error else {
        return Failure::Other;
    };
    let message = info.message();
    match kind {
        DatabaseErrorKind::ClosedConnection
        | DatabaseErrorKind::UnableToSendCommand
        | DatabaseErrorKind::ReadOnlyTransaction => Failure::ConnectionLost,
        DatabaseErrorKind::SerializationFailure => Failure::Transient,
        _ if message.starts_with("terminating connection")
            || message.starts_with("the database system is")
            || message.contains("read-only transaction") =>
        {
            Failure::ConnectionLost
        }
        _ if message.starts_with("deadlock detected") => Failure::Transient,
        _ if message.starts_with("canceling statement due to lock timeout") => Failure::LockTimeout,
        _ if message.starts_with("canceling statement due to statement timeout")
            || message.starts_with("database is locked") =>
        {
            Failure::Busy
        }
        _ => Failure::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::DatabaseErrorInformation;

    struct Info(&'static str);

    impl DatabaseErrorInformation for Info {
        fn message(&self) -> &str {
            self.0
        }
        fn details(&self) -> Option<&str> {
            None
        }
        fn hint(&self) -> Option<&str> {
            None
        }
        fn table_name(&self) -> Option<&str> {
            None
        }
        fn column_name(&self) -> Option<&str> {
            None
        }
        fn constraint_name(&self) -> Option<&str> {
            None
        }
        fn statement_position(&self) -> Option<i32> {
            None
        }
    }

    /// A database error as a backend would report it.
    fn error(kind: DatabaseErrorKind, message: &'static str) -> DieselError {
        DieselError::DatabaseError(kind, Box::new(Info(message)))
    }

    #[test]
    fn every_database_error_is_classified_once() {
        use DatabaseErrorKind as K;
        #[rustfmt::skip]
        let table = [
            (error(K::ClosedConnection, "server closed the connection"), Failure::ConnectionLost),
            (error(K::UnableToSendCommand, "no connection to the server"), Failure::ConnectionLost),
            (error(K::ReadOnlyTransaction, "cannot execute INSERT"), Failure::ConnectionLost),
            (error(K::Unknown, "terminating connection due to administrator command"), Failure::ConnectionLost),
            (error(K::Unknown, "the database system is shutting down"), Failure::ConnectionLost),
            (error(K::Unknown, "cannot execute INSERT in a read-only transaction"), Failure::ConnectionLost),
            (error(K::SerializationFailure, "could not serialize access"), Failure::Transient),
            (error(K::Unknown, "deadlock detected"), Failure::Transient),
            (error(K::Unknown, "database is locked"), Failure::Busy),
            (error(K::Unknown, "canceling statement due to statement timeout"), Failure::Busy),
            (error(K::Unknown, "canceling statement due to lock timeout"), Failure::LockTimeout),
            (error(K::Unknown, "terminating connection due to idle-in-transaction timeout"), Failure::ConnectionLost),
            (error(K::UniqueViolation, "duplicate key value"), Failure::Other),
            (error(K::CheckViolation, "violates check constraint"), Failure::Other),
            (DieselError::NotFound, Failure::Other),
        ];
        for (e, expected) in table {
            assert_eq!(classify(&e), expected, "{e}");
        }
    }
}
