//! The webhook sender's tables: `webhook_deliveries` (one row per event and
//! endpoint, written by the outbox) and `webhook_attempts`, on both
//! backends. Four rules live here:
//!
//! - **A claim is exclusive.** [`DeliveryStore::claim_deliveries`] locks the
//!   endpoints it claims for (`FOR NO KEY UPDATE SKIP LOCKED` on PostgreSQL:
//!   the outbox's inserts take only `FOR KEY SHARE` on an endpoint, so they
//!   never wait for it), so several instances never claim one row.
//! - **Slots per endpoint**: a healthy endpoint has up to
//!   [`Slots::per_endpoint`] deliveries in flight, a failing one (its last
//!   attempt failed) [`Slots::per_failing_endpoint`]: a receiver that hangs
//!   holds its own few slots, never another endpoint's or account's.
//! - **Turns**: the endpoints with due deliveries are served least recently
//!   served first, so a busy endpoint never takes another's turn; within an
//!   endpoint, the oldest due delivery goes first.
//! - **Fencing.** [`DeliveryStore::record_attempt`] writes only while the
//!   row's `claim_token` is still the caller's: a sender whose claim expired
//!   and was taken over records nothing.
//!
//! Times are the app's clock on both backends (the sender passes `now`):
//! a claim's lease is the attempt's timeout and a margin, far longer than
//! the skew between instances.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::QueryResult;

pub const PENDING: &str = "pending";
pub const SUCCEEDED: &str = "succeeded";
pub const FAILED: &str = "failed";

/// A delivery a sender claimed, with what it needs to send it.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub event_id: Uuid,
    pub endpoint_id: Uuid,
    pub account_id: i64,
    /// Attempts made before this one.
    pub attempts: i32,
    /// The claim's token: what [`DeliveryStore::record_attempt`] fences on.
    pub token: Uuid,
    pub url: String,
    pub secret: String,
    pub previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<DateTime<Utc>>,
    /// Whether the endpoint was failing when this was claimed: the record
    /// writes the endpoint's health only when the attempt changes it.
    pub endpoint_failing: bool,
    pub event_type: String,
    pub data: String,
    pub event_created_at: DateTime<Utc>,
}

/// One attempt as `webhook_attempts` keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub webhook_timestamp: i64,
    pub attempted_at: DateTime<Utc>,
    /// `None`: no answer (a timeout, a refused connection, a refused target).
    pub response_status: Option<i32>,
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// What a delivery becomes after an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Succeeded,
    /// Pending again, due then.
    Retry(DateTime<Utc>),
    /// The last attempt failed.
    Failed,
    /// The receiver answered 410 Gone: the endpoint is disabled with this
    /// reason, and its other pending deliveries fail with this one.
    Gone(String),
}

/// How many deliveries one claim may take.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slots {
    /// In all: the sender's free slots.
    pub total: i64,
    /// In flight at once to an endpoint whose last attempt succeeded.
    pub per_endpoint: i64,
    /// In flight at once to an endpoint whose last attempt failed: one,
    /// so that a dead receiver costs one slot, and is probed, not flooded.
    pub per_failing_endpoint: i64,
}

/// A delivery as `GET /events/{id}/deliveries` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryView {
    pub endpoint_id: Uuid,
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub history: Vec<Attempt>,
}

/// The sender's queries (both backends: `delivery_store!`).
pub trait DeliveryStore {
    /// Whether any delivery is due at `now` (one read, no transaction: the
    /// idle sender's poll, which then takes no write lock).
    fn any_due(&mut self, now: DateTime<Utc>) -> QueryResult<bool>;

    /// Claims due deliveries within `slots` (counting what is already in
    /// flight, by any instance), the endpoints least recently served first,
    /// each endpoint's oldest due first, until `lease_until`, under `token`.
    /// Call it inside a transaction: the endpoints' locks are what make the
    /// claim exclusive.
    fn claim_deliveries(
        &mut self,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
        token: Uuid,
        slots: Slots,
    ) -> QueryResult<Vec<Claimed>>;

    /// Records `attempt` and the delivery's `next` state if the row is
    /// still claimed under `claim.token`, and whether its endpoint is now
    /// failing; `false` (nothing written) if not. Call it inside a
    /// transaction; record several in one in the order of their endpoints'
    /// ids (each takes its endpoint's row lock when its health changes).
    fn record_attempt(
        &mut self,
        claim: &Claimed,
        attempt: &Attempt,
        next: &Next,
    ) -> QueryResult<bool>;

    /// An event's deliveries and their attempts; `None` if the account has
    /// no such event.
    fn event_deliveries(
        &mut self,
        account_id: i64,
        event_id: Uuid,
    ) -> QueryResult<Option<Vec<DeliveryView>>>;

