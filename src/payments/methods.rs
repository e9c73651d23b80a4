//! The test payment methods a charge can be made with: Stripe's test ids,
//! as integrators know them, and what each does. A declining method makes a
//! failed charge and a `402`: the decline is the operation's result, so it
//! is stored under the key and replayed like a 201.
//!
//! This is a demo: it never holds a real card. A card number (or a `card`
//! object) is refused before anything is read into a charge, and the
//! refusal never repeats what was sent (see [`refuse_card`]).

use serde_json::Value;

/// Why the card was declined, as Stripe names it (`decline_code`; a charge's
/// `failure_code` is the same code), and the sentence it shows a customer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decline {
    pub code: &'static str,
    pub message: &'static str,
}

/// One test payment method: its id, the card it stands for, and its decline
/// if it declines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentMethod {
    pub id: &'static str,
    /// What docs/api.md and the OpenAPI document say it is.
    pub card: &'static str,
    pub decline: Option<Decline>,
}

const fn succeeds(id: &'static str, card: &'static str) -> PaymentMethod {
    PaymentMethod {
        id,
        card,
        decline: None,
    }
}

const fn declines(id: &'static str, code: &'static str, message: &'static str) -> PaymentMethod {
    PaymentMethod {
        id,
        card: "a Visa card that is always declined",
        decline: Some(Decline { code, message }),
    }
}

/// Every test payment method, the default first.
pub const PAYMENT_METHODS: &[PaymentMethod] = &[
    succeeds("pm_card_visa", "a Visa card that always succeeds"),
    succeeds("pm_card_mastercard", "a Mastercard that always succeeds"),
    declines(
        "pm_card_chargeDeclined",
        "generic_decline",
        "Your card was declined.",
    ),
    declines(
        "pm_card_chargeDeclinedInsufficientFunds",
        "insufficient_funds",
        "Your card has insufficient funds.",
    ),
    declines(
        "pm_card_chargeDeclinedExpiredCard",
        "expired_card",
        "Your card has expired.",
    ),
    declines(
        "pm_card_chargeDeclinedIncorrectCvc",
        "incorrect_cvc",
        "Your card's security code is incorrect.",
    ),
    declines(
        "pm_card_chargeDeclinedProcessingError",
        "processing_error",
        "An error occurred while processing your card. Try again in a little bit.",
    ),
];

/// `payment_method` when the body has none.
pub const DEFAULT: PaymentMethod = PAYMENT_METHODS[0];

impl PaymentMethod {
    /// The method with this id, exactly as spelled.
    pub fn find(id: &str) -> Option<PaymentMethod> {
        PAYMENT_METHODS.iter().copied().find(|m| m.id == id)
    }

    /// Parses the `payment_method` member. An error never quotes the value:
    /// it may be a card number.
    pub fn parse_json(v: &Value) -> Result<PaymentMethod, String> {
        match v {
            Value::String(s) if looks_like_card_number(s) => Err(refuse_card()),
            Value::String(s) => PaymentMethod::find(s)
                .ok_or_else(|| format!("must be one of the test payment method ids: {}", ids())),
            Value::Object(_) => Err(refuse_card()),
            _ => Err(format!(
                "must be a string, one of the test payment method ids: {}",
                ids()
            )),
        }
    }

    /// The failed charge's code, or none for a charge that succeeds.
    pub fn decline_code(self) -> Option<&'static str> {
        self.decline.map(|d| d.code)
    }
}

/// The decline with this code (a stored charge's `failure_code`).
pub fn decline(code: &str) -> Option<Decline> {
    PAYMENT_METHODS
        .iter()
        .filter_map(|m| m.decline)
        .find(|d| d.code == code)
}

fn ids() -> String {
    PAYMENT_METHODS
        .iter()
        .map(|m| m.id)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The answer to card details sent as they are: refused, named as what
/// they look like, never repeated.
pub fn refuse_card() -> String {
    format!(
        "looks like card details; this demo never accepts a real card, and nothing of what was sent was kept. Use a test payment method id: {}",
        ids()
    )
}

/// Whether `text` holds what could be a card number: a run of 12 or more
/// digits, however spaced or hyphenated (ISO/IEC 7812 numbers are 12 to 19
/// digits long). No Luhn check on purpose: a mistyped number is refused
/// the same way.
pub fn looks_like_card_number(text: &str) -> bool {
    longest_digit_run(text) >= 12
}

/// The longest run of digits in `text`, spaces and hyphens inside a run
/// not breaking it.
fn longest_digit_run(text: &str) -> usize {
    let (mut longest, mut run) = (0, 0);
    for c in text.chars() {
        match c {
            '0'..='9' => {
                run += 1;
                longest = longest.max(run);
            }
            ' ' | '-' if run > 0 => {}
            _ => run = 0,
        }
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_documented_id_is_known_and_only_the_declining_ones_decline() {
        let declines: Vec<_> = PAYMENT_METHODS
            .iter()
            .filter_map(|m| m.decline_code().map(|c| (m.id, c)))
            .collect();
        assert_eq!(
            declines,
            [
                ("pm_card_chargeDeclined", "generic_decline"),
                (
                    "pm_card_chargeDeclinedInsufficientFunds",
                    "insufficient_funds"
                ),
                ("pm_card_chargeDeclinedExpiredCard", "expired_card"),
                ("pm_card_chargeDeclinedIncorrectCvc", "incorrect_cvc"),
                ("pm_card_chargeDeclinedProcessingError", "processing_error"),
            ]
        );
        assert_eq!(DEFAULT.id, "pm_card_visa");
        assert_eq!(
            PaymentMethod::find("pm_card_mastercard").unwrap().decline,
            None
        );
        assert_eq!(PaymentMethod::find("PM_CARD_VISA"), None);
        for m in PAYMENT_METHODS.iter().filter(|m| m.decline.is_some()) {
            assert_eq!(decline(m.decline_code().unwrap()), m.decline);
        }
    }

    #[test]
    fn a_card_number_is_refused_and_never_quoted() {
        for sent in [
            json!("4242424242424242"),
            json!("4242 4242 4242 4242"),
            json!("4000-0000-0000-0002"),
            json!("card 4242424242424242"),
            json!({"number": "4242424242424242", "exp_month": 12}),
        ] {
            let error = PaymentMethod::parse_json(&sent).unwrap_err();
            assert!(
                error.starts_with("looks like card details"),
                "{sent}: {error}"
            );
            assert!(
                !error.contains("4242") && !error.contains("0002"),
                "{error}"
            );
        }
        let unknown = PaymentMethod::parse_json(&json!("pm_card_amex")).unwrap_err();
        assert!(!unknown.contains("pm_card_amex"), "{unknown}");
        assert!(unknown.contains("pm_card_chargeDeclined"), "{unknown}");
        for not_a_card in ["pm_card_visa", "12345678901", "2026-12-07"] {
            assert!(!looks_like_card_number(not_a_card), "{not_a_card}");
        }
    }
}
