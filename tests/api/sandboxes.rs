//! A room of learners (#41): each visitor's sandbox (`POST /demo/sandboxes`)
//! is an account of its own, and nothing of one reaches or reveals another;
//! sandboxes are capped, rate-limited per address, and deleted with all
//! their rows once idle.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{AppClient, Captured, TestApp, charge_body, spawn_app_with};

/// `GET /demo/state` as `who`, without what changes by itself (the clock,
/// the expiry a read moves).
async fn rows(who: &AppClient) -> Value {
    let state = who
        .send(
            who.request(Method::GET, "/demo/state")
                .bearer_auth(who_key(who)),
        )
        .await;
    assert_eq!(state.status, 200, "{}", state.body);
    let mut state = state.json();
    for volatile in ["now", "sandbox", "locks"] {
        state.as_object_mut().unwrap().remove(volatile);
    }
    state
}

fn who_key(who: &AppClient) -> String {
    who.api_key().to_owned()
}

/// The answer, with `ids` (another sandbox's, or made-up ones) written as
/// `<id>`: what is left must not tell the two apart.
fn shape(r: &Captured, ids: &[&str]) -> (u16, String) {
    let mut body = r.body.clone();
    for id in ids {
        body = body.replace(id, "<id>");
    }
    (r.status, body)
}

async fn state_of(who: &AppClient) -> Captured {
    who.send(
        who.request(Method::GET, "/demo/state")
            .bearer_auth(who.api_key()),
    )
    .await
}

async fn post(who: &AppClient, path: &str) -> Captured {
    who.post_as_self(path).await
}

async fn put_description(who: &AppClient, charge: &str) -> Captured {
    let path = format!("/charges/{charge}/description");
    let body = json!({"description": "mine now"});
    who.send(who.write_request(Method::PUT, &path, who.api_key(), None, &body, &[]))
        .await
}

async fn two_sandboxes(app: &TestApp) -> (AppClient, AppClient) {
    (app.new_sandbox().await, app.new_sandbox().await)
}

