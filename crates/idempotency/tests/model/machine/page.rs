//! The counterexamples the teaching page draws (lesson 6, "What goes wrong
//! without each rule"), found the same way on every run.
//!
//! Why the path is stable: a plain breadth-first search over the model
//! (`shortest`), one thread, that visits states in the order the model
//! lists its initial states and actions (both `Vec`s, in a fixed order)
//! and stops at the first state that breaks the property. So the path is
//! a shortest one, and among those the first in that order; the set of
//! seen states only answers "seen before?", so no hash or thread decides
//! anything. (stateright's own BFS reports the last violating state of a
//! block of 1500 and splits work across threads: a correct path, but not
//! always the shortest, nor one to pin a page to.)
//!
//! `cargo run -p idempotency --example counterexamples` writes them to
//! `web/model/counterexamples.json`; the model test
//! `the_pages_counterexamples_are_what_the_model_finds_now` recomputes them
//! and compares.

use std::collections::{HashMap, VecDeque};

use idempotency::Mode;
use serde_json::{Value, json};
use stateright::{Expectation, Model};

use super::bounds::{faulty, name};
use super::properties as p;
use super::{Action, Bugs, Config, Protocol, State};

/// The command that writes the page's file.
pub const COMMAND: &str = "cargo run -p idempotency --example counterexamples";

/// Where the page's file is, from this crate.
pub const FILE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../web/model/counterexamples.json"
);

/// A shortest path to a state that breaks `property`, and how many
/// distinct states the search had found when it stopped.
pub struct Found {
    pub path: Vec<(State, Option<Action>)>,
    pub explored: usize,
}

/// Breadth first, in the model's order, to the first state that breaks
/// the `always` property `name`; `None` if no state within the bound does.
pub fn shortest(model: &Protocol, name: &'static str) -> Option<Found> {
    let property = model.property(name);
    assert!(
        property.expectation == Expectation::Always,
        "{name:?}: a path to a broken state is an `always`'s counterexample"
    );
    // Each state once, with the state and action it was first reached by.
    let mut states: Vec<(State, Option<(usize, Action)>)> = Vec::new();
    let mut seen: HashMap<State, usize> = HashMap::new();
    let mut queue = VecDeque::new();
    for s in model.init_states() {
        if model.within_boundary(&s) && !seen.contains_key(&s) {
            seen.insert(s.clone(), states.len());
            queue.push_back(states.len());
            states.push((s, None));
        }
    }
    let mut actions = Vec::new();
    while let Some(i) = queue.pop_front() {
        if !(property.condition)(model, &states[i].0) {
            return Some(Found {
                path: back(&states, i),
                explored: states.len(),
            });
        }
        model.actions(&states[i].0, &mut actions);
        for action in actions.drain(..) {
            let Some(next) = model.next_state(&states[i].0, action) else {
                continue;
            };
            if !model.within_boundary(&next) || seen.contains_key(&next) {
                continue;
            }
            seen.insert(next.clone(), states.len());
            queue.push_back(states.len());
            states.push((next, Some((i, action))));
        }
    }
    None
}

/// The path from an initial state to `states[end]`, each state with the
/// action taken from it (the last with none).
fn back(states: &[(State, Option<(usize, Action)>)], end: usize) -> Vec<(State, Option<Action>)> {
    let mut path = vec![(states[end].0.clone(), None)];
    let mut at = end;
    while let Some((parent, action)) = states[at].1 {
        path.push((states[parent].0.clone(), Some(action)));
        at = parent;
    }
    path.reverse();
    path
}

/// One counterexample the page shows: which rule is off, in which bound.
struct Shown {
    id: &'static str,
    bug: &'static str,
    bugs: Bugs,
    cfg: Config,
    property: &'static str,
}

fn shown() -> [Shown; 2] {
    [
        Shown {
            id: "fencing",
            bug: "complete_without_lease",
            bugs: Bugs {
                complete_without_lease: true,
                ..Bugs::default()
            },
            cfg: faulty(Mode::KeyFirst, false),
            property: p::FENCING,
        },
        Shown {
            id: "live-takeover",
            bug: "takeover_while_live",
            bugs: Bugs {
                takeover_while_live: true,
                ..Bugs::default()
            },
            cfg: faulty(Mode::KeyFirst, false),
            property: p::EXCLUSIVE,
        },
    ]
}

fn bound(cfg: &Config) -> Value {
    let b = cfg.budget;
    json!({
        "design": cfg.mode.as_str(),
        "foreign_step": cfg.foreign,
        "clients": cfg.clients.len(),
        "workers": cfg.workers,
        "recovery_task": true,
        "crashes": b.crashes,
        "lost_answers": b.lost_answers,
        "lost_calls": b.lost_calls,
        "early_expiries": b.expiries,
        "other_recoveries": b.other_recoveries,
        "label": name(cfg),
    })
}

/// Both counterexamples as the page's file holds them.
pub fn counterexamples() -> Value {
    let all: Vec<Value> = shown()
        .into_iter()
        .map(|s| {
            let bound = bound(&s.cfg);
            let model = Protocol(s.cfg.with(s.bugs));
            let found = shortest(&model, s.property)
                .unwrap_or_else(|| panic!("{}: no counterexample to {:?}", s.bug, s.property));
            let rows = model.rows(&found.path);
            json!({
                "id": s.id,
                "switched_off": s.bug,
                "property": s.property,
                "bound": bound,
                "states_explored": found.explored,
                "depth": found.path.len() - 1,
                "lanes": model.lanes(&rows),
                "rows": rows.iter().enumerate().map(|(i, r)| r.json(i + 1)).collect::<Vec<_>>(),
                "mermaid": model.diagram(&found.path),
            })
        })
        .collect();
    json!({
        "generated_by": COMMAND,
        "search": "breadth first in the model's order, stopping at the first state that breaks the property: a shortest path",
        "counterexamples": all,
    })
}
