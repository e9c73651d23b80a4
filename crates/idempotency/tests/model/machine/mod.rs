//! A model of the Idempotency-Key protocol for `stateright`: clients that
//! send, lose the answer, retry with the same key, give up, or reuse the
//! key with another body; workers running the crate's own code
//! (`replay`) in one design; a database with the unique constraint and
//! READ COMMITTED's waits, crashes that roll back, leases that run out,
//! a recovery task, and the card networks (`world`). What every state must
//! satisfy is in `properties`; `Bugs` switches one rule off at a time.

pub mod bounds;
pub mod diagram;
pub mod page;
pub mod properties;
pub mod replay;
pub mod world;

use idempotency::{Error, Fingerprint, Mode, Outcome, SavedResponse};
use stateright::Model;

use replay::{Job, Progress, amount};
use world::{KeyId, Service, World};

/// The rules a revert test switches off, one at a time. Only the model's
/// statements and wiring read them; the crate's code is as shipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bugs {
    /// A look, then an insert, instead of the unique constraint.
    pub check_then_insert: bool,
    /// Completion without the lease check (any in-progress row completes).
    pub complete_without_lease: bool,
    /// The takeover rule without its "lease has run out".
    pub takeover_while_live: bool,
    /// A read outside a transaction (the fast path's) does not compare
    /// fingerprints: it takes the row for the request's own.
    pub fast_path_skips_fingerprint: bool,
    /// The takeover rule without its "same foreign step".
    pub recovery_any_step: bool,
    /// A replay runs the operation again and answers that.
    pub replay_reruns: bool,
    /// No recovery task: nothing finishes a key its worker left.
    pub no_recovery: bool,
}

impl Bugs {
    /// The switches that are on, by name.
    pub fn on(&self) -> Vec<&'static str> {
        let all = [
            (self.check_then_insert, "check_then_insert"),
            (self.complete_without_lease, "complete_without_lease"),
            (self.takeover_while_live, "takeover_while_live"),
            (
                self.fast_path_skips_fingerprint,
                "fast_path_skips_fingerprint",
            ),
            (self.recovery_any_step, "recovery_any_step"),
            (self.replay_reruns, "replay_reruns"),
            (self.no_recovery, "no_recovery"),
        ];
        all.into_iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| n)
            .collect()
    }
}

/// One client: a key (account, key), a body, and how often it may send.
#[derive(Clone, Copy, Debug)]
pub struct ClientSpec {
    pub account: u8,
    pub key: u8,
    pub body: u8,
    pub sends: u8,
}

/// How many times each fault may happen on one path.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Budget {
    pub crashes: u8,
    /// Answers lost on the way to the client.
    pub lost_answers: u8,
    /// Foreign calls done whose answer is lost.
    pub lost_calls: u8,
    /// Leases that run out while something else is still going on (once
    /// everything is quiet, time passes freely: that is the fairness).
    pub expiries: u8,
    /// Recoveries attempted by a worker with another foreign step.
    pub other_recoveries: u8,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub mode: Mode,
    /// The clients' requests call the card network first (phases).
    pub foreign: bool,
    pub clients: Vec<ClientSpec>,
    /// Workers serving clients; one more runs the recovery task.
    pub workers: usize,
    pub budget: Budget,
    pub bugs: Bugs,
    /// The charge announces its response (`Operation::known_response`, as
    /// the app's does): atomic writes the key completed as it registers it.
    pub known: bool,
    /// Each body's fingerprint, as the crate computes it.
    pub fingerprints: Vec<Fingerprint>,
}

impl Config {
    pub fn new(
        mode: Mode,
        foreign: bool,
        clients: Vec<ClientSpec>,
        workers: usize,
        budget: Budget,
    ) -> Config {
        let bodies = clients.iter().map(|c| c.body).max().unwrap_or(0);
        let fingerprints = (0..=bodies)
            .map(|b| Fingerprint::of("POST", "/charges", &amount(b)))
            .collect();
        Config {
            mode,
            foreign,
            clients,
            workers,
            budget,
            bugs: Bugs::default(),
            known: false,
            fingerprints,
        }
    }

    pub fn with(mut self, bugs: Bugs) -> Config {
        self.bugs = bugs;
        self
    }

    pub fn step(&self) -> Option<Service> {
        self.foreign.then_some(Service::Network)
    }

    /// The steps a recovery worker of another kind performs: another
    /// service's, or none (the design without a foreign step); the
    /// network's, when the clients' requests call none.
    pub fn other_steps(&self) -> &'static [Option<Service>] {
        match self.foreign {
            true => &[Some(Service::Another), None],
            false => &[Some(Service::Network)],
        }
    }

    fn recovery(&self) -> usize {
        self.workers
    }
}

