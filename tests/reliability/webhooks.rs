//! Webhook delivery survives what charges survive (issue #48): pending
//! deliveries live in the database, so a sender killed with `kill -9`
//! loses none, and several instances on one database deliver each attempt
//! once between them (claims under `SKIP LOCKED`, slots per endpoint
//! counted across instances, records fenced on the claim's token).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::support::receiver::Receiver;
use crate::support::webhooks::{account_id, add_endpoint, add_event, public_id};
use crate::support::{ServerProcess, TEST_ACCOUNT, TestBackend, TestDatabase, free_port};

/// `charges serve` sending webhooks every 100 ms to loopback over http://,
/// retrying every second, each attempt within 1 s.
fn start(name: &str, db: &TestDatabase) -> ServerProcess {
    let env = [
        ("DEMO", "false"),
        ("WORKERS", "1"),
        ("POOL_SIZE", "6"),
        ("METRICS_BIND", "off"),
        ("RUST_LOG", "info,actix_server=warn"),
        ("NO_COLOR", "1"),
        ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("WEBHOOK_ALLOW_HTTP", "true"),
        ("WEBHOOK_POLL_INTERVAL", "100ms"),
        ("WEBHOOK_TIMEOUT", "1s"),
        (
            "WEBHOOK_RETRY_SCHEDULE",
            "0s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s,1s",
        ),
    ];
    ServerProcess::try_start_with(name, &["serve"], &db.url, &env).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits (bounded) until `SELECT count(*) FROM from_where` is at least `n`.
async fn until_at_least(db: &TestDatabase, from_where: &str, n: i64, limit: Duration) {
    let deadline = Instant::now() + limit;
    while db.count(from_where) < n {
        assert!(
            Instant::now() < deadline,
            "{from_where}: {} rows, not {n}",
            db.count(from_where)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_while_its_receiver_is_down_the_restarted_server_delivers_the_event() {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let mut first = start("server", &db);
    db.create_test_account();
    let account = account_id(&db, TEST_ACCOUNT);
    // Nothing listens there yet: every attempt is a refused connection.
    let port = free_port();
    add_endpoint(&db, account, &format!("http://127.0.0.1:{port}/hook"));
    let event = add_event(&db, account);
    until_at_least(
        &db,
        "webhook_attempts WHERE response_status IS NULL",
        2,
        Duration::from_secs(10),
    )
    .await;
    first.kill();
    assert_eq!(
        db.count("webhook_deliveries WHERE status = 'pending'"),
        1,
        "{}",
        first.logs()
    );

    let receiver = Receiver::start_on(port, vec![]).await;
    let _second = start("restarted", &db);
    until_at_least(
        &db,
        "webhook_deliveries WHERE status = 'succeeded'",
        1,
        Duration::from_secs(20),
    )
    .await;
    let got = receiver.received();
    assert!(!got.is_empty());
    assert!(
        got.iter()
            .all(|r| r.header("webhook-id") == public_id(event))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_database_deliver_every_event_to_every_endpoint_exactly_once() {
    const EVENTS: usize = 40;
    const ENDPOINTS: usize = 5;
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let servers: Vec<ServerProcess> = (0..3)
        .map(|i| start(&format!("instance {i}"), &db))
        .collect();
    db.create_test_account();
    let account = account_id(&db, TEST_ACCOUNT);
    let receiver = Receiver::start(vec![]).await;
    for n in 0..ENDPOINTS {
        add_endpoint(&db, account, &format!("{}?endpoint={n}", receiver.url()));
    }
    // Written while the three are claiming, as charges would.
    for _ in 0..EVENTS {
        add_event(&db, account);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let total = (EVENTS * ENDPOINTS) as i64;
    until_at_least(
        &db,
        "webhook_deliveries WHERE status = 'succeeded'",
        total,
        Duration::from_secs(60),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for r in receiver.received() {
        *seen
            .entry((r.header("webhook-id").to_owned(), r.path.clone()))
            .or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    assert_eq!(seen.len() as i64, total);
    assert_eq!(db.count("webhook_attempts"), total);
    let logs: String = servers.iter().map(ServerProcess::logs).collect();
    assert!(!logs.contains("claim taken over"), "{logs}");
}
