//! The HTTP edge: everything between a socket and an operation.
//!
//! - [`accounts`]: who is calling (API keys) and [`limits`]: how much they
//!   may ask (rate limits, connection caps, a request's deadline); [`hosts`]: which `Host` the
//!   loopback-only services answer;
//! - [`json`]: strict request bodies; [`problem`]: every error as
//!   `application/problem+json`;
//! - [`paging`]: the lists' `limit`, cursors and `has_more`;
//! - [`requests`]: what every write goes through (its checks, the
//!   Idempotency-Key protocol, the answer); [`state`]: what handlers share;
//! - the API's handlers and what they run under the Idempotency-Key
//!   protocol: [`charges`], [`refunds`] (their OpenAPI schemas,
//!   [`schemas`]); the domain they parse into is `crate::payments`, below;
//! - [`webhooks`]: the handlers of webhook endpoints, events and their
//!   deliveries (what sends them is `crate::webhooks`, below);
//! - [`ops`]: health, readiness and the problem pages (the contract,
//!   generated from every handler, is `crate::openapi`, above them all);
//! - here: the table of every route, and the resource every handler is
//!   mounted on.

pub mod accounts;
pub mod charges;
pub mod hosts;
pub mod json;
pub mod limits;
pub mod ops;
pub mod paging;
pub mod problem;
pub mod refunds;
pub mod requests;
pub mod schemas;
pub mod state;
pub mod webhooks;

use actix_web::http::header;
use actix_web::{HttpResponse, Route, guard, web};

use crate::http::problem::ApiError;

/// Every route the server has, with the methods it answers (its `Allow`).
/// Routes are mounted only through [`resource`], which reads its `Allow`
/// here, so this table is the whole list: a contract test compares it with
/// the OpenAPI document. The `/demo/` routes exist only in demo mode.
pub const ROUTES: &[(&str, &str)] = &[
    ("/charges", "GET, HEAD, POST"),
    ("/charges/{id}", "GET, HEAD"),
    ("/charges/{id}/refunds", "GET, HEAD, POST"),
    ("/charges/{id}/description", "PUT"),
    // Events and webhook endpoints (#48).
    ("/events", "GET, HEAD"),
    ("/events/{id}", "GET, HEAD"),
    ("/webhook_endpoints", "GET, HEAD, POST"),
    ("/webhook_endpoints/{id}", "DELETE, GET, HEAD"),
    ("/webhook_endpoints/{id}/rotate_secret", "POST"),
    ("/healthz", "GET, HEAD"),
    ("/readyz", "GET, HEAD"),
    ("/problems/{slug}", "GET, HEAD"),
    ("/openapi.json", "GET, HEAD"),
    ("/docs", "GET, HEAD"),
    // webhook deliveries
    ("/events/{id}/deliveries", "GET, HEAD"),
    ("/events/{id}/redeliver", "POST"),
    ("/demo/config", "GET, HEAD"),
    ("/demo/sandboxes", "POST"),
    ("/demo/state", "GET, HEAD"),
    ("/demo/slot", "GET, HEAD"),
    ("/demo/reset", "POST"),
    ("/demo/keys/{key}/expire", "POST"),
    ("/demo/purge", "POST"),
    ("/demo/lesson8/endpoint", "POST"),
    ("/demo/lesson8/faults", "PUT"),
    ("/demo/lesson8/receiver", "GET, HEAD"),
    ("/demo/receivers/{id}", "POST"),
];

/// Whether a route of [`ROUTES`] belongs to demo mode.
pub fn is_demo_route(path: &str) -> bool {
    path.starts_with("/demo/")
}

/// The resource for one of [`ROUTES`]: methods it has no route for answer
/// 405 problem+json with `Allow` (RFC 9110).
pub fn resource(path: &'static str) -> actix_web::Resource {
    resource_in("", path)
}

/// As [`resource`], for a scope mounted at `scope` (the start of `path`).
pub fn resource_in(scope: &str, path: &'static str) -> actix_web::Resource {
    let within = path
        .strip_prefix(scope)
        .unwrap_or_else(|| panic!("route {path} is not under {scope}"));
    let allow = ROUTES
        .iter()
        .find(|(p, _)| *p == path)
        .unwrap_or_else(|| panic!("route {path} is not in http::ROUTES"))
        .1;
    web::resource(within).default_service(web::to(move || async move {
        let mut response = actix_web::ResponseError::error_response(&ApiError::MethodNotAllowed);
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static(allow));
        response
    }))
}

/// A route for GET and HEAD (RFC 9110 §9.3.2: HEAD is GET without the
/// content; the server sends the same status and headers, and no body).
pub fn get() -> Route {
    web::route().guard(guard::Any(guard::Get()).or(guard::Head()))
}

/// Anything no route matches.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}
