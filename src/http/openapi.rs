//! The OpenAPI 3.1 contract, generated from the handlers' annotations, at
//! `/openapi.json`, and a reference page for it at `/docs` (no CDN).

use actix_web::{HttpResponse, web};
use serde_json::{Value, json};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::idempotency::key::{HEADER_PATTERN, MAX_LEN, VALUE_PATTERN};
use crate::payments::domain::{
    CURRENCIES, DESCRIPTION_PATTERN, MAX_AMOUNT, MAX_DESCRIPTION_CHARS, MIN_AMOUNT,
};

use crate::http::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "charges",
        description = "An idempotent demo payment API. `POST /charges` with an `Idempotency-Key` runs at most once per key: \
a retry with the same key and request gets the stored 201 (byte-identical, with `Idempotent-Replayed: true`), the same key \
with another request gets 422, and a retry while the first is still running waits and then replays (atomic mode) or gets \
409 (key-first mode). Keys are remembered for 24 hours by default. Refunds (`POST /charges/{id}/refunds`) run under the \
same protocol. A charge is first authorized at a card network (unless the server runs without one), under an \
Idempotency-Key of the network's derived from yours (the same account and key give the same network key), so a retry \
after a lost answer is a replay at the network too: one authorization per key; its id is the charge's `authorization_id`. \
A request whose worker died after the network authorized is finished by the server's recovery task once its key's lease \
has run out, and your retry then replays it. Errors are `application/problem+json` (RFC 9457).",
    ),
    paths(
        crate::payments::charges::create,
        crate::payments::charges::list,
        crate::payments::charges::get,
        crate::payments::charges::set_description,
        crate::payments::refunds::create,
        crate::payments::refunds::list,
        crate::http::ops::healthz,
        crate::http::ops::readyz,
        crate::http::ops::problem_type,
        document,
        reference_page,
        crate::demo::config,
        crate::demo::state,
        crate::demo::reset,
        crate::demo::expire,
        crate::demo::purge,
    ),
    components(schemas(crate::http::problem::Problem, crate::payments::domain::FieldError)),
    modifiers(&Security),
    tags(
        (name = "charges", description = "Payments, with Idempotency-Key"),
        (name = "operations", description = "Health, problem types, this document"),
        (name = "demo", description = "Demo mode only (DEMO=true): the teaching page's views of the database"),
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

/// The document, with the retention period this server actually uses, and
/// exactly what this server accepts and answers (see [`exact`]).
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
    if demo {
        if let Some(scheme) = doc
            .components
            .as_mut()
            .and_then(|c| c.security_schemes.get_mut("api_key"))
            && let SecurityScheme::Http(http) = scheme
        {
            http.description = Some(
                "`Authorization: Bearer <api key>`; in demo mode the demo account's key is `sk_test_demo`"
                    .to_owned(),
            );
        }
    } else {
        // Nothing of demo mode is routed: none of it is documented.
        doc.paths
            .paths
            .retain(|path, _| !path.starts_with("/demo/"));
        if let Some(tags) = doc.tags.as_mut() {
            tags.retain(|t| t.name != "demo");
        }
    }
    let mut doc = serde_json::to_value(doc).expect("the document serializes");
    exact(&mut doc, demo);
    doc
}

