//! The checker's first request answered with something it cannot build
//! on (404, 405, 501, 400), which URL that first request goes to, and a MUST
//! row it could not check: each said in one line on stderr.

use std::io::{Read, Write};
use std::net::TcpListener;

use super::check_flawed;
use super::flawed::{Flaw, FlawedApi, serve_with};

/// Answers every request with a problem whose status its path names
/// (`/gone` 404, `/get-only` 405, anything else 501) and whose detail is
/// the request line, so that what the checker asked for shows in its line.
fn not_an_endpoint() -> FlawedApi {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    serve_with(listener, |mut stream, _| {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let head = String::from_utf8_lossy(&head);
        let line = head.lines().next().unwrap_or_default().to_owned();
        let path = line.split(' ').nth(1).unwrap_or_default();
        let status = match path {
            "/gone" => "404 Not Found",
            "/get-only" => "405 Method Not Allowed",
            _ => "501 Not Implemented",
        };
        let body = serde_json::json!({"title": "no", "detail": line}).to_string();
        let _ = write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: application/problem+json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
    })
}

/// The checker's exit status, stdout and stderr against `url`.
async fn run_plain(url: &str) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_charges"))
        .args(["conformance", url])
        .output()
        .await
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_first_answer_of_404_405_or_501_stops_the_run_with_one_line_naming_the_url() {
    let api = not_an_endpoint();
    let origin = api.url().trim_end_matches("/orders").to_owned();
    for (path, status) in [("/gone", 404), ("/get-only", 405), ("/elsewhere", 501)] {
        let (code, stdout, stderr) = run_plain(&format!("{origin}{path}")).await;
        assert_eq!(code, Some(2), "{path}: {stderr}");
        assert!(
            stdout.is_empty(),
            "{path}: no table of rows not run: {stdout}"
        );
        assert_eq!(stderr.lines().count(), 1, "{path}: {stderr}");
        assert!(
            stderr.contains(&format!("answered {status}")) && stderr.contains("pass its URL"),
            "{path}: {stderr}"
        );
    }
}

#[tokio::test]
async fn a_first_answer_of_400_stops_the_run_with_one_line_naming_the_body() {
    let api = FlawedApi::start(Flaw::None);
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_charges"))
        .args(["conformance", &api.url(), "-H", "Authorization: Bearer one"])
        .args(["--body", r#"{"amount":0}"#])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        run.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("answered 400") && stderr.contains("--body"),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_url_with_a_path_is_used_as_given_and_only_one_with_none_means_charges() {
    let api = not_an_endpoint();
    let origin = api.url().trim_end_matches("/orders").to_owned();
    // The root is a path: asked for as given.
    let (_, _, stderr) = run_plain(&format!("{origin}/")).await;
    assert!(stderr.contains("POST / HTTP/1.1"), "{stderr}");
    // No path at all: this API's endpoint.
    let (_, _, stderr) = run_plain(&origin).await;
    assert!(stderr.contains("POST /charges HTTP/1.1"), "{stderr}");
}

#[tokio::test]
async fn a_must_row_it_could_not_check_is_named_in_the_summary_and_on_stderr() {
    // It processes the other body, so the MUST's uncorrected retry of a
    // refused request has nothing to send again.
    let run = check_flawed(Flaw::NeverReplays).await;
    assert_eq!(
        run.report["summary"]["must_unchecked"],
        serde_json::json!(["uncorrected-retry-refused"]),
        "{:#}",
        run.report["summary"]
    );
    assert!(
        run.stderr
            .contains("MUST row(s) not checked (SKIP): uncorrected-retry-refused"),
        "{}",
        run.stderr
    );
}
