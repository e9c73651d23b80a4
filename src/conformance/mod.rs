//! `charges conformance URL`: a black-box checker of any API's
//! `Idempotency-Key` handling against draft-ietf-httpapi-idempotency-key-header-07,
//! as h2spec is for HTTP/2. It owns the list of checks ([`CHECKS`]: each
//! with its section of the draft and its strength), the report (a table, or
//! JSON) and the exit status (non-zero when a MUST fails). The checks are
//! in `checks/`, the HTTP they send in `http.rs`, the command line in
//! `config.rs`. It uses nothing else of this crate: it talks to the server
//! only over plain HTTP, so it checks this API and any other alike. See
//! docs/conformance.md.

mod checks;
mod config;
pub mod http;

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;

pub use config::{Config, ConformanceArgs};

/// The body this API's `POST /charges` takes; `{marker}` becomes a value
/// unique to each request that must make a resource of its own, so that
/// the read URL shows which request made what.
pub const DEFAULT_BODY: &str =
    r#"{"amount":1000,"currency":"jpy","description":"conformance {marker}"}"#;
/// Another valid body (another amount): the same key with it is a different request.
pub const DEFAULT_SECOND_BODY: &str =
    r#"{"amount":2000,"currency":"jpy","description":"conformance {marker}"}"#;
/// A body the endpoint refuses (a negative amount).
pub const DEFAULT_INVALID_BODY: &str =
    r#"{"amount":-1,"currency":"jpy","description":"conformance {marker}"}"#;
pub const DRAFT: &str = "draft-ietf-httpapi-idempotency-key-header-07";

/// How binding a row is: the draft's MUST or SHOULD, or common practice
/// the draft does not require.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Strength {
    Must,
    Should,
    #[serde(rename = "practice")]
    Practice,
}

impl Strength {
    pub fn as_str(self) -> &'static str {
        match self {
            Strength::Must => "MUST",
            Strength::Should => "SHOULD",
            Strength::Practice => "practice",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
    Skip,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Skip => "SKIP",
        }
    }
}

/// One row of the report before it is run.
#[derive(Debug)]
pub struct Check {
    pub id: &'static str,
    /// The draft's section, e.g. `2.6`; RFC 9457 for problem details.
    pub section: &'static str,
    pub strength: Strength,
    pub title: &'static str,
}

const fn check(
    id: &'static str,
    section: &'static str,
    strength: Strength,
    title: &'static str,
) -> Check {
    Check {
        id,
        section,
        strength,
        title,
    }
}

use Strength::{Must, Practice, Should};

/// Every row, in the order of the report. docs/conformance.md explains
/// each and why it has its strength.
pub const CHECKS: &[Check] = &[
    check(
        "first-request",
        "2.6",
        Should,
        "a first request is processed: 2xx with the resource's id",
    ),
    check(
        "syntax-empty",
        "2.1",
        Should,
        "an empty key is refused with 4xx, nothing created",
    ),
    check(
        "syntax-list",
        "2.1",
        Should,
        "a list of two keys is refused with 4xx, nothing created",
    ),
    check(
        "syntax-two-fields",
        "2.1",
        Should,
        "two Idempotency-Key lines are refused with 4xx, nothing created",
    ),
    check(
        "syntax-non-ascii",
        "2.1",
        Should,
        "a non-ASCII key is refused with 4xx, nothing created",
    ),
    check(
        "syntax-too-long",
        "2.1",
        Practice,
        "a 256-character key is refused with 4xx, nothing created",
    ),
    check(
        "retry-same-answer",
        "2.6",
        Should,
        "a retry gets the same status and body",
    ),
    check(
        "retry-one-resource",
        "1",
        Must,
        "a retry creates nothing: one resource",
    ),
    check(
        "replay-marker",
        "-",
        Practice,
        "a replay is marked (Idempotent-Replayed or the like)",
    ),
    check(
        "other-body-refused",
        "2.7",
        Must,
        "the same key with another body is refused, nothing created",
    ),
    check(
        "other-body-422",
        "2.7",
        Should,
        "the same key with another body answers 422",
    ),
    check(
        "other-endpoint-refused",
        "2.7",
        Must,
        "the same key on another endpoint is refused",
    ),
    check(
        "other-endpoint-422",
        "2.7",
        Should,
        "the same key on another endpoint answers 422",
    ),
    check(
        "new-key-new-resource",
        "2.6",
        Should,
        "a new key with the same body creates a new resource",
    ),
    check(
        "concurrent-one-resource",
        "2.6",
        Must,
        "concurrent requests with one key: exactly one resource",
    ),
    check(
        "concurrent-answers",
        "2.6",
        Must,
        "concurrent duplicates wait and replay, or get 409",
    ),
    check(
        "concurrent-retry-after",
        "-",
        Practice,
        "a 409 for a request in flight carries Retry-After",
    ),
    check(
        "lost-response-one-resource",
        "1",
        Must,
        "a lost response retried: one resource",
    ),
    check(
        "lost-response-answered",
        "2.6",
        Should,
        "a lost response retried: the retry gets the resource",
    ),
    check(
        "error-not-result",
        "2.7",
        Must,
        "a refused request does not bind its key: corrected, it is processed",
    ),
    check(
        "scope-per-credential",
        "5",
        Should,
        "one key under two credentials: two resources, no answer shared",
    ),
    check(
        "problem-details",
        "RFC 9457",
        Practice,
        "every refusal is application/problem+json",
    ),
];

