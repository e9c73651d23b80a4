//! Keys left half done: a request whose worker died after its key was
//! committed (key-first: between its two transactions; either mode: between
//! the phases of a charge that asks the card network) leaves the key in
//! progress, and, when the network had already authorized, an authorization
//! with no charge. Once the key's lease has run out, a pass of this task
//! drives it to completion, as the client's own retry would: it takes the
//! row over (`Policy::recover`), rebuilds the operation from the
//! request the row kept (its route's canonical path and its body) through
//! the row of the keyed routes the application mounts for it
//! (`super::routes::KEYED`, matched by method and route template), and
//! runs it. The network is asked again under the same derived key, so it replays
//! its authorization: the charge gets it, and no authorization stays
//! orphaned. The client's next retry then replays the finished charge.
//!
//! It acts only for whom it may: a revoked account's key is completed with
//! a stored 403 instead, and its authorization voided at the network. A key
//! whose request this server cannot rebuild gets a stored terminal answer
//! too (and one log line), so it is never looked at again and never fills
//! a batch that other accounts' keys wait behind.
//!
//! Several instances may run passes at once: taking a row over is one
//! conditional update, so exactly one of them recovers each key.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use actix_web::http::Method;

use super::routes::{self, Rebuilt};
use crate::config::Settings;
use crate::http::charges::{self, CreateCharge};
use crate::http::problem::{self, REQUEST_NOT_RECOVERABLE};
use crate::http::refunds::CreateRefund;
use crate::http::webhooks::endpoints;
use crate::http::webhooks::registration;
use crate::metrics::METRICS;
use crate::network_client::NetworkClient;
use crate::payments::domain::NewRefund;
use crate::store::RequestHooks;
use crate::store::{Store, StuckKey};
use crate::telemetry::log_safe;
use crate::webhooks::targets::TargetPolicy;
use idempotency::{Connections, KeyedRequest, Policy};

/// How much of a client's key a log line shows (escaped, as every field a
/// client chooses).
const LOGGED_KEY_LEN: usize = 255;

/// Keys looked at per pass, at most.
pub const BATCH: i64 = 100;
/// Accounts whose stuck keys one pass looks at, each with its share of
/// [`BATCH`] (at least one key): one account's flood of stuck keys (the
/// public demo key can make thousands) takes its share, not the pass.
pub const ACCOUNTS_PER_PASS: i64 = 100;

/// The method of every keyed request: the key row keeps its request's path
/// and body, not its method, and every row of [`KEYED`](super::routes::KEYED)
/// is a POST (a test holds it).
pub const KEPT_METHOD: Method = Method::POST;

/// A stuck key's kept request, as a row of the keyed routes rebuilds it:
/// the row, the template's `{id}` (if it has one), and the foreign step
/// the key was registered with (`network`, found by the name the row keeps).
pub struct Kept<'a> {
    pub stuck: &'a StuckKey,
    pub id: Option<String>,
    pub network: Option<Arc<NetworkClient>>,
}

/// `POST /charges`, with the network it was registered with.
pub fn charge(kept: &Kept<'_>) -> Option<Rebuilt> {
    let new = charges::parse_new_charge(&kept.stuck.body).ok()?;
    let create = CreateCharge::new(kept.stuck.account_id, &new)
        .through(
            kept.network.clone(),
            Some(&kept.stuck.key),
            RequestHooks::default(),
        )
        .checking_account();
    Some(Box::new(create))
}

/// `POST /charges/{id}/refunds`.
pub fn refund(kept: &Kept<'_>) -> Option<Rebuilt> {
    let charge = uuid::Uuid::parse_str(kept.id.as_deref()?).ok()?;
    let amount = NewRefund::parse(&kept.stuck.body).ok()?.amount.get();
    Some(Box::new(CreateRefund {
        account_id: kept.stuck.account_id,
        charge,
        amount,
        check_account: true,
    }))
}

/// `POST /webhook_endpoints` (key-first leaves the webhook endpoints' keyed
/// writes in progress too): a registration, with a secret chosen now
/// (nobody saw the first one: its answer was never stored). Its body passed
/// every check, the target's included, before its key was written; the
/// sender checks the target again at every connect.
pub fn endpoint(kept: &Kept<'_>) -> Option<Rebuilt> {
    let checked = TargetPolicy {
        allow_private: true,
        allow_loopback: true,
        allow_http: true,
        also_allow: Vec::new(),
    };
    let new = registration::parse_new_endpoint(&kept.stuck.body, &checked).ok()?;
    let mut create = endpoints::CreateEndpoint::new(kept.stuck.account_id, &new);
    create.check_account = true;
    Some(Box::new(create))
}

/// `POST /webhook_endpoints/{id}/rotate_secret`.
pub fn rotation(kept: &Kept<'_>) -> Option<Rebuilt> {
    Some(Box::new(endpoints::RotateSecret {
        account_id: kept.stuck.account_id,
        id: crate::http::paging::plain_id(kept.id.as_deref()?)?,
        secret: endpoints::new_secret(),
        expire_previous_in: registration::parse_rotation(&kept.stuck.body).ok()?,
        check_account: true,
    }))
}

