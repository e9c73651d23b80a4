//! The routes the application mounts, and among them [`KEYED`], the writes
//! that run under an Idempotency-Key: each mounted from its row, which also
//! says how the recovery task runs again a request its key row kept. One
//! table for both, so a keyed route cannot be mounted without a way back
//! in, nor recovered by a rule of its own.

use std::sync::Arc;

use actix_web::dev::{Path, ResourceDef};
use actix_web::http::Method;
use actix_web::middleware::{Condition, from_fn};
use actix_web::{Route, web};

use super::recovery::{self, Kept};
use crate::demo;
use crate::http::ops;
use crate::http::webhooks::{deliveries, endpoints, events_api};
use crate::http::{charges, get, refunds, resource, resource_in};
use crate::network_client::NetworkClient;
use crate::openapi;
use crate::store::{Store, StuckKey};
use idempotency::Operation;

/// An operation rebuilt from a stuck key's kept request.
pub type Rebuilt = Box<dyn Operation<dyn Store>>;

/// A write under an Idempotency-Key: its method and route template (one of
/// `http::ROUTES`), its handler, and the operation a stuck key of it was
/// registered for, rebuilt from the request its row kept.
pub struct KeyedRoute {
    pub method: Method,
    pub template: &'static str,
    /// The handler, on a route for `method`.
    pub handler: fn(Route) -> Route,
    /// `None`: the kept request can no longer be run here.
    pub rebuild: fn(&Kept<'_>) -> Option<Rebuilt>,
}

/// Every keyed write the API has.
pub const KEYED: &[KeyedRoute] = &[
    KeyedRoute {
        method: Method::POST,
        template: "/charges",
        handler: |r| r.to(charges::create),
        rebuild: recovery::charge,
    },
    KeyedRoute {
        method: Method::POST,
        template: "/charges/{id}/refunds",
        handler: |r| r.to(refunds::create),
        rebuild: recovery::refund,
    },
    KeyedRoute {
        method: Method::POST,
        template: "/webhook_endpoints",
        handler: |r| r.to(endpoints::create),
        rebuild: recovery::endpoint,
    },
    KeyedRoute {
        method: Method::POST,
        template: "/webhook_endpoints/{id}/rotate_secret",
        handler: |r| r.to(endpoints::rotate_secret),
        rebuild: recovery::rotation,
    },
];

/// The route [`KEYED`] has for `template`, as mounted.
fn keyed(template: &str) -> Route {
    let row = KEYED
        .iter()
        .find(|k| k.template == template)
        .unwrap_or_else(|| panic!("{template} is not in KEYED"));
    (row.handler)(web::method(row.method.clone()))
}

/// The operation a stuck key was registered for: the row of [`KEYED`]
/// whose method and template match the request it kept (with the
/// template's `{id}`), rebuilt. `network` is the foreign step it was
/// registered with.
pub fn operation_for(
    method: &Method,
    stuck: &StuckKey,
    network: Option<Arc<NetworkClient>>,
) -> Option<Rebuilt> {
    KEYED
        .iter()
        .filter(|row| row.method == *method)
        .find_map(|row| {
            let mut path = Path::new(stuck.path.as_str());
            ResourceDef::new(row.template)
                .capture_match_info(&mut path)
                .then(|| {
                    let id = path.get("id").map(str::to_owned);
                    (row.rebuild)(&Kept {
                        stuck,
                        id,
                        network: network.clone(),
                    })
                })
        })
        .flatten()
}

/// The API's routes. The charge routes are one scope: in demo mode the
/// demo's middleware is mounted on it, once, and `POST /charges` has the
/// demo's check-then-insert route besides.
pub fn routes(cfg: &mut web::ServiceConfig, demo: bool) {
    let at = |path| resource_in(charges::PATH, path);
    let mut create = at("/charges");
    if demo {
        create = create.route(demo::check_then_insert_route());
    }
    cfg.service(
        web::scope(charges::PATH)
            .wrap(Condition::new(demo, from_fn(demo::faults)))
            .service(
                create
                    .route(keyed("/charges"))
                    .route(get().to(charges::list)),
            )
            .service(at("/charges/{id}").route(get().to(charges::get)))
            // The charge's other writes take the demo's faults too (lesson 2).
            .service(
                at("/charges/{id}/refunds")
                    .route(keyed("/charges/{id}/refunds"))
                    .route(get().to(refunds::list)),
            )
            .service(
                at("/charges/{id}/description").route(web::put().to(charges::set_description)),
            ),
    );
    // events and webhook endpoints (#48): plain resources, outside the
    // charges' scope (the demo's faults act on charges only).
    cfg.service(resource("/events").route(get().to(events_api::list)));
    cfg.service(resource("/events/{id}").route(get().to(events_api::get)));
    cfg.service(
        resource("/webhook_endpoints")
            .route(keyed("/webhook_endpoints"))
            .route(get().to(endpoints::list)),
    );
    cfg.service(
        resource("/webhook_endpoints/{id}")
            .route(get().to(endpoints::get))
            .route(web::delete().to(endpoints::delete)),
    );
    cfg.service(
        resource("/webhook_endpoints/{id}/rotate_secret")
            .route(keyed("/webhook_endpoints/{id}/rotate_secret")),
    );
    // webhook deliveries: an event's attempts, and sending it again.
    cfg.service(resource("/events/{id}/deliveries").route(get().to(deliveries::list)));
    cfg.service(resource("/events/{id}/redeliver").route(web::post().to(deliveries::redeliver)));
    cfg.service(resource("/healthz").route(get().to(ops::healthz)));
    cfg.service(resource("/readyz").route(get().to(ops::readyz)));
    cfg.service(resource("/problems/{slug}").route(get().to(ops::problem_type)));
    cfg.service(resource("/openapi.json").route(get().to(openapi::document)));
    cfg.service(resource("/docs").route(get().to(openapi::reference_page)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ROUTES;

    #[test]
    fn every_keyed_route_is_a_post_of_the_route_table() {
        for row in KEYED {
            assert_eq!(row.method, recovery::KEPT_METHOD, "{}", row.template);
            let (_, allow) = ROUTES
                .iter()
                .find(|(path, _)| *path == row.template)
                .unwrap_or_else(|| panic!("{} is not in http::ROUTES", row.template));
            assert!(allow.split(", ").any(|m| m == row.method.as_str()));
        }
    }

    #[test]
    fn a_kept_request_is_found_by_its_route_template() {
        let stuck = |path: &str, body| StuckKey {
            account_id: 1,
            key: "k".to_owned(),
            fingerprint: String::new(),
            path: path.to_owned(),
            body,
            foreign_step: None,
        };
        let refund = serde_json::json!({"amount": 100});
        let id = "0b6f7e0c-58f6-4a55-9b7a-4d1c1d2d3e4f";
        let found = |path: &str, method: &Method| {
            operation_for(method, &stuck(path, refund.clone()), None).is_some()
        };
        assert!(found(&format!("/charges/{id}/refunds"), &Method::POST));
        assert!(!found(&format!("/charges/{id}/refunds"), &Method::PUT));
        for path in [
            "/charges/not-an-id/refunds",
            &format!("/charges/{id}/refunds/"),
            &format!("/charges/{id}/description"),
            "/charges/",
            "/elsewhere",
        ] {
            assert!(!found(path, &Method::POST), "{path}");
        }
    }
}
