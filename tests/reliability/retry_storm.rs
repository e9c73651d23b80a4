//! 200 concurrent requests with one key: one charge, 200 identical 201s.

use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::client::{self, Attempt};
use crate::server::{self, Config};
use crate::support::{AppClient, ServerProcess, TestBackend, TestDatabase};
use crate::within;

const REQUESTS: usize = 200;

/// Fires `REQUESTS` requests with `key` at once as `api`'s account and
/// checks the answers.
async fn storm(api: &AppClient, db: &TestDatabase, key: &str, headers: &[(&str, &str)]) {
    let attempts = join_all((0..REQUESTS).map(|_| client::attempt(api, key, headers))).await;
    let mut replies = Vec::new();
    for (i, attempt) in attempts.iter().enumerate() {
        match attempt {
            Attempt::Reply(r) if r.status == 201 => replies.push(r),
            other => panic!("request {i} of the storm on {key}: expected 201, got {other:?}"),
        }
    }
    let first = replies[0];
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(
            r.body, first.body,
            "body of request {i} differs from request 0"
        );
        assert_eq!(
            r.header("location"),
            first.header("location"),
            "Location of request {i}"
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    let executed = replies.iter().filter(|r| !r.replayed()).count();
    assert_eq!(
        executed, 1,
        "exactly one of the {REQUESTS} answers is the executed one, the others are marked Idempotent-Replayed"
    );
    let keys = db.key_rows();
    let row = keys.get(key).expect("the key row exists");
    assert_eq!(row.status, "completed");
    assert_eq!(
        row.charge_id,
        Some(first.charge_id()),
        "the key points at the charge every client got"
    );
}

/// Ten connections for 200 concurrent requests: most of the storm queues.
/// In demo mode: the held storm's first request is a demo fault.
fn storm_server(db: &TestDatabase) -> ServerProcess {
    let server = server::start(
        "server",
        &db.url,
        &Config {
            pool_size: 10,
            pool_timeout: "10s",
            workers: 2,
            demo_max_delayed: Some(5),
        },
    );
    db.create_test_account();
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_requests_with_one_key_make_one_charge() {
    let started = Instant::now();
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let mut server = storm_server(&db);
    within(Duration::from_secs(40), "the retry storms", async {
        // Plain: the first request commits in a few milliseconds, so most of
        // the storm races the commit or arrives just after it.
        let plain = client::new_key();
        storm(&server.client(), &db, &plain, &[]).await;
        assert_eq!(db.charges(), 1);
        // Held open: the first request keeps its transaction open 300 ms, so
        // the whole storm waits on the key's unique index entry (holding every
        // pool connection) and then replays.
        let held = client::new_key();
        // The demo account's: `Demo-Fault` is the demo's.
        let demo = server.client().demo();
        storm(&demo, &db, &held, &[("demo-fault", "delay-commit=300")]).await;
        assert_eq!(db.charges(), 2);
    })
    .await;
    assert_eq!(db.count("idempotency_keys"), 2);
    db.assert_consistent();
    server.assert_healthy();
    eprintln!("retry storm: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_key_first_mode_a_storm_gets_201s_and_409s_and_its_retries_converge_on_one_201() {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let server = storm_server(&db);
    within(Duration::from_secs(40), "the key-first storm", async {
        // The demo account's: `Demo-Mode` and `Demo-Fault` are the demo's.
        let api = server.client().demo();
        let key = client::new_key();
        let headers = [
            ("demo-mode", "key-first"),
            ("demo-fault", "delay-commit=300"),
        ];
        let attempts = join_all((0..REQUESTS).map(|_| client::attempt(&api, &key, &headers))).await;
        let mut in_flight = 0;
        let mut bodies = Vec::new();
        for (i, attempt) in attempts.iter().enumerate() {
            match attempt {
                Attempt::Reply(r) if r.status == 201 => bodies.push(r.body.clone()),
                Attempt::Reply(r) if r.status == 409 => in_flight += 1,
                other => panic!("request {i}: expected 201 or 409, got {other:?}"),
            }
        }
        assert!(
            in_flight > 0,
            "some requests arrived while the first was in flight"
        );
        // Every client that got 409 retries (the same key, after Retry-After)
        // until it gets the 201: they all converge on the first's response.
        for _ in 0..in_flight {
            let mut answer = None;
            for _ in 0..20 {
                match client::attempt(&api, &key, &[("demo-mode", "key-first")]).await {
                    Attempt::Reply(r) if r.status == 201 => {
                        answer = Some(r.body.clone());
                        break;
                    }
                    Attempt::Reply(r) if r.status == 409 => {
                        tokio::time::sleep(Duration::from_millis(100)).await
                    }
                    other => panic!("retry: expected 201 or 409, got {other:?}"),
                }
            }
            bodies.push(answer.expect("the retry converged within 2 s"));
        }
        assert_eq!(bodies.len(), REQUESTS);
        assert!(
            bodies.iter().all(|b| *b == bodies[0]),
            "one response for every client"
        );
        assert_eq!(db.charges(), 1);
    })
    .await;
    db.assert_consistent();
}