/// What the annotations cannot say, written from the code's own rules and
/// constants, so that the document is the contract a client can test
/// against: every field's limits, the key's grammar, every status an
/// operation can answer.
fn exact(doc: &mut Value, demo: bool) {
    doc["components"]["schemas"]["ChargeRequestBody"] = json!({
        "type": "object",
        "description": "The body of `POST /charges`. An unknown member, or a member given twice, is a 400.",
        "additionalProperties": false,
        "required": ["amount", "currency"],
        "properties": {
            "amount": {
                "type": "integer",
                "minimum": MIN_AMOUNT,
                "maximum": MAX_AMOUNT,
                "description": "In the currency's minor unit (yen for `jpy`, cents for `usd`). A whole number, as its decimal text says, not the nearest double: `1000.0` and `1e3` are read as 1000; `1000.5` and `0.99999999999999999` are a 400.",
                "examples": [1000],
            },
            "currency": {
                "type": "string",
                "enum": CURRENCIES,
                "description": "A lowercase ISO 4217 code from this list.",
                "examples": ["jpy"],
            },
            "description": {
                "type": ["string", "null"],
                "maxLength": MAX_DESCRIPTION_CHARS,
                "pattern": DESCRIPTION_PATTERN,
                "description": "At most 500 characters; no control characters but tab and line feed.",
                "examples": ["a book"],
            },
        },
    });
    doc["components"]["schemas"]["RefundRequestBody"] = json!({
        "type": "object",
        "description": "The body of `POST /charges/{id}/refunds`. An unknown member, or a member given twice, is a 400.",
        "additionalProperties": false,
        "required": ["amount"],
        "properties": {
            "amount": {
                "type": "integer",
                "minimum": MIN_AMOUNT,
                "maximum": MAX_AMOUNT,
                "description": "In the charge's currency's minor unit, a whole number as for a charge (`100.0` is 100, `99.99999999999999999` is a 400); more than is left of the charge is a 400 `refund-exceeds-charge`.",
                "examples": [100],
            },
        },
    });
    doc["components"]["schemas"]["DescriptionBody"] = json!({
        "type": "object",
        "description": "The body of `PUT /charges/{id}/description`: the whole new value. An unknown member, or a member given twice, is a 400.",
        "additionalProperties": false,
        "required": ["description"],
        "properties": {
            "description": {
                "type": ["string", "null"],
                "maxLength": MAX_DESCRIPTION_CHARS,
                "pattern": DESCRIPTION_PATTERN,
                "description": "At most 500 characters; no control characters but tab and line feed; `null` removes it.",
                "examples": ["a book, gift-wrapped"],
            },
        },
    });
    let problem = |description: &str| {
        json!({
            "description": description,
            "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
        })
    };
    let unavailable = problem(
        "`service-unavailable`: the database is unreachable or busy; `deadline-exceeded`: the database did not answer within REQUEST_TIMEOUT, the outcome is unknown; `network-unavailable` (creating a charge): the card network did not answer, nothing was stored. Retry after `Retry-After` seconds, with the same Idempotency-Key",
    );
    let internal = problem("`internal`: nothing was changed; retrying is safe");
    let mut rate_limited = problem(
        "`rate-limited`: this client address (RATE_LIMIT_PER_CLIENT) or account (RATE_LIMIT_PER_ACCOUNT) sent more requests than it may; nothing was done or stored; retry after `Retry-After` seconds",
    );
    rate_limited["headers"] =
        json!({"Retry-After": {"description": "seconds", "schema": {"type": "integer"}}});
    let Some(paths) = doc["paths"].as_object_mut() else {
        return;
    };
    for (path, item) in paths.iter_mut() {
        for (method, operation) in item.as_object_mut().into_iter().flatten() {
            let responses = &mut operation["responses"];
            // Every route is behind the client's rate limit.
            responses["429"] = rate_limited.clone();
            if demo && path.starts_with("/demo/") && method == "post" {
                responses["403"] = problem(
                    "`cross-site-request`: a browser's request from a page on another site (the demo's routes take no credentials)",
                );
            }
            // Every operation that touches the database.
            if path.starts_with("/charges") || path.starts_with("/demo/") || path == "/readyz" {
                responses["500"] = internal.clone();
                responses["503"] = unavailable.clone();
            }
            if path.starts_with("/charges") {
                responses["400"] = problem(if path.ends_with("/refunds") && method == "post" {
                    "`invalid-request` (a field, the JSON, or a header given twice), `invalid-idempotency-key`, `refund-exceeds-charge` (more than is left of the charge; stored under the key like a 201), or (demo mode) `demo-account-only`"
                } else if method == "post" {
                    "`invalid-request` (a field, the JSON, or a header given twice), `invalid-idempotency-key`, or (demo mode) `demo-account-only`"
                } else if method == "put" {
                    "`invalid-request` (the description, the JSON, or a header given twice), or (demo mode) `demo-account-only`"
                } else if path == "/charges" {
                    "`invalid-request`: `limit` out of range, an unknown query parameter, or a header given twice"
                } else {
                    "`invalid-request`: a header given twice"
                });
            }
        }
    }
    let writes = [
        ("/charges", "post"),
        ("/charges/{id}/refunds", "post"),
        ("/charges/{id}/description", "put"),
    ];
    for (path, method) in writes {
        let operation = &mut paths[path][method];
        if let Some(key) = operation["parameters"]
            .as_array_mut()
            .and_then(|ps| ps.iter_mut().find(|p| p["name"] == "Idempotency-Key"))
        {
            key["schema"] = json!({
                "type": "string",
                "minLength": 1,
                // A quoted key of 255 characters, each escaped.
                "maxLength": 2 * MAX_LEN + 2,
                "pattern": HEADER_PATTERN,
            });
        }
        operation["responses"]["415"] = problem(
            "`unsupported-media-type`: the body is not `application/json` (UTF-8); `unsupported-content-encoding`: the body is compressed (the answer carries `Accept-Encoding: identity`)",
        );
        if demo {
            operation["responses"]["504"] = problem(
                "Demo mode, `Demo-Fault: lose-response`, `abandon` only: `simulated-lost-response`; the work was done (or, for `abandon`, left half done), only the answer was thrown away",
            );
        }
    }
    // What a client does next with a charge: the links the stateful tests follow.
    let by_id = json!({"id": "$response.body#/id"});
    paths["/charges"]["post"]["responses"]["201"]["links"] = json!({
        "GetChargeById": {"operationId": "get", "parameters": by_id, "description": "The charge just created (or replayed)."},
        "RefundCharge": {"operationId": "create_refund", "parameters": by_id, "description": "Refund part of it."},
        "ListRefunds": {"operationId": "list_refunds", "parameters": by_id, "description": "Its refunds."},
        "SetDescription": {"operationId": "set_description", "parameters": by_id, "description": "Set its description."},
    });
    let charge_id = json!({
        "type": "string",
        "format": "uuid",
        "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        "description": "As the API gives it out: lowercase, hyphenated. Any other spelling is a 404.",
    });
    for (path, methods) in [
        ("/charges/{id}", &["get"][..]),
        ("/charges/{id}/refunds", &["get", "post"][..]),
        ("/charges/{id}/description", &["put"][..]),
    ] {
        for method in methods {
            for param in paths[path][*method]["parameters"]
                .as_array_mut()
                .into_iter()
                .flatten()
                .filter(|p| p["name"] == "id")
            {
                param["schema"] = charge_id.clone();
            }
        }
    }
    for param in paths["/problems/{slug}"]["get"]["parameters"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        let slugs: Vec<&str> = crate::http::problem::TYPES.iter().map(|t| t.slug).collect();
        param["schema"] = json!({"type": "string", "enum": slugs});
    }
    if let Some(expire) = paths.get_mut("/demo/keys/{key}/expire") {
        for param in expire["post"]["parameters"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            param["schema"] = json!({"type": "string", "minLength": 1, "maxLength": MAX_LEN, "pattern": VALUE_PATTERN});
        }
    }
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
        .body(include_str!("../../web/docs.html"))
}
