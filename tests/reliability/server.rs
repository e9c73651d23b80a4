//! The server settings these tests vary, and the support module's
//! [`ServerProcess`] started with them (`charges serve`, logging at `info`;
//! demo mode only for a test that needs the demo account's faults).

use crate::support::ServerProcess;

pub struct Config {
    pub pool_size: u32,
    pub pool_timeout: &'static str,
    pub workers: u32,
    /// Demo mode, with `DEMO_MAX_DELAYED` (the transactions `delay-commit`
    /// may hold at once): only for a test that sends the demo account's
    /// `Demo-Fault` / `Demo-Mode` headers. `None`: the API alone, every
    /// request as the test account.
    pub demo_max_delayed: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pool_size: 8,
            pool_timeout: "5s",
            workers: 2,
            demo_max_delayed: None,
        }
    }
}

impl Config {
    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("POOL_SIZE", self.pool_size.to_string()),
            ("POOL_TIMEOUT", self.pool_timeout.to_owned()),
            ("WORKERS", self.workers.to_string()),
            ("DEMO", self.demo_max_delayed.is_some().to_string()),
            ("RUST_LOG", "info,actix_server=warn".to_owned()),
            ("NO_COLOR", "1".to_owned()),
        ];
        if let Some(max) = self.demo_max_delayed {
            env.push(("DEMO_MAX_DELAYED", max.to_string()));
        }
        env
    }
}

/// Starts `charges serve` on `database_url` with `config` (blocking: call
/// it from a thread to start several at once). The requests of its
/// [`client`](ServerProcess::client) are the test account's: create it
/// (`db.create_test_account()`) once the first server has migrated.
pub fn start(name: &str, database_url: &str, config: &Config) -> ServerProcess {
    try_start(name, database_url, config).unwrap_or_else(|e| panic!("{e}"))
}

/// [`start`], with a server that exits or hangs before its ready line as
/// an `Err` with its output.
pub fn try_start(name: &str, database_url: &str, config: &Config) -> Result<ServerProcess, String> {
    let env = config.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    ServerProcess::try_start_with(name, &["serve"], database_url, &env)
}
