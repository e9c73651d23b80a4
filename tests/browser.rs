//! The teaching page in a real browser: headless Chromium (Debian's package,
//! never a downloaded one) driven by playwright-core clicks through lessons
//! 1 to 7 and the self-check against the real app on a fresh database (with
//! lesson 7's card network in process, on a fresh database of its own),
//! checks what the page shows and what the databases hold after each step,
//! runs axe-core in English and Japanese at desktop and phone sizes after
//! every experiment (and on /docs), and saves screenshots of every lesson in
//! those four views to `artifacts/browser/<backend>/`: on SQLite always, on
//! PostgreSQL too when `TEST_DATABASE_URL` is set. See
//! `tests/browser/lessons.mjs`.
//!
//! It needs Node.js, `npm ci --prefix tests/browser` (playwright-core and
//! axe-core) and `/usr/bin/chromium` (`.ci/run` installs them). Where any is
//! missing when the tests are built (see `build.rs`), the tests are ignored
//! with a reason that names exactly what is missing and how to get it, never
//! passed; with `BROWSER_TESTS=required` (as in CI) they run and fail instead.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;

// Why the test is ignored, by what build.rs found missing. Each reason says
// what is missing and the command that brings it.
macro_rules! browser_test {
    ($(#[$attr:meta])* $name:ident, $backend:expr) => {
        browser_test!($(#[$attr])* $name, $backend, None);
    };
    ($(#[$attr:meta])* $name:ident, $backend:expr, $room:expr) => {
        $(#[$attr])*
        #[tokio::test(flavor = "multi_thread")]
        #[cfg_attr(
            browser_tests_missing = "node",
            ignore = "needs Node.js >= 20 on PATH (apt-get install nodejs npm)"
        )]
        #[cfg_attr(
            browser_tests_missing = "npm",
            ignore = "needs the npm packages playwright-core and axe-core: npm ci --prefix tests/browser"
        )]
        #[cfg_attr(
            browser_tests_missing = "chromium",
            ignore = "needs Chromium at $CHROMIUM or /usr/bin/chromium: apt-get install chromium"
        )]
        #[cfg_attr(
            browser_tests_missing = "node+npm",
            ignore = "needs Node.js >= 20 (apt-get install nodejs npm), then its npm packages: npm ci --prefix tests/browser"
        )]
        #[cfg_attr(
            browser_tests_missing = "node+chromium",
            ignore = "needs Node.js >= 20 and Chromium: apt-get install nodejs npm chromium"
        )]
        #[cfg_attr(
            browser_tests_missing = "npm+chromium",
            ignore = "needs the npm packages (npm ci --prefix tests/browser) and Chromium (apt-get install chromium)"
        )]
        #[cfg_attr(
            browser_tests_missing = "node+npm+chromium",
            ignore = "needs Node.js >= 20 and Chromium (apt-get install nodejs npm chromium), then the npm packages: npm ci --prefix tests/browser"
        )]
        async fn $name() {
            run_lessons($backend, $room).await;
        }
    };
}

browser_test!(
    the_lessons_work_in_a_real_browser_on_sqlite,
    support::TestBackend::Sqlite
);

browser_test!(
    #[cfg(postgres_tests)]
    the_lessons_work_in_a_real_browser_on_postgres,
    support::TestBackend::Postgres
);

// A room of learners (#41): ten browser contexts at once on one server, each
// in a sandbox of its own, doing lessons 1, 3 and 4; each page shows its own
// rows only. PostgreSQL, as the demo hosted for others requires.
browser_test!(
    #[cfg(postgres_tests)]
    ten_learners_at_once_each_see_only_their_own_rows_on_postgres,
    support::TestBackend::Postgres,
    Some(10)
);

/// The room's ten pages and the tours' pages, all at once, starve each
/// other on a 2-core machine (lesson 4's checks poll the page while a
/// transaction is held): the tours run side by side, the room alone.
static ROOM_ALONE: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The room's pool: the demo takes half (24 connections), of which a third
/// may be held transactions (8 slots, for ten learners: see docs/deploy.md).
const ROOM_POOL_SIZE: u32 = 48;

