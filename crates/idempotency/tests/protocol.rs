//! The protocol on a real database, without HTTP, on both backends: each
//! test is written once, generic over the connection type, and runs as
//! `on_postgres::<name>` and `on_sqlite::<name>` (see `support`).
//!
//! The operations write `orders`, the tests' own table: a test counts its
//! rows to tell that an operation ran once, and reads the key row to tell
//! what the protocol committed. A worker that dies is a hook that fails
//! (`after_key_committed`) or a foreign call that stops as a dead process
//! would (a panic, no unwinding cleanup of the key), as the app's demo does.

mod support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idempotency::{
    Error, Hooks, KeyedRequest, Mode, Operation, Outcome, Policy, RecentKeys, SavedResponse,
};
use serde_json::{Value, json};
use support::{TestConn, TestDb};

const ACCOUNT: i64 = 7;
const PATH: &str = "/orders";
/// The foreign step's name, kept in the key row.
const STEP: &str = "payments-network";
/// A lease that outlives any step of a test on a loaded machine.
const LONG_LEASE: Duration = Duration::from_secs(30);
/// A lease a test waits out.
const SHORT_LEASE: Duration = Duration::from_millis(300);

// ---------------------------------------------------------------- helpers

/// A request's identity: its body, and its fingerprint (one per body here).
struct Req {
    key: String,
    body: Value,
    fingerprint: String,
}

impl Req {
    fn new(key: &str, amount: i64) -> Req {
        let body = json!({ "amount": amount });
        Req {
            key: key.to_owned(),
            fingerprint: idempotency::Fingerprint::of("POST", PATH, &body)
                .as_str()
                .to_owned(),
            body,
        }
    }

    fn keyed(&self) -> KeyedRequest<'_> {
        self.keyed_for(ACCOUNT)
    }

    fn keyed_for(&self, account_id: i64) -> KeyedRequest<'_> {
        KeyedRequest::new(account_id, &self.key, "POST", PATH, &self.body)
    }
}

/// The response an order `id` answers: what is stored and replayed.
fn created(id: &str, amount: i64) -> SavedResponse {
    SavedResponse {
        status: 201,
        headers: [("location".to_owned(), format!("/orders/{id}"))].into(),
        body: json!({ "object": "order", "id": id, "amount": amount }),
    }
}

fn order(id: &str, amount: i64) -> (i64, String, i64) {
    (ACCOUNT, id.to_owned(), amount)
}

/// The operation: writes order `id` and answers [`created`]; may fail
/// after its write (to show it rolled back), or wait on a signal inside
/// its transaction; may carry a foreign step.
struct PlaceOrder {
    id: String,
    amount: i64,
    /// How many times `run` was called.
    runs: usize,
    /// Answer this error after the write.
    fail: Option<fn() -> Error>,
    /// Called inside the transaction, after the write (a test's pause).
    inside: Option<Box<dyn FnMut() + Send>>,
    step: Option<Network>,
    /// The response announced before anything is written.
    announced: Option<SavedResponse>,
}

impl PlaceOrder {
    fn new(id: &str, amount: i64) -> PlaceOrder {
        PlaceOrder {
            id: id.to_owned(),
            amount,
            runs: 0,
            fail: None,
            inside: None,
            step: None,
            announced: None,
        }
    }

    fn failing(mut self) -> PlaceOrder {
        self.fail = Some(|| Error::Dependency("the warehouse said no".into()));
        self
    }

    fn pausing(mut self, inside: impl FnMut() + Send + 'static) -> PlaceOrder {
        self.inside = Some(Box::new(inside));
        self
    }

    fn with_step(mut self, step: Network) -> PlaceOrder {
        self.step = Some(step);
        self
    }

    fn announcing(mut self, response: SavedResponse) -> PlaceOrder {
        self.announced = Some(response);
        self
    }
}

impl<C: TestConn> Operation<C> for PlaceOrder {
    fn run(&mut self, tx: &mut C) -> Result<SavedResponse, Error> {
        self.runs += 1;
        tx.insert_order(ACCOUNT, &self.id, self.amount)?;
        if let Some(inside) = &mut self.inside {
            inside();
        }
        if let Some(fail) = self.fail {
            return Err(fail());
        }
        Ok(created(&self.id, self.amount))
    }

    fn known_response(&self) -> Option<&SavedResponse> {
        self.announced.as_ref()
    }

    fn foreign_step(&self) -> Option<&str> {
        self.step.as_ref().map(|s| s.name)
    }

    fn call(&mut self) -> Result<(), Error> {
        self.step.as_mut().map_or(Ok(()), Network::call)
    }

    fn settle(&mut self, stored: &SavedResponse) -> Result<(), Error> {
        self.step.as_mut().map_or(Ok(()), |s| s.settle(stored))
    }
}

/// What the foreign service saw: calls, and the answers it was settled with.
#[derive(Default)]
struct Seen {
    calls: usize,
    settled: Vec<SavedResponse>,
}

/// A foreign step (a call no rollback undoes) that counts its calls; like
/// the app's card network call, it may stop as a dead worker would once
/// the other service has done its part.
struct Network {
    /// The service it calls: [`STEP`] unless told otherwise.
    name: &'static str,
    seen: Arc<Mutex<Seen>>,
    /// The connections' flag: a call must never hold one.
    checked_out: Arc<std::sync::atomic::AtomicBool>,
    /// Answer this error instead of calling.
    down: bool,
    /// Stop as a dead process would right after the call answered (a
    /// panic, as the app's demo's `abandon-after-network`).
    dies_after_the_call: bool,
    /// Called while the other service works on the call (a test's pause).
    during: Option<Box<dyn FnMut() + Send>>,
}

impl Network {
    fn new<C>(seen: &Arc<Mutex<Seen>>, conns: &support::Conns<'_, C>) -> Network {
        Network {
            name: STEP,
            seen: seen.clone(),
            checked_out: conns.checked_out.clone(),
            down: false,
            dies_after_the_call: false,
            during: None,
        }
    }

