//! The concurrent checks: races hunted, not sampled. Several bursts, each
//! of `--concurrency` identical requests with a key of its own, released
//! together over connections opened beforehand (so neither the connection
//! handshakes nor a short listen backlog spread a burst out); the rows say
//! how many bursts ran and the worst one seen.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::time::Instant;

use super::super::Verdict;
use super::super::http::{self, Request, Response};
use super::context::{Ctx, First, Half, fill, new_key, new_marker, progress, quoted, same_body};

/// `n` identical requests at once; their answers in order of sending.
pub(super) fn send_at_once(ctx: &Ctx, request: &Request) -> Vec<Result<Response, String>> {
    let n = ctx.cfg.concurrency;
    let start = Arc::new(Barrier::new(n));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                let start = start.clone();
                s.spawn(move || {
                    let stream = ctx.cfg.origin.connect(ctx.cfg.timeout);
                    // Every thread reaches the barrier, connected or not.
                    start.wait();
                    let deadline = Instant::now() + ctx.cfg.timeout;
                    let r = http::exchange(stream?, &ctx.cfg.origin, request, deadline)?;
                    // A rate limit is no part of the protocol: waited out.
                    if r.status == 429 {
                        ctx.send(request)
                    } else {
                        Ok(r)
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the thread panicked".to_owned()))
            })
            .collect::<Vec<_>>()
    })
}

/// What the bursts showed, summed up.
#[derive(Default)]
struct Seen {
    /// (burst, resources made, what went wrong) for bursts that did not make one.
    resources: Vec<(usize, usize, String)>,
    answers: Vec<(usize, String)>,
    skipped: Option<String>,
    tally: BTreeMap<String, usize>,
    in_flight: usize,
    without_retry_after: usize,
    example_409: Option<Response>,
}

fn burst(ctx: &mut Ctx, number: usize, seen: &mut Seen) {
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
    let ids: BTreeSet<String> = results
        .iter()
        .flatten()
        .filter_map(|r| ctx.answer_id(r))
        .collect();
    match (
        ids.len(),
        ctx.expect_created(
            &marker,
            1,
            "the burst",
            ids.iter().next().map(String::as_str),
        ),
    ) {
        (0, _) => seen
            .resources
            .push((number, 0, "no request succeeded".to_owned())),
        (1, Half::Fail(e)) => seen.resources.push((number, 2, e)),
        (1, Half::Skip(e)) => seen.skipped = Some(e),
        (1, _) => {}
        (n, _) => seen.resources.push((
            number,
            n,
            format!("{n} different resources among {} 2xx answers", ok.len()),
        )),
    }
    if let Err(e) = concurrent_answers(ctx, &results, ok.first().copied(), &mut seen.tally) {
        seen.answers.push((number, e));
    }
    for r in results.iter().flatten().filter(|r| r.status == 409) {
        if ctx.replayed_409(r).is_some() {
            continue;
        }
        seen.in_flight += 1;
        if r.header("retry-after").is_none() {
            seen.without_retry_after += 1;
        }
        if seen.example_409.is_none() {
            seen.example_409 = Some(r.clone());
            ctx.refusal("concurrent-answers", r);
        }
    }
}

