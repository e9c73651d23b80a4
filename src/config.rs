//! Settings: every one is a flag and an environment variable with a default,
//! so `charges serve` works with no configuration at all.

use std::net::IpAddr;
use std::time::Duration;

use clap::{ArgAction, Args};

use crate::store::PoolSettings;
use idempotency::{Mode, Policy};

/// Without `DATABASE_URL`: an SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://charges.db";
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";
/// The well-known merchant key, public in this source: `charges network`
/// refuses it on an address other machines reach, `charges serve` refuses it
/// for a separate network, and the in-process one takes a random key instead.
pub const DEFAULT_NETWORK_API_KEY: &str = "sk_network_local";
pub const DEFAULT_WEB_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/web");
pub const DEFAULT_POOL_SIZE: u32 = 10;
pub const DEFAULT_POOL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a completed key is replayed. Clients must finish retrying within
/// this window: a retry after it is a new request (see the README).
pub const DEFAULT_IDEMPOTENCY_TTL: Duration = Duration::from_secs(24 * 60 * 60);

pub const DEFAULT_IDEMPOTENCY_LEASE: Duration = Duration::from_secs(30);
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
pub const DEFAULT_PURGE_BATCH: i64 = 1000;
/// How long an API key that resolved stays trusted without asking the
/// database again: the bound on how long a revoked key keeps working.
pub const DEFAULT_ACCOUNT_CACHE_TTL: Duration = Duration::from_secs(10);
/// How long a client may take to send a request body before it gets 408.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections the server accepts at once (all workers together).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Requests per second (bursts of twice that) one account may make: no one
/// tenant takes the server (Stripe's default is of this order).
pub const DEFAULT_RATE_LIMIT_PER_ACCOUNT: u32 = 100;
/// Requests per second (bursts of twice that) one client address may make,
/// authenticated or not: a flood of made-up keys is refused before any
/// database look-up.
pub const DEFAULT_RATE_LIMIT_PER_CLIENT: u32 = 300;
/// Connections one client address may hold open: a sixteenth of
/// MAX_CONNECTIONS, so that a few clients cannot lock the others out (and
/// idle keep-alive connections are closed first when the server nears
/// MAX_CONNECTIONS: `limits`).
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 64;
/// Where `/metrics` is served: a listener of its own (the Prometheus
/// convention), on loopback, so that no proxy in front of BIND reaches it.
pub const DEFAULT_METRICS_BIND: &str = "127.0.0.1:9464";
/// `METRICS_BIND`'s value for no metrics listener.
pub const METRICS_OFF: &str = "off";
pub const DEFAULT_KEEP_ALIVE_LIFETIME: Duration = Duration::from_secs(60);
/// `NETWORK_URL`'s values besides a URL.
pub const NETWORK_IN_PROCESS: &str = "in-process";
pub const NETWORK_OFF: &str = "off";
pub const DEFAULT_NETWORK_TIMEOUT: Duration = Duration::from_secs(5);
/// What a key's lease must cover beyond a call to the card network
/// (`NETWORK_TIMEOUT`) and phase 3's pool checkout (`POOL_TIMEOUT`): phase
/// 1's commit and phase 3's short transaction themselves.
pub const LEASE_SLACK: Duration = Duration::from_secs(1);
/// The in-process network answers at once unless told otherwise.
pub const DEFAULT_NETWORK_LATENCY: Duration = Duration::ZERO;
pub const DEFAULT_RECOVERY_INTERVAL: Duration = Duration::from_secs(5);
/// Demo mode: transactions held open by `Demo-Fault: delay-commit` at once
/// (the loopback demo's; hosted for others, see [`demo_max_delayed_public`]).
pub const DEFAULT_DEMO_MAX_DELAYED: u32 = 2;