    fn dying_after_the_call(mut self) -> Network {
        self.dies_after_the_call = true;
        self
    }

    fn call(&mut self) -> Result<(), Error> {
        assert!(
            !self.checked_out.load(Ordering::SeqCst),
            "the foreign step was called holding a connection"
        );
        if self.down {
            return Err(Error::Dependency("the network did not answer".into()));
        }
        self.seen.lock().unwrap().calls += 1;
        if let Some(during) = &mut self.during {
            during();
        }
        if self.dies_after_the_call {
            // No panic message: resume_unwind skips the panic hook.
            std::panic::resume_unwind(Box::new("the worker died after the foreign call"));
        }
        Ok(())
    }

    fn settle(&mut self, stored: &SavedResponse) -> Result<(), Error> {
        self.seen.lock().unwrap().settled.push(stored.clone());
        Ok(())
    }
}

/// A fault at one of the hooks' points.
#[derive(Clone, Copy)]
enum Fault {
    /// The transaction fails before COMMIT.
    FailBeforeCommit,
    /// Key-first and phases: the worker stops right after the key's commit
    /// (the key stays in progress: nothing releases it).
    DieAfterKeyCommitted,
}

/// A fault's error: the hook's own type, which the protocol hands back
/// boxed in [`Error::Hook`].
#[derive(Debug)]
struct Injected(&'static str);

impl std::fmt::Display for Injected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "injected failure: {}", self.0)
    }
}

impl std::error::Error for Injected {}

impl Hooks for Fault {
    fn before_commit(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match self {
            Fault::FailBeforeCommit => Err(Box::new(Injected("fail-before-commit"))),
            Fault::DieAfterKeyCommitted => Ok(()),
        }
    }

    fn after_key_committed(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        match self {
            Fault::DieAfterKeyCommitted => Err(Box::new(Injected("the worker died"))),
            Fault::FailBeforeCommit => Ok(()),
        }
    }
}

/// The request was stopped by a [`Fault`], its error handed back as it was.
#[track_caller]
fn assert_injected(outcome: &Result<Outcome, Error>) {
    assert!(
        matches!(outcome, Err(Error::Hook(e)) if e.downcast_ref::<Injected>().is_some()),
        "{outcome:?}"
    );
}

fn policy(mode: Mode, lease: Duration) -> Policy {
    Policy {
        lease,
        ..Policy::new(mode)
    }
}

fn with_fault(mut policy: Policy, fault: Fault) -> Policy {
    policy.hooks = vec![Arc::new(fault)];
    policy
}

/// Counts what the protocol reports.
#[derive(Default)]
struct Counted {
    purged: Mutex<Vec<u64>>,
    conflicts: AtomicUsize,
}

impl Hooks for Counted {
    fn key_conflict(&self, _waited: Duration) {
        self.conflicts.fetch_add(1, Ordering::SeqCst);
    }

    fn keys_purged(&self, rows: u64) {
        self.purged.lock().unwrap().push(rows);
    }
}

fn executed(outcome: Result<Outcome, Error>) -> SavedResponse {
    match outcome {
        Ok(Outcome::Executed(response)) => response,
        other => panic!("expected Executed, got {other:?}"),
    }
}

fn replayed(outcome: Result<Outcome, Error>) -> SavedResponse {
    match outcome {
        Ok(Outcome::Replayed(response)) => response,
        other => panic!("expected Replayed, got {other:?}"),
    }
}

#[track_caller]
fn assert_completed<C: TestConn>(db: &TestDb<C>, key: &str, status: i64) {
    let row = db.key_row(ACCOUNT, key).expect("the key has a row");
    assert_eq!(
        (row.status.as_str(), row.response_status),
        ("completed", Some(status)),
        "{key}: {row:?}"
    );
}

#[track_caller]
fn assert_in_progress<C: TestConn>(db: &TestDb<C>, key: &str) {
    let row = db.key_row(ACCOUNT, key).expect("the key has a row");
    assert_eq!(
        (row.status.as_str(), row.response_status),
        ("in_progress", None),
        "{key}: {row:?}"
    );
}

// ----------------------------------------------------------------- atomic

crate::on_both_backends!(
    atomic_a_first_request_executes_once_and_its_retry_replays_it,
    atomic_another_request_under_a_used_key_is_a_mismatch,
    atomic_an_operation_that_fails_rolls_back_its_key_row_too,
    atomic_a_response_announced_in_advance_is_written_with_the_key,
    atomic_a_concurrent_duplicate_waits_for_the_first_and_replays_it,
    atomic_a_concurrent_duplicate_runs_as_the_first_when_the_first_rolls_back,
    key_first_a_concurrent_duplicate_is_in_flight_at_once,
    key_first_a_key_left_in_progress_is_in_flight_then_taken_over_after_its_lease,
    key_first_an_operation_that_fails_releases_its_key,
    recover_finishes_a_stuck_key_once,
    phases_call_the_foreign_step_once_and_a_retry_replays_without_calling_it,
    phases_a_worker_dead_after_the_foreign_call_is_recovered_by_calling_it_again,
    phases_a_failed_foreign_call_releases_the_key,
    phases_in_atomic_mode_a_duplicate_waits_for_the_first_and_replays_it,
    phases_a_duplicate_is_in_flight_at_its_deadline_or_at_once_in_key_first_mode,
    close_unrecoverable_gives_a_stuck_key_a_stored_answer,
    purge_expired_deletes_expired_keys_only_and_reports_them,
    an_expired_key_is_free_for_any_request_before_it_is_purged,
    the_hint_replays_a_retry_from_a_read_alone_and_never_a_purged_key,
);

