//! Written once: the statements the two backends agree on live in one place
//! (`src/store/tables.rs`, `src/demo/queries/tables.rs`, the protocol
//! crate's `key_table.rs`), each backend's file keeping only what differs.
//! `tools/shared_backend_lines.py` counts the meaningful lines a backend
//! pair still has in common; a statement copied into both fails here.

use std::process::Command;

const MAX_SHARED_LINES: usize = 100;

#[test]
fn the_backends_share_at_most_100_lines() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new("python3")
        .arg(format!("{root}/tools/shared_backend_lines.py"))
        .arg(root)
        .output()
        .expect("python3 (it runs tools/shared_backend_lines.py) is on PATH");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let total: usize = report
        .lines()
        .find_map(|line| line.trim().strip_suffix("total")?.trim().parse().ok())
        .expect("the report ends with its total");
    assert!(
        total <= MAX_SHARED_LINES,
        "{total} lines written twice, at most {MAX_SHARED_LINES}:\n{report}"
    );
}
