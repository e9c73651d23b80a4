//! The protocol model-checked (docs/model.md): every order of events up
//! to a bound, for both designs, with and without a foreign step, running
//! the crate's own code (`machine::replay`); and, for each rule the
//! protocol relies on, the counterexample the model finds without it.

mod machine;

use std::io::Write as _;
use std::time::Instant;

use idempotency::Mode;
use machine::bounds::{budget, clients, faulty, name};
use machine::{Bugs, ClientSpec, Config, Protocol};
use stateright::{Checker, Expectation, HasDiscoveries, Model};

use machine::properties as p;

/// The CI bound: 3 clients, 2 workers and the recovery task, both designs,
/// with and without a foreign step; the faults in mixes that fit the CI's
/// budget (each run's figures: docs/model.md). With a foreign step both
/// modes run the same phases, and the model's atomic duplicate does not
/// poll (it answers 409 and its client's retry stands for the wait), so the
/// atomic run with a foreign step has the smaller mix.
fn ci() -> Vec<Config> {
    let runs = [
        (Mode::Atomic, false, budget(1, 1, 0, 1)),
        (Mode::KeyFirst, false, budget(1, 0, 0, 0)),
        (Mode::KeyFirst, false, budget(0, 1, 0, 1)),
        (Mode::KeyFirst, true, budget(0, 0, 1, 0)),
        (Mode::Atomic, true, budget(0, 1, 0, 1)),
    ];
    let mut all: Vec<Config> = runs
        .into_iter()
        .map(|(mode, foreign, budget)| Config::new(mode, foreign, clients(), 2, budget))
        .collect();
    // Atomic again, its response announced: the key row is written
    // completed by the statement that registers it, as the app's charge does.
    let mut known = all[0].clone();
    known.known = true;
    all.push(known);
    all
}

/// Explores every state of `cfg` and checks every property there.
fn check_all(cfg: Config) {
    let label = name(&cfg);
    let started = Instant::now();
    let checker = Protocol(cfg).checker().threads(2).spawn_bfs().join();
    // Past the harness's capture: the default run shows what it explored.
    let _ = writeln!(
        std::io::stderr(),
        "model, {label}: {} states ({} unique), depth {}, {:.1?}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed()
    );
    let model = checker.model();
    let mut broken = Vec::new();
    for property in model.properties() {
        let found = checker.discovery(property.name);
        // A `sometimes` must be found; anything else must not.
        let expected = matches!(property.expectation, Expectation::Sometimes);
        match (found, expected) {
            (None, true) => broken.push(format!("never reached: {:?}", property.name)),
            (Some(path), false) => {
                let diagram = model.diagram(&path.into_vec());
                broken.push(format!(
                    "{:?} broken:\n```mermaid\n{diagram}\n```",
                    property.name
                ));
            }
            _ => {}
        }
    }
    assert!(broken.is_empty(), "{label}:\n{}", broken.join("\n"));
}

#[test]
fn the_protocol_keeps_every_promise_in_every_state_up_to_the_ci_bound() {
    for cfg in ci() {
        check_all(cfg);
    }
}

#[test]
#[ignore = "the bigger bound: minutes (docs/model.md has its figures)"]
fn the_protocol_keeps_every_promise_up_to_the_bigger_bound() {
    let runs = [
        (Mode::Atomic, false, budget(2, 2, 0, 1)),
        (Mode::KeyFirst, false, budget(1, 1, 0, 1)),
        (Mode::KeyFirst, true, budget(1, 1, 1, 0)),
        (Mode::KeyFirst, true, budget(0, 1, 1, 1)),
    ];
    for (mode, foreign, budget) in runs {
        check_all(Config::new(mode, foreign, clients(), 2, budget));
    }
    // Another account with the same key: a key is scoped to its account.
    let mut more = clients();
    more.push(ClientSpec {
        account: 1,
        key: 0,
        body: 0,
        sends: 1,
    });
    check_all(Config::new(
        Mode::KeyFirst,
        false,
        more,
        2,
        budget(1, 0, 0, 0),
    ));
}

