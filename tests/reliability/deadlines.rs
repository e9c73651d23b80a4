//! A database that hangs instead of dying: frozen (`SIGSTOP` of a private
//! server and all its processes), or behind a network path that stops
//! forwarding bytes without closing anything. Neither is noticed by TCP, by
//! keepalives or by `connect_timeout`: the kernel keeps ACKing. Only the
//! request deadline (`REQUEST_TIMEOUT`) bounds a request, and these tests
//! hold the server to it: every answer within the deadline plus 1 s, only
//! 201 and 503 (409 for a retry that meets its own first attempt's key still
//! held), `/readyz` within 2 s, the server's threads bounded meanwhile; and
//! after the outage, every client retrying with its key until it gets a 201:
//! one charge per key, every client's charge id the database's, none lost.
//!
//! And a duplicate that waits on its key's index entry longer than
//! `lock_timeout` hears the draft's 409 with `Retry-After`, not a hang.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::client;
use crate::pg_node::PgNode;
use crate::proxy::PausableProxy;
use crate::support::{AppClient, ServerProcess, TestBackend, TestDatabase};
use crate::within;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
const CLIENTS: usize = 12;
/// How long the database hangs: well past the deadline, so that every
/// request in flight when it starts runs into it.
const OUTAGE: Duration = Duration::from_secs(8);
const READY_LIMIT: Duration = Duration::from_secs(2);

/// `charges serve` (no demo: its clients are the test account), with the
/// test account created once it has migrated.
fn start_server(name: &str, database_url: &str) -> ServerProcess {
    let server = ServerProcess::try_start_with(
        name,
        &["serve"],
        database_url,
        &[
            ("REQUEST_TIMEOUT", "3s"),
            ("DB_STATEMENT_TIMEOUT", "2500ms"),
            ("DB_LOCK_TIMEOUT", "2s"),
            ("DB_IDLE_IN_TRANSACTION_TIMEOUT", "3s"),
            ("POOL_SIZE", "6"),
            ("POOL_TIMEOUT", "2s"),
            ("DEMO", "false"),
            ("PURGE_INTERVAL", "0s"),
            ("RUST_LOG", "info,actix_server=warn"),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    TestDatabase::create_test_account_at(database_url);
    server
}

/// One attempt, timed.
struct Timed {
    status: Option<u16>,
    problem: Option<String>,
    elapsed: Duration,
}

/// One logical charge: its key, its attempts, the id of the 201 it ended with.
struct Logical {
    key: String,
    attempts: Vec<Timed>,
    charge_id: Option<String>,
}

/// What came of one outage.
struct Run {
    charges: Vec<Logical>,
    ready: Vec<(Duration, u16, bool)>,
    threads: Vec<usize>,
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim().parse().ok()))
        })
        .flatten()
        .unwrap_or(0)
}

/// `CLIENTS` clients charging one logical charge after another, each retried
/// with its key every 300 ms until it gets a 201; a prober on `/readyz`
/// every 300 ms; the outage starts after 1 s, lasts `OUTAGE`, and the
/// clients stop starting new charges 3 s after it ends.
async fn under_an_outage(server: &ServerProcess, begin: impl FnOnce(), end: impl FnOnce()) -> Run {
    let client = server.client();
    let stop = Arc::new(AtomicBool::new(false));
    let outage = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                let give_up = Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) {
                    let mut logical = Logical {
                        key: client::new_key(),
                        attempts: Vec::new(),
                        charge_id: None,
                    };
                    while Instant::now() < give_up {
                        let started = Instant::now();
                        let attempt = client::attempt(&client, &logical.key, &[]).await;
                        let reply = attempt.reply();
                        logical.attempts.push(Timed {
                            status: reply.map(|r| r.status),
                            problem: reply.and_then(|r| r.problem_type()),
                            elapsed: started.elapsed(),
                        });
                        if let Some(r) = reply.filter(|r| r.status == 201) {
                            logical.charge_id = Some(r.charge_id().to_string());
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    done.push(logical);
                }
                done
            })
        })
        .collect();
    let prober = {
        let (client, stop, outage) = (client.clone(), stop.clone(), outage.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let during = outage.load(Ordering::SeqCst);
                let started = Instant::now();
                let r = client.get("/readyz").await;
                seen.push((started.elapsed(), r.status, during));
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            seen
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    begin();
    outage.store(true, Ordering::SeqCst);
    let mut threads = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(OUTAGE / 4).await;
        threads.push(threads_of(server.pid()));
    }
    outage.store(false, Ordering::SeqCst);
    end();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let mut charges = Vec::new();
    for c in clients {
        charges.extend(
            within(Duration::from_secs(90), "the clients", c)
                .await
                .unwrap(),
        );
    }
    let ready = prober.await.unwrap();
    Run {
        charges,
        ready,
        threads,
    }
}

