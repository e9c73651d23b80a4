//! The charge as the business sees it: parsed once from the request body into
//! types that cannot hold an invalid value. No HTTP, no SQL.

use serde_json::{Map, Value};

pub const MIN_AMOUNT: i64 = 1;
pub const MAX_AMOUNT: i64 = 99_999_999;
pub const MAX_DESCRIPTION_CHARS: usize = 500;

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
}

/// One problem with one field of the request body.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub detail: String,
}

impl NewCharge {
    /// Parses `{"amount": 1000, "currency": "jpy", "description": "..."}`,
    /// reporting every problem at once so a client can fix them in one go.
    pub fn parse(body: &Value) -> Result<NewCharge, Vec<FieldError>> {
        let Some(object) = body.as_object() else {
            return Err(vec![error("body", "must be a JSON object")]);
        };
        let mut errors: Vec<FieldError> = object
            .keys()
            .filter(|k| !matches!(k.as_str(), "amount" | "currency" | "description"))
            .map(|k| {
                error(
                    k,
                    "is not a known field (known: amount, currency, description)",
                )
            })
            .collect();

        let amount = field(object, "amount", &mut errors, |v| match v.as_i64() {
            Some(n) => Amount::parse(n),
            None if v.is_number() => Err("must be a whole number of minor units".to_owned()),
            None => Err("must be an integer".to_owned()),
        });
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

        match (amount, currency, description) {
            (Some(amount), Some(currency), Some(description)) if errors.is_empty() => {
                Ok(NewCharge {
                    amount,
                    currency,
                    description,
                })
            }
            _ => Err(errors),
        }
    }
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

fn error(field: &str, detail: &str) -> FieldError {
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
    fn fractional_and_string_amounts_are_rejected() {
        for amount in [json!(10.5), json!("1000"), json!(true), json!(1e20)] {
            let errors =
                NewCharge::parse(&json!({"amount": amount, "currency": "jpy"})).unwrap_err();
            assert_eq!(errors[0].field, "amount", "{amount}");
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

    #[test]
    fn a_non_object_body_is_rejected() {
        assert_eq!(NewCharge::parse(&json!([1])).unwrap_err()[0].field, "body");
    }
}
