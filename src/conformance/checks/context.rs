//! What the checks share: the first request's result they build on, the
//! context that records each row's verdict (from its halves: one counted
//! through the read URL, one read off the answers), and small helpers
//! (fresh keys and markers, comparing answers, honouring Retry-After).

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use uuid::Uuid;

use super::super::http::{self, Request, Response};
use super::super::{CHECKS, Config, Verdict};

/// Answers 429 or 409 are retried at most this often, waiting Retry-After.
pub(super) const MAX_WAITS: usize = 15;
/// The longest Retry-After the checker honours.
pub(super) const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);
/// How long after a lost response the client retries (by then a server
/// that runs requests one at a time is done with the first).
pub(super) const LOST_RETRY_DELAY: Duration = Duration::from_secs(1);

/// What the first request made: the checks that follow build on it.
pub(super) struct First {
    pub(super) key: String,
    pub(super) marker: String,
    pub(super) body: String,
    pub(super) response: Response,
    pub(super) id: String,
}

pub(super) struct Ctx<'a> {
    pub(super) cfg: &'a Config,
    pub(super) rows: BTreeMap<&'static str, (Verdict, String)>,
    /// Every refusal seen (4xx), with the check it came from.
    pub(super) refusals: Vec<(&'static str, Response)>,
    /// The read URL once counting through it was proved on the first
    /// resource; else why nothing is counted.
    pub(super) counting: Result<String, String>,
}

/// One half of a row's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Half {
    Pass,
    /// Passed, with a note worth showing.
    Note(String),
    Fail(String),
    /// Could not be checked: why, and the flag that fixes it.
    Skip(String),
}

pub(super) fn new_key() -> String {
    Uuid::new_v4().to_string()
}

pub(super) fn new_marker() -> String {
    format!("m{}", Uuid::new_v4().simple())
}

pub(super) fn fill(template: &str, marker: &str) -> String {
    template.replace("{marker}", marker)
}

pub(super) fn quoted(key: &str) -> Vec<u8> {
    format!("\"{key}\"").into_bytes()
}

/// The same result: the same bytes, or the same JSON.
pub(super) fn same_body(a: &Response, b: &Response) -> bool {
    a.body == b.body || a.json().is_some_and(|j| Some(j) == b.json())
}

pub(super) fn retry_after(r: &Response) -> Duration {
    r.header("retry-after")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs)
        .clamp(Duration::from_millis(100), MAX_RETRY_AFTER)
}

/// A progress line on stderr: redrawn in place on a terminal; elsewhere
/// (a pipe, a CI log) only the finished lines, one per group of rows.
pub(super) fn progress(message: &str, done: bool) {
    let mut err = std::io::stderr();
    if err.is_terminal() {
        let _ = write!(err, "\r\x1b[2K{message}{}", if done { "\n" } else { "" });
    } else if done {
        let _ = writeln!(err, "{message}");
    }
}

