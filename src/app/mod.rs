//! The HTTP application, the top of the layers: `Application::build`
//! refuses a lease too short for the card network's calls (before anything
//! starts), binds the listener (so tests can ask for port 0 and read the real
//! port), opens the store, opens the demo sandbox in demo mode, and mounts every
//! route of `http::ROUTES`.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use actix_files::Files;
use actix_web::dev::Server;
use actix_web::middleware::{Condition, from_fn};
use actix_web::{App, HttpServer, web};

use crate::config::Settings;
use crate::http::accounts::Authenticator;
use crate::http::hosts::{self, AllowedHosts};
use crate::http::limits::{self, ClientLimits, KeyedLimit, Peers};
use crate::http::ops;
use crate::http::problem::ApiError;
use crate::http::state::AppState;
use crate::http::{get, not_found};
use crate::network_client::NetworkClient;
use crate::store::{DbPool, SetupError};
use crate::webhooks::sender::Sender;
use crate::{demo, telemetry};

mod networks;
pub mod recovery;
pub mod routes;
use networks::{Networks, Recovery};

#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error(transparent)]
    Database(#[from] SetupError),
    #[error("{0}")]
    Demo(String),
    /// Settings that contradict each other (checked before anything starts).
    #[error("{0}")]
    Settings(String),
    #[error("cannot start the card network: {0}")]
    Network(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
}

pub struct Application {
    port: u16,
    demo: bool,
    host: String,
    server: Server,
    pool: DbPool,
    purge_interval: Duration,
    purge_batch: i64,
    request_timeout: Duration,
    state: web::Data<AppState>,
    client_limits: Arc<ClientLimits>,
    /// The in-process card network's server, if this process runs one.
    network_server: Option<Server>,
    /// `/metrics` on a listener of its own (METRICS_BIND), if any.
    metrics_server: Option<Server>,
    metrics_addr: Option<std::net::SocketAddr>,
    recovery_interval: Duration,
    recovery: Arc<Recovery>,
    /// Demo mode's sandboxes, whose expired ones a task of their own purges.
    sandbox: Option<web::Data<demo::Sandbox>>,
}

impl Application {
    pub fn build(mut settings: Settings) -> Result<Application, StartupError> {
        settings.check_lease().map_err(StartupError::Settings)?;
        settings.check_web_dir().map_err(StartupError::Settings)?;
        settings
            .check_network_key()
            .map_err(StartupError::Settings)?;
        demo::check_public(&settings).map_err(StartupError::Demo)?;
        // The demo's sender retries within seconds (lesson 8).
        demo::lesson8::shorten_retries(&mut settings);
        let Listeners {
            api,
            local,
            host,
            metrics,
            addr,
        } = Listeners::bind(&settings)?;
        let bind_error = |source| StartupError::Bind {
            addr: addr.clone(),
            source,
        };
        let demo = settings.demo_enabled();
        if demo && !settings.demo_public && !local.ip().is_loopback() {
            tracing::warn!("{}", crate::config::DEMO_EXPOSED_WARNING);
        }
        if demo && settings.demo_public {
            // The hosted demo sends only to the receiver it hosts itself.
            settings.webhooks.also_allow = own_addresses(local);
        }
        let pool = DbPool::open(&settings.pool())?;
        let Networks {
            network,
            server: network_server,
            sandbox,
            recovery,
        } = Networks::start(&mut settings, &pool, demo)?;
        let client_limits = Arc::new(ClientLimits {
            per_client: KeyedLimit::new(settings.rate_limit_per_client),
            trusted_proxies: settings.trusted_proxies.clone(),
            keep_alive_lifetime: settings.keep_alive_lifetime,
        });
        let state = web::Data::new(app_state(pool.clone(), network, settings, demo));
        let (metrics_server, metrics_addr) = match metrics {
            Some(listener) => {
                let addr = listener.local_addr().map_err(bind_error)?;
                let allowed = AllowedHosts::new(&state.settings.allowed_hosts);
                let server = metrics_server(listener, pool.clone(), allowed).map_err(bind_error)?;
                (Some(server), Some(addr))
            }
            None => (None, None),
        };
        let server = api_server(api, state.clone(), client_limits.clone(), sandbox.clone())
            .map_err(bind_error)?;
        let settings = &state.settings;
        Ok(Application {
            port: local.port(),
            demo,
            host,
            server,
            pool,
            purge_interval: settings.purge_interval,
            purge_batch: settings.purge_batch,
            request_timeout: settings.request_timeout,
            client_limits,
            network_server,
            metrics_server,
            metrics_addr,
            recovery_interval: settings.recovery_interval,
            recovery: Arc::new(recovery),
            state,
            sandbox,
        })
    }

    /// `http://HOST:PORT` where `/metrics` is served, unless METRICS_BIND is `off`.
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_addr.map(|addr| match addr.ip() {
            ip if ip.is_unspecified() => format!("http://localhost:{}", addr.port()),
            _ => format!("http://{addr}"),
        })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// Whether demo mode is on.
    pub fn demo(&self) -> bool {
        self.demo
    }

    pub fn pool(&self) -> &DbPool {
        &self.pool
    }

    /// The card network charges are authorized at, if any.
    pub fn network_url(&self) -> Option<&str> {
        self.state.network.as_ref().map(|n| n.base_url())
    }

    /// Serves until the server stops (SIGINT/SIGTERM: it stops accepting,
    /// lets in-flight requests finish for up to 10 s, then returns).
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let purger = (!self.purge_interval.is_zero()).then(|| {
            tokio::spawn(purge_periodically(
                self.pool.clone(),
                self.state.settings.key_policy(),
                self.purge_interval,
                self.purge_batch,
                self.purge_interval.max(self.request_timeout),
            ))
        });
        // The rate limits' buckets of clients and accounts gone quiet.
        let (state, limits) = (self.state.clone(), self.client_limits.clone());
        let forgetter = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(telemetry::REFUSAL_LOG_INTERVAL);
            loop {
                ticks.tick().await;
                state.accounts.forget_idle();
                crate::telemetry::flush_refusals();
                if let Some(limit) = &limits.per_client {
                    limit.forget_idle();
                }
            }
        });
        let sandboxes = self
            .sandbox
            .map(|s| tokio::spawn(demo::purge_periodically(s)));
        let network = self.network_server.map(tokio::spawn);
        let metrics = self.metrics_server.map(tokio::spawn);
        // Keys left in progress by a dead worker, driven to completion.
        let recoverer = (!self.recovery_interval.is_zero()).then(|| {
            tokio::spawn(recover_periodically(
                self.state.clone(),
                self.recovery.clone(),
                self.recovery_interval,
            ))
        });
        // Due webhook deliveries, sent (WEBHOOK_POLL_INTERVAL=0s: not here).
        let settings = &self.state.settings;
        let sender = (!settings.webhooks.poll_interval.is_zero()).then(|| {
            let policy = settings.webhook_target_policy();
            tokio::spawn(Sender::new(self.pool.clone(), &settings.webhooks, policy).run())
        });
        let result = self.server.await;
        if let Some(sender) = sender {
            sender.abort();
        }
        forgetter.abort();
        if let Some(sandboxes) = sandboxes {
            sandboxes.abort();
        }
        if let Some(recoverer) = recoverer {
            recoverer.abort();
        }
        if let Some(network) = network {
            network.abort();
        }
        if let Some(metrics) = metrics {
            metrics.abort();
        }
        if let Some(purger) = purger {
            purger.abort();
        }
        result
    }
}

