//! The sender: a background task that claims due deliveries, sends each
//! signed, and records what came of it. Three steps per delivery, and the
//! HTTP call is never inside a transaction or holding a pooled connection:
//!
//! 1. **Claim** (one transaction): as many due deliveries as there are free
//!    slots, within each endpoint's own (`store::deliveries`: several for a
//!    healthy endpoint, one for a failing one, endpoints taking turns).
//! 2. **Send** (no connection): sign with the endpoint's secret and, while
//!    a rotation's grace lasts, the previous one; `POST` it (`client`).
//! 3. **Record** (one transaction for what has come back meanwhile): each
//!    attempt and its delivery's next state (`schedule`), only if the claim
//!    is still ours.
//!
//! A process killed between 1 and 3 leaves a claim that expires after its
//! lease; the delivery is then claimed again (at least once: a receiver
//! dedupes by `webhook-id`). Order is not promised: a healthy endpoint has
//! several deliveries in flight at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use idempotency::webhook::signature::{Secret, signature_header};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc};
use uuid::Uuid;

use super::client::{Answer, Message, WebhookClient};
use super::schedule;
use super::settings::WebhookSettings;
use super::targets::TargetPolicy;
use crate::payments::events;
use crate::store::deliveries::{Attempt, Claimed, Next, Slots};
use crate::store::{DbPool, Failure, QueryError, RunError, classify, time_text};

/// Deliveries in flight at once, in this process.
pub const CONCURRENCY: usize = 64;
/// Deliveries in flight at once to one healthy endpoint (across instances):
/// enough to keep up with the charges of a receiver that takes a while to
/// answer, few enough that a receiver that starts hanging holds a handful.
pub const PER_ENDPOINT: i64 = 8;
/// ... and to an endpoint whose last attempt failed.
pub const PER_FAILING_ENDPOINT: i64 = 1;
/// Attempts recorded in one transaction at most.
const RECORD_BATCH: usize = 64;
/// How long a claim outlives its attempt's timeout: time to record it. A
/// record later than that is refused by the fence and the delivery sent
/// again (at least once), so a short margin costs a duplicate at worst,
/// and a process killed mid-attempt holds its deliveries only this long.
const LEASE_MARGIN: Duration = Duration::from_secs(5);
/// How long one claim or record may wait for the database.
const DB_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Query(#[from] QueryError),
}

impl SendError {
    /// The database is unreachable: the pool logs that once as it starts
    /// and once as it ends, so the sender's every poll does not repeat it.
    fn is_outage(&self) -> bool {
        match self {
            SendError::Run(RunError::Pool(_)) => true,
            SendError::Query(e) => classify(e) == Failure::ConnectionLost,
            SendError::Run(_) => false,
        }
    }
}

/// What the task needs.
pub struct Sender {
    pool: DbPool,
    client: Arc<WebhookClient>,
    settings: WebhookSettings,
}

impl Sender {
    pub fn new(pool: DbPool, settings: &WebhookSettings, policy: TargetPolicy) -> Sender {
        Sender {
            pool,
            client: Arc::new(WebhookClient::new(policy, settings.timeout)),
            settings: settings.clone(),
        }
    }