/// A row of the report: a check and how it went.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub id: &'static str,
    pub section: &'static str,
    pub strength: Strength,
    pub check: &'static str,
    pub result: Verdict,
    /// On FAIL what was seen (status, header, body excerpt); on SKIP why;
    /// on PASS a limit of what was checked, if any.
    pub evidence: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub target: String,
    pub draft: &'static str,
    /// How resources were counted: the read URL, or the ids in the answers.
    pub counted_by: String,
    pub rows: Vec<Row>,
}

impl Report {
    pub fn must_failed(&self) -> bool {
        self.rows
            .iter()
            .any(|r| r.strength == Strength::Must && r.result == Verdict::Fail)
    }

    fn count(&self, verdict: Verdict) -> usize {
        self.rows.iter().filter(|r| r.result == verdict).count()
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "target": self.target,
            "draft": self.draft,
            "counted_by": self.counted_by,
            "rows": self.rows,
            "summary": {
                "pass": self.count(Verdict::Pass),
                "fail": self.count(Verdict::Fail),
                "skip": self.count(Verdict::Skip),
                "must_failed": self.must_failed(),
            },
        })
    }

    /// The table a person reads: one line per row, the evidence under it.
    pub fn to_table(&self) -> String {
        let width = CHECKS
            .iter()
            .map(|c| c.title.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = format!(
            "{} conformance of POST {}\nresources counted by {}\n\n",
            self.draft, self.target, self.counted_by
        );
        out.push_str(&format!(
            "{:<9} {:<9} {:<width$}  result\n",
            "section", "strength", "check"
        ));
        for row in &self.rows {
            out.push_str(&format!(
                "{:<9} {:<9} {:<width$}  {}\n",
                row.section,
                row.strength.as_str(),
                row.check,
                row.result.as_str()
            ));
            if !row.evidence.is_empty() {
                out.push_str(&format!("{:20}{}\n", "", row.evidence));
            }
        }
        let must = self
            .rows
            .iter()
            .filter(|r| r.strength == Strength::Must && r.result == Verdict::Fail)
            .count();
        // Not "N passed, N failed": CI reads such a line as a test runner's.
        out.push_str(&format!(
            "\nrows: PASS {}, FAIL {} (MUST {must}), SKIP {}\n",
            self.count(Verdict::Pass),
            self.count(Verdict::Fail),
            self.count(Verdict::Skip)
        ));
        out
    }
}

/// Runs every check. `Err`: the server could not be reached at all.
pub fn run(config: &Config) -> Result<Report, String> {
    let rows = checks::run_all(config)?;
    let counted_by = match &config.read_path {
        Some(path) => format!("GET {path}"),
        None => "the ids in the answers only (no --read-url: \"nothing created\" is not checked)"
            .to_owned(),
    };
    Ok(Report {
        target: config.target(),
        draft: DRAFT,
        counted_by,
        rows,
    })
}

/// `charges conformance`: the report on stdout; exit status 0 when no MUST
/// failed, 1 when one did, 2 when the checks could not run (bad flags, no
/// server, or a first request not processed: nothing else was checked).
pub fn main(args: ConformanceArgs) -> ExitCode {
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("charges conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let report = match run(&config) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("charges conformance: {e}");
            return ExitCode::from(2);
        }
    };
    let text = if args.json {
        format!("{:#}\n", report.to_json())
    } else {
        report.to_table()
    };
    let _ = std::io::stdout().write_all(text.as_bytes());
    let first = report.rows.iter().find(|r| r.id == "first-request");
    if first.is_some_and(|r| r.result != Verdict::Pass) {
        ExitCode::from(2)
    } else if report.must_failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_check_has_its_own_id() {
        let ids: std::collections::BTreeSet<&str> = CHECKS.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), CHECKS.len());
    }

    fn row(id: &'static str, strength: Strength, result: Verdict) -> Row {
        Row {
            id,
            section: "2.6",
            strength,
            check: "a check",
            result,
            evidence: if result == Verdict::Pass {
                String::new()
            } else {
                format!("why {id}")
            },
        }
    }

    #[test]
    fn only_a_failed_must_fails_the_report() {
        let mut report = Report {
            target: "http://h/charges".to_owned(),
            draft: DRAFT,
            counted_by: "GET /list".to_owned(),
            rows: vec![
                row("a", Strength::Should, Verdict::Fail),
                row("b", Strength::Practice, Verdict::Fail),
                row("c", Strength::Must, Verdict::Skip),
                row("d", Strength::Must, Verdict::Pass),
            ],
        };
        assert!(!report.must_failed());
        let table = report.to_table();
        assert!(table.contains("why a"), "{table}");
        assert!(
            table.contains("rows: PASS 1, FAIL 2 (MUST 0), SKIP 1"),
            "{table}"
        );
        report.rows.push(row("e", Strength::Must, Verdict::Fail));
        assert!(report.must_failed());
        let json = report.to_json();
        assert_eq!(json["summary"]["fail"], 3);
        assert_eq!(json["summary"]["must_failed"], true);
        assert_eq!(json["rows"][1]["strength"], "practice");
        assert_eq!(json["rows"][4]["strength"], "MUST");
    }
}
