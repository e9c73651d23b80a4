//! A path as rows (who acts, what, from which lane to which, the label),
//! and the rows as a Mermaid sequence diagram: one arrow per statement,
//! call, answer or fault, as the article draws them. The page draws the
//! same rows (`page`), so both show one path the same way.

use serde_json::{Value, json};

use super::replay::{Called, Entry, Seen};
use super::world::{KeyId, Service};
use super::{Action, Answer, Protocol, State};

/// One arrow or note of a path.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// The lane that acts: an arrow's start, a note's lane.
    pub actor: String,
    /// What happens, by a stable name (`send`, `select`, `insert`, …) that
    /// the page's messages translate with `args`.
    pub action: &'static str,
    pub from: String,
    /// For a note, its own lane.
    pub to: String,
    /// `call`, `reply`, `lost` or `note`.
    pub arrow: &'static str,
    /// The label in English, as the Mermaid diagram prints it.
    pub note: String,
    /// The label's parts (`key`, `lease`, …).
    pub args: Value,
}

impl Row {
    fn call(from: &str, to: &str, action: &'static str, note: String, args: Value) -> Row {
        Row {
            actor: from.into(),
            action,
            from: from.into(),
            to: to.into(),
            arrow: "call",
            note,
            args,
        }
    }

    fn note(over: &str, action: &'static str, note: String, args: Value) -> Row {
        Row {
            arrow: "note",
            ..Row::call(over, over, action, note, args)
        }
    }

    fn mermaid(&self) -> String {
        let (from, to, note) = (&self.from, &self.to, &self.note);
        match self.arrow {
            "note" => format!("Note over {from}: {note}"),
            "reply" => format!("{from}-->>{to}: {note}"),
            "lost" => format!("{from}--x{to}: {note}"),
            _ => format!("{from}->>{to}: {note}"),
        }
    }

    pub fn json(&self, step: usize) -> Value {
        json!({
            "step": step,
            "actor": self.actor,
            "action": self.action,
            "from": self.from,
            "to": self.to,
            "arrow": self.arrow,
            "note": self.note,
            "args": self.args,
        })
    }
}

fn key(k: KeyId) -> String {
    match k.0 {
        0 => format!("k{}", k.1),
        a => format!("a{a}/k{}", k.1),
    }
}

fn seen(row: &Option<Seen>) -> (String, Value) {
    match row {
        None => ("none".into(), json!({ "row": "none" })),
        Some(r) if !r.in_progress => (
            format!("completed, body b{}", r.body),
            json!({ "row": "completed", "body": format!("b{}", r.body) }),
        ),
        Some(r) => {
            let lease = if r.lease_live { "live" } else { "run out" };
            (
                format!("in progress, body b{}, lease {lease}", r.body),
                json!({ "row": "in_progress", "body": format!("b{}", r.body), "lease_live": r.lease_live }),
            )
        }
    }
}

fn net(s: Service) -> &'static str {
    match s {
        Service::Network => "N",
        Service::Another => "A",
    }
}

/// `args` with `more`'s fields added.
fn with(mut args: Value, more: Value) -> Value {
    if let (Some(a), Value::Object(m)) = (args.as_object_mut(), more) {
        a.extend(m);
    }
    args
}

/// One entry as an arrow from worker `w`.
fn entry(w: &str, k: &str, e: &Entry) -> Row {
    let key = json!({ "key": k });
    let db = |action, what: String, more: Value| {
        Row::call(w, "DB", action, what, with(key.clone(), more))
    };
    let lease = |t: &u8| format!("t{t}");
    match e {
        Entry::Read { in_tx, row } => {
            let at = if *in_tx { "" } else { " (no transaction)" };
            let (text, args) = seen(row);
            let args = with(args, json!({ "in_transaction": in_tx }));
            db("select", format!("SELECT {k}{at} → {text}"), args)
        }
        Entry::Insert(Some(t)) => db(
            "insert",
            format!("INSERT {k} → ours, lease {}", lease(t)),
            json!({ "won": true, "lease": lease(t) }),
        ),
        Entry::Insert(None) => db(
            "insert",
            format!("INSERT {k} → conflict"),
            json!({ "won": false }),
        ),
        Entry::TakeOver(Some(t)) => db(
            "take_over",
            format!("take over {k} → ours, lease {}", lease(t)),
            json!({ "won": true, "lease": lease(t) }),
        ),
        Entry::TakeOver(None) => db(
            "take_over",
            format!("take over {k} → refused"),
            json!({ "won": false }),
        ),
        Entry::Complete(done) => {
            let what = if *done { "done" } else { "lease lost" };
            db(
                "complete",
                format!("complete {k} → {what}"),
                json!({ "done": done }),
            )
        }
        Entry::Release(deleted) => {
            let what = if *deleted { "deleted" } else { "not ours" };
            db(
                "release",
                format!("release {k} → {what}"),
                json!({ "deleted": deleted }),
            )
        }
        Entry::Charge(id) => db(
            "charge",
            format!("INSERT charge ch{id}"),
            json!({ "charge": format!("ch{id}") }),
        ),
        Entry::Commit => db("commit", "COMMIT".into(), json!({})),
        Entry::Rollback => db("rollback", "ROLLBACK".into(), json!({})),
        Entry::Call(s, c) => {
            let (answer, code) = match c {
                Called::Done => ("authorized", "done"),
                Called::Lost => ("authorized, answer lost", "lost"),
                Called::Refused => ("refused: key holds another request", "refused"),
            };
            let args = with(key.clone(), json!({ "service": s.name(), "answer": code }));
            Row::call(
                w,
                net(*s),
                "authorize",
                format!("authorize {k} → {answer}"),
                args,
            )
        }
    }
}