    /// Sends until aborted: claims as many due deliveries as there are free
    /// slots, then waits for attempts to be recorded or the poll interval to
    /// pass. One task records what the sends bring back, in batches.
    pub async fn run(self) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(CONCURRENCY));
        let recorded = Arc::new(Notify::new());
        let (sent, results) = mpsc::unbounded_channel();
        // Ends when the last sender of results does: this loop, then the sends in flight.
        tokio::spawn(this.clone().record_all(results, recorded.clone()));
        loop {
            let free = slots.available_permits();
            if free > 0 {
                match this.claim(free).await {
                    Ok(claimed) => {
                        for delivery in claimed {
                            let Ok(slot) = slots.clone().try_acquire_owned() else {
                                break;
                            };
                            let (this, sent) = (this.clone(), sent.clone());
                            tokio::spawn(async move {
                                let outcome = this.deliver(delivery).await;
                                // Fails only once the recorder is gone: a shutdown.
                                let _ = sent.send((outcome, slot));
                            });
                        }
                    }
                    Err(e) if e.is_outage() => {
                        tracing::debug!(error = %e, "no database to claim from")
                    }
                    Err(e) => tracing::warn!(error = %e, "claiming deliveries failed; will retry"),
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(this.settings.poll_interval) => {}
                _ = recorded.notified() => {}
            }
        }
    }

    async fn claim(&self, free: usize) -> Result<Vec<Claimed>, SendError> {
        let now = Utc::now();
        let lease = chrono::Duration::from_std(self.settings.timeout + LEASE_MARGIN)
            .unwrap_or(chrono::Duration::MAX);
        let token = Uuid::new_v4();
        let slots = Slots {
            total: free as i64,
            per_endpoint: PER_ENDPOINT,
            per_failing_endpoint: PER_FAILING_ENDPOINT,
        };
        self.pool
            .run(DB_DEADLINE, move |store| {
                // Idle: one read, no transaction (on SQLite, no write lock).
                if !store.any_due(now)? {
                    return Ok(Vec::new());
                }
                store.transaction(|tx| -> Result<_, SendError> {
                    Ok(tx.claim_deliveries(now, now + lease, token, slots)?)
                })
            })
            .await
    }

    /// Records what the sends bring back, each batch in one transaction,
    /// and frees their slots after it (so a claim never counts a delivery
    /// as free before its attempt is written).
    async fn record_all(
        self: Arc<Self>,
        mut results: mpsc::UnboundedReceiver<(Outcome, OwnedSemaphorePermit)>,
        recorded: Arc<Notify>,
    ) {
        let mut batch = Vec::with_capacity(RECORD_BATCH);
        while results.recv_many(&mut batch, RECORD_BATCH).await > 0 {
            let (outcomes, slots): (Vec<Outcome>, Vec<_>) = batch.drain(..).unzip();
            self.record(outcomes).await;
            drop(slots);
            recorded.notify_one();
        }
    }

    /// Sends one claimed delivery: what came of it, to record.
    async fn deliver(&self, claim: Claimed) -> Outcome {
        let started = Instant::now();
        let attempted_at = Utc::now();
        let timestamp = attempted_at.timestamp();
        let answer = match sign(&claim, timestamp) {
            Ok((id, signature, body)) => {
                let (client, url) = (self.client.clone(), claim.url.clone());
                tokio::task::spawn_blocking(move || {
                    client.send(&Message {
                        url: &url,
                        id: &id,
                        timestamp,
                        signature: &signature,
                        body: &body,
                    })
                })
                .await
                .unwrap_or_else(|_| Answer::None("the sender panicked".to_owned()))
            }
            Err(why) => Answer::None(why),
        };
        let attempt = Attempt {
            webhook_timestamp: timestamp,
            attempted_at,
            response_status: match answer {
                Answer::Status(s) => Some(i32::from(s)),
                Answer::None(_) => None,
            },
            error: match &answer {
                Answer::Status(s) if (200..300).contains(s) => None,
                Answer::Status(s) => Some(format!("the receiver answered {s}")),
                Answer::None(why) => Some(why.clone()),
            },
            duration_ms: started.elapsed().as_millis() as i64,
        };
        let next = schedule::next(
            &answer,
            claim.attempts,
            &self.settings.retry_schedule,
            Utc::now(),
            schedule::unit(),
        );
        Outcome {
            claim,
            attempt,
            next,
        }
    }

    /// Records a batch of attempts in one transaction, in the order of
    /// their endpoints (each may take its endpoint's row lock: one order,
    /// so two instances' batches never wait on each other in a circle).
    async fn record(&self, mut outcomes: Vec<Outcome>) {
        outcomes.sort_by_key(|o| (o.claim.endpoint_id, o.claim.event_id));
        let recorded = self
            .pool
            .run(DB_DEADLINE, move |store| {
                store.transaction(|tx| -> Result<_, SendError> {
                    let mut stale = Vec::new();
                    for o in &outcomes {
                        if !tx.record_attempt(&o.claim, &o.attempt, &o.next)? {
                            stale.push((o.claim.event_id, o.claim.endpoint_id));
                        }
                    }
                    Ok(stale)
                })
            })
            .await;
        match recorded {
            // Their claims expired and another sender took the deliveries over.
            Ok(stale) => {
                for (event, endpoint) in stale {
                    tracing::info!(%event, %endpoint, "attempt not recorded: claim taken over")
                }
            }
            // Sent again once their claims expire (at least once).
            Err(e) if e.is_outage() => {
                tracing::debug!(error = %e, "no database to record attempts in")
            }
            Err(e) => tracing::warn!(error = %e, "recording attempts failed"),
        }
    }
}

