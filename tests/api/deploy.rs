//! The deploy guide's proxy, run: `deploy/nginx/charges.conf` as shipped
//! (its ports, certificate paths and rate swapped for the test's), in front of
//! the app, with a certificate made for the test. Over TLS a keyed charge
//! works and replays; plain HTTP only redirects; `/metrics`, the demo's routes
//! and the page are not served, nor is the demo key; a burst past the rate is
//! refused with 429. And a bare `proxy_pass` (no header of its own, as the
//! simplest proxy is written) in front of `charges serve`: none of the demo,
//! no `/metrics`. Ignored, with what is missing, where nginx, openssl or
//! curl are not installed (`.ci/run` installs nginx). nginx is stopped as
//! its manual says (SIGQUIT, then its workers are waited for): a killed
//! master leaves its workers running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqwest::Method;

use crate::support::{AppClient, DEMO_KEY, ServerProcess, TestDatabase, free_port, spawn_app_with};

const ACCOUNT_KEY: &str = "sk_live_behind_the_proxy";

/// nginx in a directory of its own (and a process group of its own),
/// stopped gracefully and removed on drop.
struct Nginx {
    dir: PathBuf,
    child: Child,
}

impl Nginx {
    /// Starts nginx on `dir/nginx.conf` and waits (bounded) until `port` listens.
    fn start(dir: PathBuf, port: u16) -> Nginx {
        use std::os::unix::process::CommandExt;
        let child = Command::new("nginx")
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nginx");
        let nginx = Nginx { dir, child };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nginx did not listen: {}",
                std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        nginx
    }
}

