//! The demo's part of the OpenAPI document, added only when the demo is
//! mounted: its routes, its problems on the API's routes, and its key.

use utoipa::OpenApi;
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::security::SecurityScheme;

use crate::http::problem::Answered::{Authenticated, By, ChargeWrites};
use crate::http::problem::{
    Answer, CROSS_SITE_REQUEST, DEMO_ACCOUNT_ONLY, DEMO_ROOM_FULL, DEMO_ROOM_UNKNOWN,
    SIMULATED_LOST_ANSWER, SIMULATED_LOST_RESPONSE, WEBHOOK_NOT_VERIFIED,
};
use idempotency::IdempotencyKey;

#[derive(OpenApi)]
#[openapi(
    paths(
        super::routes::config,
        super::routes::create_sandbox,
        super::routes::state,
        super::routes::slot,
        super::routes::reset,
        super::routes::expire,
        super::routes::purge,
        super::lesson8::lesson8_endpoint,
        super::lesson8::lesson8_faults,
        super::lesson8::lesson8_receiver,
        super::receiver::receive_webhook,
    ),
    tags((name = "demo", description = "Demo mode only (DEMO=true): the teaching page's views of the database")),
)]
struct DemoDoc;

/// Where the demo's problem types are answered (see
/// [`crate::openapi::ANSWERS`]).
pub const ANSWERS: &[Answer] = &[
    Answer {
        kind: &DEMO_ACCOUNT_ONLY,
        answered: Authenticated,
        note: "(demo mode) a `Demo-*` header on another account's request",
    },
    Answer {
        kind: &CROSS_SITE_REQUEST,
        answered: By(&[
            "create_sandbox",
            "reset",
            "expire",
            "purge",
            "lesson8_endpoint",
            "receive_webhook",
        ]),
        note: "a browser's request from a page on another site",
    },
    Answer {
        kind: &DEMO_ROOM_FULL,
        answered: By(&["create_sandbox"]),
        note: "DEMO_MAX_SANDBOXES sandboxes are in use (with `Retry-After`: until the least recently used one expires)",
    },
    Answer {
        kind: &DEMO_ROOM_UNKNOWN,
        answered: By(&["create_sandbox"]),
        note: "a `Demo-Room` code that is not one of DEMO_ROOM_CODES: 403, not 400 (the request is well formed) nor 429 (waiting will not help): the code is refused as it is, and nothing is counted against the address instead",
    },
    Answer {
        kind: &SIMULATED_LOST_RESPONSE,
        answered: ChargeWrites,
        note: "demo mode, `Demo-Fault: lose-response` or `abandon` only: the work was done (or, for `abandon`, left half done), only the answer was thrown away",
    },
    Answer {
        kind: &WEBHOOK_NOT_VERIFIED,
        answered: By(&["receive_webhook"]),
        note: "a webhook header missing, no signature matching under the sandbox's endpoint's secrets (a tampered body), or a timestamp more than 5 minutes from now: nothing was recorded",
    },
    Answer {
        kind: &SIMULATED_LOST_ANSWER,
        answered: By(&["receive_webhook"]),
        note: "the sandbox's receiver fault `lose_answers`: the delivery was recorded and applied, only the answer was thrown away",
    },
];

/// Adds the demo's routes, and says what the demo account's key is.
pub fn add(doc: &mut utoipa::openapi::OpenApi) {
    let mut demo = DemoDoc::openapi();
    // The key a demo route names: any value an Idempotency-Key can have.
    for (path, item) in demo.paths.paths.iter_mut() {
        if !path.starts_with("/demo/keys/") {
            continue;
        }
        for p in item
            .post
            .iter_mut()
            .flat_map(|o| o.parameters.iter_mut().flatten())
        {
            let key = ObjectBuilder::new()
                .schema_type(Type::String)
                .min_length(Some(1));
            p.schema = Some(
                key.max_length(Some(IdempotencyKey::MAX_LEN))
                    .pattern(Some(IdempotencyKey::VALUE_PATTERN))
                    .into(),
            );
        }
    }
    doc.merge(demo);
    let schemes = doc.components.as_mut().map(|c| &mut c.security_schemes);
    if let Some(SecurityScheme::Http(http)) = schemes.and_then(|s| s.get_mut("api_key")) {
        http.description = Some(
            "`Authorization: Bearer <api key>`; in demo mode the demo account's key is `sk_test_demo`"
                .to_owned(),
        );
    }
}
