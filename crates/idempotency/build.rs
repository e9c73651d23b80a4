//! The crate's tests run on SQLite always, and on PostgreSQL when
//! `TEST_DATABASE_URL` is set while they are built; otherwise the
//! PostgreSQL half is reported ignored, with the reason, never passed.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(postgres_tests)");
    println!("cargo::rerun-if-env-changed=TEST_DATABASE_URL");
    if std::env::var_os("TEST_DATABASE_URL").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=postgres_tests");
    }
}