    /// Makes the event's finished deliveries to enabled endpoints pending
    /// and due at `now`; how many, or `None` if the account has no such
    /// event.
    fn redeliver(
        &mut self,
        account_id: i64,
        event_id: Uuid,
        now: DateTime<Utc>,
    ) -> QueryResult<Option<usize>>;
}

/// `impl DeliveryStore for $conn`, over the tables it is given: `events`,
/// `webhook_attempts`, `webhook_deliveries` and `webhook_endpoints`, in this
/// order; `$lock` is how the endpoints a claim picks are locked (PostgreSQL:
/// `.for_no_key_update().skip_locked()`; SQLite: nothing, its write
/// transactions are serialized).
macro_rules! delivery_store {
    ($conn:ty, $events:ident, $tries:ident, $dl:ident, $ep:ident, $($lock:tt)*) => {
        use chrono::{DateTime, Utc};
        use diesel::prelude::*;
        use uuid::Uuid;
        use $crate::store::QueryResult;
        use $crate::store::deliveries::*;
        use $crate::store::tables::Dialect;

        type D = $conn;
        type Id = <D as Dialect>::Id;
        type Time = <D as Dialect>::Time;

        impl DeliveryStore for $conn {
            fn any_due(&mut self, now: DateTime<Utc>) -> QueryResult<bool> {
                diesel::select(diesel::dsl::exists(due(D::encode_time(now))))
                    .get_result(self)
                    .inspect_err(D::note)
            }

            fn claim_deliveries(
                &mut self,
                now: DateTime<Utc>,
                lease_until: DateTime<Utc>,
                token: Uuid,
                slots: Slots,
            ) -> QueryResult<Vec<Claimed>> {
                let n = D::encode_time(now);
                // Endpoints with a delivery due, their turn first; the lock
                // skips those another instance is claiming for right now.
                let endpoints: Vec<(Id, bool, String, String, Option<String>, Option<Time>)> = $ep::table
                    .filter($ep::status.eq("enabled"))
                    .filter($ep::id.eq_any(due(n.clone()).select($dl::endpoint_id)))
                    .order(($ep::served_at.is_not_null(), $ep::served_at.asc(), $ep::id.asc()))
                    .limit(slots.total)
                    .select(($ep::id, $ep::failing, $ep::url, $ep::secret, $ep::previous_secret,
                        $ep::previous_secret_expires_at))
                    $($lock)*
                    .load(self)
                    .inspect_err(D::note)?;
                if endpoints.is_empty() {
                    return Ok(Vec::new());
                }
                let ids: Vec<Id> = endpoints.iter().map(|e| e.0.clone()).collect();
                let in_flight: Vec<(Id, i64)> = $dl::table
                    .filter($dl::endpoint_id.eq_any(ids))
                    .filter($dl::claim_token.is_not_null())
                    .filter($dl::claimed_until.gt(n.clone()))
                    .group_by($dl::endpoint_id)
                    .select(($dl::endpoint_id, diesel::dsl::count_star()))
                    .load(self)
                    .inspect_err(D::note)?;
                let lease = D::encode_time(lease_until);
                let (mut left, mut taken, mut served) = (slots.total, Vec::new(), Vec::new());
                for (endpoint, failing, url, secret, previous, previous_expires) in endpoints {
                    let cap = if failing { slots.per_failing_endpoint } else { slots.per_endpoint };
                    let busy = in_flight.iter().find(|(e, _)| *e == endpoint).map_or(0, |(_, k)| *k);
                    let room = (cap - busy).min(left);
                    if room <= 0 {
                        continue;
                    }
                    let rows = claim_oldest(self, endpoint.clone(), n.clone(), lease.clone(), token, room)?;
                    left -= rows.len() as i64;
                    let previous_secret_expires_at = previous_expires.map(D::decode_time).transpose()?;
                    for (event, account_id, attempts) in rows {
                        // The event's own fields are read for all of them at once (with_events).
                        taken.push(Claimed {
                            event_id: D::decode_id(event)?,
                            endpoint_id: D::decode_id(endpoint.clone())?,
                            account_id,
                            attempts,
                            token,
                            url: url.clone(),
                            secret: secret.clone(),
                            previous_secret: previous.clone(),
                            previous_secret_expires_at,
                            endpoint_failing: failing,
                            event_type: String::new(),
                            data: String::new(),
                            event_created_at: now,
                        });
                    }
                    served.push(endpoint);
                    if left == 0 {
                        break;
                    }
                }
                diesel::update($ep::table.filter($ep::id.eq_any(served)))
                    .set($ep::served_at.eq(Some(n)))
                    .execute(self)
                    .inspect_err(D::note)?;
                with_events(self, taken)
            }

            fn record_attempt(
                &mut self,
                claim: &Claimed,
                attempt: &Attempt,
                next: &Next,
            ) -> QueryResult<bool> {
                let (e, p) = (D::encode_id(claim.event_id), D::encode_id(claim.endpoint_id));
                let (status, next_at) = match next {
                    Next::Succeeded => (SUCCEEDED, None),
                    Next::Retry(at) => (PENDING, Some(D::encode_time(*at))),
                    Next::Failed | Next::Gone(_) => (FAILED, None),
                };
                // The fence: only while the row is still claimed under our token.
                let n: Option<i32> = diesel::update(
                    $dl::table
                        .filter($dl::event_id.eq(e.clone()))
                        .filter($dl::endpoint_id.eq(p.clone()))
                        .filter($dl::claim_token.eq(D::encode_id(claim.token))),
                )
                .set((
                    $dl::attempts.eq($dl::attempts + 1),
                    $dl::status.eq(status),
                    $dl::next_attempt_at.eq(next_at),
                    $dl::claim_token.eq(None::<Id>),
                    $dl::claimed_until.eq(None::<Time>),
                ))
                .returning($dl::attempts)
                .get_result(self)
                .optional()
                .inspect_err(D::note)?;
                let Some(n) = n else { return Ok(false) };
                diesel::insert_into($tries::table)
                    .values((
                        $tries::event_id.eq(e),
                        $tries::endpoint_id.eq(p.clone()),
                        $tries::attempt.eq(n),
                        $tries::webhook_timestamp.eq(attempt.webhook_timestamp),
                        $tries::attempted_at.eq(D::encode_time(attempt.attempted_at)),
                        $tries::response_status.eq(attempt.response_status),
                        $tries::error.eq(attempt.error.as_deref()),
                        $tries::duration_ms.eq(attempt.duration_ms),
                    ))
                    .execute(self)
                    .inspect_err(D::note)?;
                // The endpoint's health sets its slots; written only when it
                // changes (a healthy endpoint's successes write nothing).
                let failing = !matches!(next, Next::Succeeded);
                if failing != claim.endpoint_failing {
                    diesel::update($ep::table.find(p.clone()).filter($ep::failing.ne(failing)))
                        .set($ep::failing.eq(failing))
                        .execute(self)
                        .inspect_err(D::note)?;
                }
                if let Next::Gone(reason) = next {
                    disable(self, p, reason)?;
                }
                Ok(true)
            }

            fn event_deliveries(
                &mut self,
                account_id: i64,
                event_id: Uuid,
            ) -> QueryResult<Option<Vec<DeliveryView>>> {
                if !has_event(self, account_id, event_id)? {
                    return Ok(None);
                }
                let e = D::encode_id(event_id);
                let rows: Vec<(Id, String, i32, Option<Time>)> = $dl::table
                    .filter($dl::event_id.eq(e.clone()))
                    .filter($dl::account_id.eq(account_id))
                    .order(($dl::created_at.asc(), $dl::endpoint_id.asc()))
                    .select(($dl::endpoint_id, $dl::status, $dl::attempts, $dl::next_attempt_at))
                    .load(self)
                    .inspect_err(D::note)?;
                let history: Vec<(Id, i64, Time, Option<i32>, Option<String>, i64)> = $tries::table
                    .filter($tries::event_id.eq(e))
                    .order(($tries::endpoint_id.asc(), $tries::attempt.asc()))
                    .select((
                        $tries::endpoint_id,
                        $tries::webhook_timestamp,
                        $tries::attempted_at,
                        $tries::response_status,
                        $tries::error,
                        $tries::duration_ms,
                    ))
                    .load(self)
                    .inspect_err(D::note)?;
                let mut views = Vec::new();
                for (endpoint, status, attempts, next) in rows {
                    let endpoint_id = D::decode_id(endpoint)?;
                    let mut mine = Vec::new();
                    for (p, ts, at, answer, error, ms) in &history {
                        if D::decode_id(p.clone())? == endpoint_id {
                            mine.push(Attempt {
                                webhook_timestamp: *ts,
                                attempted_at: D::decode_time(at.clone())?,
                                response_status: *answer,
                                error: error.clone(),
                                duration_ms: *ms,
                            });
                        }
                    }
                    views.push(DeliveryView {
                        endpoint_id,
                        status,
                        attempts,
                        next_attempt_at: next.map(D::decode_time).transpose()?,
                        history: mine,
                    });
                }
                Ok(Some(views))
            }

            fn redeliver(
                &mut self,
                account_id: i64,
                event_id: Uuid,
                now: DateTime<Utc>,
            ) -> QueryResult<Option<usize>> {
                if !has_event(self, account_id, event_id)? {
                    return Ok(None);
                }
                let enabled = $ep::table.filter($ep::status.eq("enabled")).select($ep::id);
                diesel::update(
                    $dl::table
                        .filter($dl::event_id.eq(D::encode_id(event_id)))
                        .filter($dl::account_id.eq(account_id))
                        .filter($dl::status.ne(PENDING))
                        .filter($dl::endpoint_id.eq_any(enabled)),
                )
                .set((
                    $dl::status.eq(PENDING),
                    $dl::next_attempt_at.eq(Some(D::encode_time(now))),
                ))
                .execute(self)
                .inspect_err(D::note)
                .map(Some)
            }
        }

        /// The deliveries due at `now` and not in flight: pending, their
        /// time come, and unclaimed or their claim expired (a sender killed
        /// mid-attempt; at least once).
        fn due(now: Time) -> diesel::dsl::Filter<
            diesel::dsl::Filter<diesel::dsl::Filter<$dl::table, diesel::dsl::Eq<$dl::status, &'static str>>,
                diesel::dsl::LtEq<$dl::next_attempt_at, Time>>,
            diesel::dsl::Or<diesel::dsl::IsNull<$dl::claimed_until>, diesel::dsl::LtEq<$dl::claimed_until, Time>>,
        > {
            $dl::table
                .filter($dl::status.eq(PENDING))
                .filter($dl::next_attempt_at.le(now.clone()))
                .filter($dl::claimed_until.is_null().or($dl::claimed_until.le(now)))
        }

        /// Claims up to `room` of the endpoint's due deliveries, the oldest
        /// first: their event, account and attempts so far.
        fn claim_oldest(
            conn: &mut D,
            endpoint: Id,
            now: Time,
            lease_until: Time,
            token: Uuid,
            room: i64,
        ) -> QueryResult<Vec<(Id, i64, i32)>> {
            let rows: Vec<(Id, i64, i32)> = due(now)
                .filter($dl::endpoint_id.eq(endpoint.clone()))
                .order(($dl::next_attempt_at.asc(), $dl::created_at.asc()))
                .limit(room)
                .select(($dl::event_id, $dl::account_id, $dl::attempts))
                .load(conn)
                .inspect_err(D::note)?;
            let events: Vec<Id> = rows.iter().map(|r| r.0.clone()).collect();
            diesel::update(
                $dl::table
                    .filter($dl::endpoint_id.eq(endpoint))
                    .filter($dl::event_id.eq_any(events)),
            )
            .set((
                $dl::claim_token.eq(Some(D::encode_id(token))),
                $dl::claimed_until.eq(Some(lease_until)),
            ))
            .execute(conn)
            .inspect_err(D::note)?;
            Ok(rows)
        }

        /// Fills in each claimed delivery's event, read in one query.
        fn with_events(conn: &mut D, taken: Vec<Claimed>) -> QueryResult<Vec<Claimed>> {
            let ids: Vec<Id> = taken.iter().map(|c| D::encode_id(c.event_id)).collect();
            let rows: Vec<(Id, String, String, Time)> = $events::table
                .filter($events::id.eq_any(ids))
                .select(($events::id, $events::event_type, $events::data, $events::created_at))
                .load(conn)
                .inspect_err(D::note)?;
            let mut found = std::collections::HashMap::new();
            for (id, event_type, data, created) in rows {
                found.insert(D::decode_id(id)?, (event_type, data, D::decode_time(created)?));
            }
            // An event is deleted only with its deliveries (cascade): each is found.
            Ok(taken
                .into_iter()
                .filter_map(|mut claim| {
                    let (event_type, data, created) = found.get(&claim.event_id)?;
                    claim.event_type = event_type.clone();
                    claim.data = data.clone();
                    claim.event_created_at = *created;
                    Some(claim)
                })
                .collect())
        }

        /// The receiver said 410 Gone: the endpoint is disabled and its
        /// other pending deliveries fail (nothing more is sent there).
        fn disable(conn: &mut D, endpoint: Id, reason: &str) -> QueryResult<()> {
            diesel::update($ep::table.find(endpoint.clone()))
                .set(($ep::status.eq("disabled"), $ep::disabled_reason.eq(Some(reason))))
                .execute(conn)
                .inspect_err(D::note)?;
            diesel::update(
                $dl::table
                    .filter($dl::endpoint_id.eq(endpoint))
                    .filter($dl::status.eq(PENDING)),
            )
            .set((
                $dl::status.eq(FAILED),
                $dl::next_attempt_at.eq(None::<Time>),
                $dl::claim_token.eq(None::<Id>),
                $dl::claimed_until.eq(None::<Time>),
            ))
            .execute(conn)
            .inspect_err(D::note)?;
            Ok(())
        }

        fn has_event(conn: &mut D, account_id: i64, event_id: Uuid) -> QueryResult<bool> {
            diesel::select(diesel::dsl::exists(
                $events::table
                    .filter($events::id.eq(D::encode_id(event_id)))
                    .filter($events::account_id.eq(account_id)),
            ))
            .get_result(conn)
            .inspect_err(D::note)
        }
    };
}

pub(super) use delivery_store;
