//! The request fingerprint: what "the same request" means for a key.
//!
//! SHA-256 over the method, the path and the body as canonical JSON (object
//! keys sorted, no insignificant white space). Re-ordered or re-spaced bodies
//! are the same request; the same key sent to another endpoint is not.

use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    pub fn of(method: &str, path: &str, body: &Value) -> Fingerprint {
        let mut hasher = Sha256::new();
        hasher.update(method.as_bytes());
        hasher.update(b"\n");
        hasher.update(path.as_bytes());
        hasher.update(b"\n");
        hasher.update(canonical_json(body).as_bytes());
        Fingerprint(format!("sha256:{:x}", hasher.finalize()))
    }

    pub fn from_stored(text: String) -> Fingerprint {
        Fingerprint(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Compact JSON with object keys in byte order, whatever order the map keeps
/// them in. Also used to render stored bodies, so a replay is byte-identical.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        // A whole number is written as an integer whatever its spelling
        // (`1000.0`, `1e3`), as RFC 8785 writes numbers: the same charge
        // is the same request.
        Value::Number(n) => match n.as_f64() {
            Some(f)
                if !n.is_i64()
                    && !n.is_u64()
                    && f.fract() == 0.0
                    && f.abs() < 9.007_199_254_740_992e15 =>
            {
                out.push_str(&(f as i64).to_string())
            }
            _ => out.push_str(&n.to_string()),
        },
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn a_whole_number_is_the_same_whatever_its_spelling() {
        let of = |b: &str| Fingerprint::of("POST", "/charges", &body(b));
        assert_eq!(of(r#"{"amount":1000}"#), of(r#"{"amount":1000.0}"#));
        assert_eq!(of(r#"{"amount":1000}"#), of(r#"{"amount":1e3}"#));
        assert_ne!(of(r#"{"amount":1000}"#), of(r#"{"amount":1000.5}"#));
    }

    #[test]
    fn key_order_and_white_space_do_not_matter() {
        let a = Fingerprint::of(
            "POST",
            "/charges",
            &body(r#"{"amount":1000,"currency":"jpy"}"#),
        );
        let b = Fingerprint::of(
            "POST",
            "/charges",
            &body("{ \"currency\" : \"jpy\",\n \"amount\": 1000 }"),
        );
        assert_eq!(a, b);
    }

    #[test]
    fn values_method_and_path_do_matter() {
        let base = Fingerprint::of("POST", "/charges", &body(r#"{"amount":1000}"#));
        assert_ne!(
            base,
            Fingerprint::of("POST", "/charges", &body(r#"{"amount":2000}"#))
        );
        assert_ne!(
            base,
            Fingerprint::of("PATCH", "/charges", &body(r#"{"amount":1000}"#))
        );
        assert_ne!(
            base,
            Fingerprint::of("POST", "/refunds", &body(r#"{"amount":1000}"#))
        );
    }

    #[test]
    fn canonical_json_sorts_nested_keys() {
        assert_eq!(
            canonical_json(&body(r#"{"b":[{"d":1,"c":"é"}],"a":null}"#)),
            r#"{"a":null,"b":[{"c":"é","d":1}]}"#
        );
    }

    #[test]
    fn it_is_a_prefixed_sha256() {
        let f = Fingerprint::of("POST", "/charges", &body("{}"));
        assert!(f.as_str().starts_with("sha256:"));
        assert_eq!(f.as_str().len(), "sha256:".len() + 64);
    }
}
