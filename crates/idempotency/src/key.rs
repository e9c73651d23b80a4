//! The `Idempotency-Key` request header.
//!
//! The draft defines it as a Structured Field String (RFC 8941 §3.3.3), e.g.
//! `Idempotency-Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"`. Many clients send
//! the value unquoted, so a bare value is accepted as well, taken literally.
//! Both forms carry the same keys: 1 to 255 printable ASCII characters
//! (space to `~`). The grammar, exactly ([`IdempotencyKey::HEADER_PATTERN`]): either `"` ...
//! `"` with `\"` and `\\` the only escapes and no parameters, or a bare
//! value that neither starts with `"` nor starts or ends with a space.

#[cfg(feature = "actix")]
use actix_web::http::header::{HeaderMap, HeaderName};

const MAX_LEN: usize = 255;
#[cfg(feature = "actix")]
const HEADER: HeaderName = HeaderName::from_static(IdempotencyKey::HEADER);

/// A valid key: 1 to 255 printable ASCII characters, unquoted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Why a header is not a valid key: the draft's `400`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The header was sent more than once.
    #[error("send the Idempotency-Key header only once")]
    Repeated,
    /// Empty, or longer than [`IdempotencyKey::MAX_LEN`].
    #[error("the Idempotency-Key must be 1 to {MAX_LEN} printable ASCII characters")]
    Length,
    /// A byte that is not printable ASCII.
    #[error("the Idempotency-Key may contain only printable ASCII characters")]
    Charset,
    /// A quoted string with a bad escape or an unterminated quote.
    #[error(
        "the Idempotency-Key is a quoted string with an unterminated or invalid escape; send it as \"value\""
    )]
    Syntax,
    /// A quoted string with parameters after it.
    #[error(
        "the Idempotency-Key is a string without parameters: send \"value\" with nothing after the closing quote"
    )]
    Parameters,
}

impl IdempotencyKey {
    /// The header's name, lowercase.
    pub const HEADER: &'static str = "idempotency-key";

    /// The longest key, in bytes.
    pub const MAX_LEN: usize = MAX_LEN;

    /// The header's value as a regular expression (ECMA-262, as JSON Schema
    /// uses), for an OpenAPI document; a unit test holds it to
    /// [`IdempotencyKey::parse`]. Surrounding spaces and tabs are HTTP's,
    /// not the value's (RFC 9110 §5.5), and are ignored.
    pub const HEADER_PATTERN: &'static str =
        r#"^(?:"(?:[ !#-\[\]-~]|\\["\\]){1,255}"|[!#-~](?:[ -~]{0,253}[!-~])?)$"#;

    /// A key's value itself ([`IdempotencyKey::from_value`]), as where a key
    /// appears outside the header (e.g. in a URL path).
    pub const VALUE_PATTERN: &'static str = r"^[ -~]{1,255}$";

    /// The header's value as received (one field value; a repeated header
    /// is the caller's to refuse, [`KeyError::Repeated`]).
    pub fn from_header_value(value: &str) -> Result<IdempotencyKey, KeyError> {
        IdempotencyKey::parse(value.as_bytes())
    }

    /// actix-web's headers: `Ok(None)` when the header is absent.
    #[cfg(feature = "actix")]
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, KeyError> {
        let mut values = headers.get_all(HEADER);
        let Some(value) = values.next() else {
            return Ok(None);
        };
        if values.next().is_some() {
            return Err(KeyError::Repeated);
        }
        IdempotencyKey::parse(value.as_bytes()).map(Some)
    }

    /// The header's value as bytes, quoted (a Structured Field String) or
    /// bare.
    pub fn parse(raw: &[u8]) -> Result<IdempotencyKey, KeyError> {
        // Surrounding white space (HTTP's OWS) is not part of the value.
        let raw = raw.trim_ascii_matches_sp();
        let key = match raw {
            [b'"', rest @ ..] => parse_sf_string(rest)?,
            _ => parse_bare(raw)?,
        };
        if key.is_empty() || key.len() > MAX_LEN {
            return Err(KeyError::Length);
        }
        Ok(IdempotencyKey(key))
    }

