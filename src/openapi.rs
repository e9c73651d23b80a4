//! The OpenAPI 3.1 contract, generated from the handlers' annotations, at
//! `/openapi.json`, and a reference page for it at `/docs` (no CDN).
//!
//! One source for each part: the bodies' schemas derive from the domain's
//! constants (`http::charges`, `http::refunds`); every problem
//! response from [`ANSWERS`], which says where each problem type of
//! `http::problem::TYPES` is answered (a test holds `docs/api.md` to both);
//! the demo's routes and problems from `demo::openapi`, added only when the
//! demo is mounted.

use actix_web::{HttpResponse, web};
use serde_json::Value;
use utoipa::OpenApi;
use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, HeaderBuilder, Ref, RefOr, Response, ResponseBuilder};

use crate::http::problem::Answered::{
    Authenticated, By, ByTheDatabase, Everywhere, Keyed, OnACharge, WithABody,
};
use crate::http::problem::{
    ACCOUNT_REVOKED, Answer, Answered, CARD_DECLINED, CHARGE_NOT_REFUNDABLE, CONTENT_TYPE,
    DEADLINE_EXCEEDED, HOST_NOT_ALLOWED, IDEMPOTENCY_KEY_IN_FLIGHT, IDEMPOTENCY_KEY_REUSED,
    INTERNAL, INVALID_IDEMPOTENCY_KEY, INVALID_REQUEST, NETWORK_UNAVAILABLE, NOT_FOUND,
    PAYLOAD_TOO_LARGE, Problem, ProblemType, RATE_LIMITED, REFUND_EXCEEDS_CHARGE,
    REQUEST_NOT_RECOVERABLE, REQUEST_TIMEOUT, SERVICE_UNAVAILABLE, TYPES, UNAUTHORIZED,
    UNSUPPORTED_CONTENT_ENCODING, UNSUPPORTED_MEDIA_TYPE, WEBHOOK_ENDPOINT_LIMIT,
    WEBHOOK_TARGET_NOT_ALLOWED, retries_after,
};
use crate::http::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "charges",
        description = "An idempotent demo payment API. `POST /charges` with an `Idempotency-Key` runs at most once per key: \
a retry with the same key and request gets the stored 201 (byte-identical, with `Idempotent-Replayed: true`), the same key \
with another request gets 422, and a retry while the first is still running waits and then replays (atomic mode) or gets \
409 (key-first mode). Keys are remembered for 24 hours by default. A declined card (a declining test payment method) is an answer too: a failed charge and a 402 `card-declined`, stored under the key and replayed like a 201; a new attempt, with another card, needs a new key. Lists page by `limit`, `starting_after` or `ending_before`, and `has_more`, newest first. Refunds (`POST /charges/{id}/refunds`) run under the \
same protocol. A charge is first authorized at a card network (unless the server runs without one), under an \
Idempotency-Key of the network's derived from yours (the same account and key give the same network key), so a retry \
after a lost answer is a replay at the network too: one authorization per key; its id is the charge's `authorization_id`. \
A request whose worker died after the network authorized is finished by the server's recovery task once its key's lease \
has run out, and your retry then replays it. Errors are `application/problem+json` (RFC 9457).",
    ),
    paths(
        crate::http::charges::create,
        crate::http::charges::list,
        crate::http::charges::get,
        crate::http::charges::set_description,
        crate::http::refunds::create,
        crate::http::refunds::list,
        // events and webhook endpoints (#48)
        crate::http::webhooks::events_api::list,
        crate::http::webhooks::events_api::get,
        crate::http::webhooks::endpoints::create,
        crate::http::webhooks::endpoints::list,
        crate::http::webhooks::endpoints::get,
        crate::http::webhooks::endpoints::delete,
        crate::http::webhooks::endpoints::rotate_secret,
        // webhook deliveries
        crate::http::webhooks::deliveries::list,
        crate::http::webhooks::deliveries::redeliver,
        crate::http::ops::healthz,
        crate::http::ops::readyz,
        crate::http::ops::problem_type,
        document,
        reference_page,
    ),
    components(schemas(Problem, crate::payments::domain::FieldError)),
    modifiers(&Security),
    tags(
        (name = "charges", description = "Payments, with Idempotency-Key"),
        (name = "events", description = "What happened to the account's charges, written in their transactions"),
        (name = "webhooks", description = "Endpoints the events are sent to, signed (Standard Webhooks)"),
        (name = "operations", description = "Health, problem types, this document"),
        (name = "webhooks", description = "Events sent to your endpoints, signed as Standard Webhooks says; see docs/webhooks.md"),
    )
)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <api key>`; `charges account create <name>` makes one",
                    ))
                    .build(),
            ),
        );
    }
}

/// Where this server's problem types are answered, and what they mean
/// there; the demo adds its own ([`crate::demo::openapi::ANSWERS`]).
/// `method-not-allowed` is the answer to what no operation is.
#[rustfmt::skip]
pub const ANSWERS: &[Answer] = &[
    answer(&INVALID_REQUEST, Authenticated, "a header given twice"),
    answer(&INVALID_REQUEST, WithABody, "a field or the JSON (see `errors`)"),
    answer(&INVALID_REQUEST, By(&["list", "list_refunds", "list_events", "list_webhook_endpoints"]), "`limit` out of range, `starting_after` and `ending_before` both, a cursor that is no row of this list, or an unknown query parameter"),
    answer(&INVALID_REQUEST, By(&["list_events"]), "a `type` that is no event type"),
    answer(&INVALID_REQUEST, By(&["create_webhook_endpoint"]), "a `url` whose host does not resolve"),
    answer(&WEBHOOK_TARGET_NOT_ALLOWED, By(&["create_webhook_endpoint"]), "the URL's host resolves to an address webhooks are not sent to (loopback, private, link-local, multicast, unspecified, reserved: the detail names the range), `http://` where only `https://` is allowed, or any URL on a demo hosted for others"),
    answer(&WEBHOOK_ENDPOINT_LIMIT, By(&["create_webhook_endpoint"]), "the account has 16 endpoints already; stored under the key like a 201"),
    answer(&INVALID_REQUEST, By(&["create"]), "card details (a card number, a `card` object): refused and kept nowhere, this demo never takes a real card"),
    answer(&INVALID_IDEMPOTENCY_KEY, Keyed, "malformed, or given twice"),
    answer(&REFUND_EXCEEDS_CHARGE, By(&["create_refund"]), "more than is left of the charge; stored under the key like a 201"),
    answer(&CHARGE_NOT_REFUNDABLE, By(&["create_refund"]), "the charge failed (was declined), so nothing can be refunded; stored under the key like a 201"),
    answer(&CARD_DECLINED, By(&["create"]), "a declining test payment method (`decline_code`, and `charge`: the failed charge's id): the failed charge is recorded, and this answer is stored under the key and replayed like a 201 (`Idempotent-Replayed: true`); a new attempt needs a new key"),
    answer(&UNAUTHORIZED, Authenticated, "no API key, or an unknown one"),
    answer(&ACCOUNT_REVOKED, By(&["create_webhook_endpoint", "rotate_webhook_endpoint_secret"]), "the request was left unfinished by a crash and the account revoked before the recovery task completed it; stored under the key"),
    answer(&ACCOUNT_REVOKED, By(&["create"]), "the account was revoked while the charge waited on the card network (or was left unfinished by a crash): nothing charged, the network's authorization voided; stored under the key"),
    answer(&NOT_FOUND, OnACharge, "no such charge for this account (also another account's)"),
    answer(&NOT_FOUND, By(&["get_event"]), "no such event for this account (also another account's, or an id not spelled `evt_…` as given)"),
    answer(&NOT_FOUND, By(&["get_webhook_endpoint", "delete_webhook_endpoint", "rotate_webhook_endpoint_secret"]), "no such webhook endpoint for this account (also another account's, or one deleted)"),
    answer(&NOT_FOUND, By(&["event_deliveries", "redeliver_event"]), "no such event for this account (also another account's)"),
    answer(&NOT_FOUND, By(&["create_refund"]), "stored under the key, like every answer of the operation"),
    answer(&REQUEST_TIMEOUT, WithABody, "the body did not arrive within BODY_TIMEOUT (10 s by default)"),
    answer(&IDEMPOTENCY_KEY_IN_FLIGHT, Keyed, "the key's first request is still running (key-first mode; in atomic mode, only when it still runs at this request's deadline)"),
    answer(&IDEMPOTENCY_KEY_IN_FLIGHT, By(&["create"]), "or it took the key over while the card network was asked"),
    answer(&PAYLOAD_TOO_LARGE, WithABody, "over 16 KiB"),
    answer(&UNSUPPORTED_MEDIA_TYPE, WithABody, "the body is not `application/json` (UTF-8)"),
    answer(&UNSUPPORTED_CONTENT_ENCODING, WithABody, "the body is compressed (the answer carries `Accept-Encoding: identity`)"),
    answer(&IDEMPOTENCY_KEY_REUSED, Keyed, "the key was used with a different request (body or endpoint)"),
    answer(&RATE_LIMITED, Everywhere, "this client address (RATE_LIMIT_PER_CLIENT) or account (RATE_LIMIT_PER_ACCOUNT) sent more requests than it may; nothing was done or stored; retry after `Retry-After` seconds"),
    answer(&INTERNAL, ByTheDatabase, "nothing was changed; retrying is safe"),
    answer(&REQUEST_NOT_RECOVERABLE, Keyed, "the key's request was left unfinished and cannot be run again; final, stored under the key"),
    answer(&SERVICE_UNAVAILABLE, ByTheDatabase, "the database is unreachable or busy; retry after `Retry-After` seconds, with the same Idempotency-Key"),
    answer(&DEADLINE_EXCEEDED, ByTheDatabase, "the database did not answer within REQUEST_TIMEOUT, the outcome is unknown; retry with the same Idempotency-Key"),
    answer(&NETWORK_UNAVAILABLE, By(&["create"]), "the card network did not answer, nothing was stored; retry with the same Idempotency-Key"),
];

