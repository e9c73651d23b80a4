//! The checks of [`super::CHECKS`], run in order against one endpoint. Each
//! request that should make a resource of its own carries a fresh marker in
//! its body (`{marker}`), so the read URL (when given) shows how many
//! resources each request made; without it the checks compare the ids in
//! the answers.

use std::collections::BTreeMap;

use uuid::Uuid;

mod concurrent;
mod context;

use super::http;
use super::{CHECKS, Config, Row, Verdict};
use concurrent::concurrent;
use context::*;

pub fn run_all(cfg: &Config) -> Result<Vec<Row>, String> {
    let mut ctx = Ctx {
        cfg,
        rows: BTreeMap::new(),
        refusals: Vec::new(),
    };
    if let Some(first) = first_request(&mut ctx)? {
        type Group = fn(&mut Ctx, &First) -> Result<(), String>;
        let groups: [(&[&str], Group); 9] = [
            (&["syntax-"], syntax),
            (&["retry-", "replay-marker"], retry),
            (&["other-body-"], other_body),
            (&["other-endpoint-"], other_endpoint),
            (&["new-key-new-resource"], new_key_same_body),
            (&["concurrent-"], concurrent),
            (&["lost-response-"], lost_response),
            (&["error-not-result"], error_not_result),
            (&["scope-per-credential"], scope),
        ];
        for (prefixes, group) in groups {
            if let Err(e) = group(&mut ctx, &first) {
                // A request of the group got no answer: its rows not yet
                // decided fail with what happened.
                for c in CHECKS
                    .iter()
                    .filter(|c| prefixes.iter().any(|p| c.id.starts_with(p)))
                {
                    ctx.rows
                        .entry(c.id)
                        .or_insert((Verdict::Fail, format!("no answer: {e}")));
                }
            }
        }
        problem_details(&mut ctx);
    }
    Ok(CHECKS
        .iter()
        .map(|c| {
            let (result, evidence) = ctx.rows.remove(c.id).unwrap_or((
                Verdict::Skip,
                "not run: the first request was not processed".to_owned(),
            ));
            Row {
                id: c.id,
                section: c.section,
                strength: c.strength,
                check: c.title,
                result,
                evidence,
            }
        })
        .collect())
}

/// `Err` only when the server cannot be reached at all.
fn first_request(ctx: &mut Ctx) -> Result<Option<First>, String> {
    let (key, marker) = (new_key(), new_marker());
    let body = fill(&ctx.cfg.body, &marker);
    let response = ctx
        .post(&key, &body)
        .map_err(|e| format!("{}: {e}", ctx.cfg.target()))?;
    if !response.is_success() {
        ctx.set("first-request", Verdict::Fail, response.summary());
        return Ok(None);
    }
    let Some(id) = ctx.id(&response) else {
        let evidence = format!(
            "no {:?} member and no Location header in {} (set --id-field)",
            ctx.cfg.id_field,
            response.summary()
        );
        ctx.set("first-request", Verdict::Fail, evidence);
        return Ok(None);
    };
    ctx.pass("first-request");
    Ok(Some(First {
        key,
        marker,
        body,
        response,
        id,
    }))
}

