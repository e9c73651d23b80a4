//! The OpenAPI 3.1 contract, generated from the handlers' annotations, at
//! `/openapi.json`, and a reference page for it at `/docs` (no CDN).

use actix_web::{HttpResponse, web};
use utoipa::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "charges",
        description = "An idempotent demo payment API. `POST /charges` with an `Idempotency-Key` runs at most once per key: \
a retry with the same key and request gets the stored 201 (byte-identical, with `Idempotent-Replayed: true`), the same key \
with another request gets 422, and a retry while the first is still running waits and then replays (atomic mode) or gets \
409 (key-first mode). Keys are remembered for 24 hours by default. Errors are `application/problem+json` (RFC 9457).",
    ),
    paths(
        crate::charges::create,
        crate::charges::list,
        crate::charges::get,
        crate::ops::healthz,
        crate::ops::readyz,
        crate::ops::problem_type,
        crate::ops::metrics,
        document,
        reference_page,
        crate::demo::config,
        crate::demo::state,
        crate::demo::reset,
        crate::demo::expire,
        crate::demo::purge,
    ),
    components(schemas(crate::problem::Problem, crate::domain::FieldError)),
    modifiers(&Security),
    tags(
        (name = "charges", description = "Payments, with Idempotency-Key"),
        (name = "operations", description = "Health, metrics, problem types, this document"),
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

/// The document, with the retention period this server actually uses.
pub fn build(state: &AppState) -> utoipa::openapi::OpenApi {
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
    if state.demo {
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
    doc
}

/// This OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1", content_type = "application/json")))]
pub async fn document(state: web::Data<AppState>) -> HttpResponse {
    HttpResponse::Ok().json(build(&state))
}

/// A browsable reference rendered from `/openapi.json`, with no external assets.
#[utoipa::path(get, path = "/docs", tag = "operations", responses((status = 200, description = "HTML", content_type = "text/html")))]
pub async fn reference_page() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("text/html; charset=utf-8")
        .body(include_str!("../web/docs.html"))
}