fn answer_args(answer: &Answer) -> Value {
    match answer {
        Answer::Charged { replay, charge, .. } => {
            json!({ "status": 201, "charge": format!("ch{charge}"), "replay": replay })
        }
        Answer::Status(s) => json!({ "status": s }),
    }
}

impl Protocol {
    fn worker_name(&self, w: usize) -> String {
        match w == self.0.workers {
            true => "R".into(),
            false => format!("W{w}"),
        }
    }

    /// The entries `action` makes from `s`, run again on a copy.
    fn made(&self, s: &State, action: Action) -> Vec<Entry> {
        let mut world = s.world.clone();
        let (worker, mut job, lose_call) = match action {
            Action::Step { worker, lose_call } => {
                let job = s.workers[worker].job.clone().expect("a job");
                (worker, job, lose_call)
            }
            Action::Send { client, worker } => {
                let spec = self.0.clients[client];
                let key = (spec.account, spec.key);
                (
                    worker,
                    self.job(s, Some(client), key, spec.body, self.0.step()),
                    false,
                )
            }
            Action::Recover { key, step } => {
                let body = s.world.committed(key).expect("a stuck row").body;
                (self.0.workers, self.job(s, None, key, body, step), false)
            }
            _ => return Vec::new(),
        };
        let before = job.log.len();
        super::replay::step(&self.0, &mut world, &mut job, worker, lose_call);
        job.log[before..].to_vec()
    }

    /// `path`'s arrows and notes, in order.
    pub fn rows(&self, path: &[(State, Option<Action>)]) -> Vec<Row> {
        let mut rows = Vec::new();
        for (s, action) in path {
            // The last state has no action.
            let Some(action) = *action else { continue };
            rows.extend(self.lines(s, action));
        }
        rows
    }

    /// The lanes `rows` use, in the diagram's order: clients, workers, the
    /// recovery worker, the database, the card networks.
    pub fn lanes(&self, rows: &[Row]) -> Vec<String> {
        (0..self.0.clients.len())
            .map(|c| format!("C{c}"))
            .chain((0..=self.0.workers).map(|w| self.worker_name(w)))
            .chain(["DB", "N", "A"].map(String::from))
            .filter(|lane| rows.iter().any(|r| &r.from == lane || &r.to == lane))
            .collect()
    }

    /// `path` as a Mermaid sequence diagram, naming only who takes part.
    pub fn diagram(&self, path: &[(State, Option<Action>)]) -> String {
        let rows = self.rows(path);
        let mut out = vec!["sequenceDiagram".to_owned()];
        for lane in self.lanes(&rows) {
            let alias = match lane.as_str() {
                "N" => " as Network",
                "A" => " as Another",
                _ => "",
            };
            out.push(format!("    participant {lane}{alias}"));
        }
        out.extend(rows.iter().map(|r| format!("    {}", r.mermaid())));
        out.join("\n")
    }

    fn lines(&self, s: &State, action: Action) -> Vec<Row> {
        let w = |w: usize| self.worker_name(w);
        let reply = |worker: usize| s.workers[worker].reply.clone().expect("a reply");
        let mut rows = match action {
            Action::Send { client, worker } => {
                let spec = self.0.clients[client];
                let k = key((spec.account, spec.key));
                let note = format!("POST /charges, key {k}, body b{}", spec.body);
                let args = json!({ "key": k, "body": format!("b{}", spec.body) });
                vec![Row::call(
                    &format!("C{client}"),
                    &w(worker),
                    "send",
                    note,
                    args,
                )]
            }
            Action::Recover { key: k, step } => {
                let step = step.map_or("no foreign step", |s| s.name());
                let note = format!("recovery takes {} ({step})", key(k));
                let args = json!({ "key": key(k), "step": step });
                vec![Row::note("R", "recover", note, args)]
            }
            Action::Deliver { worker } | Action::Lose { worker } => {
                let (client, answer) = reply(worker);
                let lost = matches!(action, Action::Lose { .. });
                let (verb, arrow, note) = match lost {
                    false => ("deliver", "reply", answer.label()),
                    true => ("lose", "lost", format!("{} (lost)", answer.label())),
                };
                let row = Row::call(
                    &w(worker),
                    &format!("C{client}"),
                    verb,
                    note,
                    answer_args(&answer),
                );
                vec![Row { arrow, ..row }]
            }
            Action::Crash { worker } => vec![Row::note(
                &w(worker),
                "crash",
                "crash: its transaction rolls back".into(),
                json!({}),
            )],
            Action::GiveUp { client } => {
                vec![Row::note(
                    &format!("C{client}"),
                    "give_up",
                    "gives up".into(),
                    json!({}),
                )]
            }
            Action::Expire { key: k } => vec![Row::note(
                "DB",
                "expire",
                format!("the lease on {} runs out", key(k)),
                json!({ "key": key(k) }),
            )],
            Action::Step { .. } => Vec::new(),
        };
        let worker = match action {
            Action::Send { worker, .. } | Action::Step { worker, .. } => worker,
            Action::Recover { .. } => self.0.workers,
            _ => return rows,
        };
        let k = match action {
            Action::Send { client, .. } => key(self.key(client)),
            Action::Recover { key: k, .. } => key(k),
            _ => s.workers[worker]
                .job
                .as_ref()
                .map(|j| key(j.key))
                .unwrap_or_default(),
        };
        rows.extend(
            self.made(s, action)
                .iter()
                .map(|e| entry(&w(worker), &k, e)),
        );
        rows
    }
}
