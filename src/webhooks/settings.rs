//! The webhook settings: where an endpoint may point, and how its
//! deliveries are retried. Every one is a flag and an environment variable.

use std::time::Duration;

use clap::{ArgAction, Args};

use super::targets::TargetPolicy;

/// How long one delivery attempt may take (connect, send, answer) before it
/// counts as failed and is retried.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a sender looks for due deliveries when none woke it.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// The Standard Webhooks specification's example schedule: the delay before
/// each attempt after the first (immediately, 5 s, 5 min, 30 min, 2 h, 5 h,
/// 10 h, 10 h), eight attempts over 27 h 35 min.
pub const DEFAULT_RETRY_SCHEDULE: &str = "0s,5s,5m,30m,2h,5h,10h,10h";

#[derive(Debug, Clone, Args)]
pub struct WebhookSettings {
    /// Let webhook endpoints point at loopback, private, link-local and other non-public addresses (checked at registration and at every connect). The loopback demo allows loopback for its own receiver.
    #[arg(long = "webhook-allow-private-targets", env = "WEBHOOK_ALLOW_PRIVATE_TARGETS", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_private_targets: bool,

    /// Let webhook endpoints use http:// as well as https:// (certificates are verified on https://).
    #[arg(long = "webhook-allow-http", env = "WEBHOOK_ALLOW_HTTP", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub allow_http: bool,

    /// The delay before each delivery attempt, comma-separated (the first is usually 0s); after the last, the delivery is marked failed. Each delay gets up to 10 % jitter.
    #[arg(long = "webhook-retry-schedule", env = "WEBHOOK_RETRY_SCHEDULE", default_value = DEFAULT_RETRY_SCHEDULE, value_delimiter = ',', value_parser = parse_delay)]
    pub retry_schedule: Vec<Duration>,

    /// How long one delivery attempt may take before it counts as failed.
    #[arg(long = "webhook-timeout", env = "WEBHOOK_TIMEOUT", default_value = "10s", value_parser = parse_delay)]
    pub timeout: Duration,

    /// Demo mode hosted for others (`charges demo --public`): let visitors register webhook endpoints (each still checked against WEBHOOK_ALLOW_*). Off by default: a public page must not become anyone's request sender.
    #[arg(long = "demo-public-webhooks", env = "DEMO_PUBLIC_WEBHOOKS", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub demo_public_webhooks: bool,

    /// How often the sender looks for due deliveries (0s: no sender in this process).
    #[arg(long = "webhook-poll-interval", env = "WEBHOOK_POLL_INTERVAL", default_value = "1s", value_parser = parse_delay)]
    pub poll_interval: Duration,

    /// Exact addresses allowed beyond the rule (not a flag: the app sets
    /// the hosted demo's own bound address, see `TargetPolicy::also_allow`).
    #[arg(skip)]
    pub also_allow: Vec<std::net::SocketAddr>,
}

impl Default for WebhookSettings {
    fn default() -> Self {
        WebhookSettings {
            allow_private_targets: false,
            allow_http: false,
            retry_schedule: DEFAULT_RETRY_SCHEDULE
                .split(',')
                .map(|d| parse_delay(d).expect("the default schedule parses"))
                .collect(),
            timeout: DEFAULT_TIMEOUT,
            poll_interval: DEFAULT_POLL_INTERVAL,
            also_allow: Vec::new(),
            demo_public_webhooks: false,
        }
    }
}

impl WebhookSettings {
    /// The rule endpoint URLs are checked against.
    pub fn target_policy(&self) -> TargetPolicy {
        TargetPolicy {
            allow_private: self.allow_private_targets,
            allow_loopback: false,
            allow_http: self.allow_http,
            also_allow: self.also_allow.clone(),
        }
    }
}

fn parse_delay(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{e} (examples: 0s, 5s, 30m, 10h)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_schedule_is_the_specifications_example() {
        let s = WebhookSettings::default();
        assert_eq!(s.retry_schedule.len(), 8);
        let total: Duration = s.retry_schedule.iter().sum();
        assert_eq!(total, Duration::from_secs(27 * 3600 + 35 * 60 + 5));
    }
}