/// What demo mode adds to every operation: it answers only this machine's
/// names (see `http::hosts`).
#[rustfmt::skip]
pub const DEMO_MODE_ANSWERS: &[Answer] = &[
    answer(&HOST_NOT_ALLOWED, Everywhere, "demo mode: the request's `Host` names neither loopback (`localhost`, `127.0.0.1`, `[::1]`) nor one of ALLOWED_HOSTS; nothing was done"),
];

const fn answer(kind: &'static ProblemType, answered: Answered, note: &'static str) -> Answer {
    Answer {
        kind,
        answered,
        note,
    }
}

/// The operations that read no database: nothing but the rate limit stands
/// between them and their answer.
const STATIC: &[&str] = &["healthz", "problem_type", "document", "reference_page"];

/// Whether this operation answers what `answered` says.
fn answers(path: &str, operation: &Operation, answered: Answered) -> bool {
    let id = operation.operation_id.as_deref().unwrap_or_default();
    let mut parameters = operation.parameters.iter().flatten();
    match answered {
        Everywhere => true,
        ByTheDatabase => !STATIC.contains(&id),
        Authenticated => operation.security.is_some(),
        WithABody => operation.request_body.is_some(),
        Answered::ChargeWrites => path.starts_with("/charges") && operation.request_body.is_some(),
        Keyed => parameters.any(|p| p.name == "Idempotency-Key"),
        OnACharge => path.starts_with("/charges/{id}"),
        By(ids) => ids.contains(&id),
    }
}

