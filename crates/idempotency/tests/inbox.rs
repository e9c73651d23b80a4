//! The receiving side of a webhook (`idempotency::webhook`): a delivery is
//! verified before anything is recorded, and its event's id is recorded in
//! the transaction of the receiver's effect, so that however often and
//! however concurrently the event arrives, its effect happens once, and
//! every delivery is answered as received. On both backends; the example
//! receiver (`examples/receiver.rs`) over real HTTP on PostgreSQL.

mod support;

use std::sync::{Arc, Barrier, mpsc};
use std::thread;
use std::time::Duration;

use diesel::prelude::*;
use diesel::sql_types::BigInt;
use idempotency::webhook::{
    Headers, InboxStore, Received, RequestError, Secret, SignatureError, purge, receive,
    signature_header, unix_now, verify_request,
};
use support::{TestConn, TestDb};

const SOURCE: &str = "charges";

/// A test connection whose database also has the inbox.
trait InboxConn: TestConn + InboxStore {
    const INBOX_SQL: &'static str;

    /// How many events the inbox holds.
    fn inbox_rows(&mut self) -> i64;
}

macro_rules! inbox_conn {
    ($conn:ty, $sql:expr) => {
        impl InboxConn for $conn {
            const INBOX_SQL: &'static str = $sql;

            fn inbox_rows(&mut self) -> i64 {
                diesel::sql_query("SELECT count(*) AS n FROM webhook_inbox")
                    .get_result::<Count>(self)
                    .expect("count the inbox")
                    .n
            }
        }
    };
}

inbox_conn!(
    diesel::pg::PgConnection,
    idempotency::webhook::POSTGRES_INBOX
);
inbox_conn!(
    diesel::sqlite::SqliteConnection,
    idempotency::webhook::SQLITE_INBOX
);

/// A fresh database with the inbox (and the key table and `orders`, whose
/// rows are the receiver's effects: one per effect, no primary key).
fn inbox_db<C: InboxConn>(test: &str) -> Option<TestDb<C>> {
    let db = TestDb::<C>::create(test)?;
    db.conn()
        .batch_execute(C::INBOX_SQL)
        .expect("apply the inbox's SQL");
    Some(db)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

fn inbox_rows<C: InboxConn>(db: &TestDb<C>) -> i64 {
    db.conn().inbox_rows()
}

/// The receiver's effect, once per first delivery: an order row named by
/// the event.
fn effect<C: InboxConn>(tx: &mut C, event_id: &str) -> QueryResult<()> {
    tx.insert_order(1, event_id, 1000)
}

/// One delivery as a receiver handles it: verify, then in one transaction
/// record the event and, if it is the first, do the effect.
fn handle<C: InboxConn>(
    conn: &mut C,
    secrets: &[&Secret],
    headers: &Headers,
    body: &[u8],
    now: i64,
) -> Result<Received, RequestError> {
    let id = verify_request(secrets, headers, body, now)?;
    let received = conn
        .key_transaction(|tx| {
            let received = receive(tx, SOURCE, id)?;
            if received == Received::First {
                effect(tx, id)?;
            }
            Ok::<_, diesel::result::Error>(received)
        })
        .expect("the delivery's transaction");
    Ok(received)
}

fn secret(byte: u8) -> Secret {
    Secret::from_bytes(vec![byte; 32]).unwrap()
}

/// The headers a sender sends: the event's id, the attempt's time, and a
/// signature per secret.
fn signed(secrets: &[&Secret], id: &str, at: i64, body: &[u8]) -> Headers {
    Headers {
        id: Some(id.to_owned()),
        timestamp: Some(at.to_string()),
        signature: Some(signature_header(secrets, id, at, body)),
    }
}

const BODY: &[u8] = br#"{"id":"evt_1","object":"event","type":"charge.succeeded"}"#;

fn fifty_concurrent_deliveries_of_one_event_have_one_effect<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    let key = secret(1);
    let start = Arc::new(Barrier::new(50));
    let answers: Vec<Result<Received, RequestError>> = thread::scope(|s| {
        let deliveries: Vec<_> = (0..50)
            .map(|_| {
                let (db, key, start) = (&db, &key, start.clone());
                s.spawn(move || {
                    let mut conn = db.conn();
                    let now = unix_now();
                    let headers = signed(&[key], "evt_1", now, BODY);
                    start.wait();
                    handle(&mut conn, &[key], &headers, BODY, now)
                })
            })
            .collect();
        deliveries.into_iter().map(|d| d.join().unwrap()).collect()
    });
    // Every delivery is received (a 2xx each); one of them did the effect.
    assert!(answers.iter().all(Result::is_ok), "{answers:?}");
    let first = answers
        .iter()
        .filter(|a| **a == Ok(Received::First))
        .count();
    assert_eq!(first, 1, "{answers:?}");
    assert_eq!(db.orders().len(), 1);
    assert_eq!(inbox_rows(&db), 1);
}

