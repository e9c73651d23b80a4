//! Every problem type the server emits, provoked by a real request: a table
//! of cases ([`CASES`], one row per request: what it is, the status and
//! type it must be answered with, and how it is sent), run in order on the
//! backend of the running test by [`provoke_every_problem_type`]. Each
//! answer's type URI is dereferenced on the server that answered
//! ([`Provoked::check`]).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support::{
    AppClient, Captured, DEMO_KEY, TestApp, TestBackend, TestDatabase, charge_body, spawn_app_with,
};

pub(crate) const SHOP_KEY: &str = "sk_live_shop_for_problem_tests";

/// The problem types seen, each with the requests that provoked it.
#[derive(Default)]
pub(crate) struct Provoked(pub(crate) BTreeMap<String, Vec<&'static str>>);

impl Provoked {
    /// `r`, the answer to `what`, is the problem `slug` with `status`, and
    /// its `type` URI, dereferenced on the server that answered, serves
    /// that type with the status and the title `r` had.
    async fn check(
        &mut self,
        server: &AppClient,
        what: &'static str,
        r: Captured,
        status: u16,
        slug: &str,
    ) {
        assert_eq!(r.status, status, "{what}: {}", r.body);
        r.assert_problem(status, slug);
        let problem = r.json();
        let uri = problem["type"].as_str().unwrap();
        let served = server.get(uri).await;
        assert_eq!(
            served.status, 200,
            "{what}: its type {uri} is not served: {}",
            served.body
        );
        let served = served.json();
        assert_eq!(served["type"], uri, "{what}: {served}");
        assert_eq!(
            served["status"], r.status,
            "{what}: {uri} documents another status"
        );
        assert_eq!(
            served["title"], problem["title"],
            "{what}: {uri} documents another title"
        );
        self.0.entry(uri.to_owned()).or_default().push(what);
    }
}

/// What the cases share: the server most of them ask (a short
/// `BODY_TIMEOUT`, room for one delayed transaction, a second account
/// `SHOP_KEY`), and lesson 8's receiver, made by the case before the one
/// that needs it (its path and endpoint id).
pub(crate) struct Ctx {
    pub(crate) app: TestApp,
    receiver: RefCell<Option<(String, String)>>,
}

/// An answer, and the server that gave it when it is not the shared one
/// (kept, with the databases it runs on, until its type URI is read).
pub(crate) struct Answer {
    r: Captured,
    own: Option<(TestApp, Vec<TestDatabase>)>,
}

/// A case's request on its way; `None`: not on this backend.
pub(crate) type Sent<'a> = Pin<Box<dyn Future<Output = Option<Answer>> + 'a>>;

/// One row: the request, and the problem it must be answered with.
pub(crate) struct Case {
    pub(crate) what: &'static str,
    pub(crate) status: u16,
    pub(crate) slug: &'static str,
    pub(crate) send: for<'a> fn(&'a Ctx) -> Sent<'a>,
}

/// Answered by the shared server.
pub(crate) fn shared(r: Captured) -> Option<Answer> {
    Some(Answer { r, own: None })
}

/// Answered by a server of the case's own.
pub(crate) fn own(r: Captured, server: TestApp, databases: Vec<TestDatabase>) -> Option<Answer> {
    Some(Answer {
        r,
        own: Some((server, databases)),
    })
}

/// Sends, on the backend of the running test, one request for each way the
/// server answers with a problem (each `ApiError` and each demo fault), in
/// the table's order, and checks each answer's type at its URI.
pub(crate) async fn provoke_every_problem_type() -> (TestApp, Provoked) {
    let app = spawn_app_with(|s| {
        s.body_timeout = Duration::from_millis(500);
        s.demo_max_delayed = Some(1);
        s.demo_max_sandboxes = 1;
    })
    .await;
    app.create_account("Shop", SHOP_KEY);
    let ctx = Ctx {
        app,
        receiver: RefCell::new(None),
    };
    let mut provoked = Provoked::default();
    for case in crate::problem_cases::CASES.iter().chain(CASES) {
        let Some(answer) = (case.send)(&ctx).await else {
            continue;
        };
        let server: &AppClient = match &answer.own {
            Some((server, _)) => server,
            None => &ctx.app,
        };
        provoked
            .check(server, case.what, answer.r, case.status, case.slug)
            .await;
    }
    (ctx.app, provoked)
}

