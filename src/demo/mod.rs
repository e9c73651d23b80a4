//! Demo mode: the fault injection and the database views that the teaching
//! page uses, each confined to the caller's own sandbox: an account flagged
//! `demo` that a visitor's tab makes with `POST /demo/sandboxes` (a key of
//! its own, deleted with its rows once idle: [`sandboxes`]), or, on the
//! loopback demo, the shared one with a public key, `sk_test_demo`. Mounted
//! only when demo mode is on; with it off none of it is routed, no demo
//! account authenticates, and the `Demo-*` headers mean nothing.
//!
//! - `Demo-Fault` (on the charge routes, comma-separated; all 12 values):
//!   - `lose-response`: commit, then answer 504 as a timed-out gateway
//!     would;
//!   - `delay-commit=<ms>`: hold the transaction open before COMMIT;
//!   - `fail-before-commit`: fail inside the transaction (everything rolls
//!     back);
//!   - `crash-after-key`: key-first: SIGKILL this process between its two
//!     transactions (only with `DEMO_ALLOW_CRASH=true`);
//!   - `abandon`: key-first: the worker stops after the key's commit as a
//!     dead process would, leaving it in progress, without killing anything
//!     (answered 504);
//!   - `forget-commit`: `POST /charges`: answer the 201, then delete the
//!     charge and its key row, as a database that lost an acknowledged
//!     commit would;
//!   - `lease=<ms>`: key-first: this request's lease;
//!   - `network-down`: the card network does not answer (nothing is
//!     authorized);
//!   - `network-delay=<ms>`: the card network takes this long to answer;
//!   - `network-lose-answer`: the network authorizes, and its answer is lost
//!     on the way back;
//!   - `abandon-after-network`: key-first: the worker stops after the
//!     network authorized, as `abandon` does (answered 504);
//!   - `network-fresh-key`: the network is asked under a new key each time,
//!     as an integration that does not pass the key on would.
//!
//!   The transaction and network faults act through the `store::hooks` seam (an
//!   abandoning worker unwinds there, as a dead one would stop); the key
//!   the network is asked under through the demo's own client of it;
//!   `lose-response`, `abandon`'s lost answer and `forget-commit` wrap the
//!   handler from outside.
//! - `Demo-Mode: atomic | key-first`: run this request in that design.
//! - `Demo-Session: <tag>` (1 to 8 letters or digits): name this request's
//!   PostgreSQL sessions `charges-demo-<account>-<tag>`, so that psql tells
//!   lesson 4's A from B.
//! - `Demo-Mode: check-then-insert`: the naive algorithm (look the key up,
//!   then insert it) against a table without a unique constraint, to show
//!   the race the constraint prevents.
//! - `GET /demo/state`, `POST /demo/reset`, `POST /demo/keys/{key}/expire`,
//!   `POST /demo/purge`: the caller's sandbox's rows only; `GET /demo/slot`:
//!   whether it holds a transaction open now (from memory).
//!
//! Files: this one holds the demo's walls (the shared account, seeded here,
//! and the limits); [`sandboxes`] the visitors' sandboxes; [`faults`] the `Demo-*` headers, read into the demo's own
//! `AppState` for the request (pool, mode, lease, hooks, network client);
//! [`routes`] the `/demo/*` handlers and the check-then-insert algorithm;
//! [`queries`] the sandbox's own queries, none of which is the application's.
//!
//! Plugged in by `app` in demo mode, and nowhere else: [`gate`] in front of
//! every route, [`faults`] once, on the scope of the charge routes, the
//! check-then-insert route on `POST /charges`, and [`routes`]. A sandbox's
//! request is authenticated once, by [`faults`] (one charge of its rate
//! limit): the state it hands the handler does not charge again.
//!
//! The walls: a `Demo-*` header from any other account is a 400 (after
//! authentication, so 401 comes first); the sandboxes' requests and every
//! `/demo/*` route run on connections of their own (half of POOL_SIZE,
//! besides the server's pool), each sandbox's on at most a few of them
//! and named for it (so that its view of lock waits is its own), and at
//! most `DEMO_MAX_DELAYED` of them hold a transaction open, one per
//! sandbox, so that on PostgreSQL no other account, and no other visitor,
//! waits for one visitor. On SQLite, whose write lock is
//! global, one at a time with a gap after each: another account's write
//! waits for at most one delay and is never refused for it.