/// The first delivery holds its transaction open after `receive` until a
/// second waits on its row, then commits (`commit`) or rolls back: the
/// second's answer.
fn second_delivery_while_the_first_is_open<C: InboxConn>(db: &TestDb<C>, commit: bool) -> Received {
    let (recorded, go_on) = (mpsc::channel(), mpsc::channel::<()>());
    let ((recorded_tx, recorded_rx), (go_tx, go_rx)) = (recorded, go_on);
    thread::scope(|s| {
        let first = s.spawn(move || {
            let mut conn = db.conn();
            let done = conn.key_transaction(|tx| {
                assert_eq!(receive(tx, SOURCE, "evt_1")?, Received::First);
                effect(tx, "evt_1")?;
                recorded_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                match commit {
                    true => Ok(()),
                    false => Err(diesel::result::Error::RollbackTransaction),
                }
            });
            assert_eq!(done.is_ok(), commit);
        });
        recorded_rx.recv().unwrap();
        let second = s.spawn(move || {
            let mut conn = db.conn();
            conn.key_transaction(|tx| {
                let received = receive(tx, SOURCE, "evt_1")?;
                if received == Received::First {
                    effect(tx, "evt_1")?;
                }
                Ok::<_, diesel::result::Error>(received)
            })
        });
        C::until_another_waits(db);
        go_tx.send(()).unwrap();
        first.join().unwrap();
        second.join().unwrap().expect("the second delivery")
    })
}

fn a_concurrent_duplicate_waits_for_the_first_then_does_nothing<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    assert_eq!(
        second_delivery_while_the_first_is_open(&db, true),
        Received::Duplicate
    );
    assert_eq!(db.orders().len(), 1);
    assert_eq!(inbox_rows(&db), 1);
}

fn a_rollback_of_the_first_leaves_the_event_receivable_as_first<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    // The second was waiting on the first's row: it is the first now.
    assert_eq!(
        second_delivery_while_the_first_is_open(&db, false),
        Received::First
    );
    assert_eq!(db.orders().len(), 1);
    // And a rollback with nobody waiting leaves it receivable too.
    let mut conn = db.conn();
    let rolled_back = conn.key_transaction(|tx| {
        assert_eq!(receive(tx, SOURCE, "evt_2")?, Received::First);
        Err::<(), _>(diesel::result::Error::RollbackTransaction)
    });
    assert!(rolled_back.is_err());
    assert_eq!(
        conn.key_transaction(|tx| receive(tx, SOURCE, "evt_2")),
        Ok(Received::First)
    );
    // Another source's event of the same id is another event.
    assert_eq!(
        conn.key_transaction(|tx| receive(tx, "other", "evt_2")),
        Ok(Received::First)
    );
}

fn a_tampered_body_is_refused_and_nothing_recorded<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    let key = secret(1);
    let now = unix_now();
    let headers = signed(&[&key], "evt_1", now, BODY);
    let tampered = br#"{"id":"evt_1","object":"event","type":"charge.refunded"}"#;
    let refused = handle(&mut db.conn(), &[&key], &headers, tampered, now);
    assert_eq!(
        refused,
        Err(RequestError::Signature(SignatureError::Mismatch))
    );
    // Nor a delivery signed with another secret, nor one without a signature.
    let forged = signed(&[&secret(9)], "evt_1", now, BODY);
    let refused = handle(&mut db.conn(), &[&key], &forged, BODY, now);
    assert_eq!(
        refused,
        Err(RequestError::Signature(SignatureError::Mismatch))
    );
    let unsigned = Headers {
        signature: None,
        ..headers.clone()
    };
    let refused = handle(&mut db.conn(), &[&key], &unsigned, BODY, now);
    assert_eq!(refused, Err(RequestError::Missing("webhook-signature")));
    assert_eq!(inbox_rows(&db), 0);
    assert!(db.orders().is_empty());
    // The genuine delivery is then the first.
    let genuine = handle(&mut db.conn(), &[&key], &headers, BODY, now);
    assert_eq!(genuine, Ok(Received::First));
}

