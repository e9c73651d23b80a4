//! Keys left half done: a key-first request whose worker died after its key
//! was committed (a crash, a deadline, a client gone) leaves the key in
//! progress, and, when the card network had already authorized, an
//! authorization with no charge. Once the key's lease has run out, a pass of
//! this task drives it to completion, as the client's own retry would: it
//! takes the row over (`idempotency::recover`), rebuilds the operation from
//! the request the row kept, and runs it. The network is asked again under
//! the same derived key, so it replays its authorization: the charge gets
//! it, and no authorization stays orphaned. The client's next retry then
//! replays the finished charge.
//!
//! Several instances may run passes at once: taking a row over is one
//! conditional update, so exactly one of them recovers each key.

use std::sync::Arc;

use crate::charges::{self, CreateCharge};
use crate::config::Settings;
use crate::domain::NewRefund;
use crate::hooks::{NoHooks, RequestHooks};
use crate::idempotency::{self, KeyedRequest, Operation, SavedResponse};
use crate::metrics::METRICS;
use crate::network_client::NetworkClient;
use crate::store::{QueryResult, Store, StuckKey};

/// Keys looked at per pass.
pub const BATCH: i64 = 100;

/// The operation a stuck key was registered for, rebuilt from its request.
fn operation_for(
    stuck: &StuckKey,
    network: Option<Arc<NetworkClient>>,
) -> Option<Box<dyn Operation>> {
    let path = stuck.path.as_str();
    if path == charges::PATH {
        let new = charges::parse_new_charge(&stuck.body).ok()?;
        let create = CreateCharge::new(stuck.account_id, &new).through(
            network,
            Some(&stuck.key),
            RequestHooks::default(),
        );
        return Some(Box::new(create));
    }
    let charge = path
        .strip_prefix("/charges/")?
        .strip_suffix("/refunds")
        .and_then(|id| uuid::Uuid::parse_str(id).ok())?;
    let amount = NewRefund::parse(&stuck.body).ok()?.amount.get();
    let account_id = stuck.account_id;
    Some(Box::new(
        move |tx: &mut dyn Store| -> Result<SavedResponse, idempotency::Error> {
            crate::refunds::refund(tx, account_id, charge, amount)
        },
    ))
}

/// One pass: every stuck key found (up to [`BATCH`]) recovered, unless
/// another worker takes it first. How many this pass completed.
pub fn pass(
    store: &mut dyn Store,
    settings: &Settings,
    network: Option<Arc<NetworkClient>>,
) -> QueryResult<usize> {
    let mut completed = 0;
    for stuck in store.find_stuck_keys(BATCH)? {
        let Some(mut operation) = operation_for(&stuck, network.clone()) else {
            tracing::warn!(key = %stuck.key, path = %stuck.path, "a stuck key whose request this server cannot rebuild");
            METRICS.keys_recovered.with_label_values(&["unknown"]).inc();
            continue;
        };
        let request = KeyedRequest {
            account_id: stuck.account_id,
            key: &stuck.key,
            fingerprint: &stuck.fingerprint,
            ttl: settings.idempotency_ttl,
            lease: settings.idempotency_lease,
            path: &stuck.path,
            body: &stuck.body,
        };
        match idempotency::recover(store, &request, &NoHooks, operation.as_mut()) {
            Ok(Some(_)) => {
                completed += 1;
                METRICS
                    .keys_recovered
                    .with_label_values(&["completed"])
                    .inc();
                tracing::info!(account = stuck.account_id, key = %stuck.key, path = %stuck.path, "recovered a key left in progress");
            }
            // Another worker, or the client's retry, took it first.
            Ok(None) => METRICS.keys_recovered.with_label_values(&["taken"]).inc(),
            Err(e) => {
                METRICS.keys_recovered.with_label_values(&["failed"]).inc();
                tracing::warn!(key = %stuck.key, error = %e, "could not recover a key left in progress; will try again");
            }
        }
    }
    Ok(completed)
}
