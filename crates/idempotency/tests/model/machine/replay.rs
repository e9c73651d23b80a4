//! The crate's own code, one statement at a time. A worker's step runs
//! `Policy::execute` (or `Policy::recover`) from the start on a key store
//! that answers every statement the worker already made from its log, makes
//! the next one against the model's world, and ends the step at the one
//! after (every call then fails, and the run's result is thrown away). The
//! code is deterministic given its statements' answers, so each step
//! resumes it where the last one stopped: the model checks the protocol as
//! the crate runs it, deciding code and all, with only the statements (and
//! the foreign call) modelled.

use std::cell::RefCell;
use std::time::Instant;

use diesel::result::Error as DieselError;
use idempotency::{
    Claim, Connections, Error, KeyRecord, KeyState, KeyStore, KeyedRequest, NewKey, Operation,
    Outcome, Policy, SavedResponse, StuckKey, TakeoverRow,
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::world::{Blocked, Charge, KeyId, Resp, Row, Service, World};
use super::{Answer, Config};

type QueryResult<T> = Result<T, DieselError>;

/// A row as a statement read it.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Seen {
    pub body: u8,
    pub in_progress: bool,
    pub lease_live: bool,
    pub response: Option<Resp>,
}

/// What the foreign call answered.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Called {
    Done,
    /// Done at the network, its answer lost on the way back.
    Lost,
    /// The derived key holds another request there.
    Refused,
}

/// One statement (or commit, rollback, foreign call) and its answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Entry {
    Read { in_tx: bool, row: Option<Seen> },
    Insert(Option<u8>),
    TakeOver(Option<u8>),
    Complete(bool),
    Release(bool),
    Charge(u8),
    Commit,
    Rollback,
    Call(Service, Called),
}

/// One request's run on a worker (a client's, or a recovery's).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Job {
    pub client: Option<usize>,
    pub key: KeyId,
    pub body: u8,
    pub step: Option<Service>,
    pub serial: u8,
    pub log: Vec<Entry>,
}

/// How a step ended.
pub enum Progress {
    /// Its next statement waits for another transaction: not possible now.
    Blocked,
    /// It made its statement; the run goes on at the next step.
    Paused,
    /// The run returned; `None` for a recovery that ran nothing.
    Finished(Option<Answer>),
}

struct Ctx<'a> {
    cfg: &'a Config,
    world: &'a mut World,
    job: &'a mut Job,
    worker: usize,
    pos: usize,
    /// The step may still make one statement.
    may_act: bool,
    /// The step's foreign call, if it makes one, loses its answer.
    lose_call: bool,
    made_call: bool,
    halted: Option<Progress>,
    in_tx: bool,
}

impl Ctx<'_> {
    /// The next entry: from the log, or made now if the step may still
    /// make one; `None` once the step is over. `free`: a rollback, which
    /// waits for nothing and shows nothing, does not use the step up.
    fn next(
        &mut self,
        free: bool,
        make: impl FnOnce(&mut Self) -> Result<Entry, Blocked>,
    ) -> Option<Entry> {
        if self.halted.is_some() {
            return None;
        }
        if let Some(entry) = self.job.log.get(self.pos) {
            self.pos += 1;
            return Some(entry.clone());
        }
        if !self.may_act && !free {
            self.halted = Some(Progress::Paused);
            return None;
        }
        match make(self) {
            Err(Blocked) => {
                self.halted = Some(Progress::Blocked);
                None
            }
            Ok(entry) => {
                // A statement outside a transaction commits on its own.
                if !self.in_tx {
                    self.world.commit(self.worker);
                }
                self.may_act &= free;
                self.job.log.push(entry.clone());
                self.pos += 1;
                Some(entry)
            }
        }
    }

    fn fingerprint(&self, body: u8) -> &str {
        self.cfg.fingerprints[usize::from(body)].as_str()
    }

    fn body_of(&self, fingerprint: &str) -> u8 {
        let at = self
            .cfg
            .fingerprints
            .iter()
            .position(|f| f.as_str() == fingerprint);
        at.expect("a body of the model") as u8
    }

    /// The row `new` writes (its token is the world's to choose).
    fn row(&self, new: &NewKey<'_>) -> Row {
        let (in_progress, response) = match new.completed {
            None => (true, None),
            Some(r) => (false, Some(resp(r))),
        };
        Row {
            body: self.body_of(new.request.fingerprint.as_str()),
            in_progress,
            lease_live: in_progress,
            token: 0,
            response,
            step: new.foreign_step.map(Service::named),
            completed_by: None,
        }
    }
}