/// With `bugs` on, the model finds a path that breaks `property`: printed
/// as a Mermaid diagram (`--nocapture` shows it), and returned.
fn counterexample(cfg: Config, bugs: Bugs, property: &'static str) -> String {
    let label = name(&cfg);
    let model = Protocol(cfg.with(bugs));
    // One thread: breadth first, in order, so the path found is short.
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into()))
        .spawn_bfs()
        .join();
    let path = checker.discovery(property).unwrap_or_else(|| {
        panic!(
            "{label}, {:?}: no counterexample to {property:?}",
            bugs.on()
        )
    });
    // The checker keeps the last violating state of the block it was
    // checking: cut the path at the first state that breaks the property
    // (an `eventually` path ends where it must, at a state with no way on).
    let model = checker.model();
    let property = model.property(property);
    let mut steps = path.into_vec();
    if property.expectation == Expectation::Always {
        let broken = |s| !(property.condition)(model, s);
        let first = steps
            .iter()
            .position(|(s, _)| broken(s))
            .expect("a broken state");
        steps.truncate(first + 1);
        steps[first].1 = None;
    }
    let diagram = model.diagram(&steps);
    println!(
        "{label}, {:?} breaks {:?}:\n```mermaid\n{diagram}\n```",
        bugs.on(),
        property.name
    );
    diagram
}

#[test]
fn without_the_unique_constraint_a_key_is_charged_twice() {
    let bugs = Bugs {
        check_then_insert: true,
        ..Bugs::default()
    };
    let diagram = counterexample(faulty(Mode::Atomic, false), bugs, p::ONE_CHARGE);
    assert_eq!(diagram.matches("INSERT k0 → ours").count(), 2, "two claims");
}

#[test]
fn without_the_lease_check_a_claim_taken_over_completes() {
    let bugs = Bugs {
        complete_without_lease: true,
        ..Bugs::default()
    };
    let diagram = counterexample(faulty(Mode::KeyFirst, false), bugs, p::FENCING);
    let taken = diagram.find("take over k0 → ours").expect("a takeover");
    assert!(
        diagram[taken..].contains("complete k0 → done"),
        "completed after"
    );
}

#[test]
fn a_takeover_while_the_lease_is_live_runs_one_key_twice_at_once() {
    let bugs = Bugs {
        takeover_while_live: true,
        ..Bugs::default()
    };
    let diagram = counterexample(faulty(Mode::KeyFirst, false), bugs, p::EXCLUSIVE);
    assert!(diagram.contains("take over k0 → ours"), "a takeover");
}

#[test]
fn without_the_fingerprint_on_the_fast_path_another_request_gets_a_replay() {
    let bugs = Bugs {
        fast_path_skips_fingerprint: true,
        ..Bugs::default()
    };
    let diagram = counterexample(faulty(Mode::KeyFirst, false), bugs, p::DURABLE);
    assert!(diagram.contains("(replay)"), "a replay");
}

#[test]
fn without_the_same_step_recovery_finishes_a_key_at_another_service() {
    let bugs = Bugs {
        recovery_any_step: true,
        ..Bugs::default()
    };
    let diagram = counterexample(faulty(Mode::KeyFirst, true), bugs, p::SAME_STEP);
    let other = [
        "recovery takes k0 (another)",
        "recovery takes k0 (no foreign step)",
    ];
    assert!(
        other.iter().any(|o| diagram.contains(o)),
        "a recovery of another kind"
    );
}

#[test]
fn a_replay_that_runs_the_operation_again_charges_twice() {
    let bugs = Bugs {
        replay_reruns: true,
        ..Bugs::default()
    };
    let diagram = counterexample(faulty(Mode::Atomic, false), bugs, p::ONE_CHARGE);
    assert_eq!(diagram.matches("INSERT charge").count(), 2, "two charges");
}

#[test]
fn without_the_recovery_task_a_key_left_by_a_crash_stays_in_progress() {
    let bugs = Bugs {
        no_recovery: true,
        ..Bugs::default()
    };
    let cfg = Config::new(Mode::KeyFirst, false, clients(), 2, budget(1, 0, 0, 0));
    let diagram = counterexample(cfg, bugs, p::SETTLES);
    assert!(diagram.contains("crash"), "a crash");
}

/// The page's lesson 6 draws two counterexamples from a file the example
/// `counterexamples` wrote; the model must still find exactly those.
#[test]
fn the_pages_counterexamples_are_what_the_model_finds_now() {
    let text = std::fs::read_to_string(machine::page::FILE)
        .unwrap_or_else(|e| panic!("{}: {e}", machine::page::FILE));
    let committed: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let now = machine::page::counterexamples();
    assert!(
        committed == now,
        "web/model/counterexamples.json is not what the model finds now: run `{}` and look at the page's lesson 6\nnow:\n{}",
        machine::page::COMMAND,
        serde_json::to_string_pretty(&now).expect("JSON")
    );
}
