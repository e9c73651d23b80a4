//! The README's first example is lib.rs's doc example, which rustdoc
//! compiles: the crate's first screen on crates.io and on docs.rs cannot
//! drift apart. (lib.rs does not include the README: its doc is the
//! crate's, the README the repository's, and only their example is shared.)

use std::path::Path;

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The first fenced block of `text` (lines already without their `//! `
/// prefix) that rustdoc takes for Rust: its info string empty, `rust…`, or
/// one of rustdoc's own (`no_run`, `ignore`, `should_panic`), without
/// rustdoc's hidden lines (`# …`).
fn first_rust_block(text: &str) -> Option<String> {
    let (mut block, mut open) = (Vec::new(), None);
    for line in text.lines() {
        let fence = line.trim().strip_prefix("```");
        match (open, fence) {
            (None, Some(info)) => open = Some(is_rust(info)),
            (Some(true), Some(_)) => return Some(block.join("\n")),
            (Some(false), Some(_)) => open = None,
            (Some(true), None) if line != "#" && !line.starts_with("# ") => block.push(line),
            _ => {}
        }
    }
    None
}

fn is_rust(info: &str) -> bool {
    let first = info.split(',').next().unwrap_or_default().trim();
    matches!(first, "" | "rust" | "no_run" | "ignore" | "should_panic")
}

#[test]
fn the_readme_opens_with_lib_rs_s_example() {
    let lib = read("src/lib.rs");
    let docs: String = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| format!("{}\n", l.strip_prefix(' ').unwrap_or(l)))
        .collect();
    let readme = read("README.md");
    let example = first_rust_block(&docs).expect("lib.rs's doc has an example");
    let first = first_rust_block(&readme).expect("the README has a Rust block");
    assert!(
        first == example,
        "the README's first Rust block is not lib.rs's doc example (rustdoc's hidden lines \
         aside):\n--- README\n{first}\n--- lib.rs\n{example}"
    );
}

/// Every other Rust block of the README is marked as not compiled here
/// (`rust,ignore`), or is not Rust (`text`, `sh`, `toml`, `sql`): a block
/// left bare would read as compiling code that nothing compiles.
#[test]
fn the_readme_marks_what_is_not_compiled() {
    let readme = read("README.md");
    let fences = readme.lines().filter(|l| l.trim_start().starts_with("```"));
    // Opening fences only: every other one closes a block.
    let infos: Vec<&str> = fences
        .step_by(2)
        .map(|l| l.trim_start().trim_start_matches('`'))
        .collect();
    let unmarked: Vec<_> = infos
        .iter()
        .skip(1)
        .filter(|info| is_rust(info) && !info.contains("ignore"))
        .collect();
    assert_eq!(infos.first().copied(), Some("rust,no_run"), "{infos:?}");
    assert!(
        unmarked.is_empty(),
        "Rust blocks not marked ignore: {unmarked:?}"
    );
}
