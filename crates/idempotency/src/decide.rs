//! What a request does about its key's row, given the row: answer at once
//! (replay, 422, 409) or try to claim the key.

use crate::key_store::{KeyRecord, KeyState};
use crate::outcome::Outcome;

/// Where a key row was read: before anything was tried (the fast path), or
/// after our claim found a row it could not take (the claim was lost).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Read {
    FastPath,
    AfterLostClaim,
}

/// What to do about a key, given its row.
#[derive(Debug, PartialEq)]
pub(crate) enum Decision {
    /// Try to claim the key and run the operation.
    Claim,
    /// Answer without running anything.
    Answer(Outcome),
}

/// The protocol's one rule for answering, shared by every read of a key
/// row: what a request with `fingerprint` does about the key's live row.
/// Pure, so it is tested table by table. The design (atomic or key-first)
/// does not change it: it changes only when a concurrent request sees a row
/// at all. It answers the rows that need no attempt (a replay, a mismatch,
/// a live lease); for any other it says `Claim`, and whether a row that
/// exists may be taken is not decided here but in the takeover statement,
/// under the row's lock ([`takeover`](super::key_store::takeover), the
/// rule's one statement).
pub(crate) fn decide(row: Option<KeyRecord>, fingerprint: &str, read: Read) -> Decision {
    let Some(row) = row else {
        return match read {
            Read::FastPath => Decision::Claim,
            // Gone between our claim and this read (released by a failed
            // key-first request): the client may retry and run as the first.
            Read::AfterLostClaim => Decision::Answer(Outcome::InFlight),
        };
    };
    if row.fingerprint != fingerprint {
        return Decision::Answer(Outcome::Mismatch);
    }
    match row.state {
        // A completed key never changes until it expires.
        KeyState::Completed(response) => Decision::Answer(Outcome::Replayed(response)),
        // Its worker is on it: answered at once, not queued behind its row lock.
        KeyState::InProgress { lease_live: true } => Decision::Answer(Outcome::InFlight),
        // A stuck row of this same request: try it (`take_over_key`).
        KeyState::InProgress { lease_live: false } => match read {
            Read::FastPath => Decision::Claim,
            // Someone else took it over before us.
            Read::AfterLostClaim => Decision::Answer(Outcome::InFlight),
        },
    }
}
