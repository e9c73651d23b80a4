//! A key reused: with another body (the draft's 422, and its one MUST a
//! server can be seen to break: a refused request sent again uncorrected
//! must be refused again), and on another endpoint (this project's
//! recommendation: the draft says nothing of it).

use super::super::Verdict;
use super::context::{Ctx, First, Half, fill, new_key, new_marker, quoted};
use super::http::Response;

/// How the server took the first key with another body.
enum Taken {
    Refused,
    /// Answered with the first request's resource (2xx or a replaying 409).
    FirstsAnswer(String),
    /// Processed as a request of its own.
    Processed(String),
}

fn taken(ctx: &Ctx, first: &First, r: &Response) -> Taken {
    match ctx.answer_id(r) {
        Some(id) if id == first.id => Taken::FirstsAnswer(format!(
            "answered {} with the first request's resource: the other body was ignored",
            r.status
        )),
        Some(_) => Taken::Processed(format!(
            "processed as a new request ({}); a server that keys by key and fingerprint reads §2.6 so, §2.7 asks for 422",
            r.summary()
        )),
        None if r.is_success() => Taken::Processed(r.summary()),
        None => Taken::Refused,
    }
}

pub(super) fn other_body(ctx: &mut Ctx, first: &First) -> Result<(), String> {
    let marker = new_marker();
    let body = fill(&ctx.cfg.second_body, &marker);
    let r = ctx.post(&first.key, &body)?;
    ctx.refusal("other-body-422", &r);
    let refused = match taken(ctx, first, &r) {
        Taken::Refused => ctx.expect_created(&marker, 0, "the other body", None),
        Taken::FirstsAnswer(e) | Taken::Processed(e) => Half::Fail(e),
    };
    let was_refused = matches!(taken(ctx, first, &r), Taken::Refused);
    ctx.settle("other-body-refused", &[refused]);
    if r.status == 422 {
        ctx.pass("other-body-422");
    } else {
        ctx.set("other-body-422", Verdict::Fail, r.summary());
    }
    if !was_refused {
        let evidence = format!(
            "the other body was not refused ({}): nothing uncorrected to send again",
            r.status
        );
        ctx.set("uncorrected-retry-refused", Verdict::Skip, evidence);
        return Ok(());
    }
    // The client did not correct it: sent again, it must fail again.
    let again = ctx.post(&first.key, &body)?;
    let refused_again = match taken(ctx, first, &again) {
        Taken::Refused => ctx.expect_created(&marker, 0, "the uncorrected request", None),
        Taken::FirstsAnswer(e) | Taken::Processed(e) => Half::Fail(format!(
            "refused with {} once, then sent again uncorrected: {e}",
            r.status
        )),
    };
    ctx.settle("uncorrected-retry-refused", &[refused_again]);
    Ok(())
}

pub(super) fn other_endpoint(ctx: &mut Ctx, first: &First) -> Result<(), String> {
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
    if r.is_success() || ctx.replayed_409(&r).is_some() {
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
