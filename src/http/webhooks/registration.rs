//! What a client may register as a webhook endpoint, checked before
//! anything is written: the body of `POST /webhook_endpoints` (strictly,
//! every field error at once), its URL's scheme, and where its host
//! resolves to (`webhooks::targets`). And the body of a secret rotation.

use std::time::Duration;

use serde_json::Value;

use crate::http::problem::{ApiError, WEBHOOK_TARGET_NOT_ALLOWED};
use crate::payments::domain::FieldError;
use crate::payments::domain::{Description, error, unknown_fields};
use crate::payments::events::TYPES;
use crate::webhooks::targets::{self, TargetError, TargetPolicy};

/// An endpoint URL's longest form (the column's CHECK).
pub const MAX_URL_LEN: usize = 2048;
/// How long a rotated-out secret signs too, at most, and by default.
pub const MAX_EXPIRE_PREVIOUS: u64 = 86_400;

/// A valid `POST /webhook_endpoints` body.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEndpoint {
    pub url: url::Url,
    /// Known types without repeats, or exactly `["*"]`.
    pub enabled_events: Vec<String>,
    pub description: Option<Description>,
}

/// The body's fields, each checked; `policy` says whether `http://` may be
/// used. The host's addresses are not looked at: see [`check_target`].
pub fn parse_new_endpoint(body: &Value, policy: &TargetPolicy) -> Result<NewEndpoint, ApiError> {
    let invalid = |errors: Vec<FieldError>| ApiError::InvalidRequest {
        detail: "The webhook endpoint has invalid fields; see `errors`.".to_owned(),
        errors,
    };
    let Some(object) = body.as_object() else {
        return Err(invalid(vec![error("body", "must be a JSON object")]));
    };
    let mut errors = unknown_fields(object, &["url", "enabled_events", "description"]);
    let url = match object.get("url") {
        None | Some(Value::Null) => Err("is required".to_owned()),
        Some(Value::String(s)) => parse_url(s),
        Some(_) => Err("must be a string".to_owned()),
    };
    let url = url.map_err(|e| errors.push(error("url", &e))).ok();
    let events = parse_events(object.get("enabled_events"))
        .map_err(|e| errors.push(error("enabled_events", &e)))
        .ok();
    let description = match object.get("description") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Description::parse(s).map(Some),
        Some(_) => Err("must be a string or null".to_owned()),
    };
    let description = description
        .map_err(|e| errors.push(error("description", &e)))
        .ok();
    let (Some(url), Some(enabled_events), Some(description), true) =
        (url, events, description, errors.is_empty())
    else {
        return Err(invalid(errors));
    };
    if url.scheme() == "http" && !policy.allow_http {
        return Err(not_allowed(
            "This server sends webhooks over https:// only (WEBHOOK_ALLOW_HTTP is off): use an https:// URL.",
        ));
    }
    Ok(NewEndpoint {
        url,
        enabled_events,
        description,
    })
}

fn parse_url(text: &str) -> Result<url::Url, String> {
    if text.len() > MAX_URL_LEN {
        return Err(format!("must be at most {MAX_URL_LEN} bytes"));
    }
    let url = url::Url::parse(text).map_err(|e| format!("must be an absolute URL ({e})"))?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err("must be an https:// URL".to_owned());
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("must name a host".to_owned());
    }
    // Credentials in a URL end up in every log line that prints it.
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not hold a user name or password".to_owned());
    }
    if url.as_str().len() > MAX_URL_LEN {
        return Err(format!("must be at most {MAX_URL_LEN} bytes"));
    }
    Ok(url)
}

fn parse_events(value: Option<&Value>) -> Result<Vec<String>, String> {
    let Some(Value::Array(items)) = value else {
        return Err("is required: an array of event types, or [\"*\"] for every type".to_owned());
    };
    let mut types = Vec::with_capacity(items.len());
    for item in items {
        let Some(t) = item.as_str() else {
            return Err("must hold strings".to_owned());
        };
        if t != "*" && !TYPES.contains(&t) {
            return Err(format!(
                "holds {}, which is no event type (known: {}, or \"*\" alone)",
                Value::from(t),
                TYPES.join(", ")
            ));
        }
        if types.iter().any(|known: &String| known == t) {
            return Err(format!("names {} twice", Value::from(t)));
        }
        types.push(t.to_owned());
    }
    if types.is_empty() {
        return Err("must name at least one event type (or \"*\")".to_owned());
    }
    if types.len() > 1 && types.iter().any(|t| t == "*") {
        return Err("\"*\" (every type) must be alone".to_owned());
    }
    Ok(types)
}

/// Resolves the URL's host now and refuses it if any address it resolves
/// to is one webhooks are not sent to under `policy`. Blocking (DNS): run
/// it off the async threads.
pub fn check_target(url: &url::Url, policy: &TargetPolicy) -> Result<(), ApiError> {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or(443);
    match targets::resolve(host, port, policy) {
        Ok(_) => Ok(()),
        Err(e @ TargetError::Forbidden { .. }) => Err(not_allowed(format!(
            "The endpoint's URL is refused: {e}. Webhooks go to public addresses only (unless the operator sets WEBHOOK_ALLOW_PRIVATE_TARGETS)."
        ))),
        Err(e @ TargetError::Unresolved { .. }) => Err(ApiError::InvalidRequest {
            detail: "The webhook endpoint has invalid fields; see `errors`.".to_owned(),
            errors: vec![error("url", &format!("is refused: {e}"))],
        }),
    }
}

/// A 400 `webhook-target-not-allowed`.
pub fn not_allowed(detail: impl Into<String>) -> ApiError {
    ApiError::Refused {
        kind: &WEBHOOK_TARGET_NOT_ALLOWED,
        detail: detail.into(),
    }
}

