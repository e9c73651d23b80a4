//! The API's client of the card network (`charges network`, in `network/`):
//! `POST /authorizations` with an `Idempotency-Key` of its own, derived from
//! the client's.
//!
//! An authorization cannot be rolled back, so the network is asked under a
//! key as well, and the key is **derived** from the request that caused the
//! call: the same account and client key give the same network key, so a
//! retry of ours after the network authorized (our commit failed, its answer
//! was lost, our process died) is a replay at the network, not a second
//! authorization. Idempotency must hold end to end.
//!
//! Blocking (it is called on the blocking thread pool, between the
//! protocol's phases, with no database connection held), bounded by
//! `NETWORK_TIMEOUT`.

use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::payments::methods::{self, Decline};

/// How much of an answer that is not an authorization is read: enough for a
/// problem's `type`. A network that answers megabytes must not cost us them.
const MAX_ERROR_BODY: u64 = 4 * 1024;
/// How much of an authorization is read.
const MAX_AUTHORIZATION_BODY: u64 = 64 * 1024;
/// How much of the ledger's page (`list`, at most 200 authorizations) is read.
const MAX_LIST_BODY: u64 = 1024 * 1024;

/// The network's key for a keyed request: the same account and client key
/// always give the same one, and no two accounts share one.
pub fn derived_key(account_id: i64, client_key: &str) -> String {
    let digest = Sha256::digest(format!("{account_id}:{client_key}").as_bytes());
    format!("charge-{digest:x}")
}

/// The network's key for a charge without a key: its own id. A retry is a
/// new charge with a new id, so it is authorized again (lesson 1).
pub fn key_for_charge(charge_id: Uuid) -> String {
    format!("charge-{charge_id}")
}

/// The network's key for voiding an authorization: one per authorization,
/// so voiding it again is a replay there.
pub fn void_key(authorization_id: Uuid) -> String {
    format!("void-{authorization_id}")
}

/// No answer from the network: why is logged here, and told to no client
/// (a transport error, `io: Connection refused`, describes our
/// infrastructure, not the request).
fn unreachable(call: &str, error: ureq::Error) -> NetworkError {
    tracing::warn!(call, %error, "the card network did not answer");
    NetworkError::Unreachable("no connection, or no answer in time".to_owned())
}

/// What the network decided: it authorized, or the card declined (its
/// `402`, stored under its key like an authorization: asked again, it
/// declines again without deciding again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Authorized(Authorized),
    Declined(Decline),
}

/// An authorization the network made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorized {
    pub id: Uuid,
    /// The network answered from its stored response (our call was a retry).
    pub replayed: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    /// No answer: down, unreachable, or not within NETWORK_TIMEOUT. Whether
    /// it authorized is unknown; a retry with the same key finds out.
    #[error("the card network did not answer: {0}")]
    Unreachable(String),
    /// It answered, and not with an authorization. Only its status is kept:
    /// its body is the network's own, and never reaches our clients.
    #[error("the card network refused the request (HTTP {status})")]
    Refused { status: u16 },
    /// Its 422 `idempotency-key-reused`: the key derived from the client's
    /// was used there for another request. Ours forgot that request (its
    /// answer was lost, so nothing of it was stored), the network did not.
    #[error("the card network holds this key's authorization for another request")]
    KeyReused,
}

/// Told of each authorization the network answered: its key and id.
pub type Watcher = Box<dyn Fn(&str, Uuid) + Send + Sync>;

/// Makes the key an authorization is asked under from the one it was given.
pub type Rekey = Box<dyn Fn(&str) -> String + Send + Sync>;

/// One network and the merchant key the API holds there.
pub struct NetworkClient {
    base: String,
    api_key: String,
    agent: ureq::Agent,
    /// The demo's record of its own authorizations (its view of the
    /// network's ledger shows only those), if demo mode is on.
    watcher: std::sync::OnceLock<Watcher>,
    /// The key each authorization is asked under, from the one it was
    /// given: that one itself, but in a client of [`rekeyed`](Self::rekeyed).
    rekey: Option<Rekey>,
    /// The network's name, which key rows registered with it record
    /// (`Settings::network_identity`; a digest of the URL until named).
    identity: String,
    /// How long our keys are remembered (IDEMPOTENCY_TTL): the network is
    /// asked to keep the key we derive from one no longer.
    key_lifetime: Duration,
}

#[derive(Deserialize)]
struct AuthorizationBody {
    id: Uuid,
}

impl NetworkClient {
    pub fn new(base: &str, api_key: &str, timeout: Duration) -> NetworkClient {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            // The whole call, its body read included.
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // A redirect is not an authorization: followed, it would carry
            // the derived key to another host and take its 201 for one.
            .max_redirects(0)
            .build()
            .into();
        NetworkClient {
            base: base.trim_end_matches('/').to_owned(),
            api_key: api_key.to_owned(),
            agent,
            watcher: std::sync::OnceLock::new(),
            rekey: None,
            // A digest, never the URL: its password would be in key rows.
            identity: format!("url:{:.16x}", Sha256::digest(base.as_bytes())),
            key_lifetime: Duration::from_secs(24 * 60 * 60),
        }
    }

    /// The same client, for an API that remembers its keys for `lifetime`.
    pub fn keeping_keys_for(mut self, lifetime: Duration) -> NetworkClient {
        self.key_lifetime = lifetime;
        self
    }

    /// The same client, naming its network `identity`.
    pub fn named(mut self, identity: String) -> NetworkClient {
        self.identity = identity;
        self
    }

