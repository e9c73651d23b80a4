//! The concurrent checks: the same request sent at once, many times, and
//! what a conforming server may answer (the one result, or 409).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::super::Verdict;
use super::super::http::{Request, Response};
use super::context::{Ctx, First, fill, new_key, new_marker, progress, quoted, same_body};

/// `n` identical requests at once; their answers in order of sending.
pub(super) fn send_at_once(ctx: &Ctx, request: &Request) -> Vec<Result<Response, String>> {
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

pub(super) fn concurrent(ctx: &mut Ctx, _: &First) -> Result<(), String> {
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
pub(super) fn concurrent_answers(
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

#[cfg(test)]
mod tests {
    use super::super::context::response;
    use super::*;

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
