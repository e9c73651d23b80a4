//! A client that retries one logical charge with the same key until it gets
//! an answer (bounded in attempts and in time), on top of the support
//! module's [`AppClient`]: what each attempt got, and what ended it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{AppClient, Captured};

pub fn body() -> Value {
    json!({"amount": 1000, "currency": "jpy"})
}

/// One attempt: a response, or no response at all.
#[derive(Debug, Clone)]
pub enum Attempt {
    Reply(Captured),
    Transport(String),
}

impl Attempt {
    pub fn reply(&self) -> Option<&Captured> {
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

/// One attempt at `POST /charges` as `client`'s account (the test account
/// unless it is `client.demo()`) with `key`, plus `headers`: its response,
/// or why none came.
pub async fn attempt(client: &AppClient, key: &str, headers: &[(&str, &str)]) -> Attempt {
    let request = client.charge_request(&client.api_key, key, &body(), headers);
    match client.try_send(request).await {
        Ok(reply) => Attempt::Reply(reply),
        Err(e) => Attempt::Transport(e),
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
    pub fn answer(&self) -> Option<&Captured> {
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
/// `servers[(first + n) % servers.len()]` with the headers `headers(n)`.
pub async fn charge_until_answered(
    servers: &[AppClient],
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
        let server = &servers[(first + n) % servers.len()];
        let outcome = attempt(server, &key, &headers(n)).await;
        let done = !outcome.is_retryable();
        attempts.push(outcome);
        if done {
            break;
        }
    }
    Charge { key, attempts }
}

pub fn new_key() -> String {
    Uuid::new_v4().to_string()
}
