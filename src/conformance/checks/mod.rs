//! The checks of [`super::CHECKS`], run in order against one endpoint. Each
//! request that should make a resource of its own carries a fresh marker in
//! its body (`{marker}`), so the read URL (when given, and once counting
//! through it is proved: `counting.rs`) shows how many resources each
//! request made; the answers' ids are compared as well.

use std::collections::BTreeMap;

mod concurrent;
mod context;
mod counting;
mod reuse;
mod syntax;

use super::http;
use super::{CHECKS, Config, Row, Verdict};
use concurrent::concurrent;
use context::*;
use reuse::{other_body, other_endpoint};
use syntax::syntax;

/// The rows, and what the report says of how they were run.
pub struct Outcome {
    pub rows: Vec<Row>,
    pub counted_by: String,
    pub tried: String,
}

type Group = fn(&mut Ctx, &First) -> Result<(), String>;

/// The groups of rows after the first request, each with the id prefixes
/// of the rows it decides.
const GROUPS: [(&[&str], Group); 9] = [
    (&["syntax-"], syntax),
    (&["retry-", "replay-marker"], retry),
    (&["other-body-", "uncorrected-retry-refused"], other_body),
    (&["other-endpoint-"], other_endpoint),
    (&["new-key-new-resource"], new_key_same_body),
    (&["concurrent-"], concurrent),
    (&["lost-response-"], lost_response),
    (&["error-not-result"], error_not_result),
    (&["scope-per-credential"], scope),
];

pub fn run_all(cfg: &Config) -> Result<Outcome, String> {
    let mut ctx = Ctx {
        cfg,
        rows: BTreeMap::new(),
        refusals: Vec::new(),
        counting: Err("the first request was not processed".to_owned()),
    };
    let tried = format!(
        "{} burst(s) of {} requests with one key each, released together over connections opened beforehand",
        cfg.bursts, cfg.concurrency
    );
    if let Some(first) = first_request(&mut ctx)? {
        ctx.counting = counting::prove_counting(&ctx, &first);
        progress(
            "conformance: first request processed; counting checked",
            true,
        );
        for (i, (prefixes, group)) in GROUPS.iter().enumerate() {
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
            let names = prefixes.join(", ");
            progress(
                &format!("conformance: [{}/{}] {names} done", i + 1, GROUPS.len()),
                true,
            );
        }
        problem_details(&mut ctx);
    }
    let counted_by = match &ctx.counting {
        Ok(path) => format!(
            "GET {path} (proved: the first resource, found by its id, shows its marker once)"
        ),
        Err(why) => format!("nothing: {why}; every count-based half is SKIP"),
    };
    let rows = CHECKS
        .iter()
        .map(|c| {
            let (result, evidence) = ctx.rows.remove(c.id).unwrap_or((
                Verdict::Skip,
                "not run: the first request was not processed".to_owned(),
            ));
            Row {
                id: c.id,
                source: c.source,
                strength: c.strength,
                check: c.title,
                quote: c.quote,
                result,
                evidence,
            }
        })
        .collect();
    Ok(Outcome {
        rows,
        counted_by,
        tried,
    })
}

/// The line that stops a run whose first request got `response`, not a
/// 2xx: nothing else can be checked, so no table of rows not run.
fn first_refused(cfg: &Config, response: &http::Response) -> String {
    let what = match response.status {
        404 | 405 | 410 | 501 => format!(
            "is {} the idempotent POST endpoint? pass its URL (a URL with a path is used \
             as given; only one with no path at all means this API's /charges)",
            cfg.target()
        ),
        300..=399 => format!(
            "a redirect is not followed: pass the URL it points to{}",
            response
                .header("location")
                .map(|l| format!(" ({l})"))
                .unwrap_or_default()
        ),
        400 | 413 | 415 | 422 => "pass a body your endpoint accepts with --body (and \
             --second-body, --invalid-body alike)"
            .to_owned(),
        _ => "the first request must be processed (a 2xx): look at the server's log".to_owned(),
    };
    format!(
        "the first request was answered {} ({}): {what}",
        response.status,
        super::bounded(&response.summary(), 120)
    )
}

