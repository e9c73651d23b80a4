//! What operators and integrators rely on: metrics, request ids, structured
//! logs, the command line, a graceful shutdown, and the compose file.

use std::time::Duration;

use reqwest::Method;

use crate::support::{DEMO_KEY, ServerProcess, TEST_KEY, TestDatabase, charge_body, spawn_app};

crate::on_both_backends! {
    async fn metrics_count_requests_idempotency_outcomes_and_the_pool() {
        let app = spawn_app().await;
        app.charge("k-m", &charge_body()).await;
        app.charge("k-m", &charge_body()).await;
        app.charge("k-m", &serde_json::json!({"amount": 1, "currency": "usd"})).await;
        app.charge(None, &charge_body()).await;

        let metrics = crate::support::AppClient::new(app.metrics_url.as_deref().unwrap())
            .get("/metrics")
            .await;
        assert_eq!(metrics.status, 200);
        assert!(
            metrics
                .header("content-type")
                .unwrap()
                .starts_with("text/plain; version=0.0.4")
        );
        for expected in [
            r#"idempotency_requests_total{mode="atomic",outcome="executed"}"#,
            r#"idempotency_requests_total{mode="atomic",outcome="replayed"}"#,
            r#"idempotency_requests_total{mode="atomic",outcome="mismatch"}"#,
            r#"idempotency_requests_total{mode="none",outcome="no_key"}"#,
            r#"http_requests_total{method="POST",route="/charges",status="201"}"#,
            r#"http_requests_total{method="POST",route="/charges",status="422"}"#,
            r#"http_request_duration_seconds_bucket{method="POST",route="/charges",le="0.005"}"#,
            "db_pool_wait_seconds_count",
            r#"db_pool_connections{state="idle"}"#,
            "idempotency_keys_purged_total",
            "idempotency_key_conflict_seconds_count",
        ] {
            assert!(metrics.body.contains(expected), "missing {expected}");
        }
    }

    async fn a_request_id_is_echoed_or_made_up() {
        let app = spawn_app().await;
        let r = app
            .send(app.request(Method::GET, "/healthz").header("x-request-id", "req-42"))
            .await;
        assert_eq!(r.headers["x-request-id"], "req-42");
        let r = app.get("/healthz").await;
        let made_up = r.header("x-request-id").unwrap();
        assert!(uuid::Uuid::parse_str(made_up).is_ok(), "{made_up}");
        let r = app
            .send(app.request(Method::GET, "/healthz").header("x-request-id", "x".repeat(200)))
            .await;
        assert_ne!(
            r.headers["x-request-id"].len(),
            200,
            "an absurd id is replaced"
        );
    }

    async fn json_logs_carry_the_request_id_and_outcome_but_never_the_api_key_or_body() {
        let db = TestDatabase::create();
        let server = ServerProcess::start(&db.url, &[("LOG_FORMAT", "json"), ("RUST_LOG", "info")]);
        db.create_test_account();
        let api = server.client();
        let body = serde_json::json!(
            {"amount": 1000, "currency": "jpy", "description": "secret-description"}
        );
        for _ in 0..2 {
            let r = api.charge_with("k-log", &body, &[("x-request-id", "req-log-1")]).await;
            assert_eq!(r.status, 201);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let logs = server.logs();
        let lines: Vec<serde_json::Value> = logs
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        let finished: Vec<_> = lines
            .iter()
            .filter(|l| l["fields"]["message"] == "request finished")
            .collect();
        assert_eq!(finished.len(), 2, "{logs}");
        assert_eq!(finished[0]["span"]["request_id"], "req-log-1");
        assert_eq!(finished[0]["span"]["route"], "/charges");
        assert_eq!(finished[0]["span"]["idempotency"], "executed");
        assert_eq!(finished[1]["span"]["idempotency"], "replayed");
        assert!(
            !logs.contains(TEST_KEY) && !logs.contains("secret-description"),
            "{logs}"
        );
    }

    async fn human_logs_written_to_a_file_carry_no_colour_codes() {
        let db = TestDatabase::create();
        let server = ServerProcess::start(&db.url, &[("RUST_LOG", "info")]);
        db.create_test_account();
        let body = serde_json::json!({"amount": 1000, "currency": "jpy"});
        let r = server
            .client()
            .charge_with(None, &body, &[("x-request-id", "req-plain-1")])
            .await;
        assert_eq!(r.status, 201);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let logs = server.logs();
        let finished = logs
            .lines()
            .find(|l| l.contains("request finished"))
            .unwrap_or_else(|| panic!("no request line in {logs:?}"));
        assert!(finished.contains("request_id=req-plain-1"), "{finished:?}");
        assert!(!logs.contains('\u{1b}'), "escape codes in a log file: {logs:?}");
    }

    async fn sigterm_lets_an_in_flight_charge_finish_and_exits_zero() {
        let db = TestDatabase::create();
        let mut server = ServerProcess::start(&db.url, &[]);
        let request = server
            .client()
            .charge_request(
                DEMO_KEY,
                "k-term",
                &charge_body(),
                &[("demo-fault", "delay-commit=1500")],
            )
            .send();
        let in_flight = tokio::spawn(request);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &server.pid().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());

        let response = in_flight
            .await
            .unwrap()
            .expect("the in-flight request got its answer");
        assert_eq!(response.status(), 201);
        let status = server
            .wait_for_exit(Duration::from_secs(10))
            .expect("the server exits");
        assert_eq!(status.code(), Some(0), "{}", server.logs());
        assert_eq!(db.count("charges"), 1);
        assert_eq!(db.count("idempotency_keys WHERE status = 'completed'"), 1);
    }

    async fn the_retrying_client_survives_lost_responses_with_one_key_and_one_charge() {
        let app = spawn_app().await;
        let address = app.address.clone();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(example("retrying_client"))
                .args(["--url", &address, "--lose", "2"])
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("attempt 1: 504"), "{stdout}");
        assert!(stdout.contains("attempt 2: 504"), "{stdout}");
        assert!(
            stdout.contains("attempt 3: 201 Created (replayed"),
            "{stdout}"
        );
        assert_eq!(app.charges(), 1);
        assert_eq!(app.keys(), 1);
    }
}