/// A delivery's attempt and what the delivery becomes, to record.
struct Outcome {
    claim: Claimed,
    attempt: Attempt,
    next: Next,
}

/// The delivery's `webhook-id`, `webhook-signature` and body for an
/// attempt at `timestamp`: signed with the endpoint's secret and, while
/// its rotation's grace lasts, the previous one too.
fn sign(claim: &Claimed, timestamp: i64) -> Result<(String, String, String), String> {
    let unreadable = |_| "the endpoint's signing secret is unreadable".to_owned();
    let secrets = crate::store::webhooks::signing_secrets(
        &claim.secret,
        claim.previous_secret.as_deref(),
        claim.previous_secret_expires_at,
        Utc::now(),
    )
    .into_iter()
    .map(Secret::parse)
    .collect::<Result<Vec<_>, _>>()
    .map_err(unreadable)?;
    let id = events::public_id(&claim.event_id);
    let body = events::body(
        &claim.event_id,
        &claim.event_type,
        &time_text(claim.event_created_at),
        &claim.data,
    );
    let refs: Vec<&Secret> = secrets.iter().collect();
    let signature = signature_header(&refs, &id, timestamp, body.as_bytes());
    Ok((id, signature, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/webhooks.md's worked example, byte for byte.
    #[test]
    fn the_documented_example_is_what_the_sender_sends() {
        let claim = Claimed {
            event_id: "5e0f3a1c-9b7d-4c2e-8f61-2a4b6c8d0e1f".parse().unwrap(),
            endpoint_id: Uuid::nil(),
            account_id: 1,
            attempts: 0,
            token: Uuid::nil(),
            url: "https://example.com/hook".to_owned(),
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
            previous_secret: None,
            previous_secret_expires_at: None,
            endpoint_failing: false,
            event_type: "charge.succeeded".to_owned(),
            data: r#"{"id":"0b9d2c64-3f1e-4a8b-9c7d-5e6f7a8b9c0d","object":"charge","amount":500,"currency":"jpy"}"#.to_owned(),
            event_created_at: "2025-12-07T12:00:00Z".parse().unwrap(),
        };
        let (id, signature, body) = sign(&claim, 1_765_108_800).unwrap();
        assert_eq!(id, "evt_5e0f3a1c-9b7d-4c2e-8f61-2a4b6c8d0e1f");
        assert_eq!(signature, "v1,CXz8aWutRcjDmtRZFnjzCgV0k5hY6TPjEiMuSv/Mba8=");
        let doc = include_str!("../../docs/webhooks.md");
        assert!(doc.contains(&format!("\n{body}\n")), "the documented body");
        assert!(doc.contains(&signature));
    }

    #[test]
    fn an_expired_previous_secret_no_longer_signs() {
        let mut claim = Claimed {
            event_id: Uuid::new_v4(),
            endpoint_id: Uuid::nil(),
            account_id: 1,
            attempts: 0,
            token: Uuid::nil(),
            url: String::new(),
            secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned(),
            previous_secret: Some("whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldY".to_owned()),
            previous_secret_expires_at: Some(Utc::now() + chrono::Duration::hours(1)),
            endpoint_failing: false,
            event_type: "charge.succeeded".to_owned(),
            data: "{}".to_owned(),
            event_created_at: Utc::now(),
        };
        assert_eq!(sign(&claim, 1).unwrap().1.split(' ').count(), 2);
        claim.previous_secret_expires_at = Some(Utc::now() - chrono::Duration::seconds(1));
        assert_eq!(sign(&claim, 1).unwrap().1.split(' ').count(), 1);
    }
}
