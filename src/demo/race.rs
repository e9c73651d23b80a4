//! Lesson 3's race, made to happen: a check-then-insert request that found
//! no key waits (at most [`PARTNER_WAIT`]) until another request with the
//! same account and key has looked too, and then the pause the page names.
//!
//! The page sends its two requests at once, but "at once" on the server is
//! up to the network, the pool and the demo's admission: in a class of
//! learners on two cores the second can look more than the pause after the
//! first, find its key, and replay, and the lesson's double charge does not
//! happen. Waiting for the other look-up makes the gap a certainty, not a
//! likelihood; a request alone waits the bound (longer than the pause),
//! then inserts.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long a request that found nothing waits for another to look.
pub const PARTNER_WAIT: Duration = Duration::from_secs(1);

/// The look-ups in progress, by (account, key).
#[derive(Default)]
pub(crate) struct Lookups {
    pending: Mutex<HashMap<(i64, String), Pair>>,
    changed: Condvar,
}

#[derive(Default)]
struct Pair {
    looked: u32,
    waiting: u32,
}

impl Lookups {
    /// Says that a request of `account` looked `key` up and found nothing,
    /// and waits until a second such request has, or `wait` has passed:
    /// whether one did. Blocking: called on the blocking pool, as the
    /// look-up is.
    pub(crate) fn found_nothing(&self, account: i64, key: &str, wait: Duration) -> bool {
        let until = Instant::now() + wait;
        let id = (account, key.to_owned());
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let pair = pending.entry(id.clone()).or_default();
        pair.looked += 1;
        pair.waiting += 1;
        self.changed.notify_all();
        while pending[&id].looked < 2 {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            pending = self
                .changed
                .wait_timeout(pending, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let pair = pending.get_mut(&id).expect("a pair stays while one waits");
        let partnered = pair.looked >= 2;
        pair.waiting -= 1;
        if pair.waiting == 0 {
            pending.remove(&id);
        }
        partnered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_first_look_up_waits_for_the_second_and_no_longer() {
        let lookups = Arc::new(Lookups::default());
        let first = {
            let lookups = lookups.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let partnered = lookups.found_nothing(1, "k", Duration::from_secs(10));
                (partnered, started.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        assert!(lookups.found_nothing(1, "k", Duration::from_secs(10)));
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "the second goes on at once"
        );
        let (partnered, waited) = first.join().unwrap();
        assert!(partnered, "the first saw the second look");
        assert!(
            waited >= Duration::from_millis(300),
            "the first waited for the second"
        );
        assert!(
            waited < Duration::from_secs(5),
            "and not for its whole bound: {waited:?}"
        );
        assert!(
            lookups.pending.lock().unwrap().is_empty(),
            "nothing is left behind"
        );
    }

    #[test]
    fn a_look_up_alone_or_of_another_key_waits_its_bound() {
        let lookups = Lookups::default();
        let started = Instant::now();
        assert!(!lookups.found_nothing(1, "k", Duration::from_millis(200)));
        assert!(!lookups.found_nothing(2, "k", Duration::from_millis(200)));
        assert!(
            started.elapsed() >= Duration::from_millis(400),
            "no partner for either"
        );
        assert!(lookups.pending.lock().unwrap().is_empty());
    }
}