/// A response as the key row's columns hold it: the headers as their
/// JSON object, the body as its bytes.
pub fn resp(r: &SavedResponse) -> Resp {
    Resp {
        status: r.status,
        headers: serde_json::to_string(&r.headers).expect("a string map serializes"),
        body: r.body_bytes(),
    }
}

/// A row as a statement read it, decoded as the key store decodes it.
fn record(fingerprint: &str, seen: Seen) -> KeyRecord {
    let state = match (seen.in_progress, seen.response) {
        (true, _) => KeyState::InProgress {
            lease_live: seen.lease_live,
        },
        (false, Some(r)) => KeyState::Completed(SavedResponse {
            status: r.status,
            headers: serde_json::from_str(&r.headers).expect("the headers as stored"),
            body: serde_json::from_str(&r.body).expect("the body as stored"),
        }),
        (false, None) => panic!("the model completed a row without its response"),
    };
    KeyRecord {
        fingerprint: fingerprint.to_owned(),
        state,
    }
}

fn halt() -> DieselError {
    DieselError::QueryBuilderError("the model's step ends here".into())
}

/// A statement that got no entry (the step is over), or another kind of
/// entry than it makes: the crate's code is not deterministic given its
/// statements' answers, and the model cannot resume it.
fn halted<T>(entry: Option<Entry>) -> QueryResult<T> {
    match entry {
        None => Err(halt()),
        Some(other) => panic!("the run took another path than its log: {other:?}"),
    }
}

fn key_id(account_id: i64, key: &str) -> KeyId {
    (account_id as u8, key[1..].parse().expect("a model key"))
}

fn token(claim: &Claim) -> u8 {
    claim.lease_token.as_u128() as u8
}

pub fn amount(body: u8) -> Value {
    json!({ "amount": 100 * (u32::from(body) + 1) })
}

/// The key store and transaction a worker's code runs on.
pub struct Conn<'c, 'a>(&'c RefCell<Ctx<'a>>);

impl Conn<'_, '_> {
    /// A statement that writes `key`: made only when no other open
    /// transaction holds it.
    fn write(&mut self, key: KeyId, make: impl FnOnce(&mut Ctx<'_>) -> Entry) -> Option<Entry> {
        self.0.borrow_mut().next(false, |c| {
            c.world.may_write(c.worker, key)?;
            c.world.tx(c.worker).step = c.job.step;
            Ok(make(c))
        })
    }
}

impl KeyStore for Conn<'_, '_> {
    fn find_live_key(&mut self, account_id: i64, key: &str) -> QueryResult<Option<KeyRecord>> {
        let id = key_id(account_id, key);
        let mut c = self.0.borrow_mut();
        let entry = c.next(false, |c| {
            let row = c.world.visible(c.worker, id).map(|r| Seen {
                // The bug: a read outside a transaction (the fast path's)
                // takes the row for the request's own.
                body: match c.cfg.bugs.fast_path_skips_fingerprint && !c.in_tx {
                    true => c.job.body,
                    false => r.body,
                },
                in_progress: r.in_progress,
                lease_live: r.lease_live,
                response: r.response,
            });
            Ok(Entry::Read {
                in_tx: c.in_tx,
                row,
            })
        });
        let row = match entry {
            Some(Entry::Read { row, .. }) => row,
            other => return halted(other),
        };
        let Some(seen) = row else { return Ok(None) };
        Ok(Some(record(c.fingerprint(seen.body), seen)))
    }

    fn insert_key(&mut self, new: &NewKey<'_>) -> QueryResult<Option<Claim>> {
        let id = key_id(new.request.account_id, new.request.key);
        let entry = self.0.borrow_mut().next(false, |c| {
            let row = c.row(new);
            let bugs = c.cfg.bugs;
            c.world.tx(c.worker).step = c.job.step;
            Ok(Entry::Insert(c.world.insert(c.worker, id, row, &bugs)?))
        });
        match entry {
            Some(Entry::Insert(t)) => Ok(t.map(|t| Claim::new(new, Uuid::from_u128(t.into())))),
            other => halted(other),
        }
    }

