//! The OpenAPI document is the contract: every route the app registers is in
//! it, and what it promises about POST /charges is what the app answers.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::spawn_app;

/// (METHOD, path) for every route of `http::ROUTES`, the table every
/// resource is mounted from (`http::resource` panics on a path not in it).
/// HEAD is every GET's, answered by the GET handler, and not documented as
/// an operation of its own.
fn registered_routes() -> BTreeSet<(String, String)> {
    charges::http::ROUTES
        .iter()
        .flat_map(|(path, allow)| {
            allow
                .split(", ")
                .filter(|method| *method != "HEAD")
                .map(move |method| (method.to_owned(), (*path).to_owned()))
        })
        .collect()
}

crate::on_both_backends! {
    async fn every_registered_route_is_in_the_openapi_document_and_nothing_else_is() {
        let app = spawn_app().await;
        let doc: Value = app.get_json("/openapi.json").await;
        assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
        let documented: BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .map(|m| (m.to_uppercase(), path.clone()))
            })
            .collect();
        let registered = registered_routes();
        assert!(
            registered.len() >= 12,
            "the route table lists the routes: {registered:?}"
        );
        assert_eq!(
            registered, documented,
            "registered routes and the OpenAPI paths differ"
        );

        // And each documented route is really served (not the catch-all 404).
        for (method, path) in &documented {
            let path = path
                .replace("{id}", "00000000-0000-0000-0000-000000000000")
                .replace("{slug}", "not-found")
                .replace("{key}", "k");
            let r = app
                .send(app.request(method.parse().unwrap(), &path).bearer_auth("sk_test_demo"))
                .await;
            let route_missing = r.status == 404
                && r.body.contains("There is nothing at this address")
                && !path.starts_with("/charges/")
                && !path.starts_with("/demo/keys");
            assert!(
                !route_missing,
                "{method} {path} is documented but not served"
            );
        }
    }

    async fn the_document_describes_the_idempotency_contract() {
        let app = spawn_app().await;
        let doc: Value = app.get_json("/openapi.json").await;
        let post = &doc["paths"]["/charges"]["post"];
        let key = post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .expect("the header is documented");
        assert_eq!(key["in"], "header");
        let description = key["description"].as_str().unwrap();
        assert!(description.contains("Structured Field string") && description.contains("24 hours"));
        for status in [
            "201", "400", "401", "409", "413", "415", "422", "500", "503",
        ] {
            assert!(
                post["responses"][status].is_object(),
                "POST /charges documents {status}"
            );
        }
        assert!(post["responses"]["201"]["headers"]["Idempotent-Replayed"].is_object());
        assert!(post["responses"]["409"]["headers"]["Retry-After"].is_object());
        assert!(doc["components"]["schemas"]["Problem"].is_object());
        assert!(doc["components"]["securitySchemes"]["api_key"].is_object());
        assert!(
            doc["info"]["description"]
                .as_str()
                .unwrap()
                .contains("24 hours on this server")
        );

        let page = app.get("/docs").await;
        assert_eq!(page.status, 200);
        assert!(page.body.contains("/openapi.json"));
        assert!(
            !page.body.contains("https://"),
            "the reference page loads nothing from elsewhere"
        );
    }
}
