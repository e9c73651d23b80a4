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
mod rows;

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;
use serde_json::json;

pub use config::{Config, ConformanceArgs};
pub use rows::{CHECKS, Check, Strength};

/// The body this API's `POST /charges` takes (another API needs its own
/// `--body`, `--second-body` and `--invalid-body`); `{marker}` becomes a value
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

/// A row of the report: a check and how it went.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub id: &'static str,
    /// The revision and section quoted (`-07 §2.6`), or `project`.
    pub source: &'static str,
    pub strength: Strength,
    pub check: &'static str,
    pub quote: &'static str,
    pub result: Verdict,
    /// On FAIL what was seen (status, header, body excerpt); on SKIP why;
    /// on PASS a limit of what was checked, if any.
    pub evidence: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub target: String,
    pub draft: &'static str,
    /// How resources were counted, and whether that counting was proved.
    pub counted_by: String,
    /// What the concurrent rows tried (bursts and their size).
    pub tried: String,
    pub rows: Vec<Row>,
}

/// The longest evidence the table prints; `--json` has all of it.
pub const EVIDENCE_CHARS: usize = 300;

/// `text` cut at `max` characters, saying where the rest is.
pub fn bounded(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}… (the rest in --json)")
}

impl Report {
    /// The MUST rows that could not be checked (SKIP): the exit status does
    /// not count them, so the summary names them.
    pub fn must_unchecked(&self) -> Vec<&'static str> {
        self.rows
            .iter()
            .filter(|r| r.strength == Strength::Must && r.result == Verdict::Skip)
            .map(|r| r.id)
            .collect()
    }

    /// The exit status's question: did a row the draft states as MUST fail?
    pub fn must_failed(&self) -> bool {
        self.rows
            .iter()
            .any(|r| r.strength == Strength::Must && r.result == Verdict::Fail)
    }

    fn count(&self, project: bool, verdict: Verdict) -> usize {
        self.rows
            .iter()
            .filter(|r| (r.strength == Strength::Project) == project && r.result == verdict)
            .count()
    }

    fn tally(&self, project: bool) -> serde_json::Value {
        json!({
            "pass": self.count(project, Verdict::Pass),
            "fail": self.count(project, Verdict::Fail),
            "skip": self.count(project, Verdict::Skip),
        })
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "target": self.target,
            "draft": self.draft,
            "counted_by": self.counted_by,
            "tried": self.tried,
            "rows": self.rows,
            "summary": {
                "draft": self.tally(false),
                "project": self.tally(true),
                "must_failed": self.must_failed(),
                "must_unchecked": self.must_unchecked(),
            },
        })
    }

    /// The table a person reads: one line per row (its id first), the
    /// evidence under it, bounded.
    pub fn to_table(&self) -> String {
        let width = CHECKS.iter().map(|c| c.id.len()).max().unwrap_or(0);
        let mut out = format!(
            "{} conformance of POST {}\nresources counted by {}\nconcurrent rows: {}\n\n",
            self.draft, self.target, self.counted_by, self.tried
        );
        out.push_str(&format!(
            "{:<width$}  {:<8} {:<9} result  check\n",
            "id", "strength", "source"
        ));
        let indent = " ".repeat(width + 2);
        for row in &self.rows {
            out.push_str(&format!(
                "{:<width$}  {:<8} {:<9} {}  {}\n",
                row.id,
                row.strength.as_str(),
                row.source,
                row.result.as_str(),
                row.check,
            ));
            if !row.evidence.is_empty() {
                let evidence = bounded(&row.evidence, EVIDENCE_CHARS).replace('\n', " ");
                out.push_str(&format!("{indent}{evidence}\n"));
            }
            if row.result == Verdict::Fail {
                let quote = bounded(row.quote, EVIDENCE_CHARS);
                out.push_str(&format!("{indent}{}: \"{quote}\"\n", row.source));
            }
        }
        let must = self
            .rows
            .iter()
            .filter(|r| r.strength == Strength::Must && r.result == Verdict::Fail)
            .count();
        let unchecked = self.must_unchecked();
        let unchecked = if unchecked.is_empty() {
            String::new()
        } else {
            format!(
                " (MUST {}, not checked: {}; exit 0 says only that no MUST failed)",
                unchecked.len(),
                unchecked.join(", ")
            )
        };
        // Not "N passed, N failed": CI reads such a line as a test runner's.
        out.push_str(&format!(
            "\ndraft rows: PASS {}, FAIL {} (MUST {must}), SKIP {}{unchecked}\n\
             project rows (not in the exit status): PASS {}, FAIL {}, SKIP {}\n",
            self.count(false, Verdict::Pass),
            self.count(false, Verdict::Fail),
            self.count(false, Verdict::Skip),
            self.count(true, Verdict::Pass),
            self.count(true, Verdict::Fail),
            self.count(true, Verdict::Skip),
        ));
        out
    }
}

