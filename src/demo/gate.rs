//! The demo's wall toward other sites, in front of every route while demo
//! mode is on: a browser's cross-site `POST` to `/demo/*` (a page elsewhere
//! that makes the learner's browser reset the demo, or make sandboxes) is a
//! `403`: the shared account's routes and `POST /demo/sandboxes` carry no
//! credentials, so the browser's own `Sec-Fetch-Site` and `Origin` are what
//! tells them apart.
//!
//! Whether demo mode is on is the operator's choice alone (`charges demo`,
//! `DEMO=true`), never read from a request: a proxy's headers, or their
//! absence, prove nothing (a bare `proxy_pass` sends none).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{Method, header};
use actix_web::middleware::Next;

use crate::http::problem::{self, CROSS_SITE_REQUEST};

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

/// The middleware, mounted on the whole app in demo mode.
pub async fn gate(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if req.method() == Method::POST && req.path().starts_with("/demo/") && cross_site(&req) {
        let refused = problem::response(
            &CROSS_SITE_REQUEST,
            "The demo's routes take no credentials, so a request from a page on another site is refused: open the teaching page on this server.",
            Vec::new(),
        );
        return Ok(req.into_response(refused));
    }
    Ok(next.call(req).await?.map_into_boxed_body())
}
