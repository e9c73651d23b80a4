//! The `Demo-*` headers on `POST /charges`: checked, confined to the demo
//! account, and turned into hooks inside the charge's transaction (or, for
//! `lose-response`, into a lost answer after it).

use std::sync::Arc;
use std::time::Duration;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::StatusCode;
use actix_web::middleware::Next;
use actix_web::{HttpMessage, web};

use super::{
    CHECK_THEN_INSERT, DEMO_API_KEY, DelaySlots, FAULT_HEADER, HEADER_PREFIX, MAX_DELAY,
    MODE_HEADER, Sandbox,
};
use crate::accounts;
use crate::hooks::{HookFailure, Moment, RequestHooks, TxHooks, WriteError, Writes};
use crate::idempotency::Mode;
use crate::problem::{self, ApiError};
use crate::state::AppState;
use crate::store::Store;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Faults {
    pub lose_response: bool,
    pub delay_commit: Option<Duration>,
    pub fail_before_commit: bool,
    pub crash_after_key: bool,
}

impl Faults {
    pub fn parse(header: &str) -> Result<Faults, String> {
        let mut faults = Faults::default();
        for item in header.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                None if item == "lose-response" => faults.lose_response = true,
                None if item == "fail-before-commit" => faults.fail_before_commit = true,
                None if item == "crash-after-key" => faults.crash_after_key = true,
                Some(("delay-commit", ms)) => {
                    let ms: u64 = ms
                        .trim()
                        .parse()
                        .map_err(|_| format!("delay-commit takes milliseconds, not {ms:?}"))?;
                    let delay = Duration::from_millis(ms);
                    if delay > MAX_DELAY {
                        return Err(format!(
                            "delay-commit is at most {} ms",
                            MAX_DELAY.as_millis()
                        ));
                    }
                    faults.delay_commit = (!delay.is_zero()).then_some(delay);
                }
                _ => {
                    return Err(format!(
                        "unknown Demo-Fault {item:?} (known: lose-response, delay-commit=<ms>, fail-before-commit, crash-after-key)"
                    ));
                }
            }
        }
        Ok(faults)
    }
}

/// The transaction faults of one request, with the process's delay slots.
struct DemoHooks {
    faults: Faults,
    delayed: Arc<DelaySlots>,
}

impl TxHooks for DemoHooks {
    /// The writes, and if a fault must act inside the transaction, the same
    /// writes wrapped in one: held open, or failed, after they wrote.
    fn run(
        &self,
        store: &mut dyn Store,
        moment: Moment,
        writes: &mut Writes<'_>,
    ) -> Result<(), WriteError> {
        if self.faults.delay_commit.is_none() && !self.faults.fail_before_commit {
            writes(store)?;
            return Ok(());
        }
        store.transaction(|tx| {
            match moment {
                Moment::AfterWrites => {
                    if writes(tx)? {
                        self.before_commit()?;
                    }
                }
                Moment::BeforeWrites => {
                    self.before_commit()?;
                    writes(tx)?;
                }
            }
            Ok(())
        })
    }

