//! Accounts and their keys: an account made on the command line works on
//! every instance and stops working on each once revoked (within
//! `ACCOUNT_CACHE_TTL`, at once when it is 0); an unknown key is refused from
//! a cache, without a look-up, for a few seconds; and a request names one
//! caller (two `Authorization` headers are a 400).

use std::time::{Duration, Instant};

use reqwest::Method;

use crate::support::{
    ServerProcess, TestDatabase, backend, charge_body, spawn_app, spawn_app_with,
};

const SHOP_KEY: &str = "sk_live_shop_for_account_tests";

/// Runs `charges <args>` on `database_url`; its stdout.
fn charges_cli(database_url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
        .args(args)
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run the charges binary");
    assert!(
        out.status.success(),
        "charges {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

async fn post_as(server: &ServerProcess, api_key: &str) -> u16 {
    server
        .client()
        .charge_as(api_key, None, &charge_body(), &[])
        .await
        .status
}

crate::on_both_backends! {
    async fn an_account_made_on_the_command_line_works_and_stops_working_on_every_instance_once_revoked() {
        let db = TestDatabase::create_for(backend());
        charges_cli(&db.url, &["migrate"]);
        let created = charges_cli(&db.url, &["account", "create", "Acme"]);
        let key = created.lines().last().unwrap().trim().to_owned();
        assert!(key.starts_with("sk_live_") && key.len() == "sk_live_".len() + 64, "{created}");
        assert_eq!(db.count(&format!("accounts WHERE api_key_sha256 = '{key}'")), 0, "never stored in clear");

        let env = [("ACCOUNT_CACHE_TTL", "1s")];
        let (a, b) = (ServerProcess::start(&db.url, &env), ServerProcess::start(&db.url, &env));
        assert_eq!(post_as(&a, &key).await, 201);
        assert_eq!(post_as(&b, &key).await, 201, "both instances cached the key");

        let revoked_at = Instant::now();
        charges_cli(&db.url, &["account", "revoke", "Acme"]);
        let deadline = revoked_at + Duration::from_secs(5);
        for server in [&a, &b] {
            while post_as(server, &key).await != 401 {
                assert!(Instant::now() < deadline, "the revoked key still works after 5 s");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        assert!(revoked_at.elapsed() < Duration::from_millis(2500), "refused within the 1 s TTL: {:?}", revoked_at.elapsed());
        assert!(db.count("charges") >= 2, "its charges stay");
        let listed = charges_cli(&db.url, &["account", "list"]);
        assert!(listed.contains("Acme"), "{listed}");
    }

    async fn two_authorization_headers_are_a_400() {
        let app = spawn_app().await;
        let r = app
            .send(
                app.request(Method::POST, "/charges")
                    .header("authorization", "Bearer sk_live_test_account")
                    .header("authorization", "Bearer sk_live_someone_else")
                    .header("content-type", "application/json")
                    .body(charge_body().to_string()),
            )
            .await;
        r.assert_problem(400, "invalid-request");
        let r = app
            .send(
                app.request(Method::GET, "/charges")
                    .header("authorization", "Bearer a")
                    .header("authorization", "Bearer b"),
            )
            .await;
        r.assert_problem(400, "invalid-request");
        assert_eq!(app.charges(), 0);
    }

    async fn an_unknown_key_is_refused_without_a_look_up_for_a_few_seconds() {
        let app = spawn_app().await;
        let key = "sk_live_not_yet_made";
        app.get_as(key, "/charges").await.assert_problem(401, "unauthorized");
        // Made a moment after it was tried: refused from the cache ...
        app.create_account("Late", key);
        app.get_as(key, "/charges").await.assert_problem(401, "unauthorized");
        // ... for at most 5 s.
        tokio::time::sleep(Duration::from_millis(5200)).await;
        assert_eq!(app.get_as(key, "/charges").await.status, 200);
    }

    async fn with_account_cache_ttl_0_a_revoked_key_stops_working_at_once() {
        let app = spawn_app_with(|s| s.account_cache_ttl = Duration::ZERO).await;
        app.create_account("Shop", SHOP_KEY);
        assert_eq!(app.get_as(SHOP_KEY, "/charges").await.status, 200);
        app.execute(&format!("UPDATE accounts SET revoked_at = {} WHERE name = 'Shop'", app.at(0)));
        app.get_as(SHOP_KEY, "/charges").await.assert_problem(401, "unauthorized");
    }
}
