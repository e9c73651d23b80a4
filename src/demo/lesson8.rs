//! Lesson 8's routes, "the other direction": the sandbox's endpoint,
//! pointing at the receiver the demo hosts for it ([`super::receiver`]),
//! the receiver's faults, and what the page shows of it, each from the
//! sandbox's rows: the events, every delivery attempt (from
//! `webhook_attempts`, with the signature it carried, signed again from
//! the rows), the inbox and the payments applied.
//!
//! In demo mode the sender retries on a short schedule (0 s, 2 s, 4 s,
//! 8 s: [`DEMO_RETRY_SCHEDULE`]) unless WEBHOOK_RETRY_SCHEDULE is set, so
//! that a learner watches the retries within seconds.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Sandbox;
use super::queries::{self, receiver};
use super::routes::on_your_connection;
use crate::config::Settings;
use crate::http::problem::ApiError;
use crate::http::state::AppState;
use crate::http::webhooks::endpoints::new_secret;
use crate::payments::events;
use crate::store::Store;
use crate::webhooks::settings::WebhookSettings;
use idempotency::webhook::{Secret, signature_header};

/// Rows of each kind the page is shown at most.
const LIMIT: i64 = 200;
/// The most answers a sandbox's receiver may be told to lose in a row
/// (the demo's schedule has four attempts).
pub const MAX_LOST_ANSWERS: i32 = 3;

/// The demo's retry schedule: four attempts within about 15 s.
pub const DEMO_RETRY_SCHEDULE: [Duration; 4] = [
    Duration::ZERO,
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];

/// In demo mode, the short schedule, unless the operator chose one
/// (WEBHOOK_RETRY_SCHEDULE set, or a schedule other than the default).
pub fn shorten_retries(settings: &mut Settings) {
    let chosen = std::env::var_os("WEBHOOK_RETRY_SCHEDULE").is_some()
        || settings.webhooks.retry_schedule != WebhookSettings::default().retry_schedule;
    if settings.demo_enabled() && !chosen {
        settings.webhooks.retry_schedule = DEMO_RETRY_SCHEDULE.to_vec();
    }
}

/// Where the sandbox's endpoint sends: this server's receiver for it, at
/// the address the request reached (loopback on the loopback demo).
fn receiver_url(req: &HttpRequest, receiver_id: &str) -> String {
    let mut addr = req.app_config().local_addr();
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    format!("http://{addr}/demo/receivers/{receiver_id}")
}

/// Demo mode only: the sandbox's webhook endpoint, made once: it points at
/// the receiver the demo hosts for the sandbox and is subscribed to every
/// event. Its secret stays on the server (the receiver reads it there).
#[utoipa::path(post, path = "/demo/lesson8/endpoint", tag = "demo", responses(
    (status = 201, description = "`{\"endpoint_id\", \"url\", \"receiver_id\"}`: made now"),
    (status = 200, description = "The same, made before"),
))]
pub async fn lesson8_endpoint(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    // From the request, before the blocking work: the receivers' address.
    let base = receiver_url(&req, "");
    let (made, row, url) = on_your_connection(&req, &app, &sandbox, move |store, account_id| {
        store.transaction(|tx| -> Result<_, ApiError> {
            let row = receiver::receiver_of(tx, account_id)?;
            let url = format!("{base}{}", row.receiver_id);
            if let Some(endpoint) = &row.endpoint_id
                && !receiver::endpoint_secrets(tx, account_id, endpoint)?.is_empty()
            {
                return Ok((false, row, url));
            }
            let endpoint = receiver::insert_endpoint(tx, account_id, &url, &new_secret())?;
            receiver::set_endpoint(tx, account_id, &endpoint)?;
            let row = receiver::receiver_of(tx, account_id)?;
            Ok((true, row, url))
        })
    })
    .await?;
    let answer = json!({
        "endpoint_id": row.endpoint_id,
        "url": url,
        "receiver_id": row.receiver_id,
        "enabled_events": ["*"],
    });
    Ok(match made {
        true => HttpResponse::Created().json(answer),
        false => HttpResponse::Ok().json(answer),
    })
}

