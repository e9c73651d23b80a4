//! What every handler shares: the pool, the authenticator and the settings,
//! and the one way a handler reaches the database: [`AppState::db`], within
//! the request's deadline (`crate::http::limits::deadline_left`).
//!
//! A handler reads its `web::Data<AppState>` and nothing else: the demo
//! hands the demo account's requests a state of their own (its pool, its
//! settings, its hooks; see `demo::faults`), so this code never asks
//! whether a request is the demo's.

use std::sync::Arc;

use actix_web::HttpRequest;

use crate::config::Settings;
use crate::http::accounts::Authenticator;
use crate::http::problem::ApiError;
use crate::network_client::NetworkClient;
use crate::store::RequestHooks;
use crate::store::{Checkouts, DbPool, Store};
use idempotency::Policy;

#[derive(Clone)]
pub struct AppState {
    pub pool: DbPool,
    pub accounts: Arc<Authenticator>,
    /// Whether demo mode is on (the operator's setting, never the address).
    pub demo: bool,
    /// The card network a charge asks to authorize it, if any.
    pub network: Option<Arc<NetworkClient>>,
    /// Changed only by [`AppState::with_settings`], which makes the policy
    /// anew.
    pub settings: Arc<Settings>,
    /// The Idempotency-Key protocol's policy `settings` choose, made once:
    /// with the keys this process completed lately (see
    /// `idempotency::RecentKeys`) and the metrics as its hook.
    policy: Arc<Policy>,
    /// What runs at the named points of a write's transactions: none
    /// installed, unless this is the demo's state for a request with
    /// `Demo-Fault`.
    pub hooks: RequestHooks,
}

impl AppState {
    /// A state with no hooks installed and no keys completed yet.
    pub fn new(
        pool: DbPool,
        accounts: Arc<Authenticator>,
        demo: bool,
        network: Option<Arc<NetworkClient>>,
        settings: Settings,
    ) -> AppState {
        let policy = Policy {
            recent: Some(Default::default()),
            ..settings.key_policy()
        };
        AppState {
            pool,
            accounts,
            demo,
            network,
            settings: Arc::new(settings),
            policy: Arc::new(policy),
            hooks: RequestHooks::default(),
        }
    }

    /// This state with `settings` instead (a sandbox's mode, a network
    /// caller's key lifetime), its policy made of them, and the same hint of
    /// recent keys.
    pub fn with_settings(&self, settings: Settings) -> AppState {
        let policy = Policy {
            recent: self.policy.recent.clone(),
            ..settings.key_policy()
        };
        AppState {
            settings: Arc::new(settings),
            policy: Arc::new(policy),
            ..self.clone()
        }
    }

    /// The Idempotency-Key protocol's policy for a request of this state's,
    /// run with `hooks` (none but the demo's or a test's): the one made for
    /// the state, unless `hooks` adds to it.
    pub fn key_policy(&self, hooks: RequestHooks) -> Arc<Policy> {
        match hooks.protocol() {
            None => self.policy.clone(),
            Some(hook) => {
                let mut policy = (*self.policy).clone();
                policy.hooks.push(hook);
                Arc::new(policy)
            }
        }
    }

    /// Runs `work` on a pooled connection, within what is left of `req`'s deadline
    /// (`REQUEST_TIMEOUT`): past it, `503 deadline-exceeded`.
    pub async fn db<T: Send + 'static>(
        &self,
        req: &HttpRequest,
        work: impl FnOnce(&mut dyn Store) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let left = crate::http::limits::deadline_left(req, self.settings.request_timeout);
        self.pool.run(left, work).await
    }

    /// As [`db`](Self::db), but `work` checks a connection out for each of
    /// its steps and holds none in between (the protocol's phases).
    pub async fn db_checkouts<T: Send + 'static>(
        &self,
        req: &HttpRequest,
        work: impl FnOnce(&mut Checkouts) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let left = crate::http::limits::deadline_left(req, self.settings.request_timeout);
        self.pool.run_checkouts(left, work).await
    }
}
