//! The client side: [`AppClient`] sends what a test means in one call —
//! `app.charge(key, &body)`, `app.charge_with(key, &body, &headers)`,
//! `app.charge_as(api_key, key, &body, &headers)`, `app.get(path)` — and
//! answers with a [`Captured`] response: status, headers and the exact body.
//!
//! Whose requests: a client's own account ([`AppClient::api_key`]), by
//! default the test account ([`TEST_KEY`], a real account that
//! `spawn_app` creates), so that a test runs on the production path unless
//! it says otherwise. A test of the demo says so at the call site:
//! `app.demo().charge_with(key, &body, &[("demo-fault", "lose-response")])`.
//!
//! Where a test needs the request itself (a raw header, a transport error, a
//! response it reads as a stream), [`AppClient::charge_request`] and
//! [`AppClient::request`] give the `reqwest::RequestBuilder`, and
//! [`AppClient::send`] / [`AppClient::try_send`] capture what it gets.
//! [`AppClient::send_raw`] and [`AppClient::send_slowly`] write bytes on a
//! socket, for what reqwest will not send.

use std::future::Future;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, RequestBuilder, Response};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The demo account's public API key: what [`AppClient::demo`] sends.
pub const DEMO_KEY: &str = "sk_test_demo";

/// The test account's API key: a real (non-demo) account that `spawn_app`
/// creates ([`TEST_ACCOUNT`]); what requests authenticate with unless a
/// test says otherwise.
pub const TEST_KEY: &str = "sk_live_test_account";

/// The test account's name, for SQL that picks its rows.
pub const TEST_ACCOUNT: &str = "Test account";

/// No test request may take longer: a hang is a failure, not a stuck run.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

pub fn charge_body() -> Value {
    json!({"amount": 1000, "currency": "jpy", "description": "a book"})
}

/// A client of one running app (in this process or a child process).
#[derive(Clone)]
pub struct AppClient {
    /// `http://127.0.0.1:PORT`
    pub address: String,
    pub http: reqwest::Client,
    /// The account whose requests `charge`, `refund`, `set_description` and
    /// `get_json` send: [`TEST_KEY`] unless made with [`AppClient::demo`]
    /// or [`AppClient::as_account`].
    pub api_key: String,
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .no_proxy()
        // Below the server's keep-alive timeout (5 s): a connection the
        // server is closing is never picked for a new request.
        .pool_idle_timeout(Duration::from_secs(3))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
}

impl AppClient {
    pub fn new(address: &str) -> AppClient {
        AppClient {
            address: address.to_owned(),
            http: builder().build().unwrap(),
            api_key: TEST_KEY.to_owned(),
        }
    }

    /// A client whose connections come from `source` (any of 127.0.0.0/8,
    /// the per-client limits tell them apart), with a longer timeout for the
    /// storms these tests send.
    pub fn from_source(address: &str, source: &str) -> AppClient {
        let ip: std::net::IpAddr = source.parse().unwrap();
        AppClient {
            address: address.to_owned(),
            http: builder()
                .local_address(ip)
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            api_key: TEST_KEY.to_owned(),
        }
    }

    /// This client as the demo account ([`DEMO_KEY`]): for the tests of
    /// the demo (`Demo-*` headers, the demo account's rows and views).
    pub fn demo(&self) -> AppClient {
        self.as_account(DEMO_KEY)
    }

    /// A new sandbox of the demo's (`POST /demo/sandboxes`), and this
    /// client as it: for the tests of visitors kept apart.
    pub async fn new_sandbox(&self) -> AppClient {
        let made = self.post("/demo/sandboxes").await;
        assert_eq!(made.status, 201, "POST /demo/sandboxes: {}", made.body);
        let key = made.json()["api_key"].as_str().unwrap().to_owned();
        self.as_account(&key)
    }

    /// `POST path` as this client's account (a sandbox's `/demo/*` actions).
    pub async fn post_as_self(&self, path: &str) -> Captured {
        self.send(self.request(Method::POST, path).bearer_auth(&self.api_key))
            .await
    }

