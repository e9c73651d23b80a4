//! The keys this process completed lately: a hint that a request is a
//! retry, never an answer.
//!
//! A request whose (account, key) is here reads its key row first, in one
//! statement and no transaction, and is replayed if the row says so (see
//! `Policy::execute`; atomic mode without a foreign step, the one shape that reads
//! nothing before its transaction). The database stays the authority: a key that expired, was
//! purged or was expired (by a demo, say) since is not replayed from here, and
//! a miss falls through to the protocol's transaction. A first request pays
//! one hash look-up.
//!
//! Bounded: past its capacity the oldest is forgotten (its retry
//! then runs the transaction, as it would have without the hint). Only a
//! 64-bit hash of each pair is kept, under a per-process random seed, so a
//! collision (another key's retry hinted) costs one read, never an answer.

use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Mutex;

/// Entries kept: about 2 MB; at 3 000 first requests a second, the last
/// half-minute of keys.
const CAPACITY: usize = 100_000;

/// A bounded set of (account, key) pairs this process completed lately.
pub struct RecentKeys {
    seed: std::hash::RandomState,
    capacity: usize,
    inner: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    set: HashSet<u64>,
    /// The order they came in: the front is forgotten first.
    order: VecDeque<u64>,
}

impl Default for RecentKeys {
    fn default() -> Self {
        RecentKeys::with_capacity(CAPACITY)
    }
}

impl RecentKeys {
    /// At most `capacity` entries (the default: 100 000).
    pub fn with_capacity(capacity: usize) -> RecentKeys {
        RecentKeys {
            seed: std::hash::RandomState::new(),
            capacity,
            inner: Mutex::default(),
        }
    }

    fn hash(&self, account_id: i64, key: &str) -> u64 {
        self.seed.hash_one((account_id, key))
    }

    /// Whether this process completed (account, key) lately.
    pub fn contains(&self, account_id: i64, key: &str) -> bool {
        let hash = self.hash(account_id, key);
        self.lock().set.contains(&hash)
    }

    /// Notes that (account, key) has a completed row.
    pub fn remember(&self, account_id: i64, key: &str) {
        let hash = self.hash(account_id, key);
        let mut inner = self.lock();
        if !inner.set.insert(hash) {
            return;
        }
        inner.order.push_back(hash);
        if inner.order.len() > self.capacity
            && let Some(oldest) = inner.order.pop_front()
        {
            inner.set.remove(&oldest);
        }
    }

    /// How many are kept.
    pub fn len(&self) -> usize {
        self.lock().set.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        // A panic while holding it cannot leave the set half-updated in a
        // way that matters (it is a hint): keep using it.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hint_is_bounded_and_forgets_the_oldest_first() {
        let recent = RecentKeys::with_capacity(3);
        for key in ["a", "b", "c", "d", "e"] {
            recent.remember(1, key);
        }
        assert_eq!(recent.len(), 3);
        assert!(!recent.contains(1, "a") && !recent.contains(1, "b"));
        assert!(recent.contains(1, "c") && recent.contains(1, "e"));
        // Remembering one again neither grows it nor evicts another.
        recent.remember(1, "e");
        assert_eq!(recent.len(), 3);
        assert!(recent.contains(1, "c"));
    }

    #[test]
    fn a_key_is_hinted_only_for_its_own_account() {
        let recent = RecentKeys::with_capacity(10);
        recent.remember(1, "k");
        assert!(recent.contains(1, "k"));
        assert!(!recent.contains(2, "k"));
        assert!(!recent.contains(1, "k2"));
    }
}