/// Hosted for others (`--public`) without `DEMO_MAX_DELAYED`: a third of
/// the demo's connections (`demo_half`, half of POOL_SIZE), at least one.
/// Lesson 4 takes two of them while it holds its transaction (A's, and B's
/// waiting on it); the third is left for every other learner's steps and
/// the pages' reads of their tables.
pub fn demo_max_delayed_public(demo_half: u32) -> u32 {
    (demo_half / 3).max(1)
}
/// Demo mode: sandboxes (one per visitor of the page) alive at once.
pub const DEFAULT_DEMO_MAX_SANDBOXES: u32 = 100;
/// Demo mode: a sandbox unused this long is deleted with all its rows.
pub const DEFAULT_DEMO_SANDBOX_IDLE_EXPIRY: Duration = Duration::from_secs(2 * 60 * 60);
/// Demo mode: sandboxes one client address may create a minute.
pub const DEFAULT_DEMO_SANDBOXES_PER_MINUTE: u32 = 10;
/// Demo mode: sandboxes one room (a DEMO_ROOM_CODES code) may create a minute:
/// two classes of thirty opening the page in the same minute.
pub const DEFAULT_DEMO_ROOM_SANDBOXES_PER_MINUTE: u32 = 60;

// The deadlines, nested so that each wait ends before the one around it: a
// demo delay (at most DB_LOCK_TIMEOUT - 1 s) < a wait for a lock < one
// statement < the whole request. Lesson 4 holds its first request 5 s.
/// How long a request may wait for the database in all before it is answered
/// 503 (outcome unknown; a retry with the same key is safe).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one statement may run (PostgreSQL `statement_timeout`).
pub const DEFAULT_DB_STATEMENT_TIMEOUT: Duration = Duration::from_secs(8);
/// How long a statement may wait for a lock: PostgreSQL `lock_timeout` (a
/// duplicate waiting on a key's index entry then hears 409), SQLite's busy
/// timeout (the write lock).
pub const DEFAULT_DB_LOCK_TIMEOUT: Duration = Duration::from_secs(7);
/// How long a session may sit idle inside a transaction before PostgreSQL
/// ends it (`idle_in_transaction_session_timeout`).
pub const DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

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
    #[arg(long, env = "POOL_SIZE", default_value_t = DEFAULT_POOL_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    pub pool_size: u32,

    /// How long a request waits for a free connection before it gets 503.
    #[arg(long, env = "POOL_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub pool_timeout: Duration,

    /// How long a request may wait for the database in all (then 503: outcome unknown, retry with the same key).
    #[arg(long, env = "REQUEST_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// PostgreSQL statement_timeout on the server's connections.
    #[arg(long, env = "DB_STATEMENT_TIMEOUT", default_value = "8s", value_parser = parse_duration)]
    pub db_statement_timeout: Duration,

    /// PostgreSQL lock_timeout (a duplicate waiting on its key longer hears 409); SQLite's busy timeout.
    #[arg(long, env = "DB_LOCK_TIMEOUT", default_value = "7s", value_parser = parse_duration)]
    pub db_lock_timeout: Duration,

    /// PostgreSQL idle_in_transaction_session_timeout on the server's connections.
    #[arg(long, env = "DB_IDLE_IN_TRANSACTION_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub db_idle_in_transaction_timeout: Duration,

    /// How long an idempotency key is remembered (e.g. 24h, 30m, 90s).
    #[arg(long, env = "IDEMPOTENCY_TTL", default_value = "24h", value_parser = parse_duration)]
    pub idempotency_ttl: Duration,

    /// Where the key row is committed: with the charge (atomic) or before it (key-first).
    #[arg(long, env = "IDEMPOTENCY_MODE", default_value = "atomic", value_parser = mode_parser())]
    pub idempotency_mode: Mode,

    /// How long a key registered in progress is protected before another request may take it over (key-first, and a charge waiting on the card network: with one, at least NETWORK_TIMEOUT + POOL_TIMEOUT + 1s, or the server refuses to start).
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

    /// Serve the teaching page and honour the Demo-* request headers for the
    /// demo account. Unset: off for `charges serve`, on for `charges demo`
    /// (the default command, loopback only).
    #[arg(long, env = "DEMO", action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub demo: Option<bool>,

    /// Turn demo mode off (same as DEMO=false).
    #[arg(long = "no-demo", action = ArgAction::SetTrue)]
    pub no_demo: bool,

    /// Demo mode: let `Demo-Fault: crash-after-key` kill the process (for crash tests).
    #[arg(long, env = "DEMO_ALLOW_CRASH", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub demo_allow_crash: bool,

    /// Demo mode: transactions `delay-commit` may hold open at once (at most half of POOL_SIZE; 1 on SQLite). Unset: 2, or hosted for others (`--public`) a third of the demo's half of POOL_SIZE (see docs/deploy.md).
    #[arg(long, env = "DEMO_MAX_DELAYED")]
    pub demo_max_delayed: Option<u32>,

    /// Demo mode hosted for others (`charges demo --public`): PostgreSQL
    /// only, no crash faults, no shared `sk_test_demo` account: every
    /// visitor works in a sandbox of their own (`POST /demo/sandboxes`).
    #[arg(long = "public", env = "DEMO_PUBLIC", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub demo_public: bool,

    /// Demo mode: sandboxes alive at once; past it `POST /demo/sandboxes` answers 503 with Retry-After.
    #[arg(long, env = "DEMO_MAX_SANDBOXES", default_value_t = DEFAULT_DEMO_MAX_SANDBOXES)]
    pub demo_max_sandboxes: u32,

    /// Demo mode: a sandbox unused this long is deleted with all its rows (e.g. 2h, 90s).
    #[arg(long, env = "DEMO_SANDBOX_IDLE_EXPIRY", default_value = "2h", value_parser = parse_duration)]
    pub demo_sandbox_idle_expiry: Duration,

    /// Demo mode: sandboxes one client address may create a minute (429 past it).
    #[arg(long, env = "DEMO_SANDBOXES_PER_MINUTE", default_value_t = DEFAULT_DEMO_SANDBOXES_PER_MINUTE)]
    pub demo_sandboxes_per_minute: u32,

    /// Demo mode: room codes the operator hands a class (comma-separated); a page opened as `/?room=CODE` makes its sandbox in that room, limited per room instead of per address (docs/deploy.md).
    #[arg(
        long,
        env = "DEMO_ROOM_CODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub demo_room_codes: Vec<String>,

    /// Demo mode: sandboxes one room may create a minute (429 past it).
    #[arg(long, env = "DEMO_ROOM_SANDBOXES_PER_MINUTE", default_value_t = DEFAULT_DEMO_ROOM_SANDBOXES_PER_MINUTE)]
    pub demo_room_sandboxes_per_minute: u32,

    /// How long a resolved API key is cached: a revoked key stops working within this time.
    #[arg(long, env = "ACCOUNT_CACHE_TTL", default_value = "10s", value_parser = parse_duration)]
    pub account_cache_ttl: Duration,

    /// How long a client may take to send a request body (then 408).
    #[arg(long, env = "BODY_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub body_timeout: Duration,

    /// Open client connections accepted at once, over all workers.
    #[arg(long, env = "MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,

    /// Requests per second one account may make (bursts of twice that); 0: no limit. Then 429 with Retry-After.
    #[arg(long, env = "RATE_LIMIT_PER_ACCOUNT", default_value_t = DEFAULT_RATE_LIMIT_PER_ACCOUNT)]
    pub rate_limit_per_account: u32,

    /// Requests per second one client address may make (bursts of twice that); 0: no limit. Then 429 with Retry-After.
    #[arg(long, env = "RATE_LIMIT_PER_CLIENT", default_value_t = DEFAULT_RATE_LIMIT_PER_CLIENT)]
    pub rate_limit_per_client: u32,

    /// Open connections one client address may hold (0: no limit); more are closed at once.
    #[arg(long, env = "MAX_CONNECTIONS_PER_PEER", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_PEER)]
    pub max_connections_per_peer: usize,

    /// After this, a keep-alive connection is closed after its next response (the client reconnects).
    #[arg(long, env = "KEEP_ALIVE_LIFETIME", default_value = "60s", value_parser = parse_duration)]
    pub keep_alive_lifetime: Duration,

    /// Proxies whose X-Forwarded-For names the client (comma-separated addresses), e.g. 127.0.0.1 behind a local nginx. They are exempt from MAX_CONNECTIONS_PER_PEER.
    #[arg(long, env = "TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<IpAddr>,

    /// Where /metrics is served: a listener of its own, never BIND's (`off`: no metrics).
    #[arg(long, env = "METRICS_BIND", default_value = DEFAULT_METRICS_BIND)]
    pub metrics_bind: String,

    /// The card network every charge asks to authorize it first (then a charge runs in three phases instead of one transaction): `off` (the default: a charge is one transaction), `in-process` (one started in this process, on a loopback port), or the URL of a separate `charges network`.
    #[arg(long, env = "NETWORK_URL", default_value = NETWORK_OFF)]
    pub network_url: String,

    /// The in-process network's own database (default: beside DATABASE_URL's, `<file>-network.db` or `<database>_network`).
    #[arg(long, env = "NETWORK_DATABASE_URL", hide_env_values = true)]
    pub network_database_url: Option<String>,

    /// The merchant key this API holds at a separate card network (NETWORK_URL); the in-process network gets a random one per process unless this is set to another than the default.
    #[arg(long, env = "NETWORK_API_KEY", default_value = DEFAULT_NETWORK_API_KEY, hide_env_values = true)]
    pub network_api_key: String,

    /// How long a call to the card network may take (then 503, the key free for the retry).
    #[arg(long, env = "NETWORK_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub network_timeout: Duration,

    /// How long the in-process card network takes to answer an authorization (real ones take 100 ms to 2 s), e.g. 300ms.
    #[arg(long, env = "NETWORK_LATENCY", default_value = "0s", value_parser = parse_duration)]
    pub network_latency: Duration,

    /// How often keys left in progress (their lease run out) are driven to completion (0s: never).
    #[arg(long, env = "RECOVERY_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub recovery_interval: Duration,

    /// The card network's name, recorded in every key registered with it, so that only an instance charging through the same network finishes such a key left in progress (default: derived from NETWORK_URL, or from the in-process network's database). Instances that reach one network by different URLs set the same NETWORK_ID.
    #[arg(long, env = "NETWORK_ID")]
    pub network_id: Option<String>,

    /// Directory of the teaching page, served at / in demo mode (default: web/ of the source checkout the binary was built from).
    #[arg(long, env = "WEB_DIR", default_value = DEFAULT_WEB_DIR, hide_default_value = true)]
    pub web_dir: String,

    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "WORKERS")]
    pub workers: Option<usize>,

    /// Host names (comma-separated) that demo mode, /metrics and the in-process card network answer besides loopback's (localhost, 127.0.0.1, [::1]); any other Host is a 421 there. The API of `charges serve` answers any Host.
    #[arg(long, env = "ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    #[command(flatten)]
    pub webhooks: crate::webhooks::settings::WebhookSettings,
}

