//! The request fingerprint: what "the same request" means for a key.
//!
//! SHA-256 over the method, the path and the body as canonical JSON (object
//! keys sorted, no insignificant white space). Re-ordered or re-spaced bodies
//! are the same request; the same key sent to another endpoint is not.

use std::io::{self, Write};

use serde_json::Value;
use sha2::{Digest, Sha256};

/// What identifies a request for its key: `sha256:` and the hash in hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// The fingerprint of `method`, `path` and `body`.
    pub fn of(method: &str, path: &str, body: &Value) -> Fingerprint {
        let mut hasher = Hashing(Sha256::new());
        hasher.0.update(method.as_bytes());
        hasher.0.update(b"\n");
        hasher.0.update(path.as_bytes());
        hasher.0.update(b"\n");
        // Streamed into the hash: the canonical text is never kept.
        write_canonical(body, &mut hasher).expect("hashing cannot fail");
        Fingerprint(format!("sha256:{:x}", hasher.0.finalize()))
    }

    /// One read back from a key row.
    pub(crate) fn stored(fingerprint: String) -> Fingerprint {
        Fingerprint(fingerprint)
    }

    /// As stored in the key row.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A hash as an `io::Write`, so that JSON can be written straight into it.
struct Hashing(Sha256);

impl Write for Hashing {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Compact JSON with object keys in byte order, whatever order the map keeps
/// them in. Also used to render stored bodies, so a replay is byte-identical.
pub(crate) fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out).expect("writing to memory cannot fail");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Strings and numbers are written by serde_json itself (its escaping, its
/// shortest round-trip floats), straight into `out`, without a `String`
/// per value.
fn write_canonical(value: &Value, out: &mut impl Write) -> io::Result<()> {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.write_all(b"{")?;
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, k)?;
                out.write_all(b":")?;
                write_canonical(v, out)?;
            }
            out.write_all(b"}")
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(v, out)?;
            }
            out.write_all(b"]")
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
                write!(out, "{}", f as i64)
            }
            _ => write!(out, "{n}"),
        },
        scalar => Ok(serde_json::to_writer(&mut *out, scalar)?),
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
    fn strings_and_numbers_are_written_as_serde_json_writes_them() {
        let doc = r#"{"k\"\u0001é":"line\nbreak \\ \u001f","f":0.1,"n":-5,"big":18446744073709551615,"t":true}"#;
        assert_eq!(
            canonical_json(&body(doc)),
            r#"{"big":18446744073709551615,"f":0.1,"k\"\u0001é":"line\nbreak \\ \u001f","n":-5,"t":true}"#
        );
        // The fingerprint hashes exactly that text.
        let direct = Fingerprint::of("POST", "/charges", &body(doc));
        let text = format!("POST\n/charges\n{}", canonical_json(&body(doc)));
        assert_eq!(
            direct.as_str(),
            format!("sha256:{:x}", Sha256::digest(text.as_bytes()))
        );
    }

    #[test]
    fn it_is_a_prefixed_sha256() {
        let f = Fingerprint::of("POST", "/charges", &body("{}"));
        assert!(f.as_str().starts_with("sha256:"));
        assert_eq!(f.as_str().len(), "sha256:".len() + 64);
    }
}