fn a_timestamp_six_minutes_old_is_refused_and_nothing_recorded<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    let key = secret(1);
    let now = unix_now();
    let stale = signed(&[&key], "evt_1", now - 6 * 60, BODY);
    let refused = handle(&mut db.conn(), &[&key], &stale, BODY, now);
    assert_eq!(refused, Err(RequestError::Signature(SignatureError::Stale)));
    assert_eq!(refused.unwrap_err().status(), 401);
    assert_eq!(inbox_rows(&db), 0);
    assert!(db.orders().is_empty());
    // The sender's next attempt is signed anew, at its own time.
    let retried = signed(&[&key], "evt_1", now, BODY);
    let received = handle(&mut db.conn(), &[&key], &retried, BODY, now);
    assert_eq!(received, Ok(Received::First));
}

fn a_delivery_signed_with_the_previous_secret_verifies_during_rotation<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    let (new, old) = (secret(2), secret(1));
    let now = unix_now();
    // A receiver that holds both accepts the old secret's signature…
    let by_old = signed(&[&old], "evt_1", now, BODY);
    let received = handle(&mut db.conn(), &[&new, &old], &by_old, BODY, now);
    assert_eq!(received, Ok(Received::First));
    // …and one still on the old secret accepts a sender signing with both.
    let by_both = signed(&[&new, &old], "evt_1", now, BODY);
    let received = handle(&mut db.conn(), &[&old], &by_both, BODY, now);
    assert_eq!(received, Ok(Received::Duplicate));
    // Once the previous secret is dropped, its signature is refused.
    let refused = handle(&mut db.conn(), &[&new], &by_old, BODY, now);
    assert_eq!(
        refused,
        Err(RequestError::Signature(SignatureError::Mismatch))
    );
    assert_eq!(db.orders().len(), 1);
}

fn purge_deletes_only_rows_older_than_asked<C: InboxConn>(test: &str) {
    let Some(db) = inbox_db::<C>(test) else {
        return;
    };
    let mut conn = db.conn();
    let first = conn.key_transaction(|tx| receive(tx, SOURCE, "evt_1"));
    assert_eq!(first, Ok(Received::First));
    assert_eq!(purge(&mut conn, Duration::from_secs(3600)), Ok(0));
    assert_eq!(inbox_rows(&db), 1);
    thread::sleep(Duration::from_millis(20));
    assert_eq!(purge(&mut conn, Duration::from_millis(10)), Ok(1));
    // A redelivery after its row is gone is a first delivery again: keep
    // rows longer than the sender retries.
    let again = conn.key_transaction(|tx| receive(tx, SOURCE, "evt_1"));
    assert_eq!(again, Ok(Received::First));
}

on_both_backends!(
    fifty_concurrent_deliveries_of_one_event_have_one_effect,
    a_concurrent_duplicate_waits_for_the_first_then_does_nothing,
    a_rollback_of_the_first_leaves_the_event_receivable_as_first,
    a_tampered_body_is_refused_and_nothing_recorded,
    a_timestamp_six_minutes_old_is_refused_and_nothing_recorded,
    a_delivery_signed_with_the_previous_secret_verifies_during_rotation,
    purge_deletes_only_rows_older_than_asked,
);

#[cfg(feature = "actix")]
#[path = "inbox/over_http.rs"]
mod over_http;

/// The example receiver, started in-process on a fresh PostgreSQL
/// database, driven over real HTTP as the sender drives it.
#[test]
#[cfg_attr(
    not(postgres_tests),
    ignore = "TEST_DATABASE_URL is not set: PostgreSQL was not tested"
)]
#[cfg_attr(
    all(postgres_tests, not(feature = "actix")),
    ignore = "the example receiver needs the feature actix: cargo test -p idempotency --features actix --test inbox"
)]
fn the_example_receiver_pays_an_order_once_however_often_its_event_arrives() {
    #[cfg(feature = "actix")]
    over_http::the_example_receiver_pays_an_order_once(
        "the_example_receiver_pays_an_order_once_however_often_its_event_arrives",
    );
    #[cfg(not(feature = "actix"))]
    panic!("built without the feature actix: the example receiver was not tested");
}