fn atomic_a_first_request_executes_once_and_its_retry_replays_it<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let metrics = Arc::new(Counted::default());
    let policy = Policy {
        hooks: vec![metrics.clone()],
        ..Policy::new(Mode::Atomic)
    };
    let req = Req::new("order-1", 500);

    let mut first = PlaceOrder::new("o1", 500);
    let response = executed(policy.execute(&mut db.connections(), &req.keyed(), &mut first));
    assert_eq!(response, created("o1", 500));
    assert_eq!(first.runs, 1);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
    assert_eq!(metrics.conflicts.load(Ordering::SeqCst), 0);

    // The retry's operation would write another order: it must not run.
    let mut retry = PlaceOrder::new("o1-again", 500);
    let again = replayed(policy.execute(&mut db.connections(), &req.keyed(), &mut retry));
    assert_eq!(again, response, "the replay is the first answer, exactly");
    assert_eq!(retry.runs, 0);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_eq!(
        metrics.conflicts.load(Ordering::SeqCst),
        1,
        "the retry's INSERT found the row"
    );

    // The same key is another key for another account.
    let mut other_account = PlaceOrder::new("o2", 500);
    executed(policy.execute(
        &mut db.connections(),
        &req.keyed_for(ACCOUNT + 1),
        &mut other_account,
    ));
    assert_eq!(other_account.runs, 1);
    assert_eq!(db.keys().len(), 2);
}

fn atomic_another_request_under_a_used_key_is_a_mismatch<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = Policy::new(Mode::Atomic);
    executed(policy.execute(
        &mut db.connections(),
        &Req::new("order-1", 500).keyed(),
        &mut PlaceOrder::new("o1", 500),
    ));

    let mut other = PlaceOrder::new("o2", 900);
    let outcome = policy.execute(
        &mut db.connections(),
        &Req::new("order-1", 900).keyed(),
        &mut other,
    );
    assert!(matches!(outcome, Ok(Outcome::Mismatch)), "{outcome:?}");
    assert_eq!(other.runs, 0);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
}

fn atomic_an_operation_that_fails_rolls_back_its_key_row_too<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = Policy::new(Mode::Atomic);
    let req = Req::new("order-1", 500);

    // The operation wrote its order, then failed: neither the order nor
    // the key row stays.
    let mut failing = PlaceOrder::new("o1", 500).failing();
    let outcome = policy.execute(&mut db.connections(), &req.keyed(), &mut failing);
    assert!(matches!(outcome, Err(Error::Dependency(_))), "{outcome:?}");
    assert_eq!(failing.runs, 1);
    assert_eq!(db.orders(), vec![]);
    assert_eq!(db.key_row(ACCOUNT, "order-1"), None);

    // A failure at COMMIT's door (a hook) rolls back the same.
    let faulty = with_fault(Policy::new(Mode::Atomic), Fault::FailBeforeCommit);
    let outcome = faulty.execute(
        &mut db.connections(),
        &req.keyed(),
        &mut PlaceOrder::new("o1", 500),
    );
    assert_injected(&outcome);
    assert_eq!(db.orders(), vec![]);
    assert_eq!(db.key_row(ACCOUNT, "order-1"), None);

    // The key is free: the next request runs as the first.
    let mut next = PlaceOrder::new("o1", 500);
    let response = executed(policy.execute(&mut db.connections(), &req.keyed(), &mut next));
    assert_eq!(response, created("o1", 500));
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
}

fn atomic_a_response_announced_in_advance_is_written_with_the_key<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = Policy::new(Mode::Atomic);
    let req = Req::new("order-1", 500);
    let mut first = PlaceOrder::new("o1", 500).announcing(created("o1", 500));
    let response = executed(policy.execute(&mut db.connections(), &req.keyed(), &mut first));
    assert_eq!(response, created("o1", 500));
    assert_eq!(first.runs, 1);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
    let mut retry = PlaceOrder::new("o1-again", 500).announcing(created("o1-again", 500));
    assert_eq!(
        replayed(policy.execute(&mut db.connections(), &req.keyed(), &mut retry)),
        response
    );
    assert_eq!(retry.runs, 0);

    // An operation that answers otherwise than it announced writes nothing,
    // its key row (written completed, with the announced answer) included.
    let req = Req::new("order-2", 900);
    let mut liar = PlaceOrder::new("o2", 900).announcing(created("elsewhere", 1));
    let outcome = policy.execute(&mut db.connections(), &req.keyed(), &mut liar);
    assert!(matches!(outcome, Err(Error::NotAsAnnounced)), "{outcome:?}");
    assert_eq!(liar.runs, 1);
    assert_eq!(db.key_row(ACCOUNT, "order-2"), None);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
}

/// What one request of a [`race`] came to, and its operation.
struct Ran {
    outcome: Result<Outcome, Error>,
    op: PlaceOrder,
}

/// Runs A (whose operation pauses inside its transaction until B waits on
/// it) and B, both with `req`, on threads of their own.
fn race<C: TestConn>(
    db: &TestDb<C>,
    policy: &Policy,
    req: &Req,
    first: PlaceOrder,
    second: PlaceOrder,
) -> (Ran, Ran) {
    let (registered_tx, registered) = mpsc::channel::<()>();
    let (waiting_tx, waiting) = mpsc::channel::<()>();
    let first = first.pausing(move || {
        // The key is registered (uncommitted); let B go, and hold the
        // transaction until B waits on it.
        registered_tx.send(()).unwrap();
        waiting
            .recv_timeout(Duration::from_secs(20))
            .expect("B came to wait");
    });
    let run = move |mut op: PlaceOrder| {
        let outcome = policy.execute(&mut db.connections(), &req.keyed(), &mut op);
        Ran { outcome, op }
    };
    std::thread::scope(|s| {
        let a = s.spawn(move || run(first));
        registered
            .recv_timeout(Duration::from_secs(20))
            .expect("A registered its key");
        let b = s.spawn(move || run(second));
        C::until_another_waits(db);
        waiting_tx.send(()).unwrap();
        (a.join().unwrap(), b.join().unwrap())
    })
}

