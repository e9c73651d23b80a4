//! The teaching page in a real browser: headless Chromium (Debian's package,
//! never a downloaded one) driven by playwright-core clicks through lessons
//! 1 to 5 against the real app on a fresh database, checks what the page
//! shows and what the database holds, and saves a screenshot per lesson to
//! `artifacts/browser/<backend>/`: on SQLite always, on PostgreSQL too when
//! `TEST_DATABASE_URL` is set. See `tests/browser/lessons.mjs`.
//!
//! It needs Node.js, `npm ci --prefix tests/browser` and `/usr/bin/chromium`
//! (`.ci/run` installs them). Where they are missing when the tests are built
//! (see `build.rs`) the tests are ignored with that reason, never passed;
//! with `BROWSER_TESTS=required` (as in CI) they run and fail instead.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    browser_tests_unavailable,
    ignore = "needs node, `npm ci --prefix tests/browser` and /usr/bin/chromium (apt-get install chromium)"
)]
async fn the_lessons_work_in_a_real_browser_on_sqlite() {
    run_lessons(support::TestBackend::Sqlite).await;
}

#[cfg(postgres_tests)]
#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    browser_tests_unavailable,
    ignore = "needs node, `npm ci --prefix tests/browser` and /usr/bin/chromium (apt-get install chromium)"
)]
async fn the_lessons_work_in_a_real_browser_on_postgres() {
    run_lessons(support::TestBackend::Postgres).await;
}

async fn run_lessons(backend: support::TestBackend) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let missing: Vec<&str> = [
        (
            "node",
            Command::new("node")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
        ),
        (
            "tests/browser/node_modules (npm ci --prefix tests/browser)",
            root.join("tests/browser/node_modules/playwright-core")
                .exists(),
        ),
        (
            "chromium (apt-get install chromium)",
            Path::new(&chromium).exists(),
        ),
    ]
    .into_iter()
    .filter_map(|(what, present)| (!present).then_some(what))
    .collect();
    // Built as runnable, so whatever is missing now is a failure, not a pass.
    assert!(
        missing.is_empty(),
        "browser test cannot run: missing {}",
        missing.join(", ")
    );

    let app = support::BACKEND.scope(backend, support::spawn_app()).await;
    let name = match backend {
        support::TestBackend::Sqlite => "sqlite",
        support::TestBackend::Postgres => "postgres",
    };
    let artifacts = root.join("artifacts/browser").join(name);
    // Old screenshots must not pass for new ones.
    let _ = std::fs::remove_dir_all(&artifacts);
    let script = root.join("tests/browser/lessons.mjs");
    let address = app.address.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .env("BASE_URL", address)
            .env("ARTIFACTS_DIR", &artifacts)
            .env("CHROMIUM", chromium)
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser lessons failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    for lesson in 1..=4 {
        assert!(
            root.join(format!("artifacts/browser/{name}/lesson-{lesson}.png"))
                .exists(),
            "screenshot of lesson {lesson}"
        );
    }
}
