//! Request bodies as strict JSON: RFC 8259 leaves the meaning of an object
//! with a member name twice to the parser, and parsers disagree (serde_json
//! keeps the last, others the first). In a payment API a proxy that checks one
//! value while the app charges the other is a real hazard, so such a body is
//! refused, as I-JSON (RFC 7493 §2.3) requires.
//!
//! Numbers are read from their decimal text as far as wholeness goes: a
//! number is a whole one in the value exactly when its text is
//! (`0.99999999999999999` is nearest to the double 1.0, but is no amount of
//! 1; see `exact_f64`). serde_json's `arbitrary_precision` feature would
//! keep every number's text instead, but it changes `serde_json::Value` for
//! the whole build, every crate's included: a fraction's number becomes a
//! string inside (this parser then read `3.5` as an object), `1e3` and
//! `1000.0` stop being equal values, numbers beyond a double (`1e400`) are
//! accepted, and serde's untagged enums and flattened structs stop reading
//! fractions. Reading the number tokens here, the one place request bodies
//! are parsed, changes nothing else.

use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as one JSON value; an object with a repeated member name,
/// at any depth, is an error that names the member.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    let numbers = NumberTokens {
        tokens: number_tokens(bytes),
        next: Cell::new(0),
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = Strict(&numbers).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// The text of every number in a JSON document, in order, and how many the
/// parser has read: serde_json hands the visitor each number once, in the
/// order they appear, and never as a member name, so the n-th number it
/// reads is the n-th token here.
struct NumberTokens<'t> {
    tokens: Vec<&'t [u8]>,
    next: Cell<usize>,
}

impl NumberTokens<'_> {
    /// The next number's text (none if the document is not JSON, in which
    /// case the parser fails anyway).
    fn take(&self) -> Option<&[u8]> {
        let i = self.next.get();
        self.next.set(i + 1);
        self.tokens.get(i).copied()
    }
}

/// The number tokens of `bytes`: outside strings, a run of `-+.eE` and
/// digits that starts with `-` or a digit (no other JSON token does).
fn number_tokens(bytes: &[u8]) -> Vec<&[u8]> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                tokens.push(&bytes[start..i]);
            }
            _ => i += 1,
        }
    }
    tokens
}

/// What a number's decimal text says, exactly, about its integer part.
#[derive(Debug, PartialEq, Eq)]
struct Decimal {
    negative: bool,
    /// No digit after the decimal point (exponent applied) is other than 0.
    whole: bool,
    /// The integer part's magnitude, at most `u64::MAX`.
    integer_part: u64,
}

/// Reads a JSON number token (`-?int(.frac)?([eE][+-]?exp)?`) exactly, in
/// time linear in its length, whatever its exponent.
fn decimal(token: &[u8]) -> Decimal {
    let (negative, token) = match token.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    let (mantissa, exponent) = match token.iter().position(|b| matches!(b, b'e' | b'E')) {
        Some(e) => (&token[..e], &token[e + 1..]),
        None => (token, &b""[..]),
    };
    // The exponent, saturated far beyond any body's length.
    let exponent_negative = exponent.first() == Some(&b'-');
    let exponent = exponent
        .iter()
        .filter(|b| b.is_ascii_digit())
        .fold(0i64, |e, d| (e * 10 + i64::from(d - b'0')).min(1 << 40));
    let exponent = if exponent_negative {
        -exponent
    } else {
        exponent
    };
    let point = mantissa
        .iter()
        .position(|&b| b == b'.')
        .unwrap_or(mantissa.len());
    let digits: Vec<u8> = mantissa
        .iter()
        .filter(|b| b.is_ascii_digit())
        .map(|b| b - b'0')
        .collect();
    // Digits before this index are the integer part, the rest the fraction.
    let split = (point as i64).saturating_add(exponent);
    let split_index = split.clamp(0, digits.len() as i64) as usize;
    let whole = digits[split_index..].iter().all(|&d| d == 0);
    let mut integer_part: u64 = 0;
    for &d in &digits[..split_index] {
        integer_part = integer_part.saturating_mul(10).saturating_add(u64::from(d));
    }
    // Zeros the exponent adds after the last digit.
    for _ in 0..(split - digits.len() as i64).clamp(0, 20) {
        integer_part = integer_part.saturating_mul(10);
    }
    Decimal {
        negative,
        whole,
        integer_part,
    }
}

