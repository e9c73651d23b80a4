//! A client that retries a charge safely.
//!
//! It makes ONE Idempotency-Key per logical charge, before the first attempt,
//! and sends that same key with every retry, so the server can tell a retry
//! from a new charge. It retries what may succeed later (network errors,
//! 5xx, 409 in flight, 429), backs off exponentially with full jitter,
//! honours `Retry-After`, and gives up after a bound. It never retries a
//! `402 card-declined`: a decline is the charge's result, stored under the
//! key, and retrying would only replay it; trying again (another card) is a
//! new charge, with a new key.
//!
//! ```sh
//! cargo run --release &                                  # the demo server
//! cargo run --example retrying_client -- --lose 2        # two lost responses, then success
//! cargo run --example retrying_client -- --lose 1 --payment-method pm_card_chargeDeclined
//! ```

use std::time::Duration;

const USAGE: &str = "usage: retrying_client [--url URL] [--api-key KEY] [--amount N] [--currency C] \
[--payment-method ID] [--lose N] [--max-attempts N]\n  --lose N  ask the demo server to lose the first N responses (Demo-Fault: lose-response)\n  --payment-method ID  a test payment method (docs/api.md), e.g. pm_card_chargeDeclined";

struct Options {
    url: String,
    api_key: String,
    amount: i64,
    currency: String,
    payment_method: String,
    lose: u32,
    max_attempts: u32,
}

fn options() -> Result<Options, String> {
    let mut o = Options {
        url: "http://127.0.0.1:8080".into(),
        api_key: "sk_test_demo".into(),
        amount: 1000,
        currency: "jpy".into(),
        payment_method: "pm_card_visa".into(),
        lose: 0,
        max_attempts: 8,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--url" => o.url = value()?,
            "--api-key" => o.api_key = value()?,
            "--amount" => o.amount = value()?.parse().map_err(|e| format!("--amount: {e}"))?,
            "--currency" => o.currency = value()?,
            "--payment-method" => o.payment_method = value()?,
            "--lose" => o.lose = value()?.parse().map_err(|e| format!("--lose: {e}"))?,
            "--max-attempts" => {
                o.max_attempts = value()?
                    .parse()
                    .map_err(|e| format!("--max-attempts: {e}"))?
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// Full jitter: a random delay between 0 and min(cap, base * 2^attempt).
fn backoff(attempt: u32) -> Duration {
    let ceiling = Duration::from_millis(100)
        .saturating_mul(1 << attempt.min(10))
        .min(Duration::from_secs(5));
    // The random bits of a v4 UUID are a fine source of jitter here.
    let fraction = (uuid::Uuid::new_v4().as_u128() % 1_000) as f64 / 1_000.0;
    ceiling.mul_f64(fraction)
}

fn retry_after(response: &reqwest::Response) -> Option<Duration> {
    let secs: u64 = response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs.min(30)))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    // One key for the whole logical charge: made once, reused by every attempt.
    let key = uuid::Uuid::new_v4().to_string();
    let body = serde_json::json!({
        "amount": o.amount,
        "currency": o.currency,
        "description": "retrying_client",
        "payment_method": o.payment_method,
    });
    println!(
        "charge {} {} with Idempotency-Key: \"{key}\"",
        o.amount, o.currency
    );

    for attempt in 1..=o.max_attempts {
        let mut request = client
            .post(format!("{}/charges", o.url.trim_end_matches('/')))
            .bearer_auth(&o.api_key)
            .header("content-type", "application/json")
            .header("idempotency-key", format!("\"{key}\""))
            .body(body.to_string());
        if attempt <= o.lose {
            request = request.header("demo-fault", "lose-response");
        }
        let wait = match request.send().await {
            Err(e) => {
                println!(
                    "attempt {attempt}: network error ({e}); the charge may or may not have happened"
                );
                backoff(attempt)
            }
            Ok(response) => {
                let status = response.status();
                let replayed = response.headers().get("idempotent-replayed").is_some();
                let hint = retry_after(&response);
                let text = response.text().await.unwrap_or_default();
                let retryable =
                    status.is_server_error() || status.as_u16() == 409 || status.as_u16() == 429;
                if status.is_success() {
                    let charge: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                    println!(
                        "attempt {attempt}: {status}{} charge {}",
                        if replayed {
                            " (replayed: the charge had already happened)"
                        } else {
                            ""
                        },
                        charge["id"].as_str().unwrap_or("?")
                    );
                    return std::process::ExitCode::SUCCESS;
                }
                if status.as_u16() == 402 {
                    // The decline is the result: final for this key.
                    let problem: serde_json::Value =
                        serde_json::from_str(&text).unwrap_or_default();
                    println!(
                        "attempt {attempt}: {status}{}, declined ({}): final, not retried; charge {} failed. Another attempt is a new charge with a new key.",
                        if replayed { " (replayed)" } else { "" },
                        problem["decline_code"].as_str().unwrap_or("?"),
                        problem["charge"].as_str().unwrap_or("?"),
                    );
                    return std::process::ExitCode::FAILURE;
                }
                if !retryable {
                    println!("attempt {attempt}: {status}, not retryable: {text}");
                    return std::process::ExitCode::FAILURE;
                }
                println!("attempt {attempt}: {status}, will retry with the same key");
                hint.unwrap_or_else(|| backoff(attempt))
            }
        };
        if attempt < o.max_attempts {
            println!("  waiting {} ms", wait.as_millis());
            tokio::time::sleep(wait).await;
        }
    }
    println!(
        "gave up after {} attempts; retry later with the same key: \"{key}\"",
        o.max_attempts
    );
    std::process::ExitCode::FAILURE
}
