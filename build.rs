//! The integration tests always run on SQLite; they also run on PostgreSQL,
//! the reference backend, when `TEST_DATABASE_URL` is set while they are
//! built (`.ci/run` sets it). The flag is this cfg.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(postgres_tests)");
    standardwebhooks();
    // The browser test reports itself ignored, never passed, where Node, its
    // npm packages or Chromium are missing, unless BROWSER_TESTS=required
    // (CI), where it runs and fails on what is missing. The cfg names exactly
    // what is missing (tests/browser.rs turns each value into the ignore
    // reason that says how to get it).
    println!(
        "cargo::rustc-check-cfg=cfg(browser_tests_missing, values(\"node\", \"npm\", \"chromium\", \"node+npm\", \"node+chromium\", \"npm+chromium\", \"node+npm+chromium\"))"
    );
    println!("cargo::rerun-if-env-changed=BROWSER_TESTS");
    println!("cargo::rerun-if-env-changed=CHROMIUM");
    println!("cargo::rerun-if-changed=tests/browser");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let npm_packages = ["playwright-core/package.json", "axe-core/axe.min.js"]
        .iter()
        .all(|file| {
            std::path::Path::new("tests/browser/node_modules")
                .join(file)
                .exists()
        });
    let browser = std::path::Path::new(&chromium).exists();
    let missing: Vec<&str> = [("node", node), ("npm", npm_packages), ("chromium", browser)]
        .into_iter()
        .filter_map(|(what, present)| (!present).then_some(what))
        .collect();
    if !missing.is_empty() && std::env::var("BROWSER_TESTS").as_deref() != Ok("required") {
        println!(
            "cargo::rustc-cfg=browser_tests_missing=\"{}\"",
            missing.join("+")
        );
    }
    // The failover tests start PostgreSQL servers of their own: they need the
    // server binaries and root (pg_autoctl and initdb run as `postgres`
    // through runuser).
    println!("cargo::rustc-check-cfg=cfg(replication_tests_unavailable)");
    let server_binaries = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|dirs| {
        dirs.filter_map(Result::ok).any(|d| {
            d.path().join("bin/pg_basebackup").exists() && d.path().join("bin/initdb").exists()
        })
    });
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let runuser = std::process::Command::new("runuser")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    if !(server_binaries && root && runuser) {
        println!("cargo::rustc-cfg=replication_tests_unavailable");
    }
    // The failover tests run pg_auto_failover: `pg_autoctl` and the
    // monitor's extension for an installed server version. Set only where
    // the above is met, so that each ignored test gives one reason.
    println!("cargo::rustc-check-cfg=cfg(auto_failover_unavailable)");
    println!("cargo::rerun-if-changed=/usr/lib/postgresql");
    let extension = std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|dirs| {
        dirs.filter_map(Result::ok).any(|d| {
            d.path().join("lib/pgautofailover.so").exists() && d.path().join("bin/pg_ctl").exists()
        })
    });
    let pg_autoctl = std::process::Command::new("pg_autoctl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if server_binaries && root && runuser && !(extension && pg_autoctl) {
        println!("cargo::rustc-cfg=auto_failover_unavailable");
    }
    println!("cargo::rerun-if-env-changed=TEST_DATABASE_URL");
    if std::env::var_os("TEST_DATABASE_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=postgres_tests");
    }
    // The deploy guide's proxy test runs nginx, openssl and curl.
    println!("cargo::rustc-check-cfg=cfg(deploy_tests_unavailable)");
    let runs = |tool: &str, arg: &str| {
        std::process::Command::new(tool)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !(runs("nginx", "-v") && runs("openssl", "version") && runs("curl", "--version")) {
        println!("cargo::rustc-cfg=deploy_tests_unavailable");
    }
    // The network simulator's refusal of its default key on an address other
    // machines reach is tested inside a network namespace of the test's own
    // (`unshare -n`: root, or CAP_SYS_ADMIN), so that nothing leaves loopback.
    println!("cargo::rustc-check-cfg=cfg(namespace_tests_unavailable)");
    let unshare = std::process::Command::new("unshare")
        .args(["-n", "true"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !unshare {
        println!("cargo::rustc-cfg=namespace_tests_unavailable");
    }
}

/// `standardwebhooks_missing` unless PyPI's `standardwebhooks` imports in
/// the virtual environment `.ci/standardwebhooks` makes: the delivery test
/// that verifies our signatures with it then reports itself ignored.
fn standardwebhooks() {
    println!("cargo::rustc-check-cfg=cfg(standardwebhooks_missing)");
    println!("cargo::rerun-if-env-changed=STANDARDWEBHOOKS_VENV");
    let venv = std::env::var("STANDARDWEBHOOKS_VENV")
        .unwrap_or_else(|_| "/var/tmp/standardwebhooks-1.1.0".into());
    println!("cargo::rerun-if-changed={venv}");
    println!("cargo::rustc-env=STANDARDWEBHOOKS_PYTHON={venv}/bin/python");
    let present = std::process::Command::new(format!("{venv}/bin/python"))
        .args(["-c", "import standardwebhooks"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !present {
        println!("cargo::rustc-cfg=standardwebhooks_missing");
    }
}
