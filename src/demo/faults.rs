//! The `Demo-*` headers on the charge routes: checked, confined to the demo
//! account, and turned into the demo's own `AppState` for the request (its
//! pool, its mode and lease, its hooks at the named points of the request's
//! transactions, its client of the card network), and, for
//! `lose-response`, `abandon` and `forget-commit`, into what happens to the
//! answer after the handler.
//!
//! The handler reads whichever `web::Data<AppState>` it is given: this
//! middleware alone adds the demo's (a data container pushed onto the
//! request, found before the server's), and only for the demo account.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{Extensions, ServiceRequest, ServiceResponse};
use actix_web::http::{Method, StatusCode, header};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

use super::hooks::{DemoHooks, SLOTS_HEADER};
use super::sandboxes::{Admission, SANDBOX_KEY_PREFIX};
use super::{
    Busy, CHECK_THEN_INSERT, FAULT_HEADER, HEADER_PREFIX, MAX_LEASE, MIN_LEASE, MODE_HEADER,
    NETWORK_HEADER, Sandbox,
};
use crate::http::accounts;
use crate::http::problem::{self, ApiError, DEMO_ACCOUNT_ONLY, SIMULATED_LOST_RESPONSE};
use crate::http::state::AppState;
use crate::store::RequestHooks;
use idempotency::{IdempotencyKey, Mode};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Faults {
    pub lose_response: bool,
    pub delay_commit: Option<Duration>,
    pub fail_before_commit: bool,
    pub crash_after_key: bool,
    pub abandon: bool,
    pub forget_commit: bool,
    pub lease: Option<Duration>,
    /// The card network does not answer (nothing is authorized).
    pub network_down: bool,
    /// The card network takes this long to answer.
    pub network_delay: Option<Duration>,
    /// The card network authorizes, and its answer is lost on the way back.
    pub network_lose_answer: bool,
    /// Key-first: stop after the network authorized, as a dead process would.
    pub abandon_after_network: bool,
    /// Call the network with a new key each time, as an integration that
    /// does not pass the key on would.
    pub network_fresh_key: bool,
}

/// Every value `Demo-Fault` accepts (`src/demo/mod.rs` explains each).
const KNOWN: &str = "lose-response, delay-commit=<ms>, fail-before-commit, crash-after-key, abandon, forget-commit, lease=<ms>, network-down, network-delay=<ms>, network-lose-answer, abandon-after-network, network-fresh-key";

impl Faults {
    /// Parses the header; `max_delay` is the longest `delay-commit` accepted.
    pub fn parse(header: &str, max_delay: Duration) -> Result<Faults, String> {
        let mut faults = Faults::default();
        let millis = |name: &str, ms: &str| -> Result<Duration, String> {
            ms.trim()
                .parse()
                .map(Duration::from_millis)
                .map_err(|_| format!("{name} takes milliseconds, not {ms:?}"))
        };
        for item in header.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                None if item == "lose-response" => faults.lose_response = true,
                None if item == "fail-before-commit" => faults.fail_before_commit = true,
                None if item == "crash-after-key" => faults.crash_after_key = true,
                None if item == "abandon" => faults.abandon = true,
                None if item == "forget-commit" => faults.forget_commit = true,
                None if item == "network-down" => faults.network_down = true,
                None if item == "network-lose-answer" => faults.network_lose_answer = true,
                None if item == "abandon-after-network" => faults.abandon_after_network = true,
                None if item == "network-fresh-key" => faults.network_fresh_key = true,
                Some(("network-delay", ms)) => {
                    let delay = millis("network-delay", ms)?;
                    if delay > max_delay {
                        return Err(format!(
                            "network-delay is at most {} ms on this server",
                            max_delay.as_millis()
                        ));
                    }
                    faults.network_delay = (!delay.is_zero()).then_some(delay);
                }
                Some(("delay-commit", ms)) => {
                    let delay = millis("delay-commit", ms)?;
                    if delay > max_delay {
                        return Err(format!(
                            "delay-commit is at most {} ms on this server (well inside REQUEST_TIMEOUT, and on SQLite inside DB_LOCK_TIMEOUT, the write lock's wait)",
                            max_delay.as_millis()
                        ));
                    }
                    faults.delay_commit = (!delay.is_zero()).then_some(delay);
                }
                Some(("lease", ms)) => {
                    let lease = millis("lease", ms)?;
                    if !(MIN_LEASE..=MAX_LEASE).contains(&lease) {
                        return Err(format!(
                            "lease is {} to {} ms",
                            MIN_LEASE.as_millis(),
                            MAX_LEASE.as_millis()
                        ));
                    }
                    faults.lease = Some(lease);
                }
                _ => return Err(format!("unknown Demo-Fault {item:?} (known: {KNOWN})")),
            }
        }
        Ok(faults)
    }

    /// Whether a fault acts on the card network's call: then the request
    /// asks the network, as with `Demo-Network: on`.
    fn of_the_network(&self) -> bool {
        self.network_down
            || self.network_delay.is_some()
            || self.network_lose_answer
            || self.abandon_after_network
            || self.network_fresh_key
    }
}

