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
//! - Connections, all together: past seven eighths of `MAX_CONNECTIONS`,
//!   each new connection closes the one idle the longest (no request in
//!   flight; one that never sent a request is idle from its accept), so
//!   that connections held idle by a few addresses cannot lock out a client
//!   that is using its own.
//!
//! - Time, per request: what is left of its deadline for the database
//!   ([`deadline_left`]).
//!
//! The client's address is the connection's peer, or, when the peer is one
//! of `TRUSTED_PROXIES`, the last address its `X-Forwarded-For` names.

use std::any::Any;
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::dev::Extensions;
use actix_web::{HttpMessage, HttpRequest};
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

/// Open connections: per client address, and each one's state, so that
/// idle ones can be closed when the server nears MAX_CONNECTIONS.
pub struct Peers {
    inner: Mutex<Open>,
    cap: usize,
    exempt: Vec<IpAddr>,
    /// Past this many open connections, each new one closes the connection
    /// idle the longest: actix stops accepting at MAX_CONNECTIONS, so the
    /// room is made before that.
    soft_limit: usize,
    /// Whether its refusals count in the API's metrics (not the card
    /// network's, beside it).
    metered: bool,
}

#[derive(Default)]
struct Open {
    per_ip: HashMap<IpAddr, usize>,
    connections: HashMap<u64, Tracked>,
    next_id: u64,
}

/// One connection as the registry holds it: a duplicate of its descriptor
/// (so that shutting it down can never reach a descriptor reused by
/// another connection) and its state.
struct Tracked {
    fd: std::os::fd::OwnedFd,
    ip: IpAddr,
    state: Arc<ConnectionState>,
}

/// Whether a connection has a request in flight, and since when it has not.
#[derive(Default)]
pub struct ConnectionState {
    busy: std::sync::atomic::AtomicUsize,
    idle_since: Mutex<Option<Instant>>,
    closing: std::sync::atomic::AtomicBool,
}

impl ConnectionState {
    /// Marks a request in flight until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::SeqCst);
        Busy(self.clone())
    }

    /// How long it has been idle, if it is.
    fn idle_for(&self, now: Instant) -> Option<Duration> {
        if self.busy.load(Ordering::SeqCst) > 0 || self.closing.load(Ordering::SeqCst) {
            return None;
        }
        let since = *self.idle_since.lock().unwrap_or_else(|e| e.into_inner());
        since.map(|at| now.saturating_duration_since(at))
    }
}

/// A request in flight on a connection.
pub struct Busy(Arc<ConnectionState>);

impl Drop for Busy {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One open connection of a peer, in the connection's data; gives its place
/// back when the connection ends.
pub struct PeerConnection {
    peers: Arc<Peers>,
    ip: IpAddr,
    id: u64,
    pub opened: Instant,
    pub state: Arc<ConnectionState>,
}

impl Drop for PeerConnection {
    fn drop(&mut self) {
        let mut open = self.peers.lock();
        // Its duplicate descriptor is closed with it.
        open.connections.remove(&self.id);
        if let Some(n) = open.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&self.ip);
            }
        }
    }
}

/// Shuts a socket down (both ways): its owner, the runtime, then sees the
/// connection end and drops it.
fn shut(fd: std::os::fd::RawFd) {
    unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
}

impl Peers {
    /// `cap` connections per address (0: no cap); `exempt`: the trusted
    /// proxies, which carry many clients' connections; `max_connections`:
    /// the server's MAX_CONNECTIONS.
    pub fn new(cap: usize, exempt: Vec<IpAddr>, max_connections: usize) -> Arc<Peers> {
        Arc::new(Peers {
            inner: Mutex::default(),
            cap,
            exempt,
            soft_limit: max_connections - (max_connections / 8).max(1).min(max_connections),
            metered: true,
        })
    }

    /// As [`new`](Self::new), for a service beside the API (the in-process
    /// card network): its refusals are not counted in the API's metrics.
    pub fn unmetered(cap: usize, exempt: Vec<IpAddr>, max_connections: usize) -> Arc<Peers> {
        let mut peers = Peers::new(cap, exempt, max_connections);
        Arc::get_mut(&mut peers).expect("not shared yet").metered = false;
        peers
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `HttpServer::on_connect`: counts the connection for its peer, or,
    /// past the cap, shuts it at once (the client sees it closed before it
    /// sends anything; no slot of MAX_CONNECTIONS is held waiting for it).
    /// Near MAX_CONNECTIONS, closes an idle connection of the address that
    /// holds the most (see [`close_longest_idle`]).
    pub fn on_connect(self: &Arc<Peers>, connection: &dyn Any, data: &mut Extensions) {
        use std::os::fd::{AsFd, AsRawFd};
        let Some(stream) = connection.downcast_ref::<actix_web::rt::net::TcpStream>() else {
            return;
        };
        let Ok(peer) = stream.peer_addr() else {
            return;
        };
        let ip = peer.ip();
        let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
            return;
        };
        let state = Arc::new(ConnectionState::default());
        let mut open = self.lock();
        let n = open.per_ip.get(&ip).copied().unwrap_or(0);
        if self.cap > 0 && n >= self.cap && !self.exempt.contains(&ip) {
            drop(open);
            if self.metered {
                crate::metrics::METRICS.connections_refused.inc();
            }
            // Shut, not closed: the descriptor stays the runtime's.
            shut(stream.as_raw_fd());
            return;
        }
        *open.per_ip.entry(ip).or_default() += 1;
        let id = open.next_id;
        open.next_id += 1;
        // Idle from the start: a connection that sends nothing holds a slot.
        *state.idle_since.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if open.connections.len() >= self.soft_limit {
            close_longest_idle(&open, self.metered);
        }
        open.connections.insert(
            id,
            Tracked {
                fd,
                ip,
                state: state.clone(),
            },
        );
        drop(open);
        data.insert(PeerConnection {
            peers: self.clone(),
            ip,
            id,
            opened: Instant::now(),
            state,
        });
    }