/// `PUT /demo/lesson8/faults`'s body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ReceiverFaults {
    /// Deliveries in a row the receiver records and applies, then answers 500.
    #[schema(minimum = 0, maximum = 3)]
    lose_answers: i32,
    /// `false`: each delivery is applied without recording its event.
    inbox: bool,
}

/// The body, or `None`. A whole number as JSON Schema's `integer` counts
/// it (`1.0` is 1), as the document promises.
fn parse_faults(body: &[u8]) -> Option<ReceiverFaults> {
    let mut value: serde_json::Value = serde_json::from_slice(body).ok()?;
    if let Some(n) = value.get_mut("lose_answers")
        && let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() <= 1e6)
    {
        *n = json!(f as i64);
    }
    serde_json::from_value(value)
        .ok()
        .filter(|f: &ReceiverFaults| (0..=MAX_LOST_ANSWERS).contains(&f.lose_answers))
}

/// Demo mode only: how the sandbox's receiver misbehaves: `lose_answers`
/// (0 to 3) deliveries in a row are recorded and applied, then answered
/// 500; with `inbox: false` the receiver applies each delivery without
/// recording its event.
#[utoipa::path(put, path = "/demo/lesson8/faults", tag = "demo",
    request_body(content = ReceiverFaults, content_type = "application/json"),
    responses(
        (status = 200, description = "`{\"lose_answers\", \"inbox\"}`: as set"),
        (status = 400, description = "`invalid-request`: not that body", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
pub async fn lesson8_faults(
    req: HttpRequest,
    body: web::Bytes,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let faults = parse_faults(&body).ok_or_else(|| {
        ApiError::invalid(format!(
            "Send {{\"lose_answers\": 0 to {MAX_LOST_ANSWERS}, \"inbox\": true or false}}."
        ))
    })?;
    let ReceiverFaults {
        lose_answers,
        inbox,
    } = faults;
    on_your_connection(&req, &app, &sandbox, move |store, account_id| {
        store.transaction(|tx| -> Result<(), ApiError> {
            receiver::receiver_of(tx, account_id)?;
            Ok(receiver::set_faults(tx, account_id, lose_answers, inbox)?)
        })
    })
    .await?;
    Ok(HttpResponse::Ok().json(json!({"lose_answers": lose_answers, "inbox": inbox})))
}

/// The rows the view is made of, read at once.
struct Rows {
    receiver: Option<receiver::ReceiverRow>,
    secrets: Vec<String>,
    events: Vec<receiver::EventView>,
    attempts: Vec<receiver::AttemptView>,
    inbox: Vec<receiver::InboxView>,
    payments: Vec<receiver::PaymentView>,
}

fn read_rows(store: &mut dyn Store, account_id: i64) -> Result<Rows, ApiError> {
    queries::read_at_once(store, |tx| {
        let receiver = receiver::find_receiver_of(tx, account_id)?;
        let secrets = match receiver.as_ref().and_then(|r| r.endpoint_id.as_deref()) {
            Some(endpoint) => receiver::endpoint_secrets(tx, account_id, endpoint)?,
            None => Vec::new(),
        };
        Ok(Rows {
            receiver,
            secrets,
            events: receiver::event_views(tx, account_id, LIMIT)?,
            attempts: receiver::attempt_views(tx, account_id, LIMIT)?,
            inbox: receiver::inbox_views(tx, account_id, LIMIT)?,
            payments: receiver::payment_views(tx, account_id, LIMIT)?,
        })
    })
}

/// Demo mode only: the sandbox's receiver as the page shows it, every
/// number from the rows: its events and how their delivery stands, every
/// attempt (its `webhook-id`, `webhook-timestamp`, the signature it
/// carried, the status answered), the inbox rows and the payments applied.
#[utoipa::path(get, path = "/demo/lesson8/receiver", tag = "demo", responses(
    (status = 200, description = "`{\"receiver\", \"retry_schedule_seconds\", \"events\", \"attempts\", \"inbox\", \"payments\"}`"),
))]
pub async fn lesson8_receiver(
    req: HttpRequest,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let rows = on_your_connection(&req, &app, &sandbox, read_rows).await?;
    let schedule: Vec<f64> = app
        .settings
        .webhooks
        .retry_schedule
        .iter()
        .map(Duration::as_secs_f64)
        .collect();
    Ok(HttpResponse::Ok().json(view(rows, schedule)))
}