#[test]
fn the_command_line_documents_every_command_and_setting() {
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for expected in [
        "serve",
        "migrate",
        "purge-expired",
        // Each variable named, its value never shown (tests/api/secrets.rs).
        "[env: DATABASE_URL]",
        "[env: BIND]",
        "[env: IDEMPOTENCY_TTL]",
        "[default: 24h]",
        "[env: IDEMPOTENCY_MODE]",
        "[env: IDEMPOTENCY_LEASE]",
        "[env: PURGE_INTERVAL]",
        "[env: REQUIRE_IDEMPOTENCY_KEY]",
        "[env: POOL_SIZE]",
        "[env: DEMO]",
    ] {
        assert!(help.contains(expected), "--help lacks {expected}:\n{help}");
    }
    let version = std::process::Command::new(env!("CARGO_BIN_EXE_charges"))
        .arg("--version")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8(version.stdout).unwrap().trim(),
        format!("charges {}", env!("CARGO_PKG_VERSION"))
    );
}

/// `cargo test` builds the examples next to the test binaries; a run of this
/// test binary alone (`--test api`) builds the one it needs.
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = std::process::Command::new(cargo)
            .args(["build", "--example", name])
            .status()
            .unwrap();
        assert!(built.success());
    }
    path
}

/// `docker compose up` must not put the demo's powers on a network: the
/// image runs `charges serve` and leaves demo mode to its default (off), and compose turns
/// it on explicitly, publishes on loopback only, and restarts the app (a
/// crash-after-key is refused, but any other death must not leave it down).
#[test]
fn compose_turns_demo_mode_on_only_behind_a_loopback_port_and_restarts_the_app() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let compose = std::fs::read_to_string(root.join("docker-compose.yml")).unwrap();
    let app = compose
        .split("\n  app:\n")
        .nth(1)
        .expect("an app service")
        .split("\nvolumes:")
        .next()
        .unwrap();
    let setting = |name: &str| {
        app.lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().trim_matches('"').to_owned())
    };
    assert_eq!(
        setting("DEMO").as_deref(),
        Some("true"),
        "demo mode on explicitly"
    );
    assert_eq!(setting("restart").as_deref(), Some("unless-stopped"));
    let ports: Vec<&str> = app
        .split("ports:\n")
        .nth(1)
        .expect("published ports")
        .lines()
        .map_while(|l| l.trim().strip_prefix("- "))
        .collect();
    assert!(!ports.is_empty());
    for port in ports {
        assert!(
            port.trim_matches('"').starts_with("127.0.0.1:"),
            "published beyond loopback: {port}"
        );
    }
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let sets_demo = dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .any(|l| l.contains("DEMO"));
    assert!(!sets_demo, "the image must leave demo mode to its default");
    assert!(
        dockerfile.contains("CMD [\"serve\"]"),
        "the image runs `charges serve`, not the default command (the demo)"
    );
}

