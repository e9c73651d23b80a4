//! Lesson 8's receiver: `POST /demo/receivers/{id}`, the webhook handler an
//! integrator would write, hosted by the demo for each sandbox and built
//! from the protocol crate as examples/receiver.rs is:
//!
//! ```text
//! 1. verify_request: the signature under the endpoint's secret(s), the
//!    timestamp within 5 minutes; refused (400) before anything is recorded
//! 2. BEGIN
//!      inbox::receive      the event's id under the inbox's primary key
//!      First → the effect  the charge's payment applied once more
//!    COMMIT                both, or neither
//! 3. 2xx for First and for Duplicate: the sender may stop
//! ```
//!
//! The sandbox's faults (`PUT /demo/lesson8/faults`) make it misbehave as
//! the lesson needs: `lose_answers: n` commits, then answers 500 (the
//! sender cannot tell this from a lost answer and retries), and
//! `inbox: false` applies the effect without recording the event, so a
//! redelivery is applied twice.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::Sandbox;
use super::queries::receiver::{self, ReceiverRow};
use crate::http::problem::{
    self, ApiError, NOT_FOUND, SIMULATED_LOST_ANSWER, WEBHOOK_NOT_VERIFIED,
};
use crate::http::state::AppState;
use crate::payments::events::CHARGE_SUCCEEDED;
use crate::store::{AnyConnection, Store};
use idempotency::webhook::{Headers, Received, RequestError, Secret, unix_now, verify_request};

/// What the receiver did with a delivery that verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// Recorded in the inbox now; its effect applied.
    First,
    /// In the inbox already: nothing done again.
    Duplicate,
    /// The inbox is off: the effect applied, nothing recorded.
    WithoutInbox,
}

impl Done {
    fn as_str(self) -> &'static str {
        match self {
            Done::First => "first",
            Done::Duplicate => "duplicate",
            Done::WithoutInbox => "applied-without-inbox",
        }
    }
}

/// A delivery's fate: refused before anything was recorded, or done (and
/// whether its answer is to be lost).
enum Outcome {
    NoReceiver,
    Refused(RequestError),
    Done { done: Done, lose_answer: bool },
}

/// The sandbox's receiver. No API key: the signature is what tells the
/// sandbox's own sender from anyone else (another sandbox's sender signs
/// with another secret, and is refused).
#[utoipa::path(post, path = "/demo/receivers/{id}", tag = "demo",
    params(("id" = String, Path, description = "The sandbox's receiver (`receiver.id` of `GET /demo/lesson8/receiver`)")),
    request_body(content = String, content_type = "application/json", description = "A Standard Webhooks delivery: the event's JSON, with `webhook-id`, `webhook-timestamp` and `webhook-signature`"),
    responses(
        (status = 200, description = "`{\"received\": \"first\" | \"duplicate\" | \"applied-without-inbox\", \"event_id\"}`"),
        (status = 400, description = "`webhook-not-verified`: a header missing, a signature that matches under no secret of the sandbox's endpoint (a tampered body), or a timestamp more than 5 minutes from now; nothing was recorded", body = crate::http::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such receiver", body = crate::http::problem::Problem, content_type = "application/problem+json"),
        (status = 500, description = "`simulated-lost-answer`: the sandbox's fault `lose_answers`: the delivery was recorded and applied, only the answer was thrown away", body = crate::http::problem::Problem, content_type = "application/problem+json"),
    ))]
pub async fn receive_webhook(
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    app: web::Data<AppState>,
    sandbox: web::Data<Sandbox>,
) -> Result<HttpResponse, ApiError> {
    let receiver_id = path.into_inner();
    let headers = Headers::from_actix(req.headers());
    let left = crate::http::limits::deadline_left(&req, app.settings.request_timeout);
    let outcome = sandbox
        .pool
        .run(left, move |store| {
            let Some(row) = receiver::find_receiver(store, &receiver_id)? else {
                return Ok((Outcome::NoReceiver, String::new()));
            };
            let headers = match headers {
                Ok(headers) => headers,
                Err(refused) => return Ok((Outcome::Refused(refused), String::new())),
            };
            deliver(store, &row, &headers, &body)
        })
        .await?;
    Ok(match outcome {
        (Outcome::NoReceiver, _) => problem::response(
            &NOT_FOUND,
            "No sandbox's receiver has this id (POST /demo/lesson8/endpoint makes one, and GET /demo/lesson8/receiver names it).",
            Vec::new(),
        ),
        (Outcome::Refused(refused), _) => problem::response(
            &WEBHOOK_NOT_VERIFIED,
            format!("Not received: {refused}. Nothing was recorded."),
            Vec::new(),
        ),
        (
            Outcome::Done {
                lose_answer: true, ..
            },
            _,
        ) => problem::response(
            &SIMULATED_LOST_ANSWER,
            "The receiver recorded and applied the delivery, then threw its answer away (the sandbox's lose_answers): the sender cannot tell, and sends it again.",
            Vec::new(),
        ),
        (Outcome::Done { done, .. }, event_id) => {
            HttpResponse::Ok().json(json!({"received": done.as_str(), "event_id": event_id}))
        }
    })
}

/// Verifies the delivery, then records it and applies it in one
/// transaction: what it did, and the event's id.
fn deliver(
    store: &mut dyn Store,
    row: &ReceiverRow,
    headers: &Headers,
    body: &[u8],
) -> Result<(Outcome, String), ApiError> {
    // 1. Verify first, under the secrets of the sandbox's own endpoint.
    let texts = match &row.endpoint_id {
        Some(endpoint) => receiver::endpoint_secrets(store, row.account_id, endpoint)?,
        None => Vec::new(),
    };
    let secrets: Vec<Secret> = texts.iter().filter_map(|s| Secret::parse(s).ok()).collect();
    let secrets: Vec<&Secret> = secrets.iter().collect();
    let event_id = match verify_request(&secrets, headers, body, unix_now()) {
        Ok(id) => id.to_owned(),
        Err(refused) => return Ok((Outcome::Refused(refused), String::new())),
    };
    // What the effect needs of the event (a body that verified is the
    // sender's own JSON).
    let event: Value = serde_json::from_slice(body).unwrap_or_default();
    let charge = event["data"]["object"]["id"].as_str().map(str::to_owned);
    let pays = event["type"] == CHARGE_SUCCEEDED;
    let source = receiver::source(row.account_id);
    let (account, inbox) = (row.account_id, row.inbox);
    // 2. The event's id and its effect, in one transaction.
    let outcome = store.transaction(|tx| -> Result<Outcome, ApiError> {
        let done = match inbox {
            true => match record(tx, &source, &event_id)? {
                Received::First => Done::First,
                Received::Duplicate => Done::Duplicate,
            },
            false => Done::WithoutInbox,
        };
        if done != Done::Duplicate
            && pays
            && let Some(charge) = &charge
        {
            receiver::apply_payment(tx, account, charge, &event_id)?;
        }
        let lose_answer = receiver::take_lost_answer(tx, account)?;
        Ok(Outcome::Done { done, lose_answer })
    })?;
    Ok((outcome, event_id))
}

/// The crate's inbox, on the transaction's own connection.
fn record(tx: &mut dyn Store, source: &str, event_id: &str) -> diesel::QueryResult<Received> {
    use idempotency::webhook::inbox::receive;
    match tx.connection() {
        AnyConnection::Pg(c) => receive(c, source, event_id),
        AnyConnection::Sqlite(c) => receive(c, source, event_id),
    }
}
