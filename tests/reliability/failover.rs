//! The database fails over, decided by a real high-availability manager:
//! pg_auto_failover (a monitor and two keeper-managed nodes on loopback,
//! `ha.rs`), two app instances on the multi-host URL the manager gives out,
//! retrying keyed clients. The test kills, restarts and asks; it never
//! promotes a node or changes a setting by hand.
//!
//! - Unplanned: `kill -9` of the primary's PostgreSQL and of its keeper (a
//!   lost machine) in the middle of the load; the monitor notices and
//!   promotes the secondary. Then the machine comes back (its keeper
//!   restarts) and the manager makes it a secondary, under load; a write
//!   probe on it must fail until then (no split brain).
//! - Planned: `pg_autoctl perform switchover` in the middle of the load.
//!   pg_auto_failover 2.0 has a race there that loses acknowledged writes
//!   (upstream #774); the test tells it apart by its keeper's log line.
//!
//! After each, on the new primary: every 201 a client received has its
//! charge and its completed key row with the client's id, no charge without
//! its key, every answer was a 201 or a 503; a replay of every key answers
//! it with the id its client holds. With synchronous replication (the
//! manager's default) nothing acknowledged is lost. The same unplanned run
//! with the secondary out of the replication quorum (asynchronous) is a
//! measurement: an acknowledged commit the standby had not received is
//! lost, and the replay then charges that key again, once, under a new id.
//!
//! Needs pg_auto_failover (Debian's `postgresql-15-auto-failover` and
//! `pg-auto-failover-cli`), root and `runuser` (pg_autoctl refuses root):
//! where they are missing when the tests are built, the tests are ignored
//! with that reason (see `build.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::client::{self, Charge, Retry};
use crate::ha::{DATABASE, Formation, NodeState, Replication};
use crate::server::{self, Config};
use crate::support::{AppClient, ServerProcess, TEST_ACCOUNT, TestDatabase};
use crate::within;

/// Clients charging at once, each pausing `PAUSE` between its charges, from
/// before the fault to after the database is whole again.
const CLIENTS: usize = 12;
const PAUSE: Duration = Duration::from_millis(100);
/// The fault comes once this many charges were answered 201.
const FAULT_AFTER: usize = 30;
/// How long a client keeps retrying one charge.
const RETRY_FOR: Duration = Duration::from_secs(90);
/// How long the primary's replication stream stalls before its machine is
/// lost (see `fail_over`).
const STALL: Duration = Duration::from_millis(300);

/// One formation at a time: three PostgreSQL servers and two app instances
/// each, on two cores, with one-second health checks.
static ONE_FORMATION_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn config() -> Config {
    Config {
        pool_size: 6,
        pool_timeout: "2s",
        workers: 2,
        demo_max_delayed: None,
    }
}

/// A formation and two app instances on the manager's URL.
struct Run {
    // Dropped first: the servers, then the formation.
    servers: Vec<ServerProcess>,
    clients: Arc<Vec<AppClient>>,
    formation: Arc<Formation>,
}