impl Ctx<'_> {
    pub(super) fn set(&mut self, id: &'static str, verdict: Verdict, evidence: impl Into<String>) {
        debug_assert!(CHECKS.iter().any(|c| c.id == id), "unknown check {id}");
        self.rows.insert(id, (verdict, evidence.into()));
    }

    pub(super) fn pass(&mut self, id: &'static str) {
        self.set(id, Verdict::Pass, "");
    }

    /// The row's verdict from its halves: a failed half fails it; else a
    /// half that could not be checked makes it SKIP, never PASS.
    pub(super) fn settle(&mut self, id: &'static str, halves: &[Half]) {
        let pick = |f: fn(&Half) -> Option<&String>| -> Vec<String> {
            halves.iter().filter_map(f).cloned().collect()
        };
        let fails = pick(|h| match h {
            Half::Fail(e) => Some(e),
            _ => None,
        });
        let skips = pick(|h| match h {
            Half::Skip(e) => Some(e),
            _ => None,
        });
        let notes = pick(|h| match h {
            Half::Note(e) => Some(e),
            _ => None,
        });
        if !fails.is_empty() {
            self.set(id, Verdict::Fail, fails.join("; "));
        } else if !skips.is_empty() {
            let mut why = notes;
            why.extend(skips.into_iter().map(|s| format!("not counted: {s}")));
            self.set(id, Verdict::Skip, why.join("; "));
        } else {
            self.set(id, Verdict::Pass, notes.join("; "));
        }
    }

    pub(super) fn refusal(&mut self, id: &'static str, r: &Response) {
        if (400..500).contains(&r.status) {
            self.refusals.push((id, r.clone()));
        }
    }

    /// A POST with these `Idempotency-Key` lines, as the main credential
    /// or another.
    pub(super) fn request(
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
    pub(super) fn send(&self, request: &Request) -> Result<Response, String> {
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

    pub(super) fn post(&self, key: &str, body: &str) -> Result<Response, String> {
        self.send(&self.request(&self.cfg.endpoint, &[quoted(key)], body, None))
    }

    /// A POST whose 409 (in flight) is retried after its Retry-After.
    pub(super) fn post_until_settled(&self, key: &str, body: &str) -> Result<Response, String> {
        for attempt in 1.. {
            let r = self.post(key, body)?;
            // A 409 that carries the resource is a replay: nothing to wait for.
            if r.status != 409 || self.replayed_409(&r).is_some() || attempt == MAX_WAITS {
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
    pub(super) fn id(&self, r: &Response) -> Option<String> {
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

    /// A 409 whose body is a resource (its id member): a replay of the
    /// completed request under another status, not a request in flight.
    pub(super) fn replayed_409(&self, r: &Response) -> Option<String> {
        if r.status != 409 {
            return None;
        }
        match r.json()?.get(&self.cfg.id_field)? {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The resource an answer gives: a 2xx's, or a replaying 409's.
    pub(super) fn answer_id(&self, r: &Response) -> Option<String> {
        self.id(r).or_else(|| self.replayed_409(r))
    }

    /// GET of the read URL as the main credential.
    pub(super) fn read_list(&self, path: &str) -> Result<Response, String> {
        let mut request = Request::new("GET", path);
        for (name, value) in &self.cfg.headers {
            request = request.header(name, value.as_bytes());
        }
        match self.send(&request) {
            Ok(r) if r.is_success() => Ok(r),
            Ok(r) => Err(format!("--read-url answered {}", r.summary())),
            Err(e) => Err(format!("--read-url: {e}")),
        }
    }

    /// How many resources carry `marker`, and the page counted; `Err`:
    /// not counted, and why.
    pub(super) fn count_on_page(&self, marker: &str) -> Result<(usize, String), String> {
        let path = self.counting.as_ref().map_err(Clone::clone)?;
        let text = self.read_list(path)?.text();
        Ok((text.matches(marker).count(), text))
    }

    pub(super) fn count(&self, marker: &str) -> Result<usize, String> {
        self.count_on_page(marker).map(|(n, _)| n)
    }

    /// The counted half of a row: `expected` resources carry `marker`.
    /// `shown`: a resource the answers named, which the list must show for
    /// a count below `expected` to mean anything (a list that is not newest
    /// first, or too short, drops it: then the half is SKIP, not FAIL).
    pub(super) fn expect_created(
        &self,
        marker: &str,
        expected: usize,
        what: &str,
        shown: Option<&str>,
    ) -> Half {
        match self.count_on_page(marker) {
            Ok((n, _)) if n == expected => Half::Pass,
            Ok((n, page)) if n < expected && shown.is_some_and(|id| !listed(&page, id)) => {
                Half::Skip(format!(
                    "the list no longer shows resource {}: give --read-url a list of this caller's resources, newest first, long enough",
                    shown.unwrap_or_default()
                ))
            }
            Ok((n, _)) => Half::Fail(format!(
                "{n} resource(s) in --read-url carry {what}'s marker, not {expected}"
            )),
            Err(e) => Half::Skip(e),
        }
    }
}

/// Whether `page` shows the resource `id` (or, for a `Location`, its last segment).
fn listed(page: &str, id: &str) -> bool {
    page.contains(id)
        || id
            .rsplit('/')
            .next()
            .is_some_and(|last| !last.is_empty() && page.contains(last))
}

/// A response as a test writes it.
#[cfg(test)]
pub(super) fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
    Response {
        status,
        headers: headers
            .iter()
            .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
            .collect(),
        body: body.as_bytes().to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