    fn take_over_key(&mut self, new: &NewKey<'_>) -> QueryResult<Option<Claim>> {
        let id = key_id(new.request.account_id, new.request.key);
        let entry = self.write(id, |c| {
            let Some(row) = c.world.visible(c.worker, id) else {
                return Entry::TakeOver(None);
            };
            let bugs = c.cfg.bugs;
            let own_step = row.step.map(Service::name);
            let facts = TakeoverRow {
                // Keys do not expire in the model (see docs/model.md).
                expired: false,
                in_progress: row.in_progress,
                lease_over: !row.lease_live || bugs.takeover_while_live,
                fingerprint: c.fingerprint(row.body),
                foreign_step: match bugs.recovery_any_step {
                    true => new.foreign_step,
                    false => own_step,
                },
            };
            if !facts.may_be_taken_over(new.request.fingerprint.as_str(), new.foreign_step) {
                return Entry::TakeOver(None);
            }
            let tx = c.world.tx(c.worker);
            tx.fences.push(row.token);
            tx.overlap |= row.in_progress && row.lease_live;
            let new_row = c.row(new);
            Entry::TakeOver(Some(c.world.write(c.worker, id, new_row)))
        });
        match entry {
            Some(Entry::TakeOver(t)) => Ok(t.map(|t| Claim::new(new, Uuid::from_u128(t.into())))),
            other => halted(other),
        }
    }

    fn complete_key(&mut self, claim: &Claim, response: &SavedResponse) -> QueryResult<bool> {
        let id = key_id(claim.account_id, &claim.key);
        let entry = self.write(id, |c| {
            let ours = |row: &Row| row.token == token(claim) || c.cfg.bugs.complete_without_lease;
            match c.world.visible(c.worker, id) {
                Some(row) if row.in_progress && ours(&row) => {
                    let done = Row {
                        in_progress: false,
                        lease_live: false,
                        response: Some(resp(response)),
                        step: None,
                        completed_by: Some(token(claim)),
                        ..row
                    };
                    c.world.tx(c.worker).rows.push((id, Some(done)));
                    Entry::Complete(true)
                }
                _ => Entry::Complete(false),
            }
        });
        match entry {
            Some(Entry::Complete(done)) => Ok(done),
            other => halted(other),
        }
    }

    fn release_key(&mut self, claim: &Claim) -> QueryResult<usize> {
        let id = key_id(claim.account_id, &claim.key);
        let entry = self.write(id, |c| match c.world.visible(c.worker, id) {
            Some(row) if row.in_progress && row.token == token(claim) => {
                c.world.delete(c.worker, id);
                Entry::Release(true)
            }
            _ => Entry::Release(false),
        });
        match entry {
            Some(Entry::Release(done)) => Ok(usize::from(done)),
            other => halted(other),
        }
    }

    fn purge_expired_keys(&mut self, _batch: i64) -> QueryResult<usize> {
        unreachable!("the model's keys do not expire")
    }

    fn find_stuck_accounts(&mut self, _limit: i64) -> QueryResult<Vec<i64>> {
        unreachable!("the model's recovery finds its keys itself")
    }

    fn find_stuck_keys(&mut self, _: i64, _: i64, _: &[String]) -> QueryResult<Vec<StuckKey>> {
        unreachable!("the model's recovery finds its keys itself")
    }
}

/// A request's connections: one, given back between transactions.
struct Conns<'c, 'a>(Conn<'c, 'a>);

impl<'c, 'a> Connections for Conns<'c, 'a> {
    type Store = Conn<'c, 'a>;

    fn run<T>(
        &mut self,
        work: impl FnOnce(&mut Conn<'c, 'a>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        work(&mut self.0)
    }

    /// The model's transaction: its commit or rollback is a statement of
    /// the log as any other.
    fn transaction<T, E: From<DieselError>>(
        store: &mut Conn<'c, 'a>,
        work: impl FnOnce(&mut Conn<'c, 'a>) -> Result<T, E>,
    ) -> Result<T, E> {
        if store.0.borrow().halted.is_some() {
            return Err(halt().into());
        }
        store.0.borrow_mut().in_tx = true;
        let done = work(store);
        let mut c = store.0.borrow_mut();
        c.in_tx = false;
        if c.halted.is_some() {
            return Err(halt().into());
        }
        let end = match done.is_ok() {
            true => c.next(false, |c| {
                c.world.commit(c.worker);
                Ok(Entry::Commit)
            }),
            false => c.next(true, |c| {
                c.world.rollback(c.worker);
                Ok(Entry::Rollback)
            }),
        };
        match end {
            Some(Entry::Commit | Entry::Rollback) => done,
            other => halted(other).map_err(E::from),
        }
    }

    /// Now: a duplicate never polls (atomic phases); it answers 409 and the
    /// client's retry stands for the wait.
    fn until(&self) -> Instant {
        Instant::now()
    }
}

/// The charge: one row written, a 201 naming it and its amount. Its id is
/// its job's, chosen first, so that its response may be known in advance.
struct Charging<'c, 'a> {
    step: Option<Call<'c, 'a>>,
    /// The response announced (`Config::known`), as the app's charge does.
    known: Option<SavedResponse>,
}

struct Call<'c, 'a>(&'c RefCell<Ctx<'a>>, Service);

/// The 201 of charge `id` for `body`.
fn charged(id: u8, body: u8) -> SavedResponse {
    let mut response = amount(body);
    response["id"] = json!(format!("ch{id}"));
    SavedResponse::json(201, Some(format!("/charges/ch{id}")), response)
}

impl<'c, 'a> Operation<Conn<'c, 'a>> for Charging<'c, 'a> {
    fn run(&mut self, tx: &mut Conn<'c, 'a>) -> Result<SavedResponse, Error> {
        let entry = tx.0.borrow_mut().next(false, |c| {
            let charge = Charge {
                key: c.job.key,
                id: c.job.serial,
                body: c.job.body,
                job: c.job.serial,
                step: c.job.step,
            };
            let t = c.world.tx(c.worker);
            t.step = c.job.step;
            t.charges.push(charge);
            Ok(Entry::Charge(c.job.serial))
        });
        let id = match entry {
            Some(Entry::Charge(id)) => id,
            other => return halted(other).map_err(Error::from),
        };
        Ok(charged(id, tx.0.borrow().job.body))
    }