crate::on_both_backends! {
    /// Every charge route, `/demo/*` route and `Demo-*` fault from sandbox
    /// A, aimed at B's charge ids, keys and routes: B's rows are as they
    /// were, and A hears what it hears for ids that do not exist.
    async fn sandbox_a_aimed_at_b_changes_nothing_of_b_and_learns_nothing_of_it() {
        let app = spawn_app_with(|_| {}).await;
        let (a, b) = two_sandboxes(&app).await;
        let body = charge_body();
        let b_charge = b.charge("kb", &body).await.charge_id().to_string();
        for i in 1..=5 {
            assert_eq!(b.charge(format!("kb-{i}").as_str(), &body).await.status, 201);
        }
        assert_eq!(b.refund("kb-refund", &b_charge, 100).await.status, 201);
        assert_eq!(post(&b, "/demo/keys/kb-refund/expire").await.status, 200);
        b.charge_with("kb-naive", &body, &[("demo-mode", "check-then-insert")]).await;
        let before = rows(&b).await;
        let absent = uuid::Uuid::new_v4().to_string();
        let ids = [b_charge.as_str(), absent.as_str()];

        // The charge routes, on B's charge and on a charge that is nobody's.
        for (theirs, nobodys) in [
            (a.get_as(a.api_key(), &format!("/charges/{b_charge}")).await,
             a.get_as(a.api_key(), &format!("/charges/{absent}")).await),
            (a.get_as(a.api_key(), &format!("/charges/{b_charge}/refunds")).await,
             a.get_as(a.api_key(), &format!("/charges/{absent}/refunds")).await),
            (a.refund("ka-r1", &b_charge, 100).await, a.refund("ka-r2", &absent, 100).await),
            (a.refund_with("ka-r3", &b_charge, &json!({"amount": 1}), &[("demo-fault", "lose-response")]).await,
             a.refund_with("ka-r4", &absent, &json!({"amount": 1}), &[("demo-fault", "lose-response")]).await),
            (put_description(&a, &b_charge).await, put_description(&a, &absent).await),
        ] {
            // 404 (or the lost answer of the lose-response pair: 504 for both).
            assert!(matches!(theirs.status, 404 | 504), "{}", theirs.body);
            assert_eq!(shape(&theirs, &ids), shape(&nobodys, &ids));
        }
        // B's keys under A's key are A's own: a first charge, not B's replay,
        // whatever fault A asks for.
        let a_first = a.charge("kb", &body).await;
        assert_eq!(a_first.status, 201);
        assert!(!a_first.replayed() && !a_first.body.contains(&b_charge), "{}", a_first.body);
        let faults = ["forget-commit", "fail-before-commit", "delay-commit=50", "lose-response", "abandon, lease=1000"];
        for (i, fault) in faults.into_iter().enumerate() {
            let key = format!("kb-{}", i + 1);
            let mut headers = vec![("demo-fault", fault)];
            if fault.starts_with("abandon") {
                headers.push(("demo-mode", "key-first"));
            }
            let r = a.charge_with(key.as_str(), &body, &headers).await;
            assert!(!r.replayed(), "A replayed B's key {key}: {}", r.body);
            assert!(r.status != 409, "A met B's key {key} in flight: {}", r.body);
            assert!(!r.body.contains(&b_charge), "A saw B's charge: {}", r.body);
        }
        let naive = a.charge_with("kb-naive", &body, &[("demo-mode", "check-then-insert")]).await;
        assert_eq!(naive.status, 201);
        assert!(!naive.replayed() && !naive.body.contains(&b_charge), "{}", naive.body);
        // The /demo/* routes act on A's own rows only.
        for key in ["kb", "kb-refund"] {
            let theirs = post(&a, &format!("/demo/keys/{key}-nobody/expire")).await;
            let nobodys = post(&a, "/demo/keys/no-such-key/expire").await;
            assert_eq!(theirs.status, 404);
            assert_eq!(shape(&theirs, &[&format!("{key}-nobody"), "no-such-key"]),
                       shape(&nobodys, &[&format!("{key}-nobody"), "no-such-key"]));
        }
        // B's key names are A's to use; expiring A's "kb" leaves B's alone.
        assert_eq!(post(&a, "/demo/keys/kb/expire").await.status, 200);
        assert_eq!(post(&a, "/demo/purge").await.json()["purged"], 1, "A's own expired key only");
        let seen = rows(&a).await.to_string();
        assert!(!seen.contains(&b_charge), "A's state shows B's charge: {seen}");
        assert_eq!(post(&a, "/demo/reset").await.status, 200);
        assert_eq!(rows(&b).await, before, "B's rows changed");
        assert_eq!(app.count(&format!("charges c WHERE {} = '{b_charge}'", app.db.charge_id_text())), 1);
        // B's own purge still finds its expired key: A's did not take it.
        assert_eq!(post(&b, "/demo/purge").await.json()["purged"], 1);
    }

    /// The `/demo/*` routes and `Demo-*` headers refuse an account that is
    /// no sandbox (400) and a key that is nobody's (401), as before.
    async fn a_real_account_and_an_unknown_key_reach_no_sandbox() {
        let app = spawn_app_with(|_| {}).await;
        let real = app.as_account(crate::support::TEST_KEY);
        for path in ["/demo/reset", "/demo/purge", "/demo/keys/k/expire"] {
            post(&real, path).await.assert_problem(400, "invalid-request");
        }
        real.get_as(crate::support::TEST_KEY, "/demo/state").await.assert_problem(400, "invalid-request");
        real.charge_with("k", &charge_body(), &[("demo-fault", "lose-response")])
            .await
            .assert_problem(400, "demo-account-only");
        let nobody = app.as_account("sk_test_0000000000000000000000000000000000000000000000000000000000000000");
        post(&nobody, "/demo/reset").await.assert_problem(401, "unauthorized");
        nobody.charge("k", &charge_body()).await.assert_problem(401, "unauthorized");
        // A real account's request without Demo-* headers is untouched.
        assert_eq!(real.charge("k-real", &charge_body()).await.status, 201);
    }

    /// Sandboxes idle past DEMO_SANDBOX_IDLE_EXPIRY are deleted by the
    /// purge task with every row of theirs; their key then is a 401.
    async fn an_idle_sandbox_is_deleted_with_all_its_rows_and_its_key_stops_working() {
        let app = spawn_app_with(|s| s.demo_sandbox_idle_expiry = Duration::from_secs(2)).await;
        let (gone, kept) = two_sandboxes(&app).await;
        let body = charge_body();
        // An endpoint: every event of the sandbox owes it a delivery.
        crate::webhook_endpoints::endpoint_for(&gone, &["*"]).await;
        let charge = gone.charge("k1", &body).await.charge_id().to_string();
        assert_eq!(gone.refund("k2", &charge, 10).await.status, 201);
        gone.charge_with("k3", &body, &[("demo-mode", "check-then-insert")]).await;
        gone.charge_with("k4", &body, &[("demo-mode", "key-first")]).await;
        let made = serde_json::from_str::<Value>(&app.post("/demo/sandboxes").await.body).unwrap();
        assert_eq!(made["idle_expiry_seconds"], 2);
        assert_eq!(app.count("webhook_deliveries"), app.count("events"), "one delivery per event");
        assert!(app.count("events") >= 3);
        assert_eq!(app.count("accounts WHERE demo AND id IN (SELECT account_id FROM charges)"), 1);
        // `kept` is used meanwhile: it stays.
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            assert_eq!(rows(&kept).await["charges"].as_array().unwrap().len(), 0);
        }
        for table in ["charges", "refunds", "idempotency_keys", "demo_unguarded_keys", "events", "webhook_endpoints", "webhook_deliveries"] {
            assert_eq!(app.count(&format!("{table} WHERE account_id NOT IN (SELECT id FROM accounts WHERE NOT demo)")), 0, "{table} kept a deleted sandbox's rows");
        }
        assert_eq!(app.count("webhook_attempts WHERE event_id NOT IN (SELECT id FROM events)"), 0);
        assert_eq!(app.count("demo_sandboxes WHERE NOT permanent"), 1, "only the one in use");
        gone.charge("k5", &body).await.assert_problem(401, "unauthorized");
        post(&gone, "/demo/reset").await.assert_problem(401, "unauthorized");
        assert_eq!(post(&kept, "/demo/reset").await.status, 200);
    }

    /// DEMO_MAX_SANDBOXES: past it a clear 503 with Retry-After, and a
    /// place again once one expires.
    async fn a_full_room_answers_503_with_retry_after_and_frees_as_sandboxes_expire() {
        let app = spawn_app_with(|s| {
            s.demo_max_sandboxes = 2;
            s.demo_sandbox_idle_expiry = Duration::from_secs(2);
        }).await;
        two_sandboxes(&app).await;
        let full = app.post("/demo/sandboxes").await;
        full.assert_problem(503, "demo-room-full");
        let wait: u64 = full.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=2).contains(&wait), "Retry-After {wait}");
        let documented = app.get_json("/problems/demo-room-full").await;
        assert_eq!(documented["status"], 503);
        tokio::time::sleep(Duration::from_millis(wait * 1000 + 1500)).await;
        assert_eq!(app.post("/demo/sandboxes").await.status, 201, "a place freed");
    }

    /// `charges sandbox` (an integration's): a key on the demo server's
    /// database whose faults act on that sandbox alone.
    async fn the_cli_makes_a_sandbox_an_integration_points_its_client_at() {
        let app = spawn_app_with(|_| {}).await;
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
            .arg("sandbox")
            .env("DATABASE_URL", &app.db.url)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
        let key = stdout.lines().last().unwrap().trim().to_owned();
        assert!(key.starts_with("sk_test_") && key.len() == 8 + 64, "{stdout}");
        let mine = app.as_account(&key);
        mine.charge_with("k", &charge_body(), &[("demo-fault", "lose-response")])
            .await
            .assert_problem(504, "simulated-lost-response");
        assert!(mine.charge("k", &charge_body()).await.replayed());
        assert_eq!(rows(&mine).await["charges"].as_array().unwrap().len(), 1);
        assert_eq!(app.demo().get_json("/demo/state").await["charges"], json!([]), "the shared account saw it");
    }

    /// DEMO_SANDBOXES_PER_MINUTE per client address: past it a 429.
    async fn making_sandboxes_is_rate_limited_per_client_address() {
        let app = spawn_app_with(|s| s.demo_sandboxes_per_minute = 2).await;
        two_sandboxes(&app).await;
        let refused = app.post("/demo/sandboxes").await;
        refused.assert_problem(429, "rate-limited");
        let wait: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait), "Retry-After {wait}");
        assert_eq!(app.count("demo_sandboxes WHERE NOT permanent"), 2, "nothing made");
    }
}

