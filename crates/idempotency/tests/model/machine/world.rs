//! The world as the model sees it: the key table and the charges under
//! PostgreSQL's READ COMMITTED (one open transaction per worker; a write
//! to a key another open transaction wrote waits until it commits or rolls
//! back; reads see what is committed, and the reader's own writes), the
//! card networks with their own keys, and the ghost records the properties
//! read (what was answered first, which leases were taken over).

use super::Bugs;

/// A key: (account, key), as small numbers.
pub type KeyId = (u8, u8);

/// The foreign services a worker may call: the one the clients' requests
/// name, and another one (a worker built for another service).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Service {
    Network,
    Another,
}

impl Service {
    pub fn name(self) -> &'static str {
        match self {
            Service::Network => "network",
            Service::Another => "another",
        }
    }

    pub fn named(name: &str) -> Service {
        match name {
            "network" => Service::Network,
            "another" => Service::Another,
            other => panic!("no service {other}"),
        }
    }
}

/// A stored response as its columns hold it: status, headers JSON, body
/// in canonical JSON.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Resp {
    pub status: u16,
    pub headers: String,
    pub body: String,
}

impl Resp {
    /// The bytes a client receives: a replay must equal the first answer's.
    pub fn bytes(&self) -> String {
        format!("{} {} {}", self.status, self.headers, self.body)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Row {
    /// The body (request) that registered it, by number.
    pub body: u8,
    pub in_progress: bool,
    /// `locked_until` is ahead of the clock (meaningful in progress).
    pub lease_live: bool,
    pub token: u8,
    pub response: Option<Resp>,
    /// The foreign step it was registered with.
    pub step: Option<Service>,
    /// The claim's token that completed it (ghost: the table keeps none).
    pub completed_by: Option<u8>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Charge {
    pub key: KeyId,
    pub id: u8,
    pub body: u8,
    /// The job (one request's run, or one recovery's) that wrote it.
    pub job: u8,
    /// The foreign step that job performed.
    pub step: Option<Service>,
}

/// One worker's open transaction: its writes, applied at commit.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Tx {
    /// Each key's new row (`None`: deleted), in the order written.
    pub rows: Vec<(KeyId, Option<Row>)>,
    pub charges: Vec<Charge>,
    /// Tokens of the rows this transaction took over (ghost).
    pub fences: Vec<u8>,
    /// A row it took over while its lease was still live (ghost).
    pub overlap: bool,
    pub step: Option<Service>,
}

impl Tx {
    fn row(&self, key: KeyId) -> Option<&Option<Row>> {
        self.rows
            .iter()
            .rev()
            .find(|(k, _)| *k == key)
            .map(|(_, r)| r)
    }
}

/// An authorization at a network, under the key derived from the client's.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Auth {
    pub service: Service,
    pub key: KeyId,
    pub body: u8,
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct World {
    pub rows: Vec<(KeyId, Row)>,
    pub charges: Vec<Charge>,
    pub txs: Vec<Option<Tx>>,
    pub auths: Vec<Auth>,
    pub next_token: u8,
    /// Ghost: each key's first stored answer, the bodies that ever held a
    /// row of it, the step its first row was written with, the tokens taken
    /// over, and whether a live lease was ever taken over.
    pub first_answer: Vec<(KeyId, String)>,
    pub bodies_seen: Vec<(KeyId, u8)>,
    pub began_with: Vec<(KeyId, Option<Service>)>,
    pub fenced: Vec<u8>,
    pub overlap: bool,
}

/// Why a statement cannot run now: another open transaction holds the key.
pub struct Blocked;

impl World {
    pub fn new(workers: usize) -> World {
        World {
            txs: vec![None; workers],
            ..World::default()
        }
    }

    pub fn committed(&self, key: KeyId) -> Option<&Row> {
        self.rows.iter().find(|(k, _)| *k == key).map(|(_, r)| r)
    }

    /// The row `worker` reads: its own write, else the committed one.
    pub fn visible(&self, worker: usize, key: KeyId) -> Option<Row> {
        match self.txs[worker].as_ref().and_then(|tx| tx.row(key)) {
            Some(own) => own.clone(),
            None => self.committed(key).cloned(),
        }
    }

    /// Whether another open transaction wrote `key` (its row or index entry).
    fn locked_by_other(&self, worker: usize, key: KeyId) -> bool {
        self.txs
            .iter()
            .enumerate()
            .any(|(w, tx)| w != worker && tx.as_ref().is_some_and(|tx| tx.row(key).is_some()))
    }

    /// A write to `key` by `worker`: it waits while another holds the key.
    pub fn may_write(&self, worker: usize, key: KeyId) -> Result<(), Blocked> {
        match self.locked_by_other(worker, key) {
            true => Err(Blocked),
            false => Ok(()),
        }
    }

    /// `INSERT … ON CONFLICT DO NOTHING`: a key's second insert waits on the
    /// unique index until the first commits (conflict) or rolls back.
    /// `bugs.check_then_insert`: a look, then an insert, with no
    /// constraint: a concurrent insert is neither seen nor waited for.
    pub fn insert(
        &mut self,
        worker: usize,
        key: KeyId,
        row: Row,
        bugs: &Bugs,
    ) -> Result<Option<u8>, Blocked> {
        if !bugs.check_then_insert {
            self.may_write(worker, key)?;
        }
        if self.visible(worker, key).is_some() {
            return Ok(None);
        }
        Ok(Some(self.write(worker, key, row)))
    }

    /// Writes `row` (its token new) in `worker`'s transaction; the token.
    pub fn write(&mut self, worker: usize, key: KeyId, mut row: Row) -> u8 {
        self.next_token += 1;
        row.token = self.next_token;
        self.tx(worker).rows.push((key, Some(row)));
        self.next_token
    }

    pub fn delete(&mut self, worker: usize, key: KeyId) {
        self.tx(worker).rows.push((key, None));
    }

    pub fn tx(&mut self, worker: usize) -> &mut Tx {
        self.txs[worker].get_or_insert_with(Tx::default)
    }

    pub fn rollback(&mut self, worker: usize) {
        self.txs[worker] = None;
    }

    /// Applies `worker`'s transaction, and the ghost records of it.
    pub fn commit(&mut self, worker: usize) {
        let Some(tx) = self.txs[worker].take() else {
            return;
        };
        for (key, row) in tx.rows {
            self.rows.retain(|(k, _)| *k != key);
            let Some(row) = row else { continue };
            if !self.bodies_seen.contains(&(key, row.body)) {
                self.bodies_seen.push((key, row.body));
            }
            if !self.began_with.iter().any(|(k, _)| *k == key) {
                self.began_with.push((key, tx.step));
            }
            if let Some(resp) = &row.response
                && !self.first_answer.iter().any(|(k, _)| *k == key)
            {
                self.first_answer.push((key, resp.bytes()));
            }
            self.rows.push((key, row));
        }
        self.rows.sort_by_key(|(k, _)| *k);
        self.charges.extend(tx.charges);
        self.fenced.extend(tx.fences);
        self.overlap |= tx.overlap;
    }

    pub fn first_answer(&self, key: KeyId) -> Option<&str> {
        self.first_answer
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, a)| a.as_str())
    }

    pub fn began_with(&self, key: KeyId) -> Option<Option<Service>> {
        self.began_with
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, s)| *s)
    }

    /// The network's own idempotency: a derived key's first call
    /// authorizes; a repeat with the same body replays it; another body is
    /// refused (`false`).
    pub fn authorize(&mut self, service: Service, key: KeyId, body: u8) -> bool {
        match self
            .auths
            .iter()
            .find(|a| a.service == service && a.key == key)
        {
            Some(auth) => auth.body == body,
            None => {
                self.auths.push(Auth { service, key, body });
                true
            }
        }
    }
}