impl Run {
    fn start(replication: Replication) -> Run {
        let formation = Arc::new(Formation::start(replication));
        let url = formation.uri();
        // Written only where a write is taken: the split-brain probe's target.
        let primary = formation.nodes[formation.primary()].port;
        formation
            .psql(
                primary,
                DATABASE,
                "CREATE TABLE split_brain_probe (at timestamptz NOT NULL DEFAULT now())",
            )
            .unwrap();
        // Each instance runs the migrations on start (under an advisory lock).
        let servers: Vec<ServerProcess> = (0..2)
            .map(|i| server::start(&format!("instance {i}"), &url, &config()))
            .collect();
        // The account the load charges as, on the primary; on every node
        // before the load, so that no failover loses it.
        TestDatabase::create_test_account_at(&url);
        let has_it = format!("SELECT count(*) FROM accounts WHERE name = '{TEST_ACCOUNT}'");
        let deadline = Instant::now() + Duration::from_secs(10);
        for node in &formation.nodes {
            while formation.psql(node.port, DATABASE, &has_it).as_deref() != Ok("1") {
                assert!(
                    Instant::now() < deadline,
                    "{} never had the test account",
                    node.name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let clients = Arc::new(servers.iter().map(ServerProcess::client).collect());
        Run {
            servers,
            clients,
            formation,
        }
    }

    /// `f` on the formation, off the runtime's threads: the load and the
    /// probes go on meanwhile.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Formation) -> T + Send + 'static,
    ) -> T {
        let formation = self.formation.clone();
        tokio::task::spawn_blocking(move || f(&formation))
            .await
            .expect("a blocking formation call")
    }
}

/// One logical charge, retried with its key until answered, and when it
/// started and ended.
struct Done {
    charge: Charge,
    started: Instant,
    ended: Instant,
}

/// `CLIENTS` clients, each charging (every charge retried with its key
/// until answered) and pausing `PAUSE`, until `stop` (at most 1000 charges
/// each); `created` counts the 201s as they come.
async fn load(
    clients: Arc<Vec<AppClient>>,
    stop: Arc<AtomicBool>,
    created: Arc<AtomicUsize>,
) -> Vec<Done> {
    let deadline = Instant::now() + RETRY_FOR + Duration::from_secs(60);
    let client = |first: usize| {
        let (clients, stop, created) = (clients.clone(), stop.clone(), created.clone());
        async move {
            let mut done = Vec::new();
            while !stop.load(Ordering::SeqCst) && done.len() < 1000 {
                let n = first + CLIENTS * done.len();
                let retry = Retry {
                    max_attempts: 2000,
                    backoff: Duration::from_millis(100),
                    deadline: deadline.min(Instant::now() + RETRY_FOR),
                };
                let started = Instant::now();
                let charge =
                    client::charge_until_answered(&clients, n, client::new_key(), &retry, |_| {
                        Vec::new()
                    })
                    .await;
                if charge.answer().is_some_and(|r| r.status == 201) {
                    created.fetch_add(1, Ordering::SeqCst);
                }
                done.push(Done {
                    charge,
                    started,
                    ended: Instant::now(),
                });
                tokio::time::sleep(PAUSE).await;
            }
            done
        }
    };
    futures::future::join_all((0..CLIENTS).map(client))
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// Answers 503 in these charges' attempts.
fn unavailable<'c>(charges: impl Iterator<Item = &'c Charge>) -> usize {
    charges
        .flat_map(|c| c.attempts.iter().filter_map(|a| a.reply()))
        .filter(|r| r.status == 503)
        .count()
}

async fn wait_for_created(created: &AtomicUsize, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while created.load(Ordering::SeqCst) < count {
        assert!(Instant::now() < deadline, "no load before the fault");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn state<'s>(states: &'s [NodeState], name: &str) -> Option<&'s NodeState> {
    states.iter().find(|s| s.name == name)
}

/// What the database holds after a run, against what the clients got.
#[derive(Debug, Default)]
struct Outcome {
    /// Logical charges answered 201 (every one must be).
    acknowledged: usize,
    /// 503 answers along the way (every attempt of every charge).
    unavailable: usize,
    /// Attempts that got no answer at all (retried like a 503).
    unanswered: usize,
    /// 201s whose charge the new primary does not have.
    lost: usize,
    /// Charges on the new primary beyond one per key (a charge no key
    /// row's stored response names).
    duplicated: i64,
    /// Keys the replay pass charged again, under a new id.
    charged_again: usize,
}

/// The checks every run makes on the new primary (`port`), then the replay
/// pass: every key sent once more, as a client that lost track of its
/// answers would.
async fn check(run: &Run, port: u16, charges: &[Charge]) -> Outcome {
    let mut outcome = Outcome::default();
    for charge in charges {
        let answer = charge
            .answer()
            .unwrap_or_else(|| panic!("unanswered: {}", charge.history()));
        assert_eq!(answer.status, 201, "{}", charge.history());
        outcome.acknowledged += 1;
        outcome.unanswered += charge
            .attempts
            .iter()
            .filter(|a| a.reply().is_none())
            .count();
        for reply in charge.attempts.iter().filter_map(|a| a.reply()) {
            assert!(
                reply.status == 201 || reply.status == 503,
                "only 201 and 503 while the database fails over: {}",
                charge.history()
            );
            outcome.unavailable += usize::from(reply.status == 503);
        }
    }
    let psql = |sql: String| {
        let formation = run.formation.clone();
        async move {
            tokio::task::spawn_blocking(move || formation.psql(port, DATABASE, &sql))
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("on the new primary: {e}"))
        }
    };
    // Each run has a database of its own: every key row is this run's. A
    // key row names its charge in the response it stored.
    let key_rows = || async {
        psql(
            "SELECT k.key || ' ' || k.status || ' ' || c.id FROM idempotency_keys k \
             JOIN charges c ON c.id::text = k.response_body->>'id'"
                .to_owned(),
        )
        .await
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect::<HashMap<String, String>>()
    };
    let stored = key_rows().await;
    for charge in charges {
        let id = charge.answer().unwrap().charge_id();
        match stored.get(&charge.key) {
            Some(row) => assert_eq!(row, &format!("completed {id}"), "{}", charge.history()),
            None => outcome.lost += 1,
        }
    }
    outcome.duplicated = psql(
        "SELECT (SELECT count(*) FROM charges) \
         - (SELECT count(DISTINCT response_body->>'id') FROM idempotency_keys \
            WHERE response_body->>'id' IS NOT NULL)"
            .to_owned(),
    )
    .await
    .parse()
    .unwrap();
    assert_eq!(outcome.duplicated, 0, "charges without their key");

    let replays: Vec<(usize, client::Attempt)> = futures::stream::iter(charges.iter().enumerate())
        .map(|(i, charge)| {
            let clients = run.clients.clone();
            async move {
                (
                    i,
                    client::attempt(&clients[i % clients.len()], &charge.key, &[]).await,
                )
            }
        })
        .buffer_unordered(CLIENTS)
        .collect()
        .await;
    for (i, replay) in replays {
        let held = charges[i].answer().unwrap().charge_id();
        let reply = replay.reply().unwrap_or_else(|| panic!("{replay:?}"));
        assert_eq!(reply.status, 201, "{}", reply.body);
        if reply.replayed() {
            assert_eq!(reply.charge_id(), held);
        } else {
            assert_ne!(reply.charge_id(), held);
            outcome.charged_again += 1;
        }
    }
    // Every key now has its one charge, completed.
    let stored = key_rows().await;
    for charge in charges {
        let row = stored
            .get(&charge.key)
            .map(String::as_str)
            .unwrap_or_default();
        assert!(row.starts_with("completed "), "{}: {row:?}", charge.key);
    }
    outcome
}

/// What the old primary did on its way back.
#[derive(Debug)]
struct Rejoin {
    /// From its keeper's restart to the monitor holding it as secondary.
    took: Duration,
    /// Write attempts on it meanwhile, every one refused.
    refused_writes: usize,
    /// The new primary's `synchronous_standby_names`: alone, then with the
    /// old primary back as its secondary.
    standby_names: (String, String),
}

/// When the monitor did what, from the kill (its event log).
#[derive(Debug, Default)]
struct Timeline {
    /// The old primary marked unhealthy: the detection.
    unhealthy: Option<Duration>,
    /// The secondary told to prepare its promotion.
    promotion: Option<Duration>,
    /// The new primary reporting `wait_primary`: writable, the fence over.
    writable: Option<Duration>,
}

fn seconds(d: Option<Duration>) -> String {
    d.map_or_else(|| "?".to_owned(), |d| format!("{:.2} s", d.as_secs_f64()))
}

fn timeline(
    events: &[(std::time::SystemTime, String)],
    killed: std::time::SystemTime,
    old: &str,
    new: &str,
) -> Timeline {
    let at = |what: &dyn Fn(&str) -> bool| {
        events
            .iter()
            .find(|(_, description)| what(description))
            .and_then(|(t, _)| t.duration_since(killed).ok())
    };
    Timeline {
        unhealthy: at(&|d| d.contains(&format!("\"{old}\"")) && d.contains("marked as unhealthy")),
        promotion: at(&|d| d.contains(&format!("\"{new}\"")) && d.contains("to prepare_promotion")),
        writable: at(&|d| {
            d.starts_with("New state is reported by")
                && d.contains(&format!("\"{new}\""))
                && d.ends_with("\"wait_primary\"")
        }),
    }
}

/// The figures of an unplanned failover.
struct Unplanned {
    kill_to_first_201: Duration,
    timeline: Timeline,
    /// Answers 503 to the charges begun before the old primary's keeper
    /// restarted: the failover's.
    unavailable_during_failover: usize,
    /// Charges answered while the old primary rejoined.
    during_rejoin: usize,
    rejoin: Rejoin,
    outcome: Outcome,
}

/// The new primary's `synchronous_standby_names`, on `port`.
fn standby_names(f: &Formation, port: u16) -> String {
    f.psql(port, "postgres", "SHOW synchronous_standby_names")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The old primary (node `old`) rejoins: when its keeper restarted, and how
/// (`alone`: the new primary's `synchronous_standby_names` before).
async fn rejoin(run: &Run, old: usize, alone: String) -> (Instant, Rejoin) {
    let new = 1 - old;
    let (old_name, new_name) = (run.formation.nodes[old].name, run.formation.nodes[new].name);
    let (old_port, new_port) = (run.formation.nodes[old].port, run.formation.nodes[new].port);
    // The machine comes back: its keeper restarts. Until the monitor
    // has it as a secondary, a write on it must fail.
    let restarted = Instant::now();
    run.blocking(move |f| f.restart_keeper(old)).await;
    let mut refused_writes = 0;
    loop {
        let (write, states, recovering) = run
            .blocking(move |f| {
                (
                    f.psql(
                        old_port,
                        DATABASE,
                        "INSERT INTO split_brain_probe DEFAULT VALUES",
                    ),
                    f.states(),
                    f.psql(old_port, "postgres", "SELECT pg_is_in_recovery()"),
                )
            })
            .await;
        assert!(
            write.is_err(),
            "split brain: {old_name} took a write while {new_name} is the primary: {states:?}"
        );
        refused_writes += 1;
        if state(&states, old_name).is_some_and(|s| s.is("secondary"))
            && state(&states, new_name).is_some_and(|s| s.is("primary"))
            && recovering.as_deref() == Ok("t")
        {
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(90),
            "{old_name} did not rejoin as a secondary within 90 s: {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // With its secondary back, the primary waits for it again. Even in the
    // asynchronous run: being in the replication quorum is the standby's
    // setting, and the old primary was made with `--replication-quorum true`.
    let with_secondary = run.blocking(move |f| standby_names(f, new_port)).await;
    assert!(
        with_secondary.starts_with("ANY 1 ("),
        "{new_name}'s synchronous_standby_names with {old_name} back: {with_secondary:?}"
    );
    let rejoin = Rejoin {
        took: restarted.elapsed(),
        refused_writes,
        standby_names: (alone, with_secondary),
    };
    (restarted, rejoin)
}

/// The whole unplanned run: formation, instances, load; the primary's
/// replication stream stalls for `STALL` (a lagging link), then its machine
/// is lost (`kill -9` of its PostgreSQL and keeper) and the monitor fails
/// over; the machine comes back and rejoins; the load goes on throughout.
/// Then the checks and the replay pass. With synchronous replication the
/// stall holds every commit back, unacknowledged; with asynchronous
/// replication the primary goes on acknowledging what the standby never
/// gets.
async fn fail_over(replication: Replication) -> Unplanned {
    let _one = ONE_FORMATION_AT_A_TIME.lock().await;
    let mut run = tokio::task::block_in_place(|| Run::start(replication));

    let (stop, created) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let the_load = load(run.clients.clone(), stop.clone(), created.clone());
    let faults = async {
        wait_for_created(&created, FAULT_AFTER).await;
        let old = run.blocking(Formation::primary).await;
        let new = 1 - old;
        let (old_name, new_name) = (run.formation.nodes[old].name, run.formation.nodes[new].name);
        let new_port = run.formation.nodes[new].port;
        let stalled = run.blocking(move |f| f.stall_replication(old)).await;
        assert_eq!(stalled, 1, "one WAL sender on {old_name}");
        tokio::time::sleep(STALL).await;
        let (killed_at, killed) = (Instant::now(), std::time::SystemTime::now());
        run.blocking(move |f| f.kill_machine(old)).await;
        // The first new charge the new primary takes.
        let kill_to_first_201 = loop {
            let probe = client::attempt(&run.clients[0], &client::new_key(), &[]).await;
            if probe.reply().is_some_and(|r| r.status == 201) {
                break killed_at.elapsed();
            }
            assert!(
                killed_at.elapsed() < Duration::from_secs(60),
                "no 201 within 60 s of the kill: {probe:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Alone, the promoted node waits for no standby: the manager set that.
        let alone = run.blocking(move |f| standby_names(f, new_port)).await;
        assert_eq!(alone, "", "{new_name}'s synchronous_standby_names, alone");
        let (restarted, rejoin) = rejoin(&run, old, alone).await;
        // A second of load on the whole formation, then the end.
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::SeqCst);
        (old, killed, kill_to_first_201, restarted, rejoin)
    };
    let (done, (old, killed, kill_to_first_201, restarted, rejoin)) = within(
        Duration::from_secs(240),
        "the load, the failover and the rejoin",
        async { tokio::join!(the_load, faults) },
    )
    .await;
    let new = 1 - old;
    let (old_name, new_name) = (run.formation.nodes[old].name, run.formation.nodes[new].name);
    let (old_port, new_port) = (run.formation.nodes[old].port, run.formation.nodes[new].port);
    let unavailable_during_failover = unavailable(
        done.iter()
            .filter(|d| d.started < restarted)
            .map(|d| &d.charge),
    );
    let during_rejoin = done.iter().filter(|d| d.ended >= restarted).count();
    let charges: Vec<Charge> = done.into_iter().map(|d| d.charge).collect();

    // Nothing was written on the old primary that the new one lacks.
    let ids = |port: u16| {
        run.blocking(move |f| {
            f.psql(port, DATABASE, "SELECT id FROM charges")
                .unwrap_or_else(|e| panic!("{e}"))
                .lines()
                .map(str::to_owned)
                .collect::<HashSet<String>>()
        })
    };
    let (on_old, on_new) = (ids(old_port).await, ids(new_port).await);
    let only_on_old: Vec<&String> = on_old.difference(&on_new).collect();
    assert!(
        only_on_old.is_empty(),
        "charges on {old_name} that {new_name} lacks: {only_on_old:?}"
    );

    let outcome = check(&run, new_port, &charges).await;
    for server in &mut run.servers {
        server.assert_healthy();
    }
    let events = run.blocking(move |f| f.events_since(killed)).await;
    let figures = Unplanned {
        kill_to_first_201,
        timeline: timeline(&events, killed, old_name, new_name),
        unavailable_during_failover,
        during_rejoin,
        rejoin,
        outcome,
    };
    eprintln!(
        "failover by pg_auto_failover ({replication:?} replication), {CLIENTS} clients: {old_name}'s replication \
         stalled {STALL:?}, then kill -9 of its postgres and keeper after {FAULT_AFTER} charges; \
         from the kill to the first new 201: {:.2?} (the monitor's events: {old_name} unhealthy at {}, \
         {new_name} told to prepare its promotion at {}, writable at {}); {} answers 503 meanwhile; \
         {old_name} back as a secondary {:.2?} after its keeper restarted, {} write probes on it all refused, \
         {new_name}'s synchronous_standby_names {:?} alone, {:?} with it back, \
         {} charges answered meanwhile; charges acknowledged: {}, lost: {}, duplicated: {}, \
         charged again under a new id by the replay pass: {}; 503s over the run: {}, attempts unanswered: {}",
        figures.kill_to_first_201,
        seconds(figures.timeline.unhealthy),
        seconds(figures.timeline.promotion),
        seconds(figures.timeline.writable),
        figures.unavailable_during_failover,
        figures.rejoin.took,
        figures.rejoin.refused_writes,
        figures.rejoin.standby_names.0,
        figures.rejoin.standby_names.1,
        figures.during_rejoin,
        figures.outcome.acknowledged,
        figures.outcome.lost,
        figures.outcome.duplicated,
        figures.outcome.charged_again,
        figures.outcome.unavailable,
        figures.outcome.unanswered,
    );
    figures
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    replication_tests_unavailable,
    ignore = "needs root, runuser and the PostgreSQL server binaries (pg_autoctl runs PostgreSQL as the postgres user)"
)]
#[cfg_attr(
    auto_failover_unavailable,
    ignore = "needs pg_auto_failover: Debian's postgresql-15-auto-failover and pg-auto-failover-cli (.ci/run installs them)"
)]
async fn a_manager_fails_over_a_lost_primary_without_losing_an_acknowledged_charge() {
    let figures = fail_over(Replication::Synchronous).await;
    assert_eq!(figures.outcome.lost, 0, "acknowledged charges lost");
    assert_eq!(figures.outcome.charged_again, 0, "keys charged again");
    assert!(figures.kill_to_first_201 < Duration::from_secs(60));
}

/// A measurement: with the secondary out of the replication quorum the
/// primary acknowledges a commit before the standby has it, so a lost
/// machine takes the charges acknowledged during the stall with it. What
/// still holds is asserted inside `fail_over`.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    replication_tests_unavailable,
    ignore = "needs root, runuser and the PostgreSQL server binaries (pg_autoctl runs PostgreSQL as the postgres user)"
)]
#[cfg_attr(
    auto_failover_unavailable,
    ignore = "needs pg_auto_failover: Debian's postgresql-15-auto-failover and pg-auto-failover-cli (.ci/run installs them)"
)]
async fn a_manager_failing_over_to_an_asynchronous_standby_is_measured() {
    let figures = fail_over(Replication::Asynchronous).await;
    assert!(
        figures.outcome.lost > 0,
        "the stalled stream took no acknowledged charge with it"
    );
    assert_eq!(
        figures.outcome.lost, figures.outcome.charged_again,
        "each lost charge is charged again once by its replay"
    );
}

