//! The sender: a background task that claims due deliveries, sends each
//! signed, and records what came of it. Three steps per delivery, and the
//! HTTP call is never inside a transaction or holding a pooled connection:
//!
//! 1. **Claim** (one transaction): up to the free slots' worth of due
//!    deliveries, one per endpoint (`store::deliveries`).
//! 2. **Send** (no connection): sign with the endpoint's secret and, while
//!    a rotation's grace lasts, the previous one; `POST` it (`client`).
//! 3. **Record** (one transaction): the attempt and the delivery's next
//!    state (`schedule`), only if the claim is still ours.
//!
//! A process killed between 1 and 3 leaves a claim that expires after its
//! lease; the delivery is then claimed again (at least once: a receiver
//! dedupes by `webhook-id`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use idempotency::webhook::signature::{Secret, signature_header};
use tokio::sync::{Notify, Semaphore};
use uuid::Uuid;

use super::client::{Answer, Message, WebhookClient};
use super::events;
use super::schedule;
use super::settings::WebhookSettings;
use super::targets::TargetPolicy;
use crate::store::deliveries::{Attempt, Claimed, Next};
use crate::store::{DbPool, Failure, QueryError, RunError, classify, time_text};

/// Deliveries in flight at once, in this process.
pub const CONCURRENCY: usize = 16;
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
    /// slots, then waits for a slot to free or the poll interval to pass.
    pub async fn run(self) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(CONCURRENCY));
        let finished = Arc::new(Notify::new());
        loop {
            let free = slots.available_permits();
            if free > 0 {
                match this.claim(free).await {
                    Ok(claimed) => {
                        for delivery in claimed {
                            let permit = slots.clone().acquire_owned().await;
                            let (this, finished) = (this.clone(), finished.clone());
                            tokio::spawn(async move {
                                this.deliver(delivery).await;
                                drop(permit);
                                finished.notify_one();
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
                _ = finished.notified() => {}
            }
        }
    }

    async fn claim(&self, free: usize) -> Result<Vec<Claimed>, SendError> {
        let now = Utc::now();
        let lease = chrono::Duration::from_std(self.settings.timeout + LEASE_MARGIN)
            .unwrap_or(chrono::Duration::MAX);
        let token = Uuid::new_v4();
        let limit = free as i64;
        self.pool
            .run(DB_DEADLINE, move |store| {
                // Idle: one read, no transaction (on SQLite, no write lock).
                if !store.any_due(now)? {
                    return Ok(Vec::new());
                }
                store.transaction(|tx| -> Result<_, SendError> {
                    Ok(tx.claim_deliveries(now, now + lease, token, limit)?)
                })
            })
            .await
    }

    /// Sends one claimed delivery and records what came of it.
    async fn deliver(&self, claim: Claimed) {
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
        self.record(claim, attempt, next).await;
    }

    async fn record(&self, claim: Claimed, attempt: Attempt, next: Next) {
        let (event, endpoint) = (claim.event_id, claim.endpoint_id);
        let recorded = self
            .pool
            .run(DB_DEADLINE, move |store| {
                store.transaction(|tx| -> Result<_, SendError> {
                    Ok(tx.record_attempt(&claim, &attempt, &next)?)
                })
            })
            .await;
        match recorded {
            Ok(true) => {}
            // Its claim expired and another sender took the delivery over.
            Ok(false) => {
                tracing::info!(%event, %endpoint, "attempt not recorded: claim taken over")
            }
            // Sent again once its claim expires (at least once).
            Err(e) if e.is_outage() => {
                tracing::debug!(%event, %endpoint, error = %e, "no database to record in")
            }
            Err(e) => tracing::warn!(%event, %endpoint, error = %e, "recording an attempt failed"),
        }
    }
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
            event_type: "charge.succeeded".to_owned(),
            data: "{}".to_owned(),
            event_created_at: Utc::now(),
        };
        assert_eq!(sign(&claim, 1).unwrap().1.split(' ').count(), 2);
        claim.previous_secret_expires_at = Some(Utc::now() - chrono::Duration::seconds(1));
        assert_eq!(sign(&claim, 1).unwrap().1.split(' ').count(), 1);
    }
}
