//! What an attempt's answer makes of its delivery: any 2xx is delivered,
//! 410 Gone disables the endpoint, anything else (a 3xx included, or no
//! answer) is retried after the schedule's next delay with up to 10 %
//! jitter, and after the schedule's last attempt the delivery has failed.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::client::Answer;
use crate::store::deliveries::Next;

/// The most a delay is stretched by, so that deliveries failing together
/// (a receiver down for everyone) are not retried all at once.
pub const JITTER: f64 = 0.10;

/// The delivery's next state after an attempt answered `answer`, when
/// `attempts_before` attempts had been made. `schedule[n]` is the delay
/// before attempt n + 1; `unit` (in [0, 1)) draws the jitter.
pub fn next(
    answer: &Answer,
    attempts_before: i32,
    schedule: &[Duration],
    now: DateTime<Utc>,
    unit: f64,
) -> Next {
    match answer {
        Answer::Status(200..=299) => return Next::Succeeded,
        Answer::Status(410) => {
            return Next::Gone("the receiver answered 410 Gone".to_owned());
        }
        _ => {}
    }
    let made = usize::try_from(attempts_before).unwrap_or(0) + 1;
    match schedule.get(made) {
        Some(delay) => Next::Retry(now + jittered(*delay, unit)),
        None => Next::Failed,
    }
}

/// `delay` stretched by up to [`JITTER`]; a zero delay stays zero.
pub fn jittered(delay: Duration, unit: f64) -> chrono::Duration {
    let stretched = delay.mul_f64(1.0 + JITTER * unit.clamp(0.0, 1.0));
    chrono::Duration::from_std(stretched).unwrap_or(chrono::Duration::MAX)
}

/// A uniform draw in [0, 1) from the OS-seeded generator uuid already uses.
pub fn unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: &[u64]) -> Vec<Duration> {
        s.iter().map(|s| Duration::from_secs(*s)).collect()
    }

    #[test]
    fn every_2xx_is_delivered_and_410_disables() {
        let now = Utc::now();
        for status in [200, 201, 204, 299] {
            assert_eq!(
                next(&Answer::Status(status), 0, &secs(&[0, 5]), now, 0.5),
                Next::Succeeded
            );
        }
        assert!(matches!(
            next(&Answer::Status(410), 0, &secs(&[0, 5]), now, 0.5),
            Next::Gone(_)
        ));
    }

    #[test]
    fn a_failure_waits_the_next_delay_with_at_most_ten_percent_more() {
        let now = Utc::now();
        let schedule = secs(&[0, 100, 1000]);
        for answer in [
            Answer::Status(500),
            Answer::Status(302),
            Answer::None("t".into()),
        ] {
            for unit in [0.0, 0.5, 0.999] {
                let Next::Retry(at) = next(&answer, 0, &schedule, now, unit) else {
                    panic!("{answer:?} is retried");
                };
                let waited = (at - now).num_milliseconds();
                assert!((100_000..=110_000).contains(&waited), "{waited}");
            }
            assert_eq!(next(&answer, 2, &schedule, now, 0.5), Next::Failed);
        }
    }

    #[test]
    fn a_zero_delay_stays_zero() {
        assert_eq!(jittered(Duration::ZERO, 0.999), chrono::Duration::zero());
        assert!((0.0..1.0).contains(&unit()));
    }
}
