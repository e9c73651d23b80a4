//! What every handler shares: the pool, the authenticator and the settings,
//! and the one way a handler reaches the database: [`AppState::db`].

use std::sync::Arc;

use actix_web::{HttpMessage, HttpRequest};

use crate::config::Settings;
use crate::http::accounts::Authenticator;
use crate::http::problem::ApiError;
use crate::idempotency::RecentKeys;
use crate::network::client::NetworkClient;
use crate::store::{Checkouts, DbPool, Store};

pub struct AppState {
    pub pool: DbPool,
    pub accounts: Authenticator,
    /// Whether demo mode is on (the operator's setting, never the address).
    pub demo: bool,
    /// The card network a charge asks to authorize it, if any.
    pub network: Option<Arc<NetworkClient>>,
    pub settings: Arc<Settings>,
    /// The keys this process completed lately (see `idempotency::recent`).
    pub recent_keys: Arc<RecentKeys>,
}

/// The pool a request's database work runs on when it is not the server's
/// own: the demo sandbox confines the demo account's requests to a pool of
/// their own, so that they can never hold the connections other accounts
/// need.
#[derive(Clone)]
pub struct RequestPool(pub DbPool);

impl AppState {
    /// Runs `work` on a pooled connection (the request's [`RequestPool`] if
    /// it has one), within what is left of `req`'s deadline
    /// (`REQUEST_TIMEOUT`): past it, `503 deadline-exceeded`.
    pub async fn db<T: Send + 'static>(
        &self,
        req: &HttpRequest,
        work: impl FnOnce(&mut dyn Store) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let left = crate::http::deadline::remaining(req, self.settings.request_timeout);
        let pool = req.extensions().get::<RequestPool>().map(|p| p.0.clone());
        pool.as_ref().unwrap_or(&self.pool).run(left, work).await
    }

    /// As [`db`](Self::db), but `work` checks a connection out for each of
    /// its steps and holds none in between (the protocol's phases).
    pub async fn db_checkouts<T: Send + 'static>(
        &self,
        req: &HttpRequest,
        work: impl FnOnce(&mut Checkouts) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let left = crate::http::deadline::remaining(req, self.settings.request_timeout);
        let pool = req.extensions().get::<RequestPool>().map(|p| p.0.clone());
        pool.as_ref()
            .unwrap_or(&self.pool)
            .run_checkouts(left, work)
            .await
    }
}
