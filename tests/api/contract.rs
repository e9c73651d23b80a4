//! The OpenAPI document is the contract: every route the app registers is in
//! it and nothing else is; the body schema and the key say exactly what the
//! code checks; every status an operation can answer is documented, and
//! `docs/api.md`'s tables are the document's; the document is plain JSON;
//! and HTTP's own rules hold on every route (a charge has one URI, HEAD is
//! GET without the body). Schemathesis (`.ci/schemathesis`) checks the whole
//! document from outside.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{DEMO_KEY, TEST_KEY, charge_body, spawn_app, spawn_app_with};

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
                && !path.starts_with("/events/")
                && !path.starts_with("/webhook_endpoints/")
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

    async fn the_body_schema_and_the_key_say_exactly_what_the_code_checks() {
        let app = spawn_app().await;
        let doc = app.get_json("/openapi.json").await;
        let body = &doc["components"]["schemas"]["ChargeRequestBody"];
        assert_eq!(body["additionalProperties"], false);
        assert_eq!(body["required"], json!(["amount", "currency"]));
        let amount = &body["properties"]["amount"];
        assert_eq!((amount["type"].as_str(), amount["minimum"].as_i64(), amount["maximum"].as_i64()),
            (Some("integer"), Some(charges::payments::domain::MIN_AMOUNT), Some(charges::payments::domain::MAX_AMOUNT)));
        assert_eq!(body["properties"]["currency"]["enum"], json!(charges::payments::domain::CURRENCIES));
        let description = &body["properties"]["description"];
        assert_eq!(description["maxLength"], charges::payments::domain::MAX_DESCRIPTION_CHARS);
        assert_eq!(description["pattern"], charges::payments::domain::DESCRIPTION_PATTERN);
        let key = doc["paths"]["/charges"]["post"]["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "Idempotency-Key")
            .unwrap()["schema"]
            .clone();
        assert_eq!(key, json!({
            "type": "string",
            "minLength": 1,
            "maxLength": 2 * charges::idempotency::IdempotencyKey::MAX_LEN + 2,
            "pattern": charges::idempotency::IdempotencyKey::HEADER_PATTERN,
        }), "a string, never null, with the parser's grammar");

        // Every currency the document lists is one the server takes.
        for (i, currency) in charges::payments::domain::CURRENCIES.iter().enumerate() {
            let r = app.charge(None, &json!({"amount": 100 + i, "currency": currency})).await;
            assert_eq!(r.status, 201, "{currency}: {}", r.body);
        }
        // And what the pattern refuses, the server refuses.
        let r = app.charge(None, &json!({"amount": 1, "currency": "usd", "description": "bell\u{7}"})).await;
        r.assert_problem(400, "invalid-request");
    }

    async fn every_status_an_operation_can_answer_is_documented() {
        // One connection, held by a delayed demo charge: the reads find none.
        let app = spawn_app_with(|s| {
            s.pool_size = 1;
            s.pool_timeout = Duration::from_millis(300);
        })
        .await;
        let doc = app.get_json("/openapi.json").await;
        let held = app.demo().charge_with("k-held", &charge_body(), &[("demo-fault", "delay-commit=1500")]);
        let reads = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            (app.get_as(DEMO_KEY, "/charges").await, app.get_as(DEMO_KEY, "/charges/00000000-0000-0000-0000-000000000000").await)
        };
        let (held, (list, one)) = tokio::join!(held, reads);
        assert_eq!(held.status, 201);
        for (r, path) in [(list, "/charges"), (one, "/charges/{id}")] {
            r.assert_problem(503, "service-unavailable");
            assert!(doc["paths"][path]["get"]["responses"]["503"].is_object(), "{path} documents 503");
        }
        // Every operation that touches the database documents 500 and 503.
        for (path, item) in doc["paths"].as_object().unwrap() {
            if path.starts_with("/charges") || path.starts_with("/demo/") || path == "/readyz" {
                for (method, op) in item.as_object().unwrap() {
                    for status in ["500", "503"] {
                        assert!(op["responses"][status].is_object(), "{method} {path} documents {status}");
                    }
                }
            }
        }
        assert!(doc["paths"]["/charges"]["get"]["responses"]["400"]["description"]
            .as_str()
            .unwrap()
            .contains("unknown query parameter"));
        // The demo's 504 only where demo mode is on.
        assert!(doc["paths"]["/charges"]["post"]["responses"]["504"].is_object());
        let off = spawn_app_with(|s| s.demo = Some(false)).await;
        let doc = off.demo().get_json("/openapi.json").await;
        assert!(doc["paths"]["/charges"]["post"]["responses"]["504"].is_null());
        assert!(doc["paths"].as_object().unwrap().keys().all(|p| !p.starts_with("/demo/")));
    }

    async fn a_charge_has_one_uri() {
        let app = spawn_app().await;
        let id = app.charge(None, &charge_body()).await.charge_id();
        assert_eq!(app.get_as(TEST_KEY, &format!("/charges/{id}")).await.status, 200);
        for other in [
            id.hyphenated().to_string().to_uppercase(),
            id.simple().to_string(),
            id.braced().to_string(),
            id.urn().to_string(),
        ] {
            app.get_as(TEST_KEY, &format!("/charges/{other}")).await.assert_problem(404, "not-found");
        }
    }

    async fn head_is_get_without_the_body_on_every_get_route() {
        let app = spawn_app().await;
        let id = app.charge(None, &charge_body()).await.charge_id();
        for (path, allow) in charges::http::ROUTES {
            assert_eq!(allow.contains("GET"), allow.contains("HEAD"), "{path}: {allow}");
            if !allow.contains("GET") {
                continue;
            }
            let path = path.replace("{id}", &id.to_string()).replace("{slug}", "not-found");
            let request = |method: Method| app.request(method, &path).bearer_auth(TEST_KEY);
            let get = app.send(request(Method::GET)).await;
            let head = app.send(request(Method::HEAD)).await;
            assert_eq!(head.status, get.status, "HEAD {path}");
            assert_eq!(head.header("content-type"), get.header("content-type"), "HEAD {path}");
            if path != "/demo/state" {
                // (It changes between the requests.)
                assert_eq!(head.header("content-length"), get.header("content-length"), "HEAD {path}");
            }
            assert!(head.body.is_empty(), "HEAD {path} has no body");
        }
        let refused = app.send(app.request(Method::DELETE, "/charges").bearer_auth(TEST_KEY)).await;
        assert_eq!(refused.header("allow"), Some("GET, HEAD, POST"));
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

/// The body of a valid document is also a valid JSON value everywhere: a
/// cheap guard that [`serde_json`] and the document agree (no NaN, no
/// non-string keys) before Schemathesis reads it.
#[tokio::test]
async fn the_document_is_plain_json() {
    let app = spawn_app().await;
    let text = app.get("/openapi.json").await.body;
    let doc: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        charges::http::json::parse_strict(text.as_bytes()).unwrap(),
        doc,
        "no member twice"
    );
}
