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
use idempotency::RecentKeys;

#[derive(Clone)]
pub struct AppState {
    pub pool: DbPool,
    pub accounts: Arc<Authenticator>,
    /// Whether demo mode is on (the operator's setting, never the address).
    pub demo: bool,
    /// The card network a charge asks to authorize it, if any.
    pub network: Option<Arc<NetworkClient>>,
    pub settings: Arc<Settings>,
    /// The keys this process completed lately (see `idempotency::RecentKeys`).
    pub recent_keys: Arc<RecentKeys>,
    /// What runs at the named points of a write's transactions: none
    /// installed, unless this is the demo's state for a request with
    /// `Demo-Fault`.
    pub hooks: RequestHooks,
}

impl AppState {
    /// The Idempotency-Key protocol's policy for a request of this state's,
    /// run with `hooks` (none but the demo's or a test's).
    pub fn key_policy(&self, hooks: RequestHooks) -> idempotency::Policy {
        let mut policy = idempotency::Policy {
            recent: Some(self.recent_keys.clone()),
            ..self.settings.key_policy()
        };
        policy.hooks.extend(hooks.protocol());
        policy
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
