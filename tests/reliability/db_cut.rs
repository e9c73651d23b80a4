//! The database cuts the app's connections (`pg_terminate_backend`, as a
//! failover or an administrator would) — during a load of keyed charges, or
//! before the pool has used every connection. Requests may fail while the
//! connections are broken, with `503 /problems/service-unavailable` (the
//! documented contract: never a 500, never a hang), but the pool recovers by
//! itself, and retries with the same keys converge: one charge per key, and
//! every key that got a 201 has its charge.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::join_all;

use crate::client::{self, Attempt, Charge, Retry};
use crate::server::{self, Config};
use crate::support::{Captured, ServerProcess, TestBackend, TestDatabase};
use crate::within;

const POOL_SIZE: u32 = 6;
const CONCURRENCY: usize = 12;

fn config() -> Config {
    Config {
        pool_size: POOL_SIZE,
        pool_timeout: "2s",
        workers: 2,
        // The demo: the load's first attempts hold their transactions.
        demo_max_delayed: Some(3),
    }
}

/// `keys` logical charges, `CONCURRENCY` at a time, each retried with its
/// key until it gets an answer; first attempts hold their transaction 40 ms,
/// so a cut also lands inside open transactions (`Demo-Fault: delay-commit`:
/// they are the demo account's, retries too). `done` counts finished keys.
async fn load(server: &ServerProcess, keys: usize, done: Arc<AtomicUsize>) -> Vec<Charge> {
    let servers = vec![server.client().demo()];
    let retry = Retry {
        max_attempts: 60,
        backoff: Duration::from_millis(50),
        deadline: Instant::now() + Duration::from_secs(20),
    };
    within(
        Duration::from_secs(30),
        "the load of keyed charges",
        futures::stream::iter((0..keys).map(|_| {
            let charge =
                client::charge_until_answered(&servers, 0, client::new_key(), &retry, |n| {
                    if n == 0 {
                        vec![("demo-fault", "delay-commit=40")]
                    } else {
                        vec![]
                    }
                });
            let done = done.clone();
            async move {
                let charge = charge.await;
                done.fetch_add(1, Ordering::SeqCst);
                charge
            }
        }))
        .buffer_unordered(CONCURRENCY)
        .collect(),
    )
    .await
}

fn outcomes(charges: &[Charge]) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for attempt in charges.iter().flat_map(|c| &c.attempts) {
        *seen.entry(attempt.summary()).or_default() += 1;
    }
    seen
}

/// Why the server answered 503, from its log: cause -> count.
fn unavailable_causes(server: &ServerProcess) -> BTreeMap<String, usize> {
    let mut causes = BTreeMap::new();
    for line in server.log_lines("database unavailable") {
        let cause = line
            .split("cause=")
            .nth(1)
            .unwrap_or(&line)
            .trim()
            .to_owned();
        *causes.entry(cause).or_default() += 1;
    }
    causes
}

