//! The card network under faults (issue #22): a `charges network` process on
//! a database of its own, the API pointed at it through a proxy, and the
//! counts checked at both ledgers afterwards: one authorization per key at
//! the network, one charge per key here, every charge holding the
//! authorization the network made for its key, no authorization orphaned.
//!
//! - `kill -9` of the API with 50 charges between the network's answer and
//!   our commit (the proxy holds the network's answers: the network has
//!   authorized all 50, the API waits for the answers in phase 2, holding no
//!   connection). In both modes the keys were committed in progress in
//!   phase 1 (issue #27). Atomic: the clients' retries after the restart
//!   take the keys over once their lease ran out and make the network
//!   replay. Key-first: the recovery task finishes all 50 before any client
//!   retries, and the retries then replay.
//! - The same kill, then the account revoked before the restart: the
//!   recovery task charges nothing, stores a 403 for each key, and voids
//!   each authorization at the network.
//! - A network paused longer than `NETWORK_TIMEOUT`, under a lease the
//!   start-up check accepts: the first request's "nothing was stored" (503)
//!   stays true (nothing completes the key behind the client's back), and
//!   its retry gets the one charge. (A lease the pause could outlast is
//!   refused at start: `tests/api/startup.rs`.)
//! - A key taken over while phase 3 waits (a lock on `charges` held past a
//!   legal lease): the first request's answer is the new holder's (409, or
//!   its charge), never "nothing was stored".
//! - A lossy path: the proxy drops 30 % of the network's answers.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

use crate::proxy::{LossyHttpProxy, PausableProxy};
use crate::support::{AppClient, Captured, ServerProcess, TestBackend, TestDatabase};
use crate::within;

const ACCOUNT_KEY: &str = "sk_live_reliability_network";
/// The merchant key at the separate network (the API refuses the default,
/// public one for a separate network).
const NETWORK_KEY: &str = "sk_network_reliability";

/// `charges network` on its own database, killed on drop.
struct NetworkProcess {
    child: Child,
    addr: std::net::SocketAddr,
}

impl Drop for NetworkProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_network(db: &TestDatabase) -> NetworkProcess {
    let port = crate::support::free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_charges"))
        .arg("network")
        .env("NETWORK_DATABASE_URL", &db.url)
        .env("NETWORK_BIND", format!("127.0.0.1:{port}"))
        .env("NETWORK_API_KEY", NETWORK_KEY)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start charges network");
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "charges network did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    NetworkProcess { child, addr }
}

/// The API's database and the network's, on PostgreSQL, and `charges
/// network` on the second: what every test here starts from.
fn databases_and_network() -> (TestDatabase, TestDatabase, NetworkProcess) {
    let api_db = TestDatabase::create_for(TestBackend::Postgres);
    let network_db = TestDatabase::create_for(TestBackend::Postgres);
    let network = start_network(&network_db);
    (api_db, network_db, network)
}

/// [`start_api`] the first time, then the shop's account, which every
/// request here is made as (a restart finds it in the database).
fn start_shop(db: &TestDatabase, network_url: &str, extra: &[(&str, &str)]) -> ServerProcess {
    let api = start_api(db, network_url, extra);
    db.create_account("Shop", ACCOUNT_KEY);
    api
}

fn start_api(db: &TestDatabase, network_url: &str, extra: &[(&str, &str)]) -> ServerProcess {
    let mut env = vec![
        ("NETWORK_URL", network_url),
        ("NETWORK_API_KEY", NETWORK_KEY),
        ("POOL_SIZE", "60"),
        ("POOL_TIMEOUT", "5s"),
        ("REQUEST_TIMEOUT", "20s"),
        ("NETWORK_TIMEOUT", "15s"),
        ("DEMO", "false"),
        ("RUST_LOG", "info,actix_server=warn"),
    ];
    env.extend_from_slice(extra);
    ServerProcess::start_named("api", &db.url, &env)
}

/// The shortest lease the server starts with for the timeouts beside it
/// (`NETWORK_TIMEOUT` + `POOL_TIMEOUT` + 1 s): a key left in progress is
/// the recovery task's (or a retry's) 7 s after phase 1, and the network
/// call has 5 s, time enough for 50 charges to reach the network before a
/// kill.
const SHORT_LEASE: [(&str, &str); 3] = [
    ("IDEMPOTENCY_LEASE", "7s"),
    ("NETWORK_TIMEOUT", "5s"),
    ("POOL_TIMEOUT", "1s"),
];

