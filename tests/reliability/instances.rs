//! Three server processes on one database, and a client (the test account,
//! a real one) that sends each charge to all of them at once, the first
//! attempt's answer lost on the way, and keeps retrying round-robin: one
//! charge per key, and every 201 for a key is the same bytes.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::join_all;

use crate::client::{self, Attempt, Charge, Retry};
use crate::proxy::LossyHttpProxy;
use crate::server::{self, Config};
use crate::support::{AppClient, Captured, ServerProcess, TestBackend, TestDatabase};
use crate::within;

const INSTANCES: usize = 3;
const KEYS: usize = 150;
const CONCURRENCY: usize = 10;

/// Starts the instances `ids` at the same moment (as a deployment does).
fn start_together(url: &str, ids: std::ops::Range<usize>) -> Vec<Result<ServerProcess, String>> {
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(ids.len()));
    let threads: Vec<_> = ids
        .map(|i| {
            let (url, barrier) = (url.to_owned(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                server::try_start(&format!("instance {i}"), &url, &config())
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().unwrap()).collect()
}

/// All of `started` came up, and each one, and all of them together with one
/// key, charge exactly once.
async fn assert_all_up_and_charging(
    db: &TestDatabase,
    started: Vec<Result<ServerProcess, String>>,
) {
    let failed: Vec<&String> = started.iter().filter_map(|s| s.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {} instances started together failed to start:\n{}",
        failed.len(),
        started.len(),
        failed
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let mut servers: Vec<ServerProcess> = started.into_iter().map(Result::unwrap).collect();
    db.create_test_account();
    let clients: Vec<AppClient> = servers.iter().map(ServerProcess::client).collect();
    for (server, api) in servers.iter().zip(&clients) {
        let attempt = client::attempt(api, &client::new_key(), &[]).await;
        assert_eq!(
            attempt.reply().map(|r| r.status),
            Some(201),
            "{}: {attempt:?}",
            server.name
        );
    }
    let shared = client::new_key();
    let (_proxies, lossy) = losing_every_answer(&servers).await;
    let charge = spread(&clients, &lossy, 0, shared.clone()).await;
    assert!(
        charge
            .attempts
            .iter()
            .any(|a| a.reply().is_some_and(|r| r.status == 201)),
        "{}",
        charge.history()
    );
    assert_eq!(db.charges(), servers.len() as i64 + 1);
    db.assert_consistent();
    for server in &mut servers {
        server.assert_healthy();
    }
}

/// A new deployment: three instances start at the same moment on a new,
/// empty database, and all three run the migrations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_started_together_on_an_empty_database_all_come_up() {
    let db = TestDatabase::create_for(TestBackend::Postgres);
    let started = start_together(&db.url, 0..INSTANCES);
    within(
        Duration::from_secs(20),
        "the charges",
        assert_all_up_and_charging(&db, started),
    )
    .await;
}

/// The same, on a database that does not exist yet: all three create it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_started_together_on_a_missing_database_all_come_up() {
    let db = TestDatabase::reserve_for(TestBackend::Postgres);
    let started = start_together(&db.url, 0..INSTANCES);
    within(
        Duration::from_secs(20),
        "the charges",
        assert_all_up_and_charging(&db, started),
    )
    .await;
}

fn config() -> Config {
    Config {
        pool_size: 5,
        pool_timeout: "5s",
        workers: 2,
        // The API alone: every request is the test account's.
        demo_max_delayed: None,
    }
}

/// One logical charge from an impatient client, as the test account (a real
/// one): the first attempt goes to instance `first` through a proxy that
/// loses every answer (the instance commits; the client hears nothing);
/// 15 ms and 30 ms later the same request goes to the two other instances;
/// then, until a 201, round-robin retries. `lossy[i]` reaches instance `i`
/// through such a proxy, `servers[i]` directly.
async fn spread(servers: &[AppClient], lossy: &[AppClient], first: usize, key: String) -> Charge {
    let concurrent = (0..INSTANCES).map(|n| {
        let i = (first + n) % INSTANCES;
        let api = if n == 0 {
            lossy[i].clone()
        } else {
            servers[i].clone()
        };
        let key = key.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(15 * n as u64)).await;
            client::attempt(&api, &key, &[]).await
        }
    });
    let mut attempts = join_all(concurrent).await;
    if !attempts
        .iter()
        .any(|a| a.reply().is_some_and(|r| r.status == 201))
    {
        let retry = Retry {
            max_attempts: 10,
            backoff: Duration::from_millis(50),
            deadline: Instant::now() + Duration::from_secs(10),
        };
        let rest = client::charge_until_answered(
            servers,
            first + INSTANCES,
            key.clone(),
            &retry,
            |_| vec![],
        )
        .await;
        attempts.extend(rest.attempts);
    }
    Charge { key, attempts }
}

