//! The crate's public surface, held: what `lib.rs` re-exports and declares
//! `pub`, and the top-level `pub` items of its `pub mod`s (`postgres`,
//! `sqlite`, `webhook` and webhook's own), each with its kind, read from
//! the text of `src/` (every feature's items: a `#[cfg]` is not read).
//! `tests/surface.txt` is the list as it was last reviewed; a change to the
//! surface fails here until the list is updated with it.
//!
//! Also held: the face is small (outside `webhook::`, at most 25 items and
//! 4 traits), `lib.rs` declares no public module but the three, and no
//! other file imports from the crate root: the designs import the modules
//! they use, never back up into the face.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use regex::Regex;

/// The item kinds a line of the surface names (and `fn`).
const KINDS: &str = "struct|enum|trait|const|type|static|mod";

/// The face's budget, outside `webhook::` (modules are not counted).
const MAX_ITEMS: usize = 25;
const MAX_TRAITS: usize = 4;

/// The public modules `lib.rs` may declare.
const PUB_MODS: [&str; 3] = ["postgres", "sqlite", "webhook"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The file of module `path` (`[]` is lib.rs; `["webhook", "headers"]`).
fn module_file(path: &[&str]) -> PathBuf {
    let Some((last, parents)) = path.split_last() else {
        return src().join("lib.rs");
    };
    let dir = parents.iter().fold(src(), |dir, p| dir.join(p));
    let file = dir.join(format!("{last}.rs"));
    match file.exists() {
        true => file,
        false => dir.join(last).join("mod.rs"),
    }
}

/// The text without its comments (doc comments included): `//` to the end
/// of a line, where not inside a string on that line.
fn code(text: &str) -> String {
    text.lines().map(uncommented).collect::<Vec<_>>().join("\n")
}

fn uncommented(line: &str) -> &str {
    let mut quoted = false;
    let bytes = line.as_bytes();
    for i in 0..bytes.len() {
        match bytes[i] {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => quoted = !quoted,
            b'/' if !quoted && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// The paths a `use` tree names: `a::{b, c::{D, E}}` is `a::b`, `a::c::D`,
/// `a::c::E`; `X as Y` is named `Y`, reached at `X`.
fn use_paths(tree: &str) -> Vec<(String, String)> {
    let tree: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((path, alias)) => (path.trim(), alias.trim()),
            None => (tree.trim(), tree.trim().rsplit("::").next().unwrap()),
        };
        return vec![(path.to_owned(), alias.to_owned())];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').expect("a closed use group")];
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    let parts = parts.into_iter().map(str::trim).filter(|p| !p.is_empty());
    parts
        .flat_map(|part| use_paths(&format!("{prefix}{part}")))
        .collect()
}

/// Every `pub use …;` of a module's text, as (path, name).
fn pub_uses(text: &str) -> Vec<(String, String)> {
    let re = Regex::new(r"(?ms)^pub use ([^;]+);").unwrap();
    re.captures_iter(text)
        .flat_map(|c| use_paths(&c[1]))
        .collect()
}

/// The top-level `pub` definitions of a module's text (column 0, so not
/// inside an impl or a nested module), as name → kind. `pub(crate)` is
/// not public.
fn definitions(text: &str) -> BTreeMap<String, String> {
    let functions = Regex::new(r"(?m)^pub (?:(?:const|async|unsafe) )*fn (\w+)").unwrap();
    let others = Regex::new(&format!(r"(?m)^pub ({KINDS}) (\w+)")).unwrap();
    let others = others.captures_iter(text).filter(|c| &c[2] != "fn");
    let others = others.map(|c| (c[2].to_owned(), c[1].to_owned()));
    let functions = functions.captures_iter(text);
    others
        .chain(functions.map(|c| (c[1].to_owned(), "fn".to_owned())))
        .collect()
}

/// The kind of `name` as module `module` defines it, following its own
/// re-exports (`pub use`), relative to it.
fn kind_of(module: &[&str], name: &str) -> String {
    let text = code(&read(&module_file(module)));
    if let Some(kind) = definitions(&text).remove(name) {
        return kind;
    }
    let reexport = pub_uses(&text).into_iter().find(|(_, alias)| alias == name);
    let Some((path, _)) = reexport else {
        panic!("{name}: no `pub <kind> {name}` in {module:?}");
    };
    resolve(module, &path)
}

/// The kind of the item at `path`, a `use` path written in `module`.
fn resolve(module: &[&str], path: &str) -> String {
    let mut segments: Vec<&str> = path.split("::").collect();
    let name = segments.pop().expect("a path");
    let mut at: Vec<&str> = match segments.first() {
        Some(&"crate") => {
            segments.remove(0);
            Vec::new()
        }
        _ => module.to_vec(),
    };
    at.extend(segments);
    kind_of(&at, name)
}

/// The surface below `module` (`prefix` its path as written, `webhook::`):
/// its definitions and re-exports, and the same of its `pub mod`s that are
/// files of their own (an inline `pub mod`, Diesel's `schema`, is listed
/// as a module).
fn surface_of(module: &[&str], prefix: &str, lines: &mut BTreeSet<String>) {
    let text = code(&read(&module_file(module)));
    for (name, kind) in definitions(&text) {
        lines.insert(format!("{kind} {prefix}{name}"));
        let file_module = Regex::new(&format!(r"(?m)^pub mod {name};")).unwrap();
        if kind == "mod" && file_module.is_match(&text) {
            let mut inner = module.to_vec();
            inner.push(&name);
            surface_of(&inner, &format!("{prefix}{name}::"), lines);
        }
    }
    for (path, name) in pub_uses(&text) {
        let kind = resolve(module, &path);
        lines.insert(format!("{kind} {prefix}{name}"));
    }
}

/// The crate's surface, one sorted line per name.
fn surface() -> BTreeSet<String> {
    let mut lines = BTreeSet::new();
    surface_of(&[], "", &mut lines);
    lines
}

/// The modules lib.rs declares, public or not.
fn crate_modules() -> BTreeSet<String> {
    let re = Regex::new(r"(?m)^(?:pub(?:\([a-z]+\))? )?mod (\w+)").unwrap();
    let lib = code(&read(&src().join("lib.rs")));
    re.captures_iter(&lib).map(|c| c[1].to_owned()).collect()
}

fn say(what: &str) {
    let _ = writeln!(std::io::stderr(), "surface: {what}");
}

#[test]
fn the_public_surface_is_the_reviewed_one() {
    let listed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/surface.txt");
    let now = surface();
    let text: String = now.iter().map(|l| format!("{l}\n")).collect();
    if std::env::var_os("SURFACE_UPDATE").is_some() {
        std::fs::write(&listed, &text).expect("write tests/surface.txt");
    }
    let reviewed: BTreeSet<String> = read(&listed).lines().map(str::to_owned).collect();
    let added: Vec<_> = now
        .difference(&reviewed)
        .map(|l| format!("+ {l}"))
        .collect();
    let removed: Vec<_> = reviewed
        .difference(&now)
        .map(|l| format!("- {l}"))
        .collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "the crate's public surface changed (+ added, - removed):\n{}\n\
         review the surface, then update tests/surface.txt \
         (SURFACE_UPDATE=1 cargo test -p idempotency --test surface writes it)",
        [added, removed].concat().join("\n")
    );
}

#[test]
fn the_face_is_small() {
    let now = surface();
    let items = |webhook: bool| {
        now.iter()
            .map(|l| l.split_once(' ').unwrap())
            .filter(move |(kind, path)| *kind != "mod" && path.starts_with("webhook::") == webhook)
            .collect::<Vec<_>>()
    };
    let face = items(false);
    let traits = face.iter().filter(|(kind, _)| *kind == "trait").count();
    say(&format!(
        "outside webhook: {} items, {traits} traits; webhook: {} items (its modules' and \
         their re-exports'); modules: {}",
        face.len(),
        items(true).len(),
        now.iter().filter(|l| l.starts_with("mod ")).count()
    ));
    assert!(
        face.len() <= MAX_ITEMS,
        "{} items outside webhook, at most {MAX_ITEMS}: {face:?}",
        face.len()
    );
    assert!(
        traits <= MAX_TRAITS,
        "{traits} traits outside webhook, at most {MAX_TRAITS}"
    );
}

#[test]
fn lib_rs_declares_no_other_public_module() {
    let re = Regex::new(r"(?m)^pub mod (\w+)").unwrap();
    let lib = code(&read(&src().join("lib.rs")));
    let declared: Vec<_> = re.captures_iter(&lib).map(|c| c[1].to_owned()).collect();
    let others: Vec<_> = declared
        .iter()
        .filter(|m| !PUB_MODS.contains(&m.as_str()))
        .collect();
    assert!(
        others.is_empty(),
        "lib.rs declares pub mod {others:?}: only {PUB_MODS:?} are public (re-export \
         the items instead)"
    );
    assert_eq!(declared.len(), PUB_MODS.len(), "{declared:?}");
}

/// Every `crate::` (or a macro's `$crate::`) path of `text`, as the names
/// it starts with at the crate root: `crate::{a, b::C}` is `a` and `b`.
fn root_names(text: &str) -> Vec<String> {
    let re = Regex::new(r"\$?\bcrate::").unwrap();
    let mut names = Vec::new();
    for m in re.find_iter(text) {
        let rest = &text[m.end()..];
        let tree = match rest.starts_with('{') {
            true => {
                let mut depth = 0;
                let end = rest
                    .char_indices()
                    .find(|&(_, c)| {
                        depth += i32::from(c == '{') - i32::from(c == '}');
                        depth == 0
                    })
                    .expect("a closed group")
                    .0;
                format!("x::{}", &rest[..=end])
            }
            false => {
                let end = rest.find(|c: char| !c.is_alphanumeric() && c != '_');
                format!("x::{}", &rest[..end.unwrap_or(rest.len())])
            }
        };
        for (path, _) in use_paths(&tree) {
            names.push(path.split("::").nth(1).unwrap_or_default().to_owned());
        }
    }
    names
}

#[test]
fn no_file_but_lib_rs_imports_from_the_crate_root() {
    let modules = crate_modules();
    // lib.rs's own unit tests (`#[cfg(test)] mod tests;`) test the face
    // from inside it: they are lib.rs's, not a design's.
    let lib_tests = Regex::new(r"#\[cfg\(test\)\]\s*mod (\w+);").unwrap();
    let lib = read(&src().join("lib.rs"));
    let exempt: Vec<PathBuf> = lib_tests
        .captures_iter(&lib)
        .map(|c| module_file(&[&c[1]]))
        .collect();
    let mut found = Vec::new();
    let mut files = vec![src()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.file_name() == Some("lib.rs".as_ref()) && path.parent() == Some(&src())
            || exempt.contains(&path)
            || path.extension() != Some("rs".as_ref())
        {
            continue;
        }
        for name in root_names(&code(&read(&path))) {
            if !modules.contains(&name) {
                let file = path.strip_prefix(src()).unwrap().display().to_string();
                found.push(format!("src/{file}: crate::{name}"));
            }
        }
    }
    found.sort();
    assert!(
        found.is_empty(),
        "imports from the crate root (import the module that defines it):\n{}",
        found.join("\n")
    );
}
