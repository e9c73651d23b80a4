//! Request bodies as strict JSON: RFC 8259 leaves the meaning of an object
//! with a member name twice to the parser, and parsers disagree (serde_json
//! keeps the last, others the first). In a payment API a proxy that checks one
//! value while the app charges the other is a real hazard, so such a body is
//! refused, as I-JSON (RFC 7493 §2.3) requires.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as one JSON value; an object with a repeated member name,
/// at any depth, is an error that names the member.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Strict.deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

struct Strict;

impl<'de> DeserializeSeed<'de> for Strict {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Strict)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(name) = map.next_key::<String>()? {
            if object.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "the member {name:?} appears twice in one object"
                )));
            }
            let value = map.next_value_seed(Strict)?;
            object.insert(name, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_member_is_refused_at_any_depth_and_named() {
        let e = parse_strict(br#"{"amount":5,"currency":"xxx","currency":"usd"}"#).unwrap_err();
        assert!(e.to_string().contains("\"currency\" appears twice"), "{e}");
        let e = parse_strict(br#"{"a":[{"b":1,"b":2}]}"#).unwrap_err();
        assert!(e.to_string().contains("\"b\" appears twice"), "{e}");
    }

    #[test]
    fn everything_else_parses_as_serde_json_does() {
        for text in [
            r#"{"amount":1000,"currency":"jpy","description":null}"#,
            r#"[1, -2, 3.5, 1e3, true, false, null, "x\u00e9", {"a": {"a": 1}}]"#,
            "18446744073709551615",
        ] {
            let strict = parse_strict(text.as_bytes()).unwrap();
            let plain: Value = serde_json::from_str(text).unwrap();
            assert_eq!(strict, plain, "{text}");
        }
        assert!(parse_strict(b"{} x").is_err(), "trailing characters");
        assert!(parse_strict(b"").is_err());
    }
}
