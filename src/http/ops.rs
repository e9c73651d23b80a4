//! The operational endpoints: liveness, readiness, metrics (on a listener
//! of their own), and the
//! documentation behind each problem `type`.

use std::time::Duration;

use actix_web::{HttpResponse, web};
use serde_json::json;

use crate::http::problem::{self, ApiError};
use crate::http::state::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up")))]
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

/// How long `/readyz` waits for the database: a load balancer's probe must
/// get an answer, whatever the database does.
pub const READY_TIMEOUT: Duration = Duration::from_millis(1500);

/// The process can reach its database.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses(
    (status = 200, description = "The database answers"),
    (status = 503, description = "The database does not answer within 1.5 s", body = problem::Problem, content_type = "application/problem+json"),
))]
pub async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let ready = state
        .pool
        .run(READY_TIMEOUT, |store| -> Result<(), ApiError> {
            Ok(store.ping()?)
        })
        .await;
    match ready {
        Ok(()) => HttpResponse::Ok().json(json!({"status": "ready"})),
        // Probed every few seconds: the pool logs an outage once.
        Err(e) => e.unlogged_response(),
    }
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

/// Prometheus metrics in the text format, served on METRICS_BIND only (a
/// listener of its own, loopback by default), never on BIND: they tell an
/// outsider the traffic, the accounts' outcomes and the pool's state.
pub async fn metrics(pool: web::Data<crate::store::DbPool>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(prometheus::TEXT_FORMAT)
        .body(crate::metrics::encode(pool.state()))
}
