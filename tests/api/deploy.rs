//! The deploy guide's proxy, run: `deploy/nginx/charges.conf` as shipped
//! (its ports, certificate paths and rate swapped for the test's), in front of
//! the app, with a certificate made for the test. Over TLS a keyed charge
//! works and replays; plain HTTP only redirects; `/metrics`, the demo's routes
//! and the page are not served, nor is the demo key; a burst past the rate is
//! refused with 429. Ignored, with what is missing, where nginx, openssl or
//! curl are not installed (`.ci/run` installs nginx).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{DEMO_KEY, spawn_app_with};

const ACCOUNT_KEY: &str = "sk_live_behind_the_proxy";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// nginx in a directory of its own, stopped and removed on drop.
struct Nginx {
    dir: PathBuf,
    child: Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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
    let child = Command::new("nginx")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx { dir, child };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", tls)).is_err() {
        assert!(
            Instant::now() < deadline,
            "nginx did not listen: {}",
            std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nginx
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
    let app = spawn_app_with(|s| s.trusted_proxies = vec!["127.0.0.1".parse().unwrap()]).await;
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
    assert_eq!(
        tls_get("/", None).0,
        404,
        "the app hides the page from a proxied request"
    );
    assert_eq!(tls_get("/charges", Some(DEMO_KEY)).0, 401);
    assert_eq!(tls_get("/charges", Some(ACCOUNT_KEY)).0, 200);

    // A burst past the rate: 429 from the proxy, before the app.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let codes: Vec<u16> = (0..20).map(|_| tls_get("/healthz", None).0).collect();
    assert!(codes.contains(&429), "{codes:?}");
    assert!(codes.iter().all(|c| *c == 200 || *c == 429), "{codes:?}");
}
