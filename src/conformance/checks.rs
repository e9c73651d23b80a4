//! The checks of [`super::CHECKS`], run in order against one endpoint. Each
//! request that should make a resource of its own carries a fresh marker in
//! its body (`{marker}`), so the read URL (when given) shows how many
//! resources each request made; without it the checks compare the ids in
//! the answers.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use uuid::Uuid;

use super::http::{self, Request, Response};
use super::{CHECKS, Config, Row, Verdict};

/// Answers 429 or 409 are retried at most this often, waiting Retry-After.
const MAX_WAITS: usize = 15;
/// The longest Retry-After the checker honours.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long after a lost response the client retries (by then a server
/// that runs requests one at a time is done with the first).
const LOST_RETRY_DELAY: Duration = Duration::from_secs(1);

/// What the first request made: the checks that follow build on it.
struct First {
    key: String,
    marker: String,
    body: String,
    response: Response,
    id: String,
}

struct Ctx<'a> {
    cfg: &'a Config,
    rows: BTreeMap<&'static str, (Verdict, String)>,
    /// Every refusal seen (4xx), with the check it came from.
    refusals: Vec<(&'static str, Response)>,
}

fn new_key() -> String {
    Uuid::new_v4().to_string()
}

fn new_marker() -> String {
    format!("m{}", Uuid::new_v4().simple())
}

fn fill(template: &str, marker: &str) -> String {
    template.replace("{marker}", marker)
}

fn quoted(key: &str) -> Vec<u8> {
    format!("\"{key}\"").into_bytes()
}

/// The same result: the same bytes, or the same JSON.
fn same_body(a: &Response, b: &Response) -> bool {
    a.body == b.body || a.json().is_some_and(|j| Some(j) == b.json())
}

fn retry_after(r: &Response) -> Duration {
    r.header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs)
        .clamp(Duration::from_millis(100), MAX_RETRY_AFTER)
}

fn progress(message: &str, done: bool) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{message}{}", if done { "\n" } else { "" });
    } else if done {
        let _ = writeln!(err, "{message}");
    }
}

impl Ctx<'_> {
    fn set(&mut self, id: &'static str, verdict: Verdict, evidence: impl Into<String>) {
        debug_assert!(CHECKS.iter().any(|c| c.id == id), "unknown check {id}");
        self.rows.insert(id, (verdict, evidence.into()));
    }

    fn pass(&mut self, id: &'static str) {
        self.set(id, Verdict::Pass, "");
    }

    fn refusal(&mut self, id: &'static str, r: &Response) {
        if (400..500).contains(&r.status) {
            self.refusals.push((id, r.clone()));
        }
    }

    /// A POST with these `Idempotency-Key` lines, as the main credential
    /// or another.
    fn request(
        &self,
        path: &str,
        key_lines: &[Vec<u8>],
        body: &str,
        credential: Option<&[(String, String)]>,
    ) -> Request {
        let mut request = Request::new("POST", path);
        for (name, value) in &self.cfg.headers {
            let replaced =
                credential.is_some_and(|c| c.iter().any(|(n, _)| n.eq_ignore_ascii_case(name)));
            if !replaced {
                request = request.header(name, value.as_bytes());
            }
        }
        for (name, value) in credential.unwrap_or_default() {
            request = request.header(name, value.as_bytes());
        }
        for line in key_lines {
            request = request.header("Idempotency-Key", line.clone());
        }
        request.json_body(body)
    }

    /// Sends it; a 429 (rate limit, no part of the protocol) is waited out.
    fn send(&self, request: &Request) -> Result<Response, String> {
        let mut waits = 0;
        loop {
            let r = http::send(&self.cfg.origin, request, self.cfg.timeout)?;
            if r.status != 429 || waits == MAX_WAITS {
                return Ok(r);
            }
            waits += 1;
            std::thread::sleep(retry_after(&r));
        }
    }

    fn post(&self, key: &str, body: &str) -> Result<Response, String> {
        self.send(&self.request(&self.cfg.endpoint, &[quoted(key)], body, None))
    }

    /// A POST whose 409 (in flight) is retried after its Retry-After.
    fn post_until_settled(&self, key: &str, body: &str) -> Result<Response, String> {
        for attempt in 1.. {
            let r = self.post(key, body)?;
            if r.status != 409 || attempt == MAX_WAITS {
                return Ok(r);
            }
            let wait = retry_after(&r);
            progress(
                &format!("conformance: lost response: the retry got 409, again in {wait:?}"),
                false,
            );
            std::thread::sleep(wait);
        }
        unreachable!()
    }

    /// The resource an answer names: its id member, else its Location.
    fn id(&self, r: &Response) -> Option<String> {
        if !r.is_success() {
            return None;
        }
        let from_body = r.json().and_then(|j| match j.get(&self.cfg.id_field)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        from_body.or_else(|| r.header("location").map(str::to_owned))
    }

    /// How many resources carry `marker`, by the read URL (`None`: none
    /// was given).
    fn created(&self, marker: &str) -> Option<Result<usize, String>> {
        let path = self.cfg.read_path.as_ref()?;
        let mut request = Request::new("GET", path);
        for (name, value) in &self.cfg.headers {
            request = request.header(name, value.as_bytes());
        }
        Some(match self.send(&request) {
            Ok(r) if r.is_success() => Ok(r.text().matches(marker).count()),
            Ok(r) => Err(format!("--read-url answered {}", r.summary())),
            Err(e) => Err(format!("--read-url: {e}")),
        })
    }

    /// `Ok(())` when what carries `marker` numbers `expected` (or cannot be
    /// counted), else the evidence.
    fn expect_created(&self, marker: &str, expected: usize, what: &str) -> Result<(), String> {
        match self.created(marker) {
            None => Ok(()),
            Some(Ok(n)) if n == expected => Ok(()),
            Some(Ok(n)) => Err(format!(
                "{n} resource(s) in --read-url carry {what}'s marker, not {expected}"
            )),
            Some(Err(e)) => Err(e),
        }
    }
}

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

