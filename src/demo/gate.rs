//! The demo's walls toward the network, in front of every route while demo
//! mode is on:
//!
//! - When demo mode is on only by the loopback default (DEMO unset), a
//!   request that came through a proxy sees demo mode off: the usual reverse
//!   proxy in front of `127.0.0.1` must not expose the demo because the
//!   server happens to listen on loopback. Such a request carries
//!   forwarding headers (`Forwarded`, `X-Forwarded-*`, `X-Real-IP`) or asks
//!   for a host that is not this machine's loopback name. It gets what a
//!   server without demo mode answers: `404` for `/demo/*` and the page,
//!   `401` for the demo key, its `Demo-*` headers ignored, and an OpenAPI
//!   document without the demo. `DEMO=true` is the operator's say-so to
//!   serve the demo through a proxy.
//! - A browser's cross-site `POST` to `/demo/*` (a page elsewhere that makes
//!   the learner's browser reset the demo) is a `403`: those routes carry
//!   no credentials, so the browser's own `Sec-Fetch-Site` and `Origin` are
//!   what tells them apart.

use actix_web::HttpMessage;
use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, header};
use actix_web::middleware::Next;

use super::{DEMO_API_KEY, HEADER_PREFIX};
use crate::accounts;
use crate::problem::{self, ApiError, CROSS_SITE_REQUEST};

/// What a request that must not see the demo carries in its extensions.
#[derive(Debug, Clone, Copy)]
pub struct DemoHidden;

/// The headers a proxy adds.
const FORWARDING: &[&str] = &[
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
];

/// Whether `req` came through a proxy, as far as it shows: forwarding
/// headers, or a `Host` that is not a loopback name.
pub fn came_through_a_proxy(req: &ServiceRequest) -> bool {
    if FORWARDING.iter().any(|h| req.headers().contains_key(*h)) {
        return true;
    }
    let Some(host) = req.headers().get(header::HOST) else {
        return false;
    };
    let host = host.to_str().unwrap_or("").to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host.as_str(), |(n, _)| n),
    };
    let loopback = name == "localhost"
        || name.ends_with(".localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !loopback
}

/// Whether `req` is a browser's request from another site.
fn cross_site(req: &ServiceRequest) -> bool {
    let fetch_site = req
        .headers()
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok());
    if matches!(fetch_site, Some("cross-site" | "same-site")) {
        return true;
    }
    let (Some(origin), Some(host)) = (
        req.headers().get(header::ORIGIN),
        req.headers().get(header::HOST),
    ) else {
        return false;
    };
    // `Origin: scheme://host[:port]` must name the host asked for.
    let origin = origin.to_str().unwrap_or("null");
    let origin_host = origin.split_once("://").map_or("", |(_, rest)| rest);
    !origin_host.eq_ignore_ascii_case(host.to_str().unwrap_or(""))
}

/// Whether `path` is one of the API's routes (not the demo's, not the page's).
fn api_path(path: &str) -> bool {
    crate::http::ROUTES
        .iter()
        .filter(|(route, _)| !crate::http::is_demo_route(route))
        .any(|(route, _)| {
            let prefix = route.split('{').next().unwrap_or(route);
            if prefix.len() == route.len() {
                path == *route
            } else {
                path.starts_with(prefix)
            }
        })
}

fn refuse(req: ServiceRequest, error: ApiError) -> ServiceResponse<BoxBody> {
    req.error_response(error).map_into_boxed_body()
}

/// The middleware, mounted on the whole app in demo mode; `by_default`:
/// demo mode is on only by the loopback default.
pub async fn gate(
    by_default: bool,
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if by_default && came_through_a_proxy(&req) {
        if !api_path(req.path()) {
            return Ok(refuse(req, ApiError::NotFound));
        }
        match accounts::bearer_token(req.request()) {
            Ok(Some(DEMO_API_KEY)) => return Ok(refuse(req, ApiError::Unauthorized)),
            Err(e) => return Ok(refuse(req, e)),
            _ => {}
        }
        let demo_headers: Vec<_> = req
            .headers()
            .keys()
            .filter(|name| name.as_str().starts_with(HEADER_PREFIX))
            .cloned()
            .collect();
        for name in demo_headers {
            req.headers_mut().remove(name);
        }
        req.extensions_mut().insert(DemoHidden);
    } else if req.method() == Method::POST && req.path().starts_with("/demo/") && cross_site(&req) {
        let refused = problem::response(
            &CROSS_SITE_REQUEST,
            "The demo's routes take no credentials, so a request from a page on another site is refused: open the teaching page on this server.",
            Vec::new(),
        );
        return Ok(req.into_response(refused));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}