/// Documents, for every operation, every problem it can answer: one
/// response per status, naming each problem type and what it means there.
fn document_problems<'a>(
    doc: &mut utoipa::openapi::OpenApi,
    table: impl Iterator<Item = &'a Answer> + Clone,
) {
    for (path, item) in doc.paths.paths.iter_mut() {
        for operation in operations(item) {
            let mut notes: Vec<(&ProblemType, Vec<&str>)> = Vec::new();
            for a in table
                .clone()
                .filter(|a| answers(path, operation, a.answered))
            {
                match notes.iter_mut().find(|(kind, _)| *kind == a.kind) {
                    Some((_, those)) => those.push(a.note),
                    None => notes.push((a.kind, vec![a.note])),
                }
            }
            for (kind, those) in notes {
                let text = format!("`{}`: {}", kind.slug, those.join(", "));
                let status = kind.status.to_string();
                let responses = &mut operation.responses.responses;
                match responses.get_mut(&status) {
                    Some(RefOr::T(response)) => add_to(response, kind, &text),
                    _ => {
                        responses.insert(status, RefOr::T(problem_response(kind, text)));
                    }
                }
            }
        }
    }
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.patch,
    ]
    .into_iter()
    .flatten()
}

/// A problem+json response for one problem type.
fn problem_response(kind: &ProblemType, description: String) -> Response {
    let mut response = ResponseBuilder::new()
        .description(description)
        .content(
            CONTENT_TYPE,
            Content::new(Some(Ref::from_schema_name("Problem"))),
        )
        .build();
    add_to(&mut response, kind, "");
    response
}

/// Another problem type under the same status.
fn add_to(response: &mut Response, kind: &ProblemType, text: &str) {
    if !text.is_empty() {
        response.description = format!("{}; {text}", response.description);
    }
    if retries_after(kind) && !response.headers.contains_key("Retry-After") {
        let seconds = ObjectBuilder::new()
            .schema_type(Type::Integer)
            .minimum(Some(0));
        let header = HeaderBuilder::new()
            .schema(seconds)
            .description(Some("seconds"));
        response
            .headers
            .insert("Retry-After".to_owned(), header.build());
    }
}