/// One pass: every stuck key found (up to [`BATCH`], shared fairly among
/// the accounts that have some) recovered, unless
/// another worker takes it first. Each key's steps check a connection out
/// of `connections` and give it back (none is held while the network is
/// asked). A key registered with a foreign step is finished only through
/// that same step, one of `networks` (this instance's, found by name);
/// one registered with a network this instance does not have is left to
/// an instance that has it, and said so once (`said` remembers which).
/// How many this pass completed.
pub fn pass(
    connections: &mut impl Connections<Store = dyn Store>,
    settings: &Settings,
    networks: &[Arc<NetworkClient>],
    said: &Mutex<HashSet<(i64, String)>>,
) -> Result<usize, idempotency::Error> {
    let mut completed = 0;
    let policy = settings.key_policy();
    let names: Vec<String> = networks.iter().map(|n| n.identity().to_owned()).collect();
    let stuck_keys = connections.run(|store| {
        let accounts = store.find_stuck_accounts(ACCOUNTS_PER_PASS)?;
        let share = (BATCH / accounts.len().max(1) as i64).max(1);
        let mut keys = Vec::new();
        for account in accounts {
            keys.extend(store.find_stuck_keys(account, share, &names)?);
        }
        Ok(keys)
    })?;
    for stuck in stuck_keys {
        let request = stuck.request();
        let key = log_safe(&stuck.key, LOGGED_KEY_LEN);
        let path = log_safe(&stuck.path, LOGGED_KEY_LEN);
        let network = match &stuck.foreign_step {
            None => None,
            Some(step) => match networks.iter().find(|n| n.identity() == step) {
                Some(network) => Some(network.clone()),
                None => {
                    leave_to_another(said, &stuck, &key, step);
                    continue;
                }
            },
        };
        let Some(mut operation) = routes::operation_for(&KEPT_METHOD, &stuck, network) else {
            close_unrecoverable(&policy, connections, &request, &stuck, &key, &path);
            continue;
        };
        match policy.recover(connections, &request, operation.as_mut()) {
            Ok(Some(response)) => {
                completed += 1;
                let label = if response.status == problem::ACCOUNT_REVOKED.status {
                    "refused"
                } else {
                    "completed"
                };
                METRICS.keys_recovered.with_label_values(&[label]).inc();
                tracing::info!(account = stuck.account_id, key = %key, path = %path, status = response.status, "recovered a key left in progress");
            }
            // Another worker, or the client's retry, took it first.
            Ok(None) => METRICS.keys_recovered.with_label_values(&["taken"]).inc(),
            Err(e) => {
                METRICS.keys_recovered.with_label_values(&["failed"]).inc();
                tracing::warn!(key = %key, error = %e, "could not recover a key left in progress; will try again");
            }
        }
    }
    Ok(completed)
}

/// How many keys left to another instance are remembered as said.
const SAID_LIMIT: usize = 10_000;

/// A stuck key registered with a card network this instance does not have:
/// finishing it here would charge without the authorization, or at another
/// ledger. Left for an instance that has that network; one log line per key.
fn leave_to_another(said: &Mutex<HashSet<(i64, String)>>, stuck: &StuckKey, key: &str, step: &str) {
    let mut said = said.lock().unwrap_or_else(|e| e.into_inner());
    if said.len() >= SAID_LIMIT {
        said.clear();
    }
    if said.insert((stuck.account_id, stuck.key.clone())) {
        METRICS.keys_recovered.with_label_values(&["left"]).inc();
        tracing::warn!(account = stuck.account_id, key = %key, network = %log_safe(step, LOGGED_KEY_LEN), "a key left in progress was registered with a card network this instance does not charge through: left for an instance that does (set NETWORK_URL, or NETWORK_ID if it is the same network by another name)");
    }
}

/// A stuck key whose request cannot be rebuilt: its stored, final answer,
/// and one log line.
fn close_unrecoverable(
    policy: &Policy,
    connections: &mut impl Connections<Store = dyn Store>,
    request: &KeyedRequest<'_>,
    stuck: &StuckKey,
    key: &str,
    path: &str,
) {
    let answer = problem::saved(
        &REQUEST_NOT_RECOVERABLE,
        "This request was left unfinished (its worker stopped), and this server cannot run it again from what it kept. Nothing was done under this Idempotency-Key, and nothing will be: this answer is final for it. Send the request again with a new key.",
    );
    match policy.close_unrecoverable(connections, request, stuck.foreign_step.as_deref(), &answer) {
        Ok(true) => {
            METRICS.keys_recovered.with_label_values(&["unknown"]).inc();
            tracing::warn!(account = request.account_id, key = %key, path = %path, "a stuck key whose request this server cannot rebuild: answered with a stored 500 request-not-recoverable");
        }
        Ok(false) => METRICS.keys_recovered.with_label_values(&["taken"]).inc(),
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "could not close a stuck key that cannot be recovered")
        }
    }
}