mod faults;
mod gate;
mod hooks;
pub mod lesson8;
pub mod openapi;
mod queries;
mod race;
mod receiver;
pub mod rooms;
mod routes;
pub mod sandboxes;
mod slots;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::config::Settings;
use crate::http::accounts::{self, Authenticator};
use crate::network_client::{NetworkClient, Watcher};
use crate::store::{Backend, DbPool, Store};

pub use faults::{Faults, faults};
pub use gate::gate;
pub use routes::{check_then_insert_route, routes};
// For the OpenAPI document.
pub use routes::{
    __path_config, __path_create_sandbox, __path_expire, __path_purge, __path_reset, __path_slot,
    __path_state,
};
pub use routes::{config, create_sandbox, expire, purge, reset, slot, state};
pub use sandboxes::purge_periodically;
pub(crate) use slots::{Busy, DelaySlots, NoSlot};

/// The demo account's documented, public key.
pub const DEMO_API_KEY: &str = "sk_test_demo";
pub const DEMO_ACCOUNT_NAME: &str = "Demo account";
pub const FAULT_HEADER: &str = "demo-fault";
pub const MODE_HEADER: &str = "demo-mode";
/// `Demo-Network: on`: this request's charge asks the card network.
pub const NETWORK_HEADER: &str = "demo-network";
/// What the demo's own PostgreSQL sessions are called.
pub const DEMO_APPLICATION_NAME: &str = "charges-demo";
/// `Demo-Session: <tag>`: this request's database sessions are named
/// `charges-demo-<account>-<tag>` (see [`request_label`]).
pub const SESSION_HEADER: &str = "demo-session";
/// Every header whose name starts with this is a demo header.
pub const HEADER_PREFIX: &str = "demo-";
pub const CHECK_THEN_INSERT: &str = "check-then-insert";
/// The longest `delay-commit` accepted at most; a server accepts less (see
/// [`Sandbox::max_delay`]).
pub const MAX_DELAY: Duration = Duration::from_secs(15);
/// The range of `Demo-Fault: lease=<ms>`.
pub const MIN_LEASE: Duration = Duration::from_secs(1);
pub const MAX_LEASE: Duration = Duration::from_secs(60);
/// The pause between the check and the insert that makes the race reliable.
pub const CHECK_THEN_INSERT_PAUSE: Duration = Duration::from_millis(300);
/// SQLite: after a delayed transaction, how long until the next may start.
/// SQLite's busy handler retries every 100 ms at most, so every writer the
/// delay held retries within it and takes the write lock first.
pub const SQLITE_DELAY_GAP: Duration = Duration::from_millis(300);

/// The demo's sandboxes and the walls around them, shared by every worker.
pub struct Sandbox {
    /// The shared `sk_test_demo` account (the loopback curl examples'), a
    /// sandbox that never expires; none on a server hosted for others.
    pub shared_account: Option<i64>,
    /// Hosted for others (`--public`): sandboxes only.
    pub public: bool,
    /// The visitors' sandboxes.
    pub sandboxes: sandboxes::Sandboxes,
    /// The longest `delay-commit` this server accepts.
    pub max_delay: Duration,
    allow_crash: bool,
    delayed: Arc<DelaySlots>,
    /// The demo's requests on `/charges` in flight: half the pool (each
    /// sandbox's also within its own share, see [`sandboxes::Sandboxes`]).
    in_flight: Semaphore,
    in_flight_limit: usize,
    wait: Duration,
    /// What the demo account asked of the card network: its view of the
    /// network's ledger shows these and nothing of other accounts'.
    pub(crate) ledger: Arc<Mutex<Ledger>>,
    /// The demo's own connections (half of POOL_SIZE): every `/demo/*`
    /// route and every request of the demo account runs on them, so that
    /// nothing the demo holds or waits for can take a connection from
    /// another account.
    pub(crate) pool: DbPool,
    /// The card network the demo's requests reach: the server's (every
    /// charge asks it: `network_by_default`), or the demo's own (only the
    /// requests that ask, with `Demo-Network: on` or a network fault).
    pub(crate) network: Option<Arc<NetworkClient>>,
    pub(crate) network_by_default: bool,
    /// Lesson 3's check-then-insert look-ups, each waiting for the other's.
    pub(crate) lookups: race::Lookups,
    /// Who the demo's state says its requests are: the demo account, whose
    /// rate limit the server's authenticator charged once already (in
    /// `faults`), so this one has none.
    accounts: Arc<Authenticator>,
}