/// No password is written in the compose file (it comes from the
/// environment, `${POSTGRES_PASSWORD:?…}`), and the image keeps its SQLite
/// data in a volume: recreating the container must not forget the keys.
#[test]
fn compose_writes_no_password_and_the_image_keeps_its_data_in_a_volume() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let compose = std::fs::read_to_string(root.join("docker-compose.yml")).unwrap();
    for line in compose.lines().filter(|l| !l.trim_start().starts_with('#')) {
        if let Some(value) = line.trim().strip_prefix("NETWORK_API_KEY:") {
            assert!(value.trim().starts_with("${NETWORK_API_KEY:?"), "{line}");
        }
        if let Some(value) = line.trim().strip_prefix("POSTGRES_PASSWORD:") {
            assert!(value.trim().starts_with("${POSTGRES_PASSWORD:?"), "{line}");
        }
        if let Some(at) = line.find("postgres://") {
            let userinfo = line[at + "postgres://".len()..].split('@').next().unwrap();
            if let Some((_, password)) = userinfo.split_once(':') {
                assert!(password.starts_with("${POSTGRES_PASSWORD"), "{line}");
            }
        }
    }
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(
        dockerfile.lines().any(|l| l.trim() == "VOLUME /data"),
        "the image's /data is a volume"
    );
}

/// The compose file's app reaches its database container on the host's own
/// compose network, without TLS, as docs/deploy.md says; the URL says so
/// instead of leaving it to libpq's default (`prefer`: TLS whenever offered).
#[test]
fn compose_reaches_its_own_database_container_without_tls_as_the_deploy_guide_says() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let compose = std::fs::read_to_string(root.join("docker-compose.yml")).unwrap();
    let url = compose
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.trim().strip_prefix("DATABASE_URL: postgres://"))
        .expect("the app's DATABASE_URL");
    assert!(url.contains("@db:5432/"), "{url}");
    assert!(url.ends_with("?sslmode=disable"), "{url}");
    let guide = std::fs::read_to_string(root.join("docs/deploy.md")).unwrap();
    assert!(guide.contains("says `sslmode=disable` on purpose"));
}

/// `docker compose up` stays the database, the app and its card network
/// (unpublished); everything else is
/// behind a profile (`--profile ha`: the pg_auto_failover formation and an
/// app on it), and every published port, the profile's too, is on loopback.
#[test]
fn compose_keeps_the_failover_formation_behind_the_ha_profile() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let compose = std::fs::read_to_string(root.join("docker-compose.yml")).unwrap();
    let services = compose
        .split("\nservices:\n")
        .nth(1)
        .expect("services")
        .split("\nvolumes:")
        .next()
        .unwrap();
    // Each service: its name (two spaces in) and its lines.
    let mut each: Vec<(String, String)> = Vec::new();
    for line in services.lines() {
        let name = line
            .strip_prefix("  ")
            .filter(|l| !l.starts_with(' ') && !l.starts_with('#'))
            .and_then(|l| l.strip_suffix(':'));
        match (name, each.last_mut()) {
            (Some(name), _) => each.push((name.to_owned(), String::new())),
            (None, Some((_, body))) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    let names: Vec<&str> = each.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "db",
            "app",
            "network",
            "ha-monitor",
            "ha-node1",
            "ha-node2",
            "app-ha"
        ]
    );
    for (name, body) in &each {
        let profiles = body
            .lines()
            .find_map(|l| l.trim().strip_prefix("profiles:"))
            .map(str::trim);
        let expected = if ["db", "app", "network"].contains(&name.as_str()) {
            None
        } else {
            Some("[ha]")
        };
        assert_eq!(profiles, expected, "{name}'s profiles");
        if let Some(ports) = body.split("ports:\n").nth(1) {
            for port in ports.lines().map_while(|l| l.trim().strip_prefix("- ")) {
                assert!(
                    port.trim_matches('"').starts_with("127.0.0.1:"),
                    "{name} published beyond loopback: {port}"
                );
            }
        }
    }
    assert!(root.join("docker/pg_auto_failover/Dockerfile").exists());
}
