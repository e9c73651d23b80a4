//! What every handler shares: the pool, the authenticator and the settings,
//! and the one way a handler reaches the database: [`AppState::db`].

use std::sync::Arc;

use actix_web::HttpRequest;

use crate::accounts::Authenticator;
use crate::config::Settings;
use crate::problem::ApiError;
use crate::store::{DbPool, Store};

pub struct AppState {
    pub pool: DbPool,
    pub accounts: Authenticator,
    /// Whether demo mode is on (decided from the settings and the address).
    pub demo: bool,
    pub settings: Arc<Settings>,
}

impl AppState {
    /// Runs `work` on a pooled connection, within what is left of `req`'s
    /// deadline (`REQUEST_TIMEOUT`): past it, `503 deadline-exceeded`.
    pub async fn db<T: Send + 'static>(
        &self,
        req: &HttpRequest,
        work: impl FnOnce(&mut dyn Store) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let left = crate::deadline::remaining(req, self.settings.request_timeout);
        self.pool.run(left, work).await
    }
}