/// The document, with the retention period this server actually uses, and
/// the demo's parts when the demo is mounted.
pub fn build(state: &AppState, demo: bool) -> Value {
    let mut doc = ApiDoc::openapi();
    let secs = state.settings.idempotency_ttl.as_secs();
    let ttl = match secs {
        s if s % 3600 == 0 => format!("{} hours", s / 3600),
        s if s % 60 == 0 => format!("{} minutes", s / 60),
        s => format!("{s} seconds"),
    };
    doc.info.description = doc
        .info
        .description
        .map(|d| d.replace("24 hours by default", &format!("{ttl} on this server")));
    let (demo_answers, demo_mode): (&[Answer], &[Answer]) = if demo {
        crate::demo::openapi::add(&mut doc);
        (crate::demo::openapi::ANSWERS, DEMO_MODE_ANSWERS)
    } else {
        (&[], &[])
    };
    let table = ANSWERS.iter().chain(demo_answers).chain(demo_mode);
    document_problems(&mut doc, table);
    let mut doc = serde_json::to_value(doc).expect("the document serializes");
    // What a client does next with a charge: the links the stateful tests
    // follow. (utoipa 5.5 writes a link's `operationId` as `operation_id`.)
    let link = |id: &str, what: &str| serde_json::json!({"operationId": id, "parameters": {"id": "$response.body#/id"}, "description": what});
    doc["paths"]["/charges"]["post"]["responses"]["201"]["links"] = serde_json::json!({
        "GetChargeById": link("get", "The charge just created (or replayed)."),
        "RefundCharge": link("create_refund", "Refund part of it."),
        "ListRefunds": link("list_refunds", "Its refunds."),
        "SetDescription": link("set_description", "Set its description."),
    });
    // A rotation's body may be left out (utoipa's `request_body` cannot say
    // so without making it nullable, and `null` is a 400).
    doc["paths"]["/webhook_endpoints/{id}/rotate_secret"]["post"]["requestBody"]["required"] =
        Value::Bool(false);
    // The problem types `/problems/{slug}` serves.
    let slugs: Vec<&str> = TYPES.iter().map(|t| t.slug).collect();
    doc["paths"]["/problems/{slug}"]["get"]["parameters"][0]["schema"] =
        serde_json::json!({"type": "string", "enum": slugs});
    // webhook deliveries: what a receiver gets (OpenAPI 3.1's `webhooks`).
    doc["webhooks"] = webhooks_section();
    doc
}

/// OpenAPI 3.1's top-level `webhooks`: the `POST` an endpoint receives for
/// each event, its three Standard Webhooks headers and its body.
fn webhooks_section() -> Value {
    let header = |name: &str, description: &str, schema: Value| serde_json::json!({"name": name, "in": "header", "required": true, "description": description, "schema": schema});
    serde_json::json!({"event": {"post": {
        "operationId": "receive_event",
        "tags": ["webhooks"],
        "summary": "An event, as your endpoint receives it",
        "description": "Sent at least once: until your endpoint answers a 2xx, on WEBHOOK_RETRY_SCHEDULE (by default 8 attempts over 27 h 35 min, with up to 10 % jitter). No redirect is followed (a 3xx is a failed attempt); 410 Gone disables the endpoint. Every attempt of one event carries the same `webhook-id`: record it under a unique constraint in the transaction of your effect (the idempotency crate's inbox) and answer 2xx to a repeat. Ordering between events is not promised.",
        "parameters": [
            header("webhook-id", "The event's id, the same on every attempt: dedupe by it.", serde_json::json!({"type": "string", "pattern": "^evt_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"})),
            header("webhook-timestamp", "Unix seconds of this attempt; refuse one more than 5 minutes from your clock.", serde_json::json!({"type": "string", "pattern": "^[0-9]+$"})),
            header("webhook-signature", "Space-separated `v1,<base64 HMAC-SHA256 of \"{webhook-id}.{webhook-timestamp}.{body}\">` entries, keyed with the base64-decoded part of your `whsec_` secret; two while a rotated secret's grace lasts. Compare in constant time.", serde_json::json!({"type": "string", "pattern": "^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$"})),
        ],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {
            "type": "object",
            "required": ["id", "object", "type", "created_at", "data"],
            "properties": {
                "id": {"type": "string", "description": "`evt_…`, as in `webhook-id`"},
                "object": {"const": "event"},
                "type": {"enum": crate::payments::events::TYPES},
                "created_at": {"type": "string", "format": "date-time"},
                "data": {"type": "object", "required": ["object"], "properties": {"object": {"type": "object", "description": "The charge (or, for charge.refunded, the refund) as it was when the event happened"}}},
            },
        }}}},
        "responses": {
            "2XX": {"description": "Delivered: no further attempt"},
            "410": {"description": "Gone: the endpoint is disabled, its pending deliveries fail"},
            "default": {"description": "Any other answer, none within WEBHOOK_TIMEOUT (10 s), or no connection: retried"},
        },
    }}})
}

/// This OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json")))]
pub async fn document(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(build(&state, state.demo))
}

/// A browsable reference rendered from `/openapi.json`, with no external assets.
#[utoipa::path(get, path = "/docs", tag = "operations", responses((status = 200, description = "HTML", content_type = "text/html")))]
pub async fn reference_page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(include_str!("../web/docs.html"))
}