/// `SHORT_LEASE` and `extra`.
fn short_lease<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    SHORT_LEASE.iter().chain(extra).copied().collect()
}

/// One of these tests at a time: each holds some 60 connections to the
/// local PostgreSQL (50 charges in flight, the network's own pool), and two
/// together pass its default `max_connections` of 100.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn charge(client: &AppClient, key: &str) -> Result<Captured, String> {
    let request = client.charge_request(
        ACCOUNT_KEY,
        key,
        &json!({"amount": 1000, "currency": "jpy"}),
        &[],
    );
    client.try_send(request).await
}

/// Retries `key` until a 201 (bounded); the 201.
async fn until_charged(client: &AppClient, key: &str) -> Captured {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match charge(client, key).await {
            Ok(r) if r.status == 201 => return r,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "{key} never charged: {:?}",
                    other.map(|r| r.summary())
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Both ledgers, and what every client holds: one charge per key, each
/// with the authorization the network made for it, no orphan.
fn assert_ledgers(api: &TestDatabase, network: &TestDatabase, held: &BTreeMap<String, Captured>) {
    let keys = held.len() as i64;
    assert_eq!(
        network.count("authorizations"),
        keys,
        "one authorization per key at the network"
    );
    assert_eq!(api.count("charges"), keys, "one charge per key here");
    let ids: BTreeSet<String> = held
        .values()
        .map(|r| r.json()["authorization_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids.len() as i64,
        keys,
        "a distinct authorization per charge"
    );
    for id in &ids {
        assert_eq!(
            network.count(&format!("authorizations WHERE id = '{id}'")),
            1,
            "the network has the charge's authorization {id}"
        );
        assert_eq!(
            api.count(&format!("charges WHERE authorization_id = '{id}'")),
            1,
            "{id} is one charge's"
        );
    }
    for (key, reply) in held {
        let charge = reply.charge_id();
        assert_eq!(
            api.count(&format!(
                "idempotency_keys k JOIN charges c ON c.id::text = k.response_body->>'id' \
                 WHERE k.key = '{key}' AND c.id = '{charge}'"
            )),
            1,
            "{key} holds the client's charge"
        );
    }
}

/// Sends `n` keyed charges at once while the proxy holds the network's
/// answers, waits until the network has authorized all of them, and kills
/// the API: every one of them is between the network's answer and our
/// commit. Returns the keys.
async fn kill_between_the_network_and_the_commit(
    api: &mut ServerProcess,
    proxy: &PausableProxy,
    network: &TestDatabase,
    n: usize,
) -> Vec<String> {
    proxy.pause_answers();
    let client = api.client();
    let keys: Vec<String> = (0..n).map(|i| format!("k-killed-{i}")).collect();
    let sent = keys.clone();
    let requests = tokio::spawn(async move {
        futures::future::join_all(sent.iter().map(|k| charge(&client, k))).await
    });
    within(
        Duration::from_secs(30),
        "the network authorizing them all",
        async {
            while network.count("authorizations") < n as i64 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    api.kill();
    // Every client lost its answer with the process.
    for r in requests.await.unwrap() {
        assert!(
            r.is_err() || r.as_ref().unwrap().status >= 500,
            "{:?}",
            r.map(|r| r.summary())
        );
    }
    proxy.resume();
    keys
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_networks_answer_and_our_commit_leaves_one_authorization_per_key() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (api_db, network_db, network) = databases_and_network();
    let proxy = PausableProxy::start(network.addr).await;
    let url = format!("http://{}", proxy.addr);
    let mut api = start_shop(&api_db, &url, &[]);
    let keys = kill_between_the_network_and_the_commit(&mut api, &proxy, &network_db, 50).await;
    // Atomic: no charge of ours committed; the network has all 50; the keys
    // were registered in progress (phase 1) before the network was asked.
    assert_eq!(
        (api_db.count("charges"), network_db.count("authorizations")),
        (0, 50)
    );
    assert_eq!(
        api_db.count("idempotency_keys WHERE status = 'in_progress'"),
        50
    );
    // A short lease, so that the retries may take the keys over soon (the
    // recovery task is off: the clients' retries do it here).
    let api = start_api(&api_db, &url, &short_lease(&[("RECOVERY_INTERVAL", "0s")]));
    let client = api.client();
    let held: BTreeMap<String, Captured> = futures::stream::iter(keys.iter())
        .map(|k| {
            let client = client.clone();
            async move { (k.clone(), until_charged(&client, k).await) }
        })
        .buffer_unordered(10)
        .collect()
        .await;
    assert_ledgers(&api_db, &network_db, &held);
    eprintln!(
        "network, kill -9 (atomic): 50 charges killed after the network authorized; after the restart and the clients' retries: {} authorizations at the network, {} charges here, 0 orphaned",
        network_db.count("authorizations"),
        api_db.count("charges")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn key_first_keys_left_by_a_crash_after_the_network_are_recovered_without_orphans() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (api_db, network_db, network) = databases_and_network();
    let proxy = PausableProxy::start(network.addr).await;
    let url = format!("http://{}", proxy.addr);
    let key_first = short_lease(&[
        ("IDEMPOTENCY_MODE", "key-first"),
        ("RECOVERY_INTERVAL", "500ms"),
    ]);
    let mut api = start_shop(&api_db, &url, &key_first);
    let keys = kill_between_the_network_and_the_commit(&mut api, &proxy, &network_db, 50).await;
    // Key-first: the keys are committed in progress, no charge yet.
    assert_eq!(
        api_db.count("idempotency_keys WHERE status = 'in_progress'"),
        50
    );
    assert_eq!(api_db.count("charges"), 0);
    let api = start_api(&api_db, &url, &key_first);
    // No client retries: the recovery task finishes them after the lease.
    let started = Instant::now();
    within(Duration::from_secs(30), "the recovery of 50 keys", async {
        while api_db.count("charges") < 50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let recovered_in = started.elapsed();
    assert_eq!(
        api_db.count("idempotency_keys WHERE status = 'in_progress'"),
        0
    );
    assert_eq!(
        network_db.count("authorizations"),
        50,
        "the network replayed"
    );
    // The clients' retries now replay the recovered charges.
    let client = api.client();
    let mut held = BTreeMap::new();
    for key in &keys {
        let reply = until_charged(&client, key).await;
        assert!(reply.replayed(), "{key}: the recovered charge, replayed");
        held.insert(key.clone(), reply);
    }
    assert_ledgers(&api_db, &network_db, &held);
    let recovered = api.log_lines("recovered a key left in progress").len();
    assert_eq!(recovered, 50, "each key recovered once");
    eprintln!(
        "network, kill -9 (key-first): 50 keys left in progress after the network authorized; recovered in {:.1} s after the restart (lease 7 s), before any retry; {} authorizations at the network, {} charges, 0 orphaned; the 50 retries replayed",
        recovered_in.as_secs_f64(),
        network_db.count("authorizations"),
        api_db.count("charges")
    );
}

/// `kill -9` between phases 2 and 3, in both modes: the network answered
/// every charge, and each waits at its INSERT (a lock on `charges` held by
/// the test) in phase 3's transaction. After the restart the key rows are
/// in progress, nothing of ours is committed; the clients' retries and the
/// recovery task finish them, the network replaying.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_the_networks_answer_and_phase_3_leaves_one_authorization_per_key_in_both_modes()
 {
    let _one = ONE_AT_A_TIME.lock().await;
    for mode in ["atomic", "key-first"] {
        let (api_db, network_db, network) = databases_and_network();
        let url = format!("http://{}", network.addr);
        let first = short_lease(&[("IDEMPOTENCY_MODE", mode), ("RECOVERY_INTERVAL", "0s")]);
        let mut api = start_shop(&api_db, &url, &first);
        let hold = api_db.hold_charge_writes();
        let client = api.client();
        let keys: Vec<String> = (0..20).map(|i| format!("k-phase-3-{i}")).collect();
        let sent = keys.clone();
        let requests = tokio::spawn(async move {
            futures::future::join_all(sent.iter().map(|k| charge(&client, k))).await
        });
        within(Duration::from_secs(30), "20 charges waiting in phase 3", async {
            while network_db.count("authorizations") < 20
                || api_db.count(
                    "pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
                ) < 20
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        api.kill();
        drop(hold);
        for r in requests.await.unwrap() {
            assert!(
                r.is_err() || r.as_ref().unwrap().status >= 500,
                "{mode}: {:?}",
                r.map(|r| r.summary())
            );
        }
        assert_eq!(
            api_db.count("charges"),
            0,
            "{mode}: phase 3 never committed"
        );
        assert_eq!(
            api_db.count("idempotency_keys WHERE status = 'in_progress'"),
            20,
            "{mode}: phase 1 did"
        );
        let second = short_lease(&[("IDEMPOTENCY_MODE", mode), ("RECOVERY_INTERVAL", "500ms")]);
        let api = start_api(&api_db, &url, &second);
        let client = api.client();
        let mut held = BTreeMap::new();
        for key in &keys {
            held.insert(key.clone(), until_charged(&client, key).await);
        }
        assert_ledgers(&api_db, &network_db, &held);
        eprintln!(
            "network, kill -9 between phases 2 and 3 ({mode}): 20 charges authorized and waiting to commit; after the restart {} authorizations, {} charges, 0 orphaned",
            network_db.count("authorizations"),
            api_db.count("charges")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_accounts_keys_left_in_phase_2_are_not_charged_by_recovery_and_their_authorizations_are_voided()
 {
    let _one = ONE_AT_A_TIME.lock().await;
    let (api_db, network_db, network) = databases_and_network();
    let proxy = PausableProxy::start(network.addr).await;
    let url = format!("http://{}", proxy.addr);
    // A short lease (no recovery task before the kill), so that the keys
    // are the recovery task's soon after the restart.
    let short = short_lease(&[("RECOVERY_INTERVAL", "0s")]);
    let mut api = start_shop(&api_db, &url, &short);
    kill_between_the_network_and_the_commit(&mut api, &proxy, &network_db, 10).await;
    api_db.execute("UPDATE accounts SET revoked_at = now() WHERE name = 'Shop'");
    let recovery = short_lease(&[("RECOVERY_INTERVAL", "500ms")]);
    let api = start_api(&api_db, &url, &recovery);
    within(Duration::from_secs(30), "the recovery of 10 keys", async {
        while api_db.count("idempotency_keys WHERE status = 'in_progress'") > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_eq!(api_db.count("charges"), 0, "nothing charged");
    assert_eq!(
        api_db.count("idempotency_keys WHERE response_status = 403 AND response_body->>'type' = '/problems/account-revoked'"),
        10,
        "each key's final answer"
    );
    // Both ledgers: no hold that no charge owns.
    assert_eq!(network_db.count("authorizations"), 10);
    within(Duration::from_secs(10), "the voids", async {
        while network_db.count("authorizations WHERE voided_at IS NOT NULL") < 10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    // Each is logged after its void: wait for the lines too.
    within(Duration::from_secs(5), "the recovery's log lines", async {
        while api.log_lines("recovered a key left in progress").len() < 10 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert_eq!(api.log_lines("recovered a key left in progress").len(), 10);
}

/// The security review's pause (6.5 s, longer than `NETWORK_TIMEOUT`), under
/// a lease the server starts with (its own 3 s lease beside a 5 s timeout is
/// refused at start now: `tests/api/startup.rs`). The first request hears
/// "nothing was stored" (503), and that stays true: nothing completes the
/// key behind the client's back; its retry makes the network replay.
#[tokio::test(flavor = "multi_thread")]
async fn a_network_paused_past_its_timeout_answers_nothing_was_stored_and_that_stays_true() {
    let _one = ONE_AT_A_TIME.lock().await;
    for mode in ["key-first", "atomic"] {
        let (api_db, network_db, network) = databases_and_network();
        let proxy = PausableProxy::start(network.addr).await;
        let url = format!("http://{}", proxy.addr);
        let env = short_lease(&[("IDEMPOTENCY_MODE", mode), ("RECOVERY_INTERVAL", "500ms")]);
        let api = start_shop(&api_db, &url, &env);
        proxy.pause_answers();
        let client = api.client();
        let first = charge(&client, "k-paused");
        let pause = async {
            tokio::time::sleep(Duration::from_millis(6500)).await;
            proxy.resume();
        };
        let (first, ()) = tokio::join!(first, pause);
        let first = first.expect("an answer");
        first.assert_problem(503, "network-unavailable");
        // Three recovery intervals after the pause: still nothing here, the
        // key free (the network authorized, and holds it for the retry).
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            (api_db.count("charges"), api_db.count("idempotency_keys")),
            (0, 0),
            "{mode}: nothing was stored, and nothing was since"
        );
        assert_eq!(network_db.count("authorizations"), 1, "{mode}");
        let retried = until_charged(&client, "k-paused").await;
        let mut held = BTreeMap::new();
        held.insert("k-paused".to_owned(), retried);
        assert_ledgers(&api_db, &network_db, &held);
        eprintln!(
            "{mode}: lease 7 s, network timeout 5 s, network paused 6.5 s: the first request answered 503 (nothing stored, true); its retry got the one charge"
        );
    }
}

/// A takeover under a legal lease: phase 3 waits (a lock on `charges` the
/// test holds) past the lease, the recovery task takes the key over and
/// waits there too. Once the lock is gone, the first request cannot
/// complete the key (not its lease any more) and answers the new holder's
/// answer, 409 or its charge: never "nothing was stored".
#[tokio::test(flavor = "multi_thread")]
async fn a_key_taken_over_while_phase_3_waits_answers_the_new_holders_answer_never_nothing_was_stored()
 {
    let _one = ONE_AT_A_TIME.lock().await;
    for mode in ["key-first", "atomic"] {
        let (api_db, network_db, network) = databases_and_network();
        let url = format!("http://{}", network.addr);
        // The shortest legal lease (1 s + 1 s + 1 s), and lock waits longer
        // than the test holds its lock.
        let env = [
            ("IDEMPOTENCY_MODE", mode),
            ("IDEMPOTENCY_LEASE", "3s"),
            ("NETWORK_TIMEOUT", "1s"),
            ("POOL_TIMEOUT", "1s"),
            ("DB_LOCK_TIMEOUT", "15s"),
            ("DB_STATEMENT_TIMEOUT", "16s"),
            ("RECOVERY_INTERVAL", "500ms"),
        ];
        let api = start_shop(&api_db, &url, &env);
        let hold = api_db.hold_charge_writes();
        let client = api.client();
        let first = tokio::spawn({
            let client = client.clone();
            async move { charge(&client, "k-taken").await }
        });
        // Two waiters at the lock: the first's phase 3, and the recovery
        // task's, which took the key over once the lease ran out.
        within(Duration::from_secs(12), "the takeover", async {
            while api_db.count(
                "pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
            ) < 2
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        drop(hold);
        let first = first.await.unwrap().expect("an answer");
        match first.status {
            201 => assert!(first.replayed(), "{mode}: the new holder's charge"),
            _ => first.assert_problem(409, "idempotency-key-in-flight"),
        }
        let retried = until_charged(&client, "k-taken").await;
        if first.status == 201 {
            assert_eq!(first.body, retried.body, "{mode}");
        }
        let mut held = BTreeMap::new();
        held.insert("k-taken".to_owned(), retried);
        assert_ledgers(&api_db, &network_db, &held);
        // The recovery task logs once it has committed.
        within(Duration::from_secs(5), "the recovery's log line", async {
            while api.log_lines("recovered a key left in progress").is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert_eq!(
            api.log_lines("recovered a key left in progress").len(),
            1,
            "{mode}"
        );
        eprintln!(
            "{mode}: lease 3 s, phase 3 held past it: the key was taken over and the first request answered {} (true); one charge, one authorization",
            first.status
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_path_that_drops_a_third_of_the_networks_answers_still_authorizes_once_per_key() {
    let _one = ONE_AT_A_TIME.lock().await;
    const KEYS: usize = 100;
    let (api_db, network_db, network) = databases_and_network();
    let lossy = LossyHttpProxy::start(network.addr, 300, 22).await;
    let api = start_shop(&api_db, &lossy.url, &[("NETWORK_TIMEOUT", "1s")]);
    let client = api.client();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("k-lossy-{i}")).collect();
    let held: BTreeMap<String, Captured> = within(
        Duration::from_secs(120),
        "the charges over a lossy path",
        futures::stream::iter(keys.iter())
            .map(|k| {
                let client = client.clone();
                async move { (k.clone(), until_charged(&client, k).await) }
            })
            .buffer_unordered(10)
            .collect(),
    )
    .await;
    assert_ledgers(&api_db, &network_db, &held);
    let (answers, lost) = (
        lossy.answers.load(std::sync::atomic::Ordering::SeqCst),
        lossy.lost.load(std::sync::atomic::Ordering::SeqCst),
    );
    assert!(
        lost * 5 >= answers,
        "the proxy lost {lost} of {answers} answers, not about 30 %"
    );
    eprintln!(
        "network, lossy path: {KEYS} keys, {answers} answers from the network of which {lost} were lost; {} authorizations at the network, {} charges, 0 orphaned",
        network_db.count("authorizations"),
        api_db.count("charges")
    );
}

/// One authorization per charge, whatever the lifetimes (issue #38, finding
/// 3): the API remembers its keys 3 s, a separate `charges network` its own
/// for 24 h by default. A retry after 4.5 s is a new request here, so it is
/// a new charge; the network, asked to keep its key no longer than ours
/// (`Idempotency-Key-Lifetime`), forgot it too, so the new charge gets an
/// authorization of its own instead of replaying the first one's.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_the_key_expired_is_a_new_charge_with_its_own_authorization() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (api_db, network_db, network) = databases_and_network();
    let url = format!("http://{}", network.addr);
    let api = start_shop(&api_db, &url, &[("IDEMPOTENCY_TTL", "3s")]);
    let client = api.client();
    let first = until_charged(&client, "k-short-lived").await;
    let again = until_charged(&client, "k-short-lived").await;
    assert!(again.replayed(), "within the TTL: the replay");
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let later = until_charged(&client, "k-short-lived").await;
    assert!(!later.replayed(), "past the TTL: a new request");
    let authorization = |c: &Captured| c.json()["authorization_id"].as_str().unwrap().to_owned();
    assert_ne!(
        authorization(&later),
        authorization(&first),
        "two charges never share one authorization"
    );
    assert_eq!(api_db.charges(), 2);
    assert_eq!(network_db.count("authorizations"), 2);
}

/// A decline through a separate `charges network` (issue #47): `kill -9`
/// while the network's decline is on its way back (the proxy holds it),
/// then the restart's recovery task finishes the key as a decline (the
/// network replays its stored 402 under the derived key): one failed
/// charge, no authorization, and the client's retry replays the 402 without
/// asking the network again.
#[tokio::test(flavor = "multi_thread")]
async fn a_decline_left_mid_call_by_a_kill_is_recovered_as_the_decline_and_replayed() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (api_db, network_db, network) = databases_and_network();
    let proxy = PausableProxy::start(network.addr).await;
    let url = format!("http://{}", proxy.addr);
    let recovering = short_lease(&[("RECOVERY_INTERVAL", "300ms")]);
    let mut api = start_shop(&api_db, &url, &recovering);
    let body = json!({"amount": 1000, "currency": "jpy", "payment_method": "pm_card_chargeDeclinedInsufficientFunds"});
    proxy.pause_answers();
    let client = api.client();
    let (sent, first_body) = (client.clone(), body.clone());
    let first = tokio::spawn(async move {
        sent.try_send(sent.charge_request(ACCOUNT_KEY, "k-declined-killed", &first_body, &[]))
            .await
    });
    within(Duration::from_secs(30), "the network deciding", async {
        while network_db.count("idempotency_keys WHERE response_status = 402") < 1 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    api.kill();
    assert!(
        first.await.unwrap().is_err(),
        "the client lost its answer with the process"
    );
    proxy.resume();
    assert_eq!(api_db.count("charges"), 0, "nothing of ours committed");
    let api = start_api(&api_db, &url, &recovering);
    within(
        Duration::from_secs(30),
        "the recovery of the declined key",
        async {
            while api_db.count("charges WHERE status = 'failed'") < 1 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
    // Had the retry asked the network, the network would register its key
    // again: its rows are gone, and stay gone.
    network_db.execute("DELETE FROM idempotency_keys");
    let client = api.client();
    let retry = client
        .send(client.charge_request(ACCOUNT_KEY, "k-declined-killed", &body, &[]))
        .await;
    retry.assert_problem(402, "card-declined");
    assert!(retry.replayed(), "the recovered decline, replayed");
    assert_eq!(retry.json()["decline_code"], "insufficient_funds");
    assert_eq!(
        (
            api_db.count("charges"),
            api_db.count("charges WHERE failure_code = 'insufficient_funds'"),
            network_db.count("authorizations"),
            network_db.count("idempotency_keys"),
        ),
        (1, 1, 0, 0)
    );
}