/// A client of each server through a proxy that loses every answer.
async fn losing_every_answer(servers: &[ServerProcess]) -> (Vec<LossyHttpProxy>, Vec<AppClient>) {
    let mut proxies = Vec::new();
    for (i, server) in servers.iter().enumerate() {
        proxies.push(LossyHttpProxy::start(server.addr(), 1000, i as u64).await);
    }
    let clients = proxies.iter().map(|p| AppClient::new(&p.url)).collect();
    (proxies, clients)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_database_make_one_charge_per_key() {
    let started = Instant::now();
    let db = TestDatabase::create_for(TestBackend::Postgres);
    // The first start runs the migrations; the two others start together
    // (see the start-up tests below for all three at once).
    let mut servers = vec![server::start("instance 0", &db.url, &config())];
    for started in start_together(&db.url, 1..INSTANCES) {
        servers.push(started.unwrap_or_else(|e| panic!("{e}")));
    }
    db.create_test_account();
    // The test account's: every charge's first answer is lost on the way.
    let clients: Vec<AppClient> = servers.iter().map(ServerProcess::client).collect();
    let (_proxies, lossy) = losing_every_answer(&servers).await;

    let charges: Vec<Charge> = within(
        Duration::from_secs(45),
        "the charges across three instances",
        futures::stream::iter(
            (0..KEYS).map(|i| spread(&clients, &lossy, i % INSTANCES, client::new_key())),
        )
        .buffer_unordered(CONCURRENCY)
        .collect(),
    )
    .await;

    let rows = db.key_rows();
    let mut replays = 0;
    for charge in &charges {
        let ok: Vec<&Captured> = charge
            .attempts
            .iter()
            .filter_map(Attempt::reply)
            .filter(|r| r.status == 201)
            .collect();
        assert!(
            !ok.is_empty(),
            "{} never got a 201: {}",
            charge.key,
            charge.history()
        );
        for r in &ok {
            assert_eq!(
                r.body, ok[0].body,
                "{}: two instances answered different charges",
                charge.key
            );
        }
        assert!(
            ok.iter().filter(|r| !r.replayed()).count() <= 1,
            "{}: executed twice",
            charge.key
        );
        replays += ok.iter().filter(|r| r.replayed()).count();
        // Nothing but 201s and the lost answers.
        for attempt in &charge.attempts {
            let summary = attempt.summary();
            assert!(
                summary == "201" || summary == "no response",
                "{}: {}",
                charge.key,
                charge.history()
            );
        }
        assert_eq!(
            rows[&charge.key].charge_id,
            Some(ok[0].charge_id()),
            "{}",
            charge.key
        );
    }
    assert_eq!(db.charges(), KEYS as i64, "one charge per key");
    assert_eq!(rows.len(), KEYS);
    db.assert_consistent();
    for server in &mut servers {
        server.assert_healthy();
    }
    eprintln!(
        "three instances: {KEYS} keys, {replays} replayed 201s, {:?}",
        started.elapsed()
    );
}

/// Three `charges serve` instances on one database, as a real account, with
/// every default (no card network: each charge is one transaction) and with
/// `NETWORK_URL=in-process` (each instance runs a network of its own on one
/// shared ledger, the merchant key kept there): every keyed charge on every
/// instance is a 201, and a storm on one key across all three is one charge
/// (issue #37: the last instance to start used to take the ledger's
/// merchant key from the others, whose every charge then failed with 503).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_charge_on_every_instance_with_and_without_an_in_process_network() {
    for network in [None, Some("in-process")] {
        let (db, ledger) = (
            TestDatabase::create_for(TestBackend::Postgres),
            TestDatabase::create_for(TestBackend::Postgres),
        );
        let env: Vec<(&str, &str)> = match network {
            None => vec![("NETWORK_URL", crate::support::server::UNSET)],
            Some(url) => vec![("NETWORK_URL", url), ("NETWORK_DATABASE_URL", &ledger.url)],
        };
        let mut servers: Vec<ServerProcess> = (0..INSTANCES)
            .map(|i| {
                ServerProcess::try_start_with(&format!("instance {i}"), &["serve"], &db.url, &env)
                    .unwrap_or_else(|e| panic!("{e}"))
            })
            .collect();
        db.create_test_account();
        let clients: Vec<AppClient> = servers.iter().map(ServerProcess::client).collect();
        for (i, api) in clients.iter().enumerate() {
            for n in 0..5 {
                let charge = api
                    .charge(
                        format!("k-{i}-{n}").as_str(),
                        &crate::support::charge_body(),
                    )
                    .await;
                assert_eq!(
                    charge.status, 201,
                    "{network:?}, instance {i}: {}",
                    charge.body
                );
                assert_eq!(
                    charge.json()["authorization_id"].is_string(),
                    network.is_some(),
                    "{}",
                    charge.body
                );
            }
        }
        let storm = join_all((0..30).map(|n| {
            let api = clients[n % INSTANCES].clone();
            async move { api.charge("k-storm", &crate::support::charge_body()).await }
        }))
        .await;
        for reply in &storm {
            assert_eq!(reply.status, 201, "{network:?}: {}", reply.body);
            assert_eq!(reply.body, storm[0].body, "one charge for the key");
        }
        assert_eq!(db.charges(), 3 * 5 + 1);
        if network.is_some() {
            assert_eq!(
                ledger.count("authorizations"),
                3 * 5 + 1,
                "one authorization each"
            );
        }
        for server in &mut servers {
            server.assert_healthy();
        }
    }
}