/// PostgreSQL: the lock waits `/demo/state` shows are the caller's own: B's
/// duplicate waiting on B's held key is in B's view, not in A's.
#[cfg(postgres_tests)]
#[tokio::test]
async fn lock_waits_are_shown_to_their_own_sandbox_only() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let app = spawn_app_with(|_| {}).await;
            let (a, b) = two_sandboxes(&app).await;
            let body = charge_body();
            let held = [("demo-fault", "delay-commit=2500")];
            let (_, _, (mine, theirs)) = tokio::join!(
                b.charge_with("kb", &body, &held),
                async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    b.charge("kb", &body).await
                },
                async {
                    tokio::time::sleep(Duration::from_millis(1200)).await;
                    let (b_view, a_view) = tokio::join!(state_of(&b), state_of(&a));
                    (b_view.json(), a_view.json())
                },
            );
            assert_eq!(
                mine["locks"]["waiting"].as_array().unwrap().len(),
                1,
                "B sees its wait: {}",
                mine["locks"]
            );
            assert_eq!(
                theirs["locks"]["waiting"],
                json!([]),
                "A sees B's wait: {}",
                theirs["locks"]
            );
        })
        .await
}

/// Hosted for others (`--public`): no shared account, no key-less
/// `/demo/*`, and it refuses SQLite and DEMO_ALLOW_CRASH.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_hosted_demo_has_no_shared_key_and_refuses_sqlite_and_crash_faults() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let app = spawn_app_with(|s| s.demo_public = true).await;
            assert_eq!(app.get_json("/demo/config").await["account"], Value::Null);
            assert_eq!(app.get_json("/demo/config").await["public"], true);
            app.demo()
                .charge("k", &charge_body())
                .await
                .assert_problem(401, "unauthorized");
            app.post("/demo/reset")
                .await
                .assert_problem(401, "unauthorized");
            app.get("/demo/state")
                .await
                .assert_problem(401, "unauthorized");
            let mine = app.new_sandbox().await;
            assert_eq!(mine.charge("k", &charge_body()).await.status, 201);
            mine.charge_with(
                "k2",
                &charge_body(),
                &[
                    ("demo-fault", "crash-after-key"),
                    ("demo-mode", "key-first"),
                ],
            )
            .await
            .assert_problem(400, "invalid-request");
        })
        .await;
    let sqlite = crate::support::TestDatabase::create_for(crate::support::TestBackend::Sqlite);
    let postgres = crate::support::TestDatabase::create_for(crate::support::TestBackend::Postgres);
    for (url, crash, refusal) in [
        (&sqlite.url, false, "needs PostgreSQL"),
        (&postgres.url, true, "refuses DEMO_ALLOW_CRASH"),
    ] {
        let mut settings = charges::config::Settings::with_database_url(url);
        settings.bind = "127.0.0.1:0".to_owned();
        settings.demo = Some(true);
        settings.demo_public = true;
        settings.demo_allow_crash = crash;
        settings.network_url = charges::config::NETWORK_OFF.to_owned();
        settings.metrics_bind = "off".to_owned();
        let refused = charges::app::Application::build(settings)
            .err()
            .expect("refused");
        assert!(refused.to_string().contains(refusal), "{refused}");
    }
}

