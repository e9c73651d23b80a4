//! Webhook delivery (issue #48): the sender claims due deliveries, signs
//! them as Standard Webhooks says, retries on its schedule, and stops where
//! it must (2xx, 410, the last attempt), against a real receiver on
//! loopback (`support::receiver`). Endpoints and events are written by
//! `support::webhooks` as the API's routes and the outbox will write them.

use std::time::{Duration, Instant};

use charges::config::Settings;
use charges::idempotency::webhook::signature::{Secret, verify};
use serde_json::Value;

use crate::support::receiver::{Received, Receiver, Reply};
use crate::support::webhooks::{account_id, add_endpoint, add_event, public_id, rotate_secret};
use crate::support::{TEST_ACCOUNT, TEST_KEY, TestApp, spawn_app_with};
use reqwest::Method;

/// The app with a sender that polls every 50 ms and retries at once, three
/// attempts in all, each within 2 s; `configure` changes the rest.
async fn app_sending(configure: impl FnOnce(&mut Settings)) -> TestApp {
    spawn_app_with(|s| {
        s.webhooks.retry_schedule = vec![Duration::ZERO; 3];
        s.webhooks.poll_interval = Duration::from_millis(50);
        s.webhooks.timeout = Duration::from_secs(2);
        configure(s);
    })
    .await
}