fn atomic_a_concurrent_duplicate_waits_for_the_first_and_replays_it<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = Policy::new(Mode::Atomic);
    let req = Req::new("order-1", 500);
    let (a, b) = race(
        &db,
        &policy,
        &req,
        PlaceOrder::new("o1", 500),
        PlaceOrder::new("o1-dup", 500),
    );
    let response = executed(a.outcome);
    assert_eq!(a.op.runs, 1);
    assert_eq!(replayed(b.outcome), response, "B replays what A committed");
    assert_eq!(b.op.runs, 0, "B's operation never ran");
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
}

fn atomic_a_concurrent_duplicate_runs_as_the_first_when_the_first_rolls_back<C: TestConn>(
    test: &str,
) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = Policy::new(Mode::Atomic);
    let req = Req::new("order-1", 500);
    let (a, b) = race(
        &db,
        &policy,
        &req,
        PlaceOrder::new("o1", 500).failing(),
        PlaceOrder::new("o1-dup", 500),
    );
    assert!(
        matches!(a.outcome, Err(Error::Dependency(_))),
        "{:?}",
        a.outcome
    );
    assert_eq!(a.op.runs, 1);
    assert_eq!(executed(b.outcome), created("o1-dup", 500));
    assert_eq!(b.op.runs, 1, "B ran as the first");
    assert_eq!(db.orders(), vec![order("o1-dup", 500)]);
    assert_completed(&db, "order-1", 201);
}

// -------------------------------------------------------------- key-first

fn key_first_a_concurrent_duplicate_is_in_flight_at_once<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = policy(Mode::KeyFirst, LONG_LEASE);
    let req = Req::new("order-1", 500);
    let (inside_tx, inside) = mpsc::channel::<()>();
    let (answered_tx, answered) = mpsc::channel::<()>();
    // A's operation waits, inside its second transaction, until B has its
    // answer: B must answer without waiting for A (or A times out).
    let first = PlaceOrder::new("o1", 500).pausing(move || {
        inside_tx.send(()).unwrap();
        answered
            .recv_timeout(Duration::from_secs(20))
            .expect("B answered while A was still running");
    });
    let (a, b, second) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let mut first = first;
            policy.execute(&mut db.connections(), &req.keyed(), &mut first)
        });
        inside
            .recv_timeout(Duration::from_secs(20))
            .expect("A runs its operation");
        let mut second = PlaceOrder::new("o1-dup", 500);
        let b = policy.execute(&mut db.connections(), &req.keyed(), &mut second);
        answered_tx.send(()).unwrap();
        (a.join().unwrap(), b, second)
    });
    assert!(matches!(b, Ok(Outcome::InFlight)), "{b:?}");
    assert_eq!(second.runs, 0);
    let response = executed(a);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
    let mut retry = PlaceOrder::new("o1-dup", 500);
    assert_eq!(
        replayed(policy.execute(&mut db.connections(), &req.keyed(), &mut retry)),
        response
    );
    assert_eq!(retry.runs, 0);
}

fn key_first_a_key_left_in_progress_is_in_flight_then_taken_over_after_its_lease<C: TestConn>(
    test: &str,
) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    // A lease the in-flight look surely falls inside on a loaded machine.
    let lease = Duration::from_secs(3);
    let healthy = policy(Mode::KeyFirst, lease);
    let dying = with_fault(healthy.clone(), Fault::DieAfterKeyCommitted);
    let req = Req::new("order-1", 500);

    let started = Instant::now();
    let mut first = PlaceOrder::new("o1", 500);
    let outcome = dying.execute(&mut db.connections(), &req.keyed(), &mut first);
    assert_injected(&outcome);
    assert_eq!(first.runs, 0);
    assert_in_progress(&db, "order-1");
    assert_eq!(
        db.key_row(ACCOUNT, "order-1")
            .unwrap()
            .request_path
            .as_deref(),
        Some(PATH),
        "an in-progress row keeps its request"
    );

    // Its lease is live: the retry is told it is in flight, at once.
    let mut retry = PlaceOrder::new("o1", 500);
    let outcome = healthy.execute(&mut db.connections(), &req.keyed(), &mut retry);
    assert!(
        started.elapsed() < lease,
        "too slow a machine for this test's lease"
    );
    assert!(matches!(outcome, Ok(Outcome::InFlight)), "{outcome:?}");
    assert_eq!(retry.runs, 0);
    // Another request under the key is a mismatch, in progress or not.
    let outcome = healthy.execute(
        &mut db.connections(),
        &Req::new("order-1", 900).keyed(),
        &mut PlaceOrder::new("o2", 900),
    );
    assert!(matches!(outcome, Ok(Outcome::Mismatch)), "{outcome:?}");
    assert_eq!(db.orders(), vec![]);

    // Once the lease has run out, the retry takes the key over and runs.
    db.until_lease_runs_out(ACCOUNT, "order-1");
    let response = executed(healthy.execute(&mut db.connections(), &req.keyed(), &mut retry));
    assert_eq!(response, created("o1", 500));
    assert_eq!(retry.runs, 1);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
    assert_eq!(
        replayed(healthy.execute(
            &mut db.connections(),
            &req.keyed(),
            &mut PlaceOrder::new("o1", 500)
        )),
        response
    );
}

fn key_first_an_operation_that_fails_releases_its_key<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = policy(Mode::KeyFirst, LONG_LEASE);
    let req = Req::new("order-1", 500);
    let outcome = policy.execute(
        &mut db.connections(),
        &req.keyed(),
        &mut PlaceOrder::new("o1", 500).failing(),
    );
    assert!(matches!(outcome, Err(Error::Dependency(_))), "{outcome:?}");
    assert_eq!(db.orders(), vec![]);
    assert_eq!(
        db.key_row(ACCOUNT, "order-1"),
        None,
        "the committed key was released"
    );
    // Under a 30-second lease, only a released key lets the retry run now.
    let mut retry = PlaceOrder::new("o1", 500);
    executed(policy.execute(&mut db.connections(), &req.keyed(), &mut retry));
    assert_eq!(retry.runs, 1);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
}