/// The double for a number whose text is `token` and which serde_json read
/// as `parsed`, whole exactly when the text is, wherever a double can be.
///
/// A fraction that rounds to a whole double (`0.99999999999999999` to 1.0,
/// `1e-400` to 0.0) becomes the neighbouring double on the fraction's side
/// (0.9999999999999999, 5e-324), which is as near to it as any and not
/// whole. From 2^52 up every double is whole: such a fraction stays the
/// whole double nearest to it (far beyond any amount either way). A whole
/// number serde_json read as a fraction (it may round by one unit in the
/// last place) is read again, correctly rounded, as Rust reads it.
fn exact_f64(parsed: f64, token: Option<&[u8]>) -> f64 {
    let Some(token) = token else { return parsed };
    let text = decimal(token);
    let whole = parsed.fract() == 0.0;
    if text.whole && !whole {
        return std::str::from_utf8(token)
            .ok()
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|f| f.fract() == 0.0)
            .unwrap_or(parsed);
    }
    if text.whole || !whole {
        return parsed;
    }
    let magnitude = parsed.abs();
    // The fraction lies above `magnitude` if its integer part reaches it
    // (compared as integers: both are below 2^64 where it matters).
    let near = if text.integer_part >= magnitude as u64 {
        magnitude.next_up()
    } else {
        magnitude.next_down()
    };
    match (near.fract() != 0.0, text.negative) {
        (false, _) => parsed,
        (true, true) => -near,
        (true, false) => near,
    }
}

#[derive(Clone, Copy)]
struct Strict<'n, 't>(&'n NumberTokens<'t>);

impl<'de> DeserializeSeed<'de> for Strict<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    // An integer's text has no '.' or exponent: nothing to read again.
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        self.0.take();
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        self.0.take();
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(exact_f64(v, self.0.take())))
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
        while let Some(item) = seq.next_element_seed(self)? {
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
            let value = map.next_value_seed(self)?;
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

    const FRACTIONS: [&str; 10] = [
        "0.99999999999999999",
        "1.00000000000000001",
        "1000.0000000000001",
        "1000.00000000000000001",
        "99999999.0000000001",
        "-0.99999999999999999",
        "1e-20",
        "1e-400",
        "-1e-400",
        "4503599627370495.9999",
    ];

    #[test]
    fn a_fraction_is_never_read_as_a_whole_number() {
        for text in FRACTIONS {
            let read = parse_strict(text.as_bytes()).unwrap().as_f64().unwrap();
            assert_ne!(read.fract(), 0.0, "{text} read as {read}");
            // Still one of the two doubles around it.
            let nearest: f64 = text.parse().unwrap();
            assert!(
                read == nearest || read.next_up() == nearest || read.next_down() == nearest,
                "{text} read as {read}"
            );
            assert_eq!(read.is_sign_negative(), text.starts_with('-'), "{text}");
        }
        // Where a fraction is read as it always was.
        assert_eq!(
            parse_strict(b"[10.5, 0.1]").unwrap(),
            serde_json::json!([10.5, 0.1])
        );
        // From 2^52 up no double is a fraction.
        let huge = parse_strict(b"999999999999999999999.5").unwrap();
        assert_eq!(huge.as_f64(), Some(1e21));
    }

    #[test]
    fn a_whole_number_is_whole_however_it_is_spelled() {
        for text in [
            "1000",
            "1000.0",
            "1000.000",
            "1e3",
            "1.0E3",
            "1E+3",
            "0.1e4",
            "10000e-1",
            "1000.00000000000000000000",
            "100000000000000000000000e-20",
        ] {
            let read = parse_strict(text.as_bytes()).unwrap();
            assert_eq!(read.as_f64(), Some(1000.0), "{text}");
        }
        let read = parse_strict(b"123456789012345678901234567890").unwrap();
        assert_eq!(read.as_f64().map(f64::fract), Some(0.0));
    }

    #[test]
    fn number_tokens_are_found_outside_strings_only() {
        let body = br#"{"a\"1": "2 -3 \\", "e": [4, -5.5e+1, true, false, null, 0E-2]}"#;
        assert_eq!(number_tokens(body), [&b"4"[..], b"-5.5e+1", b"0E-2"]);
        assert_eq!(
            parse_strict(body).unwrap(),
            serde_json::from_slice::<Value>(body).unwrap()
        );
    }

    #[test]
    fn a_number_is_read_exactly_whatever_its_length_or_exponent() {
        let d = |t: &str| decimal(t.as_bytes());
        assert_eq!(
            d("-12.50e1"),
            Decimal {
                negative: true,
                whole: true,
                integer_part: 125
            }
        );
        assert_eq!(
            d("12.55e1"),
            Decimal {
                negative: false,
                whole: false,
                integer_part: 125
            }
        );
        assert_eq!(
            d("0.000"),
            Decimal {
                negative: false,
                whole: true,
                integer_part: 0
            }
        );
        assert!(!d("1e-99999999999999999999999").whole);
        assert_eq!(d("1e99999999999999999999999").integer_part, u64::MAX);
        let long = format!("0.{}1", "0".repeat(16_000));
        assert_eq!(
            parse_strict(long.as_bytes())
                .unwrap()
                .as_f64()
                .map(|f| f > 0.0),
            Some(true)
        );
    }
}