/// `Err` when the checks cannot run at all: no server, or a first request
/// answered with anything but a 2xx, each with one line naming what it got
/// and the flag to change: a credential refused (`-H`), an endpoint not
/// there (the URL), a body refused (`--body`), or a failure of the server.
fn first_request(ctx: &mut Ctx) -> Result<Option<First>, String> {
    let (key, marker) = (new_key(), new_marker());
    let body = fill(&ctx.cfg.body, &marker);
    let response = ctx
        .post(&key, &body)
        .map_err(|e| format!("{}: {e}", ctx.cfg.target()))?;
    if matches!(response.status, 401 | 403) {
        return Err(format!(
            "the first request was answered {} ({}): pass the credential your API expects \
             with -H, e.g. -H 'Authorization: Bearer sk_…'",
            response.status,
            super::bounded(&response.summary(), 120)
        ));
    }
    if !response.is_success() {
        return Err(first_refused(ctx.cfg, &response));
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

fn retry(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    let r = ctx.post(&first.key, &first.body)?;
    let replay_409 = ctx.replayed_409(&r).is_some_and(|id| id == first.id);
    if r.status == first.response.status && same_body(&r, &first.response) {
        ctx.pass("retry-same-answer");
    } else if replay_409 {
        let evidence = format!(
            "a replay under 409: the body is the first request's resource, but its status {} was not kept",
            first.response.status
        );
        ctx.set("retry-same-answer", Verdict::Fail, evidence);
    } else {
        let evidence = format!(
            "first: {}; retry: {}",
            first.response.summary(),
            r.summary()
        );
        ctx.set("retry-same-answer", Verdict::Fail, evidence);
    }
    let same_id = match ctx.answer_id(&r) {
        Some(id) if id != first.id => {
            Half::Fail(format!("the first made {}, the retry {id}", first.id))
        }
        _ if replay_409 => Half::Note("a 409 whose body is the resource: a replay".to_owned()),
        _ => Half::Pass,
    };
    let counted = ctx.expect_created(&first.marker, 1, "the first request", Some(&first.id));
    ctx.settle("retry-one-resource", &[same_id, counted]);
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

fn new_key_same_body(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    // Counted before and after: a retry that wrongly created is the retry
    // rows' failure, not this one's.
    let before = ctx.count(&first.marker);
    let r = ctx.post(&new_key(), &first.body)?;
    let new_id = ctx.id(&r);
    let answered = match ctx.id(&r) {
        None => Half::Fail(r.summary()),
        Some(id) if id == first.id => Half::Fail(format!(
            "answered with the first request's resource {id}: the key, not the body, tells a retry from a new request"
        )),
        Some(_) => Half::Pass,
    };
    let counted = match before {
        Ok(n) => ctx.expect_created(&first.marker, n + 1, "the first request", new_id.as_deref()),
        Err(e) => Half::Skip(e),
    };
    ctx.settle("new-key-new-resource", &[answered, counted]);
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
    let plain = matches!(ctx.count(&marker), Ok(0));
    let r = ctx.post_until_settled(&key, &body)?;
    let again = ctx.post_until_settled(&key, &body)?;
    progress(&format!("{label}; retried: {}", r.status), false);
    let same = match (ctx.answer_id(&r), ctx.answer_id(&again)) {
        (Some(a), Some(b)) if a != b => Half::Fail(format!("the retry made {a}, the next retry {b}")),
        _ if plain => Half::Note(
            "the lost request had made nothing 1 s later: the server may drop a request whose client has gone".to_owned(),
        ),
        _ => Half::Pass,
    };
    let counted = ctx.expect_created(&marker, 1, "the lost request", ctx.answer_id(&r).as_deref());
    ctx.settle("lost-response-one-resource", &[same, counted]);
    if ctx.id(&r).is_some() {
        ctx.pass("lost-response-answered");
    } else if ctx.replayed_409(&r).is_some() {
        ctx.set(
            "lost-response-answered",
            Verdict::Pass,
            "answered 409 with the resource as its body: a replay",
        );
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
    let processed = if r.is_success() {
        Half::Pass
    } else {
        Half::Fail(format!(
            "the invalid body answered {}; the corrected one, same key: {}",
            invalid.status,
            r.summary()
        ))
    };
    let counted = if r.is_success() {
        ctx.expect_created(&marker, 1, "the corrected request", ctx.id(&r).as_deref())
    } else {
        Half::Pass
    };
    ctx.settle("error-not-result", &[processed, counted]);
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
    let verdict = match (ctx.id(&a), ctx.answer_id(&b)) {
        (None, _) => Err(format!("the first credential: {}", a.summary())),
        (Some(x), Some(y)) if x == y || a.body == b.body => Err(format!(
            "the second credential got the first's answer (resource {x}, {})",
            b.status
        )),
        (_, None) => Err(format!("the second credential: {}", b.summary())),
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
