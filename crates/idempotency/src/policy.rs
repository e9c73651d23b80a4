//! The server's choices, held once and used for every keyed request: the
//! design ([`Mode`]), how long a key lives, the lease, the recent-keys hint
//! and the hooks.
//!
//! The hooks are the protocol's named points, where an application counts
//! what happened and a test or a teaching demo injects a fault: before
//! COMMIT, after a key-first key's commit, a key that was found taken, keys
//! purged. Production installs none, or only its metrics. A fault is the
//! hook's own error type, boxed: the protocol rolls the transaction back
//! and returns it as [`Error::Hook`], and what it means (a 500, a 503) is
//! the application's to say, by downcasting to its type.

use std::sync::Arc;
use std::time::Duration;

use crate::key_store::{KeyedRequest, NewKey, SavedResponse};
use crate::outcome::Error;
use crate::recent::RecentKeys;

/// Where the key row is committed relative to the operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Key, operation and response in one transaction: a concurrent retry waits, then replays.
    Atomic,
    /// The key is committed first: a concurrent retry gets 409 at once; stuck keys are reclaimed after their lease.
    KeyFirst,
}

impl Mode {
    /// The mode's name, as [`FromStr`](std::str::FromStr) reads it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Atomic => "atomic",
            Mode::KeyFirst => "key-first",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "atomic" => Ok(Mode::Atomic),
            "key-first" => Ok(Mode::KeyFirst),
            other => Err(format!("{other:?}: expected atomic or key-first")),
        }
    }
}

/// The server's choices, held once and used for every keyed request.
#[derive(Clone)]
pub struct Policy {
    /// Where the key row is committed relative to the operation.
    pub mode: Mode,
    /// How long a key is remembered.
    pub ttl: Duration,
    /// How long a key in progress is protected before others may take it
    /// over (key-first; a foreign step's phases; recovery).
    pub lease: Duration,
    /// Keys completed here lately, read first in atomic mode (see
    /// [`RecentKeys`]).
    pub recent: Option<Arc<RecentKeys>>,
    /// What runs at the protocol's named points, in this order: the
    /// application's metrics, a test's or a demo's faults. None by default.
    pub hooks: Vec<Arc<dyn Hooks>>,
}

impl Policy {
    /// `mode`, keys kept 24 hours, a 30-second lease, no hint, no hooks.
    pub fn new(mode: Mode) -> Policy {
        Policy {
            mode,
            ttl: Duration::from_secs(24 * 60 * 60),
            lease: Duration::from_secs(30),
            recent: None,
            hooks: Vec::new(),
        }
    }

    /// The key row `request` writes, under this policy: completed with
    /// `completed`, or else in progress under a fresh lease.
    pub(crate) fn new_key<'a>(
        &self,
        request: &'a KeyedRequest<'a>,
        foreign_step: Option<&'a str>,
        completed: Option<&'a SavedResponse>,
    ) -> NewKey<'a> {
        NewKey {
            request,
            ttl: self.ttl,
            lease: self.lease,
            foreign_step,
            completed,
        }
    }

    /// Runs `hook` on each installed hook, in order, until one fails.
    pub(crate) fn hook(
        &self,
        hook: impl Fn(&dyn Hooks) -> Result<(), HookError>,
    ) -> Result<(), Error> {
        for installed in &self.hooks {
            hook(installed.as_ref()).map_err(Error::Hook)?;
        }
        Ok(())
    }
}

/// What a hook returns to stop the request.
pub(crate) type HookError = Box<dyn std::error::Error + Send + Sync>;

/// Every method does nothing by default: implement the ones you need and
/// add the hooks to [`Policy::hooks`].
pub trait Hooks: Send + Sync {
    /// Inside the transaction, after the operation's writes, before its
    /// response is stored and committed (the atomic design; the key-first
    /// design's second transaction; a foreign step's phase 3). An `Err`
    /// rolls all of it back.
    fn before_commit(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }

    /// Key-first and phases only: after the key row is committed and before
    /// the operation (the window a crash leaves an in-progress key in). An
    /// `Err` leaves the key in progress until its lease runs out.
    fn after_key_committed(&self) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
        Ok(())
    }

    /// A key's INSERT found a row (committed, or a concurrent duplicate's
    /// it waited for): how long that took.
    fn key_conflict(&self, _waited: Duration) {}

    /// Expired key rows deleted by one statement of the purge.
    fn keys_purged(&self, _rows: u64) {}
}