    /// The key this client's requests are made with.
    pub fn api_key(&self) -> &str {
        &self.api_key
    }

    /// This client as the account whose key is `api_key`.
    pub fn as_account(&self, api_key: &str) -> AppClient {
        AppClient {
            api_key: api_key.to_owned(),
            ..self.clone()
        }
    }

    /// A client that opens a new connection for every request (send
    /// `Connection: close` too, so that the server closes it after the
    /// response): a proxy can then lose exactly one response by dropping
    /// one connection.
    pub fn one_connection_per_request(address: &str) -> AppClient {
        AppClient {
            address: address.to_owned(),
            http: builder().pool_max_idle_per_host(0).build().unwrap(),
            api_key: TEST_KEY.to_owned(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.address, path)
    }

    /// `method path`, nothing else set yet.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http.request(method, self.url(path))
    }

    /// `POST /charges` as the account whose key is `api_key`, with the
    /// Idempotency-Key (when given) sent as a Structured Field string, and
    /// `headers` added.
    pub fn charge_request<'k>(
        &self,
        api_key: &str,
        key: impl Into<Option<&'k str>>,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> RequestBuilder {
        self.write_request(Method::POST, "/charges", api_key, key, body, headers)
    }

    /// `method path` with a JSON body as the account whose key is
    /// `api_key`, the Idempotency-Key (when given) sent as a Structured
    /// Field string, and `headers` added.
    pub fn write_request<'k>(
        &self,
        method: Method,
        path: &str,
        api_key: &str,
        key: impl Into<Option<&'k str>>,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> RequestBuilder {
        let mut request = self
            .request(method, path)
            .bearer_auth(api_key)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(key) = key.into() {
            request = request.header("idempotency-key", format!("\"{key}\""));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
    }

    /// `POST /charges` as this client's account. Built now and sent when awaited,
    /// so the future borrows nothing and can be raced with others.
    pub fn charge<'k, K: Into<Option<&'k str>>>(
        &self,
        key: K,
        body: &Value,
    ) -> impl Future<Output = Captured> + 'static + use<'k, K> {
        self.charge_as(&self.api_key, key, body, &[])
    }

    /// [`AppClient::charge`] with more headers (`Demo-Fault`, `Demo-Mode`, …).
    pub fn charge_with<'k, K: Into<Option<&'k str>>>(
        &self,
        key: K,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> impl Future<Output = Captured> + 'static + use<'k, K> {
        self.charge_as(&self.api_key, key, body, headers)
    }

    /// [`AppClient::charge_with`] as the account whose key is `api_key`.
    pub fn charge_as<'k, K: Into<Option<&'k str>>>(
        &self,
        api_key: &str,
        key: K,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> impl Future<Output = Captured> + 'static + use<'k, K> {
        let request = self.charge_request(api_key, key, body, headers);
        async move { Captured::read(request.send().await.expect("request sent")).await }
    }

    /// `POST /charges/{charge}/refunds {"amount": amount}` as this
    /// client's account. Built now and sent when awaited, like [`AppClient::charge`].
    pub fn refund<'k, K: Into<Option<&'k str>>>(
        &self,
        key: K,
        charge: &str,
        amount: i64,
    ) -> impl Future<Output = Captured> + 'static + use<'k, K> {
        let path = format!("/charges/{charge}/refunds");
        let body = serde_json::json!({ "amount": amount });
        let request = self.write_request(Method::POST, &path, &self.api_key, key, &body, &[]);
        async move { Captured::read(request.send().await.expect("request sent")).await }
    }

    /// [`AppClient::refund`] with any body and more headers.
    pub fn refund_with<'k, K: Into<Option<&'k str>>>(
        &self,
        key: K,
        charge: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> impl Future<Output = Captured> + 'static + use<'k, K> {
        let path = format!("/charges/{charge}/refunds");
        let request = self.write_request(Method::POST, &path, &self.api_key, key, body, headers);
        async move { Captured::read(request.send().await.expect("request sent")).await }
    }

    /// `PUT /charges/{charge}/description {"description": value}` as this
    /// client's account.
    pub fn set_description(
        &self,
        charge: &str,
        value: Option<&str>,
    ) -> impl Future<Output = Captured> + 'static + use<> {
        let path = format!("/charges/{charge}/description");
        let body = serde_json::json!({ "description": value });
        let request = self.write_request(Method::PUT, &path, &self.api_key, None, &body, &[]);
        async move { Captured::read(request.send().await.expect("request sent")).await }
    }

    /// Sends `request` and captures the response (a transport error fails
    /// the test).
    pub async fn send(&self, request: RequestBuilder) -> Captured {
        Captured::read(request.send().await.expect("request sent")).await
    }

    /// Sends `request`: the response, or why none came (the error's whole
    /// chain), for the tests where no response is an outcome.
    pub async fn try_send(&self, request: RequestBuilder) -> Result<Captured, String> {
        let response = request.send().await.map_err(|e| error_chain(&e))?;
        let (status, headers) = (response.status().as_u16(), response.headers().clone());
        match response.text().await {
            Ok(body) => Ok(Captured {
                status,
                headers,
                body,
            }),
            Err(e) => Err(format!("{status} with a lost body: {}", error_chain(&e))),
        }
    }

    /// `GET path` without credentials.
    pub async fn get(&self, path: &str) -> Captured {
        self.send(self.request(Method::GET, path)).await
    }

    /// `GET path` as the account whose key is `api_key`.
    pub async fn get_as(&self, api_key: &str, path: &str) -> Captured {
        self.send(self.request(Method::GET, path).bearer_auth(api_key))
            .await
    }

    /// `GET path` as this client's account, parsed as JSON.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get_as(&self.api_key, path).await.json()
    }

    /// `POST path` with no body and no credentials (the `/demo/*` actions).
    pub async fn post(&self, path: &str) -> Captured {
        self.send(self.request(Method::POST, path)).await
    }

    /// [`AppClient::post`], parsed as JSON.
    pub async fn post_json(&self, path: &str) -> Value {
        self.post(path).await.json()
    }

    /// Writes `request` as raw bytes and reads until the server closes the
    /// connection (send `Connection: close`); the response as text.
    pub async fn send_raw(&self, request: &str) -> String {
        let mut stream = tokio::net::TcpStream::connect(self.socket_address())
            .await
            .unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.unwrap();
        String::from_utf8_lossy(&response).into_owned()
    }

    /// Writes `head`, then `body` one byte every `pause`, as a client on a
    /// bad network would, until the server answers; then reads the whole
    /// answer (bounded by [`REQUEST_TIMEOUT`]). The response as text, empty
    /// if none came.
    pub async fn send_slowly(&self, head: &str, body: &[u8], pause: Duration) -> String {
        let stream = tokio::net::TcpStream::connect(self.socket_address())
            .await
            .unwrap();
        let (mut from_server, mut to_server) = stream.into_split();
        to_server.write_all(head.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        let exchange = async {
            let mut body = body.iter();
            let mut writing = true;
            let mut buf = [0u8; 4096];
            loop {
                tokio::select! {
                    read = from_server.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        // An answer: stop sending, read the rest of it.
                        Ok(n) => {
                            answer.extend_from_slice(&buf[..n]);
                            writing = false;
                            if is_complete(&answer) {
                                break;
                            }
                        }
                    },
                    _ = tokio::time::sleep(pause), if writing => match body.next() {
                        Some(byte) => writing = to_server.write_all(&[*byte]).await.is_ok(),
                        None => writing = false,
                    },
                }
            }
        };
        let _ = tokio::time::timeout(REQUEST_TIMEOUT, exchange).await;
        String::from_utf8_lossy(&answer).into_owned()
    }

    pub fn socket_address(&self) -> String {
        self.address.trim_start_matches("http://").to_owned()
    }
}