/// The protocol crate's modes, with clap's list of them in `--help`.
fn mode_parser() -> impl clap::builder::TypedValueParser<Value = Mode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new([Mode::Atomic.as_str(), Mode::KeyFirst.as_str()])
        .try_map(|s| s.parse::<Mode>())
}

impl Settings {
    /// The Idempotency-Key protocol's policy these settings choose, with
    /// the metrics registry as its one hook; no hint of recent keys (a state
    /// adds its own, and a demo's request its faults).
    pub fn key_policy(&self) -> Policy {
        Policy {
            mode: self.idempotency_mode,
            ttl: self.idempotency_ttl,
            lease: self.idempotency_lease,
            recent: None,
            hooks: vec![crate::metrics::protocol()],
        }
    }

    /// The settings every default gives, for tests and embedding (but with
    /// no metrics listener: METRICS_BIND's default is a fixed port).
    pub fn with_database_url(database_url: impl Into<String>) -> Self {
        Settings {
            database_url: database_url.into(),
            bind: DEFAULT_BIND.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            pool_timeout: DEFAULT_POOL_TIMEOUT,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            db_statement_timeout: DEFAULT_DB_STATEMENT_TIMEOUT,
            db_lock_timeout: DEFAULT_DB_LOCK_TIMEOUT,
            db_idle_in_transaction_timeout: DEFAULT_DB_IDLE_IN_TRANSACTION_TIMEOUT,
            idempotency_ttl: DEFAULT_IDEMPOTENCY_TTL,
            idempotency_mode: Mode::Atomic,
            idempotency_lease: DEFAULT_IDEMPOTENCY_LEASE,
            purge_interval: DEFAULT_PURGE_INTERVAL,
            purge_batch: DEFAULT_PURGE_BATCH,
            require_idempotency_key: false,
            demo: None,
            no_demo: false,
            demo_allow_crash: false,
            demo_max_delayed: None,
            demo_public: false,
            demo_max_sandboxes: DEFAULT_DEMO_MAX_SANDBOXES,
            demo_sandbox_idle_expiry: DEFAULT_DEMO_SANDBOX_IDLE_EXPIRY,
            demo_sandboxes_per_minute: DEFAULT_DEMO_SANDBOXES_PER_MINUTE,
            demo_room_codes: Vec::new(),
            demo_room_sandboxes_per_minute: DEFAULT_DEMO_ROOM_SANDBOXES_PER_MINUTE,
            account_cache_ttl: DEFAULT_ACCOUNT_CACHE_TTL,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            rate_limit_per_account: DEFAULT_RATE_LIMIT_PER_ACCOUNT,
            rate_limit_per_client: DEFAULT_RATE_LIMIT_PER_CLIENT,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            keep_alive_lifetime: DEFAULT_KEEP_ALIVE_LIFETIME,
            trusted_proxies: Vec::new(),
            // Embedded (tests, the network): no fixed port taken by default.
            metrics_bind: METRICS_OFF.to_owned(),
            network_url: NETWORK_OFF.to_owned(),
            network_database_url: None,
            network_api_key: DEFAULT_NETWORK_API_KEY.to_owned(),
            network_timeout: DEFAULT_NETWORK_TIMEOUT,
            network_latency: DEFAULT_NETWORK_LATENCY,
            recovery_interval: DEFAULT_RECOVERY_INTERVAL,
            network_id: None,
            web_dir: DEFAULT_WEB_DIR.to_owned(),
            workers: None,
            allowed_hosts: Vec::new(),
            webhooks: Default::default(),
        }
    }

