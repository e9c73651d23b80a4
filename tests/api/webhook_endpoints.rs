//! `/webhook_endpoints` (#48): registration under the Idempotency-Key
//! protocol (a replay is the same 201, secret and all; the same key with
//! another body is a 422), the secret shown in that answer only, the URL's
//! checks (scheme, length, where its host resolves), the limit of 16 per
//! account held under concurrency, list/get/delete, and the secret's
//! rotation with an optional body.

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{AppClient, Captured, spawn_app, spawn_app_with};

/// A URL the tests' servers accept: demo mode on loopback allows loopback
/// and http:// (nothing listens there; nothing is sent by these tests).
pub const HOOK: &str = "http://127.0.0.1:9/hook";

/// `POST /webhook_endpoints` with `body` as `app`'s account.
pub async fn register<'k>(
    app: &AppClient,
    key: impl Into<Option<&'k str>>,
    body: &Value,
) -> Captured {
    let request = app.write_request(
        Method::POST,
        "/webhook_endpoints",
        app.api_key(),
        key,
        body,
        &[],
    );
    app.send(request).await
}

/// A registered endpoint for `events`; its id.
pub async fn endpoint_for(app: &AppClient, events: &[&str]) -> String {
    let made = register(app, None, &json!({"url": HOOK, "enabled_events": events})).await;
    assert_eq!(made.status, 201, "{}", made.body);
    made.json()["id"].as_str().unwrap().to_owned()
}

async fn rotate(app: &AppClient, key: Option<&str>, id: &str, body: Option<&str>) -> Captured {
    let mut request = app
        .request(
            Method::POST,
            &format!("/webhook_endpoints/{id}/rotate_secret"),
        )
        .bearer_auth(app.api_key());
    if let Some(key) = key {
        request = request.header("idempotency-key", format!("\"{key}\""));
    }
    if let Some(body) = body {
        request = request
            .header("content-type", "application/json")
            .body(body.to_owned());
    }
    app.send(request).await
}

async fn delete(client: &AppClient, path: &str) -> Captured {
    client
        .send(
            client
                .request(Method::DELETE, path)
                .bearer_auth(client.api_key()),
        )
        .await
}

/// The secrets reach no log line, even at `RUST_LOG=debug`: not the
/// registration's, not a rotation's.
#[tokio::test]
async fn no_secret_reaches_the_log() {
    let db = crate::support::TestDatabase::create();
    let env = [
        ("RUST_LOG", "debug"),
        ("WEBHOOK_ALLOW_PRIVATE_TARGETS", "true"),
        ("WEBHOOK_ALLOW_HTTP", "true"),
    ];
    let server = crate::support::ServerProcess::start(&db.url, &env);
    db.create_test_account();
    let client = server.client();
    let made = register(
        &client,
        "k-logged",
        &json!({"url": HOOK, "enabled_events": ["*"]}),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let id = made.json()["id"].as_str().unwrap().to_owned();
    let rotated = rotate(&client, Some("k-logged-rotation"), &id, None).await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert!(
        register(
            &client,
            "k-logged",
            &json!({"url": HOOK, "enabled_events": ["*"]})
        )
        .await
        .replayed()
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.log_lines("request finished").len() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let logs = server.logs();
    assert!(server.log_lines("request finished").len() >= 3, "{logs}");
    for secret in [&made.json()["secret"], &rotated.json()["secret"]] {
        let secret = secret.as_str().unwrap();
        let encoded = secret.trim_start_matches("whsec_");
        assert!(!logs.contains(encoded), "the log holds a secret");
    }
    assert!(!logs.contains("whsec_"));
}

/// Hosted for others (`--public`, PostgreSQL only): no URL a visitor
/// gives is registered, unless DEMO_PUBLIC_WEBHOOKS.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_demo_hosted_for_others_registers_no_url_unless_its_operator_allows_it() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let body = json!({"url": HOOK, "enabled_events": ["*"]});
            let app = spawn_app_with(|s| s.demo_public = true).await;
            let sandbox = app.new_sandbox().await;
            let r = register(&sandbox, None, &body).await;
            r.assert_problem(400, "webhook-target-not-allowed");
            assert!(
                r.json()["detail"]
                    .as_str()
                    .unwrap()
                    .contains("DEMO_PUBLIC_WEBHOOKS")
            );
            assert_eq!(app.count("webhook_endpoints"), 0);
            let open = spawn_app_with(|s| {
                s.demo_public = true;
                s.webhooks.demo_public_webhooks = true;
                s.webhooks.allow_private_targets = true;
                s.webhooks.allow_http = true;
            })
            .await;
            assert_eq!(
                register(&open.new_sandbox().await, None, &body)
                    .await
                    .status,
                201
            );
        })
        .await
}

