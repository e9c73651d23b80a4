//! What the protocol promises, stated once, checked in every state (the
//! `always` ones), at the end of every path (`eventually`), and shown
//! reachable (`sometimes`, so that a model that did nothing fails).

use std::collections::BTreeMap;

use stateright::Property;

use super::world::KeyId;
use super::{Answer, Config, Protocol, State};

pub const ONE_CHARGE: &str = "at most one charge per key and account";
pub const ONE_AUTHORIZATION: &str = "at most one authorization per key and account";
pub const DURABLE: &str = "every 2xx a client received is its own durable charge";
pub const SAME_REPLAY: &str = "a replay is byte-identical to the first stored answer";
pub const MISMATCH: &str = "422 only for a different request";
pub const NO_EFFECT: &str = "no effect after a 409, a 422 or an error";
pub const FENCING: &str = "a claim whose lease was taken over never completes";
pub const EXCLUSIVE: &str = "a live lease is never taken over";
pub const SAME_STEP: &str = "recovery acts only for the foreign step a key began with";
pub const SETTLES: &str = "every key ends completed or released";

fn at_most_one<T: Ord>(items: impl Iterator<Item = T>) -> bool {
    let mut counts = BTreeMap::new();
    items.for_each(|k| *counts.entry(k).or_insert(0) += 1);
    counts.values().all(|&n| n <= 1)
}

/// Each client's key, body and the answers it received.
fn received(m: &Protocol, s: &State) -> impl Iterator<Item = (KeyId, u8, Answer)> {
    let specs = m.0.clients.clone();
    let answers: Vec<_> = s.clients.iter().map(|c| c.answers.clone()).collect();
    specs.into_iter().zip(answers).flat_map(|(spec, answers)| {
        answers
            .into_iter()
            .map(move |a| ((spec.account, spec.key), spec.body, a))
    })
}

fn durable(m: &Protocol, s: &State) -> bool {
    received(m, s).all(|(key, body, answer)| match answer {
        Answer::Charged { bytes, charge, .. } => {
            let row = s.world.committed(key);
            let stored = row.and_then(|r| r.response.as_ref()).map(|r| r.bytes());
            let ours = s
                .world
                .charges
                .iter()
                .any(|c| c.id == charge && c.key == key && c.body == body);
            stored.as_deref() == Some(&*bytes) && ours
        }
        Answer::Status(_) => true,
    })
}

fn same_replay(m: &Protocol, s: &State) -> bool {
    received(m, s).all(|(key, _, answer)| match answer {
        Answer::Charged {
            replay: true,
            bytes,
            ..
        } => s.world.first_answer(key) == Some(&*bytes),
        _ => true,
    })
}

fn mismatch_only_for_another(m: &Protocol, s: &State) -> bool {
    received(m, s).all(|(key, body, answer)| {
        answer != Answer::Status(422) || s.world.bodies_seen.iter().any(|&(k, b)| k == key && b != body)
            // The network saw another body under the derived key.
            || s.world.auths.iter().any(|a| a.key == key && a.body != body)
    })
}

fn settled(_: &Protocol, s: &State) -> bool {
    Protocol::quiet(s) && s.world.rows.iter().all(|(_, r)| !r.in_progress)
}

pub fn all(cfg: &Config) -> Vec<Property<Protocol>> {
    let mut all = vec![
        Property::always(ONE_CHARGE, |_, s: &State| {
            at_most_one(s.world.charges.iter().map(|c| c.key))
        }),
        Property::always(ONE_AUTHORIZATION, |_, s: &State| {
            at_most_one(s.world.auths.iter().map(|a| a.key))
        }),
        Property::always(DURABLE, durable),
        Property::always(SAME_REPLAY, same_replay),
        Property::always(MISMATCH, mismatch_only_for_another),
        Property::always(NO_EFFECT, |_, s: &State| {
            s.world
                .charges
                .iter()
                .all(|c| !s.no_effect.contains(&c.job))
        }),
        Property::always(FENCING, |_, s: &State| {
            s.world
                .rows
                .iter()
                .all(|(_, r)| r.completed_by.is_none_or(|t| !s.world.fenced.contains(&t)))
        }),
        Property::always(EXCLUSIVE, |_, s: &State| !s.world.overlap),
        Property::always(SAME_STEP, |_, s: &State| {
            s.world
                .charges
                .iter()
                .all(|c| s.world.began_with(c.key) == Some(c.step))
                && s.world.auths.iter().all(|a| {
                    s.world
                        .began_with(a.key)
                        .is_none_or(|b| b == Some(a.service))
                })
        }),
        Property::eventually(SETTLES, settled),
        Property::sometimes("a retry is replayed", |_, s: &State| {
            s.clients.iter().any(|c| {
                c.answers
                    .iter()
                    .any(|a| matches!(a, Answer::Charged { replay: true, .. }))
            })
        }),
        Property::sometimes("a reused key is answered 422", |_, s: &State| {
            s.clients
                .iter()
                .any(|c| c.answers.contains(&Answer::Status(422)))
        }),
    ];
    // Atomic without a foreign step never commits a key in progress: a
    // duplicate waits for the first instead.
    if cfg.mode == idempotency::Mode::KeyFirst || cfg.foreign {
        all.push(Property::sometimes(
            "a client is answered 409",
            |_, s: &State| {
                s.clients
                    .iter()
                    .any(|c| c.answers.contains(&Answer::Status(409)))
            },
        ));
        all.push(Property::sometimes(
            "recovery finishes a key",
            |_, s: &State| s.recovered,
        ));
        all.push(Property::sometimes(
            "a lease is taken over",
            |_, s: &State| !s.world.fenced.is_empty(),
        ));
    }
    all
}
