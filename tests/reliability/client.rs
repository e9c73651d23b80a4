//! The client side: `POST /charges` as the demo account, what came back, and
//! a client that retries one logical charge with the same key until it gets
//! an answer (bounded in attempts and in time).

use std::time::{Duration, Instant};

use reqwest::Client;
use serde_json::Value;
use uuid::Uuid;

pub const API_KEY: &str = "sk_test_demo";
pub const BODY: &str = r#"{"amount":1000,"currency":"jpy"}"#;
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

pub fn client() -> Client {
    Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .build()
        .unwrap()
}

/// A client that opens a new connection for every request (and asks the
/// server to close it after the response), so a proxy can lose exactly one
/// response by dropping one connection.
pub fn one_connection_per_request_client() -> Client {
    Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub replayed: bool,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
    pub location: Option<String>,
    pub body: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "a {} whose body is not JSON ({e}): {}",
                self.status, self.body
            )
        })
    }

    /// The charge id of a 201.
    pub fn charge_id(&self) -> Uuid {
        assert_eq!(self.status, 201, "not a 201: {}", self.body);
        let json = self.json();
        json["id"]
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
}

/// One attempt: a response, or no response at all.
#[derive(Debug, Clone)]
pub enum Attempt {
    Reply(Reply),
    Transport(String),
}

impl Attempt {
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            Attempt::Reply(r) => Some(r),
            Attempt::Transport(_) => None,
        }
    }

    pub fn summary(&self) -> String {
        match self {
            Attempt::Reply(r) => r.summary(),
            Attempt::Transport(_) => "no response".to_owned(),
        }
    }

    /// What a client retries with the same key: no response, 409 (in
    /// flight), 5xx (500 is documented as "retrying with the same key is
    /// safe", 503 as "retry shortly", 504 is the lost response).
    pub fn is_retryable(&self) -> bool {
        match self {
            Attempt::Transport(_) => true,
            Attempt::Reply(r) => r.status == 409 || r.status >= 500,
        }
    }
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

/// `POST /charges` with `key` as a Structured Field string, plus `headers`.
pub async fn post_charge(
    client: &Client,
    base: &str,
    key: &str,
    headers: &[(&str, &str)],
) -> Attempt {
    let mut request = client
        .post(format!("{base}/charges"))
        .bearer_auth(API_KEY)
        .header("content-type", "application/json")
        .header("idempotency-key", format!("\"{key}\""))
        .body(BODY);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = match request.send().await {
        Ok(r) => r,
        Err(e) => return Attempt::Transport(error_chain(&e)),
    };
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("<not ascii>").to_owned())
    };
    let status = response.status().as_u16();
    let replayed = header("idempotent-replayed").as_deref() == Some("true");
    let content_type = header("content-type");
    let retry_after = header("retry-after");
    let location = header("location");
    match response.text().await {
        Ok(body) => Attempt::Reply(Reply {
            status,
            replayed,
            content_type,
            retry_after,
            location,
            body,
        }),
        Err(e) => Attempt::Transport(format!("{status} with a lost body: {}", error_chain(&e))),
    }
}

/// One logical charge: its key, every attempt, and the answer that ended it.
#[derive(Debug)]
pub struct Charge {
    pub key: String,
    pub attempts: Vec<Attempt>,
}

impl Charge {
    /// The last attempt if it was an answer (not retryable).
    pub fn answer(&self) -> Option<&Reply> {
        self.attempts
            .last()
            .filter(|a| !a.is_retryable())
            .and_then(Attempt::reply)
    }

    /// Every attempt's outcome, with the transport errors spelled out.
    pub fn history(&self) -> String {
        self.attempts
            .iter()
            .map(|a| match a {
                Attempt::Transport(e) => format!("no response ({e})"),
                reply => reply.summary(),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub struct Retry {
    pub max_attempts: usize,
    pub backoff: Duration,
    pub deadline: Instant,
}

/// Sends the same charge with the same key until an attempt is not
/// retryable, or the attempts or the time run out. Attempt `n` goes to
/// `bases[(first + n) % bases.len()]` with the headers `headers(n)`.
pub async fn charge_until_answered(
    client: &Client,
    bases: &[String],
    first: usize,
    key: String,
    retry: &Retry,
    headers: impl Fn(usize) -> Vec<(&'static str, &'static str)>,
) -> Charge {
    let mut attempts = Vec::new();
    for n in 0..retry.max_attempts {
        if n > 0 {
            if Instant::now() + retry.backoff >= retry.deadline {
                break;
            }
            tokio::time::sleep(retry.backoff).await;
        }
        let base = &bases[(first + n) % bases.len()];
        let attempt = post_charge(client, base, &key, &headers(n)).await;
        let done = !attempt.is_retryable();
        attempts.push(attempt);
        if done {
            break;
        }
    }
    Charge { key, attempts }
}

pub fn new_key() -> String {
    Uuid::new_v4().to_string()
}
