//! `GET /events` and `GET /events/{id}`: the account's events, as the
//! outbox wrote them in their charges' transactions. An event's JSON is
//! `payments::events::body`'s, the bytes every delivery of it sends.

use actix_web::{HttpRequest, HttpResponse, web};
use utoipa::openapi::{RefOr, Schema};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use crate::http::charges::ChargeView;
use crate::http::paging::{ListRequest, Listed};
use crate::http::problem::ApiError;
use crate::http::state::AppState;
use crate::payments::events::{TYPES, parse_public_id};
use crate::store::Event;

pub const PATH: &str = "/events";

/// What GET /events pages over: `type` filters, ids are `evt_…`.
const LISTED: Listed = Listed {
    filter: "type",
    values: &TYPES,
    id: parse_public_id,
};

/// An event: something that happened to one of the account's charges,
/// told once to each endpoint subscribed to its type.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // Documentation only: written by `payments::events::body`.
pub struct EventView {
    #[schema(schema_with = event_id)]
    id: String,
    /// Always `"event"`.
    #[schema(example = "event")]
    object: &'static str,
    #[serde(rename = "type")]
    #[schema(schema_with = event_type)]
    type_: String,
    /// RFC 3339, UTC, microseconds: when it happened (in the transaction of what it describes).
    #[schema(example = "2026-12-02T14:47:33.173074Z")]
    created_at: String,
    data: EventData,
}

/// What the event is about.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct EventData {
    /// The charge as `GET /charges/{id}` showed it when the event happened (after the refund, for `charge.refunded`).
    object: ChargeView,
}

#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct EventList {
    /// Always `"list"`.
    object: &'static str,
    /// Always `"/events"`.
    url: &'static str,
    /// Whether there are more beyond this page, in the direction paged (as for charges).
    has_more: bool,
    /// Newest first.
    data: Vec<EventView>,
}

/// The schema of an event's id: `evt_` and a lowercase hyphenated UUID.
pub fn event_id() -> utoipa::openapi::schema::ObjectBuilder {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .pattern(Some(
            "^evt_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        ))
        .examples([serde_json::json!(
            "evt_0b9c7c5e-6a0e-4f4e-9d4e-6f1f2d3c4b5a"
        )])
}

/// The schema of an event's type.
pub fn event_type() -> utoipa::openapi::schema::ObjectBuilder {
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(TYPES))
}

/// An event's id in a path or a cursor.
pub struct EventIdParam;

impl PartialSchema for EventIdParam {
    fn schema() -> RefOr<Schema> {
        event_id()
            .description(Some("As the API gives it out: `evt_` and a lowercase, hyphenated UUID. Any other spelling names no event."))
            .into()
    }
}

impl ToSchema for EventIdParam {}

/// An event type, as the `type` filter takes it.
pub struct EventTypeParam;

impl PartialSchema for EventTypeParam {
    fn schema() -> RefOr<Schema> {
        event_type().into()
    }
}

impl ToSchema for EventTypeParam {}

/// The caller's events, newest first, a page at a time.
#[utoipa::path(
    get, path = "/events", tag = "events", operation_id = "list_events",
    params(
        ("limit" = Option<i64>, Query, description = "1 to 100, default 20", minimum = 1, maximum = 100),
        ("starting_after" = inline(Option<EventIdParam>), Query, description = "The page after this event: older ones. Not with `ending_before`."),
        ("ending_before" = inline(Option<EventIdParam>), Query, description = "The page before this event: newer ones. Not with `starting_after`."),
        ("type" = inline(Option<EventTypeParam>), Query, description = "Only the events of this type"),
    ),
    responses(
        (status = 200, body = EventList),
    ),
    security(("api_key" = []))
)]
pub async fn list(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let list = ListRequest::parse_for(req.query_string(), LISTED)?;
    let (events, has_more) = state
        .db(&req, move |store| {
            let page =
                list.page(|id| Ok(store.find_event(account_id, id)?.map(|e| e.created_at)))?;
            Ok(list.finish(store.list_events(account_id, &page)?))
        })
        .await?;
    // Each event's bytes as stored, spliced in: the list shows what
    // `GET /events/{id}` and every delivery show.
    let data: Vec<String> = events.iter().map(Event::body).collect();
    let body = format!(
        r#"{{"object":"list","url":"{PATH}","has_more":{has_more},"data":[{}]}}"#,
        data.join(",")
    );
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(body))
}

/// One of the caller's events.
#[utoipa::path(
    get, path = "/events/{id}", tag = "events", operation_id = "get_event",
    params(("id" = inline(EventIdParam), Path)),
    responses(
        (status = 200, body = EventView),
    ),
    security(("api_key" = []))
)]
pub async fn get(
    req: HttpRequest,
    path: web::Path<String>,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let account_id = state.accounts.authenticate(&req, &state.pool).await?;
    let id: Uuid = parse_public_id(&path).ok_or(ApiError::NotFound)?;
    let event = state
        .db(&req, move |store| Ok(store.find_event(account_id, id)?))
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(event.body()))
}
