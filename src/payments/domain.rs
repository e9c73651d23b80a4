//! Charges, refunds and descriptions as the business sees them: parsed once
//! from the request body into types that cannot hold an invalid value. No
//! HTTP, no SQL.

use serde_json::{Map, Value};

pub use crate::payments::methods::PaymentMethod;
use crate::payments::methods::{self, refuse_card};

/// One problem with one field of a request body (a 400's `errors`): what
/// the edge reports, whichever operation's body it was.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub detail: String,
}

pub const MIN_AMOUNT: i64 = 1;
pub const MAX_AMOUNT: i64 = 99_999_999;
pub const MAX_DESCRIPTION_CHARS: usize = 500;
/// What a description may contain, as a regular expression for the OpenAPI
/// document: anything but control characters (Unicode Cc), except tab and
/// line feed. A unit test holds it to [`Description::parse`].
pub const DESCRIPTION_PATTERN: &str = r"^[^\u0000-\u0008\u000B-\u001F\u007F-\u009F]*$";

/// ISO 4217 codes this API accepts, lowercase.
pub const CURRENCIES: &[&str] = &[
    "aud", "brl", "cad", "chf", "cny", "czk", "dkk", "eur", "gbp", "hkd", "huf", "idr", "ils",
    "inr", "jpy", "krw", "mxn", "myr", "nok", "nzd", "php", "pln", "sek", "sgd", "thb", "try",
    "twd", "usd", "zar",
];

/// An amount in the currency's minor unit (yen for JPY, cents for USD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Amount(i64);

impl Amount {
    pub fn parse(value: i64) -> Result<Amount, String> {
        if (MIN_AMOUNT..=MAX_AMOUNT).contains(&value) {
            Ok(Amount(value))
        } else {
            Err(format!(
                "must be between {MIN_AMOUNT} and {MAX_AMOUNT} (in the currency's minor unit)"
            ))
        }
    }

    pub fn get(self) -> i64 {
        self.0
    }