/// Hosted for others without `DEMO_MAX_DELAYED`, the held transactions are
/// capped at a third of the demo's half of `POOL_SIZE` (docs/deploy.md's
/// arithmetic: lesson 4 takes two connections while it holds one), and
/// `/demo/state` tells a sandbox whether it holds one now, which lesson 4
/// waits for before it sends its retry.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_hosted_demo_sizes_its_held_transactions_from_the_pool_and_tells_a_sandbox_it_holds_one()
{
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let app = spawn_app_with(|s| {
                s.demo_public = true;
                s.pool_size = 60;
            })
            .await;
            assert_eq!(
                app.get_json("/demo/config").await["max_delayed_transactions"],
                10
            );
            let (a, b) = two_sandboxes(&app).await;
            let before = a.get_json("/demo/state").await;
            assert_eq!(before["sandbox"]["holds_transaction"], false);
            assert_eq!(before["held_transactions"], json!({"held": 0, "max": 10}));
            let held = [("demo-fault", "delay-commit=1500")];
            let (first, ((mine, theirs), (slot, other_slot))) =
                tokio::join!(a.charge_with("k1", &charge_body(), &held), async {
                    app.until_held(1).await;
                    tokio::join!(
                        async {
                            tokio::join!(a.get_json("/demo/state"), b.get_json("/demo/state"))
                        },
                        async { tokio::join!(a.get_json("/demo/slot"), b.get_json("/demo/slot")) },
                    )
                });
            assert_eq!(first.status, 201);
            // GET /demo/slot, from memory: the hold's time left too.
            assert_eq!(slot["holds_transaction"], true, "{slot}");
            let left = slot["left_ms"].as_u64().unwrap();
            assert!(left > 0 && left < 1500, "{slot}");
            assert_eq!(
                (slot["held"].as_u64(), slot["max"].as_u64()),
                (Some(1), Some(10))
            );
            assert_eq!(other_slot["holds_transaction"], false);
            assert_eq!(other_slot["left_ms"], Value::Null);
            assert_eq!(mine["sandbox"]["holds_transaction"], true, "{mine}");
            assert_eq!(mine["held_transactions"], json!({"held": 1, "max": 10}));
            assert_eq!(theirs["sandbox"]["holds_transaction"], false);
            assert_eq!(theirs["held_transactions"]["held"], 1);
            let after = a.get_json("/demo/state").await;
            assert_eq!(after["sandbox"]["holds_transaction"], false);
            assert_eq!(a.get_json("/demo/slot").await["holds_transaction"], false);
            assert_eq!(after["held_transactions"]["held"], 0);
        })
        .await
}