/// Waits (at most 10 s) until `SELECT count(*) FROM from_where` is `n`.
pub async fn until_count(app: &TestApp, from_where: &str, n: i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while app.count(from_where) != n {
        assert!(
            Instant::now() < deadline,
            "{from_where}: {} rows",
            app.count(from_where)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks `r`'s signature against `secret` with the protocol crate.
pub fn verifies(r: &Received, secret: &str) -> bool {
    let secret = Secret::parse(secret).unwrap();
    verify(
        &[&secret],
        r.header("webhook-id"),
        r.header("webhook-timestamp"),
        r.header("webhook-signature"),
        r.body.as_bytes(),
        chrono::Utc::now().timestamp(),
    )
    .is_ok()
}

crate::on_both_backends! {
    async fn a_receiver_answering_500_500_200_gets_three_signed_attempts_with_one_webhook_id() {
        let app = app_sending(|_| {}).await;
        let receiver = Receiver::start(vec![Reply::Status(500), Reply::Status(500)]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        let (endpoint, secret) = add_endpoint(&app.db, account, &receiver.url());
        let event = add_event(&app.db, account);

        until_count(&app, "webhook_deliveries WHERE status = 'succeeded' AND attempts = 3", 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = receiver.received();
        assert_eq!(got.len(), 3, "{got:?}");
        for r in &got {
            assert_eq!(r.method, "POST");
            assert_eq!(r.path, "/hook");
            assert_eq!(r.header("webhook-id"), public_id(event));
            assert_eq!(r.header("content-type"), "application/json");
            assert!(r.header("user-agent").starts_with("charges-webhooks/"), "{r:?}");
            assert_eq!(r.header("host"), format!("127.0.0.1:{}", receiver.port));
            assert!(verifies(r, &secret), "{r:?}");
            assert_eq!(r.body, got[0].body, "every attempt sends the same bytes");
            let ts: i64 = r.header("webhook-timestamp").parse().unwrap();
            assert!(ts.abs_diff(chrono::Utc::now().timestamp()) < 30);
        }
        let body: Value = serde_json::from_str(&got[0].body).unwrap();
        assert_eq!(body["id"], public_id(event));
        assert_eq!(body["object"], "event");
        assert_eq!(body["type"], "charge.succeeded");
        assert_eq!(body["data"]["object"]["amount"], 500);
        let answers = app.db.strings(&format!(
            "SELECT CAST(response_status AS TEXT) AS value FROM webhook_attempts \
             WHERE endpoint_id = '{endpoint}' ORDER BY attempt"
        ));
        assert_eq!(answers, ["500", "500", "200"]);
    }

    async fn a_410_disables_the_endpoint_and_fails_its_other_deliveries() {
        let app = app_sending(|_| {}).await;
        // A failing endpoint has one delivery in flight, so the second event
        // is pending behind the first when 410 comes.
        let receiver = Receiver::start(vec![Reply::Status(410)]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        let (endpoint, _) = add_endpoint(&app.db, account, &receiver.url());
        app.execute("UPDATE webhook_endpoints SET failing = TRUE");
        add_event(&app.db, account);
        add_event(&app.db, account);

        until_count(&app, &format!("webhook_endpoints WHERE id = '{endpoint}' AND status = 'disabled'"), 1).await;
        until_count(&app, "webhook_deliveries WHERE status = 'failed'", 2).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(receiver.received().len(), 1, "nothing is sent after a 410");
        assert_eq!(app.count("webhook_endpoints WHERE disabled_reason LIKE '%410%'"), 1);
        assert_eq!(app.count("webhook_attempts"), 1);
    }

    async fn after_the_last_attempt_the_delivery_has_failed() {
        let app = app_sending(|s| s.webhooks.retry_schedule = vec![Duration::ZERO; 2]).await;
        let receiver = Receiver::start(vec![Reply::Status(503); 5]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        add_endpoint(&app.db, account, &receiver.url());
        add_event(&app.db, account);

        until_count(&app, "webhook_deliveries WHERE status = 'failed' AND attempts = 2", 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(receiver.received().len(), 2);
        assert_eq!(app.count("webhook_deliveries WHERE next_attempt_at IS NULL AND claim_token IS NULL"), 1);
    }

    async fn a_302_is_a_failed_attempt_and_is_not_followed() {
        let app = app_sending(|s| s.webhooks.retry_schedule = vec![Duration::ZERO]).await;
        let elsewhere = Receiver::start(vec![]).await;
        let receiver = Receiver::start(vec![Reply::Redirect(elsewhere.url())]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        add_endpoint(&app.db, account, &receiver.url());
        add_event(&app.db, account);

        until_count(&app, "webhook_deliveries WHERE status = 'failed'", 1).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(receiver.received().len(), 1);
        assert_eq!(elsewhere.received().len(), 0, "the redirect was followed");
        assert_eq!(app.count("webhook_attempts WHERE response_status = 302"), 1);
    }

    async fn with_the_rule_on_loopback_private_and_link_local_targets_are_refused_at_connect() {
        let app = app_sending(|s| {
            s.demo = Some(false);
            s.webhooks.allow_private_targets = false;
            s.webhooks.allow_http = true;
            s.webhooks.retry_schedule = vec![Duration::ZERO];
        })
        .await;
        let receiver = Receiver::start(vec![]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        let port = receiver.port;
        for url in [
            format!("http://localhost:{port}/hook"),
            format!("http://127.0.0.1:{port}/hook"),
            format!("http://[::ffff:127.0.0.1]:{port}/hook"),
            format!("http://10.0.0.1:{port}/hook"),
            format!("http://192.168.0.1:{port}/hook"),
            "http://169.254.169.254/latest/meta-data".to_owned(),
            format!("http://[fe80::1]:{port}/hook"),
        ] {
            add_endpoint(&app.db, account, &url);
        }
        add_event(&app.db, account);

        until_count(&app, "webhook_deliveries WHERE status = 'failed'", 7).await;
        assert_eq!(receiver.received().len(), 0, "nothing is sent");
        assert_eq!(app.count("webhook_attempts WHERE response_status IS NULL"), 7);
        for range in ["loopback", "private", "link-local"] {
            assert!(app.count(&format!("webhook_attempts WHERE error LIKE '%{range}%'")) >= 1, "{range}");
        }
    }

    async fn a_hanging_receiver_of_one_account_delays_another_accounts_delivery_by_under_a_second() {
        let app = app_sending(|s| s.webhooks.timeout = Duration::from_secs(5)).await;
        let hanging = Receiver::start(vec![Reply::Hang(Duration::from_secs(6)); 4]).await;
        let prompt = Receiver::start(vec![]).await;
        let x = account_id(&app.db, TEST_ACCOUNT);
        let y = app.create_account("Account Y", "sk_live_account_y_for_webhooks");
        add_endpoint(&app.db, x, &hanging.url());
        add_endpoint(&app.db, y, &prompt.url());
        for _ in 0..3 {
            add_event(&app.db, x);
        }
        // X's healthy endpoint has all three in flight (of its own slots).
        assert_eq!(hanging.until(3, Duration::from_secs(5)).await.len(), 3);

        let sent = Instant::now();
        add_event(&app.db, y);
        let got = prompt.until(1, Duration::from_secs(5)).await;
        assert_eq!(got.len(), 1);
        let lag = got[0].at - sent;
        assert!(lag < Duration::from_secs(1), "Y waited {lag:?}");
        assert_eq!(hanging.received().len(), 3);
    }

    async fn a_healthy_endpoint_has_several_deliveries_in_flight_at_once() {
        // Each request hangs a second: one at a time, 8 would take 8 s (the
        // sender of one delivery in flight per endpoint fell behind the
        // charges: 16-95 deliveries/s to one endpoint in bench/webhooks).
        let app = app_sending(|_| {}).await;
        let receiver = Receiver::start(vec![Reply::Hang(Duration::from_secs(1)); 8]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        add_endpoint(&app.db, account, &receiver.url());
        for _ in 0..10 {
            add_event(&app.db, account);
        }
        let first = receiver.until(1, Duration::from_secs(5)).await;
        assert!(!first.is_empty());
        let got = receiver.until(8, Duration::from_millis(800)).await;
        assert_eq!(got.len(), 8, "in flight at once");
        let spread = got.iter().map(|r| r.at).max().unwrap() - first[0].at;
        assert!(spread < Duration::from_millis(800), "8 arrived over {spread:?}");
        // ... and no more than eight: the endpoint's slots.
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(receiver.received().len(), 8);
    }

    async fn a_failing_endpoint_has_one_delivery_in_flight_until_it_answers_again() {
        let app = app_sending(|s| s.webhooks.retry_schedule = vec![Duration::ZERO; 4]).await;
        let mut script = vec![Reply::Status(500)];
        script.extend(vec![Reply::Hang(Duration::from_secs(1)); 2]);
        let receiver = Receiver::start(script).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        add_endpoint(&app.db, account, &receiver.url());
        add_event(&app.db, account);
        until_count(&app, "webhook_endpoints WHERE failing", 1).await;
        for _ in 0..4 {
            add_event(&app.db, account);
        }
        let first = receiver.until(2, Duration::from_secs(5)).await;
        assert_eq!(first.len(), 2);
        // One probe at a time while it fails: the hanging one, then the next.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(receiver.received().len(), 2, "more than one in flight to a failing endpoint");
        // Answered again (the script's end is 200): healthy, every event delivered.
        until_count(&app, "webhook_deliveries WHERE status = 'succeeded'", 5).await;
        assert_eq!(app.count("webhook_endpoints WHERE failing"), 0);
    }

    async fn a_sender_whose_claim_expired_and_was_taken_over_records_nothing() {
        let app = app_sending(|s| s.webhooks.timeout = Duration::from_secs(5)).await;
        // The first attempt hangs past the claim we expire under it; the
        // second, by the sender that takes the delivery over, is answered.
        let receiver = Receiver::start(vec![Reply::Hang(Duration::from_secs(2)), Reply::Status(200)]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        add_endpoint(&app.db, account, &receiver.url());
        add_event(&app.db, account);
        assert_eq!(receiver.until(1, Duration::from_secs(10)).await.len(), 1);
        let claims = app.db.strings("SELECT CAST(claim_token AS TEXT) AS value FROM webhook_deliveries");
        app.execute(&format!("UPDATE webhook_deliveries SET claimed_until = {}", app.at(-1)));

        assert_eq!(receiver.until(2, Duration::from_secs(10)).await.len(), 2);
        until_count(&app, "webhook_deliveries WHERE status = 'succeeded'", 1).await;
        let retaken = app.db.strings("SELECT COALESCE(CAST(claim_token AS TEXT), 'none') AS value FROM webhook_deliveries");
        assert_ne!(claims, retaken);
        // The first attempt ends (no answer) after the takeover was recorded.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(app.count("webhook_attempts"), 1, "the stale sender recorded its attempt");
        assert_eq!(app.count("webhook_deliveries WHERE status = 'succeeded' AND attempts = 1"), 1);
    }

    async fn after_a_rotation_each_delivery_is_signed_with_both_secrets() {
        let app = app_sending(|_| {}).await;
        let receiver = Receiver::start(vec![]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        let (endpoint, old) = add_endpoint(&app.db, account, &receiver.url());
        let new = rotate_secret(&app.db, endpoint);
        add_event(&app.db, account);

        let got = receiver.until(1, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].header("webhook-signature").split(' ').count(), 2);
        assert!(verifies(&got[0], &new), "the new secret");
        assert!(verifies(&got[0], &old), "the previous secret, while its grace lasts");
    }

    async fn an_events_deliveries_show_every_attempt_and_redeliver_sends_it_again() {
        let app = app_sending(|_| {}).await;
        let receiver = Receiver::start(vec![Reply::Status(500)]).await;
        let account = account_id(&app.db, TEST_ACCOUNT);
        let (endpoint, _) = add_endpoint(&app.db, account, &receiver.url());
        let event = public_id(add_event(&app.db, account));
        until_count(&app, "webhook_deliveries WHERE status = 'succeeded'", 1).await;

        let shown = app.get_as(TEST_KEY, &format!("/events/{event}/deliveries")).await;
        assert_eq!(shown.status, 200, "{}", shown.body);
        let shown = shown.json();
        assert_eq!(shown["object"], "list");
        assert_eq!(shown["event_id"], event);
        let delivery = &shown["data"][0];
        assert_eq!(delivery["endpoint_id"], endpoint.to_string());
        assert_eq!(delivery["status"], "succeeded");
        assert_eq!(delivery["attempts"], 2);
        assert_eq!(delivery["next_attempt_at"], Value::Null);
        let history = delivery["attempt_history"].as_array().unwrap();
        assert_eq!(history.len(), 2);
        assert_eq!(history[0]["response_status"], 500);
        assert_eq!(history[1]["response_status"], 200);
        assert_eq!(history[1]["error"], Value::Null);
        let got = receiver.received();
        assert_eq!(history[1]["webhook_timestamp"].to_string(), got[1].header("webhook-timestamp"));

        let again = app.send(app.request(Method::POST, &format!("/events/{event}/redeliver")).bearer_auth(TEST_KEY)).await;
        assert_eq!(again.status, 202, "{}", again.body);
        assert_eq!(again.json()["redelivering"], 1);
        let got = receiver.until(3, Duration::from_secs(10)).await;
        assert_eq!(got.len(), 3);
        assert_eq!(got[2].header("webhook-id"), event, "the same webhook-id: a receiver dedupes");
        until_count(&app, "webhook_deliveries WHERE status = 'succeeded' AND attempts = 3", 1).await;

        let other = app.create_account("Another shop", "sk_live_another_shop_for_webhooks");
        assert!(other > 0);
        let theirs = app.get_as("sk_live_another_shop_for_webhooks", &format!("/events/{event}/deliveries")).await;
        theirs.assert_problem(404, "not-found");
        let unknown = format!("evt_{}", uuid::Uuid::new_v4());
        app.get_as(TEST_KEY, &format!("/events/{unknown}/deliveries")).await.assert_problem(404, "not-found");
        let redeliver = app.request(Method::POST, &format!("/events/{unknown}/redeliver"));
        app.send(redeliver.bearer_auth(TEST_KEY)).await.assert_problem(404, "not-found");
    }
}

/// PyPI's `standardwebhooks`, given JSON on stdin: each secret verifies
/// the delivery, and a tampered body is refused.
const PYTHON_VERIFY: &str = r#"
import json, sys
from standardwebhooks.webhooks import Webhook
d = json.load(sys.stdin)
headers = {"webhook-id": d["id"], "webhook-timestamp": d["timestamp"], "webhook-signature": d["signature"]}
for secret in d["secrets"]:
    Webhook(secret).verify(d["body"], headers)
    try:
        Webhook(secret).verify(d["body"] + " ", headers)
        sys.exit("a tampered body verified")
    except Exception:
        pass
print("verified")
"#;

#[tokio::test]
#[cfg_attr(
    standardwebhooks_missing,
    ignore = "PyPI's standardwebhooks is not installed: run .ci/standardwebhooks"
)]
async fn an_independent_implementation_verifies_every_attempts_signature() {
    use std::io::Write;

    let app = app_sending(|_| {}).await;
    let receiver = Receiver::start(vec![Reply::Status(500)]).await;
    let account = account_id(&app.db, TEST_ACCOUNT);
    let (endpoint, old) = add_endpoint(&app.db, account, &receiver.url());
    let new = rotate_secret(&app.db, endpoint);
    add_event(&app.db, account);
    let got = receiver.until(2, Duration::from_secs(10)).await;
    assert_eq!(got.len(), 2);
    for r in &got {
        let input = serde_json::json!({
            "secrets": [&old, &new],
            "id": r.header("webhook-id"),
            "timestamp": r.header("webhook-timestamp"),
            "signature": r.header("webhook-signature"),
            "body": r.body,
        });
        let mut python = std::process::Command::new(env!("STANDARDWEBHOOKS_PYTHON"))
            .args(["-c", PYTHON_VERIFY])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        python
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = python.wait_with_output().unwrap();
        let printed = crate::support::printed(&out);
        assert!(out.status.success(), "{printed}");
        assert_eq!(printed.trim(), "verified");
    }
}

/// `openssl s_server` on loopback with a self-signed certificate for
/// `localhost`: a TLS endpoint no trusted root vouches for. Killed on drop.
struct SelfSignedServer {
    child: std::process::Child,
    port: u16,
    _dir: tempdir::Dir,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Drop for SelfSignedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn self_signed_server() -> Option<SelfSignedServer> {
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("charges-tls-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).ok()?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    if !made.success() {
        return None;
    }
    let port = crate::support::free_port();
    let child = Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &port.to_string()])
        .arg("-cert")
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = SelfSignedServer {
        child,
        port,
        _dir: tempdir::Dir(dir),
    };
    // Listening, not merely started: on a loaded machine s_server takes
    // longer than any fixed sleep to open its port (a refused connection
    // would be a failed attempt of another kind than the one tested).
    let until = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("localhost", port)).is_err() {
        assert!(
            Instant::now() < until,
            "openssl s_server never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(server)
}

#[tokio::test]
async fn an_https_endpoint_whose_certificate_no_trusted_root_signed_is_a_failed_attempt() {
    let Some(server) = self_signed_server() else {
        // No openssl binary: the claim is then left unchecked, said loudly.
        panic!("this test needs the openssl command to make a self-signed server");
    };
    let app = app_sending(|s| s.webhooks.retry_schedule = vec![Duration::ZERO]).await;
    let account = account_id(&app.db, TEST_ACCOUNT);
    add_endpoint(
        &app.db,
        account,
        &format!("https://localhost:{}/hook", server.port),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    add_event(&app.db, account);

    until_count(&app, "webhook_deliveries WHERE status = 'failed'", 1).await;
    let errors = app
        .db
        .strings("SELECT error AS value FROM webhook_attempts");
    assert_eq!(
        app.count("webhook_attempts WHERE response_status IS NULL"),
        1,
        "{errors:?}"
    );
    assert!(
        errors[0].to_lowercase().contains("certificate")
            || errors[0].to_lowercase().contains("tls"),
        "{errors:?}"
    );
}
