//! Bad input, generated: thousands of malformed charges shaped after the
//! contract (the body's fields with every wrong type, out-of-range numbers,
//! odd strings, unknown fields, broken JSON, odd keys and content types).
//! No answer may be a 5xx, every error must be problem+json, and a rejected
//! request must leave the database as it was.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};

use crate::support::{TEST_KEY, spawn_app};

fn json_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(99_999_999),
            Just(100_000_000),
            Just(i64::MAX),
            Just(i64::MIN)
        ]
        .prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("jpy"),
            Just("JPY"),
            Just("usd"),
            Just("xxx"),
            Just(""),
            Just("jp"),
            Just("ｊｐｙ")
        ]
        .prop_map(|s| Value::String(s.into())),
        "[a-z]{495,505}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_scalar().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A charge body with each field present or not, of any type, plus extras.
fn charge_like() -> impl Strategy<Value = Value> {
    let field = || prop::option::weighted(0.8, json_value());
    (
        field(),
        field(),
        field(),
        prop::collection::btree_map("[a-z]{1,8}", json_scalar(), 0..2),
    )
        .prop_map(|(amount, currency, description, extra)| {
            let mut body = Map::new();
            for (name, value) in [
                ("amount", amount),
                ("currency", currency),
                ("description", description),
            ] {
                if let Some(v) = value {
                    body.insert(name.into(), v);
                }
            }
            body.extend(extra);
            Value::Object(body)
        })
}

#[derive(Debug, Clone)]
struct Case {
    body: Vec<u8>,
    key: Option<Vec<u8>>,
    content_type: Option<&'static str>,
}

fn case() -> impl Strategy<Value = Case> {
    let valid = (
        1i64..=99_999_999,
        prop_oneof![Just("jpy"), Just("usd"), Just("eur")],
        ".{0,20}",
    )
        .prop_map(|(amount, currency, description)| {
            json!({"amount": amount, "currency": currency, "description": description})
                .to_string()
                .into_bytes()
        });
    let body = prop_oneof![
        1 => valid,
        6 => charge_like().prop_map(|v| v.to_string().into_bytes()),
        2 => json_value().prop_map(|v| v.to_string().into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => charge_like().prop_map(|v| { let s = v.to_string().into_bytes(); s[..s.len() / 2].to_vec() }),
    ];
    let key = prop::option::weighted(
        0.7,
        prop_oneof![
            "[ -~]{0,40}".prop_map(|s| s.into_bytes()),
            "[ -~]{0,40}".prop_map(|s| format!("\"{s}\"").into_bytes()),
            prop::collection::vec(0x20u8..0x7f, 250..260),
            prop::collection::vec(
                any::<u8>().prop_filter("header-safe", |b| *b >= 0x20 && *b != 0x7f),
                1..20
            ),
        ],
    );
    let content_type = prop_oneof![
        8 => Just(Some("application/json")),
        1 => Just(Some("application/json; charset=utf-8")),
        1 => Just(Some("text/plain")),
        1 => Just(Some("application/x-www-form-urlencoded")),
        1 => Just(None),
    ];
    (body, key, content_type).prop_map(|(body, key, content_type)| Case {
        body,
        key,
        content_type,
    })
}

#[test]
fn no_malformed_request_gets_a_5xx_and_a_rejected_one_changes_nothing() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let app = runtime.block_on(spawn_app());
    let cases: u32 = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(400);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let accepted = std::cell::Cell::new(0);
    runner
        .run(&case(), |case| {
            let before = (app.charges(), app.keys());
            let mut request = app
                .request(reqwest::Method::POST, "/charges")
                .bearer_auth(TEST_KEY)
                .body(case.body.clone());
            if let Some(ct) = case.content_type {
                request = request.header("content-type", ct);
            }
            if let Some(key) = &case.key {
                match reqwest::header::HeaderValue::from_bytes(key) {
                    Ok(v) => request = request.header("idempotency-key", v),
                    Err(_) => return Ok(()), // not sendable as a header at all
                }
            }
            let r = runtime.block_on(app.send(request));
            prop_assert!(r.status < 500, "{} for {:?}: {}", r.status, case, r.body);
            if r.status == 201 {
                accepted.set(accepted.get() + 1);
                return Ok(());
            }
            prop_assert_eq!(
                r.header("content-type"),
                Some("application/problem+json"),
                "{:?}",
                case
            );
            let problem: Value = serde_json::from_str(&r.body).unwrap();
            prop_assert_eq!(&problem["status"], &json!(r.status));
            prop_assert!(
                problem["type"]
                    .as_str()
                    .is_some_and(|t| t.starts_with("/problems/"))
            );
            prop_assert_eq!(
                (app.charges(), app.keys()),
                before,
                "a rejected request changed the database: {:?}",
                case
            );
            Ok(())
        })
        .unwrap();
    eprintln!(
        "fuzz: {cases} cases, {} accepted as valid charges",
        accepted.get()
    );
    drop(app);
    runtime.shutdown_background();
}
