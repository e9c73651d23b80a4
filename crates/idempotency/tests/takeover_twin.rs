//! The takeover rule's Rust twin (`TakeoverRow::may_be_taken_over`, what the
//! model in `tests/model/` runs) says what the SQL (`take_over_key`'s
//! `UPDATE … WHERE`) does, on every combination of the row's fields that
//! the predicate reads, on both backends: expired or not, in progress or
//! completed, lease live or over, the request's fingerprint or another,
//! no foreign step, the request's or another, for a request with a foreign
//! step and one without.

mod support;

use std::time::Duration;

use idempotency::{Fingerprint, KeyedRequest, NewKey, SavedResponse, TakeoverRow};
use serde_json::json;
use support::{TestConn, TestDb};

const HOUR: Duration = Duration::from_secs(3600);
const STEPS: [Option<&str>; 3] = [None, Some("network"), Some("another")];

/// The fingerprint of the request that takes the rows over, and another's.
fn fingerprints() -> (Fingerprint, Fingerprint) {
    let of = |amount: i64| Fingerprint::of("POST", "/orders", &json!({ "amount": amount }));
    (of(1), of(2))
}

/// Every combination of the row's fields and the request's step: a row
/// registered by the request whose fingerprint is `mine`, or by `other`.
fn combinations<'a>(mine: &'a str, other: &'a str) -> Vec<(TakeoverRow<'a>, Option<&'static str>)> {
    let mut all = Vec::new();
    for bits in 0..16u8 {
        for row_step in STEPS {
            for request_step in [None, Some("network")] {
                let row = TakeoverRow {
                    expired: bits & 1 != 0,
                    in_progress: bits & 2 != 0,
                    lease_over: bits & 4 != 0,
                    fingerprint: if bits & 8 != 0 { mine } else { other },
                    foreign_step: row_step,
                };
                all.push((row, request_step));
            }
        }
    }
    all
}

/// Writes `row` under `key` through the store, then sets the columns the
/// store would not write that way (a completed row's live lease, its
/// step) in SQL both backends read alike: the times are moved onto the
/// row's own `created_at` (past) or its first `expires_at` (an hour ahead).
/// `fingerprint` is the row's (`row.fingerprint`, as a request carries it).
fn write_row<C: TestConn>(
    conn: &mut C,
    key: &str,
    row: TakeoverRow<'_>,
    fingerprint: &Fingerprint,
) {
    assert_eq!(fingerprint.as_str(), row.fingerprint);
    let body = json!({ "amount": 1 });
    let request = KeyedRequest {
        account_id: 1,
        key,
        fingerprint: fingerprint.clone(),
        path: "/orders",
        body: &body,
    };
    let response = SavedResponse::json(201, None, json!({ "id": key }));
    let new = NewKey {
        request: &request,
        ttl: HOUR,
        lease: Duration::ZERO,
        foreign_step: None,
        completed: (!row.in_progress).then_some(&response),
    };
    conn.insert_key(&new).unwrap().expect("a fresh key");
    let lease = match row.lease_over {
        true => "created_at",
        false => "expires_at",
    };
    let expires = match row.expired {
        true => "created_at",
        false => "expires_at",
    };
    let step = row.foreign_step.map_or("NULL".into(), |s| format!("'{s}'"));
    conn.batch_execute(&format!(
        "UPDATE idempotency_keys SET locked_until = {lease}, expires_at = {expires}, \
         foreign_step = {step} WHERE account_id = 1 AND key = '{key}'"
    ))
    .unwrap();
}

fn twin_says_what_the_sql_does<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let mut conn = db.conn();
    let (mine, other) = fingerprints();
    let cases = combinations(mine.as_str(), other.as_str());
    for (i, (row, _)) in cases.iter().enumerate() {
        let registered_by = if row.fingerprint == mine.as_str() {
            &mine
        } else {
            &other
        };
        write_row(&mut conn, &format!("k{i}"), *row, registered_by);
    }
    // `locked_until < now()`: PostgreSQL's now() is its transaction's
    // start, so a row written a moment ago must be strictly past it.
    std::thread::sleep(Duration::from_millis(20));
    let body = json!({ "amount": 1 });
    let mut wrong = Vec::new();
    let mut taken = 0;
    for (i, (row, request_step)) in cases.iter().enumerate() {
        let key = format!("k{i}");
        let request = KeyedRequest {
            account_id: 1,
            key: &key,
            fingerprint: mine.clone(),
            path: "/orders",
            body: &body,
        };
        let new = NewKey {
            request: &request,
            ttl: HOUR,
            lease: HOUR,
            foreign_step: *request_step,
            completed: None,
        };
        let sql = conn.take_over_key(&new).unwrap().is_some();
        let twin = row.may_be_taken_over(mine.as_str(), *request_step);
        taken += usize::from(sql);
        if sql != twin {
            wrong.push(format!(
                "{row:?}, request step {request_step:?}: SQL {sql}, twin {twin}"
            ));
        }
    }
    assert_eq!(cases.len(), 96);
    // Both answers occur: a table that took nothing would agree vacuously.
    assert!(taken > 0 && taken < cases.len(), "{taken} taken");
    assert!(
        wrong.is_empty(),
        "{}: twin and SQL disagree:\n{}",
        C::BACKEND,
        wrong.join("\n")
    );
}

crate::on_both_backends!(twin_says_what_the_sql_does);
