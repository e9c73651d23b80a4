//! The demo's faults at the request's named points: the protocol's
//! (before COMMIT, after a key-first key's commit) and the application's
//! (around the card network's call), with the process's delay slots.

use std::sync::Arc;

use super::faults::Faults;
use super::{Busy, DelaySlots, NoSlot};
use crate::store::{HookFailure, Hooks};

impl DemoHooks {
    /// A slow network holds the transaction open as `delay-commit` does: it
    /// takes a delay slot too.
    fn network_delay(&self) -> Result<(), HookFailure> {
        if let Some(delay) = self.faults.network_delay {
            let _slot = match self.delayed.take(self.holder, delay) {
                Ok(slot) => slot,
                Err(NoSlot::Sandbox) => return Err(one_per_sandbox("network-delay")),
                Err(NoSlot::Demo(busy)) => return Err(self.busy("network-delay", busy)),
            };
            std::thread::sleep(delay);
        }
        Ok(())
    }

    /// Every slot taken: said in the answer's detail, and kept for its
    /// headers (see [`SLOTS_HEADER`]).
    fn busy(&self, fault: &str, busy: Busy) -> HookFailure {
        *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some(busy);
        let gap = if self.delayed.gap.is_zero() {
            String::new()
        } else {
            format!(
                ", or one ended or was refused less than {} ms ago (SQLite's write lock is every account's: the writes a delay held go first)",
                self.delayed.gap.as_millis()
            )
        };
        HookFailure::Overloaded(format!(
            "Demo-Fault: {fault}: {} of the {} transactions the demo may hold open at once are held by other sandboxes{gap}, so that the demo cannot take the database from other accounts. Nothing was done (this transaction rolled back); the first slot is given back in about {} ms: retry after Retry-After.",
            busy.held,
            busy.max,
            busy.free_in.as_millis()
        ))
    }
}

/// On an answer refused because every held-transaction slot was taken:
/// `held=<n>, max=<m>` (and `Retry-After` is the time until the first is
/// given back), so that the page can tell this refusal from an outage.
pub const SLOTS_HEADER: &str = "demo-slots";

/// A sandbox holds one transaction open at a time, so that one visitor
/// cannot take the demo's held transactions from the others.
fn one_per_sandbox(fault: &str) -> HookFailure {
    HookFailure::Overloaded(format!(
        "Demo-Fault: {fault}: your sandbox already holds a transaction open (delay-commit or network-delay), the most one sandbox may at once. Nothing was done; retry after Retry-After, once it has ended."
    ))
}

/// `abandon` and `abandon-after-network`: the worker stops here as a dead
/// process would. Its thread unwinds (`resume_unwind`: without the panic
/// hook, so nothing is printed), so nothing more of the request runs, not
/// even the release of its key-first claim, which stays in progress until
/// its lease runs out; the blocking task's end answers 500, and the
/// middleware throws that answer away as a lost one. Nothing is killed.
fn stop_as_a_dead_worker(fault: &'static str) -> ! {
    tracing::info!("Demo-Fault: {fault}: this request's worker stops as a dead process would");
    std::panic::resume_unwind(Box::new(fault))
}

/// The transaction faults of one request, with the process's delay slots.
pub(super) struct DemoHooks {
    pub(super) faults: Faults,
    pub(super) delayed: Arc<DelaySlots>,
    /// The sandbox whose request this is, as its held transaction counts:
    /// one each (`None`: the shared account, bounded by the demo's cap only).
    pub(super) holder: Option<i64>,
    /// Set when every slot was taken: the middleware says so in headers.
    pub(super) refused: Arc<std::sync::Mutex<Option<Busy>>>,
}

/// The protocol's points: a hook's failure goes back boxed, and the
/// application's errors downcast it to its [`HookFailure`].
impl idempotency::Hooks for DemoHooks {
    fn before_commit(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.commit()?)
    }

    fn after_key_committed(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.key_committed();
        Ok(())
    }
}

impl DemoHooks {
    /// Inside the transaction, before COMMIT. The delay slot is taken here,
    /// by the request that really holds a transaction: a duplicate waiting
    /// on the key holds none.
    fn commit(&self) -> Result<(), HookFailure> {
        if let Some(delay) = self.faults.delay_commit {
            let _slot = match self.delayed.take(self.holder, delay) {
                Ok(slot) => slot,
                Err(NoSlot::Sandbox) => return Err(one_per_sandbox("delay-commit")),
                Err(NoSlot::Demo(busy)) => return Err(self.busy("delay-commit", busy)),
            };
            std::thread::sleep(delay);
        }
        if self.faults.fail_before_commit {
            return Err(HookFailure::Injected(
                "Demo-Fault: fail-before-commit".to_owned(),
            ));
        }
        Ok(())
    }

    fn key_committed(&self) {
        if self.faults.crash_after_key {
            tracing::warn!("Demo-Fault: crash-after-key: killing this process with SIGKILL");
            // SIGKILL: no unwinding, no destructors, no rollback: a real crash.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        if self.faults.abandon {
            stop_as_a_dead_worker("abandon");
        }
    }
}

/// The application's points, around the card network's call.
impl Hooks for DemoHooks {
    fn before_remote_call(&self) -> Result<(), HookFailure> {
        if self.faults.network_down {
            return Err(HookFailure::Unavailable(
                "Demo-Fault: network-down: the card network did not answer, and nothing was authorized".to_owned(),
            ));
        }
        self.network_delay()
    }

    fn after_remote_call(&self) -> Result<(), HookFailure> {
        if self.faults.network_lose_answer {
            let mut cause = "Demo-Fault: network-lose-answer: the card network authorized, but its answer was lost on the way back".to_owned();
            // The detail goes on to promise the derived key; under this fault
            // that promise does not hold, and the learner must not read it as one.
            if self.faults.network_fresh_key {
                cause.push_str(" (and with Demo-Fault: network-fresh-key this request did not pass your key on: the network was asked under a new key of its own, so what follows does not hold here, and a retry is authorized again)");
            }
            return Err(HookFailure::Unavailable(cause));
        }
        if self.faults.abandon_after_network {
            stop_as_a_dead_worker("abandon-after-network");
        }
        Ok(())
    }
}
