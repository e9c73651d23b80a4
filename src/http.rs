//! The HTTP surface's building blocks: the table of every route, and the
//! resource every handler is mounted on.

use actix_web::http::header;
use actix_web::{HttpResponse, web};

use crate::problem::ApiError;

/// Every route the server has, with the methods it answers (its `Allow`).
/// Routes are mounted only through [`resource`], which reads its `Allow`
/// here, so this table is the whole list: a contract test compares it with
/// the OpenAPI document. The `/demo/` routes exist only in demo mode.
pub const ROUTES: &[(&str, &str)] = &[
    ("/charges", "GET, POST"),
    ("/charges/{id}", "GET"),
    ("/healthz", "GET"),
    ("/readyz", "GET"),
    ("/metrics", "GET"),
    ("/problems/{slug}", "GET"),
    ("/openapi.json", "GET"),
    ("/docs", "GET"),
    ("/demo/config", "GET"),
    ("/demo/state", "GET"),
    ("/demo/reset", "POST"),
    ("/demo/keys/{key}/expire", "POST"),
    ("/demo/purge", "POST"),
];

/// Whether a route of [`ROUTES`] belongs to demo mode.
pub fn is_demo_route(path: &str) -> bool {
    path.starts_with("/demo/")
}

/// The resource for one of [`ROUTES`]: methods it has no route for answer
/// 405 problem+json with `Allow` (RFC 9110).
pub fn resource(path: &'static str) -> actix_web::Resource {
    let allow = ROUTES
        .iter()
        .find(|(p, _)| *p == path)
        .unwrap_or_else(|| panic!("route {path} is not in http::ROUTES"))
        .1;
    web::resource(path).default_service(web::to(move || async move {
        let mut response = actix_web::ResponseError::error_response(&ApiError::MethodNotAllowed);
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static(allow));
        response
    }))
}

/// Anything no route matches.
pub async fn not_found() -> Result<HttpResponse, ApiError> {
    Err(ApiError::NotFound)
}
