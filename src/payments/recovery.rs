//! Keys left half done: a request whose worker died after its key was
//! committed (key-first: between its two transactions; either mode: between
//! the phases of a charge that asks the card network) leaves the key in
//! progress, and, when the network had already authorized, an authorization
//! with no charge. Once the key's lease has run out, a pass of this task
//! drives it to completion, as the client's own retry would: it takes the
//! row over (`idempotency::recover`), rebuilds the operation from the
//! request the row kept (its route's canonical path and its body), and runs
//! it. The network is asked again under the same derived key, so it replays
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

use std::sync::Arc;

use crate::config::Settings;
use crate::http::problem::{self, REQUEST_NOT_RECOVERABLE};
use crate::idempotency::hooks::{NoHooks, RequestHooks};
use crate::idempotency::{self, Connections, KeyedRequest, Operation, SavedResponse};
use crate::metrics::METRICS;
use crate::network::client::NetworkClient;
use crate::payments::charges::{self, CreateCharge};
use crate::payments::domain::NewRefund;
use crate::payments::refunds::CreateRefund;
use crate::store::{AccountStore, ChargeStore, Store, StuckKey};
use crate::telemetry::log_safe;

/// How much of a client's key a log line shows (escaped, as every field a
/// client chooses).
const LOGGED_KEY_LEN: usize = 255;

/// Keys looked at per pass.
pub const BATCH: i64 = 100;

/// The operation a stuck key was registered for, rebuilt from its request.
fn operation_for(
    stuck: &StuckKey,
    network: Option<Arc<NetworkClient>>,
) -> Option<Box<dyn Operation<dyn Store>>> {
    let path = stuck.path.as_str();
    if path == charges::PATH {
        let new = charges::parse_new_charge(&stuck.body).ok()?;
        let create = CreateCharge::new(stuck.account_id, &new)
            .through(network, Some(&stuck.key), RequestHooks::default())
            .checking_account();
        return Some(Box::new(create));
    }
    let charge = path
        .strip_prefix("/charges/")?
        .strip_suffix("/refunds")
        .and_then(|id| uuid::Uuid::parse_str(id).ok())?;
    let amount = NewRefund::parse(&stuck.body).ok()?.amount.get();
    Some(Box::new(RecoveredRefund(CreateRefund {
        account_id: stuck.account_id,
        charge,
        amount,
    })))
}

/// A refund the recovery task finishes, long after its request was
/// authenticated: it checks first that the account may still act.
struct RecoveredRefund(CreateRefund);

impl<Tx: ChargeStore + AccountStore + ?Sized> Operation<Tx> for RecoveredRefund {
    fn run(&mut self, tx: &mut Tx) -> Result<SavedResponse, idempotency::Error> {
        if !tx.account_is_live(self.0.account_id)? {
            return Ok(charges::revoked());
        }
        self.0.run(tx)
    }
}

/// One pass: every stuck key found (up to [`BATCH`]) recovered, unless
/// another worker takes it first. Each key's steps check a connection out
/// of `connections` and give it back (none is held while the network is
/// asked). How many this pass completed.
pub fn pass(
    connections: &mut impl Connections<Store = dyn Store>,
    settings: &Settings,
    network: Option<Arc<NetworkClient>>,
) -> Result<usize, idempotency::Error> {
    let mut completed = 0;
    let stuck_keys = connections.run(|store| Ok(store.find_stuck_keys(BATCH)?))?;
    for stuck in stuck_keys {
        let request = KeyedRequest {
            account_id: stuck.account_id,
            key: &stuck.key,
            fingerprint: &stuck.fingerprint,
            ttl: settings.idempotency_ttl,
            lease: settings.idempotency_lease,
            path: &stuck.path,
            body: &stuck.body,
        };
        let key = log_safe(&stuck.key, LOGGED_KEY_LEN);
        let path = log_safe(&stuck.path, LOGGED_KEY_LEN);
        let Some(mut operation) = operation_for(&stuck, network.clone()) else {
            close_unrecoverable(connections, &request, &key, &path);
            continue;
        };
        match idempotency::recover(connections, &request, &NoHooks, operation.as_mut()) {
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

/// A stuck key whose request cannot be rebuilt: its stored, final answer,
/// and one log line.
fn close_unrecoverable(
    connections: &mut impl Connections<Store = dyn Store>,
    request: &KeyedRequest<'_>,
    key: &str,
    path: &str,
) {
    let answer = problem::saved(
        &REQUEST_NOT_RECOVERABLE,
        "This request was left unfinished (its worker stopped), and this server cannot run it again from what it kept. Nothing was done under this Idempotency-Key, and nothing will be: this answer is final for it. Send the request again with a new key.",
    );
    match idempotency::close_unrecoverable(connections, request, &answer) {
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