/// A planned switchover (`pg_autoctl perform switchover`) under load: no
/// charge fails for good, and nothing is lost, except where the manager's
/// known race (pg_auto_failover #774, below) shows in its log: then the loss
/// is printed as a measurement.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    replication_tests_unavailable,
    ignore = "needs root, runuser and the PostgreSQL server binaries (pg_autoctl runs PostgreSQL as the postgres user)"
)]
#[cfg_attr(
    auto_failover_unavailable,
    ignore = "needs pg_auto_failover: Debian's postgresql-15-auto-failover and pg-auto-failover-cli (.ci/run installs them)"
)]
async fn a_planned_switchover_fails_no_charge_that_its_retry_does_not_complete() {
    let _one = ONE_FORMATION_AT_A_TIME.lock().await;
    let mut run = tokio::task::block_in_place(|| Run::start(Replication::Synchronous));

    let (stop, created) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicUsize::new(0)),
    );
    let the_load = load(run.clients.clone(), stop.clone(), created.clone());
    let switchover = async {
        wait_for_created(&created, FAULT_AFTER).await;
        let old = run.blocking(Formation::primary).await;
        let started = Instant::now();
        let done = Arc::new(AtomicBool::new(false));
        let command = {
            let done = done.clone();
            run.blocking(move |f| {
                let result = f.perform_switchover();
                done.store(true, Ordering::SeqCst);
                result
            })
        };
        // Fresh charges every 20 ms from the start: the switch is the first
        // one that fails, and it ends with the first 201 after that.
        let probe = async {
            let mut first_failure: Option<Instant> = None;
            loop {
                let sent = Instant::now();
                let probe = client::attempt(&run.clients[0], &client::new_key(), &[]).await;
                let created = probe.reply().is_some_and(|r| r.status == 201);
                match (created, first_failure) {
                    (false, None) => first_failure = Some(sent),
                    (true, Some(failed)) => return Some((failed, Instant::now())),
                    (true, None) if done.load(Ordering::SeqCst) => return None,
                    _ => {}
                }
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "no 201 within 60 s of the switchover's start: {probe:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let (command, window) = tokio::join!(command, probe);
        let took = started.elapsed();
        command.unwrap_or_else(|e| panic!("{e}"));
        let window = window.map(|(failed, back)| (back - started, back - failed));
        // A second of load on the whole formation, then the end.
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, Ordering::SeqCst);
        (old, took, window)
    };
    let (done, (old, took, window)) = within(
        Duration::from_secs(180),
        "the load and the switchover",
        async { tokio::join!(the_load, switchover) },
    )
    .await;
    let charges: Vec<Charge> = done.into_iter().map(|d| d.charge).collect();
    let new = 1 - old;
    let (old_name, new_name) = (run.formation.nodes[old].name, run.formation.nodes[new].name);
    let states = run.blocking(Formation::states).await;
    assert!(
        state(&states, new_name).is_some_and(|s| s.is("primary"))
            && state(&states, old_name).is_some_and(|s| s.is("secondary")),
        "after the switchover: {states:?}"
    );
    let outcome = check(&run, run.formation.nodes[new].port, &charges).await;
    for server in &mut run.servers {
        server.assert_healthy();
    }
    // pg_auto_failover 2.0 (Debian bookworm's) has a race in this very
    // operation, upstream issue #774 (fixed by its PR #1165, in no Debian
    // package here): the monitor can move the draining primary back to
    // `wait_primary` (synchronous replication off) and then assign it
    // `demote_timeout`, which its keeper cannot reach from there. The old
    // primary then goes on acknowledging writes the promoted node never
    // gets, until the demote timeout: they are lost. Where its keeper logged
    // exactly that, the loss is the manager's and is reported, loudly, as
    // the measurement it is; anywhere else, nothing may be lost.
    let known_race = run
        .formation
        .keeper_log(old)
        .contains("does not know how to reach state \"demote_timeout\" from \"wait_primary\"");
    if known_race {
        eprintln!(
            "KNOWN MANAGER BUG (pg_auto_failover #774, fixed upstream by #1165, not in Debian's 2.0): \
             during this switchover {old_name} was put back in wait_primary and could not reach \
             demote_timeout; it acknowledged {} charges that {new_name} never received",
            outcome.lost
        );
        assert_eq!(
            outcome.lost, outcome.charged_again,
            "each lost charge is charged again once by its replay"
        );
    } else {
        assert_eq!(outcome.lost, 0, "acknowledged charges lost");
        assert_eq!(outcome.charged_again, 0, "keys charged again");
    }
    let window = window.map_or_else(
        || "no probe saw the switch".to_owned(),
        |(to_first_new_201, outage)| {
            format!(
                "from its start to the first new 201: {to_first_new_201:.2?} (writes refused for {outage:.2?})"
            )
        },
    );
    eprintln!(
        "switchover by pg_auto_failover ({old_name} to {new_name}), {CLIENTS} clients, after {FAULT_AFTER} charges: \
         `pg_autoctl perform switchover` took {took:.2?}; {window}; {} answers 503, {} attempts unanswered; charges acknowledged: {}, \
         failed for good: 0, lost: {}, duplicated: {}, charged again by the replay pass: {}{}",
        outcome.unavailable,
        outcome.unanswered,
        outcome.acknowledged,
        outcome.lost,
        outcome.duplicated,
        outcome.charged_again,
        if known_race {
            " (pg_auto_failover #774)"
        } else {
            ""
        },
    );
}