/// What a client received.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Answer {
    /// A 2xx: executed now or replayed, its bytes, and the charge it names.
    Charged {
        replay: bool,
        bytes: String,
        charge: u8,
    },
    /// Any other status: 409, 422, 5xx.
    Status(u16),
}

impl Answer {
    pub fn of(done: Result<Outcome, Error>) -> Answer {
        let charged = |replay, r: SavedResponse| {
            let id = r.body["id"].as_str().expect("a charge id");
            let charge = id[2..].parse().expect("a model charge id");
            let bytes = replay::resp(&r).bytes();
            Answer::Charged {
                replay,
                bytes,
                charge,
            }
        };
        match done {
            Ok(Outcome::Executed(r)) => charged(false, r),
            Ok(Outcome::Replayed(r)) => charged(true, r),
            Ok(Outcome::Mismatch) | Err(Error::DependencyKeyReused) => Answer::Status(422),
            Ok(Outcome::InFlight) => Answer::Status(409),
            Err(Error::Dependency(_)) => Answer::Status(502),
            Err(_) => Answer::Status(500),
        }
    }

    pub fn label(&self) -> String {
        match self {
            Answer::Charged {
                replay: false,
                charge,
                ..
            } => format!("201 ch{charge}"),
            Answer::Charged {
                replay: true,
                charge,
                ..
            } => format!("201 ch{charge} (replay)"),
            Answer::Status(s) => s.to_string(),
        }
    }
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Phase {
    /// May send (again, if it has sent before and has sends left).
    Ready,
    Waiting,
    Done,
    GaveUp,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Client {
    pub phase: Phase,
    pub sends_left: u8,
    pub answers: Vec<Answer>,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Worker {
    pub job: Option<Job>,
    /// An answer on its way to its client.
    pub reply: Option<(usize, Answer)>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub clients: Vec<Client>,
    /// The client workers, then the recovery worker.
    pub workers: Vec<Worker>,
    pub world: World,
    pub left: Budget,
    pub jobs: u8,
    /// Jobs that answered 409, 422 or an error (ghost).
    pub no_effect: Vec<u8>,
    /// A recovery finished a key (ghost, for a `sometimes`).
    pub recovered: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    Send { client: usize, worker: usize },
    Step { worker: usize, lose_call: bool },
    Deliver { worker: usize },
    Lose { worker: usize },
    Crash { worker: usize },
    GiveUp { client: usize },
    Expire { key: KeyId },
    Recover { key: KeyId, step: Option<Service> },
}

pub struct Protocol(pub Config);

impl Protocol {
    fn key(&self, client: usize) -> KeyId {
        let c = self.0.clients[client];
        (c.account, c.key)
    }

    /// Nothing runs and no client will send again: only time passes.
    pub fn quiet(state: &State) -> bool {
        state
            .clients
            .iter()
            .all(|c| matches!(c.phase, Phase::Done | Phase::GaveUp))
            && state
                .workers
                .iter()
                .all(|w| w.job.is_none() && w.reply.is_none())
    }

    /// A client whose request did not come back: it retries or stops.
    fn unanswered(client: &mut Client) {
        client.phase = match client.sends_left {
            0 => Phase::GaveUp,
            _ => Phase::Ready,
        };
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let clients = self.0.clients.iter().map(|c| Client {
            phase: Phase::Ready,
            sends_left: c.sends,
            answers: Vec::new(),
        });
        vec![State {
            clients: clients.collect(),
            workers: vec![Worker::default(); self.0.workers + 1],
            world: World::new(self.0.workers + 1),
            left: self.0.budget,
            jobs: 0,
            no_effect: Vec::new(),
            recovered: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let idle = |w: &Worker| w.job.is_none() && w.reply.is_none();
        for (client, c) in s.clients.iter().enumerate() {
            if c.phase != Phase::Ready {
                continue;
            }
            for worker in 0..self.0.workers {
                // Idle workers are alike: the first one stands for them all.
                if idle(&s.workers[worker]) {
                    actions.push(Action::Send { client, worker });
                    break;
                }
            }
            if c.sends_left < self.0.clients[client].sends {
                actions.push(Action::GiveUp { client });
            }
        }
        for (worker, w) in s.workers.iter().enumerate() {
            if w.job.is_some() {
                actions.push(Action::Step {
                    worker,
                    lose_call: false,
                });
                if self.0.foreign && s.left.lost_calls > 0 {
                    actions.push(Action::Step {
                        worker,
                        lose_call: true,
                    });
                }
                if s.left.crashes > 0 {
                    actions.push(Action::Crash { worker });
                }
            }
            if w.reply.is_some() {
                actions.push(Action::Deliver { worker });
                if s.left.lost_answers > 0 {
                    actions.push(Action::Lose { worker });
                }
            }
        }
        let quiet = Protocol::quiet(s);
        let recovery_idle = idle(&s.workers[self.0.recovery()]) && !self.0.bugs.no_recovery;
        for (key, row) in &s.world.rows {
            if row.in_progress && row.lease_live && (s.left.expiries > 0 || quiet) {
                actions.push(Action::Expire { key: *key });
            }
            if row.in_progress && !row.lease_live && recovery_idle {
                actions.push(Action::Recover {
                    key: *key,
                    step: self.0.step(),
                });
                if s.left.other_recoveries > 0 {
                    for &step in self.0.other_steps() {
                        actions.push(Action::Recover { key: *key, step });
                    }
                }
            }
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Send { client, worker } => {
                s.clients[client].phase = Phase::Waiting;
                s.clients[client].sends_left -= 1;
                let spec = self.0.clients[client];
                self.start(
                    &mut s,
                    worker,
                    Some(client),
                    self.key(client),
                    spec.body,
                    self.0.step(),
                )?;
            }
            Action::Step { worker, lose_call } => {
                if lose_call {
                    s.left.lost_calls -= 1;
                }
                self.advance(&mut s, worker, lose_call)?;
            }
            Action::Deliver { worker } => {
                let (client, answer) = s.workers[worker].reply.take()?;
                let c = &mut s.clients[client];
                let last = matches!(answer, Answer::Charged { .. } | Answer::Status(422));
                c.answers.push(answer);
                match last {
                    true => c.phase = Phase::Done,
                    false => Protocol::unanswered(c),
                }
            }
            Action::Lose { worker } => {
                s.left.lost_answers -= 1;
                let (client, _) = s.workers[worker].reply.take()?;
                Protocol::unanswered(&mut s.clients[client]);
            }
            Action::Crash { worker } => {
                s.left.crashes -= 1;
                s.world.rollback(worker);
                if let Some(client) = s.workers[worker].job.take()?.client {
                    Protocol::unanswered(&mut s.clients[client]);
                }
            }
            Action::GiveUp { client } => s.clients[client].phase = Phase::GaveUp,
            Action::Expire { key } => {
                if !Protocol::quiet(&s) {
                    s.left.expiries -= 1;
                }
                let row = s.world.rows.iter_mut().find(|(k, _)| *k == key)?;
                row.1.lease_live = false;
            }
            Action::Recover { key, step } => {
                if step != self.0.step() {
                    s.left.other_recoveries -= 1;
                }
                let body = s.world.committed(key)?.body;
                self.start(&mut s, self.0.recovery(), None, key, body, step)?;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        properties::all(&self.0)
    }
}

impl Protocol {
    /// A new job on `worker`, and its first statement.
    fn start(
        &self,
        s: &mut State,
        worker: usize,
        client: Option<usize>,
        key: KeyId,
        body: u8,
        step: Option<Service>,
    ) -> Option<()> {
        s.workers[worker].job = Some(self.job(s, client, key, body, step));
        s.jobs += 1;
        self.advance(s, worker, false)
    }

    /// The next job to start in `s`.
    fn job(
        &self,
        s: &State,
        client: Option<usize>,
        key: KeyId,
        body: u8,
        step: Option<Service>,
    ) -> Job {
        Job {
            client,
            key,
            body,
            step,
            serial: s.jobs + 1,
            log: Vec::new(),
        }
    }

    /// One step of `worker`'s job; `None` if it must wait.
    fn advance(&self, s: &mut State, worker: usize, lose_call: bool) -> Option<()> {
        let mut job = s.workers[worker].job.take()?;
        match replay::step(&self.0, &mut s.world, &mut job, worker, lose_call) {
            Progress::Blocked => return None,
            Progress::Paused => s.workers[worker].job = Some(job),
            Progress::Finished(answer) => match (job.client, answer) {
                (Some(client), Some(answer)) => {
                    if !matches!(answer, Answer::Charged { .. }) {
                        s.no_effect.push(job.serial);
                    }
                    s.workers[worker].reply = Some((client, answer));
                }
                (Some(_), None) => unreachable!("a client's run answers"),
                (None, ran) => s.recovered |= ran.is_some(),
            },
        }
        Some(())
    }
}