// --------------------------------------------------------------- recovery

fn recover_finishes_a_stuck_key_once<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    // A lease the first recovery attempt surely falls inside.
    let lease = Duration::from_secs(3);
    let healthy = policy(Mode::KeyFirst, lease);
    let dying = with_fault(healthy.clone(), Fault::DieAfterKeyCommitted);
    let req = Req::new("order-1", 500);
    let started = Instant::now();
    let outcome = dying.execute(
        &mut db.connections(),
        &req.keyed(),
        &mut PlaceOrder::new("o1", 500),
    );
    assert_injected(&outcome);

    // Under a live lease its worker may still be on it: not recovered.
    let mut early = PlaceOrder::new("o1", 500);
    let recovered = healthy
        .recover(&mut db.connections(), &req.keyed(), &mut early)
        .unwrap();
    assert!(
        started.elapsed() < lease,
        "too slow a machine for this test's lease"
    );
    assert_eq!(recovered, None);
    assert_eq!(early.runs, 0);
    assert_in_progress(&db, "order-1");
    assert_eq!(
        db.conn().find_stuck_accounts(10).unwrap(),
        Vec::<i64>::new()
    );
    db.until_lease_runs_out(ACCOUNT, "order-1");

    // The recovery pass finds the key, with the request it was registered
    // for, and rebuilds the request from it.
    let mut conn = db.conn();
    assert_eq!(conn.find_stuck_accounts(10).unwrap(), vec![ACCOUNT]);
    let stuck = conn.find_stuck_keys(ACCOUNT, 10, &[]).unwrap();
    assert_eq!(stuck.len(), 1, "{stuck:?}");
    let stuck = &stuck[0];
    assert_eq!(
        (stuck.key.as_str(), stuck.path.as_str(), &stuck.body),
        ("order-1", PATH, &req.body)
    );
    assert_eq!(stuck.fingerprint, req.fingerprint);
    assert_eq!(stuck.foreign_step, None);
    let rebuilt = stuck.request();

    let mut recovery = PlaceOrder::new("o1", 500);
    let recovered = healthy
        .recover(&mut db.connections(), &rebuilt, &mut recovery)
        .unwrap();
    assert_eq!(recovered, Some(created("o1", 500)));
    assert_eq!(recovery.runs, 1);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
    assert_eq!(conn.find_stuck_accounts(10).unwrap(), Vec::<i64>::new());

    // A second pass finds nothing to do, and runs nothing.
    let mut again = PlaceOrder::new("o1", 500);
    let recovered = healthy
        .recover(&mut db.connections(), &rebuilt, &mut again)
        .unwrap();
    assert_eq!(recovered, None);
    assert_eq!(again.runs, 0);
    assert_eq!(db.orders(), vec![order("o1", 500)]);

    // The client's retry replays the recovered answer.
    assert_eq!(
        replayed(healthy.execute(
            &mut db.connections(),
            &req.keyed(),
            &mut PlaceOrder::new("o1", 500)
        )),
        created("o1", 500)
    );
}

// ----------------------------------------------------------------- phases

fn phases_call_the_foreign_step_once_and_a_retry_replays_without_calling_it<C: TestConn>(
    test: &str,
) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    for mode in [Mode::Atomic, Mode::KeyFirst] {
        let policy = policy(mode, LONG_LEASE);
        let key = format!("order-{}", mode.as_str());
        let id = format!("o-{}", mode.as_str());
        let req = Req::new(&key, 500);
        let seen = Arc::new(Mutex::new(Seen::default()));

        let mut conns = db.connections();
        let step = Network::new(&seen, &conns);
        let mut first = PlaceOrder::new(&id, 500).with_step(step);
        let response = executed(policy.execute(&mut conns, &req.keyed(), &mut first));
        assert_eq!(response, created(&id, 500), "{mode:?}");
        assert_eq!(first.runs, 1);
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.calls, 1, "{mode:?}");
            assert_eq!(seen.settled, vec![response.clone()], "{mode:?}");
        }
        assert_completed(&db, &key, 201);
        // Completed, the row answers from its response: the request and the
        // step it kept for recovery are gone.
        let row = db.key_row(ACCOUNT, &key).unwrap();
        assert_eq!((row.foreign_step, row.request_path), (None, None));

        let mut conns = db.connections();
        let step = Network::new(&seen, &conns);
        let mut retry = PlaceOrder::new(&id, 500).with_step(step);
        assert_eq!(
            replayed(policy.execute(&mut conns, &req.keyed(), &mut retry)),
            response
        );
        assert_eq!(retry.runs, 0);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.calls, 1, "{mode:?}: the retry did not call again");
        assert_eq!(seen.settled.len(), 1, "{mode:?}: nor settle again");
    }
    assert_eq!(
        db.orders(),
        vec![order("o-atomic", 500), order("o-key-first", 500)]
    );
}