/// Runs every check. `Err`: the checks could not run at all (no server,
/// or a first request not answered with a 2xx: one line saying what it got
/// and what to pass).
pub fn run(config: &Config) -> Result<Report, String> {
    let outcome = checks::run_all(config)?;
    Ok(Report {
        target: config.target(),
        draft: DRAFT,
        counted_by: outcome.counted_by,
        tried: outcome.tried,
        rows: outcome.rows,
    })
}

/// `charges conformance`: the report on stdout; exit status 0 when no MUST
/// row failed, 1 when one did, 2 when the checks could not run (bad flags,
/// no server, a first request not answered with a 2xx, or one without an
/// id: nothing else was checked). Project rows never change it. A MUST row
/// that could not be checked (SKIP) leaves it 0, as before (scripts read 0
/// as "no MUST failed"); the summary line names it, and so does stderr.
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
    let unchecked = report.must_unchecked();
    if !unchecked.is_empty() {
        eprintln!(
            "charges conformance: MUST row(s) not checked (SKIP): {}; the exit status counts only failed ones",
            unchecked.join(", ")
        );
    }
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
    fn every_check_has_its_own_id_and_a_quote() {
        let ids: std::collections::BTreeSet<&str> = CHECKS.iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), CHECKS.len());
        for c in CHECKS {
            assert!(!c.quote.is_empty(), "{}", c.id);
            assert_eq!(
                c.strength == Strength::Project,
                c.source == "project",
                "{}",
                c.id
            );
        }
    }

    fn row(id: &'static str, strength: Strength, result: Verdict) -> Row {
        Row {
            id,
            source: "-07 §2.6",
            strength,
            check: "a check",
            quote: "a sentence",
            result,
            evidence: if result == Verdict::Pass {
                String::new()
            } else {
                format!("why {id} {}", "x".repeat(400))
            },
        }
    }

    #[test]
    fn only_a_failed_must_fails_the_report_and_project_rows_are_counted_apart() {
        let mut report = Report {
            target: "http://h/charges".to_owned(),
            draft: DRAFT,
            counted_by: "GET /list".to_owned(),
            tried: "1 burst".to_owned(),
            rows: vec![
                row("a", Strength::Should, Verdict::Fail),
                row("b", Strength::Project, Verdict::Fail),
                row("c", Strength::Must, Verdict::Skip),
                row("d", Strength::Must, Verdict::Pass),
            ],
        };
        assert!(!report.must_failed());
        let table = report.to_table();
        assert!(table.contains("why a"), "{table}");
        assert!(table.contains("(the rest in --json)"), "{table}");
        assert!(
            table
                .lines()
                .all(|l| l.chars().count() < EVIDENCE_CHARS + 80),
            "{table}"
        );
        assert!(
            table.contains("draft rows: PASS 1, FAIL 1 (MUST 0), SKIP 1"),
            "{table}"
        );
        assert!(
            table.contains("project rows (not in the exit status): PASS 0, FAIL 1"),
            "{table}"
        );
        report.rows.push(row("e", Strength::Must, Verdict::Fail));
        assert!(report.must_failed());
        let json = report.to_json();
        assert_eq!(json["summary"]["draft"]["fail"], 2);
        assert_eq!(json["summary"]["project"]["fail"], 1);
        assert_eq!(json["summary"]["must_failed"], true);
        assert_eq!(json["rows"][1]["strength"], "project");
        assert_eq!(json["rows"][4]["strength"], "MUST");
        assert_eq!(json["rows"][4]["evidence"].as_str().unwrap().len(), 406);
    }

    #[test]
    fn a_must_row_that_could_not_be_checked_is_named_by_the_summary() {
        let mut report = Report {
            target: "http://h/charges".to_owned(),
            draft: DRAFT,
            counted_by: "GET /list".to_owned(),
            tried: "1 burst".to_owned(),
            rows: vec![
                row("a", Strength::Must, Verdict::Pass),
                row("b", Strength::Should, Verdict::Skip),
            ],
        };
        assert!(report.must_unchecked().is_empty());
        assert!(!report.to_table().contains("not checked"));
        report.rows.push(row("c", Strength::Must, Verdict::Skip));
        assert!(!report.must_failed());
        assert_eq!(report.must_unchecked(), ["c"]);
        let table = report.to_table();
        assert!(
            table.contains("SKIP 2 (MUST 1, not checked: c; exit 0 says only that no MUST failed)"),
            "{table}"
        );
        assert_eq!(report.to_json()["summary"]["must_unchecked"], json!(["c"]));
    }
}