fn has_demo_headers(req: &ServiceRequest) -> bool {
    req.headers()
        .keys()
        .any(|name| name.as_str().starts_with(HEADER_PREFIX))
}

/// A refusal before the handler: its response, the error kept in it.
fn refusal(error: ApiError) -> HttpResponse {
    HttpResponse::from_error(error)
}

/// Middleware on the charge routes. Requests of other accounts pass
/// untouched unless they carry a `Demo-*` header (then 400). A sandbox's
/// requests (their keys start `sk_test_`) take a place among its own and
/// the demo's in-flight requests, have `Demo-Fault` and `Demo-Mode` read
/// into the demo's state for this request, and lose, or make the database
/// forget, their response afterwards if asked.
pub async fn faults(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let token = match accounts::bearer_token(req.request()) {
        Ok(token) => token,
        Err(e) => return Ok(req.into_response(refusal(e))),
    };
    let demo_headers = has_demo_headers(&req);
    if !demo_headers && !token.is_some_and(|t| t.starts_with(SANDBOX_KEY_PREFIX)) {
        // Not the demo's business: the handler authenticates as always.
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let (sandbox, state) = (
        req.app_data::<web::Data<Sandbox>>()
            .expect("demo::faults is mounted with its Sandbox")
            .clone(),
        req.app_data::<web::Data<AppState>>()
            .expect("the app state")
            .clone(),
    );
    let account = match admit(&req, &sandbox, &state, demo_headers).await {
        Ok(Some(account)) => account,
        // A real account's key that happens to look like a sandbox's.
        Ok(None) => return Ok(next.call(req).await?.map_into_boxed_body()),
        Err(refused) => return Ok(req.into_response(refused)),
    };
    let _own_place = match own_place(&sandbox, account).await {
        Ok(place) => place,
        Err(refused) => return Ok(req.into_response(refused)),
    };
    let Ok(_place) = tokio::time::timeout(sandbox.wait, sandbox.in_flight.acquire()).await else {
        let detail = format!(
            "The demo's sandboxes already have {} requests in flight on this server, the most they may (half the connection pool, so that the demo cannot take the database from other accounts). Retry after Retry-After.",
            sandbox.in_flight_limit
        );
        return Ok(req.into_response(refusal(ApiError::Overloaded { detail })));
    };
    let (faults, mode, key, network) = match read_headers(&req, &sandbox, &state) {
        Ok(read) => read,
        Err(e) => return Ok(req.into_response(refusal(e))),
    };
    let after = After {
        lose_response: faults.lose_response || faults.abandon || faults.abandon_after_network,
        forget_commit: faults.forget_commit,
        key,
    };
    // From here on the request is the demo's: its handler reads this state.
    let session = match super::session_tag(req.headers()) {
        Ok(session) => session,
        Err(e) => return Ok(req.into_response(refusal(ApiError::invalid(e)))),
    };
    let refused = Arc::default();
    let request = Request {
        session,
        account,
        faults,
        mode,
        asks_network: network,
        refused: Arc::clone(&refused),
    };
    let state = web::Data::new(demo_state(&state, &sandbox, request));
    let mut container = Extensions::new();
    container.insert(state.clone());
    req.add_data_container(Rc::new(container));
    let response = next.call(req).await?;
    let mut response = after.apply(response, &state, account).await?;
    let busy = *refused.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(busy) = busy {
        say_busy(response.headers_mut(), busy);
    }
    Ok(response)
}

/// A refusal for want of a slot says how many are held, and its
/// `Retry-After` is when the first is given back (at least 1 s), not the
/// generic 503's 1 s.
fn say_busy(headers: &mut header::HeaderMap, busy: Busy) {
    let secs = busy.free_in.as_millis().div_ceil(1000).max(1) as u64;
    headers.insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
    if let Ok(value) =
        header::HeaderValue::from_str(&format!("held={}, max={}", busy.held, busy.max))
    {
        headers.insert(header::HeaderName::from_static(SLOTS_HEADER), value);
    }
}

/// A place among the sandbox's own requests in flight, taken before one of
/// the demo's, so that a visitor waiting for it holds none of the demo's.
/// The shared account (loopback only: the curl examples' and the crash
/// tests') has none of its own: the demo's whole half is its share.
async fn own_place(
    sandbox: &Sandbox,
    account: i64,
) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, HttpResponse> {
    if sandbox.shared_account == Some(account) {
        return Ok(None);
    }
    let own = sandbox.sandboxes.places(account);
    match tokio::time::timeout(sandbox.wait, own.acquire_owned()).await {
        Ok(Ok(place)) => Ok(Some(place)),
        _ => Err(refusal(ApiError::Overloaded {
            detail: format!(
                "Your sandbox already has {} requests in flight on this server, the most one sandbox may (so that no visitor takes the demo's connections from another). Retry after Retry-After.",
                sandbox.sandboxes.in_flight_each
            ),
        })),
    }
}

/// Authentication first (an unknown caller hears 401, not about demos; one
/// over its rate limit 429): the one that charges the account's rate limit.
/// Then the account must be a live sandbox: its id. A real account whose
/// key looks like a sandbox's, without `Demo-*` headers: `None` (its
/// request is not the demo's; its handler authenticates it again).
async fn admit(
    req: &ServiceRequest,
    sandbox: &Sandbox,
    state: &AppState,
    demo_headers: bool,
) -> Result<Option<i64>, HttpResponse> {
    let account = state
        .accounts
        .authenticate(req.request(), &state.pool)
        .await
        .map_err(refusal)?;
    let left = crate::http::limits::deadline_left(req.request(), state.settings.request_timeout);
    let admission = sandbox
        .sandboxes
        .admit(&sandbox.pool, account, left)
        .await
        .map_err(refusal)?;
    match admission {
        Admission::Sandbox(id, _) => Ok(Some(id)),
        // Expired: as a key that never was (the page then makes a new one).
        Admission::Gone => Err(refusal(ApiError::Unauthorized)),
        Admission::NotASandbox if !demo_headers => Ok(None),
        Admission::NotASandbox => Err(problem::response(
            &DEMO_ACCOUNT_ONLY,
            "Demo-Fault and Demo-Mode act only on a demo sandbox (POST /demo/sandboxes makes one); this request is another account's. Send it without Demo-* headers.",
            Vec::new(),
        )),
    }
}

/// `Demo-Fault`, `Demo-Mode` and `Demo-Network`, checked against each
/// other and the route, and the request's `Idempotency-Key` (for
/// `forget-commit`). Whether the request asks the card network: with
/// `Demo-Network: on`, or a fault of the network's.
fn read_headers(
    req: &ServiceRequest,
    sandbox: &Sandbox,
    state: &AppState,
) -> Result<(Faults, Mode, Option<IdempotencyKey>, bool), ApiError> {
    let header = req
        .headers()
        .get(FAULT_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let faults = header
        .map(|h| Faults::parse(h, sandbox.max_delay))
        .transpose()
        .map_err(ApiError::invalid)?
        .unwrap_or_default();
    if faults.crash_after_key && !sandbox.allow_crash {
        return Err(ApiError::invalid(
            "Demo-Fault: crash-after-key kills the server process, so this server refuses it; it is for crash tests, on a server started with DEMO_ALLOW_CRASH=true. `abandon` leaves the same in-progress key behind without killing anything.",
        ));
    }
    let mode = match req.headers().get(MODE_HEADER).map(|v| v.as_bytes()) {
        None | Some(b"check-then-insert") => state.settings.idempotency_mode,
        Some(b"atomic") => Mode::Atomic,
        Some(b"key-first") => Mode::KeyFirst,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "unknown Demo-Mode {:?} (known: atomic, key-first, {CHECK_THEN_INSERT})",
                String::from_utf8_lossy(other)
            )));
        }
    };
    if (faults.abandon || faults.abandon_after_network || faults.lease.is_some())
        && mode != Mode::KeyFirst
    {
        return Err(ApiError::invalid(
            "Demo-Fault: abandon, abandon-after-network and lease act on the key-first design only, where the key is committed before the operation; send Demo-Mode: key-first too.",
        ));
    }
    let keyed_post = req.method() == Method::POST;
    if faults.forget_commit && !(keyed_post && req.path() == crate::http::charges::PATH) {
        return Err(ApiError::invalid(
            "Demo-Fault: forget-commit acts on POST /charges only.",
        ));
    }
    let key = IdempotencyKey::from_headers(req.headers())?;
    let network = match req.headers().get(NETWORK_HEADER).map(|v| v.as_bytes()) {
        None => faults.of_the_network(),
        Some(b"on") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "unknown Demo-Network {:?} (known: on: this request's charge asks the card network first)",
                String::from_utf8_lossy(other)
            )));
        }
    };
    Ok((faults, mode, key, network))
}