impl Sandbox {
    /// Creates the demo's own tables and seeds the demo account (if they
    /// are not there yet), and sizes the walls from the pool. The card
    /// network: the server's, which every charge asks (`server`), or, on a
    /// server without one, the demo's `own`, which only the demo's requests
    /// that ask for it reach (`Demo-Network: on`).
    pub fn open(
        pool: &DbPool,
        settings: &Settings,
        server: Option<Arc<NetworkClient>>,
        own_network: Option<Arc<NetworkClient>>,
    ) -> Result<Sandbox, String> {
        let mut checkout = pool.checkout().map_err(|e| e.to_string())?;
        queries::create_tables(checkout.store())
            .map_err(|e| format!("cannot create the demo's tables: {e}"))?;
        let shared_account = shared_account(checkout.store(), settings.demo_public)
            .map_err(|e| format!("cannot seed the demo account: {e}"))?;
        let half_pool = (settings.pool_size / 2).max(1);
        // SQLite's write lock is global: a delayed transaction holds every
        // account's writes, and a second one would only queue behind the
        // first and hold them again. One at a time there, and a gap after
        // each (and after each refused), so that the writers it held take
        // the lock before the next.
        let (ceiling, gap) = match pool.backend() {
            Backend::Postgres => (half_pool, Duration::ZERO),
            Backend::Sqlite => (1, SQLITE_DELAY_GAP),
        };
        let asked = asked_delayed(settings, half_pool);
        let max_delayed = asked.min(ceiling);
        // A held transaction ends well inside the request deadline. On
        // SQLite every writer waits for it, up to the busy timeout
        // (DB_LOCK_TIMEOUT): it ends a second before that too, so that no
        // other account's write is refused for it.
        let mut max_delay = MAX_DELAY.min(
            settings
                .request_timeout
                .saturating_sub(Duration::from_secs(2)),
        );
        if pool.backend() == Backend::Sqlite {
            max_delay = max_delay.min(
                settings
                    .db_lock_timeout
                    .saturating_sub(Duration::from_secs(1)),
            );
        }
        // SQLite's cap of 1 is by design (and documented), not a setting
        // gone wrong: only a value beyond half the pool is worth a warning.
        if asked > half_pool {
            tracing::warn!(
                requested = asked,
                allowed = max_delayed,
                "DEMO_MAX_DELAYED is capped at half of POOL_SIZE (and at 1 on SQLite)"
            );
        }
        let connections = own_connections(pool, settings, half_pool)?;
        let network_by_default = server.is_some();
        let sandbox = Sandbox {
            accounts: Arc::new(Authenticator::new(
                settings.account_cache_ttl,
                true,
                settings.request_timeout,
                0,
            )),
            ledger: Arc::default(),
            pool: connections,
            network: server.or(own_network),
            network_by_default,
            lookups: race::Lookups::default(),
            shared_account,
            public: settings.demo_public,
            sandboxes: sandboxes::Sandboxes::new(settings, half_pool),
            max_delay,
            allow_crash: settings.demo_allow_crash,
            delayed: Arc::new(DelaySlots::new(max_delayed, gap)),
            in_flight: Semaphore::new(half_pool as usize),
            in_flight_limit: half_pool as usize,
            wait: settings.pool_timeout,
        };
        // Each authorization answered under a key the demo account's
        // requests used, recovery's included (see [`Ledger`]).
        if let Some(network) = &sandbox.network {
            network.watch(sandbox.watcher());
        }
        Ok(sandbox)
    }