/// The listeners, bound before anything else starts: a test asks for port
/// 0 and reads the real one.
struct Listeners {
    api: TcpListener,
    local: std::net::SocketAddr,
    /// What the URL names: the address bound, or `localhost` for any.
    host: String,
    /// `/metrics`'s own (METRICS_BIND), unless it is `off`.
    metrics: Option<TcpListener>,
    /// BIND, as the operator wrote it (for an error).
    addr: String,
}

impl Listeners {
    fn bind(settings: &Settings) -> Result<Listeners, StartupError> {
        let addr = settings.bind.clone();
        let bind_error = |source| StartupError::Bind {
            addr: format!("{addr} (BIND: set it to a free address, e.g. BIND=127.0.0.1:8081)"),
            source,
        };
        let api = TcpListener::bind(&settings.bind).map_err(bind_error)?;
        let local = api.local_addr().map_err(bind_error)?;
        let host = if local.ip().is_unspecified() {
            "localhost".to_owned()
        } else {
            local.ip().to_string()
        };
        let metrics = match settings.metrics_bind.as_str() {
            crate::config::METRICS_OFF => None,
            addr => match TcpListener::bind(addr) {
                Ok(listener) => Some(listener),
                // The teaching page needs no metrics: a port another
                // program holds must not stop a learner's first run.
                Err(e) if settings.demo_enabled() => {
                    tracing::warn!(metrics_bind = addr, error = %e, "cannot serve /metrics on METRICS_BIND; the demo runs without metrics (set METRICS_BIND to a free address, or `off`)");
                    None
                }
                Err(source) => {
                    return Err(StartupError::Bind {
                        addr: format!("{addr} (METRICS_BIND; `off` for no metrics)"),
                        source,
                    });
                }
            },
        };
        Ok(Listeners {
            api,
            local,
            host,
            metrics,
            addr,
        })
    }
}