/// Whether `raw` holds a whole HTTP/1.1 response (head and body).
fn is_complete(raw: &[u8]) -> bool {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end + 4..];
    if head.contains("transfer-encoding: chunked") {
        return body.ends_with(b"0\r\n\r\n");
    }
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse::<usize>().ok());
    length.is_some_and(|n| body.len() >= n)
}

fn error_chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Status, the headers a client reads, and the exact body bytes.
#[derive(Debug, Clone)]
pub struct Captured {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Captured {
    /// Reads the whole of `response`.
    pub async fn read(response: Response) -> Captured {
        Captured {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: response.text().await.expect("the response's body"),
        }
    }

    /// Parses a raw HTTP/1.1 response as [`AppClient::send_raw`] or
    /// [`AppClient::send_slowly`] return it (`Content-Length` or chunked).
    #[track_caller]
    pub fn parse(raw: &str) -> Captured {
        let (head, rest) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("not an HTTP response: {raw:?}"));
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {raw:?}"));
        let mut headers = HeaderMap::new();
        for line in lines {
            let (name, value) = line
                .split_once(':')
                .unwrap_or_else(|| panic!("not a header line {line:?}: {raw:?}"));
            headers.append(
                HeaderName::from_bytes(name.trim().as_bytes()).unwrap(),
                HeaderValue::from_str(value.trim()).unwrap(),
            );
        }
        let chunked = headers
            .get("transfer-encoding")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
        let rest = rest.as_bytes();
        let body = if chunked {
            let mut body = Vec::new();
            let mut rest = rest;
            loop {
                let line_end = rest
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .unwrap_or_else(|| panic!("a chunk without its size line: {raw:?}"));
                let size = std::str::from_utf8(&rest[..line_end]).unwrap().trim();
                let size = usize::from_str_radix(size, 16)
                    .unwrap_or_else(|_| panic!("bad chunk size {size:?}: {raw:?}"));
                if size == 0 {
                    break;
                }
                let chunk = &rest[line_end + 2..];
                body.extend_from_slice(&chunk[..size]);
                rest = chunk[size..]
                    .strip_prefix(b"\r\n")
                    .unwrap_or(&chunk[size..]);
            }
            body
        } else {
            match headers.get("content-length") {
                Some(n) => rest[..n.to_str().unwrap().parse::<usize>().unwrap()].to_vec(),
                None => rest.to_vec(),
            }
        };
        let body = String::from_utf8(body).expect("a UTF-8 body");
        Captured {
            status,
            headers,
            body,
        }
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "a {} whose body is not JSON ({e}): {}",
                self.status, self.body
            )
        })
    }

    #[track_caller]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|v| v.to_str().expect("an ASCII header value"))
    }

    /// Marked `Idempotent-Replayed: true`.
    pub fn replayed(&self) -> bool {
        self.header("idempotent-replayed") == Some("true")
    }

    /// The charge id of a 201.
    #[track_caller]
    pub fn charge_id(&self) -> uuid::Uuid {
        assert_eq!(self.status, 201, "not a 201: {}", self.body);
        self.json()["id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a 201 without a charge id: {}", self.body))
    }

    /// `type` of a problem+json body.
    pub fn problem_type(&self) -> Option<String> {
        serde_json::from_str::<Value>(&self.body)
            .ok()
            .and_then(|v| v["type"].as_str().map(str::to_owned))
    }

    /// Status, and the problem type when there is one: `503 /problems/service-unavailable`.
    pub fn summary(&self) -> String {
        match self.problem_type() {
            Some(t) => format!("{} {t}", self.status),
            None => self.status.to_string(),
        }
    }

    /// Asserts a problem+json error of the given status and type.
    #[track_caller]
    pub fn assert_problem(&self, status: u16, slug: &str) {
        assert_eq!(self.status, status, "status for {slug}: {}", self.body);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json"),
            "{}",
            self.body
        );
        let body = self.json();
        assert_eq!(body["type"], format!("/problems/{slug}"), "{}", self.body);
        assert_eq!(body["status"], status);
        assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(body["detail"].as_str().is_some_and(|t| !t.is_empty()));
    }
}