    /// What the store's pool is built from.
    pub fn pool(&self) -> PoolSettings {
        PoolSettings {
            url: self.database_url.clone(),
            size: self.pool_size,
            timeout: self.pool_timeout,
            statement_timeout: self.db_statement_timeout,
            lock_timeout: self.db_lock_timeout,
            idle_in_transaction_timeout: self.db_idle_in_transaction_timeout,
        }
    }

    /// The in-process network's database: as set, or beside DATABASE_URL's.
    pub fn network_database(&self) -> String {
        if let Some(url) = &self.network_database_url {
            return url.clone();
        }
        let url = &self.database_url;
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            let stem = path.strip_suffix(".db").unwrap_or(path);
            return format!("sqlite://{stem}-network.db");
        }
        // postgres://…/name?query -> …/name_network?query
        let (base, query) = url
            .split_once('?')
            .map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
        let mut out = format!("{base}_network");
        if let Some(query) = query {
            out.push('?');
            out.push_str(query);
        }
        out
    }

    /// The shortest `IDEMPOTENCY_LEASE` this server starts with while a card
    /// network is configured: a charge's key must stay its own from phase
    /// 1's commit through the network call (at most `NETWORK_TIMEOUT`),
    /// phase 3's checkout (at most `POOL_TIMEOUT`) and its transaction
    /// ([`LEASE_SLACK`]). A shorter lease would let the recovery task or a
    /// retry take the key over from a charge still waiting on the network.
    pub fn minimum_lease(&self) -> Duration {
        self.network_timeout + self.pool_timeout + LEASE_SLACK
    }

    /// Refuses a lease shorter than [`Settings::minimum_lease`] when a card
    /// network is configured (with `NETWORK_URL=off` no call outlives a
    /// transaction, and any lease will do). The demo's per-request
    /// `Demo-Fault: lease=<ms>` is not a setting and is not checked: phase
    /// 3 completes a key only under its own lease token, so a key taken
    /// over still gets one true answer.
    pub fn check_lease(&self) -> Result<(), String> {
        let minimum = self.minimum_lease();
        // (The demo's own network, asked only by the demo's requests that
        // ask, is as the demo's `lease=<ms>`: a key taken over under it
        // still gets one true answer, phase 3 completing only under its
        // own lease token.)
        if self.network_url == NETWORK_OFF || self.idempotency_lease >= minimum {
            return Ok(());
        }
        Err(format!(
            "IDEMPOTENCY_LEASE ({:?}) is shorter than NETWORK_TIMEOUT ({:?}) + POOL_TIMEOUT ({:?}) + {:?}: a charge still waiting on the card network could have its key taken over. Set IDEMPOTENCY_LEASE to at least {:?}, or shorten NETWORK_TIMEOUT or POOL_TIMEOUT.",
            self.idempotency_lease, self.network_timeout, self.pool_timeout, LEASE_SLACK, minimum
        ))
    }

    /// The name key rows record for the card network a charge asks: NETWORK_ID
    /// if set; otherwise a digest of where the network is (the in-process
    /// network's database, or NETWORK_URL), so that instances configured
    /// alike agree with no setting, and no URL (nor its password) is
    /// written into a key row.
    pub fn network_identity(&self, in_process: bool) -> String {
        use sha2::{Digest, Sha256};
        if let Some(id) = &self.network_id {
            return id.clone();
        }
        let (kind, place) = match in_process {
            true => ("in-process", self.network_database()),
            false => ("url", self.network_url.clone()),
        };
        let digest = format!("{:x}", Sha256::digest(place.as_bytes()));
        format!("{kind}:{}", &digest[..16])
    }

    /// A separate card network is never asked with the public default key
    /// (anyone could charge through it with that key): refused before
    /// anything is opened or created.
    pub fn check_network_key(&self) -> Result<(), String> {
        let separate = ![NETWORK_OFF, NETWORK_IN_PROCESS].contains(&self.network_url.as_str());
        if separate && self.network_api_key == DEFAULT_NETWORK_API_KEY {
            return Err(format!(
                "NETWORK_URL {} is a separate network, and NETWORK_API_KEY is the default, public key: set NETWORK_API_KEY to the secret that network was started with",
                crate::store::redact::redact(&self.network_url)
            ));
        }
        Ok(())
    }

    /// In demo mode, the teaching page must be where WEB_DIR says: a wrong
    /// folder would start a demo whose every page is a 404.
    pub fn check_web_dir(&self) -> Result<(), String> {
        let index = std::path::Path::new(&self.web_dir).join("index.html");
        if !self.demo_enabled() || index.is_file() {
            return Ok(());
        }
        Err(format!(
            "WEB_DIR {} has no index.html, so the teaching page cannot be served: set WEB_DIR (or --web-dir) to the web/ folder of a checkout of charges",
            self.web_dir
        ))
    }

    /// Whether demo mode is on: only when asked for (`DEMO=true`, `--demo`,
    /// or `charges demo`, which sets it), never guessed from the address or
    /// from a request.
    pub fn demo_enabled(&self) -> bool {
        !self.no_demo && self.demo == Some(true)
    }

    /// Where webhook endpoints may point: WEBHOOK_ALLOW_*, and in the
    /// loopback demo also loopback over http://, for the receiver it hosts
    /// (only this machine reaches a loopback demo).
    pub fn webhook_target_policy(&self) -> crate::webhooks::targets::TargetPolicy {
        let mut policy = self.webhooks.target_policy();
        if self.demo_enabled() && !self.demo_public {
            // The loopback demo: its receivers run here, nowhere else.
            policy.allow_loopback = true;
            policy.allow_http = true;
        }
        policy
    }

    /// Whether `POST /webhook_endpoints` refuses every URL: in the demo
    /// hosted for others (`--public`) unless DEMO_PUBLIC_WEBHOOKS, so that a
    /// public page does not send requests wherever a visitor asks. (The
    /// demo's own receiver is registered by the demo, not through the API.)
    pub fn webhook_registration_closed(&self) -> bool {
        self.demo_enabled() && self.demo_public && !self.webhooks.demo_public_webhooks
    }
}