    fn known_response(&self) -> Option<&SavedResponse> {
        self.known.as_ref()
    }

    fn foreign_step(&self) -> Option<&str> {
        self.step.as_ref().map(|s| s.1.name())
    }

    fn call(&mut self) -> Result<(), Error> {
        self.step.as_mut().map_or(Ok(()), Call::call)
    }
}

impl Call<'_, '_> {
    /// The card network's authorization, its answer from the log or the
    /// model's world.
    fn call(&mut self) -> Result<(), Error> {
        let service = self.1;
        let entry = self.0.borrow_mut().next(false, |c| {
            c.made_call = true;
            let answer = match c.world.authorize(service, c.job.key, c.job.body) {
                false => Called::Refused,
                true if c.lose_call => Called::Lost,
                true => Called::Done,
            };
            Ok(Entry::Call(service, answer))
        });
        match entry {
            Some(Entry::Call(_, Called::Done)) => Ok(()),
            Some(Entry::Call(_, Called::Lost)) => Err(Error::Dependency("lost".into())),
            Some(Entry::Call(_, Called::Refused)) => Err(Error::DependencyKeyReused),
            other => halted(other).map_err(Error::from),
        }
    }
}

/// One step of `job` on `worker` (see the module's doc). `lose_call`: the
/// step must be a foreign call, and its answer is lost (else `Blocked`).
pub fn step(
    cfg: &Config,
    world: &mut World,
    job: &mut Job,
    worker: usize,
    lose_call: bool,
) -> Progress {
    let ctx = RefCell::new(Ctx {
        cfg,
        world,
        job,
        worker,
        pos: 0,
        may_act: true,
        lose_call,
        made_call: false,
        halted: None,
        in_tx: false,
    });
    let (key, body, step, client, serial) = {
        let c = ctx.borrow();
        (
            c.job.key,
            c.job.body,
            c.job.step,
            c.job.client,
            c.job.serial,
        )
    };
    let key_text = format!("k{}", key.1);
    let body_json = amount(body);
    let request = KeyedRequest {
        account_id: i64::from(key.0),
        key: &key_text,
        fingerprint: cfg.fingerprints[usize::from(body)].clone(),
        path: "/charges",
        body: &body_json,
    };
    let policy = Policy::new(cfg.mode);
    let mut op = Charging {
        step: step.map(|s| Call(&ctx, s)),
        known: cfg.known.then(|| charged(serial, body)),
    };
    let mut conns = Conns(Conn(&ctx));
    let answer = match client {
        // What a recovery answers nobody receives: kept only when it ran.
        None => match policy.recover(&mut conns, &request, &mut op) {
            Ok(Some(r)) => Some(Answer::of(Ok(Outcome::Executed(r)))),
            _ => None,
        },
        Some(_) => {
            let mut done = policy.execute(&mut conns, &request, &mut op);
            // The bug: a replay runs the operation again and answers that.
            if cfg.bugs.replay_reruns && matches!(done, Ok(Outcome::Replayed(_))) {
                let again = conns.run(|s| Conns::transaction(s, |tx| op.run(tx)));
                done = again.map(Outcome::Replayed);
            }
            Some(Answer::of(done))
        }
    };
    let c = ctx.into_inner();
    if lose_call && !c.made_call {
        return Progress::Blocked;
    }
    match c.halted {
        Some(progress) => progress,
        None => Progress::Finished(answer),
    }
}
