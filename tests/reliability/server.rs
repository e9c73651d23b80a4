//! The server settings these tests vary, and the support module's
//! [`ServerProcess`] started with them (in demo mode, logging at `info`).

use crate::support::ServerProcess;

pub struct Config {
    pub pool_size: u32,
    pub pool_timeout: &'static str,
    pub workers: u32,
    /// `DEMO_MAX_DELAYED`: transactions `delay-commit` may hold at once.
    pub demo_max_delayed: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pool_size: 8,
            pool_timeout: "5s",
            workers: 2,
            demo_max_delayed: 2,
        }
    }
}

impl Config {
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("POOL_SIZE", self.pool_size.to_string()),
            ("POOL_TIMEOUT", self.pool_timeout.to_owned()),
            ("WORKERS", self.workers.to_string()),
            ("DEMO", "true".to_owned()),
            ("DEMO_MAX_DELAYED", self.demo_max_delayed.to_string()),
            ("RUST_LOG", "info,actix_server=warn".to_owned()),
            ("NO_COLOR", "1".to_owned()),
        ]
    }
}

/// Starts `charges` on `database_url` with `config` (blocking: call it from
/// a thread to start several at once).
pub fn start(name: &str, database_url: &str, config: &Config) -> ServerProcess {
    try_start(name, database_url, config).unwrap_or_else(|e| panic!("{e}"))
}

/// [`start`], with a server that exits or hangs before its ready line as
/// an `Err` with its output.
pub fn try_start(name: &str, database_url: &str, config: &Config) -> Result<ServerProcess, String> {
    let env = config.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServerProcess::try_start(name, database_url, &env)
}