/// What every handler shares (the demo's requests get a copy of their own:
/// see `demo::faults`).
fn app_state(
    pool: DbPool,
    network: Option<Arc<NetworkClient>>,
    settings: Settings,
    demo: bool,
) -> AppState {
    let accounts = Arc::new(Authenticator::new(
        settings.account_cache_ttl,
        demo,
        settings.request_timeout,
        settings.rate_limit_per_account,
    ));
    AppState::new(pool, accounts, demo, network, settings)
}

/// The API's server on `listener`: the client's limits, the log, the
/// routes, and in demo mode (`sandbox`) the demo's parts.
fn api_server(
    listener: TcpListener,
    state: web::Data<AppState>,
    limits: Arc<ClientLimits>,
    sandbox: Option<web::Data<demo::Sandbox>>,
) -> std::io::Result<Server> {
    let settings = state.settings.clone();
    let workers = settings
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    // actix counts connections per worker.
    let max_connections = settings.max_connections.div_ceil(workers).max(1);
    let peers = Peers::new(
        settings.max_connections_per_peer,
        settings.trusted_proxies.clone(),
        settings.max_connections,
    );
    let demo = sandbox.is_some();
    let allowed = Arc::new(AllowedHosts::new(&settings.allowed_hosts));
    let server = HttpServer::new(move || {
        let (state, limits, allowed) = (state.clone(), limits.clone(), allowed.clone());
        App::new()
            // Inside the log: a request the gate refuses is logged too.
            .wrap(Condition::new(demo, from_fn(demo::gate)))
            // The client's rate limit and connection lifetime, before
            // anything else that might cost something.
            .wrap(from_fn(move |req, next| {
                limits::per_client(limits.clone(), req, next)
            }))
            // Demo mode is for this machine: only its names (DNS rebinding).
            .wrap(Condition::new(
                demo,
                from_fn(move |req, next| hosts::check(allowed.clone(), req, next)),
            ))
            .wrap(from_fn(telemetry::observe))
            // Outermost: an answer sent before the body was read closes.
            .wrap(from_fn(limits::close_unread))
            .app_data(state)
            .app_data(
                web::QueryConfig::default().error_handler(|e, _| {
                    ApiError::invalid(format!("Bad query string: {e}.")).into()
                }),
            )
            .app_data(web::PathConfig::default().error_handler(|_, _| ApiError::NotFound.into()))
            .configure(|cfg| routes::routes(cfg, demo))
            .configure(|cfg| {
                if let Some(sandbox) = &sandbox {
                    demo_routes(cfg, sandbox.clone(), &settings.web_dir);
                }
            })
            .default_service(web::to(not_found))
    })
    .on_connect(move |connection, data| peers.on_connect(connection, data))
    .workers(workers)
    .max_connections(max_connections)
    .shutdown_timeout(10)
    .listen(listener)?
    .run();
    Ok(server)
}