/// A second after the last cut, fresh keys charge on their first attempt:
/// three rounds of twice the pool size at once, so every pooled connection
/// is drawn. Returns the keys and their 201s.
async fn assert_recovered(server: &ServerProcess, context: &str) -> Vec<(String, Captured)> {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let api = server.client();
    let mut after = Vec::new();
    for _ in 0..3 {
        let keys: Vec<String> = (0..2 * POOL_SIZE).map(|_| client::new_key()).collect();
        let attempts = join_all(keys.iter().map(|k| client::attempt(&api, k, &[]))).await;
        after.extend(keys.into_iter().zip(attempts));
    }
    let mut failed: BTreeMap<String, usize> = BTreeMap::new();
    for (_, attempt) in &after {
        if attempt.reply().is_none_or(|r| r.status != 201) {
            *failed.entry(attempt.summary()).or_default() += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "the pool has not recovered 1 s after the last cut: of {} fresh requests, {failed:?}; \
         {context}; the server's 503 causes: {:?}",
        after.len(),
        unavailable_causes(server)
    );
    after
        .into_iter()
        .map(|(k, a)| (k, a.reply().unwrap().clone()))
        .collect()
}

/// Every key got its 201 and the database has exactly that charge for it.
#[track_caller]
fn assert_converged(db: &TestDatabase, charges: &[Charge], fresh: &[(String, Captured)]) {
    let unanswered: Vec<String> = charges
        .iter()
        .filter(|c| c.answer().is_none_or(|r| r.status != 201))
        .map(|c| format!("{}: {}", c.key, c.history()))
        .collect();
    assert!(
        unanswered.is_empty(),
        "{} of {} keys never got their 201 (first ones: {:#?})",
        unanswered.len(),
        charges.len(),
        &unanswered[..unanswered.len().min(5)]
    );
    let rows = db.key_rows();
    for charge in charges {
        let id = charge.answer().unwrap().charge_id();
        assert_eq!(
            rows[&charge.key].charge_id,
            Some(id),
            "{}: the 201's charge is the key's",
            charge.key
        );
    }
    for (key, reply) in fresh {
        assert_eq!(rows[key].charge_id, Some(reply.charge_id()), "{key}");
    }
    assert_eq!(
        db.charges(),
        (charges.len() + fresh.len()) as i64,
        "one charge per key"
    );
    db.assert_consistent();
}

/// While the connections were broken: 503 problem+json with Retry-After,
/// never another error, never no response.
#[track_caller]
fn assert_failures_are_503(charges: &[Charge]) {
    let seen = outcomes(charges);
    for attempt in charges.iter().flat_map(|c| &c.attempts) {
        let Attempt::Reply(reply) = attempt else {
            panic!("a request got no response at all: {attempt:?}; attempts by outcome {seen:?}");
        };
        if reply.status == 201 {
            continue;
        }
        assert_eq!(
            (reply.status, reply.problem_type().as_deref()),
            (503, Some("/problems/service-unavailable")),
            "a request on a cut connection: expected 503 service-unavailable, got {reply:?}; attempts by outcome {seen:?}"
        );
        assert_eq!(
            reply.header("content-type"),
            Some("application/problem+json")
        );
        assert!(
            reply.header("retry-after").is_some(),
            "503 without Retry-After: {reply:?}"
        );
    }
}

/// Waits (bounded) until one of the app's connections holds an open
/// transaction, so the cut lands inside one.
fn until_a_transaction_is_open(db: &TestDatabase) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while db.sessions("idle in transaction") == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cuts_during_a_load_503_then_the_pool_recovers_and_retries_converge() {
    const KEYS: usize = 300;
    const CUTS: usize = 3;
    let started = Instant::now();
    let db = Arc::new(TestDatabase::create_for(TestBackend::Postgres));
    let mut server = server::start("server", &db.url, &config());
    db.create_test_account();
    let done = Arc::new(AtomicUsize::new(0));
    // Three cuts, 300 ms apart, once a fifth of the load is through; each
    // waits for an open charge transaction to cut.
    let cutter = {
        let (db, done) = (db.clone(), done.clone());
        tokio::task::spawn_blocking(move || {
            let deadline = Instant::now() + Duration::from_secs(10);
            while done.load(Ordering::SeqCst) < KEYS / 5 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            (0..CUTS)
                .map(|i| {
                    if i > 0 {
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    until_a_transaction_is_open(&db);
                    db.terminate_connections()
                })
                .collect::<Vec<_>>()
        })
    };
    let charges = load(&server, KEYS, done).await;
    let cuts = cutter.await.unwrap();
    let context = format!(
        "cuts terminated {cuts:?}; load attempts by outcome {:?}",
        outcomes(&charges)
    );
    eprintln!(
        "db cut during load: {context}; 503 causes {:?}; {:?}",
        unavailable_causes(&server),
        started.elapsed()
    );
    for cut in &cuts {
        assert!(
            !cut.is_empty(),
            "a cut found no connection to terminate: {context}"
        );
    }
    assert!(
        cuts.iter()
            .any(|c| c.contains_key("idle in transaction") || c.contains_key("active")),
        "no cut landed inside a charge transaction: {context}"
    );
    let fresh = assert_recovered(&server, &context).await;
    assert_converged(&db, &charges, &fresh);
    assert_failures_are_503(&charges);
    server.assert_healthy();
}

/// The same cut right after start-up, when only one pooled connection has
/// served a request (a failover before the traffic ramps up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_before_every_pooled_connection_was_used_503_then_the_pool_recovers() {
    const KEYS: usize = 60;
    let started = Instant::now();
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let mut server = server::start("server", &db.url, &config());
    db.create_test_account();
    let warm = client::new_key();
    let first = client::attempt(&server.client(), &warm, &[]).await;
    let first = first
        .reply()
        .filter(|r| r.status == 201)
        .cloned()
        .unwrap_or_else(|| panic!("the first charge: {first:?}"));
    // The pool opens connections as it needs them, so how many it holds
    // here depends on timing: every one of them is cut, whatever the count.
    let cut = db.terminate_connections();
    assert!(
        cut.values().sum::<i64>() >= 1,
        "the server's connections are cut: {cut:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let charges = load(&server, KEYS, Arc::new(AtomicUsize::new(0))).await;
    let context = format!(
        "the cut terminated {cut:?}; load attempts by outcome {:?}",
        outcomes(&charges)
    );
    eprintln!(
        "db cut on a cold pool: {context}; 503 causes {:?}; {:?}",
        unavailable_causes(&server),
        started.elapsed()
    );
    let mut fresh = assert_recovered(&server, &context).await;
    fresh.push((warm, first));
    assert_converged(&db, &charges, &fresh);
    assert_failures_are_503(&charges);
    server.assert_healthy();
}