/// One sandbox request, as its headers asked.
struct Request {
    account: i64,
    faults: Faults,
    mode: Mode,
    asks_network: bool,
    refused: Arc<std::sync::Mutex<Option<Busy>>>,
    session: Option<String>,
}

/// The state a sandbox's request runs with: the server's, on the demo's
/// own connections (named for the sandbox, so that its view of lock waits
/// is its own), in `mode` (and `Demo-Fault: lease`'s lease), with the
/// request's faults as its hooks and the demo's client of the card
/// network: the server's network always, the demo's own only when the
/// request `asks_network`. Its authenticator is the sandbox's, without a
/// rate limit: this request was charged once already, by [`admit`].
fn demo_state(state: &AppState, sandbox: &Sandbox, request: Request) -> AppState {
    let Request {
        account,
        faults,
        mode,
        asks_network,
        refused,
        session,
    } = request;
    let mut settings = (*state.settings).clone();
    settings.idempotency_mode = mode;
    if let Some(lease) = faults.lease {
        settings.idempotency_lease = lease;
    }
    let network = sandbox
        .network
        .as_deref()
        .filter(|_| asks_network || sandbox.network_by_default)
        .map(|network| {
            Arc::new(sandbox.network_client(network, account, faults.network_fresh_key))
        });
    // Without a fault the request runs as any other: with no hooks (a write
    // that is one statement is then sent alone, as always).
    let hooks = if faults == Faults::default() {
        state.hooks.clone()
    } else {
        RequestHooks::installed(Arc::new(DemoHooks {
            faults,
            delayed: sandbox.delayed.clone(),
            holder: (sandbox.shared_account != Some(account)).then_some(account),
            refused,
        }))
    };
    let mut state = state.with_settings(settings);
    // Named per sandbox: its view of lock waits shows a visitor their own only.
    state.pool = sandbox
        .pool
        .named(super::request_label(account, session.as_deref()));
    state.accounts = sandbox.accounts.clone();
    state.network = network;
    state.hooks = hooks;
    state
}

