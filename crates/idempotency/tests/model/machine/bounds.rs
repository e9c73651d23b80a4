//! The clients and fault budgets the model tests run with, shared with
//! the examples (the Explorer, the page's counterexamples).

use idempotency::Mode;

use super::{Budget, ClientSpec, Config};

/// Two clients with one key and body (a retry from elsewhere, or a
/// concurrent duplicate; the first may send twice), and a third that
/// reuses the key with another body.
pub fn clients() -> Vec<ClientSpec> {
    let c = |body, sends| ClientSpec {
        account: 0,
        key: 0,
        body,
        sends,
    };
    vec![c(0, 2), c(0, 1), c(1, 1)]
}

pub fn budget(crashes: u8, lost_answers: u8, lost_calls: u8, other_recoveries: u8) -> Budget {
    Budget {
        crashes,
        lost_answers,
        lost_calls,
        // One lease runs out early; once all is quiet, time passes freely.
        expiries: 1,
        other_recoveries,
    }
}

/// A revert test's bound: one of each fault but the crash.
pub fn faulty(mode: Mode, foreign: bool) -> Config {
    Config::new(
        mode,
        foreign,
        clients(),
        2,
        budget(0, 1, u8::from(foreign), 1),
    )
}

/// A run's bound in words.
pub fn name(cfg: &Config) -> String {
    let step = if cfg.foreign { "with" } else { "without" };
    let b = cfg.budget;
    let known = if cfg.known { ", response known" } else { "" };
    let accounts = match cfg.clients.iter().any(|c| c.account > 0) {
        true => " on two accounts",
        false => "",
    };
    format!(
        "{}{known} {step} a foreign step, {} clients{accounts} ({} crash, {} lost answer, {} lost call, {} early expiry, {} other recovery)",
        cfg.mode.as_str(),
        cfg.clients.len(),
        b.crashes,
        b.lost_answers,
        b.lost_calls,
        b.expiries,
        b.other_recoveries
    )
}