/// `n` identical requests at once; their answers in order of sending.
fn send_at_once(ctx: &Ctx, request: &Request) -> Vec<Result<Response, String>> {
    let n = ctx.cfg.concurrency;
    let start = Arc::new(Barrier::new(n));
    let answered = Arc::new(AtomicUsize::new(0));
    let label = format!("conformance: {n} concurrent requests with one key");
    progress(&format!("{label}…"), false);
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let (start, answered) = (start.clone(), answered.clone());
                s.spawn(move || {
                    start.wait();
                    let r = ctx.send(request);
                    answered.fetch_add(1, Ordering::Relaxed);
                    r
                })
            })
            .collect();
        while answered.load(Ordering::Relaxed) < n {
            let done = answered.load(Ordering::Relaxed);
            progress(&format!("{label}: {done}/{n} answered"), false);
            std::thread::sleep(Duration::from_millis(100));
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the thread panicked".to_owned()))
            })
            .collect::<Vec<_>>()
    });
    progress(&format!("{label}: {n}/{n} answered"), true);
    results
}

fn concurrent(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    let (key, marker) = (new_key(), new_marker());
    let request = ctx.request(
        &ctx.cfg.endpoint,
        &[quoted(&key)],
        &fill(&ctx.cfg.body, &marker),
        None,
    );
    let results = send_at_once(ctx, &request);
    let ok: Vec<&Response> = results
        .iter()
        .flatten()
        .filter(|r| r.is_success())
        .collect();
    let ids: BTreeSet<String> = ok.iter().filter_map(|r| ctx.id(r)).collect();
    let counted = ctx.expect_created(&marker, 1, "the concurrent requests");
    match (ids.len(), counted) {
        (1, Ok(())) => ctx.pass("concurrent-one-resource"),
        (0, _) => ctx.set(
            "concurrent-one-resource",
            Verdict::Fail,
            "no request succeeded",
        ),
        (1, Err(e)) => ctx.set("concurrent-one-resource", Verdict::Fail, e),
        (n, _) => ctx.set(
            "concurrent-one-resource",
            Verdict::Fail,
            format!("{n} different resources among {} 2xx answers", ok.len()),
        ),
    }
    match concurrent_answers(&results, ok.first().copied()) {
        Ok(()) => ctx.pass("concurrent-answers"),
        Err(e) => ctx.set("concurrent-answers", Verdict::Fail, e),
    }
    let conflicts: Vec<&Response> = results
        .iter()
        .flatten()
        .filter(|r| r.status == 409)
        .collect();
    if let Some(r) = conflicts.first() {
        ctx.refusal("concurrent-answers", r);
    }
    let without = conflicts
        .iter()
        .filter(|r| r.header("retry-after").is_none())
        .count();
    match (conflicts.len(), without) {
        (0, _) => ctx.set(
            "concurrent-retry-after",
            Verdict::Skip,
            "no 409: every duplicate was answered with the result",
        ),
        (_, 0) => ctx.pass("concurrent-retry-after"),
        (n, w) => ctx.set(
            "concurrent-retry-after",
            Verdict::Fail,
            format!(
                "{w} of {n} 409s without Retry-After, e.g. {}",
                conflicts[0].summary()
            ),
        ),
    }
    Ok(())
}

