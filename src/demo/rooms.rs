//! Room codes: a class behind one address (a school's NAT) making its
//! sandboxes. The operator hands a class a code from DEMO_ROOM_CODES; the
//! page opened as `/?room=CODE` sends it as `Demo-Room` when it makes its
//! sandbox, and such sandboxes are limited per room
//! (DEMO_ROOM_SANDBOXES_PER_MINUTE) instead of per client address
//! (DEMO_SANDBOXES_PER_MINUTE), which thirty learners at one address would
//! exhaust in a minute. DEMO_MAX_SANDBOXES still bounds them all.
//!
//! A code is a shared secret of sorts (whoever has it may make a room's
//! worth of sandboxes a minute), so it is compared in constant time, never
//! logged, and an unknown one is refused (`403 demo-room-unknown`) rather
//! than quietly counted per address: a teacher's typo would otherwise show
//! only as the eleventh learner's 429.

use std::num::NonZeroU32;
use std::time::Duration;

use actix_web::HttpRequest;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};

/// The request header that carries a room code.
pub const ROOM_HEADER: &str = "demo-room";

/// What a request's `Demo-Room` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// No header: the sandbox counts against its client address.
    None,
    /// One of DEMO_ROOM_CODES (by its place in the list).
    Known(usize),
    /// A code this server does not hand out (or no codes at all).
    Unknown,
}

pub struct Rooms {
    /// Each code's SHA-256: equal lengths, so a comparison's time tells nothing of a code's length.
    codes: Vec<[u8; 32]>,
    per_room: Option<DefaultKeyedRateLimiter<usize>>,
}

impl Rooms {
    pub fn new(codes: &[String], per_minute: u32) -> Rooms {
        Rooms {
            codes: codes
                .iter()
                .map(|c| c.trim())
                .filter(|c| !c.is_empty())
                .map(digest)
                .collect(),
            per_room: NonZeroU32::new(per_minute).map(|n| RateLimiter::keyed(Quota::per_minute(n))),
        }
    }

    /// Which room `req` names, comparing against every code in constant time.
    pub fn of(&self, req: &HttpRequest) -> Room {
        let Some(value) = req.headers().get(ROOM_HEADER) else {
            return Room::None;
        };
        let given = digest(String::from_utf8_lossy(value.as_bytes()).trim());
        // Every code is compared, whichever matches: no early exit.
        let mut found = None;
        for (i, code) in self.codes.iter().enumerate() {
            if same(code, &given) {
                found = Some(i);
            }
        }
        found.map_or(Room::Unknown, Room::Known)
    }

    /// Counts one sandbox against `room`; `Err(wait)` when the room has made
    /// DEMO_ROOM_SANDBOXES_PER_MINUTE already.
    pub fn take(&self, room: usize) -> Result<(), Duration> {
        match &self.per_room {
            Some(limit) => limit
                .check_key(&room)
                .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now())),
            None => Ok(()),
        }
    }
}

fn digest(code: &str) -> [u8; 32] {
    Sha256::digest(code.as_bytes()).into()
}

/// Equal in time independent of where the two differ.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a
        .iter()
        .zip(b)
        .fold(0u8, |acc, (x, y)| acc | std::hint::black_box(x ^ y));
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn rooms() -> Rooms {
        Rooms::new(&["maple-7".into(), " birch-3 ".into(), "".into()], 2)
    }

    #[test]
    fn a_listed_code_names_its_room_and_anything_else_is_unknown() {
        let rooms = rooms();
        let with = |v: &str| {
            TestRequest::default()
                .insert_header((ROOM_HEADER, v))
                .to_http_request()
        };
        assert_eq!(
            rooms.of(&TestRequest::default().to_http_request()),
            Room::None
        );
        assert_eq!(rooms.of(&with("maple-7")), Room::Known(0));
        assert_eq!(rooms.of(&with("birch-3")), Room::Known(1));
        assert_eq!(rooms.of(&with("maple-8")), Room::Unknown);
        assert_eq!(rooms.of(&with("Maple-7")), Room::Unknown);
        // The empty code in the list names no room.
        assert_eq!(rooms.of(&with("")), Room::Unknown);
        assert_eq!(Rooms::new(&[], 60).of(&with("maple-7")), Room::Unknown);
    }

    #[test]
    fn each_room_has_its_own_allowance() {
        let rooms = rooms();
        assert!(rooms.take(0).is_ok() && rooms.take(0).is_ok());
        assert!(rooms.take(0).is_err());
        assert!(rooms.take(1).is_ok());
        assert!(Rooms::new(&["a".into()], 0).take(0).is_ok());
    }
}
