//! The operational endpoints: liveness, readiness, metrics, and the
//! documentation behind each problem `type`.

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::problem::{self, ApiError};
use crate::state::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// The process can reach its database.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "The database answers"),
    (status = 503, description = "The database does not answer", body = problem::Problem, content_type = "application/problem+json"),
))]
pub async fn readyz(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let pool = state.pool.clone();
    web::block(move || -> Result<(), ApiError> { Ok(pool.checkout()?.store().ping()?) }).await??;
    Ok(HttpResponse::Ok().json(json!({"status": "ready"})))
}

/// The documentation behind each problem `type` URI.
#[utoipa::path(get, path = "/problems/{slug}", tag = "operations",
    params(("slug" = String, Path, description = "The last segment of a problem `type`")),
    responses(
        (status = 200, description = "The problem type's status and title"),
        (status = 404, description = "No such problem type", body = problem::Problem, content_type = "application/problem+json"),
    ))]
pub async fn problem_type(slug: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let kind = problem::find(&slug).ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok()
        .json(json!({"type": kind.uri(), "status": kind.status, "title": kind.title})))
}

/// Prometheus metrics in the text format.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain")))]
pub async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(prometheus::TEXT_FORMAT)
        .body(crate::metrics::encode(state.pool.state()))
}
