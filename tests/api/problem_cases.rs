//! The first rows of the problem types' table (`problem_types.rs` runs them,
//! then its own): the request's validation, authentication and the
//! deadlines, the card network, recovery, the limits, the demo's walls,
//! refunds and the body's framing.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::problem_types::{Answer, Case, SHOP_KEY, own, shared};
use crate::support::{
    Captured, TEST_ACCOUNT, TEST_KEY, TestApp, TestDatabase, charge_body, spawn_app_with,
};

pub(crate) const CASES: &[Case] = &[
    Case {
        what: "a charge of amount 0",
        status: 400,
        slug: "invalid-request",
        send: |ctx| {
            Box::pin(async move {
                let zero = json!({"amount": 0, "currency": "jpy"});
                shared(ctx.app.charge("k-invalid", &zero).await)
            })
        },
    },
    Case {
        what: "an empty Idempotency-Key",
        status: 400,
        slug: "invalid-idempotency-key",
        send: |ctx| Box::pin(async move { shared(ctx.app.charge("", &charge_body()).await) }),
    },
    Case {
        what: "an unknown API key",
        status: 401,
        slug: "unauthorized",
        send: |ctx| {
            Box::pin(async move {
                let r =
                    ctx.app
                        .charge_as("sk_test_nobody", "k-unknown-caller", &charge_body(), &[]);
                shared(r.await)
            })
        },
    },
    Case {
        what: "an unknown charge id",
        status: 404,
        slug: "not-found",
        send: |ctx| {
            Box::pin(async move {
                let path = "/charges/00000000-0000-0000-0000-000000000000";
                shared(ctx.app.get_as(TEST_KEY, path).await)
            })
        },
    },
    Case {
        what: "a request the database does not answer within REQUEST_TIMEOUT",
        status: 503,
        slug: "deadline-exceeded",
        send: |_| Box::pin(deadline_exceeded()),
    },
    Case {
        what: "a charge the card network does not answer",
        status: 503,
        slug: "network-unavailable",
        send: |_| Box::pin(network_down()),
    },
    Case {
        what: "an account revoked while its charge waits on the network",
        status: 403,
        slug: "account-revoked",
        send: |_| Box::pin(revoked_while_waiting()),
    },
    Case {
        what: "a stuck key the recovery task cannot rebuild, replayed",
        status: 500,
        slug: "request-not-recoverable",
        send: |_| Box::pin(unrecoverable()),
    },
    Case {
        what: "an account over its rate limit",
        status: 429,
        slug: "rate-limited",
        send: |_| Box::pin(rate_limited()),
    },
    Case {
        what: "a sandbox when the room is full",
        status: 503,
        slug: "demo-room-full",
        send: |ctx| {
            Box::pin(async move {
                // Every sandbox of the demo in use.
                assert_eq!(ctx.app.post("/demo/sandboxes").await.status, 201);
                shared(ctx.app.post("/demo/sandboxes").await)
            })
        },
    },
    Case {
        what: "a sandbox with an unknown room code",
        status: 403,
        slug: "demo-room-unknown",
        send: |ctx| {
            Box::pin(async move {
                // A room code the demo does not hand out (it hands out none here).
                let app = &ctx.app;
                let request = app
                    .request(Method::POST, "/demo/sandboxes")
                    .header("demo-room", "no-such-room");
                shared(app.send(request).await)
            })
        },
    },
    Case {
        what: "a cross-site POST /demo/reset",
        status: 403,
        slug: "cross-site-request",
        send: |ctx| {
            Box::pin(async move {
                // A browser's cross-site POST to the demo's routes.
                let app = &ctx.app;
                let request = app
                    .request(Method::POST, "/demo/reset")
                    .header("origin", "https://elsewhere.example")
                    .header("sec-fetch-site", "cross-site");
                shared(app.send(request).await)
            })
        },
    },
    Case {
        what: "a refund of more than the charge",
        status: 400,
        slug: "refund-exceeds-charge",
        send: |ctx| {
            Box::pin(async move {
                let app = &ctx.app;
                let charged = app.charge(None, &charge_body()).await;
                assert_eq!(charged.status, 201);
                let id = charged.charge_id().to_string();
                shared(app.refund("k-too-much", &id, 1_000_000).await)
            })
        },
    },
    Case {
        what: "a declining test payment method",
        status: 402,
        slug: "card-declined",
        send: |ctx| {
            Box::pin(async move { shared(ctx.app.charge("k-declined", &declined()).await) })
        },
    },
    Case {
        what: "a refund of a failed charge",
        status: 400,
        slug: "charge-not-refundable",
        send: |ctx| {
            Box::pin(async move {
                let app = &ctx.app;
                let r = app.charge("k-declined-for-refund", &declined()).await;
                assert_eq!(r.status, 402, "{}", r.body);
                let failed = r.json()["charge"].as_str().unwrap_or_default().to_owned();
                shared(app.refund("k-refund-failed", &failed, 100).await)
            })
        },
    },
    Case {
        what: "DELETE /charges",
        status: 405,
        slug: "method-not-allowed",
        send: |ctx| {
            Box::pin(async move {
                let app = &ctx.app;
                let request = app
                    .request(Method::DELETE, "/charges")
                    .bearer_auth(TEST_KEY);
                shared(app.send(request).await)
            })
        },
    },
    Case {
        what: "a body slower than BODY_TIMEOUT",
        status: 408,
        slug: "request-timeout",
        send: |ctx| {
            Box::pin(async move {
                // One byte every 200 ms: the body is not there within 500 ms.
                let raw = ctx
                    .app
                    .send_slowly(
                        "POST /charges HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer sk_live_test_account\r\n\
                         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{",
                        &[b' '; 20],
                        Duration::from_millis(200),
                    )
                    .await;
                shared(Captured::parse(&raw))
            })
        },
    },
    Case {
        what: "a body over 16 KiB",
        status: 413,
        slug: "payload-too-large",
        send: |ctx| {
            Box::pin(async move {
                let large = json!({"amount": 1000, "currency": "jpy", "description": "x".repeat(17 * 1024)});
                shared(ctx.app.charge("k-large", &large).await)
            })
        },
    },
    Case {
        what: "a text/plain body",
        status: 415,
        slug: "unsupported-media-type",
        send: |ctx| {
            Box::pin(async move {
                let app = &ctx.app;
                let request = app
                    .request(Method::POST, "/charges")
                    .bearer_auth(TEST_KEY)
                    .header("content-type", "text/plain")
                    .body(charge_body().to_string());
                shared(app.send(request).await)
            })
        },
    },
    Case {
        what: "a gzip-encoded body",
        status: 415,
        slug: "unsupported-content-encoding",
        send: |ctx| {
            Box::pin(async move {
                let app = &ctx.app;
                let request = app
                    .request(Method::POST, "/charges")
                    .bearer_auth(TEST_KEY)
                    .header("content-type", "application/json")
                    .header("content-encoding", "gzip")
                    .body(charge_body().to_string());
                let r = app.send(request).await;
                assert_eq!(r.header("accept-encoding"), Some("identity"));
                shared(r)
            })
        },
    },
];