/// PostgreSQL (SQLite holds one for the whole demo, by design): one held
/// transaction per sandbox: a second from the same one is refused, while
/// another sandbox still holds one of its own.
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_sandbox_holds_one_transaction_at_a_time_and_another_still_gets_its_own() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let app = spawn_app_with(|s| s.demo_max_delayed = Some(3)).await;
            let (a, b) = two_sandboxes(&app).await;
            let held = [("demo-fault", "delay-commit=1500")];
            let body = charge_body();
            let (first, (second, other)) = tokio::join!(a.charge_with("k1", &body, &held), async {
                tokio::time::sleep(Duration::from_millis(400)).await;
                tokio::join!(
                    a.charge_with("k2", &body, &held),
                    b.charge_with("k3", &body, &held)
                )
            });
            assert_eq!(first.status, 201);
            second.assert_problem(503, "service-unavailable");
            assert!(
                second.json()["detail"]
                    .as_str()
                    .unwrap()
                    .contains("your sandbox"),
                "{}",
                second.body
            );
            assert_eq!(other.status, 201, "B's own slot: {}", other.body);
        })
        .await
}

/// SQLite: a held transaction keeps the whole database's write lock, and
/// a sandbox's look-up must not wait for it: the page reads its tables
/// while lesson 4 holds one (the look-up reads; its last use moves beside).
#[tokio::test]
async fn on_sqlite_the_tables_are_read_while_a_transaction_holds_the_write_lock() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Sqlite, async {
            // A short expiry: the look-up asks the database every 250 ms.
            let app = spawn_app_with(|s| s.demo_sandbox_idle_expiry = Duration::from_secs(2)).await;
            let mine = app.new_sandbox().await;
            let held = [("demo-fault", "delay-commit=2000")];
            let (_, waited) = tokio::join!(mine.charge_with("k", &charge_body(), &held), async {
                tokio::time::sleep(Duration::from_millis(700)).await;
                let started = std::time::Instant::now();
                assert_eq!(state_of(&mine).await.status, 200);
                started.elapsed()
            });
            assert!(
                waited < Duration::from_millis(700),
                "the read waited {waited:?} for the write lock"
            );
        })
        .await
}