fn phases_a_worker_dead_after_the_foreign_call_is_recovered_by_calling_it_again<C: TestConn>(
    test: &str,
) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    for mode in [Mode::Atomic, Mode::KeyFirst] {
        let healthy = policy(mode, SHORT_LEASE);
        let key = format!("order-{}", mode.as_str());
        let id = format!("o-{}", mode.as_str());
        let req = Req::new(&key, 500);
        let seen = Arc::new(Mutex::new(Seen::default()));

        let mut conns = db.connections();
        let step = Network::new(&seen, &conns).dying_after_the_call();
        let mut first = PlaceOrder::new(&id, 500).with_step(step);
        let died = catch_unwind(AssertUnwindSafe(|| {
            healthy.execute(&mut conns, &req.keyed(), &mut first)
        }));
        assert!(died.is_err(), "{mode:?}: the worker died");
        assert_eq!(seen.lock().unwrap().calls, 1);
        assert_eq!(first.runs, 0, "{mode:?}: phase 3 never ran");
        assert_in_progress(&db, &key);

        db.until_lease_runs_out(ACCOUNT, &key);
        let stuck = db.conn().find_stuck_keys(ACCOUNT, 10, &[]).unwrap();
        assert_eq!(stuck.len(), 1, "{mode:?}: {stuck:?}");
        assert_eq!(
            stuck[0].foreign_step.as_deref(),
            Some(STEP),
            "{mode:?}: the row names the step it was registered for"
        );

        let mut conns = db.connections();
        let step = Network::new(&seen, &conns);
        let mut recovery = PlaceOrder::new(&id, 500).with_step(step);
        let recovered = healthy
            .recover(&mut conns, &req.keyed(), &mut recovery)
            .unwrap();
        assert_eq!(recovered, Some(created(&id, 500)), "{mode:?}");
        assert_eq!(recovery.runs, 1);
        {
            let seen = seen.lock().unwrap();
            assert_eq!(
                seen.calls, 2,
                "{mode:?}: the step was called again (idempotent there)"
            );
            assert_eq!(seen.settled, vec![created(&id, 500)], "{mode:?}");
        }
        assert_completed(&db, &key, 201);

        let mut conns = db.connections();
        let step = Network::new(&seen, &conns);
        let mut again = PlaceOrder::new(&id, 500).with_step(step);
        assert_eq!(
            healthy
                .recover(&mut conns, &req.keyed(), &mut again)
                .unwrap(),
            None
        );
        assert_eq!(again.runs, 0);
        assert_eq!(seen.lock().unwrap().calls, 2);
    }
    assert_eq!(
        db.orders(),
        vec![order("o-atomic", 500), order("o-key-first", 500)]
    );
}

fn phases_a_failed_foreign_call_releases_the_key<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = policy(Mode::Atomic, LONG_LEASE);
    let req = Req::new("order-1", 500);
    let seen = Arc::new(Mutex::new(Seen::default()));

    let mut conns = db.connections();
    let mut step = Network::new(&seen, &conns);
    step.down = true;
    let mut first = PlaceOrder::new("o1", 500).with_step(step);
    let outcome = policy.execute(&mut conns, &req.keyed(), &mut first);
    assert!(matches!(outcome, Err(Error::Dependency(_))), "{outcome:?}");
    assert_eq!(first.runs, 0);
    assert_eq!(db.key_row(ACCOUNT, "order-1"), None, "released");

    let mut conns = db.connections();
    let step = Network::new(&seen, &conns);
    let mut retry = PlaceOrder::new("o1", 500).with_step(step);
    executed(policy.execute(&mut conns, &req.keyed(), &mut retry));
    assert_eq!(seen.lock().unwrap().calls, 1);
    assert_eq!(db.orders(), vec![order("o1", 500)]);
    assert_completed(&db, "order-1", 201);
}

/// A runs `req` with a foreign call that, once made, waits for `release`;
/// `calling` says it is being made.
fn held_call<'db, C: TestConn>(
    db: &'db TestDb<C>,
    seen: &Arc<Mutex<Seen>>,
    id: &str,
) -> (
    support::Conns<'db, C>,
    PlaceOrder,
    mpsc::Receiver<()>,
    mpsc::Sender<()>,
) {
    let (calling_tx, calling) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let conns = db.connections();
    let mut step = Network::new(seen, &conns);
    step.during = Some(Box::new(move || {
        calling_tx.send(()).unwrap();
        released
            .recv_timeout(Duration::from_secs(20))
            .expect("the test released the call");
    }));
    let op = PlaceOrder::new(id, 500).with_step(step);
    (conns, op, calling, release)
}

fn phases_in_atomic_mode_a_duplicate_waits_for_the_first_and_replays_it<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let policy = policy(Mode::Atomic, LONG_LEASE);
    let req = Req::new("order-1", 500);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (mut conns, mut first, calling, release) = held_call(&db, &seen, "o1");
    let (a, b, second) = std::thread::scope(|s| {
        let a = s.spawn(|| policy.execute(&mut conns, &req.keyed(), &mut first));
        calling
            .recv_timeout(Duration::from_secs(20))
            .expect("A calls");
        let b = s.spawn(|| {
            let mut conns = db.connections();
            let step = Network::new(&seen, &conns);
            let mut second = PlaceOrder::new("o1-dup", 500).with_step(step);
            let outcome = policy.execute(&mut conns, &req.keyed(), &mut second);
            (outcome, second)
        });
        // B finds the key in progress and polls, holding no connection.
        std::thread::sleep(Duration::from_millis(300));
        release.send(()).unwrap();
        let (b, second) = b.join().unwrap();
        (a.join().unwrap(), b, second)
    });
    let response = executed(a);
    assert_eq!(replayed(b), response, "B waited for A, then replayed it");
    assert_eq!(second.runs, 0);
    assert_eq!(seen.lock().unwrap().calls, 1, "B never called");
    assert_eq!(db.orders(), vec![order("o1", 500)]);
}

fn phases_a_duplicate_is_in_flight_at_its_deadline_or_at_once_in_key_first_mode<C: TestConn>(
    test: &str,
) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    for mode in [Mode::Atomic, Mode::KeyFirst] {
        let policy = policy(mode, LONG_LEASE);
        let key = format!("order-{}", mode.as_str());
        let id = format!("o-{}", mode.as_str());
        let req = Req::new(&key, 500);
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (mut conns, mut first, calling, release) = held_call(&db, &seen, &id);
        // A's call is released only once B has answered: B answers
        // without waiting for A, or this test times out.
        let (a, b, second) = std::thread::scope(|s| {
            let a = s.spawn(|| policy.execute(&mut conns, &req.keyed(), &mut first));
            calling
                .recv_timeout(Duration::from_secs(20))
                .expect("A calls");
            let mut conns = db.connections().deadline(Duration::from_millis(800));
            let step = Network::new(&seen, &conns);
            let mut second = PlaceOrder::new(&id, 500).with_step(step);
            let b = policy.execute(&mut conns, &req.keyed(), &mut second);
            release.send(()).unwrap();
            (a.join().unwrap(), b, second)
        });
        assert!(matches!(b, Ok(Outcome::InFlight)), "{mode:?}: {b:?}");
        assert_eq!(second.runs, 0);
        executed(a);
        assert_eq!(seen.lock().unwrap().calls, 1, "{mode:?}: B never called");
    }
    assert_eq!(
        db.orders(),
        vec![order("o-atomic", 500), order("o-key-first", 500)]
    );
}

