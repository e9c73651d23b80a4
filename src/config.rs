//! Settings: every one is a flag and an environment variable with a default,
//! so `charges serve` works with no configuration at all.

use std::time::Duration;

use clap::{ArgAction, Args};

use crate::idempotency::Mode;

/// Without `DATABASE_URL`: an SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://charges.db";
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
pub const DEFAULT_WEB_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/web");
pub const DEFAULT_POOL_SIZE: u32 = 10;
pub const DEFAULT_POOL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a completed key is replayed. Clients must finish retrying within
/// this window: a retry after it is a new request (see the README).
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

pub const DEFAULT_IDEMPOTENCY_LEASE: Duration = Duration::from_secs(30);
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
pub const DEFAULT_PURGE_BATCH: i64 = 1000;

#[derive(Debug, Clone, Args)]
pub struct Settings {
    /// postgres://user@host/db (created if missing) or sqlite://path/to/file.db.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
    pub database_url: String,

    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "BIND", default_value = DEFAULT_BIND)]
    pub bind: String,

    /// Database connections in the pool. A request waiting on a concurrent
    /// request with the same key holds one for the whole wait.
    #[arg(long, env = "POOL_SIZE", default_value_t = DEFAULT_POOL_SIZE)]
    pub pool_size: u32,

    /// How long a request waits for a free connection before it gets 503.
    #[arg(long, env = "POOL_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub pool_timeout: Duration,

    /// How long an idempotency key is remembered (e.g. 24h, 30m, 90s).
    #[arg(long, env = "IDEMPOTENCY_TTL", default_value = "24h", value_parser = parse_duration)]
    pub idempotency_ttl: Duration,

    /// Where the key row is committed: with the charge (atomic) or before it (key-first).
    #[arg(long, env = "IDEMPOTENCY_MODE", value_enum, default_value = "atomic")]
    pub idempotency_mode: Mode,

    /// Key-first: how long a registered key is protected before another request may take it over.
    #[arg(long, env = "IDEMPOTENCY_LEASE", default_value = "30s", value_parser = parse_duration)]
    pub idempotency_lease: Duration,

    /// How often the background purge deletes expired keys (0s: never).
    #[arg(long, env = "PURGE_INTERVAL", default_value = "60s", value_parser = parse_duration)]
    pub purge_interval: Duration,

    /// Rows the purge deletes per statement.
    #[arg(long, env = "PURGE_BATCH", default_value_t = DEFAULT_PURGE_BATCH)]
    pub purge_batch: i64,

    /// Answer 400 to POST /charges without an Idempotency-Key.
    #[arg(long, env = "REQUIRE_IDEMPOTENCY_KEY", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub require_idempotency_key: bool,

    /// Serve the teaching page and honour the Demo-* request headers.
    #[arg(long, env = "DEMO", default_value_t = true, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub demo: bool,

    /// Turn demo mode off (same as DEMO=false).
    #[arg(long = "no-demo", action = ArgAction::SetTrue)]
    pub no_demo: bool,

    /// Directory of the teaching page, served at / in demo mode.
    #[arg(long, env = "WEB_DIR", default_value = DEFAULT_WEB_DIR)]
    pub web_dir: String,

    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "WORKERS")]
    pub workers: Option<usize>,
}

impl Settings {
    /// The settings every default gives, for tests and embedding.
    pub fn with_database_url(database_url: impl Into<String>) -> Self {
        Settings {
            database_url: database_url.into(),
            bind: DEFAULT_BIND.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            pool_timeout: DEFAULT_POOL_TIMEOUT,
            idempotency_ttl: DEFAULT_IDEMPOTENCY_TTL,
            idempotency_mode: Mode::Atomic,
            idempotency_lease: DEFAULT_IDEMPOTENCY_LEASE,
            purge_interval: DEFAULT_PURGE_INTERVAL,
            purge_batch: DEFAULT_PURGE_BATCH,
            require_idempotency_key: false,
            demo: true,
            no_demo: false,
            web_dir: DEFAULT_WEB_DIR.to_owned(),
            workers: None,
        }
    }

    pub fn demo_enabled(&self) -> bool {
        self.demo && !self.no_demo
    }
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 24h, 30s, 500ms)"))
}