/// The cases that run on the shared server's demo, the webhooks' and lesson
/// 8's (the rest: `problem_cases.rs`).
const CASES: &[Case] = &[
    Case {
        what: "a retry while the first request with its key runs (key-first)",
        status: 409,
        slug: "idempotency-key-in-flight",
        send: |ctx| Box::pin(key_first_in_flight(&ctx.app)),
    },
    Case {
        what: "a key reused with another body",
        status: 422,
        slug: "idempotency-key-reused",
        send: |ctx| {
            Box::pin(async move {
                let app = &ctx.app;
                assert_eq!(app.charge("k-reused", &charge_body()).await.status, 201);
                let other = json!({"amount": 2000, "currency": "jpy"});
                shared(app.charge("k-reused", &other).await)
            })
        },
    },
    Case {
        what: "Demo-Fault: fail-before-commit",
        status: 500,
        slug: "internal",
        send: |ctx| {
            Box::pin(async move {
                let fault = [("demo-fault", "fail-before-commit")];
                let r = ctx
                    .app
                    .demo()
                    .charge_with("k-internal", &charge_body(), &fault);
                shared(r.await)
            })
        },
    },
    Case {
        what: "a Demo-Fault from another account",
        status: 400,
        slug: "demo-account-only",
        send: |ctx| {
            Box::pin(async move {
                let fault = [("demo-fault", "lose-response")];
                let r = ctx
                    .app
                    .charge_as(SHOP_KEY, "k-shop", &charge_body(), &fault);
                shared(r.await)
            })
        },
    },
    Case {
        what: "a Host that is not this machine's",
        status: 421,
        slug: "host-not-allowed",
        send: |ctx| {
            Box::pin(async move {
                // Demo mode answers this machine's names only (DNS rebinding).
                let raw =
                    "GET /demo/state HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n";
                shared(Captured::parse(&ctx.app.send_raw(raw).await))
            })
        },
    },
    Case {
        what: "Demo-Fault: lose-response",
        status: 504,
        slug: "simulated-lost-response",
        send: |ctx| {
            Box::pin(async move {
                let fault = [("demo-fault", "lose-response")];
                shared(
                    ctx.app
                        .demo()
                        .charge_with("k-lost", &charge_body(), &fault)
                        .await,
                )
            })
        },
    },
    Case {
        what: "an unsigned delivery to lesson 8's receiver",
        status: 400,
        slug: "webhook-not-verified",
        send: |ctx| Box::pin(lesson8_unsigned(ctx)),
    },
    Case {
        what: "lesson 8's receiver told to lose its answer",
        status: 500,
        slug: "simulated-lost-answer",
        send: |ctx| Box::pin(lesson8_lost_answer(ctx)),
    },
    Case {
        what: "a delayed transaction beyond DEMO_MAX_DELAYED",
        status: 503,
        slug: "service-unavailable",
        send: |ctx| Box::pin(beyond_max_delayed(&ctx.app)),
    },
    Case {
        what: "a charge while the server's only connection is taken",
        status: 503,
        slug: "service-unavailable",
        send: |_| Box::pin(no_connection()),
    },
    Case {
        what: "a demo charge while the demo's places in flight are taken",
        status: 503,
        slug: "service-unavailable",
        send: |_| Box::pin(no_place_in_flight()),
    },
    Case {
        what: "a charge without a key where one is required",
        status: 400,
        slug: "invalid-idempotency-key",
        send: |_| {
            Box::pin(async {
                let required = spawn_app_with(|s| s.require_idempotency_key = true).await;
                let r = required.charge(None, &charge_body()).await;
                own(r, required, vec![])
            })
        },
    },
    Case {
        what: "a loopback webhook target",
        status: 400,
        slug: "webhook-target-not-allowed",
        send: |_| {
            Box::pin(async {
                let strict = spawn_app_with(|s| s.demo = Some(false)).await;
                let loopback = json!({"url": "https://127.0.0.1/hook", "enabled_events": ["*"]});
                // Its type read on the shared server, as every server serves it.
                shared(crate::webhook_endpoints::register(&strict, None, &loopback).await)
            })
        },
    },
    Case {
        what: "a 17th webhook endpoint",
        status: 409,
        slug: "webhook-endpoint-limit",
        send: |ctx| {
            Box::pin(async move {
                use crate::webhook_endpoints::{HOOK, endpoint_for, register};
                let shop = ctx.app.as_account(SHOP_KEY);
                for _ in 0..16 {
                    endpoint_for(&shop, &["*"]).await;
                }
                let body = json!({"url": HOOK, "enabled_events": ["*"]});
                shared(register(&shop, None, &body).await)
            })
        },
    },
];

/// Key-first: the key commits first, so a retry meanwhile hears 409.
async fn key_first_in_flight(app: &TestApp) -> Option<Answer> {
    let body = charge_body();
    let key_first = ("demo-mode", "key-first");
    let first = app.demo().charge_with(
        "k-in-flight",
        &body,
        &[key_first, ("demo-fault", "delay-commit=1500")],
    );
    let retry = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.demo()
            .charge_with("k-in-flight", &body, &[key_first])
            .await
    };
    let (first, retry) = tokio::join!(first, retry);
    assert_eq!(first.status, 201, "{}", first.body);
    shared(retry)
}