crate::on_both_backends! {
    async fn a_registration_under_a_key_answers_one_201_with_the_secret_and_replays_it_byte_for_byte() {
        let app = spawn_app().await;
        let body = json!({"url": HOOK, "enabled_events": ["charge.succeeded", "charge.refunded"], "description": "shop"});
        let first = register(&app, "k-hook", &body).await;
        assert_eq!(first.status, 201, "{}", first.body);
        let made = first.json();
        assert_eq!(made["object"], "webhook_endpoint");
        assert_eq!(made["url"], HOOK);
        assert_eq!(made["enabled_events"], json!(["charge.succeeded", "charge.refunded"]));
        assert_eq!(made["description"], "shop");
        assert_eq!(made["status"], "enabled");
        let secret = made["secret"].as_str().unwrap();
        let key = charges::idempotency::webhook::signature::Secret::parse(secret).expect("a whsec_ secret");
        assert_eq!(format!("{key:?}"), "Secret(…)");
        let id = made["id"].as_str().unwrap();
        assert_eq!(first.header("location"), Some(format!("/webhook_endpoints/{id}").as_str()));

        let again = register(&app, "k-hook", &body).await;
        assert_eq!((again.status, again.replayed()), (201, true));
        assert_eq!(again.body, first.body, "the same bytes, the secret included");
        assert_eq!(app.count("webhook_endpoints"), 1);
        let other = json!({"url": HOOK, "enabled_events": ["*"]});
        register(&app, "k-hook", &other).await.assert_problem(422, "idempotency-key-reused");

        // Nowhere else: not in GET, not in the list.
        let shown = app.get_as(app.api_key(), &format!("/webhook_endpoints/{id}")).await;
        assert_eq!(shown.status, 200);
        assert!(!shown.body.contains(secret) && shown.json().get("secret").is_none(), "{}", shown.body);
        let list = app.get_as(app.api_key(), "/webhook_endpoints").await;
        assert!(!list.body.contains("whsec_"), "{}", list.body);
        assert_eq!(list.json()["data"][0]["id"], id);
    }

    async fn every_field_is_checked_before_anything_is_written() {
        let app = spawn_app().await;
        for body in [
            json!({"url": "/relative", "enabled_events": ["*"]}),
            json!({"url": "ftp://example.com/", "enabled_events": ["*"]}),
            json!({"url": format!("https://example.com/{}", "a".repeat(2048)), "enabled_events": ["*"]}),
            json!({"url": HOOK, "enabled_events": []}),
            json!({"url": HOOK, "enabled_events": ["charge.created"]}),
            json!({"url": HOOK, "enabled_events": ["*", "charge.failed"]}),
            json!({"url": HOOK, "enabled_events": ["charge.failed", "charge.failed"]}),
            json!({"url": HOOK, "enabled_events": ["*"], "secret": "whsec_mine"}),
            json!({"url": HOOK}),
            json!(null),
        ] {
            register(&app, "k-bad", &body).await.assert_problem(400, "invalid-request");
        }
        assert_eq!(app.count("webhook_endpoints"), 0);
        assert_eq!(app.db.keys(), 0, "a refused body takes no key");
    }

    async fn a_private_or_plain_http_target_is_refused_where_the_operator_has_not_allowed_it() {
        let app = spawn_app_with(|s| s.demo = Some(false)).await;
        for (url, range) in [
            ("https://127.0.0.1/hook", "loopback"),
            ("https://localhost:8443/hook", "loopback"),
            ("https://[::1]/hook", "loopback"),
            ("https://10.0.0.7/hook", "private"),
            ("https://169.254.169.254/latest/meta-data", "link-local"),
            ("https://0.0.0.0/", "unspecified"),
            ("http://93.184.215.14/hook", "https://"),
        ] {
            let r = register(&app, None, &json!({"url": url, "enabled_events": ["*"]})).await;
            r.assert_problem(400, "webhook-target-not-allowed");
            assert!(r.json()["detail"].as_str().unwrap().contains(range), "{url}: {}", r.body);
        }
        assert_eq!(app.count("webhook_endpoints"), 0);
        let open = spawn_app_with(|s| {
            s.demo = Some(false);
            s.webhooks.allow_private_targets = true;
            s.webhooks.allow_http = true;
        })
        .await;
        endpoint_for(&open, &["*"]).await;
    }

    async fn an_account_has_at_most_sixteen_endpoints_even_when_they_are_registered_at_once() {
        let app = spawn_app().await;
        let body = json!({"url": HOOK, "enabled_events": ["*"]});
        let keys: Vec<String> = (0..20).map(|i| format!("k-many-{i}")).collect();
        let answers = futures::future::join_all(keys.iter().map(|k| register(&app, k.as_str(), &body))).await;
        let made = answers.iter().filter(|r| r.status == 201).count();
        let full = answers.iter().filter(|r| r.problem_type().as_deref() == Some("/problems/webhook-endpoint-limit")).count();
        assert_eq!((made, full), (16, 4), "{:?}", answers.iter().map(Captured::summary).collect::<Vec<_>>());
        assert_eq!(app.count("webhook_endpoints"), 16);
        // The 409 is the key's answer, replayed.
        let (i, _) = answers.iter().enumerate().find(|(_, r)| r.status == 409).unwrap();
        let again = register(&app, keys[i].as_str(), &body).await;
        assert_eq!((again.status, again.replayed()), (409, true));
        // Another account has room of its own.
        app.db.create_account("Other", "sk_live_other_endpoints");
        endpoint_for(&app.as_account("sk_live_other_endpoints"), &["*"]).await;
    }

    async fn an_endpoint_is_deleted_once_and_only_by_its_account() {
        let app = spawn_app().await;
        let id = endpoint_for(&app, &["*"]).await;
        let other = app.as_account("sk_live_other_for_delete");
        app.db.create_account("Other", "sk_live_other_for_delete");
        let path = format!("/webhook_endpoints/{id}");
        delete(&other, &path).await.assert_problem(404, "not-found");
        other.get_as(other.api_key(), &path).await.assert_problem(404, "not-found");
        let gone = delete(&app, &path).await;
        assert_eq!(gone.status, 200, "{}", gone.body);
        assert_eq!(gone.json(), json!({"id": id, "object": "webhook_endpoint", "deleted": true}));
        delete(&app, &path).await.assert_problem(404, "not-found");
        app.get_as(app.api_key(), &path).await.assert_problem(404, "not-found");
        app.get_as(app.api_key(), &path.to_uppercase()).await.assert_problem(404, "not-found");
    }

    async fn a_rotation_shows_the_new_secret_once_keeps_the_old_one_a_while_and_replays_under_its_key() {
        let app = spawn_app().await;
        let made = register(&app, None, &json!({"url": HOOK, "enabled_events": ["*"]})).await.json();
        let (id, old) = (made["id"].as_str().unwrap(), made["secret"].as_str().unwrap());

        let first = rotate(&app, Some("k-rotate"), id, None).await;
        assert_eq!(first.status, 200, "{}", first.body);
        let new = first.json()["secret"].as_str().unwrap().to_owned();
        assert_ne!(new, old);
        assert!(first.json()["previous_secret_expires_at"].is_string());
        let again = rotate(&app, Some("k-rotate"), id, None).await;
        assert_eq!((again.status, again.replayed(), &again.body), (200, true, &first.body));
        let kept = app.db.strings(&format!("SELECT previous_secret AS value FROM webhook_endpoints WHERE secret = '{new}'"));
        assert_eq!(kept, [old.to_owned()], "the old secret signs too, for a while");

        // `{}` and a number of seconds are bodies too; `null` and more than a day are not.
        assert_eq!(rotate(&app, None, id, Some("{}")).await.status, 200);
        let now = rotate(&app, None, id, Some(r#"{"expire_previous_in": 0}"#)).await;
        assert_eq!(now.status, 200, "{}", now.body);
        for bad in ["null", r#"{"expire_previous_in": 86401}"#, r#"{"expire_previous_in": -1}"#, r#"{"other": 1}"#, "[]"] {
            rotate(&app, None, id, Some(bad)).await.assert_problem(400, "invalid-request");
        }
        let missing = "00000000-0000-4000-8000-000000000000";
        rotate(&app, Some("k-missing"), missing, None).await.assert_problem(404, "not-found");
    }

    async fn endpoints_are_listed_newest_first_a_page_at_a_time() {
        let app = spawn_app().await;
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(endpoint_for(&app, &["charge.failed"]).await);
        }
        let page = app.get_json("/webhook_endpoints?limit=2").await;
        assert_eq!(page["has_more"], true);
        assert_eq!(page["data"][0]["id"], ids[2].as_str());
        assert_eq!(page["data"][1]["id"], ids[1].as_str());
        let next = app.get_json(&format!("/webhook_endpoints?limit=2&starting_after={}", ids[1])).await;
        assert_eq!((next["has_more"].clone(), next["data"][0]["id"].clone()), (json!(false), json!(ids[0])));
        app.get_as(app.api_key(), "/webhook_endpoints?status=enabled").await.assert_problem(400, "invalid-request");
    }
}