/// `Ok` when every answer is `winner`'s (the one result) or a 409; else
/// a tally of what came back.
fn concurrent_answers(
    results: &[Result<Response, String>],
    winner: Option<&Response>,
) -> Result<(), String> {
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = winner.is_none();
    for result in results {
        let line = match (result, winner) {
            (Ok(r), Some(w)) if r.is_success() && r.status == w.status && same_body(r, w) => {
                format!("{} (one answer)", r.status)
            }
            (Ok(r), _) if r.status == 409 => "409".to_owned(),
            (Ok(r), _) => {
                bad = true;
                r.summary()
            }
            (Err(e), _) => {
                bad = true;
                format!("no answer: {e}")
            }
        };
        *tally.entry(line).or_default() += 1;
    }
    if !bad {
        return Ok(());
    }
    let parts: Vec<String> = tally.iter().map(|(l, n)| format!("{n} × {l}")).collect();
    Err(parts.join("; "))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
        Response {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn the_same_result_is_the_same_bytes_or_the_same_json() {
        let a = response(201, &[], r#"{"id":"x","amount":1}"#);
        assert!(same_body(
            &a,
            &response(201, &[], r#"{"amount":1, "id":"x"}"#)
        ));
        assert!(!same_body(
            &a,
            &response(201, &[], r#"{"id":"y","amount":1}"#)
        ));
        assert!(same_body(
            &response(200, &[], "ok"),
            &response(200, &[], "ok")
        ));
    }

    #[test]
    fn retry_after_is_seconds_bounded_with_one_second_by_default() {
        let wait = |v: &str| retry_after(&response(409, &[("Retry-After", v)], ""));
        assert_eq!(wait("2"), Duration::from_secs(2));
        assert_eq!(wait("3600"), MAX_RETRY_AFTER);
        assert_eq!(wait("0"), Duration::from_millis(100));
        assert_eq!(
            wait("Fri, 04 Dec 2026 23:00:00 GMT"),
            Duration::from_secs(1)
        );
        assert_eq!(retry_after(&response(409, &[], "")), Duration::from_secs(1));
    }

    #[test]
    fn concurrent_answers_are_the_one_result_or_409_and_anything_else_is_tallied() {
        let one = response(201, &[], r#"{"id":"a"}"#);
        let fine = vec![Ok(one.clone()), Ok(response(409, &[], "")), Ok(one.clone())];
        assert_eq!(concurrent_answers(&fine, Some(&one)), Ok(()));
        let other = response(201, &[], r#"{"id":"b"}"#);
        let bad = vec![Ok(one.clone()), Ok(other), Err("reset".to_owned())];
        let tally = concurrent_answers(&bad, Some(&one)).unwrap_err();
        assert!(tally.contains("1 × 201 (one answer)"), "{tally}");
        assert!(tally.contains("1 × no answer: reset"), "{tally}");
        assert!(tally.contains(r#"{"id":"b"}"#), "{tally}");
        // No 2xx at all is no result.
        assert!(concurrent_answers(&[Ok(response(409, &[], ""))], None).is_err());
    }
}
