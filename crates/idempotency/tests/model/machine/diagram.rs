//! A path as a Mermaid sequence diagram: one arrow per statement, call,
//! answer or fault, as the article draws them.

use super::replay::{Called, Entry, Seen};
use super::world::{KeyId, Service};
use super::{Action, Protocol, State};

fn key(k: KeyId) -> String {
    match k.0 {
        0 => format!("k{}", k.1),
        a => format!("a{a}/k{}", k.1),
    }
}

fn seen(row: &Option<Seen>) -> String {
    match row {
        None => "none".into(),
        Some(r) if !r.in_progress => format!("completed, body b{}", r.body),
        Some(r) => {
            let lease = if r.lease_live { "live" } else { "run out" };
            format!("in progress, body b{}, lease {lease}", r.body)
        }
    }
}

fn net(s: Service) -> &'static str {
    match s {
        Service::Network => "N",
        Service::Another => "A",
    }
}

/// One entry as an arrow from worker `w`.
fn entry(w: &str, k: &str, e: &Entry) -> String {
    let db = |what: String| format!("{w}->>DB: {what}");
    match e {
        Entry::Read { in_tx, row } => {
            let at = if *in_tx { "" } else { " (no transaction)" };
            db(format!("SELECT {k}{at} → {}", seen(row)))
        }
        Entry::Insert(Some(t)) => db(format!("INSERT {k} → ours, lease t{t}")),
        Entry::Insert(None) => db(format!("INSERT {k} → conflict")),
        Entry::TakeOver(Some(t)) => db(format!("take over {k} → ours, lease t{t}")),
        Entry::TakeOver(None) => db(format!("take over {k} → refused")),
        Entry::Complete(true) => db(format!("complete {k} → done")),
        Entry::Complete(false) => db(format!("complete {k} → lease lost")),
        Entry::Release(true) => db(format!("release {k} → deleted")),
        Entry::Release(false) => db(format!("release {k} → not ours")),
        Entry::Charge(id) => db(format!("INSERT charge ch{id}")),
        Entry::Commit => db("COMMIT".into()),
        Entry::Rollback => db("ROLLBACK".into()),
        Entry::Call(s, c) => {
            let answer = match c {
                Called::Done => "authorized",
                Called::Lost => "authorized, answer lost",
                Called::Refused => "refused: key holds another request",
            };
            format!("{w}->>{}: authorize {k} → {answer}", net(*s))
        }
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

    /// `path` as a Mermaid sequence diagram, naming only who takes part.
    pub fn diagram(&self, path: &[(State, Option<Action>)]) -> String {
        let mut lines = Vec::new();
        for (s, action) in path {
            // The last state has no action.
            let Some(action) = *action else { continue };
            lines.extend(self.lines(s, action));
        }
        let mut names: Vec<(String, &str)> = (0..self.0.clients.len())
            .map(|c| (format!("C{c}"), ""))
            .chain((0..=self.0.workers).map(|w| (self.worker_name(w), "")))
            .collect();
        names.extend([
            ("DB".into(), ""),
            ("N".into(), " as Network"),
            ("A".into(), " as Another"),
        ]);
        let takes_part = |name: &str| {
            lines.iter().any(|l| {
                l.starts_with(&format!("{name}-"))
                    || l.contains(&format!(">{name}:"))
                    || l.contains(&format!("x{name}:"))
                    || l.starts_with(&format!("Note over {name}:"))
            })
        };
        let mut out = vec!["sequenceDiagram".to_owned()];
        for (name, alias) in &names {
            if takes_part(name) {
                out.push(format!("    participant {name}{alias}"));
            }
        }
        out.extend(lines.into_iter().map(|l| format!("    {l}")));
        out.join("\n")
    }

    fn lines(&self, s: &State, action: Action) -> Vec<String> {
        let w = |w: usize| self.worker_name(w);
        let job_key = |worker: usize| s.workers[worker].job.as_ref().map(|j| key(j.key));
        let mut lines = match action {
            Action::Send { client, worker } => {
                let spec = self.0.clients[client];
                let k = key((spec.account, spec.key));
                vec![format!(
                    "C{client}->>{}: POST /charges, key {k}, body b{}",
                    w(worker),
                    spec.body
                )]
            }
            Action::Recover { key: k, step } => {
                let step = step.map_or("no foreign step", |s| s.name());
                vec![format!("Note over R: recovery takes {} ({step})", key(k))]
            }
            Action::Deliver { worker } => {
                let (client, answer) = s.workers[worker].reply.clone().expect("a reply");
                vec![format!("{}-->>C{client}: {}", w(worker), answer.label())]
            }
            Action::Lose { worker } => {
                let (client, answer) = s.workers[worker].reply.clone().expect("a reply");
                vec![format!(
                    "{}--xC{client}: {} (lost)",
                    w(worker),
                    answer.label()
                )]
            }
            Action::Crash { worker } => vec![format!(
                "Note over {}: crash: its transaction rolls back",
                w(worker)
            )],
            Action::GiveUp { client } => vec![format!("Note over C{client}: gives up")],
            Action::Expire { key: k } => {
                vec![format!("Note over DB: the lease on {} runs out", key(k))]
            }
            Action::Step { .. } => Vec::new(),
        };
        let worker = match action {
            Action::Send { worker, .. } | Action::Step { worker, .. } => worker,
            Action::Recover { .. } => self.0.workers,
            _ => return lines,
        };
        let k = match action {
            Action::Send { client, .. } => key(self.key(client)),
            Action::Recover { key: k, .. } => key(k),
            _ => job_key(worker).unwrap_or_default(),
        };
        lines.extend(
            self.made(s, action)
                .iter()
                .map(|e| entry(&w(worker), &k, e)),
        );
        lines
    }
}