/// `/metrics` alone, on its own listener: whatever proxy stands in front of
/// BIND never reaches it, and only who can reach METRICS_BIND reads it.
fn metrics_server(
    listener: TcpListener,
    pool: DbPool,
    allowed: AllowedHosts,
) -> std::io::Result<Server> {
    let allowed = Arc::new(allowed);
    let server = HttpServer::new(move || {
        let allowed = allowed.clone();
        App::new()
            // Only this machine's names, whatever METRICS_BIND (DNS rebinding).
            .wrap(from_fn(move |req, next| {
                hosts::check(allowed.clone(), req, next)
            }))
            // An answer sent before the body was read closes.
            .wrap(from_fn(limits::close_unread))
            .app_data(web::Data::new(pool.clone()))
            .service(web::resource("/metrics").route(get().to(ops::metrics)))
            .default_service(web::to(not_found))
    })
    .workers(1)
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    Ok(server)
}

/// The addresses a receiver this server hosts is reached at: the one bound,
/// or for an unspecified bind the loopback ones on its port.
fn own_addresses(local: std::net::SocketAddr) -> Vec<std::net::SocketAddr> {
    if local.ip().is_unspecified() {
        let port = local.port();
        vec![
            std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
        ]
    } else {
        vec![local]
    }
}

/// Deletes expired idempotency keys every `interval`, in batches.
async fn purge_periodically(
    pool: DbPool,
    policy: idempotency::Policy,
    interval: Duration,
    batch: i64,
    deadline: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Bounded like a request (a frozen database stops one pass, not the
        // task), but a long backlog may take until the next tick.
        let policy = policy.clone();
        let purged = pool
            .run(deadline, move |store| -> Result<usize, ApiError> {
                Ok(policy.purge_expired(store, batch)?)
            })
            .await;
        match purged {
            Ok(0) => {}
            Ok(n) => tracing::info!(purged = n, "purged expired idempotency keys"),
            Err(e) => tracing::warn!(error = %e, "purge failed; will retry"),
        }
    }
}

/// Finishes keys left in progress every `interval` (see `recovery`).
async fn recover_periodically(
    state: web::Data<AppState>,
    recovery: Arc<Recovery>,
    interval: Duration,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (settings, recovery) = (state.settings.clone(), recovery.clone());
        let deadline = interval.max(settings.request_timeout);
        let done = state
            .pool
            .run_checkouts(deadline, move |checkouts| -> Result<usize, ApiError> {
                let networks = &recovery.networks;
                Ok(recovery::pass(
                    checkouts,
                    &settings,
                    networks,
                    &recovery.said,
                )?)
            })
            .await;
        if let Err(e) = done {
            tracing::warn!(error = %e, "recovery pass failed; will retry");
        }
    }
}

/// Demo mode's own: its sandbox, its routes, and last the teaching page and
/// its assets.
fn demo_routes(cfg: &mut web::ServiceConfig, sandbox: web::Data<demo::Sandbox>, web_dir: &str) {
    cfg.app_data(sandbox);
    demo::routes(cfg);
    cfg.service(
        Files::new("/", web_dir)
            .index_file("index.html")
            .default_handler(web::to(not_found)),
    );
}
