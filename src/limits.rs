//! Fair capacity: what one client or one account may take of the server.
//!
//! - Rate limits, per account (after authentication, before the idempotency
//!   protocol, so a `429` is never stored under a key) and per client address
//!   (before anything else, so a flood of made-up API keys costs no database
//!   look-up). A token bucket each (`governor`): a steady rate and bursts of
//!   twice that.
//! - Connections, per client address: at most `MAX_CONNECTIONS_PER_PEER` open
//!   at once (one more is shut at accept, before it can hold a slot of
//!   `MAX_CONNECTIONS` waiting for its request head), and a keep-alive
//!   connection older than `KEEP_ALIVE_LIFETIME` is closed after its next
//!   response, so that no client keeps its slots for ever.
//!
//! The client's address is the connection's peer, or, when the peer is one
//! of `TRUSTED_PROXIES`, the last address its `X-Forwarded-For` names.

use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::HttpRequest;
use actix_web::dev::Extensions;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// A token bucket per key.
pub struct KeyedLimit<K: std::hash::Hash + Eq + Clone>(DefaultKeyedRateLimiter<K>);

impl<K: std::hash::Hash + Eq + Clone> KeyedLimit<K> {
    /// `per_second` requests a second, bursts of twice that; `None` for 0.
    pub fn new(per_second: u32) -> Option<KeyedLimit<K>> {
        let rate = NonZeroU32::new(per_second)?;
        let burst = NonZeroU32::new(per_second.saturating_mul(2)).expect("non-zero");
        Some(KeyedLimit(RateLimiter::keyed(
            Quota::per_second(rate).allow_burst(burst),
        )))
    }

    /// `Ok` if `key` may make a request now; else how long until it may.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.0
            .check_key(key)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// Forgets keys whose buckets are full again (memory stays bounded by
    /// the clients of the last few seconds).
    pub fn forget_idle(&self) {
        self.0.retain_recent();
        self.0.shrink_to_fit();
    }
}

/// Seconds for `Retry-After`: at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    wait.as_secs_f64().ceil().max(1.0) as u64
}

/// The client's address for `req` (see the module's doc).
pub fn client_ip(req: &HttpRequest, trusted_proxies: &[IpAddr]) -> Option<IpAddr> {
    let peer = req.peer_addr()?.ip();
    if !trusted_proxies.contains(&peer) {
        return Some(peer);
    }
    let forwarded = req
        .headers()
        .get_all("x-forwarded-for")
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|part| part.trim().parse::<IpAddr>().ok())
        .last();
    Some(forwarded.unwrap_or(peer))
}

/// Open connections per client address.
pub struct Peers {
    open: Mutex<HashMap<IpAddr, usize>>,
    cap: usize,
    exempt: Vec<IpAddr>,
}

/// One open connection of a peer, in the connection's data; gives its place
/// back when the connection ends.
pub struct PeerConnection {
    peers: Arc<Peers>,
    ip: IpAddr,
    pub opened: Instant,
}

impl Drop for PeerConnection {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

impl Peers {
    /// `cap` connections per address (0: no cap); `exempt`: the trusted
    /// proxies, which carry many clients' connections.
    pub fn new(cap: usize, exempt: Vec<IpAddr>) -> Arc<Peers> {
        Arc::new(Peers {
            open: Mutex::default(),
            cap,
            exempt,
        })
    }

    /// `HttpServer::on_connect`: counts the connection for its peer, or,
    /// past the cap, shuts it at once (the client sees it closed before it
    /// sends anything; no slot of MAX_CONNECTIONS is held waiting for it).
    pub fn on_connect(self: &Arc<Peers>, connection: &dyn Any, data: &mut Extensions) {
        let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() else {
            return;
        };
        let Ok(peer) = stream.peer_addr() else {
            return;
        };
        let ip = peer.ip();
        {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            let n = open.entry(ip).or_default();
            if self.cap > 0 && *n >= self.cap && !self.exempt.contains(&ip) {
                drop(open);
                crate::metrics::METRICS.connections_refused.inc();
                use std::os::fd::AsRawFd;
                // Shut, not closed: the descriptor stays the runtime's, which
                // then sees the connection end and drops it.
                unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) };
                return;
            }
            *n += 1;
        }
        data.insert(PeerConnection {
            peers: self.clone(),
            ip,
            opened: Instant::now(),
        });
    }

    /// Open connections of `ip` now.
    pub fn open(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&ip).copied().unwrap_or(0)
    }
}

/// What the per-client middleware needs, shared by every worker.
pub struct ClientLimits {
    pub per_client: Option<KeyedLimit<IpAddr>>,
    pub trusted_proxies: Vec<IpAddr>,
    pub keep_alive_lifetime: Duration,
}

/// Middleware on every route: the client's rate limit (`429` with
/// `Retry-After`, before anything else runs), and the end of a keep-alive
/// connection past its lifetime (`Connection: close` on its response).
pub async fn per_client(
    limits: Arc<ClientLimits>,
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<actix_web::body::BoxBody>, actix_web::Error> {
    if let Some(limit) = &limits.per_client
        && let Some(ip) = client_ip(req.request(), &limits.trusted_proxies)
        && let Err(wait) = limit.check(&ip)
    {
        crate::metrics::METRICS
            .rate_limited
            .with_label_values(&["client"])
            .inc();
        let error = crate::problem::ApiError::RateLimited {
            retry_after_secs: retry_after_secs(wait),
            scope: "client address",
        };
        return Ok(req.error_response(error).map_into_boxed_body());
    }
    let old = req
        .conn_data::<PeerConnection>()
        .is_some_and(|c| c.opened.elapsed() > limits.keep_alive_lifetime);
    let mut response = next.call(req).await?.map_into_boxed_body();
    if old {
        response
            .response_mut()
            .head_mut()
            .set_connection_type(actix_web::http::ConnectionType::Close);
    }
    Ok(response)
}