    /// Open connections of `ip` now.
    pub fn open(&self, ip: IpAddr) -> usize {
        self.lock().per_ip.get(&ip).copied().unwrap_or(0)
    }
}

/// Shuts down an idle connection (none busy is touched): of the address
/// holding the most connections, the one idle the longest. So a hoard from
/// a few addresses churns among its own connections, and a client with one
/// keep-alive connection is not the one closed because it happened to be
/// idle longest while the hoard reconnected.
fn close_longest_idle(open: &Open, metered: bool) {
    use std::os::fd::AsRawFd;
    let now = Instant::now();
    let held = |ip: &IpAddr| open.per_ip.get(ip).copied().unwrap_or(0);
    let chosen = open
        .connections
        .values()
        .filter_map(|t| t.state.idle_for(now).map(|idle| ((held(&t.ip), idle), t)))
        .max_by_key(|(rank, _)| *rank);
    if let Some((_, tracked)) = chosen {
        tracked.state.closing.store(true, Ordering::SeqCst);
        if metered {
            crate::metrics::METRICS.idle_connections_closed.inc();
        }
        shut(tracked.fd.as_raw_fd());
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
    let client = client_ip(req.request(), &limits.trusted_proxies);
    if let Some(ip) = client {
        // The log names the client, not a trusted proxy.
        use actix_web::HttpMessage;
        req.extensions_mut()
            .insert(crate::telemetry::ClientAddress(ip));
    }
    if let Some(limit) = &limits.per_client
        && let Some(ip) = client
        && let Err(wait) = limit.check(&ip)
    {
        crate::metrics::METRICS
            .rate_limited
            .with_label_values(&["client"])
            .inc();
        let error = crate::http::problem::ApiError::RateLimited {
            retry_after_secs: retry_after_secs(wait),
            scope: "client address",
        };
        return Ok(req.error_response(error).map_into_boxed_body());
    }
    let connection = req.conn_data::<PeerConnection>();
    let old = connection.is_some_and(|c| c.opened.elapsed() > limits.keep_alive_lifetime);
    // Busy until the response is made: not a connection to close for room.
    let _busy = connection.map(|c| c.state.busy());
    let mut response = next.call(req).await?.map_into_boxed_body();
    if old {
        response
            .response_mut()
            .head_mut()
            .set_connection_type(actix_web::http::ConnectionType::Close);
    }
    Ok(response)
}

/// A request's body, shared between its handler (which reads it) and the
/// response (which keeps it until it is sent).
type SharedBody = std::rc::Rc<std::cell::RefCell<actix_web::dev::Payload>>;

struct SharedStream(SharedBody);

impl futures_util::Stream for SharedStream {
    type Item = Result<actix_web::web::Bytes, actix_web::error::PayloadError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        std::pin::Pin::new(&mut *self.0.borrow_mut()).poll_next(cx)
    }
}

/// A response body that holds its request's body (if it has one) until it
/// has been sent.
pub struct Holding {
    body: actix_web::body::BoxBody,
    _request_body: Option<SharedBody>,
}

impl actix_web::body::MessageBody for Holding {
    type Error = Box<dyn std::error::Error>;

    fn size(&self) -> actix_web::body::BodySize {
        self.body.size()
    }

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<actix_web::web::Bytes, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_next(cx)
    }
}

/// Middleware on every route: a response sent before its request's body
/// was read (a 401, 408, 413, 404 …) closes the connection, within the
/// HTTP layer's disconnect timeout (1 s), instead of reading the rest.
///
/// actix-http drains a chunked body whose reader is gone for as long as
/// the client sends it (a drip kept a connection open 90 s+ after a 401; a
/// fast stream after a 413 was read without end), and closes only when the
/// reader is still there when the response goes out. So the body is kept
/// here, and by the response, until the response is sent.
pub async fn close_unread(
    mut req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<Holding>, actix_web::Error> {
    let payload = req.parts_mut().1.take();
    let shared = match payload {
        actix_web::dev::Payload::None => None,
        payload => {
            let shared: SharedBody = std::rc::Rc::new(std::cell::RefCell::new(payload));
            req.set_payload(actix_web::dev::Payload::Stream {
                payload: Box::pin(SharedStream(shared.clone())),
            });
            Some(shared)
        }
    };
    let response = next.call(req).await?;
    // Not a `BoxBody` around it: that drops a body of no size at once.
    Ok(response.map_body(|_, body| Holding {
        body: body.boxed(),
        _request_body: shared,
    }))
}

/// The request deadline: how long one request may wait for the database in
/// all (`REQUEST_TIMEOUT`), counted from its first database access, so that
/// a request that reads its account and then writes waits no longer than
/// one that only writes. Past it the request is answered 503 at once, even
/// if the database never answers (`store::DbPool::run`).
#[derive(Debug, Clone, Copy)]
struct Deadline(Instant);

/// What is left of `req`'s deadline, which starts now if it has not yet.
pub fn deadline_left(req: &HttpRequest, timeout: Duration) -> Duration {
    let mut extensions = req.extensions_mut();
    let deadline = match extensions.get::<Deadline>() {
        Some(deadline) => *deadline,
        None => {
            let deadline = Deadline(Instant::now() + timeout);
            extensions.insert(deadline);
            deadline
        }
    };
    deadline.0.saturating_duration_since(Instant::now())
}