// ------------------------------------------------ closing, purging, hint

fn close_unrecoverable_gives_a_stuck_key_a_stored_answer<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let healthy = policy(Mode::KeyFirst, SHORT_LEASE);
    let dying = with_fault(healthy.clone(), Fault::DieAfterKeyCommitted);
    let req = Req::new("order-1", 500);
    let outcome = dying.execute(
        &mut db.connections(),
        &req.keyed(),
        &mut PlaceOrder::new("o1", 500),
    );
    assert_injected(&outcome);
    db.until_lease_runs_out(ACCOUNT, "order-1");

    let terminal = SavedResponse {
        status: 500,
        headers: [(
            "content-type".to_owned(),
            "application/problem+json".to_owned(),
        )]
        .into(),
        body: json!({ "title": "this request could not be finished" }),
    };
    assert!(
        healthy
            .close_unrecoverable(&mut db.connections(), &req.keyed(), None, &terminal)
            .unwrap()
    );
    assert_completed(&db, "order-1", 500);
    assert_eq!(
        db.conn().find_stuck_accounts(10).unwrap(),
        Vec::<i64>::new()
    );

    // The client's retry gets the terminal answer; nothing runs.
    let mut retry = PlaceOrder::new("o1", 500);
    assert_eq!(
        replayed(healthy.execute(&mut db.connections(), &req.keyed(), &mut retry)),
        terminal
    );
    assert_eq!(retry.runs, 0);
    assert_eq!(db.orders(), vec![]);
    // A second close finds nothing to close.
    assert!(
        !healthy
            .close_unrecoverable(&mut db.connections(), &req.keyed(), None, &terminal)
            .unwrap()
    );
}

fn purge_expired_deletes_expired_keys_only_and_reports_them<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let short_lived = Policy {
        ttl: Duration::from_millis(5),
        ..Policy::new(Mode::Atomic)
    };
    let metrics = Arc::new(Counted::default());
    let kept = Policy {
        hooks: vec![metrics.clone()],
        ..Policy::new(Mode::Atomic)
    };
    for n in 1..=3 {
        let req = Req::new(&format!("old-{n}"), 100);
        executed(short_lived.execute(
            &mut db.connections(),
            &req.keyed(),
            &mut PlaceOrder::new(&format!("old-{n}"), 100),
        ));
    }
    let fresh = Req::new("fresh", 100);
    let response = executed(kept.execute(
        &mut db.connections(),
        &fresh.keyed(),
        &mut PlaceOrder::new("fresh", 100),
    ));
    assert_eq!(db.keys().len(), 4);
    std::thread::sleep(Duration::from_millis(100));

    let purged = kept.purge_expired(&mut db.conn(), 2).unwrap();
    assert_eq!(purged, 3);
    assert_eq!(
        *metrics.purged.lock().unwrap(),
        vec![2, 1],
        "one report a statement"
    );
    assert_eq!(db.keys(), vec![(ACCOUNT, "fresh".to_owned())]);
    assert_eq!(db.orders().len(), 4, "only key rows are purged");
    assert_eq!(kept.purge_expired(&mut db.conn(), 2).unwrap(), 0);

    // An expired key is free again; a live one still replays.
    let mut again = PlaceOrder::new("old-1-again", 100);
    executed(kept.execute(
        &mut db.connections(),
        &Req::new("old-1", 100).keyed(),
        &mut again,
    ));
    assert_eq!(again.runs, 1);
    assert_eq!(
        replayed(kept.execute(
            &mut db.connections(),
            &fresh.keyed(),
            &mut PlaceOrder::new("fresh", 100)
        )),
        response
    );
}

fn an_expired_key_is_free_for_any_request_before_it_is_purged<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let short_lived = Policy {
        ttl: Duration::from_millis(5),
        ..Policy::new(Mode::Atomic)
    };
    executed(short_lived.execute(
        &mut db.connections(),
        &Req::new("order-1", 500).keyed(),
        &mut PlaceOrder::new("o1", 500),
    ));
    std::thread::sleep(Duration::from_millis(100));
    // Another request under the expired key: not a mismatch, a new first.
    for mode in [Mode::Atomic, Mode::KeyFirst] {
        let key = format!("order-{}", mode.as_str());
        executed(short_lived.execute(
            &mut db.connections(),
            &Req::new(&key, 500).keyed(),
            &mut PlaceOrder::new(&key, 500),
        ));
    }
    std::thread::sleep(Duration::from_millis(100));
    for (mode, key) in [
        (Mode::Atomic, "order-1"),
        (Mode::Atomic, "order-atomic"),
        (Mode::KeyFirst, "order-key-first"),
    ] {
        let mut other = PlaceOrder::new(&format!("{key}-new"), 900);
        let outcome = policy(mode, LONG_LEASE).execute(
            &mut db.connections(),
            &Req::new(key, 900).keyed(),
            &mut other,
        );
        assert_eq!(
            executed(outcome),
            created(&format!("{key}-new"), 900),
            "{key}"
        );
        assert_eq!(other.runs, 1);
        assert_completed(&db, key, 201);
    }
    assert_eq!(db.keys().len(), 3, "taken over, not added");
    assert_eq!(db.orders().len(), 6);
}

