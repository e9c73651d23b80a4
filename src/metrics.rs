//! Prometheus metrics (served at `/metrics` by `ops`) in the text format: HTTP traffic,
//! the idempotency outcomes an operator watches, the purge and the pool.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

pub struct Metrics {
    registry: Registry,
    pub http_requests: IntCounterVec,
    pub http_duration: HistogramVec,
    pub idempotency_outcomes: IntCounterVec,
    pub key_conflicts: Histogram,
    pub purged_keys: IntCounter,
    pub pool_waits: Histogram,
    pub pool_timeouts: IntCounter,
    pub deadlines_exceeded: IntCounter,
    pub rate_limited: IntCounterVec,
    pub connections_refused: IntCounter,
    pub idle_connections_closed: IntCounter,
    pub requests_refused: IntCounterVec,
    pub keys_recovered: IntCounterVec,
    pool_connections: IntGaugeVec,
}

const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0,
];

pub static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let registry = Registry::new();
    let http_requests = IntCounterVec::new(
        Opts::new(
            "http_requests_total",
            "HTTP requests by route pattern, method and status.",
        ),
        &["route", "method", "status"],
    )
    .unwrap();
    let http_duration = HistogramVec::new(
        HistogramOpts::new("http_request_duration_seconds", "HTTP request latency.")
            .buckets(LATENCY_BUCKETS.to_vec()),
        &["route", "method"],
    )
    .unwrap();
    let idempotency_outcomes = IntCounterVec::new(
        Opts::new(
            "idempotency_requests_total",
            "Keyed operations (POST /charges, POST /charges/{id}/refunds) by outcome: executed, replayed, mismatch (422), in_flight (409), no_key.",
        ),
        &["outcome", "mode"],
    )
    .unwrap();
    let key_conflicts = Histogram::with_opts(
        HistogramOpts::new(
            "idempotency_key_conflict_seconds",
            "Time the INSERT registering a key took when the key had a row already: a round trip when that row was committed, the first request's whole transaction when it was not (a concurrent duplicate waiting on the unique index).",
        )
        .buckets(LATENCY_BUCKETS.to_vec()),
    )
    .unwrap();
    let deadlines_exceeded = IntCounter::new(
        "db_deadline_exceeded_total",
        "Requests answered 503 because the database did not answer within REQUEST_TIMEOUT (their connection is dropped, not reused).",
    )
    .unwrap();
    let rate_limited = IntCounterVec::new(
        Opts::new(
            "rate_limited_total",
            "Requests answered 429, by whose limit: client (address) or account.",
        ),
        &["scope"],
    )
    .unwrap();
    let connections_refused = IntCounter::new(
        "connections_refused_total",
        "Connections shut at accept because their client address had MAX_CONNECTIONS_PER_PEER open.",
    )
    .unwrap();
    let idle_connections_closed = IntCounter::new(
        "idle_connections_closed_total",
        "Idle connections closed to make room because the server neared MAX_CONNECTIONS.",
    )
    .unwrap();
    let requests_refused = IntCounterVec::new(
        Opts::new(
            "requests_refused_total",
            "Requests refused before any work, by reason: rate_limited (429), unauthorized (401: a missing or unknown key), timeout (408), header_too_large (431), malformed (a request head that does not parse, or another broken connection, answered 400/431 by the HTTP layer). Their log lines are summarized per client address.",
        ),
        &["reason"],
    )
    .unwrap();
    let keys_recovered = IntCounterVec::new(
        Opts::new(
            "idempotency_keys_recovered_total",
            "Keys left in progress (their worker died) that the recovery task looked at: completed, refused (its account was revoked: a stored 403), taken (another worker or the client's retry was first), failed (tried again next pass), unknown (a request this server cannot rebuild: a stored 500 request-not-recoverable), left (registered with a card network this instance does not have: left to one that has it; counted once per key).",
        ),
        &["result"],
    )
    .unwrap();
    let purged_keys = IntCounter::new(
        "idempotency_keys_purged_total",
        "Expired idempotency keys deleted.",
    )
    .unwrap();
    let pool_waits = Histogram::with_opts(
        HistogramOpts::new(
            "db_pool_wait_seconds",
            "Time spent waiting for a database connection.",
        )
        .buckets(LATENCY_BUCKETS.to_vec()),
    )
    .unwrap();
    let pool_timeouts = IntCounter::new(
        "db_pool_timeouts_total",
        "Requests that got no connection in time (503).",
    )
    .unwrap();
    let pool_connections = IntGaugeVec::new(
        Opts::new(
            "db_pool_connections",
            "Database connections in the pool, by state.",
        ),
        &["state"],
    )
    .unwrap();
    for c in [
        Box::new(http_requests.clone()) as Box<dyn prometheus::core::Collector>,
        Box::new(http_duration.clone()),
        Box::new(idempotency_outcomes.clone()),
        Box::new(key_conflicts.clone()),
        Box::new(purged_keys.clone()),
        Box::new(deadlines_exceeded.clone()),
        Box::new(rate_limited.clone()),
        Box::new(connections_refused.clone()),
        Box::new(idle_connections_closed.clone()),
        Box::new(requests_refused.clone()),
        Box::new(keys_recovered.clone()),
        Box::new(pool_waits.clone()),
        Box::new(pool_timeouts.clone()),
        Box::new(pool_connections.clone()),
    ] {
        registry.register(c).unwrap();
    }
    Metrics {
        registry,
        http_requests,
        http_duration,
        idempotency_outcomes,
        key_conflicts,
        purged_keys,
        deadlines_exceeded,
        rate_limited,
        connections_refused,
        idle_connections_closed,
        requests_refused,
        keys_recovered,
        pool_waits,
        pool_timeouts,
        pool_connections,
    }
});

/// The protocol crate's counts, recorded here.
struct Protocol;

impl idempotency::Hooks for Protocol {
    fn key_conflict(&self, waited: Duration) {
        METRICS.key_conflicts.observe(waited.as_secs_f64());
    }

    fn keys_purged(&self, rows: u64) {
        METRICS.purged_keys.inc_by(rows);
    }
}

/// The hook the protocol's [`Policy`](idempotency::Policy) records its counts with.
pub fn protocol() -> std::sync::Arc<dyn idempotency::Hooks> {
    static PROTOCOL: LazyLock<std::sync::Arc<dyn idempotency::Hooks>> =
        LazyLock::new(|| std::sync::Arc::new(Protocol));
    PROTOCOL.clone()
}

pub fn observe_pool_wait(waited: Duration, timed_out: bool) {
    METRICS.pool_waits.observe(waited.as_secs_f64());
    if timed_out {
        METRICS.pool_timeouts.inc();
    }
}

/// Every metric in Prometheus' text format, with the pool's gauges read now.
pub fn encode(pool: r2d2::State) -> Vec<u8> {
    let idle = i64::from(pool.idle_connections);
    METRICS
        .pool_connections
        .with_label_values(&["idle"])
        .set(idle);
    METRICS
        .pool_connections
        .with_label_values(&["in_use"])
        .set(i64::from(pool.connections) - idle);
    let mut out = Vec::new();
    TextEncoder::new()
        .encode(&METRICS.registry.gather(), &mut out)
        .expect("text encoding");
    out
}