pub(super) fn concurrent(ctx: &mut Ctx, _: &First) -> Result<(), String> {
    let (bursts, n) = (ctx.cfg.bursts, ctx.cfg.concurrency);
    let mut seen = Seen::default();
    for number in 1..=bursts {
        progress(
            &format!("conformance: concurrent: burst {number}/{bursts} of {n}"),
            false,
        );
        burst(ctx, number, &mut seen);
    }
    let tried = format!("{bursts} burst(s) of {n}");
    let tally: Vec<String> = seen
        .tally
        .iter()
        .map(|(l, c)| format!("{c} × {l}"))
        .collect();
    let tally = tally.join("; ");
    // The worst burst: the one that made the most resources.
    if let Some((number, _, e)) = seen.resources.iter().max_by_key(|(_, made, _)| *made) {
        let evidence = format!(
            "{} of {tried} made other than one resource; worst: burst {number}: {e}",
            seen.resources.len()
        );
        ctx.set("concurrent-one-resource", Verdict::Fail, evidence);
    } else if let Some(why) = &seen.skipped {
        let evidence = format!("{tried}: one id in every burst; not counted: {why}");
        ctx.set("concurrent-one-resource", Verdict::Skip, evidence);
    } else {
        let evidence = format!("{tried}: one resource in every burst");
        ctx.set("concurrent-one-resource", Verdict::Pass, evidence);
    }
    match seen.answers.first() {
        None => ctx.set(
            "concurrent-answers",
            Verdict::Pass,
            format!("{tried}: {tally}"),
        ),
        Some((number, e)) => {
            let evidence = format!(
                "{} of {tried} had other answers; first: burst {number}: {e}",
                seen.answers.len()
            );
            ctx.set("concurrent-answers", Verdict::Fail, evidence);
        }
    }
    match (seen.in_flight, seen.without_retry_after, &seen.example_409) {
        (0, _, _) => ctx.set(
            "concurrent-retry-after",
            Verdict::Skip,
            "no 409 for a request in flight: every duplicate was answered with the result",
        ),
        (_, 0, _) => ctx.pass("concurrent-retry-after"),
        (all, without, example) => ctx.set(
            "concurrent-retry-after",
            Verdict::Fail,
            format!(
                "{without} of {all} 409s without Retry-After, e.g. {}",
                example.as_ref().map(Response::summary).unwrap_or_default()
            ),
        ),
    }
    Ok(())
}

/// `Ok` when every answer is `winner`'s (the one result), a 409, or a 409
/// replaying the resource; else this burst's tally. Every answer is added
/// to `total`.
pub(super) fn concurrent_answers(
    ctx: &Ctx,
    results: &[Result<Response, String>],
    winner: Option<&Response>,
    total: &mut BTreeMap<String, usize>,
) -> Result<(), String> {
    tally_answers(results, winner, |r| ctx.replayed_409(r).is_some(), total)
}

fn tally_answers(
    results: &[Result<Response, String>],
    winner: Option<&Response>,
    is_replay: impl Fn(&Response) -> bool,
    total: &mut BTreeMap<String, usize>,
) -> Result<(), String> {
    let mut tally: BTreeMap<String, usize> = BTreeMap::new();
    let mut bad = winner.is_none();
    for result in results {
        let line = match (result, winner) {
            (Ok(r), Some(w)) if r.is_success() && r.status == w.status && same_body(r, w) => {
                format!("{} (one answer)", r.status)
            }
            (Ok(r), _) if r.status == 409 && is_replay(r) => {
                "409 (a replay: the resource as its body)".to_owned()
            }
            (Ok(r), _) if r.status == 409 => "409".to_owned(),
            (Ok(r), _) => {
                bad = true;
                // Cut short: 50 distinct bodies would make one line of kilobytes.
                let summary: String = r.summary().chars().take(100).collect();
                format!("{summary}…")
            }
            (Err(e), _) => {
                bad = true;
                format!("no answer: {e}")
            }
        };
        *tally.entry(line.clone()).or_default() += 1;
        *total.entry(line).or_default() += 1;
    }
    if !bad {
        return Ok(());
    }
    let parts: Vec<String> = tally.iter().map(|(l, n)| format!("{n} × {l}")).collect();
    Err(parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::super::context::response;
    use super::*;

    #[test]
    fn concurrent_answers_are_the_one_result_or_409_and_anything_else_is_tallied() {
        let one = response(201, &[], r#"{"id":"a"}"#);
        let fine = vec![Ok(one.clone()), Ok(response(409, &[], "")), Ok(one.clone())];
        let mut total = BTreeMap::new();
        let no = |_: &Response| false;
        assert_eq!(tally_answers(&fine, Some(&one), no, &mut total), Ok(()));
        let other = response(201, &[], r#"{"id":"b"}"#);
        let bad = vec![Ok(one.clone()), Ok(other), Err("reset".to_owned())];
        let tally = tally_answers(&bad, Some(&one), no, &mut total).unwrap_err();
        assert!(tally.contains("1 × 201 (one answer)"), "{tally}");
        assert!(tally.contains("1 × no answer: reset"), "{tally}");
        assert!(tally.contains(r#"{"id":"b"}"#), "{tally}");
        // No 2xx at all is no result.
        assert!(tally_answers(&[Ok(response(409, &[], ""))], None, no, &mut total).is_err());
        assert_eq!(total["201 (one answer)"], 3);
    }
}