fn view(rows: Rows, schedule: Vec<f64>) -> Value {
    let secrets: Vec<Secret> = rows
        .secrets
        .iter()
        .filter_map(|s| Secret::parse(s).ok())
        .collect();
    let secrets: Vec<&Secret> = secrets.iter().collect();
    // Each event's id as `webhook-id` carries it, and its body as sent.
    let sent: Vec<(Uuid, String, String, &receiver::EventView)> = rows
        .events
        .iter()
        .filter_map(|e| {
            let id = Uuid::parse_str(&e.id).ok()?;
            let body = events::body(&id, &e.event_type, &e.created_at, &e.data);
            Some((id, events::public_id(&id), body, e))
        })
        .collect();
    let attempts: Vec<Value> = rows
        .attempts
        .iter()
        .map(|a| {
            let event = sent.iter().find(|(id, ..)| id.to_string() == a.event_id);
            // The sender signs each attempt anew: the same id and body,
            // the attempt's timestamp.
            let signature = event.map(|(_, public, body, _)| {
                signature_header(&secrets, public, a.webhook_timestamp, body.as_bytes())
            });
            json!({
                "webhook_id": event.map(|(_, public, ..)| public),
                "event_type": event.map(|(.., e)| &e.event_type),
                "attempt": a.attempt,
                "webhook_timestamp": a.webhook_timestamp,
                "webhook_signature": signature,
                "attempted_at": a.attempted_at,
                "response_status": a.response_status,
                "error": a.error,
            })
        })
        .collect();
    json!({
        "receiver": rows.receiver.map(|r| json!({
            "id": r.receiver_id,
            "path": format!("/demo/receivers/{}", r.receiver_id),
            "endpoint_id": r.endpoint_id,
            "lose_answers": r.lose_answers,
            "inbox": r.inbox,
        })),
        "retry_schedule_seconds": schedule,
        "tolerance_seconds": idempotency::webhook::TOLERANCE.as_secs(),
        "events": sent.iter().map(|(_, public, body, e)| json!({
            "id": public,
            "type": e.event_type,
            "created_at": e.created_at,
            "delivery": e.delivery_status.as_ref().map(|status| json!({
                "status": status,
                "attempts": e.delivery_attempts,
            })),
            "body": body,
        })).collect::<Vec<_>>(),
        "attempts": attempts,
        "inbox": rows.inbox,
        "payments": rows.payments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_faults_body_is_an_object_of_a_count_up_to_three_and_a_switch() {
        let parsed = |b: &str| parse_faults(b.as_bytes()).map(|f| (f.lose_answers, f.inbox));
        assert_eq!(
            parsed(r#"{"lose_answers": 2, "inbox": true}"#),
            Some((2, true))
        );
        assert_eq!(
            parsed(r#"{"lose_answers": 1.0, "inbox": false}"#),
            Some((1, false))
        );
        for bad in [
            r#""""#,
            "null",
            r#"{"lose_answers": 4, "inbox": true}"#,
            r#"{"lose_answers": 1.5, "inbox": true}"#,
            r#"{"lose_answers": 1}"#,
            r#"{"lose_answers": 1, "inbox": true, "other": 1}"#,
        ] {
            assert_eq!(parsed(bad), None, "{bad}");
        }
    }
}