fn syntax(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    // Fresh keys for each case: a server that joins two lines into one
    // value must not see the list case's key again.
    let k = new_key;
    let long: String = std::iter::repeat_with(|| Uuid::new_v4().simple().to_string())
        .flat_map(|s| s.chars().collect::<Vec<_>>())
        .take(256)
        .collect();
    let cases: [(&'static str, Vec<Vec<u8>>); 5] = [
        ("syntax-empty", vec![Vec::new()]),
        (
            "syntax-list",
            vec![format!("\"{}\", \"{}\"", k(), k()).into_bytes()],
        ),
        ("syntax-two-fields", vec![quoted(&k()), quoted(&k())]),
        (
            "syntax-non-ascii",
            vec![format!("\"ключ-{}\"", k()).into_bytes()],
        ),
        ("syntax-too-long", vec![quoted(&long)]),
    ];
    for (id, lines) in cases {
        let marker = new_marker();
        let body = fill(&ctx.cfg.body, &marker);
        let r = ctx.send(&ctx.request(&ctx.cfg.endpoint, &lines, &body, None))?;
        ctx.refusal(id, &r);
        let created = ctx.expect_created(&marker, 0, "this request");
        match ((400..500).contains(&r.status), created) {
            (true, Ok(())) => ctx.pass(id),
            (false, _) => ctx.set(id, Verdict::Fail, r.summary()),
            (true, Err(e)) => ctx.set(id, Verdict::Fail, format!("{}; {e}", r.status)),
        }
    }
    Ok(())
}

fn retry(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    let r = ctx.post(&first.key, &first.body)?;
    if r.status == first.response.status && same_body(&r, &first.response) {
        ctx.pass("retry-same-answer");
    } else {
        let evidence = format!(
            "first: {}; retry: {}",
            first.response.summary(),
            r.summary()
        );
        ctx.set("retry-same-answer", Verdict::Fail, evidence);
    }
    let id = ctx.id(&r);
    let counted = ctx.expect_created(&first.marker, 1, "the first request");
    match (id, counted) {
        (Some(id), _) if id != first.id => ctx.set(
            "retry-one-resource",
            Verdict::Fail,
            format!("the first made {}, the retry {id}", first.id),
        ),
        (_, Err(e)) => ctx.set("retry-one-resource", Verdict::Fail, e),
        _ => ctx.pass("retry-one-resource"),
    }
    if r.headers
        .iter()
        .any(|(n, _)| n.to_ascii_lowercase().contains("replay"))
    {
        ctx.pass("replay-marker");
    } else {
        let names: Vec<&str> = r.headers.iter().map(|(n, _)| n.as_str()).collect();
        let evidence = format!(
            "no header names a replay; the retry had: {}",
            names.join(", ")
        );
        ctx.set("replay-marker", Verdict::Fail, evidence);
    }
    Ok(())
}

fn other_body(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    let marker = new_marker();
    let r = ctx.post(&first.key, &fill(&ctx.cfg.second_body, &marker))?;
    ctx.refusal("other-body-422", &r);
    let refused = if r.is_success() {
        let replay = ctx.id(&r).is_some_and(|id| id == first.id);
        Err(format!(
            "{}{}",
            r.summary(),
            if replay {
                " (the first request's answer: the body was ignored)"
            } else {
                ""
            }
        ))
    } else {
        ctx.expect_created(&marker, 0, "the other body")
    };
    match refused {
        Ok(()) => ctx.pass("other-body-refused"),
        Err(e) => ctx.set("other-body-refused", Verdict::Fail, e),
    }
    if r.status == 422 {
        ctx.pass("other-body-422");
    } else {
        ctx.set("other-body-422", Verdict::Fail, r.summary());
    }
    Ok(())
}

fn other_endpoint(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    let Some(template) = ctx.cfg.other_endpoint.clone() else {
        for id in ["other-endpoint-refused", "other-endpoint-422"] {
            ctx.set(id, Verdict::Skip, "no --other-endpoint given");
        }
        return Ok(());
    };
    let path = template.replace("{id}", &first.id);
    let body_template = ctx
        .cfg
        .other_endpoint_body
        .as_ref()
        .unwrap_or(&ctx.cfg.body);
    let body = fill(body_template, &new_marker());
    let r = ctx.send(&ctx.request(&path, &[quoted(&first.key)], &body, None))?;
    ctx.refusal("other-endpoint-422", &r);
    if r.is_success() {
        ctx.set("other-endpoint-refused", Verdict::Fail, r.summary());
        ctx.set("other-endpoint-422", Verdict::Fail, r.summary());
        return Ok(());
    }
    // The same request under a new key: if it is refused too, the refusal
    // above says nothing about the key.
    let control = ctx.send(&ctx.request(&path, &[quoted(&new_key())], &body, None))?;
    if !control.is_success() {
        let evidence = format!(
            "POST {path} is refused under a new key too ({}): give --other-endpoint-body a body it accepts",
            control.summary()
        );
        ctx.set("other-endpoint-refused", Verdict::Skip, evidence.clone());
        ctx.set("other-endpoint-422", Verdict::Skip, evidence);
        return Ok(());
    }
    ctx.pass("other-endpoint-refused");
    if r.status == 422 {
        ctx.pass("other-endpoint-422");
    } else {
        ctx.set("other-endpoint-422", Verdict::Fail, r.summary());
    }
    Ok(())
}

fn new_key_same_body(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    // Counted before and after: a retry that wrongly created is the retry
    // rows' failure, not this one's.
    let before = match ctx.created(&first.marker) {
        Some(Ok(n)) => Some(n),
        Some(Err(e)) => return Err(e),
        None => None,
    };
    let r = ctx.post(&new_key(), &first.body)?;
    let verdict = match (ctx.id(&r), before) {
        (None, _) => Err(r.summary()),
        (Some(id), _) if id == first.id => Err(format!(
            "answered with the first request's resource {id}: the key, not the body, tells a retry from a new request"
        )),
        (Some(_), Some(n)) => ctx.expect_created(&first.marker, n + 1, "the first request"),
        (Some(_), None) => Ok(()),
    };
    match verdict {
        Ok(()) => ctx.pass("new-key-new-resource"),
        Err(e) => ctx.set("new-key-new-resource", Verdict::Fail, e),
    }
    Ok(())
}

fn lost_response(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    let (key, marker) = (new_key(), new_marker());
    let body = fill(&ctx.cfg.body, &marker);
    let label = "conformance: lost response: request sent, connection closed before the answer";
    progress(&format!("{label}; retrying in {LOST_RETRY_DELAY:?}"), false);
    let request = ctx.request(&ctx.cfg.endpoint, &[quoted(&key)], &body, None);
    http::send_and_lose(&ctx.cfg.origin, &request, ctx.cfg.timeout)?;
    std::thread::sleep(LOST_RETRY_DELAY);
    // Whether the lost request had made its resource by then: if not, the
    // run checked no more than a plain retry, and the row says so.
    let plain = matches!(ctx.created(&marker), Some(Ok(0)));
    let r = ctx.post_until_settled(&key, &body)?;
    let again = ctx.post_until_settled(&key, &body)?;
    progress(&format!("{label}; retried: {}", r.status), true);
    let one = match (ctx.id(&r), ctx.id(&again)) {
        (Some(a), Some(b)) if a != b => Err(format!("the retry made {a}, the next retry {b}")),
        _ => ctx.expect_created(&marker, 1, "the lost request"),
    };
    match one {
        Ok(()) if plain => ctx.set(
            "lost-response-one-resource",
            Verdict::Pass,
            "the lost request had made nothing 1 s later: the server may drop a request whose client has gone",
        ),
        Ok(()) => ctx.pass("lost-response-one-resource"),
        Err(e) => ctx.set("lost-response-one-resource", Verdict::Fail, e),
    }
    if ctx.id(&r).is_some() {
        ctx.pass("lost-response-answered");
    } else {
        ctx.set("lost-response-answered", Verdict::Fail, r.summary());
    }
    Ok(())
}

fn error_not_result(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    let key = new_key();
    let invalid = ctx.post(&key, &fill(&ctx.cfg.invalid_body, &new_marker()))?;
    if invalid.is_success() {
        let evidence = format!(
            "the invalid body was accepted ({}): give --invalid-body one the endpoint refuses",
            invalid.summary()
        );
        ctx.set("error-not-result", Verdict::Skip, evidence);
        return Ok(());
    }
    ctx.refusal("error-not-result", &invalid);
    let marker = new_marker();
    let r = ctx.post(&key, &fill(&ctx.cfg.body, &marker))?;
    let verdict = if r.is_success() {
        ctx.expect_created(&marker, 1, "the corrected request")
    } else {
        Err(format!(
            "the invalid body answered {}; the corrected one, same key: {}",
            invalid.status,
            r.summary()
        ))
    };
    match verdict {
        Ok(()) => ctx.pass("error-not-result"),
        Err(e) => ctx.set("error-not-result", Verdict::Fail, e),
    }
    Ok(())
}

fn scope(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    let Some(second) = ctx.cfg.second_credential.clone() else {
        ctx.set(
            "scope-per-credential",
            Verdict::Skip,
            "no --second-credential given",
        );
        return Ok(());
    };
    let key = new_key();
    let body = fill(&ctx.cfg.body, &new_marker());
    let a = ctx.post(&key, &body)?;
    let b = ctx.send(&ctx.request(&ctx.cfg.endpoint, &[quoted(&key)], &body, Some(&second)))?;
    let verdict = match (ctx.id(&a), ctx.id(&b)) {
        (None, _) => Err(format!("the first credential: {}", a.summary())),
        (_, None) => Err(format!("the second credential: {}", b.summary())),
        (Some(x), Some(y)) if x == y || a.body == b.body => Err(format!(
            "the second credential got the first's answer (resource {x})"
        )),
        _ => Ok(()),
    };
    match verdict {
        Ok(()) => ctx.pass("scope-per-credential"),
        Err(e) => ctx.set("scope-per-credential", Verdict::Fail, e),
    }
    Ok(())
}

fn problem_details(ctx: &mut Ctx) {
    if ctx.refusals.is_empty() {
        ctx.set("problem-details", Verdict::Skip, "no refusal seen");
        return;
    }
    let bad: Vec<String> = ctx
        .refusals
        .iter()
        .filter(|(_, r)| {
            let media = r
                .header("content-type")
                .unwrap_or_default()
                .to_ascii_lowercase();
            !media.starts_with("application/problem+json")
                || !r.json().is_some_and(|j| j.is_object())
        })
        .map(|(id, r)| {
            format!(
                "{id}: {} {}",
                r.status,
                r.header("content-type").unwrap_or("(no type)")
            )
        })
        .collect();
    if bad.is_empty() {
        ctx.pass("problem-details");
    } else {
        ctx.set("problem-details", Verdict::Fail, bad.join("; "));
    }
}