async fn run_lessons(backend: support::TestBackend, room: Option<u32>) {
    let (_alone, _side_by_side) = match room {
        Some(_) => (Some(ROOM_ALONE.write().await), None),
        None => (None, Some(ROOM_ALONE.read().await)),
    };
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
            "the npm packages playwright-core and axe-core (npm ci --prefix tests/browser)",
            ["playwright-core/package.json", "axe-core/axe.min.js"]
                .iter()
                .all(|file| root.join("tests/browser/node_modules").join(file).exists()),
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

    // The card network of lesson 7: the demo's own (the server has none, as
    // `charges demo` by default: lessons 1-6 run the one transaction), in
    // process, on a database of its own (on the same backend), dropped when
    // the test ends.
    let network = support::TestDatabase::create_for(backend);
    let network_url = network.url.clone();
    // The server's own purge waits an hour, so lesson 5's purge is the one
    // that removes the expired key, however long the test looks at the page
    // before it presses the button (the page says "every 1 hour on this
    // server"). The recovery task runs often, so lesson 7 (c) waits little
    // more than its lease for it.
    let app = support::BACKEND
        .scope(
            backend,
            support::spawn_app_with(move |settings| {
                settings.purge_interval = std::time::Duration::from_secs(3600);
                settings.network_database_url = Some(network_url);
                settings.recovery_interval = std::time::Duration::from_millis(300);
                // The refusals' room code that this server hands out (`/?room=maple-7`).
                settings.demo_room_codes = vec!["maple-7".into()];
                // The room runs as the demo hosted for a class does
                // (`--public`), with its defaults: the cap on held
                // transactions sized from the pool (a third of the demo's
                // half, 8 of 48 for ten learners), so that some learners'
                // lesson 4 finds every slot taken and must wait for one.
                if room.is_some() {
                    settings.pool_size = ROOM_POOL_SIZE;
                    settings.demo_public = true;
                }
            }),
        )
        .await;
    let name = match backend {
        support::TestBackend::Sqlite => "sqlite",
        support::TestBackend::Postgres => "postgres",
    };
    let artifacts = root.join("artifacts/browser").join(name);
    if let Some(learners) = room {
        run_room(root, app.address.clone(), learners, chromium).await;
        drop(network);
        return;
    }
    // Old screenshots must not pass for new ones.
    let _ = std::fs::remove_dir_all(&artifacts);
    let artifacts_dir = artifacts.display().to_string();
    let (out, stdout) = lessons(
        root,
        app.address.clone(),
        chromium,
        ("ARTIFACTS_DIR", artifacts_dir),
    )
    .await;
    assert!(
        out.status.success(),
        "the browser lessons failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    let sections = [
        "load",
        "lesson-1",
        "lesson-2",
        "lesson-3",
        "lesson-4-atomic",
        "lesson-4-key-first",
        "lesson-5",
        "lesson-6",
        "lesson-7",
        "self-check",
    ];
    for section in sections {
        for view in ["en-desktop", "ja-desktop", "ja-phone", "en-phone"] {
            let file = format!("artifacts/browser/{name}/{section}-{view}.png");
            assert!(root.join(&file).exists(), "screenshot {file}");
        }
    }
    drop(network);
}

/// Runs `lessons.mjs` against `address` with `mode` (what it is to do: where
/// its screenshots go, or how many learners at once), and prints its report.
async fn lessons(
    root: &Path,
    address: String,
    chromium: String,
    mode: (&'static str, String),
) -> (std::process::Output, String) {
    let script = root.join("tests/browser/lessons.mjs");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(script)
            .env("BASE_URL", address)
            .env(mode.0, mode.1)
            .env("CHROMIUM", chromium)
            .output()
            .expect("node runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{stdout}");
    (out, stdout)
}

/// `lessons.mjs` with `ROOM=learners`: that many browser contexts at once.
async fn run_room(root: &Path, address: String, learners: u32, chromium: String) {
    let (out, stdout) = lessons(root, address, chromium, ("ROOM", learners.to_string())).await;
    assert!(
        out.status.success() && stdout.contains(" passed, 0 failed"),
        "the room of learners failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