fn the_hint_replays_a_retry_from_a_read_alone_and_never_a_purged_key<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let recent = Arc::new(RecentKeys::with_capacity(100));
    let hinted = Policy {
        recent: Some(recent.clone()),
        ..Policy::new(Mode::Atomic)
    };
    let unhinted = Policy::new(Mode::Atomic);
    let req = Req::new("order-1", 500);
    let response = executed(hinted.execute(
        &mut db.connections(),
        &req.keyed(),
        &mut PlaceOrder::new("o1", 500),
    ));
    assert!(recent.contains(ACCOUNT, "order-1"));

    {
        // Every write of the key table waits now; reads go on. A retry
        // that needed its transaction would wait (and fail after a second).
        let _hold = C::hold_key_writes(&db);
        let short = Duration::from_secs(1);
        let mut retry = PlaceOrder::new("o1-again", 500);
        let outcome = hinted.execute(&mut db.connections_waiting(short), &req.keyed(), &mut retry);
        assert_eq!(replayed(outcome), response, "replayed from a read");
        assert_eq!(retry.runs, 0);
        // The hold has teeth: without the hint, the retry does not get
        // through (PostgreSQL: in flight after its lock timeout; SQLite:
        // busy).
        let outcome =
            unhinted.execute(&mut db.connections_waiting(short), &req.keyed(), &mut retry);
        assert!(!matches!(outcome, Ok(Outcome::Replayed(_))), "{outcome:?}");
        assert_eq!(db.orders(), vec![order("o1", 500)]);
    }

    // A hinted key whose row was purged meanwhile is not replayed: the
    // retry runs as the first.
    let short_lived = Policy {
        ttl: Duration::from_millis(5),
        ..hinted.clone()
    };
    let req = Req::new("order-2", 500);
    executed(short_lived.execute(
        &mut db.connections(),
        &req.keyed(),
        &mut PlaceOrder::new("o2", 500),
    ));
    assert!(recent.contains(ACCOUNT, "order-2"));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(hinted.purge_expired(&mut db.conn(), 100).unwrap(), 1);
    let mut retry = PlaceOrder::new("o2-again", 500);
    assert_eq!(
        executed(hinted.execute(&mut db.connections(), &req.keyed(), &mut retry)),
        created("o2-again", 500)
    );
    assert_eq!(retry.runs, 1);
    assert_eq!(
        db.orders(),
        vec![order("o1", 500), order("o2", 500), order("o2-again", 500)]
    );
}

// ------------------------------------------------------ the foreign step

/// A key registered for one foreign step is finished only through it: not
/// by a worker without the step (its writes would run without the call),
/// nor by one at another service, whether by recovery or by the client's
/// retry. The takeover rule holds it in its `WHERE`, under the row's lock
/// (it did not before: a worker without the step recovered the key).
mod foreign_step {
    #[test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "TEST_DATABASE_URL is not set: PostgreSQL was not tested"
    )]
    fn on_postgres_a_key_registered_for_a_foreign_step_is_finished_only_through_it() {
        super::a_key_registered_for_a_foreign_step_is_finished_only_through_it::<
            diesel::pg::PgConnection,
        >("foreign_step::on_postgres");
    }

    #[test]
    fn on_sqlite_a_key_registered_for_a_foreign_step_is_finished_only_through_it() {
        super::a_key_registered_for_a_foreign_step_is_finished_only_through_it::<
            diesel::sqlite::SqliteConnection,
        >("foreign_step::on_sqlite");
    }
}

fn a_key_registered_for_a_foreign_step_is_finished_only_through_it<C: TestConn>(test: &str) {
    let Some(db) = TestDb::<C>::create(test) else {
        return;
    };
    let healthy = policy(Mode::KeyFirst, SHORT_LEASE);
    let req = Req::new("order-1", 500);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut conns = db.connections();
    let step = Network::new(&seen, &conns).dying_after_the_call();
    let mut first = PlaceOrder::new("o1", 500).with_step(step);
    let died = catch_unwind(AssertUnwindSafe(|| {
        healthy.execute(&mut conns, &req.keyed(), &mut first)
    }));
    assert!(died.is_err(), "the worker died");
    db.until_lease_runs_out(ACCOUNT, "order-1");
    assert_eq!(
        db.key_row(ACCOUNT, "order-1")
            .unwrap()
            .foreign_step
            .as_deref(),
        Some(STEP)
    );

    // A worker without the step: its writes would run without the call.
    let mut without = PlaceOrder::new("o1", 500);
    let recovered = healthy
        .recover(&mut db.connections(), &req.keyed(), &mut without)
        .unwrap();
    assert_eq!(
        (recovered, without.runs),
        (None, 0),
        "recovered without the foreign step the key was registered for"
    );

    // A worker at another service, by recovery or by the client's retry.
    let other = Arc::new(Mutex::new(Seen::default()));
    let mut conns = db.connections();
    let mut step = Network::new(&other, &conns);
    step.name = "another-network";
    let mut elsewhere = PlaceOrder::new("o1", 500).with_step(step);
    let recovered = healthy
        .recover(&mut conns, &req.keyed(), &mut elsewhere)
        .unwrap();
    assert_eq!(recovered, None, "recovered through another service");
    let mut conns = db.connections();
    let mut step = Network::new(&other, &conns);
    step.name = "another-network";
    let mut retry = PlaceOrder::new("o1", 500).with_step(step);
    let outcome = healthy.execute(&mut conns, &req.keyed(), &mut retry);
    assert!(
        !matches!(outcome, Ok(Outcome::Executed(_))),
        "a retry through another service took the key over: {outcome:?}"
    );
    assert_eq!(other.lock().unwrap().calls, 0);
    assert_eq!(db.orders(), vec![]);
    assert_in_progress(&db, "order-1");

    // Through its own step it is finished.
    let mut conns = db.connections();
    let step = Network::new(&seen, &conns);
    let mut own = PlaceOrder::new("o1", 500).with_step(step);
    assert_eq!(
        healthy.recover(&mut conns, &req.keyed(), &mut own).unwrap(),
        Some(created("o1", 500))
    );
    assert_eq!(seen.lock().unwrap().calls, 2);
}
