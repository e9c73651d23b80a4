//! The design document names real code (issue #40): every module path it
//! names in backticks (`idempotency::Policy`, `network_client::derived_key`,
//! `crate::metrics::METRICS`) is a module of `src/` (or, for
//! `idempotency::…`, of the protocol crate's `crates/idempotency/src/`), or
//! an item defined in (or re-exported by) the module before it. A renamed
//! or moved item fails here, not a reader following the document.

use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
const PROTOCOL_SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crates/idempotency/src");

/// The file of module `segments` (`["store", "postgres"]`) of the crate
/// whose sources are in `src`, if it is one.
fn module_file(src: &str, segments: &[&str]) -> Option<PathBuf> {
    let dir = segments.iter().fold(PathBuf::from(src), |p, s| p.join(s));
    if segments.is_empty() {
        return Some(Path::new(src).join("lib.rs"));
    }
    [dir.with_extension("rs"), dir.join("mod.rs")]
        .into_iter()
        .find(|p| p.exists())
}

/// Whether `source` defines or re-exports `name`.
fn defines(source: &str, name: &str) -> bool {
    let word = |line: &str| {
        line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == name)
    };
    // Inside a re-export's braces, across lines as rustfmt breaks them.
    let mut in_export = false;
    source.lines().map(str::trim_start).any(|line| {
        // A re-export names an item here; a private `use` does not.
        let opens = line.starts_with("pub use ") || line.starts_with("pub(crate) use ");
        let exported = opens || in_export;
        if opens && line.ends_with('{') {
            in_export = true;
        } else if in_export && line.starts_with('}') {
            in_export = false;
        }
        let line = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        let defining = [
            "fn ",
            "struct ",
            "enum ",
            "trait ",
            "const ",
            "static ",
            "type ",
            "mod ",
            "macro_rules! ",
        ];
        (exported || defining.iter().any(|d| line.starts_with(d))) && word(line)
    })
}

/// Why `path` names nothing, if it does not.
fn check(path: &str) -> Result<(), String> {
    let mut segments: Vec<&str> = path.trim_start_matches("crate::").split("::").collect();
    let src = match segments[0] {
        "idempotency" => {
            segments.remove(0);
            PROTOCOL_SRC
        }
        _ => SRC,
    };
    let mut module: Vec<&str> = Vec::new();
    for (i, segment) in segments.iter().enumerate() {
        let mut next = module.clone();
        next.push(segment);
        if module_file(src, &next).is_some() {
            module = next;
            continue;
        }
        let file =
            module_file(src, &module).ok_or_else(|| format!("no module {}", module.join("::")))?;
        let source = std::fs::read_to_string(&file).unwrap();
        if !defines(&source, segment) {
            return Err(format!("{} has no {segment}", file.display()));
        }
        // An item's own items (a method, a variant) are past what this reads.
        if i + 1 < segments.len() {
            return Ok(());
        }
    }
    Ok(())
}

#[test]
fn every_module_path_the_design_document_names_exists() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/design.md")).unwrap();
    // Other crates' paths, which this does not read.
    let external = [
        "diesel",
        "std",
        "actix_web",
        "tokio",
        "serde_json",
        "r2d2",
        "chrono",
        "uuid",
    ];
    let mut checked = 0;
    let mut wrong = Vec::new();
    for quoted in doc.split('`').skip(1).step_by(2) {
        let path = quoted.trim_end_matches("()");
        let first = path
            .trim_start_matches("crate::")
            .split("::")
            .next()
            .unwrap_or("");
        let is_path = path.contains("::")
            && path
                .chars()
                .all(|c| c.is_alphanumeric() || c == '_' || c == ':')
            && first.starts_with(|c: char| c.is_ascii_lowercase())
            && !external.contains(&first);
        if !is_path {
            continue;
        }
        checked += 1;
        if let Err(why) = check(path) {
            wrong.push(format!("`{path}`: {why}"));
        }
    }
    assert!(
        checked >= 10,
        "the document names {checked} paths: is the reader right?"
    );
    assert!(
        wrong.is_empty(),
        "docs/design.md names what does not exist:\n{}",
        wrong.join("\n")
    );
}