    /// From a JSON number: a whole number of minor units.
    fn parse_json(v: &Value) -> Result<Amount, String> {
        match whole_number(v) {
            Some(Some(n)) => Amount::parse(n),
            // Whole, but beyond any i64 (9223372036854775808, 1e20).
            Some(None) => Amount::parse(i64::MAX),
            None if v.is_number() => Err("must be a whole number of minor units".to_owned()),
            None => Err("must be an integer".to_owned()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Currency(&'static str);

impl Currency {
    pub fn parse(code: &str) -> Result<Currency, String> {
        CURRENCIES
            .iter()
            .find(|c| **c == code)
            .map(|c| Currency(c))
            .ok_or_else(|| {
                if code.len() == 3 && code.chars().all(|c| c.is_ascii_uppercase()) {
                    format!("must be lowercase: use \"{}\"", code.to_ascii_lowercase())
                } else {
                    format!(
                        "must be a supported ISO 4217 code such as \"jpy\" or \"usd\", not {code:?}"
                    )
                }
            })
    }

    pub fn code(self) -> &'static str {
        self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Description(String);

impl Description {
    pub fn parse(text: &str) -> Result<Description, String> {
        if text.chars().count() > MAX_DESCRIPTION_CHARS {
            Err(format!(
                "must be at most {MAX_DESCRIPTION_CHARS} characters"
            ))
        } else if text
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
        {
            Err("must not contain control characters".to_owned())
        } else {
            Ok(Description(text.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCharge {
    pub amount: Amount,
    pub currency: Currency,
    pub description: Option<Description>,
    /// A test payment method; `pm_card_visa` when the body names none.
    pub payment_method: PaymentMethod,
}

impl NewCharge {
    /// Parses `{"amount": 1000, "currency": "jpy", "description": "...",
    /// "payment_method": "pm_card_visa"}`, reporting every problem at once so
    /// a client can fix them in one go.
    pub fn parse(body: &Value) -> Result<NewCharge, Vec<FieldError>> {
        let Some(object) = body.as_object() else {
            return Err(vec![error("body", "must be a JSON object")]);
        };
        let known = ["amount", "currency", "description", "payment_method"];
        let mut errors = unknown_fields(object, &known);
        // Card details as raw-card APIs take them: refused as what they are,
        // not as an unknown field, and never quoted.
        for e in errors
            .iter_mut()
            .filter(|e| ["card", "number"].contains(&e.field.as_str()))
        {
            e.detail = refuse_card();
        }

        let amount = field(object, "amount", &mut errors, Amount::parse_json);
        let currency = field(object, "currency", &mut errors, |v| match v.as_str() {
            Some(s) => Currency::parse(s),
            None => Err("must be a string".to_owned()),
        });
        let description = match object.get("description") {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => match Description::parse(s) {
                Ok(d) => Some(Some(d)),
                Err(e) => {
                    errors.push(error("description", &e));
                    None
                }
            },
            Some(_) => {
                errors.push(error("description", "must be a string"));
                None
            }
        };

        let payment_method = match object.get("payment_method") {
            None | Some(Value::Null) => Some(methods::DEFAULT),
            Some(v) => PaymentMethod::parse_json(v)
                .map_err(|e| errors.push(error("payment_method", &e)))
                .ok(),
        };

        match (amount, currency, description, payment_method) {
            (Some(amount), Some(currency), Some(description), Some(payment_method))
                if errors.is_empty() =>
            {
                Ok(NewCharge {
                    amount,
                    currency,
                    description,
                    payment_method,
                })
            }
            _ => Err(errors),
        }
    }
}

/// A refund: `{"amount": 100}`, in the charge's currency's minor unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRefund {
    pub amount: Amount,
}

impl NewRefund {
    pub fn parse(body: &Value) -> Result<NewRefund, Vec<FieldError>> {
        let Some(object) = body.as_object() else {
            return Err(vec![error("body", "must be a JSON object")]);
        };
        let mut errors = unknown_fields(object, &["amount"]);
        let amount = field(object, "amount", &mut errors, Amount::parse_json);
        match amount {
            Some(amount) if errors.is_empty() => Ok(NewRefund { amount }),
            _ => Err(errors),
        }
    }
}

/// A charge's new description, whole: `{"description": "…"}`, or
/// `{"description": null}` to remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDescription(pub Option<Description>);

impl NewDescription {
    pub fn parse(body: &Value) -> Result<NewDescription, Vec<FieldError>> {
        let Some(object) = body.as_object() else {
            return Err(vec![error("body", "must be a JSON object")]);
        };
        let mut errors = unknown_fields(object, &["description"]);
        let description = match object.get("description") {
            None => Err("is required (null removes it)".to_owned()),
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Description::parse(s).map(Some),
            Some(_) => Err("must be a string or null".to_owned()),
        };
        match description {
            Ok(d) if errors.is_empty() => Ok(NewDescription(d)),
            Ok(_) => Err(errors),
            Err(e) => {
                errors.push(error("description", &e));
                Err(errors)
            }
        }
    }
}

/// An error for each member of `object` that is not one of `known`.
pub fn unknown_fields(object: &Map<String, Value>, known: &[&str]) -> Vec<FieldError> {
    object
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| {
            error(
                k,
                &format!("is not a known field (known: {})", known.join(", ")),
            )
        })
        .collect()
}

/// A JSON number with no fractional part, as JSON Schema's `integer` (2020-12)
/// counts it: `612908` and `612908.0` alike. `Some(None)` when it is whole
/// but outside i64. Exact for a body read by `json::parse_strict`, whose
/// numbers are whole exactly when their decimal text is (`0.99999999999999999`
/// is not read as the double 1.0).
fn whole_number(v: &Value) -> Option<Option<i64>> {
    let n = v.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(Some(i));
    }
    if n.is_u64() {
        return Some(None);
    }
    let f = n.as_f64()?;
    if !f.is_finite() || f.fract() != 0.0 {
        return None;
    }
    // Exactly representable whole floats (|f| < 2^63) convert without loss.
    Some((f.abs() < 9.223_372_036_854_776e18).then_some(f as i64))
}

fn field<T>(
    object: &Map<String, Value>,
    name: &str,
    errors: &mut Vec<FieldError>,
    parse: impl FnOnce(&Value) -> Result<T, String>,
) -> Option<T> {
    let result = match object.get(name) {
        None | Some(Value::Null) => Err("is required".to_owned()),
        Some(v) => parse(v),
    };
    result.map_err(|e| errors.push(error(name, &e))).ok()
}

/// The error of one field.
pub fn error(field: &str, detail: &str) -> FieldError {
    FieldError {
        field: field.to_owned(),
        detail: detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_valid_body_parses() {
        let charge =
            NewCharge::parse(&json!({"amount": 1000, "currency": "jpy", "description": "book"}))
                .unwrap();
        assert_eq!(charge.amount.get(), 1000);
        assert_eq!(charge.currency.code(), "jpy");
        assert_eq!(charge.description.unwrap().as_str(), "book");
    }

    #[test]
    fn description_is_optional() {
        let charge = NewCharge::parse(&json!({"amount": 1, "currency": "usd"})).unwrap();
        assert_eq!(charge.description, None);
    }

    #[test]
    fn amount_bounds_are_inclusive() {
        assert!(Amount::parse(MIN_AMOUNT).is_ok());
        assert!(Amount::parse(MAX_AMOUNT).is_ok());
        assert!(Amount::parse(0).is_err());
        assert!(Amount::parse(-5).is_err());
        assert!(Amount::parse(MAX_AMOUNT + 1).is_err());
    }

    #[test]
    fn whole_numbers_are_integers_whatever_their_spelling() {
        for amount in [json!(612908), json!(612908.0), json!(6.12908e5)] {
            let charge = NewCharge::parse(&json!({"amount": amount, "currency": "jpy"})).unwrap();
            assert_eq!(charge.amount.get(), 612908, "{amount}");
        }
        // Whole but out of range: the range is the problem, not the spelling.
        let too_big: Value = serde_json::from_str("9223372036854775808").unwrap();
        for amount in [too_big, json!(1e20), json!(-0.0), json!(0)] {
            let errors =
                NewCharge::parse(&json!({"amount": amount, "currency": "jpy"})).unwrap_err();
            assert!(
                errors[0].detail.starts_with("must be between"),
                "{amount}: {errors:?}"
            );
        }
    }

    #[test]
    fn fractional_and_string_amounts_are_rejected() {
        for amount in [json!(10.5), json!("1000"), json!(true), json!(1e20)] {
            let errors =
                NewCharge::parse(&json!({"amount": amount, "currency": "jpy"})).unwrap_err();
            assert_eq!(errors[0].field, "amount", "{amount}");
        }
    }

    /// A fraction however close to a whole number is refused, for refunds
    /// as for charges: `json::parse_strict` reads `0.99999999999999999` as
    /// the double below 1.0 (its tests hold it to that), never as 1.0.
    #[test]
    fn an_amount_is_whole_or_refused_however_close_it_comes() {
        let charge =
            |amount: &Value| NewCharge::parse(&json!({"amount": amount, "currency": "jpy"}));
        let refund = |amount: &Value| NewRefund::parse(&json!({ "amount": amount }));
        for amount in [json!(1000), json!(1000.0), json!(1e3)] {
            assert_eq!(charge(&amount).unwrap().amount.get(), 1000, "{amount}");
            assert_eq!(refund(&amount).unwrap().amount.get(), 1000, "{amount}");
        }
        for amount in [
            json!(1.0f64.next_down()),
            json!(1.0f64.next_up()),
            json!(1000.0f64.next_up()),
            json!(99_999_999.0f64.next_up()),
            json!(-(1.0f64.next_down())),
            json!(1e-20),
            json!(5e-324),
        ] {
            for errors in [charge(&amount).unwrap_err(), refund(&amount).unwrap_err()] {
                assert_eq!(
                    errors,
                    [error("amount", "must be a whole number of minor units")],
                    "{amount}"
                );
            }
        }
    }

    #[test]
    fn currency_must_be_a_lowercase_known_code() {
        assert!(Currency::parse("jpy").is_ok());
        assert!(Currency::parse("JPY").unwrap_err().contains("lowercase"));
        assert!(Currency::parse("xxx").is_err());
        assert!(Currency::parse("").is_err());
    }

    #[test]
    fn unknown_fields_and_every_error_are_reported() {
        let errors = NewCharge::parse(&json!({"amount": 0, "currncy": "jpy"})).unwrap_err();
        let fields: Vec<_> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["currncy", "amount", "currency"]);
    }

    #[test]
    fn description_length_counts_characters_not_bytes() {
        assert!(Description::parse(&"あ".repeat(MAX_DESCRIPTION_CHARS)).is_ok());
        assert!(Description::parse(&"a".repeat(MAX_DESCRIPTION_CHARS + 1)).is_err());
        assert!(Description::parse("bell\u{7}").is_err());
    }

    proptest::proptest! {
        /// The document's description pattern refuses exactly what the parser refuses.
        #[test]
        fn the_documented_description_pattern_is_the_parser(text in "[a \\t\\n\\r\\x00\\x08\\x0b\\x1f\\x7f\\u{80}\\u{9f}\\u{a0}é]{0,8}") {
            let pattern = regex::Regex::new(DESCRIPTION_PATTERN).unwrap();
            proptest::prop_assert_eq!(pattern.is_match(&text), Description::parse(&text).is_ok(), "{:?}", text);
        }
    }

    #[test]
    fn a_payment_method_is_a_test_id_and_visa_when_absent() {
        let default = NewCharge::parse(&json!({"amount": 1, "currency": "usd"})).unwrap();
        assert_eq!(default.payment_method.id, "pm_card_visa");
        let declined = NewCharge::parse(
            &json!({"amount": 1, "currency": "usd", "payment_method": "pm_card_chargeDeclined"}),
        )
        .unwrap();
        assert_eq!(
            declined.payment_method.decline_code(),
            Some("generic_decline")
        );
        let errors =
            NewCharge::parse(&json!({"amount": 1, "currency": "usd", "payment_method": 4242}))
                .unwrap_err();
        assert_eq!(errors[0].field, "payment_method");
    }

    #[test]
    fn card_details_are_refused_as_such_and_never_quoted() {
        let errors = NewCharge::parse(&json!({
            "amount": 1, "currency": "usd",
            "card": {"number": "4242424242424242", "cvc": "123"},
        }))
        .unwrap_err();
        assert_eq!(errors[0].field, "card");
        assert!(
            errors[0].detail.starts_with("looks like card details"),
            "{errors:?}"
        );
        assert!(!format!("{errors:?}").contains("4242"));
    }

    #[test]
    fn a_non_object_body_is_rejected() {
        assert_eq!(NewCharge::parse(&json!([1])).unwrap_err()[0].field, "body");
    }
}
