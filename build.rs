//! The integration tests always run on SQLite; they also run on PostgreSQL,
//! the reference backend, when `TEST_DATABASE_URL` is set while they are
//! built (`.ci/run` sets it). The flag is this cfg.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(postgres_tests)");
    println!("cargo::rerun-if-env-changed=TEST_DATABASE_URL");
    if std::env::var_os("TEST_DATABASE_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=postgres_tests");
    }
}