/// What happens to the answer once the handler gave it.
struct After {
    lose_response: bool,
    forget_commit: bool,
    key: Option<IdempotencyKey>,
}

impl After {
    async fn apply(
        self,
        response: ServiceResponse<impl MessageBody + 'static>,
        state: &AppState,
        account: i64,
    ) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
        let replayed = response
            .headers()
            .contains_key(idempotency::Outcome::REPLAYED_HEADER);
        if self.forget_commit && response.status() == StatusCode::CREATED && !replayed {
            let charge = response
                .headers()
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .and_then(|l| l.rsplit('/').next())
                .and_then(|id| uuid::Uuid::parse_str(id).ok());
            if let Some(charge) = charge {
                // The answer is out; then the database loses the commit.
                let (request, key) = (response.request().clone(), self.key);
                state
                    .db(&request, move |store| {
                        Ok(super::queries::forget_charge(
                            store,
                            account,
                            key.as_ref().map(IdempotencyKey::as_str),
                            charge,
                        )?)
                    })
                    .await?;
            }
        }
        if !self.lose_response {
            return Ok(response.map_into_boxed_body());
        }
        // The work is done and committed (or, for `abandon`, left half done
        // as a crash would); only the answer goes missing.
        let (req, _) = response.into_parts();
        let lost = problem::response(
            &SIMULATED_LOST_RESPONSE,
            "Demo-Fault: lose-response or abandon. The server processed this request as far as it got, but its response was thrown away, as a gateway that timed out would. Retry to find out what happened.",
            Vec::new(),
        );
        Ok(ServiceResponse::new(req, lost))
    }
}