    /// A key's value as stored (already unquoted, e.g. from a URL path):
    /// 1 to 255 printable ASCII characters, as `parse` would produce.
    pub fn from_value(value: &str) -> Result<IdempotencyKey, KeyError> {
        if value.is_empty() || value.len() > MAX_LEN {
            return Err(KeyError::Length);
        }
        if !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(KeyError::Charset);
        }
        Ok(IdempotencyKey(value.to_owned()))
    }

    /// The key itself, unquoted.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The rest of `"..."` after the opening quote: printable ASCII, with `\"`
/// and `\\` the only escapes, and nothing after the closing quote.
fn parse_sf_string(rest: &[u8]) -> Result<String, KeyError> {
    let mut out = String::with_capacity(rest.len());
    let mut bytes = rest.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&e @ (b'"' | b'\\')) => out.push(e as char),
                _ => return Err(KeyError::Syntax),
            },
            b'"' => {
                return match bytes.as_slice() {
                    [] => Ok(out),
                    [b';', ..] => Err(KeyError::Parameters),
                    _ => Err(KeyError::Syntax),
                };
            }
            0x20..=0x7e => out.push(b as char),
            _ => return Err(KeyError::Charset),
        }
    }
    Err(KeyError::Syntax)
}

/// An unquoted value, taken literally: the same printable ASCII a quoted
/// one may carry (its first byte is not `"`, or it would be quoted).
fn parse_bare(raw: &[u8]) -> Result<String, KeyError> {
    if raw.is_empty() {
        return Err(KeyError::Length);
    }
    if raw.iter().all(|b| (0x20..=0x7e).contains(b)) {
        Ok(String::from_utf8_lossy(raw).into_owned())
    } else {
        Err(KeyError::Charset)
    }
}

trait TrimSp {
    fn trim_ascii_matches_sp(&self) -> &[u8];
}

