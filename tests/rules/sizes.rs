//! The house rules of `src/` and the protocol crate's `src/`: no file over
//! 600 lines, no function over 80 (rustfmt's layout: a function ends at the
//! `}` at its own indentation).
//! Read from the source files, so a file or function that grows past them
//! fails here instead of in a review.

use std::path::Path;

const MAX_FILE_LINES: usize = 600;
const MAX_FUNCTION_LINES: usize = 80;

/// (lines, name) of every function with a body in `source`.
fn functions(source: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let Some(name) = [
            "pub ",
            "pub(crate) ",
            "pub(super) ",
            "async ",
            "const ",
            "unsafe ",
        ]
        .iter()
        .fold(code, |c, p| c.strip_prefix(p).unwrap_or(c))
        .strip_prefix("fn ") else {
            continue;
        };
        let name: String = name
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The signature ends at `{` (a body) or `;` (a declaration).
        let Some(open) = (i..lines.len()).find(|&k| {
            let l = lines[k].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[open].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = (open + 1..lines.len()).find(|&k| lines[k].trim_end() == close) {
            found.push((end - i + 1, name));
        }
    }
    found
}

fn visit(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            visit(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let source = std::fs::read_to_string(&path).unwrap();
            let shown = path.display();
            let n = source.lines().count();
            if n > MAX_FILE_LINES {
                out.push(format!("{shown}: {n} lines"));
            }
            for (n, name) in functions(&source) {
                if n > MAX_FUNCTION_LINES {
                    out.push(format!("{shown}: fn {name}, {n} lines"));
                }
            }
        }
    }
}

#[test]
fn the_reader_sees_bodies_not_declarations() {
    let source = "fn a() {\n    x();\n}\n\ntrait T {\n    fn b(\n        &self,\n    ) -> u8;\n    fn c(&self) {\n        y();\n        z();\n    }\n}\n";
    assert_eq!(
        functions(source),
        [(3, "a".to_owned()), (4, "c".to_owned())]
    );
}

#[test]
fn no_file_over_600_lines_and_no_function_over_80() {
    let mut over = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["src", "crates/idempotency/src"] {
        visit(&root.join(dir), &mut over);
    }
    assert!(
        over.is_empty(),
        "over the house limits:\n{}",
        over.join("\n")
    );
}