fn declined() -> serde_json::Value {
    json!({"amount": 500, "currency": "jpy", "payment_method": "pm_card_chargeDeclined"})
}

/// The database does not answer within REQUEST_TIMEOUT: here the key table
/// held by a transaction of the test's own, past a deadline of 1 s.
async fn deadline_exceeded() -> Option<Answer> {
    let hurried = spawn_app_with(|s| s.request_timeout = Duration::from_secs(1)).await;
    let hold = hurried.hold_key_writes();
    let r = hurried.charge("k-slow", &charge_body()).await;
    drop(hold);
    assert_eq!(r.header("retry-after"), Some("1"));
    own(r, hurried, vec![])
}

/// A server whose card network is in process, on a database of its own;
/// `configure` sets the rest.
async fn networked(
    configure: impl FnOnce(&mut charges::config::Settings),
) -> (TestApp, TestDatabase) {
    let network_db = TestDatabase::create();
    let network_url = network_db.url.clone();
    let app = spawn_app_with(move |s| {
        s.network_url = charges::config::NETWORK_IN_PROCESS.to_owned();
        s.network_database_url = Some(network_url);
        configure(s);
    })
    .await;
    (app, network_db)
}

/// The card network does not answer: 503, nothing stored.
async fn network_down() -> Option<Answer> {
    let (networked, network_db) = networked(|_| {}).await;
    let r = networked
        .demo()
        .charge_with(
            "k-network-down",
            &charge_body(),
            &[("demo-fault", "network-down")],
        )
        .await;
    own(r, networked, vec![network_db])
}

/// The account revoked while its charge waits on the card network: a
/// stored 403, nothing charged, the authorization voided (issue #27).
async fn revoked_while_waiting() -> Option<Answer> {
    let (slow, network_db) = networked(|s| {
        s.network_latency = Duration::from_millis(800);
        s.recovery_interval = Duration::from_millis(200);
    })
    .await;
    slow.create_account("Shop", SHOP_KEY);
    let body = charge_body();
    let charge = slow.charge_as(SHOP_KEY, "k-revoked", &body, &[]);
    let revoke = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        slow.execute("UPDATE accounts SET revoked_at = CURRENT_TIMESTAMP WHERE name = 'Shop'");
    };
    let (r, ()) = tokio::join!(charge, revoke);
    own(r, slow, vec![network_db])
}

/// A key left in progress under a path this server cannot rebuild (an
/// older server kept the raw one): the recovery task stores a final 500,
/// and the key's retry replays it.
async fn unrecoverable() -> Option<Answer> {
    let slow = spawn_app_with(|s| s.recovery_interval = Duration::from_millis(200)).await;
    let body = charge_body();
    let fingerprint = charges::idempotency::Fingerprint::of("POST", "/%63harges", &body);
    slow.execute(&format!(
        "INSERT INTO idempotency_keys (account_id, key, fingerprint, status, created_at, expires_at, locked_until, lease_token, request_path, request_body) \
         SELECT id, 'k-unrecoverable', '{}', 'in_progress', {}, {}, {}, '{}', '/%63harges', '{body}' FROM accounts WHERE name = '{TEST_ACCOUNT}'",
        fingerprint.as_str(),
        slow.at(-10),
        slow.at(86_400),
        slow.at(-1),
        uuid::Uuid::new_v4(),
    ));
    while slow.count("idempotency_keys WHERE key = 'k-unrecoverable' AND status = 'completed'") == 0
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let retry = slow
        .request(Method::POST, "/%63harges")
        .bearer_auth(TEST_KEY)
        .header("content-type", "application/json")
        .header("idempotency-key", "\"k-unrecoverable\"")
        .body(body.to_string());
    let r = slow.send(retry).await;
    assert!(r.replayed(), "{}", r.body);
    own(r, slow, vec![])
}

/// One account over its rate limit: 429, before anything runs.
async fn rate_limited() -> Option<Answer> {
    let limited = spawn_app_with(|s| s.rate_limit_per_account = 1).await;
    let mut r = limited.get_as(TEST_KEY, "/charges").await;
    for _ in 0..5 {
        if r.status == 429 {
            break;
        }
        r = limited.get_as(TEST_KEY, "/charges").await;
    }
    assert!(r.header("retry-after").is_some());
    own(r, limited, vec![])
}
