//! Counting proved before it is used. "How many resources did this request
//! make" is read as how often its marker appears in the read URL's answer;
//! that holds only if the list shows each resource, and each resource's
//! marker once. So before any count, the first resource must be found in
//! the list by its id, showing its marker exactly once; if not, every
//! count-based half is SKIP with the reason and the flag that fixes it.

use serde_json::Value;

use super::context::{Ctx, First};

/// `Ok(path)`: counting through the read URL works on this API; `Err`:
/// why it does not, naming the flag to change.
pub(super) fn prove_counting(ctx: &Ctx, first: &First) -> Result<String, String> {
    let Some(path) = ctx.cfg.read_path.clone() else {
        return Err(
            "no --read-url given (a list of what this caller created, newest first)".to_owned(),
        );
    };
    let page = ctx.read_list(&path)?;
    let text = page.text();
    let on_page = text.matches(&first.marker).count();
    let shown = match page.json() {
        Some(json) => {
            let mut found = Vec::new();
            find_by_id(&json, &ctx.cfg.id_field, &first.id, &mut found);
            found
                .first()
                .map(|object| object.to_string().matches(&first.marker).count())
        }
        // Not JSON: the id must at least be on the page.
        None => text.contains(first.id.as_str()).then_some(on_page),
    };
    match shown {
        None => Err(format!(
            "GET {path} does not list the first resource ({:?}): give --read-url a list that \
             shows it (newest first), or --id-field the member that holds its id",
            first.id
        )),
        Some(0) => Err(format!(
            "GET {path} lists the first resource without its marker: put {{marker}} in a field \
             of --body that the list shows"
        )),
        Some(_) if on_page != 1 => Err(format!(
            "GET {path} shows the first request's marker {on_page} times, not once: each \
             resource would be counted {on_page} times; give --read-url a view that shows \
             each resource's marker once"
        )),
        Some(_) => Ok(path),
    }
}

/// Every object in `json` whose `field` names `id` (or the last segment of
/// a `Location`-style id).
fn find_by_id<'a>(json: &'a Value, field: &str, id: &str, found: &mut Vec<&'a Value>) {
    match json {
        Value::Object(map) => {
            let matches = match map.get(field) {
                Some(Value::String(s)) => s == id || id.ends_with(&format!("/{s}")),
                Some(Value::Number(n)) => n.to_string() == id,
                _ => false,
            };
            if matches {
                found.push(json);
            }
            for value in map.values() {
                find_by_id(value, field, id, found);
            }
        }
        Value::Array(items) => {
            for value in items {
                find_by_id(value, field, id, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_resource_is_found_by_its_id_anywhere_in_the_list() {
        let list = json!({"data": [{"id": "a", "d": "m1"}, {"id": 7}, {"x": {"id": "b"}}]});
        let mut found = Vec::new();
        find_by_id(&list, "id", "a", &mut found);
        assert_eq!(found.len(), 1);
        found.clear();
        find_by_id(&list, "id", "/orders/b", &mut found);
        assert_eq!(found, [&json!({"id": "b"})]);
        found.clear();
        find_by_id(&list, "id", "7", &mut found);
        assert_eq!(found.len(), 1);
    }
}