    /// The network's name, as key rows registered with it record it.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// A client of the same network that asks each authorization under the
    /// key `rekey` makes of the one it was given, told to no watcher yet
    /// (the demo's: it records the keys its requests used, and may use a
    /// new one each time, as an integration that does not pass the key on).
    pub fn rekeyed(&self, rekey: Rekey) -> NetworkClient {
        NetworkClient {
            base: self.base.clone(),
            api_key: self.api_key.clone(),
            agent: self.agent.clone(),
            watcher: std::sync::OnceLock::new(),
            rekey: Some(rekey),
            identity: self.identity.clone(),
            key_lifetime: self.key_lifetime,
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Has `watcher` told of every authorization answered from now on (once).
    pub fn watch(&self, watcher: Watcher) {
        let _ = self.watcher.set(watcher);
    }

    /// Asks the network to authorize `amount` of `currency` on the test
    /// `payment_method` under `key`.
    pub fn authorize(
        &self,
        key: &str,
        amount: i64,
        currency: &str,
        payment_method: &str,
    ) -> Result<Answer, NetworkError> {
        let key = match &self.rekey {
            Some(rekey) => std::borrow::Cow::Owned(rekey(key)),
            None => std::borrow::Cow::Borrowed(key),
        };
        let mut response = self
            .agent
            .post(format!("{}/authorizations", self.base))
            .header("Authorization", format!("Bearer {}", self.api_key))
            .header("Idempotency-Key", format!("\"{key}\""))
            // Our key's lifetime: the network forgets its key with ours.
            .header(
                "Idempotency-Key-Lifetime",
                self.key_lifetime.as_secs().max(1),
            )
            .send_json(serde_json::json!({
                "amount": amount,
                "currency": currency,
                "payment_method": payment_method,
            }))
            .map_err(|e| unreachable("authorize", e))?;
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get(idempotency::Outcome::REPLAYED_HEADER)
            .is_some_and(|v| v == "true");
        if status != 201 {
            // Read to tell its 422s apart (a few KB at most), never passed on.
            let body = response
                .body_mut()
                .with_config()
                .limit(MAX_ERROR_BODY)
                .read_to_string()
                .unwrap_or_default();
            return Err(match status {
                // Its own troubles, as ours: unknown outcome, retry.
                408 | 409 | 429 | 500..=599 => {
                    NetworkError::Unreachable(format!("it was unavailable (HTTP {status})"))
                }
                422 if is_key_reused(&body) => NetworkError::KeyReused,
                402 => match declined(&body) {
                    Some(decline) => return Ok(Answer::Declined(decline)),
                    None => NetworkError::Refused { status },
                },
                _ => NetworkError::Refused { status },
            });
        }
        let body: AuthorizationBody = response
            .body_mut()
            .with_config()
            .limit(MAX_AUTHORIZATION_BODY)
            .read_json()
            .map_err(|e| {
                tracing::warn!(%e, "the card network's authorization was unreadable");
                NetworkError::Unreachable("an unreadable answer".to_owned())
            })?;
        if let Some(watcher) = self.watcher.get() {
            watcher(&key, body.id);
        }
        Ok(Answer::Authorized(Authorized {
            id: body.id,
            replayed,
        }))
    }

    /// Voids the authorization `id` (its hold released: no charge will ever
    /// hold it), under [`void_key`]: asking again is a replay.
    pub fn void(&self, id: Uuid) -> Result<(), NetworkError> {
        let response = self
            .agent
            .post(format!("{}/authorizations/{id}/void", self.base))
            .header("Authorization", format!("Bearer {}", self.api_key))
            .header("Idempotency-Key", format!("\"{}\"", void_key(id)))
            .send_json(serde_json::json!({}))
            .map_err(|e| unreachable("void", e))?;
        match response.status().as_u16() {
            200 => Ok(()),
            // Its body is never passed on, as for an authorization.
            status @ (408 | 409 | 429 | 500..=599) => Err(NetworkError::Unreachable(format!(
                "it was unavailable (HTTP {status})"
            ))),
            status => Err(NetworkError::Refused { status }),
        }
    }

    /// The network's newest authorizations for this merchant, as it shows
    /// them (for the teaching page's second ledger).
    pub fn list(&self, limit: u32) -> Result<serde_json::Value, NetworkError> {
        let mut response = self
            .agent
            .get(format!("{}/authorizations?limit={limit}", self.base))
            .header("Authorization", format!("Bearer {}", self.api_key))
            .call()
            .map_err(|e| unreachable("list", e))?;
        if response.status().as_u16() != 200 {
            return Err(NetworkError::Refused {
                status: response.status().as_u16(),
            });
        }
        response
            .body_mut()
            .with_config()
            .limit(MAX_LIST_BODY)
            .read_json()
            .map_err(|e| unreachable("list", e))
    }
}

/// The decline a `402 card-declined` names, if it is one we know.
fn declined(problem: &str) -> Option<Decline> {
    let problem: serde_json::Value = serde_json::from_str(problem).ok()?;
    problem["type"]
        .as_str()
        .is_some_and(|t| t.ends_with("/card-declined"))
        .then(|| methods::decline(problem["decline_code"].as_str()?))
        .flatten()
}

/// Whether a problem body's `type` is the network's `idempotency-key-reused`.
fn is_key_reused(problem: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(problem).is_ok_and(|p| {
        p["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("/idempotency-key-reused"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_key_is_the_same_for_the_same_account_and_key_only() {
        assert_eq!(derived_key(1, "k"), derived_key(1, "k"));
        assert_ne!(derived_key(1, "k"), derived_key(2, "k"));
        assert_ne!(derived_key(1, "k"), derived_key(1, "k2"));
        // A key of the network's grammar: printable ASCII, at most 255.
        let key = derived_key(7, &"x".repeat(255));
        assert!(key.len() <= 255 && key.bytes().all(|b| b.is_ascii_graphic()));
    }
}