/// The body of `POST /webhook_endpoints/{id}/rotate_secret`: none, `{}`,
/// or `{"expire_previous_in": seconds}` (0 to a day; a day by default).
pub fn parse_rotation(body: &Value) -> Result<Duration, ApiError> {
    let invalid = |errors: Vec<FieldError>| ApiError::InvalidRequest {
        detail: "The rotation has invalid fields; see `errors`.".to_owned(),
        errors,
    };
    let Some(object) = body.as_object() else {
        return Err(invalid(vec![error(
            "body",
            "must be a JSON object, or no body at all",
        )]));
    };
    let errors = unknown_fields(object, &["expire_previous_in"]);
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let secs = match object.get("expire_previous_in") {
        None => Ok(MAX_EXPIRE_PREVIOUS),
        // A whole number as JSON Schema's `integer` counts it: `14.0` is 14.
        Some(v) => v
            .as_u64()
            .or_else(|| {
                v.as_f64()
                    .filter(|f| f.fract() == 0.0 && (0.0..=MAX_EXPIRE_PREVIOUS as f64).contains(f))
                    .map(|f| f as u64)
            })
            .filter(|s| *s <= MAX_EXPIRE_PREVIOUS)
            .ok_or(format!(
                "must be a whole number of seconds from 0 to {MAX_EXPIRE_PREVIOUS}"
            )),
    };
    secs.map(Duration::from_secs)
        .map_err(|e| invalid(vec![error("expire_previous_in", &e)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const OPEN: TargetPolicy = TargetPolicy {
        allow_private: true,
        allow_loopback: true,
        allow_http: true,
        also_allow: Vec::new(),
    };

    fn fields(body: Value, policy: TargetPolicy) -> Vec<String> {
        match parse_new_endpoint(&body, &policy) {
            Err(ApiError::InvalidRequest { errors, .. }) => {
                errors.into_iter().map(|e| e.field).collect()
            }
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn a_valid_body_parses() {
        let new = parse_new_endpoint(
            &json!({"url": "https://example.com/hook", "enabled_events": ["charge.failed", "charge.succeeded"], "description": "shop"}),
            &TargetPolicy::default(),
        )
        .unwrap();
        assert_eq!(new.url.as_str(), "https://example.com/hook");
        assert_eq!(new.enabled_events, ["charge.failed", "charge.succeeded"]);
        let all = json!({"url": "http://127.0.0.1:9/", "enabled_events": ["*"]});
        assert_eq!(
            parse_new_endpoint(&all, &OPEN).unwrap().enabled_events,
            ["*"]
        );
    }

    #[test]
    fn every_field_is_checked_and_every_error_reported() {
        for (body, bad) in [
            (json!({"url": "/hook", "enabled_events": ["*"]}), "url"),
            (
                json!({"url": "ftp://example.com/", "enabled_events": ["*"]}),
                "url",
            ),
            (
                json!({"url": "https://u:p@example.com/", "enabled_events": ["*"]}),
                "url",
            ),
            (
                json!({"url": format!("https://example.com/{}", "a".repeat(2048)), "enabled_events": ["*"]}),
                "url",
            ),
            (
                json!({"url": "https://example.com/", "enabled_events": []}),
                "enabled_events",
            ),
            (
                json!({"url": "https://example.com/", "enabled_events": ["*", "charge.failed"]}),
                "enabled_events",
            ),
            (
                json!({"url": "https://example.com/", "enabled_events": ["charge.failed", "charge.failed"]}),
                "enabled_events",
            ),
            (
                json!({"url": "https://example.com/", "enabled_events": ["charge.created"]}),
                "enabled_events",
            ),
            (
                json!({"url": "https://example.com/", "enabled_events": "*"}),
                "enabled_events",
            ),
            (
                json!({"url": "https://example.com/", "enabled_events": ["*"], "secret": "x"}),
                "secret",
            ),
        ] {
            assert_eq!(fields(body.clone(), OPEN), [bad], "{body}");
        }
        assert_eq!(fields(json!({}), OPEN), ["url", "enabled_events"]);
    }

    #[test]
    fn http_only_where_the_operator_allows_it() {
        let body = json!({"url": "http://example.com/", "enabled_events": ["*"]});
        let err = parse_new_endpoint(&body, &TargetPolicy::default()).unwrap_err();
        assert_eq!(err.slug(), "webhook-target-not-allowed");
        assert!(parse_new_endpoint(&body, &OPEN).is_ok());
    }

    #[test]
    fn a_private_target_is_refused_naming_its_range() {
        let url = url::Url::parse("https://127.0.0.1/").unwrap();
        let err = check_target(&url, &TargetPolicy::default()).unwrap_err();
        assert_eq!(err.slug(), "webhook-target-not-allowed");
        assert!(err.to_string().contains("loopback"), "{err}");
        assert!(check_target(&url, &OPEN).is_ok());
    }

    #[test]
    fn a_rotation_takes_no_body_or_seconds_up_to_a_day() {
        assert_eq!(parse_rotation(&json!({})).unwrap().as_secs(), 86_400);
        assert_eq!(
            parse_rotation(&json!({"expire_previous_in": 0}))
                .unwrap()
                .as_secs(),
            0
        );
        for bad in [
            json!(null),
            json!([]),
            json!({"expire_previous_in": 86_401}),
            json!({"expire_previous_in": -1}),
            json!({"expire_previous_in": 1.5}),
            json!({"expire_previous_in": null}),
            json!({"other": 1}),
        ] {
            assert!(parse_rotation(&bad).is_err(), "{bad}");
        }
    }
}
