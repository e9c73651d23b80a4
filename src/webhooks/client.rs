//! The HTTP client deliveries are sent with, bounded like the card
//! network's (`network_client`): one `POST` within the attempt's timeout,
//! no redirect followed (a 3xx is a failed attempt, as the specification
//! says), at most [`MAX_ANSWER_BODY`] of the answer read, no proxy, and no
//! `Host` but the endpoint's own (the URL's).
//!
//! The target rule (`targets`) is applied to the addresses the connection
//! is actually made to: the agent's resolver checks every address a name
//! resolves to at this connect, so a name registered while it pointed at a
//! public address and later pointed at `127.0.0.1` (DNS rebinding) is
//! refused here, and nothing is sent.
//!
//! `https://` is verified (certificate chain and name) with native-tls,
//! which is the system's OpenSSL here (already linked for libpq).
//!
//! Blocking: call it on the blocking thread pool, holding no database
//! connection and in no transaction.

use std::io::Read;
use std::time::Duration;

use ureq::http::Uri;
use ureq::unversioned::resolver::{DefaultResolver, ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::{DefaultConnector, NextTimeout};

use super::targets::{self, TargetPolicy};

/// How much of a receiver's answer is read: its status is what counts.
pub const MAX_ANSWER_BODY: u64 = 4 * 1024;

pub const USER_AGENT: &str = concat!("charges-webhooks/", env!("CARGO_PKG_VERSION"));

/// What came of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The receiver answered with this status.
    Status(u16),
    /// No answer: why (a timeout, a refused connection, a refused target).
    None(String),
}

/// One message to send.
pub struct Message<'a> {
    pub url: &'a str,
    pub id: &'a str,
    pub timestamp: i64,
    pub signature: &'a str,
    pub body: &'a str,
}

/// The deliveries' agent.
pub struct WebhookClient {
    agent: ureq::Agent,
    policy: TargetPolicy,
}

/// The default resolver, then the target rule on every address it found:
/// the connector connects only to addresses this returned.
#[derive(Debug)]
struct CheckedResolver {
    policy: TargetPolicy,
}

impl Resolver for CheckedResolver {
    fn resolve(
        &self,
        uri: &Uri,
        config: &ureq::config::Config,
        timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let addrs = DefaultResolver::default().resolve(uri, config, timeout)?;
        let host = uri.host().unwrap_or_default();
        targets::check(host, &addrs, &self.policy).map_err(|e| ureq::Error::Other(Box::new(e)))?;
        Ok(addrs)
    }
}

impl WebhookClient {
    pub fn new(policy: TargetPolicy, timeout: Duration) -> WebhookClient {
        let config = ureq::Agent::config_builder()
            // The whole attempt: resolve, connect, send, answer.
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            // An environment's proxy would be connected to instead of the
            // endpoint, past the target rule.
            .proxy(None)
            .user_agent(USER_AGENT)
            // https:// through the OpenSSL the binary links for libpq
            // already, certificates verified against the bundled Mozilla
            // roots (ureq's default), the endpoint's name checked.
            .tls_config(
                ureq::tls::TlsConfig::builder()
                    .provider(ureq::tls::TlsProvider::NativeTls)
                    .build(),
            )
            .build();
        let resolver = CheckedResolver {
            policy: policy.clone(),
        };
        WebhookClient {
            agent: ureq::Agent::with_parts(config, DefaultConnector::default(), resolver),
            policy,
        }
    }

    /// Sends `message` once.
    pub fn send(&self, message: &Message) -> Answer {
        if let Err(why) = self.scheme_allowed(message.url) {
            return Answer::None(why);
        }
        let sent = self
            .agent
            .post(message.url)
            .header("content-type", "application/json")
            .header("webhook-id", message.id)
            .header("webhook-timestamp", message.timestamp.to_string())
            .header("webhook-signature", message.signature)
            .send(message.body);
        match sent {
            Ok(mut response) => {
                // Read a little (a receiver answering megabytes costs us
                // 4 KiB), then the connection is dropped.
                let mut sink = Vec::new();
                let _ = response
                    .body_mut()
                    .as_reader()
                    .take(MAX_ANSWER_BODY)
                    .read_to_end(&mut sink);
                Answer::Status(response.status().as_u16())
            }
            Err(e) => Answer::None(describe(e)),
        }
    }

    /// `https://`, or `http://` where the policy allows it.
    fn scheme_allowed(&self, url: &str) -> Result<(), String> {
        let parsed = url::Url::parse(url).map_err(|_| "the URL does not parse".to_owned())?;
        let host = parsed.host_str().unwrap_or_default();
        let port = parsed.port_or_known_default().unwrap_or(0);
        match parsed.scheme() {
            "https" => Ok(()),
            "http" if self.policy.http_allowed(host, port) => Ok(()),
            "http" => Err("http:// is not allowed here (WEBHOOK_ALLOW_HTTP)".to_owned()),
            other => Err(format!("{other}:// is not a webhook URL")),
        }
    }
}

/// Why an attempt got no answer, for the attempt's row (short, and nothing
/// of our infrastructure beyond what the endpoint's owner can know).
fn describe(error: ureq::Error) -> String {
    let text = match error {
        ureq::Error::Timeout(_) => "no answer within the timeout".to_owned(),
        ureq::Error::HostNotFound => "the host could not be resolved".to_owned(),
        ureq::Error::ConnectionFailed => "the connection failed".to_owned(),
        ureq::Error::Io(e) => format!("connection error: {}", e.kind()),
        ureq::Error::Other(e) => e.to_string(),
        e => e.to_string(),
    };
    text.chars().take(300).collect()
}
