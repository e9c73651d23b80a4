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

/// docs/api.md, as a reader copies it.
const API_MD: &str = include_str!("../../docs/api.md");

/// The rows of docs/api.md's table whose header row is `header`, as cells.
fn table(header: &str) -> Vec<Vec<String>> {
    let rows: Vec<Vec<String>> = API_MD
        .lines()
        .skip_while(|line| *line != header)
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            // `\|` is a pipe inside a cell.
            let line = line.replace("\\|", "\u{0}");
            let cells = line.trim_matches('|').split('|');
            cells.map(|c| c.trim().replace('\u{0}', "|")).collect()
        })
        .collect();
    assert!(!rows.is_empty(), "docs/api.md has a table headed {header}");
    rows
}

/// The code spans of a cell.
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// docs/api.md's problem table is `http::problem::TYPES`: every type the
/// server answers, with its status, and nothing else.
#[test]
fn the_problem_table_in_the_docs_is_the_servers() {
    let documented: BTreeSet<(String, u16)> = table("| type | status | when |")
        .iter()
        .map(|row| {
            let slug = spans(&row[0])[0].strip_prefix("/problems/").unwrap();
            (slug.to_owned(), row[1].parse().unwrap())
        })
        .collect();
    let served: BTreeSet<(String, u16)> = charges::http::problem::TYPES
        .iter()
        .map(|t| (t.slug.to_owned(), t.status))
        .collect();
    assert_eq!(
        documented, served,
        "docs/api.md's problem table and http::problem::TYPES differ"
    );
}

/// Each row of docs/api.md's table of requests lists exactly the statuses
/// the OpenAPI document (demo mode on) gives its operations, and every
/// operation outside the demo has a row.
#[tokio::test]
async fn the_status_lists_in_the_docs_are_the_documents() {
    let app = spawn_app().await;
    let doc: Value = app.get_json("/openapi.json").await;
    let mut named = BTreeSet::new();
    for row in table("| request | answers |") {
        let mut statuses = BTreeSet::new();
        for span in spans(&row[0]) {
            let Some((method, path)) = span.split_once(" /") else {
                continue;
            };
            let path = format!("/{}", path.split('?').next().unwrap());
            if path == "/metrics" {
                // On METRICS_BIND, not in the API's document.
                continue;
            }
            let operation = &doc["paths"][&path][method.to_lowercase()];
            assert!(
                operation.is_object(),
                "docs/api.md names {method} {path}, which the document does not have"
            );
            statuses.extend(operation["responses"].as_object().unwrap().keys().cloned());
            named.insert((method.to_owned(), path));
        }
        let listed: BTreeSet<String> = spans(&row[1])
            .into_iter()
            .filter(|s| s.len() == 3 && s.bytes().all(|b| b.is_ascii_digit()))
            .map(str::to_owned)
            .collect();
        assert_eq!(listed, statuses, "docs/api.md's statuses for {}", row[0]);
    }
    let production: BTreeSet<(String, String)> = registered_routes()
        .into_iter()
        .filter(|(_, path)| !charges::http::is_demo_route(path))
        .collect();
    assert_eq!(
        named, production,
        "docs/api.md's table of requests and the routes differ"
    );
}

/// Every problem type the server answers is documented on the operations
/// that answer it (`method-not-allowed` answers what no operation is).
#[tokio::test]
async fn every_problem_type_is_documented_where_it_is_answered() {
    let app = spawn_app().await;
    let doc = app.get("/openapi.json").await.body;
    for kind in charges::http::problem::TYPES {
        if kind.slug != "method-not-allowed" {
            assert!(
                doc.contains(&format!("`{}`", kind.slug)),
                "{} is documented",
                kind.slug
            );
        }
    }
}