impl Drop for Nginx {
    /// SIGQUIT (nginx's graceful stop: its workers finish and exit, then
    /// the master), then waits until no process of its group is left; past
    /// 10 s, SIGKILL to the whole group.
    fn drop(&mut self) {
        let group = self.child.id() as i32;
        unsafe { libc::kill(group, libc::SIGQUIT) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut reaped = false;
        loop {
            reaped = reaped || self.child.try_wait().ok().flatten().is_some();
            // No process left in the group: ESRCH.
            let left = unsafe { libc::kill(-group, 0) } == 0;
            if reaped && !left {
                break;
            }
            if Instant::now() > deadline {
                unsafe { libc::kill(-group, libc::SIGKILL) };
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `text` with `from` replaced by `to`, which must be there.
fn swap(text: String, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "deploy/nginx/charges.conf no longer says {from:?}: update this test with it"
    );
    text.replace(from, to)
}

fn start_nginx(app_port: u16, http: u16, tls: u16) -> Nginx {
    let dir = std::env::temp_dir().join(format!("charges-nginx-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
        ])
        .arg("-keyout")
        .arg(dir.join("privkey.pem"))
        .arg("-out")
        .arg(dir.join("fullchain.pem"))
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "openssl made no certificate");
    let shipped = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx/charges.conf"),
    )
    .unwrap();
    let d = dir.display();
    let mut conf = swap(shipped, "listen 80;", &format!("listen 127.0.0.1:{http};"));
    conf = swap(
        conf,
        "listen 443 ssl;",
        &format!("listen 127.0.0.1:{tls} ssl;"),
    );
    conf = swap(
        conf,
        "server 127.0.0.1:8080;",
        &format!("server 127.0.0.1:{app_port};"),
    );
    conf = swap(conf, "/etc/ssl/charges/", &format!("{d}/"));
    conf = swap(
        conf,
        "server_name api.example.com;",
        "server_name localhost;",
    );
    // A rate the test can pass in a second.
    conf = swap(conf, "rate=300r/s", "rate=5r/s");
    conf = swap(conf, "burst=600", "burst=5");
    std::fs::write(dir.join("charges.conf"), conf).unwrap();
    let main = format!(
        "daemon off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
         scgi_temp_path {d}/scgi;\n  include {d}/charges.conf;\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    Nginx::start(dir, tls)
}

/// curl's answer: the status line's code, the headers and the body.
fn curl(args: &[&str]) -> (u16, String, String) {
    let out = Command::new("curl")
        .args(["-s", "-S", "-i", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    deploy_tests_unavailable,
    ignore = "needs nginx, openssl and curl (apt-get install nginx-light openssl curl)"
)]
async fn the_shipped_proxy_serves_the_api_over_tls_and_nothing_else() {
    // As the guide runs it: `charges serve`, demo mode off.
    let app = spawn_app_with(|s| {
        s.trusted_proxies = vec!["127.0.0.1".parse().unwrap()];
        s.demo = None;
    })
    .await;
    app.create_account("Behind the proxy", ACCOUNT_KEY);
    let app_port: u16 = app.address.rsplit(':').next().unwrap().parse().unwrap();
    let (http, tls) = (free_port(), free_port());
    let nginx = start_nginx(app_port, http, tls);
    let ca = nginx.dir.join("fullchain.pem").display().to_string();
    let base = format!("https://localhost:{tls}");
    let tls_get = |path: &str, key: Option<&str>| {
        let url = format!("{base}{path}");
        let auth = key.map(|k| format!("Authorization: Bearer {k}"));
        let mut args = vec!["--cacert", &ca, &url];
        if let Some(auth) = &auth {
            args.extend(["-H", auth]);
        }
        curl(&args)
    };

    // TLS, with the certificate checked.
    assert_eq!(tls_get("/healthz", None).0, 200);
    // Plain HTTP only redirects to it.
    let (code, head, _) = curl(&[&format!("http://localhost:{http}/charges")]);
    assert_eq!(code, 301);
    assert!(
        head.contains("location: https://localhost/charges"),
        "{head}"
    );

    // A keyed charge, and its retry replayed, through the proxy.
    let url = format!("{base}/charges");
    let charge = || {
        curl(&[
            "--cacert",
            &ca,
            &url,
            "-H",
            &format!("Authorization: Bearer {ACCOUNT_KEY}"),
            "-H",
            "Content-Type: application/json",
            "-H",
            "Idempotency-Key: \"behind-the-proxy\"",
            "-d",
            r#"{"amount": 1000, "currency": "jpy"}"#,
        ])
    };
    let (first, head, body) = charge();
    assert_eq!(first, 201, "{body}");
    assert!(!head.contains("idempotent-replayed"));
    let (again, head, replayed) = charge();
    assert_eq!(again, 201);
    assert!(head.contains("idempotent-replayed: true"), "{head}");
    assert_eq!(replayed, body);
    assert_eq!(app.charges(), 1);

    // Not served through the proxy: metrics, the demo, the page, its key.
    assert_eq!(tls_get("/metrics", None).0, 404);
    assert_eq!(tls_get("/demo/state", None).0, 404);
    assert_eq!(tls_get("/", None).0, 404, "no page without demo mode");
    assert_eq!(tls_get("/charges", Some(DEMO_KEY)).0, 401);
    assert_eq!(tls_get("/charges", Some(ACCOUNT_KEY)).0, 200);

    // A burst past the rate: 429 from the proxy, before the app.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let codes: Vec<u16> = (0..20).map(|_| tls_get("/healthz", None).0).collect();
    assert!(codes.contains(&429), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 200 || *c == 429), "{codes:?}");
}

/// The simplest proxy there is: `proxy_pass` and nothing else, so nginx
/// sends `Host: 127.0.0.1:PORT` and no forwarding header. In front of
/// `charges serve` (the real binary), it reaches none of the demo and no
/// `/metrics`, whatever the client adds; the metrics listener answers its
/// operator on loopback.
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    deploy_tests_unavailable,
    ignore = "needs nginx, openssl and curl (apt-get install nginx-light openssl curl)"
)]
async fn a_bare_proxy_pass_in_front_of_charges_serve_reaches_neither_the_demo_nor_metrics() {
    let db = TestDatabase::create();
    let server = ServerProcess::start_with(&["serve"], &db.url, &[]);
    let port = free_port();
    let dir = std::env::temp_dir().join(format!("charges-nginx-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nuser root;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 64; }}\n\
         http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n  \
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  \
         scgi_temp_path {d}/scgi;\n  server {{\n    listen 127.0.0.1:{port};\n    \
         location / {{ proxy_pass http://127.0.0.1:{}; }}\n  }}\n}}\n",
        server.addr().port()
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let nginx = Nginx::start(dir, port);
    let proxy = AppClient::new(&format!("http://127.0.0.1:{port}"));
    assert_eq!(
        proxy.get("/healthz").await.status,
        200,
        "the proxy reaches the app"
    );
    let extra: [&[(&str, &str)]; 4] = [
        &[],
        &[("via", "1.1 proxy")],
        &[("true-client-ip", "127.0.0.1")],
        &[("x-forwarded-server", "localhost")],
    ];
    for headers in extra {
        let send = |method: Method, path: &str| {
            // With a length: nginx passes a bodiless POST without one on as
            // HTTP/1.0, which actix refuses with 400 before any route.
            let mut r = proxy.request(method, path).header("content-length", "0");
            for (name, value) in headers {
                r = r.header(*name, *value);
            }
            proxy.send(r)
        };
        for path in ["/demo/state", "/demo/config", "/", "/metrics"] {
            assert_eq!(
                send(Method::GET, path).await.status,
                404,
                "GET {path} through the proxy"
            );
        }
        for path in ["/demo/reset", "/demo/purge", "/demo/keys/k/expire"] {
            let r = send(Method::POST, path).await;
            assert_eq!(
                r.status, 404,
                "POST {path} through the proxy with {headers:?}: {}",
                r.body
            );
        }
        let demo_key = proxy.request(Method::GET, "/charges").bearer_auth(DEMO_KEY);
        assert_eq!(proxy.send(demo_key).await.status, 401);
        let delayed = proxy.charge_request(
            DEMO_KEY,
            "k-proxy",
            &crate::support::charge_body(),
            &[("demo-fault", "delay-commit=3000")],
        );
        assert_eq!(proxy.send(delayed).await.status, 401);
    }
    assert_eq!(db.count("accounts"), 0, "no demo account");
    // Its operator reads the metrics on loopback, beside the proxy.
    let metrics = AppClient::new(server.metrics_url().trim_end_matches("/metrics"));
    assert!(
        metrics
            .get("/metrics")
            .await
            .body
            .contains("http_requests_total")
    );
    drop(nginx);
}
