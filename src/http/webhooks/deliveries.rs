//! An event's deliveries, at the edge: `GET /events/{id}/deliveries` (per
//! endpoint: its state and every attempt) and `POST /events/{id}/redeliver`
//! (send it again, by hand). Both are scoped to the caller's account: an
//! event of another account is not found.

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use crate::http::problem::ApiError;
use crate::http::state::AppState;
use crate::payments::events::{parse_public_id, public_id};
use crate::store::deliveries::{Attempt, DeliveryView};
use crate::store::{now_micros, time_text};

/// One attempt to deliver an event to an endpoint.
#[derive(Serialize, ToSchema)]
pub struct AttemptBody {
    /// When it was made.
    #[schema(format = DateTime)]
    pub attempted_at: String,
    /// The `webhook-timestamp` it was sent (and signed) with: Unix seconds.
    pub webhook_timestamp: i64,
    /// The receiver's status; `null` when it did not answer (a timeout, a
    /// refused connection, an address webhooks are not sent to).
    pub response_status: Option<i32>,
    /// Why it did not count as delivered; `null` when it did.
    pub error: Option<String>,
    pub duration_ms: i64,
}

/// An event's delivery to one endpoint.
#[derive(Serialize, ToSchema)]
pub struct DeliveryBody {
    pub endpoint_id: String,
    /// `pending` (an attempt is due at `next_attempt_at`), `succeeded`
    /// (a 2xx answered) or `failed` (the last attempt failed, or the
    /// endpoint answered 410 Gone and was disabled).
    #[schema(pattern = "^(pending|succeeded|failed)$")]
    pub status: String,
    pub attempts: i32,
    #[schema(format = DateTime)]
    pub next_attempt_at: Option<String>,
    /// Every attempt, oldest first.
    pub attempt_history: Vec<AttemptBody>,
}

/// `GET /events/{id}/deliveries`.
#[derive(Serialize, ToSchema)]
pub struct DeliveryList {
    /// Always `list`.
    pub object: &'static str,
    pub event_id: String,
    pub data: Vec<DeliveryBody>,
}

/// `POST /events/{id}/redeliver`'s 202.
#[derive(Serialize, ToSchema)]
pub struct Redelivery {
    pub event_id: String,
    /// How many finished deliveries were made pending again.
    pub redelivering: usize,
}

fn event_id(path: &str) -> Result<Uuid, ApiError> {
    parse_public_id(path).ok_or(ApiError::NotFound)
}

fn attempt_body(a: &Attempt) -> AttemptBody {
    AttemptBody {
        attempted_at: time_text(a.attempted_at),
        webhook_timestamp: a.webhook_timestamp,
        response_status: a.response_status,
        error: a.error.clone(),
        duration_ms: a.duration_ms,
    }
}

fn delivery_body(d: &DeliveryView) -> DeliveryBody {
    DeliveryBody {
        endpoint_id: d.endpoint_id.hyphenated().to_string(),
        status: d.status.clone(),
        attempts: d.attempts,
        next_attempt_at: d.next_attempt_at.map(|t: DateTime<Utc>| time_text(t)),
        attempt_history: d.history.iter().map(attempt_body).collect(),
    }
}

/// An event's deliveries: one per endpoint it was sent to, with every
/// attempt (when, with which `webhook-timestamp`, what the receiver
/// answered).
#[utoipa::path(
    get, path = "/events/{id}/deliveries", tag = "webhooks",
    operation_id = "event_deliveries",
    params(("id" = String, Path, description = "The event's id, `evt_…`")),
    responses((status = 200, body = DeliveryList)),
    security(("api_key" = []))
)]
pub async fn list(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id = event_id(&path)?;
    let deliveries = state
        .db(&req, move |store| {
            Ok(store.event_deliveries(account_id, id)?)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok().json(DeliveryList {
        object: "list",
        event_id: public_id(&id),
        data: deliveries.iter().map(delivery_body).collect(),
    }))
}

/// Send an event again to every still-enabled endpoint it was sent to:
/// its finished deliveries become pending, due now. It needs no
/// `Idempotency-Key` (one sent is not read): sending again is what it
/// does, and a receiver dedupes by `webhook-id`, the event's id on every
/// delivery. Pending deliveries are left as they are.
#[utoipa::path(
    post, path = "/events/{id}/redeliver", tag = "webhooks",
    operation_id = "redeliver_event",
    params(("id" = String, Path, description = "The event's id, `evt_…`")),
    responses((status = 202, body = Redelivery)),
    security(("api_key" = []))
)]
pub async fn redeliver(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id = event_id(&path)?;
    let now = now_micros();
    let redelivering = state
        .db(&req, move |store| Ok(store.redeliver(account_id, id, now)?))
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Accepted().json(Redelivery {
        event_id: public_id(&id),
        redelivering,
    }))
}