    /// The demo's own card network, if the server has none.
    pub fn own_network(&self) -> Option<&Arc<NetworkClient>> {
        self.network.as_ref().filter(|_| !self.network_by_default)
    }

    fn watcher(&self) -> Watcher {
        let ledger = self.ledger.clone();
        Box::new(move |key, id| {
            let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(&account) = ledger.keys.get(key) {
                ledger.ids.insert((account, id), ());
            }
        })
    }

    /// The demo's client of `network` for one request of `account`'s: it
    /// records each key it asks under in the [`Ledger`], as that sandbox's,
    /// and with `fresh_key` (`Demo-Fault: network-fresh-key`) asks under a
    /// new one each time instead of the one derived from the client's.
    fn network_client(
        &self,
        network: &NetworkClient,
        account: i64,
        fresh_key: bool,
    ) -> NetworkClient {
        let ledger = self.ledger.clone();
        let client = network.rekeyed(Box::new(move |derived| {
            let key = if fresh_key {
                format!("fresh-{}", uuid::Uuid::new_v4())
            } else {
                derived.to_owned()
            };
            let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            ledger.keys.insert(key.clone(), account);
            key
        }));
        client.watch(self.watcher());
        client
    }
}

/// The held transactions asked for: `DEMO_MAX_DELAYED`, or unset, sized
/// from the demo's half of the pool when hosted for others (else 2).
fn asked_delayed(settings: &Settings, half_pool: u32) -> u32 {
    settings
        .demo_max_delayed
        .unwrap_or(if settings.demo_public {
            crate::config::demo_max_delayed_public(half_pool)
        } else {
            crate::config::DEFAULT_DEMO_MAX_DELAYED
        })
}

/// The card network's keys the sandboxes' requests used (each with its
/// sandbox), and the authorizations answered under them: the network has
/// one merchant (this API) for every account, so this is how a sandbox
/// tells its own authorizations apart, lost answers and the recovery
/// task's included (recovery asks under the key the request used). Kept in
/// memory, the newest [`LEDGER_LIMIT`] of each; after a restart a
/// sandbox's charges still name theirs. A sandbox's entries go with it.
#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) keys: Bounded<String, i64>,
    pub(crate) ids: Bounded<(i64, uuid::Uuid), ()>,
}

impl Ledger {
    /// Forgets everything of `account`'s (its sandbox was deleted).
    pub(crate) fn forget(&mut self, account: i64) {
        self.keys.retain(|_, a| *a != account);
        self.ids.retain(|(a, _), ()| *a != account);
    }
}

pub(crate) const LEDGER_LIMIT: usize = 4096;

/// A map that forgets its oldest entry past [`LEDGER_LIMIT`].
pub(crate) struct Bounded<K, V> {
    map: std::collections::HashMap<K, V>,
    order: std::collections::VecDeque<K>,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Bounded {
            map: Default::default(),
            order: Default::default(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone, V> Bounded<K, V> {
    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            if self.order.len() > LEDGER_LIMIT
                && let Some(old) = self.order.pop_front()
            {
                self.map.remove(&old);
            }
        }
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.map.get(key)
    }

    pub(crate) fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.map.retain(|k, v| keep(k, v));
        let map = &self.map;
        self.order.retain(|k| map.contains_key(k));
    }
}

/// The demo's own connections, `size` of them, besides the server's pool;
/// on PostgreSQL named, so that the demo's view of the locks its requests
/// wait on (`queries::lock_waits`) finds its own sessions only.
fn own_connections(pool: &DbPool, settings: &Settings, size: u32) -> Result<DbPool, String> {
    let mut own = settings.pool();
    own.size = size;
    if pool.backend() == Backend::Postgres {
        own.url = with_application_name(&own.url);
    }
    pool.sibling(&own)
        .map_err(|e| format!("cannot open the demo's connections: {e}"))
}

/// What a sandbox's sessions are named while its work holds them: the
/// demo's view of lock waits (`queries::lock_waits`) shows a sandbox only
/// its own.
pub(crate) fn session_label(account: i64) -> Arc<str> {
    format!("{DEMO_APPLICATION_NAME}-{account}").into()
}