    fn after_key_committed(&self) {
        if self.faults.crash_after_key {
            tracing::warn!("Demo-Fault: crash-after-key: killing this process with SIGKILL");
            // SIGKILL: no unwinding, no destructors, no rollback: a real crash.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
    }
}

impl DemoHooks {
    /// Inside the transaction, before COMMIT. The delay slot is taken here,
    /// by the request that really holds a transaction: a duplicate waiting
    /// on the key holds none.
    fn before_commit(&self) -> Result<(), HookFailure> {
        if let Some(delay) = self.faults.delay_commit {
            let Some(_slot) = self.delayed.take() else {
                let gap = if self.delayed.gap.is_zero() {
                    String::new()
                } else {
                    format!(
                        ", or one ended less than {} ms ago (SQLite's write lock is every account's: the writes a delay held go first)",
                        self.delayed.gap.as_millis()
                    )
                };
                return Err(HookFailure::Overloaded(format!(
                    "Demo-Fault: delay-commit: {} transaction(s) held open by the demo are already in flight, the most this server allows at once{gap}, so that the demo cannot take the database from other accounts. Nothing was done; retry after Retry-After.",
                    self.delayed.max
                )));
            };
            std::thread::sleep(delay);
        }
        if self.faults.fail_before_commit {
            return Err(HookFailure::Injected(
                "Demo-Fault: fail-before-commit".to_owned(),
            ));
        }
        Ok(())
    }
}

fn has_demo_headers(req: &ServiceRequest) -> bool {
    req.headers()
        .keys()
        .any(|name| name.as_str().starts_with(HEADER_PREFIX))
}

fn refuse(req: ServiceRequest, error: ApiError) -> ServiceResponse<BoxBody> {
    req.error_response(error).map_into_boxed_body()
}

/// Middleware on `/charges`. Requests of other accounts pass untouched
/// unless they carry a `Demo-*` header (then 400). The demo account's
/// requests take a place among its in-flight requests, have `Demo-Fault`
/// and `Demo-Mode` read and handed to the handler (transaction faults
/// through the hooks seam), and lose their response afterwards if asked.
pub async fn faults(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let demo_headers = has_demo_headers(&req);
    let token = match accounts::bearer_token(req.request()) {
        Ok(token) => token,
        Err(e) => return Ok(refuse(req, e)),
    };
    if !demo_headers && token != Some(DEMO_API_KEY) {
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
    // Authentication first: an unknown caller hears 401, not about demos.
    let account = match state
        .accounts
        .authenticate(req.request(), &state.pool)
        .await
    {
        Ok(account) => account,
        Err(e) => return Ok(refuse(req, e)),
    };
    if account != sandbox.account_id {
        let refused = problem::response(
            StatusCode::BAD_REQUEST,
            "demo-account-only",
            "Demo-Fault and Demo-Mode act only on the demo account, the sandbox of the teaching page; this request is another account's. Send it without Demo-* headers.",
            Vec::new(),
        );
        return Ok(req.into_response(refused));
    }
    let Ok(_place) = tokio::time::timeout(sandbox.wait, sandbox.in_flight.acquire()).await else {
        let detail = format!(
            "The demo account already has {} requests in flight on this server, the most it may (half the connection pool, so that the demo cannot take the database from other accounts). Retry after Retry-After.",
            sandbox.in_flight_limit
        );
        return Ok(refuse(req, ApiError::Overloaded { detail }));
    };
    let header = req
        .headers()
        .get(FAULT_HEADER)
        .map(|v| v.to_str().unwrap_or("\u{fffd}").to_owned());
    let faults = match header.as_deref().map(Faults::parse).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(detail) => return Ok(refuse(req, ApiError::invalid(detail))),
    };
    if faults.crash_after_key && !sandbox.allow_crash {
        return Ok(refuse(
            req,
            ApiError::invalid(
                "Demo-Fault: crash-after-key kills the server process, so this server refuses it; it is for crash tests, on a server started with DEMO_ALLOW_CRASH=true.",
            ),
        ));
    }
    match req.headers().get(MODE_HEADER).map(|v| v.as_bytes()) {
        None | Some(b"check-then-insert") => {}
        Some(b"atomic") => {
            req.extensions_mut().insert(Mode::Atomic);
        }
        Some(b"key-first") => {
            req.extensions_mut().insert(Mode::KeyFirst);
        }
        Some(other) => {
            let detail = format!(
                "unknown Demo-Mode {:?} (known: atomic, key-first, {CHECK_THEN_INSERT})",
                String::from_utf8_lossy(other)
            );
            return Ok(refuse(req, ApiError::invalid(detail)));
        }
    }
    let lose_response = faults.lose_response;
    req.extensions_mut()
        .insert(RequestHooks(Arc::new(DemoHooks {
            faults,
            delayed: sandbox.delayed.clone(),
        })));
    let response = next.call(req).await?;
    if !lose_response {
        return Ok(response.map_into_boxed_body());
    }
    // The work is done and committed; only the answer goes missing.
    let (req, _) = response.into_parts();
    let lost = problem::response(
        StatusCode::GATEWAY_TIMEOUT,
        "simulated-lost-response",
        "Demo-Fault: lose-response. The server processed this request, but its response was thrown away, as a gateway that timed out would. Retry to find out what happened.",
        Vec::new(),
    );
    Ok(ServiceResponse::new(req, lost))
}
