//! `kill -9` with charge transactions open: PostgreSQL rolls them back, so a
//! key has its charge or nothing — never a charge without its key, never a
//! completed key without its charge — and the retries after a restart make
//! exactly one charge per key.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::client::{self, Attempt};
use crate::server::{self, Config};
use crate::support::{Captured, ServerProcess, TestBackend, TestDatabase};
use crate::within;

const KEYS: usize = 50;

fn config() -> Config {
    Config {
        pool_size: 20,
        pool_timeout: "10s",
        workers: 2,
        // The demo: the charges' transactions held open are its faults.
        demo_max_delayed: Some(10),
    }
}

/// Waits (bounded) until `n` of the database's sessions are `state`.
async fn until_sessions(db: &TestDatabase, state: &str, n: i64, limit: Duration) -> i64 {
    let deadline = Instant::now() + limit;
    loop {
        let seen = db.sessions(state);
        if seen >= n || Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (bounded) until PostgreSQL has noticed the dead client and ended
/// the killed server's transactions.
async fn until_no_open_transactions(db: &TestDatabase) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db.sessions("idle in transaction") + db.sessions("active") > 0
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Retries every key once on `server` (no fault) and checks one charge per
/// key: as the demo account, whose keys they are.
async fn retry_all(server: &ServerProcess, keys: &[String]) -> HashMap<String, Captured> {
    let api = server.client().demo();
    let attempts = join_all(keys.iter().map(|k| client::attempt(&api, k, &[]))).await;
    keys.iter()
        .cloned()
        .zip(attempts)
        .map(|(key, attempt)| match attempt {
            Attempt::Reply(r) if r.status == 201 => (key, r),
            other => panic!("the retry of {key} after the restart: expected 201, got {other:?}"),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_when_the_server_is_killed_roll_back_and_their_retries_charge_once() {
    let started = Instant::now();
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let mut first = server::start("first server", &db.url, &config());
    let keys: Vec<String> = (0..KEYS).map(|_| client::new_key()).collect();
    // The demo account: `Demo-Fault: delay-commit` holds the transactions.
    let api = first.client().demo();
    let in_flight: Vec<_> = keys
        .iter()
        .map(|key| {
            let (api, key) = (api.clone(), key.clone());
            tokio::spawn(async move {
                client::attempt(&api, &key, &[("demo-fault", "delay-commit=2000")]).await
            })
        })
        .collect();
    // ~500 ms, and at least until the demo's share of the pool holds open
    // charge transactions (DEMO_MAX_DELAYED of them; the other requests
    // wait for a place among the demo account's requests in flight).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = i64::from(config().demo_max_delayed.unwrap());
    let open = until_sessions(&db, "idle in transaction", held, Duration::from_secs(5)).await;
    first.kill();
    first.assert_healthy();
    eprintln!("crash: killed the server with {open} charge transactions open");
    assert!(
        open > 0,
        "no charge transaction was open when the server was killed"
    );
    let answers = within(
        Duration::from_secs(10),
        "the killed server's requests",
        join_all(in_flight),
    )
    .await;
    for (key, answer) in keys.iter().zip(answers) {
        match answer.unwrap() {
            Attempt::Transport(_) => {}
            other => {
                panic!("{key}: the server was killed before any commit, yet it answered {other:?}")
            }
        }
    }
    until_no_open_transactions(&db).await;

    let mut second = server::start("restarted server", &db.url, &config());
    // Before any retry: all of it rolled back.
    assert_eq!(
        db.charges(),
        0,
        "charges survived the crash although no transaction committed"
    );
    assert_eq!(
        db.count("idempotency_keys"),
        0,
        "key rows survived the crash"
    );
    db.assert_consistent();

    let replies = within(
        Duration::from_secs(20),
        "the retries",
        retry_all(&second, &keys),
    )
    .await;
    for (key, reply) in &replies {
        assert!(
            !reply.replayed(),
            "{key} was rolled back, so its retry executes it"
        );
    }
    assert_one_charge_per_key_held_by_its_client(&db, &replies);
    second.assert_healthy();
    eprintln!("crash with everything in flight: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_some_charges_committed_every_key_has_its_charge_or_none() {
    let started = Instant::now();
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let mut first = server::start("first server", &db.url, &config());
    let keys: Vec<String> = (0..KEYS).map(|_| client::new_key()).collect();
    // 45 keys are sent at once or up to 340 ms later and commit at once, so
    // the kill lands among them; 5 hold their transaction 5 s, far past the
    // kill (no more: the demo may hold at most DEMO_MAX_DELAYED open).
    let delay = |i: usize| if i.is_multiple_of(10) { 5_000 } else { 0 };
    let send_after = |i: usize| {
        Duration::from_millis(if i.is_multiple_of(10) {
            0
        } else {
            (i % 35) as u64 * 10
        })
    };
    // The demo account: `Demo-Fault: delay-commit` holds the transactions.
    let api = first.client().demo();
    let (answered_tx, mut answered_rx) = tokio::sync::mpsc::unbounded_channel();
    let in_flight: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let (api, key) = (api.clone(), key.clone());
            let fault = format!("delay-commit={}", delay(i));
            let answered = answered_tx.clone();
            let wait = send_after(i);
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let fault: &str = &fault;
                let attempt = client::attempt(&api, &key, &[("demo-fault", fault)]).await;
                if attempt.reply().is_some() {
                    let _ = answered.send(());
                }
                attempt
            })
        })
        .collect();
    // Kill once the first charges have come back, with the long ones open.
    within(
        Duration::from_secs(10),
        "the first answer",
        answered_rx.recv(),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.kill();
    first.assert_healthy();
    let answers: Vec<Attempt> = within(
        Duration::from_secs(10),
        "the killed server's requests",
        join_all(in_flight),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    until_no_open_transactions(&db).await;

    let mut second = server::start("restarted server", &db.url, &config());
    db.assert_consistent();
    let rows = db.key_rows();
    let mut committed = 0;
    for (i, (key, answer)) in keys.iter().zip(&answers).enumerate() {
        match answer {
            Attempt::Reply(r) => {
                assert_eq!(r.status, 201, "{key}: {r:?}");
                assert!(!r.replayed());
                assert_eq!(
                    rows.get(key).and_then(|row| row.charge_id),
                    Some(r.charge_id()),
                    "{key}: answered 201, so committed"
                );
            }
            Attempt::Transport(_) => {}
        }
        if rows.contains_key(key) {
            committed += 1;
        }
        if delay(i) == 5_000 {
            assert!(
                !rows.contains_key(key),
                "{key} was still open when the server was killed, yet it committed"
            );
        }
    }
    assert_eq!(
        db.charges(),
        committed,
        "one charge per committed key, none for the others"
    );
    assert!(committed > 0, "nothing had committed before the kill");
    let answered = answers.iter().filter(|a| a.reply().is_some()).count();
    eprintln!(
        "crash mid-load: {answered} answered before the kill, {committed} committed, {} rolled back",
        KEYS as i64 - committed
    );

    let replies = within(
        Duration::from_secs(20),
        "the retries",
        retry_all(&second, &keys),
    )
    .await;
    for (key, reply) in &replies {
        let before = rows.get(key).and_then(|row| row.charge_id);
        assert_eq!(
            reply.replayed(),
            before.is_some(),
            "{key}: a committed key replays, a rolled-back one executes"
        );
        if let Some(id) = before {
            assert_eq!(
                reply.charge_id(),
                id,
                "{key}: the replay is of the charge committed before the crash"
            );
        }
    }
    assert_one_charge_per_key_held_by_its_client(&db, &replies);
    second.assert_healthy();
    eprintln!("crash mid-load: {:?}", started.elapsed());
}

/// Exactly one charge per key, the key row points at the charge its client
/// holds, and no charge or key is orphaned.
#[track_caller]
fn assert_one_charge_per_key_held_by_its_client(
    db: &TestDatabase,
    replies: &HashMap<String, Captured>,
) {
    assert_eq!(db.charges(), KEYS as i64);
    let rows = db.key_rows();
    for (key, reply) in replies {
        assert_eq!(rows[key].charge_id, Some(reply.charge_id()), "{key}");
    }
    db.assert_consistent();
}