/// The checks every outage must pass; `count` runs a `SELECT count(*) …`
/// on the app's database, outside the path that failed.
fn assert_survived(what: &str, run: &Run, count: impl Fn(&str) -> i64) {
    let attempts: Vec<&Timed> = run.charges.iter().flat_map(|c| &c.attempts).collect();
    let slowest = attempts.iter().map(|a| a.elapsed).max().unwrap();
    let limit = REQUEST_TIMEOUT + Duration::from_secs(1);
    for c in &run.charges {
        for a in &c.attempts {
            assert!(
                a.status.is_some(),
                "{what}: an attempt got no response (key {})",
                c.key
            );
            assert!(
                a.elapsed <= limit,
                "{what}: an answer took {:?}, past the deadline plus 1 s",
                a.elapsed
            );
            assert!(
                matches!(a.status, Some(201 | 409 | 503)),
                "{what}: status {:?} ({:?})",
                a.status,
                a.problem
            );
        }
        assert!(
            c.charge_id.is_some(),
            "{what}: key {} never got its 201 after the outage",
            c.key
        );
    }
    let deadlines = attempts
        .iter()
        .filter(|a| a.problem.as_deref() == Some("/problems/deadline-exceeded"))
        .count();
    let unavailable = attempts.iter().filter(|a| a.status == Some(503)).count();
    let conflicts = attempts.iter().filter(|a| a.status == Some(409)).count();
    assert!(
        deadlines > 0,
        "{what}: no request ran into the deadline: the outage was not exercised"
    );
    let ready_max = run.ready.iter().map(|r| r.0).max().unwrap();
    assert!(
        ready_max <= READY_LIMIT,
        "{what}: /readyz took {ready_max:?}"
    );
    assert!(
        run.ready.iter().any(|r| r.2 && r.1 == 503),
        "{what}: /readyz never said 503 during the outage"
    );
    // Threads stuck on the database are bounded by the pool, not by the
    // requests that keep coming: no growth over the outage's second half.
    let (early, late) = (run.threads[1], run.threads[3]);
    assert!(
        late <= early + 8 && late < 128,
        "{what}: the server's threads grew during the outage: {:?}",
        run.threads
    );
    // The database after it: one charge per key, each the client's.
    let keys = run.charges.len() as i64;
    assert_eq!(
        count("SELECT count(*) FROM charges"),
        keys,
        "{what}: charges"
    );
    assert_eq!(
        count("SELECT count(*) FROM idempotency_keys WHERE status = 'completed'"),
        keys,
        "{what}: completed keys"
    );
    for c in &run.charges {
        let id = c.charge_id.as_deref().unwrap();
        assert_eq!(
            count(&format!(
                "SELECT count(*) FROM idempotency_keys k JOIN charges c ON c.id::text = k.response_body->>'id' \
                 WHERE k.key = '{}' AND c.id = '{id}'",
                c.key
            )),
            1,
            "{what}: key {} does not hold the client's charge {id}",
            c.key
        );
    }
    eprintln!(
        "{what}: {} logical charges by {CLIENTS} clients, {} attempts; slowest answer {:.2} s \
         (deadline {} s); 503s {unavailable} ({deadlines} deadline-exceeded), 409s {conflicts}; \
         /readyz slowest {:.2} s over {} probes; server threads during the outage {:?}; \
         after: {keys} charges, {keys} keys, 0 duplicated, 0 lost",
        run.charges.len(),
        attempts.len(),
        slowest.as_secs_f64(),
        REQUEST_TIMEOUT.as_secs(),
        ready_max.as_secs_f64(),
        run.ready.len(),
        run.threads,
    );
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    replication_tests_unavailable,
    ignore = "needs the PostgreSQL server binaries (apt-get install postgresql), root and runuser, to freeze a server of its own"
)]
async fn a_frozen_database_gets_every_request_answered_within_the_deadline_and_loses_nothing() {
    let node = PgNode::start();
    let mut server = start_server("frozen", &node.url("charges_frozen"));
    let node = Arc::new(node);
    let (freezing, thawing) = (node.clone(), node.clone());
    let run = under_an_outage(
        &server,
        move || assert!(freezing.freeze() > 1, "nothing to freeze"),
        move || {
            thawing.thaw();
        },
    )
    .await;
    server.assert_healthy();
    assert_survived("frozen database", &run, |sql| {
        node.psql("charges_frozen", sql).parse().unwrap()
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_black_holed_network_path_gets_every_request_answered_within_the_deadline_and_loses_nothing()
 {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let proxy = PausableProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_port(Some(proxy.addr.port())).unwrap();
    assert_eq!(
        url::Url::parse(&db.url).unwrap().port_or_known_default(),
        Some(5432),
        "the test database is on the local server"
    );
    let mut server = start_server("black-holed", url.as_str());
    let proxy = Arc::new(proxy);
    let (pausing, resuming) = (proxy.clone(), proxy.clone());
    let run = under_an_outage(&server, move || pausing.pause(), move || resuming.resume()).await;
    server.assert_healthy();
    assert_survived("black-holed network path", &run, |sql| {
        db.count(sql.trim_start_matches("SELECT count(*) FROM "))
    });
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duplicate_waiting_on_its_key_past_lock_timeout_hears_409_and_the_first_is_unaffected() {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let server = ServerProcess::start_named(
        "lock-timeout",
        &db.url,
        &[("DB_LOCK_TIMEOUT", "1s"), ("DEMO", "true")],
    );
    // The demo account: its `Demo-Fault: delay-commit` holds the first.
    let client: AppClient = server.client().demo();
    let body = client::body();
    // The first holds its transaction, and so its key's index entry, 3 s.
    let first = client.charge_with("k-held", &body, &[("demo-fault", "delay-commit=3000")]);
    let duplicate = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let r = client.charge("k-held", &body).await;
        (r, started.elapsed())
    };
    let (first, (duplicate, waited)) = tokio::join!(first, duplicate);
    assert_eq!(first.status, 201, "{}", first.body);
    duplicate.assert_problem(409, "idempotency-key-in-flight");
    assert_eq!(duplicate.header("retry-after"), Some("1"));
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_millis(2500),
        "the duplicate waited {waited:?}: about lock_timeout (1 s), not the first's 3 s"
    );
    // Retried after Retry-After: the first's charge, replayed.
    let retry = client.charge("k-held", &body).await;
    assert!(retry.replayed());
    assert_eq!(retry.charge_id(), first.charge_id());
    assert_eq!((db.charges(), db.keys()), (1, 1));
    eprintln!(
        "lock_timeout: the duplicate heard 409 after {:.2} s; the first answered 201 and its retry replayed it",
        waited.as_secs_f64()
    );
}
