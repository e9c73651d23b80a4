//! The layers of `src/lib.rs`'s `LAYERS`: every `crate::` path in `src/`
//! points downward. Read from the source files, so a new module that
//! imports upward or sideways fails here.
//!
//! A layer names the folders and files at `src/`'s top (`store`,
//! `network_client`; `every_layer_name_is_a_folder_or_a_file_of_src` holds
//! it to that); a file, and a path it uses, belong to the name they start
//! with. Paths inside one named module (a folder's own files) are not
//! checked.

use std::collections::BTreeSet;
use std::path::Path;

use charges::LAYERS;

/// The `LAYERS` name a module path belongs to, and that name's layer.
fn owner(path: &str) -> Option<(&'static str, usize)> {
    let mut best: Option<(&'static str, usize)> = None;
    for (at, layer) in LAYERS.iter().enumerate() {
        for &name in *layer {
            let inside = path == name
                || path
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with("::"));
            if inside && best.is_none_or(|(b, _)| name.len() > b.len()) {
                best = Some((name, at));
            }
        }
    }
    best
}

/// Reads identifiers separated by `::` from the start of `text`, and a
/// trailing `{ … }` group, into the full paths they name.
fn paths(text: &str, prefix: &str, found: &mut BTreeSet<String>) {
    let mut path = prefix.to_owned();
    let mut rest = text.trim_start();
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        paths(&item, &path, found);
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            paths(&item, &path, found);
            return;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // Modules are lower case; an item (a type, a constant) ends the path.
        if name.is_empty() || name == "self" || name.starts_with(char::is_uppercase) {
            break;
        }
        if !path.is_empty() {
            path.push_str("::");
        }
        path.push_str(&name);
        rest = &rest[name.len()..];
        match rest.strip_prefix("::") {
            Some(next) => rest = next,
            None => break,
        }
    }
    if !path.is_empty() {
        found.insert(path);
    }
}

/// The module paths a piece of source names through `crate::`, including
/// those inside `use crate::{a, b::{c, D}}`.
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
        paths(rest, "", &mut found);
    }
    found
}

/// (module, the module it uses, the file) for every `crate::` path.
fn visit(dir: &Path, module: &str, edges: &mut Vec<(String, String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let join = |n: &str| {
            if module.is_empty() {
                n.to_owned()
            } else {
                format!("{module}::{n}")
            }
        };
        if path.is_dir() {
            visit(&path, &join(&name), edges);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !(module.is_empty() && (name == "lib" || name == "main"))
        {
            let this = if name == "mod" {
                module.to_owned()
            } else {
                join(&name)
            };
            let source = std::fs::read_to_string(&path).unwrap();
            for used in uses(&source) {
                edges.push((this.clone(), used, path.display().to_string()));
            }
        }
    }
}

#[test]
fn the_parser_sees_single_paths_and_groups() {
    let found = uses(
        "use crate::a::X;\nuse crate::{b, c::{d, E}, self};\n// crate::z\nlet x = crate::f::g();\nuse crate::h::{self, i::J};",
    );
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["a", "b", "c", "c::d", "f::g", "h", "h::i"]
    );
}

#[test]
fn modules_import_downward_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut edges = Vec::new();
    visit(&src, "", &mut edges);
    assert!(
        edges.len() > 30,
        "the parser found too few imports: {edges:?}"
    );
    let mut wrong = Vec::new();
    for (from, to, file) in &edges {
        let (Some((a, from_layer)), Some((b, to_layer))) = (owner(from), owner(to)) else {
            wrong.push(format!("{file}: {from} or {to} is in no layer of LAYERS"));
            continue;
        };
        if a != b && to_layer >= from_layer {
            wrong.push(format!("{file}: {from} uses {to}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that are not downward in lib.rs's LAYERS:\n{}",
        wrong.join("\n")
    );
}

/// The folders are the layers where it matters most (issue #49): the edge,
/// `http/`, above the domain, `payments/`, which is one layer (no part of
/// it above the edge); what `modules_import_downward_only` holds then
/// keeps `payments/` from importing anything of `crate::http`.
#[test]
fn the_edge_stands_above_the_domain() {
    let layer = |path| owner(path).map(|(_, at)| at).unwrap();
    assert!(layer("http") > layer("payments"));
    let domain_parts: Vec<&str> = LAYERS
        .iter()
        .flat_map(|l| l.iter().copied())
        .filter(|n| n.starts_with("payments::"))
        .collect();
    assert!(
        domain_parts.is_empty(),
        "payments/ split in LAYERS: {domain_parts:?}"
    );
}

/// Folders are the layers (issue #49): every name in `LAYERS` is a folder
/// or a file at `src/`'s top, none a part of one. A folder with a part
/// named apart (as `network::client` was, below the edge while the rest of
/// `network/` stood above it) imports the folder that imports it, a cycle
/// the module-level check above cannot see.
#[test]
fn every_layer_name_is_a_folder_or_a_file_of_src() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let wrong: Vec<&str> = LAYERS
        .iter()
        .flat_map(|l| l.iter().copied())
        .filter(|name| {
            name.contains("::")
                || !(src.join(name).join("mod.rs").is_file()
                    || src.join(format!("{name}.rs")).is_file())
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "LAYERS names that are not a folder or a file of src/: {wrong:?}"
    );
}