impl TrimSp for [u8] {
    fn trim_ascii_matches_sp(&self) -> &[u8] {
        let ows = |b: &u8| *b == b' ' || *b == b'\t';
        let start = self.iter().position(|b| !ows(b)).unwrap_or(self.len());
        let end = self.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
        &self[start..end]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<String, KeyError> {
        IdempotencyKey::parse(s.as_bytes()).map(|k| k.0)
    }

    #[test]
    fn a_structured_field_string_is_unquoted() {
        assert_eq!(
            parse(r#""8e03978e-40d5-43e8-bc93-6894a57f9324""#).unwrap(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
    }

    #[test]
    fn a_bare_token_is_accepted() {
        assert_eq!(parse("k-8f3a").unwrap(), "k-8f3a");
    }

    #[test]
    fn quoted_and_bare_forms_of_one_key_are_the_same_key() {
        assert_eq!(parse(r#""abc""#).unwrap(), parse("abc").unwrap());
    }

    #[test]
    fn escapes_and_spaces_inside_quotes_are_allowed() {
        assert_eq!(parse(r#""a \"b\" \\c""#).unwrap(), r#"a "b" \c"#);
        assert_eq!(parse(r#"  "padded"  "#).unwrap(), "padded");
    }

    #[test]
    fn malformed_keys_are_rejected() {
        assert_eq!(parse(r#""""#), Err(KeyError::Length));
        assert_eq!(parse(""), Err(KeyError::Length));
        assert_eq!(parse(r#""open"#), Err(KeyError::Syntax));
        assert_eq!(parse(r#""bad\escape""#), Err(KeyError::Syntax));
        assert_eq!(parse(r#""a"b"#), Err(KeyError::Syntax));
        assert_eq!(parse(r#""k";x=1"#), Err(KeyError::Parameters));
        assert_eq!(parse("caf\u{e9}"), Err(KeyError::Charset));
        assert_eq!(parse("tab\there"), Err(KeyError::Charset));
    }

    #[test]
    fn bare_and_quoted_keys_carry_the_same_characters() {
        assert_eq!(parse("two words").unwrap(), "two words");
        assert_eq!(parse(r#""two words""#).unwrap(), "two words");
        assert_eq!(parse(r#"a"b\c"#).unwrap(), r#"a"b\c"#);
        assert_eq!(parse(r#""a\"b\\c""#).unwrap(), r#"a"b\c"#);
        assert_eq!(parse("\t k \t").unwrap(), "k");
    }

    #[test]
    fn length_is_bounded() {
        assert!(parse(&"k".repeat(MAX_LEN)).is_ok());
        assert_eq!(parse(&"k".repeat(MAX_LEN + 1)), Err(KeyError::Length));
        assert_eq!(
            parse(&format!("\"{}\"", "k".repeat(MAX_LEN + 1))),
            Err(KeyError::Length)
        );
    }

    #[test]
    fn a_stored_value_is_checked_like_a_parsed_one() {
        assert_eq!(IdempotencyKey::from_value("k 1").unwrap().as_str(), "k 1");
        assert_eq!(IdempotencyKey::from_value(""), Err(KeyError::Length));
        assert_eq!(IdempotencyKey::from_value("a\0b"), Err(KeyError::Charset));
        assert_eq!(
            IdempotencyKey::from_value(&"k".repeat(MAX_LEN + 1)),
            Err(KeyError::Length)
        );
    }

    #[test]
    fn the_documented_value_pattern_is_from_value() {
        let pattern = regex::Regex::new(IdempotencyKey::VALUE_PATTERN).unwrap();
        let long = "k".repeat(MAX_LEN);
        let longer = "k".repeat(MAX_LEN + 1);
        for value in [
            "k", " ", "~", "a b", &long, "", &longer, "a\tb", "é", "a\u{7f}", "a\0b",
        ] {
            assert_eq!(
                pattern.is_match(value),
                IdempotencyKey::from_value(value).is_ok(),
                "{value:?}"
            );
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
        /// The document's pattern accepts exactly what the parser accepts.
        #[test]
        fn the_documented_pattern_is_the_parser(
            // Few characters, each a class of its own: space, tab, quote,
            // backslash, escapes, the ends of printable ASCII, non-ASCII.
            raw in r#"[ \t]{0,2}"?([ a~!#"\\\t\x7f]|\\"|\\\\|é){0,6}"?(;x=1)?[ \t]{0,2}"#,
            long in 250usize..260,
            quoted in proptest::bool::ANY,
        ) {
            static PATTERN: std::sync::LazyLock<regex::Regex> =
                std::sync::LazyLock::new(|| regex::Regex::new(IdempotencyKey::HEADER_PATTERN).unwrap());
            let pattern = &*PATTERN;
            let value = raw.trim_matches([' ', '\t']);
            proptest::prop_assert_eq!(pattern.is_match(value), parse(&raw).is_ok(), "{:?}", raw);
            let long = if quoted { format!("\"{}\"", "k".repeat(long)) } else { "k".repeat(long) };
            proptest::prop_assert_eq!(pattern.is_match(&long), parse(&long).is_ok(), "{} chars", long.len());
        }
    }

    #[cfg(feature = "actix")]
    #[test]
    fn the_header_may_appear_once() {
        let mut headers = HeaderMap::new();
        assert_eq!(IdempotencyKey::from_headers(&headers), Ok(None));
        headers.append(HEADER, "a".parse().unwrap());
        assert!(IdempotencyKey::from_headers(&headers).unwrap().is_some());
        headers.append(HEADER, "b".parse().unwrap());
        assert_eq!(
            IdempotencyKey::from_headers(&headers),
            Err(KeyError::Repeated)
        );
    }
}
