//! The held-transaction slots: how many transactions `Demo-Fault:
//! delay-commit` (or `network-delay`) holds open at once, one per sandbox,
//! and, when every one is taken, how long until the first is given back.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many transactions `delay-commit` holds open right now, and the most
/// it may. Taken inside the transaction, by the request that really runs
/// it: a duplicate waiting on the key's index entry holds none.
pub(crate) struct DelaySlots {
    pub(crate) max: u32,
    /// After a slot is given back, or a delay is refused, no delay starts
    /// for this long (SQLite).
    pub(crate) gap: Duration,
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    open: u32,
    /// When the last delayed transaction let the write lock go: its slot
    /// given back, or its delay refused (it held the lock as it asked).
    last_release: Option<Instant>,
    /// The sandboxes holding one: one each.
    holders: std::collections::HashSet<i64>,
    /// When each slot held now is given back, as its delay said, and whose
    /// it is (by slot).
    ends: std::collections::HashMap<u64, (Option<i64>, Instant)>,
    next: u64,
}

pub(crate) struct DelaySlot<'a> {
    slots: &'a DelaySlots,
    holder: Option<i64>,
    id: u64,
}

/// Why no delay slot was given.
pub(crate) enum NoSlot {
    /// The demo holds as many as it may (or one ended too recently).
    Demo(Busy),
    /// This sandbox holds one already.
    Sandbox,
}

/// The demo's slots all taken: how many are held, and how long until the
/// first of them is given back (its delay's end, or SQLite's gap after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Busy {
    pub(crate) held: u32,
    pub(crate) max: u32,
    pub(crate) free_in: Duration,
}

impl DelaySlots {
    pub(crate) fn new(max: u32, gap: Duration) -> DelaySlots {
        DelaySlots {
            max,
            gap,
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for `holder`'s request, to hold its transaction for `delay`:
    /// at most one per sandbox, so that no visitor takes another's (`None`:
    /// the shared account, the demo's cap only).
    pub(crate) fn take(
        &self,
        holder: Option<i64>,
        delay: Duration,
    ) -> Result<DelaySlot<'_>, NoSlot> {
        let mut held = self.held();
        if holder.is_some_and(|account| held.holders.contains(&account)) {
            return Err(NoSlot::Sandbox);
        }
        let now = Instant::now();
        let gap_left = held
            .last_release
            .map_or(Duration::ZERO, |at| self.gap.saturating_sub(now - at));
        if !gap_left.is_zero() || held.open >= self.max {
            let first_end = held
                .ends
                .values()
                .map(|(_, end)| end.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::ZERO);
            let free_in = if held.open >= self.max {
                first_end + self.gap
            } else {
                // On SQLite a refused delay held the write lock too, so the
                // gap starts again: queued delays, each refused in turn,
                // would otherwise use it up under load, and the next would
                // start before the writes the first held had their turn.
                held.last_release = Some(now);
                self.gap
            };
            return Err(NoSlot::Demo(Busy {
                held: held.open,
                max: self.max,
                free_in,
            }));
        }
        held.open += 1;
        held.holders.extend(holder);
        held.next += 1;
        let id = held.next;
        held.ends.insert(id, (holder, now + delay));
        Ok(DelaySlot {
            slots: self,
            holder,
            id,
        })
    }

    /// Whether `account`'s sandbox holds a slot now, and how many are held.
    pub(crate) fn view(&self, account: i64) -> (bool, u32) {
        let held = self.held();
        (held.holders.contains(&account), held.open)
    }

    /// How long `account`'s sandbox still holds its slot (`None`: it holds
    /// none), and how many are held.
    pub(crate) fn left(&self, account: i64) -> (Option<Duration>, u32) {
        let held = self.held();
        let left = held
            .ends
            .values()
            .find(|(holder, _)| *holder == Some(account))
            .map(|(_, end)| end.saturating_duration_since(Instant::now()));
        (left, held.open)
    }
}

impl Drop for DelaySlot<'_> {
    fn drop(&mut self) {
        let mut held = self.slots.held();
        held.open -= 1;
        if let Some(account) = self.holder {
            held.holders.remove(&account);
        }
        held.ends.remove(&self.id);
        held.last_release = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_slot_says_how_many_are_held_and_when_the_first_is_given_back() {
        let slots = DelaySlots::new(2, Duration::ZERO);
        let _a = slots.take(Some(1), Duration::from_secs(5)).ok().unwrap();
        let _b = slots.take(Some(2), Duration::from_secs(3)).ok().unwrap();
        let Err(NoSlot::Demo(busy)) = slots.take(Some(3), Duration::from_secs(5)) else {
            panic!("a third slot was given");
        };
        assert_eq!((busy.held, busy.max), (2, 2));
        assert!(busy.free_in <= Duration::from_secs(3), "{busy:?}");
        assert!(busy.free_in > Duration::from_millis(2500), "{busy:?}");
        assert!(matches!(
            slots.take(Some(1), Duration::from_secs(1)),
            Err(NoSlot::Sandbox)
        ));
        assert_eq!(slots.view(1), (true, 2));
        assert_eq!(slots.view(3), (false, 2));
        let (left, held) = slots.left(1);
        assert_eq!(held, 2);
        assert!(
            left.is_some_and(|l| l > Duration::from_millis(4500) && l <= Duration::from_secs(5)),
            "{left:?}"
        );
        assert_eq!(slots.left(3).0, None);
        drop(_b);
        assert!(slots.take(Some(3), Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn a_delay_refused_within_the_gap_starts_the_gap_again() {
        // Wide margins: a loaded machine's sleeps overshoot.
        let gap = Duration::from_secs(1);
        let slots = DelaySlots::new(1, gap);
        drop(slots.take(Some(1), Duration::from_millis(10)).ok().unwrap());
        std::thread::sleep(Duration::from_millis(600));
        let Err(NoSlot::Demo(busy)) = slots.take(Some(2), Duration::from_secs(1)) else {
            panic!("a delay started 600 ms after one ended, within the gap");
        };
        assert_eq!(busy.free_in, gap, "the refusal starts the gap again");
        // 1.2 s after the first ended, past its gap, but 600 ms after the
        // refusal.
        std::thread::sleep(Duration::from_millis(600));
        assert!(
            matches!(
                slots.take(Some(3), Duration::from_secs(1)),
                Err(NoSlot::Demo(_))
            ),
            "a delay started within the gap after a refused one"
        );
        std::thread::sleep(gap + Duration::from_millis(50));
        assert!(slots.take(Some(3), Duration::from_secs(1)).is_ok());
    }
}
