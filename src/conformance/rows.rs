//! The rows of the report: each names the sentence it tests, the revision
//! and section it comes from, and takes its strength from that sentence.
//! Rows the draft does not state are [`Strength::Project`]: recommended by
//! this project, scored apart and never in the exit status.
//! docs/conformance.md says where each quote was read.

use serde::Serialize;

/// How binding a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Strength {
    /// The draft's MUST: the only rows that decide the exit status.
    #[serde(rename = "MUST")]
    Must,
    /// The draft's SHOULD (or a recommendation its text makes).
    #[serde(rename = "SHOULD")]
    Should,
    /// Not in the draft: recommended by this project.
    #[serde(rename = "project")]
    Project,
}

impl Strength {
    pub fn as_str(self) -> &'static str {
        match self {
            Strength::Must => "MUST",
            Strength::Should => "SHOULD",
            Strength::Project => "project",
        }
    }
}

/// One row of the report before it is run.
#[derive(Debug)]
pub struct Check {
    pub id: &'static str,
    /// Where the quote comes from: `-07 §2.6`, or `project`.
    pub source: &'static str,
    pub strength: Strength,
    pub title: &'static str,
    /// The sentence tested (for a project row: why we recommend it).
    pub quote: &'static str,
}

const fn check(
    id: &'static str,
    source: &'static str,
    strength: Strength,
    title: &'static str,
    quote: &'static str,
) -> Check {
    Check {
        id,
        source,
        strength,
        title,
        quote,
    }
}

use Strength::{Must, Project, Should};

const FIRST: &str = "First time request (idempotency key and fingerprint has not been seen): The resource SHOULD process the request normally and respond with an appropriate response and status code.";
const SYNTAX: &str = "Idempotency-Key is an Item Structured Header [RFC8941]. Its value MUST be a String. (RFC 8941 §4.2: a field that fails to parse is ignored as a whole; refusing it or ignoring it both pass, using the raw value as a key does not.)";
const RETRY: &str = "Retry: The request was retried after the original request completed. The resource SHOULD respond with the result of the previously completed operation, success or an error.";
const REUSE: &str = "If there is an attempt to reuse an idempotency key with a different request payload, the resource SHOULD reply with a HTTP 422 status code with body containing a link pointing to relevant documentation.";
const UNCORRECTED: &str = "Clients MUST correct the requests (with the exception of 409 where no correction is required) before performing a retry operation, or the resource MUST fail the request and return one of the above errors.";
const CONCURRENT: &str = "Concurrent Request: The request was retried before the original request completed. The resource SHOULD respond with a resource conflict error. (§2.7: SHOULD reply with an HTTP 409 status code; a server that makes the duplicate wait and then answers the result is also accepted.)";
const SCOPE: &str = "On the resource, implement a unique composite key as the idempotent cache lookup key. For example, a composite key MAY be implemented by combining the idempotency key sent by the client with other client specific attributes known only to the resource. (one of the best practices §5 recommends)";

/// Every row, in the order of the report.
pub const CHECKS: &[Check] = &[
    check(
        "first-request",
        "-07 §2.6",
        Should,
        "a first request is processed: 2xx with the resource's id",
        FIRST,
    ),
    check(
        "syntax-empty",
        "-07 §2.1",
        Should,
        "an empty key is refused or ignored, never used as a key",
        SYNTAX,
    ),
    check(
        "syntax-list",
        "-07 §2.1",
        Should,
        "a list of two keys is refused or ignored, never used as a key",
        SYNTAX,
    ),
    check(
        "syntax-two-fields",
        "-07 §2.1",
        Should,
        "two Idempotency-Key lines are refused or ignored, never used as a key",
        SYNTAX,
    ),
    check(
        "syntax-non-ascii",
        "-07 §2.1",
        Should,
        "a non-ASCII key is refused or ignored, never used as a key",
        SYNTAX,
    ),
    check(
        "syntax-too-long",
        "project",
        Project,
        "a 256-character key is refused with 4xx, nothing created",
        "A limit on the key's length bounds what a caller may make the server store and compare; this API takes 1 to 255 characters.",
    ),
    check(
        "retry-same-answer",
        "-07 §2.6",
        Should,
        "a retry gets the same status and body",
        RETRY,
    ),
    check(
        "retry-one-resource",
        "-07 §2.6",
        Should,
        "a retry creates nothing: one resource",
        RETRY,
    ),
    check(
        "replay-marker",
        "project",
        Project,
        "a replay is marked (Idempotent-Replayed or the like)",
        "A client, a log or a proxy can tell a replay from a first answer only if the response says so.",
    ),
    check(
        "other-body-refused",
        "-07 §2.7",
        Should,
        "the same key with another body is refused, nothing created",
        REUSE,
    ),
    check(
        "other-body-422",
        "-07 §2.7",
        Should,
        "the same key with another body answers 422",
        REUSE,
    ),
    check(
        "uncorrected-retry-refused",
        "-07 §2.7",
        Must,
        "a refused request sent again uncorrected is refused again, nothing created",
        UNCORRECTED,
    ),
    check(
        "other-endpoint-refused",
        "project",
        Project,
        "the same key on another endpoint is refused",
        "The draft says nothing of a key reused on another endpoint; we scope keys per endpoint and refuse the reuse, so that a retry can never get another operation's answer.",
    ),
    check(
        "other-endpoint-422",
        "project",
        Project,
        "the same key on another endpoint answers 422",
        "As other-endpoint-refused, with the status the draft gives a key reused with another payload.",
    ),
    check(
        "new-key-new-resource",
        "-07 §2.6",
        Should,
        "a new key with the same body creates a new resource",
        FIRST,
    ),
    check(
        "concurrent-one-resource",
        "-07 §2.6",
        Should,
        "concurrent requests with one key: exactly one resource, in every burst",
        CONCURRENT,
    ),
    check(
        "concurrent-answers",
        "-07 §2.6",
        Should,
        "concurrent duplicates get 409, or wait and get the result",
        CONCURRENT,
    ),
    check(
        "concurrent-retry-after",
        "project",
        Project,
        "a 409 for a request in flight carries Retry-After",
        "Without it a client polls or guesses when the first request will be done.",
    ),
    check(
        "lost-response-one-resource",
        "-07 §2.6",
        Should,
        "a lost response retried: one resource",
        RETRY,
    ),
    check(
        "lost-response-answered",
        "-07 §2.6",
        Should,
        "a lost response retried: the retry gets the resource",
        RETRY,
    ),
    check(
        "error-not-result",
        "project",
        Project,
        "a refused request does not bind its key: corrected, it is processed",
        "-07 §2.6 lets a retry get a stored error too; we recommend not storing a refusal, so that the corrected request §2.7 asks for can be sent under the same key.",
    ),
    check(
        "scope-per-credential",
        "-07 §5",
        Should,
        "one key under two credentials: two resources, no answer shared",
        SCOPE,
    ),
    check(
        "problem-details",
        "project",
        Project,
        "every refusal is application/problem+json",
        "RFC 9457; the draft's own examples of 400, 409 and 422 use it.",
    ),
];