/// PostgreSQL only: on SQLite a second delayed transaction waits for the
/// write lock of the first rather than reach the cap.
async fn beyond_max_delayed(app: &TestApp) -> Option<Answer> {
    if app.backend() != TestBackend::Postgres {
        return None;
    }
    let body = charge_body();
    let held = app
        .demo()
        .charge_with("k-held", &body, &[("demo-fault", "delay-commit=1500")]);
    let over = async {
        app.until_held(1).await;
        app.demo()
            .charge_with("k-over-cap", &body, &[("demo-fault", "delay-commit=100")])
            .await
    };
    let (held, over) = tokio::join!(held, over);
    assert_eq!(held.status, 201, "{}", held.body);
    shared(over)
}

/// A server with one connection of its own and a short `POOL_TIMEOUT`, both
/// accounts authenticated once, so their keys are cached and need no
/// connection.
async fn starved() -> TestApp {
    let starved = spawn_app_with(|s| {
        s.pool_size = 1;
        s.pool_timeout = Duration::from_millis(300);
    })
    .await;
    starved.create_account("Shop", SHOP_KEY);
    assert_eq!(starved.get_as(DEMO_KEY, "/charges").await.status, 200);
    assert_eq!(starved.get_as(SHOP_KEY, "/charges").await.status, 200);
    starved
}

/// The server's one connection held by a charge that waits on the key
/// table (held by the test): another account's next charge finds none
/// within POOL_TIMEOUT.
async fn no_connection() -> Option<Answer> {
    let starved = starved().await;
    let body = charge_body();
    let hold = starved.hold_key_writes();
    let waiting = starved.charge_as(SHOP_KEY, "k-waiting", &body, &[]);
    let refused = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        starved
            .charge_as(SHOP_KEY, "k-no-connection", &body, &[])
            .await
    };
    let released = async {
        tokio::time::sleep(Duration::from_millis(900)).await;
        drop(hold);
    };
    let (waiting, no_connection, ()) = tokio::join!(waiting, refused, released);
    assert_eq!(waiting.status, 201, "{}", waiting.body);
    own(no_connection, starved, vec![])
}

/// The demo has connections of its own; its delayed charge takes its only
/// place among its requests in flight, so its next one finds no place.
async fn no_place_in_flight() -> Option<Answer> {
    let starved = starved().await;
    let body = charge_body();
    let holder =
        starved
            .demo()
            .charge_with("k-holder", &body, &[("demo-fault", "delay-commit=1500")]);
    let no_place = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        starved.demo().charge("k-no-place", &body).await
    };
    let (holder, no_place) = tokio::join!(holder, no_place);
    assert_eq!(holder.status, 201, "{}", holder.body);
    own(no_place, starved, vec![])
}

/// Lesson 8's receiver (the demo account's), made here and kept for the
/// next case: an unsigned delivery.
async fn lesson8_unsigned(ctx: &Ctx) -> Option<Answer> {
    let app = &ctx.app;
    let made = app.demo().post_as_self("/demo/lesson8/endpoint").await;
    assert_eq!(made.status, 201, "{}", made.body);
    let path = format!(
        "/demo/receivers/{}",
        made.json()["receiver_id"].as_str().unwrap()
    );
    let endpoint = made.json()["endpoint_id"].as_str().unwrap().to_owned();
    let r = app
        .send(app.request(Method::POST, &path).body(LESSON8_EVENT))
        .await;
    *ctx.receiver.borrow_mut() = Some((path, endpoint));
    shared(r)
}

const LESSON8_EVENT: &str =
    r#"{"id":"evt_p","object":"event","type":"charge.succeeded","data":{"object":{"id":"ch_p"}}}"#;

/// A signed delivery whose answer the receiver's fault `lose_answers`
/// throws away.
async fn lesson8_lost_answer(ctx: &Ctx) -> Option<Answer> {
    use charges::idempotency::webhook::{Secret, sign, unix_now};
    let app = &ctx.app;
    let demo = app.demo();
    let (path, endpoint) = ctx
        .receiver
        .borrow()
        .clone()
        .expect("the unsigned case ran");
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    app.execute(&format!(
        "UPDATE webhook_endpoints SET secret = '{secret}' WHERE id = '{endpoint}'"
    ));
    let faults = json!({"lose_answers": 1, "inbox": true});
    let set = demo
        .send(
            demo.request(Method::PUT, "/demo/lesson8/faults")
                .bearer_auth(demo.api_key())
                .json(&faults),
        )
        .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let now = unix_now();
    let signature = sign(
        &Secret::parse(secret).unwrap(),
        "evt_p",
        now,
        LESSON8_EVENT.as_bytes(),
    );
    let r = app
        .send(
            app.request(Method::POST, &path)
                .header("webhook-id", "evt_p")
                .header("webhook-timestamp", now.to_string())
                .header("webhook-signature", signature)
                .body(LESSON8_EVENT),
        )
        .await;
    shared(r)
}
