//! The layers of `src/lib.rs`'s `LAYERS`: every `crate::` path in `src/`
//! points downward. Read from the source files, so a new module that
//! imports upward or sideways fails here.

use std::collections::BTreeSet;
use std::path::Path;

use charges::LAYERS;

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module {module} is in no layer of LAYERS"))
}

/// The top-level modules a piece of source names through `crate::`,
/// including those inside `use crate::{a, b::c}`.
fn uses(source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => return true,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    false
                })
                .map_or(group.len(), |(i, _)| i);
            let mut depth = 0;
            let mut item = String::new();
            for c in group[..end].chars().chain([',']) {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name: String = item
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        if !name.is_empty() && name != "self" {
                            found.insert(name);
                        }
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.insert(name);
        }
    }
    found
}

fn visit(dir: &Path, top: Option<&str>, edges: &mut Vec<(String, String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let module = top.map_or(name.clone(), str::to_owned);
        if path.is_dir() {
            visit(&path, Some(&module), edges);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !(top.is_none() && (name == "lib" || name == "main"))
        {
            let source = std::fs::read_to_string(&path).unwrap();
            for used in uses(&source) {
                if used != module {
                    edges.push((module.clone(), used, path.display().to_string()));
                }
            }
        }
    }
}

#[test]
fn the_parser_sees_single_paths_and_groups() {
    let found = uses(
        "use crate::a::X;\nuse crate::{b, c::{D, E}, self};\n// crate::z\nlet x = crate::f::g();",
    );
    assert_eq!(found.into_iter().collect::<Vec<_>>(), ["a", "b", "c", "f"]);
}

#[test]
fn modules_import_downward_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges = Vec::new();
    visit(&src, None, &mut edges);
    assert!(
        edges.len() > 30,
        "the parser found too few imports: {edges:?}"
    );
    let upward: Vec<String> = edges
        .iter()
        .filter(|(from, to, _)| layer(to) >= layer(from))
        .map(|(from, to, file)| format!("{file}: {from} uses {to}"))
        .collect();
    assert!(
        upward.is_empty(),
        "imports that are not downward in lib.rs's LAYERS:\n{}",
        upward.join("\n")
    );
}
