//! The protocol's pure parts, table by table: `decide` and the retry loop.

use diesel::result::{DatabaseErrorInformation, DatabaseErrorKind, Error as DieselError};

use crate::decide::{Decision, Read, decide};
use crate::steps::{MAX_ATTEMPTS, with_transient_retries};
use crate::{Error, Fingerprint, KeyRecord, KeyState, Outcome, SavedResponse};

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
fn db_error(kind: DatabaseErrorKind, message: &'static str) -> Error {
    Error::Database(DieselError::DatabaseError(kind, Box::new(Info(message))))
}

/// Every (row state, fingerprint, where it was read) and what follows.
/// The design is no input: atomic and key-first differ only in whether a
/// concurrent request gets to see an in-progress row at all.
#[test]
fn every_key_state_fingerprint_and_read_decides_one_outcome() {
    use Read::{AfterLostClaim as Lost, FastPath as Fast};
    let mine = Fingerprint::of("POST", "/charges", &serde_json::json!({"amount": 1}));
    let response = SavedResponse {
        status: 201,
        headers: [("location".to_owned(), "/charges/1".to_owned())].into(),
        body: serde_json::json!({"id": 1}),
    };
    let row = |state: &KeyState, same: bool| KeyRecord {
        fingerprint: if same {
            mine.as_str().to_owned()
        } else {
            "sha256:other".to_owned()
        },
        state: state.clone(),
    };
    let live = KeyState::InProgress { lease_live: true };
    let over = KeyState::InProgress { lease_live: false };
    let done = KeyState::Completed(response.clone());
    let claim = || Decision::Claim;
    let answer = Decision::Answer;
    #[rustfmt::skip]
    let table: Vec<(Option<&KeyState>, bool, Read, Decision)> = vec![
        // state         same request  read   decision
        (None,           true,  Fast, claim()),
        (None,           true,  Lost, answer(Outcome::InFlight)),
        (Some(&live),    true,  Fast, answer(Outcome::InFlight)),
        (Some(&live),    true,  Lost, answer(Outcome::InFlight)),
        (Some(&live),    false, Fast, answer(Outcome::Mismatch)),
        (Some(&live),    false, Lost, answer(Outcome::Mismatch)),
        (Some(&over),    true,  Fast, claim()),
        (Some(&over),    true,  Lost, answer(Outcome::InFlight)),
        (Some(&over),    false, Fast, answer(Outcome::Mismatch)),
        (Some(&over),    false, Lost, answer(Outcome::Mismatch)),
        (Some(&done),    true,  Fast, answer(Outcome::Replayed(response.clone()))),
        (Some(&done),    true,  Lost, answer(Outcome::Replayed(response.clone()))),
        (Some(&done),    false, Fast, answer(Outcome::Mismatch)),
        (Some(&done),    false, Lost, answer(Outcome::Mismatch)),
    ];
    for (state, same, read, expected) in table {
        let got = decide(state.map(|s| row(s, same)), mine.as_str(), read);
        assert_eq!(
            got, expected,
            "{state:?}, same request: {same}, read {read:?}"
        );
    }
}

#[test]
fn serialization_failures_and_deadlocks_are_retried_a_bounded_number_of_times() {
    let mut calls = 0;
    let result = with_transient_retries(|| {
        calls += 1;
        match calls {
            1 => Err(db_error(
                DatabaseErrorKind::SerializationFailure,
                "could not serialize access",
            )),
            2 => Err(db_error(DatabaseErrorKind::Unknown, "deadlock detected")),
            _ => Ok(calls),
        }
    });
    assert_eq!(result.unwrap(), 3);

    let mut calls = 0;
    let result: Result<(), _> = with_transient_retries(|| {
        calls += 1;
        Err(db_error(DatabaseErrorKind::SerializationFailure, "again"))
    });
    assert!(result.is_err());
    assert_eq!(calls, MAX_ATTEMPTS);
}

#[test]
fn other_errors_are_not_retried() {
    let mut calls = 0;
    let result: Result<(), _> = with_transient_retries(|| {
        calls += 1;
        Err(db_error(
            DatabaseErrorKind::UniqueViolation,
            "duplicate key",
        ))
    });
    assert!(result.is_err());
    assert_eq!(calls, 1);
}