/// The name of one request's sessions: its sandbox's label, and its
/// `Demo-Session` tag if it sent one (`charges-demo-<account>-B`), so that
/// `pg_stat_activity` tells lesson 4's A from B; the demo's view of lock
/// waits still finds them as the sandbox's (`queries::lock_waits`).
pub(crate) fn request_label(account: i64, tag: Option<&str>) -> Arc<str> {
    match tag {
        Some(tag) => format!("{DEMO_APPLICATION_NAME}-{account}-{tag}").into(),
        None => session_label(account),
    }
}

/// `Demo-Session`'s value, if sent: 1 to 8 ASCII letters or digits (it
/// becomes part of a PostgreSQL `application_name`).
pub(crate) fn session_tag(
    headers: &actix_web::http::header::HeaderMap,
) -> Result<Option<String>, String> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    let tag = value.to_str().unwrap_or("");
    if (1..=8).contains(&tag.len()) && tag.bytes().all(|b| b.is_ascii_alphanumeric()) {
        Ok(Some(tag.to_owned()))
    } else {
        Err("Demo-Session is 1 to 8 ASCII letters or digits (the request's sessions are named for it)".to_owned())
    }
}

/// `url` (PostgreSQL's) naming its sessions `charges-demo`.
fn with_application_name(url: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}application_name={DEMO_APPLICATION_NAME}")
}

/// Hosted for others: PostgreSQL only (SQLite's write lock is global: one
/// visitor's held transaction would hold every other's writes), and no
/// fault that kills the process.
/// Checked before the database is opened, so that a refused start leaves
/// no SQLite file behind.
pub fn check_public(settings: &Settings) -> Result<(), String> {
    if !settings.demo_enabled() || !settings.demo_public {
        return Ok(());
    }
    let target = crate::store::database::Target::parse(&settings.database_url);
    if matches!(target, Ok(crate::store::database::Target::Sqlite(_))) {
        return Err("the demo hosted for others (--public, DEMO_PUBLIC) needs PostgreSQL: SQLite's write lock is the whole database's, so one visitor's held transaction (Demo-Fault: delay-commit) would hold every other visitor's writes. Set DATABASE_URL to a PostgreSQL database".to_owned());
    }
    if settings.demo_allow_crash {
        return Err("the demo hosted for others (--public, DEMO_PUBLIC) refuses DEMO_ALLOW_CRASH: Demo-Fault: crash-after-key would let any visitor kill the server".to_owned());
    }
    Ok(())
}

/// The shared demo account (`sk_test_demo`), seeded and registered as a
/// sandbox that never expires; on a server hosted for others, deleted with
/// its rows if an earlier run made it (its key is public), and none.
fn shared_account(store: &mut dyn Store, public: bool) -> Result<Option<i64>, String> {
    let found = store
        .find_account(&accounts::hash_api_key(DEMO_API_KEY), true)
        .map_err(|e| e.to_string())?;
    if public {
        if let Some(id) = found {
            queries::sandboxes::delete_account(store, id).map_err(|e| e.to_string())?;
        }
        return Ok(None);
    }
    let id = seed(store).map_err(|e| e.to_string())?;
    queries::sandboxes::register(store, id, sandboxes::now_ms(), true)
        .map_err(|e| e.to_string())?;
    Ok(Some(id))
}

/// The demo account, created on first start in demo mode.
fn seed(store: &mut dyn Store) -> Result<i64, accounts::AccountError> {
    let digest = accounts::hash_api_key(DEMO_API_KEY);
    if let Some(id) = store.find_account(&digest, true)? {
        return Ok(id);
    }
    match accounts::insert_account(store, DEMO_ACCOUNT_NAME, DEMO_API_KEY, true) {
        // Another instance seeded it in between (or a live account already
        // has the demo's name: then the lookup finds nothing and says so).
        Err(taken @ accounts::AccountError::NameTaken(_)) => {
            store.find_account(&digest, true)?.ok_or(taken)
        }
        inserted => inserted,
    }
}