/// What a caller can do to a server in demo mode, logged when it is switched
/// on for a non-loopback address.
pub const DEMO_EXPOSED_WARNING: &str = "DEMO=true on an address other machines can reach: anyone holding the public demo key sk_test_demo can create charges on the demo account, hold database transactions open (Demo-Fault: delay-commit), switch the demo account's idempotency protection off (Demo-Mode: check-then-insert), and reset or expire the demo account's rows through /demo/*. Other accounts are not affected. Run `charges serve` without DEMO=true to expose the API alone.";

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 24h, 30s, 500ms)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo(demo: Option<bool>, no_demo: bool) -> bool {
        let mut s = Settings::with_database_url("sqlite://x.db");
        s.demo = demo;
        s.no_demo = no_demo;
        s.demo_enabled()
    }

    #[test]
    fn a_lease_shorter_than_the_network_timeout_plus_the_pool_timeout_and_a_second_is_refused() {
        let mut s = Settings::with_database_url("sqlite://x.db");
        s.network_url = NETWORK_IN_PROCESS.to_owned();
        assert_eq!(s.minimum_lease(), Duration::from_secs(11));
        assert_eq!(s.check_lease(), Ok(()), "the defaults start");
        s.idempotency_lease = Duration::from_secs(3);
        assert_eq!(
            s.check_lease().unwrap_err(),
            "IDEMPOTENCY_LEASE (3s) is shorter than NETWORK_TIMEOUT (5s) + POOL_TIMEOUT (5s) + 1s: a charge still waiting on the card network could have its key taken over. Set IDEMPOTENCY_LEASE to at least 11s, or shorten NETWORK_TIMEOUT or POOL_TIMEOUT."
        );
        s.idempotency_lease = Duration::from_secs(11);
        assert_eq!(s.check_lease(), Ok(()), "the minimum itself is enough");
        s.idempotency_lease = Duration::from_millis(10_999);
        assert!(s.check_lease().is_err());
        s.network_url = NETWORK_OFF.to_owned();
        assert_eq!(s.check_lease(), Ok(()), "no network: no call to outlast");
    }

    #[test]
    fn demo_mode_is_on_only_when_asked_for_and_no_demo_always_turns_it_off() {
        assert!(!demo(None, false), "never by default, whatever the address");
        assert!(demo(Some(true), false));
        assert!(!demo(Some(false), false));
        assert!(!demo(Some(true), true));
        assert!(!demo(None, true));
    }
}
