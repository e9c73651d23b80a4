//! What every handler shares: the pool, the authenticator and the settings.

use std::sync::Arc;

use crate::accounts::Authenticator;
use crate::config::Settings;
use crate::store::DbPool;

pub struct AppState {
    pub pool: DbPool,
    pub accounts: Authenticator,
    /// Whether demo mode is on (decided from the settings and the address).
    pub demo: bool,
    pub settings: Arc<Settings>,
}
