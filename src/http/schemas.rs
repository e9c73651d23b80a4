//! The OpenAPI schemas of the charge and refund endpoints' bodies, headers
//! and parameters, from the domain's constants (`payments::domain`,
//! `payments::methods`, the key's grammar): documentation only, the bodies
//! are parsed by the domain's types.

use serde_json::json;
use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
use utoipa::openapi::{KnownFormat, RefOr, Schema, SchemaFormat};
use utoipa::{PartialSchema, ToSchema};

use crate::payments::domain::{
    CURRENCIES, DESCRIPTION_PATTERN, MAX_AMOUNT, MAX_DESCRIPTION_CHARS, MIN_AMOUNT,
};
use crate::payments::methods::{self, PAYMENT_METHODS};
use idempotency::IdempotencyKey;

/// The body of `POST /charges`. An unknown member, or a member given twice, is a 400.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Documentation only: the body is parsed by `NewCharge::parse`.
pub struct ChargeRequestBody {
    #[schema(schema_with = charge_amount)]
    amount: i64,
    #[schema(schema_with = currency)]
    currency: String,
    #[schema(schema_with = charge_description)]
    description: Option<String>,
    #[schema(schema_with = requested_payment_method)]
    payment_method: Option<String>,
}

/// The body of `PUT /charges/{id}/description`: the whole new value. An unknown member, or a member given twice, is a 400.
#[derive(utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Documentation only: parsed by `NewDescription::parse`.
pub struct DescriptionBody {
    #[schema(schema_with = new_description, required = true)]
    description: Option<String>,
}

/// A test payment method's id: one of [`PAYMENT_METHODS`].
pub(crate) fn payment_method_id() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(PAYMENT_METHODS.iter().map(|m| m.id)))
        .description(Some("The test payment method the charge was made with."))
        .examples([json!(methods::DEFAULT.id)])
}

/// The request's `payment_method`: one of the ids, or `null` (as absent).
pub(crate) fn requested_payment_method() -> ObjectBuilder {
    let listed: Vec<String> = PAYMENT_METHODS
        .iter()
        .map(|m| match m.decline {
            None => format!("`{}`: {}", m.id, m.card),
            Some(d) => format!("`{}`: declined, `{}`", m.id, d.code),
        })
        .collect();
    let ids = PAYMENT_METHODS.iter().map(|m| Some(m.id));
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(ids.chain([None])))
        .description(Some(format!(
            "A test payment method (`{}` when absent or `null`): {}. A declining one makes a failed charge and a 402 `card-declined`. Card numbers and `card` objects are refused (400): this is a demo, it never takes a real card.",
            methods::DEFAULT.id,
            listed.join("; ")
        )))
        .examples([json!(methods::DEFAULT.id)])
}

pub(crate) fn charge_status() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["succeeded", "failed"]))
}

pub(crate) fn failure_code() -> ObjectBuilder {
    let codes: Vec<&str> = PAYMENT_METHODS
        .iter()
        .filter_map(|m| m.decline_code())
        .collect();
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .enum_values(Some(codes.into_iter().map(Some).chain([None])))
}

/// An amount's schema: the domain's range, a whole number.
pub(crate) fn amount(description: &str, example: i64) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Integer)
        .minimum(Some(MIN_AMOUNT as f64))
        .maximum(Some(MAX_AMOUNT as f64))
        .description(Some(description))
        .examples([json!(example)])
}

/// An amount as the API shows it (an `i64`).
pub(crate) fn shown(amount: ObjectBuilder) -> ObjectBuilder {
    amount.format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
}

pub(crate) fn shown_amount() -> ObjectBuilder {
    shown(self::amount(
        "In the currency's minor unit (yen for `jpy`, cents for `usd`).",
        1000,
    ))
}

pub(crate) fn amount_refunded() -> ObjectBuilder {
    let amount = self::amount(
        "The sum of the charge's refunds; never more than `amount`.",
        0,
    );
    shown(amount.minimum(Some(0.0)))
}

pub(crate) fn charge_amount() -> ObjectBuilder {
    amount(
        "In the currency's minor unit (yen for `jpy`, cents for `usd`). A whole number, as its decimal text says, not the nearest double: `1000.0` and `1e3` are read as 1000; `1000.5` and `0.99999999999999999` are a 400.",
        1000,
    )
}

pub(crate) fn currency() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(CURRENCIES.iter().copied()))
        .description(Some("A lowercase ISO 4217 code from this list."))
        .examples([json!("jpy")])
}

/// A description's schema: the domain's length and characters, or `null`.
pub(crate) fn description(note: &str, example: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .max_length(Some(MAX_DESCRIPTION_CHARS))
        .pattern(Some(DESCRIPTION_PATTERN))
        .description(Some(format!(
            "At most {MAX_DESCRIPTION_CHARS} characters; no control characters but tab and line feed{note}."
        )))
        .examples([json!(example)])
}

pub(crate) fn charge_description() -> ObjectBuilder {
    description("", "a book")
}

pub(crate) fn new_description() -> ObjectBuilder {
    description("; `null` removes it", "a book, gift-wrapped")
}

/// The `Idempotency-Key` header of a keyed write.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Documentation only: read by `requests::read_json`.
pub struct KeyParam {
    /// A Structured Field string (IETF draft-ietf-httpapi-idempotency-key-header-07), e.g. `"8e03978e-40d5-43e8-bc93-6894a57f9324"`; an unquoted value is accepted too and taken literally. Either way 1 to 255 printable ASCII characters (space to `~`); a quoted one escapes `\"` and `\\` and has no parameters. Generate one UUID per operation and reuse it for every retry. Keys are remembered for 24 hours by default (IDEMPOTENCY_TTL); within that window the same key with the same request replays the stored response, with a different request (body or endpoint) it is a 422.
    #[param(rename = "Idempotency-Key", inline, nullable = false)]
    idempotency_key: Option<KeyHeader>,
}

/// The `Idempotency-Key` header's schema: a string (never null) with the
/// parser's grammar; a quoted key of 255 characters, each escaped, at most.
pub struct KeyHeader;

impl PartialSchema for KeyHeader {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(2 * IdempotencyKey::MAX_LEN + 2))
            .pattern(Some(IdempotencyKey::HEADER_PATTERN))
            .into()
    }
}

impl ToSchema for KeyHeader {}

/// An id as the API gives them out (lowercase, hyphenated), with what
/// another spelling gets.
fn id(description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)))
        .pattern(Some(
            "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        ))
        .description(Some(description))
        .into()
}

/// A charge's id in its one URI.
pub struct ChargeId;

impl PartialSchema for ChargeId {
    fn schema() -> RefOr<Schema> {
        id("As the API gives it out: lowercase, hyphenated. Any other spelling is a 404.")
    }
}

impl ToSchema for ChargeId {}

/// A list's cursor: the id of one of its rows.
pub struct ListCursor;

impl PartialSchema for ListCursor {
    fn schema() -> RefOr<Schema> {
        id(
            "The id of a row of this list, as the API gave it (lowercase, hyphenated); any other spelling, or an id that is no row of this list for your account, is a 400.",
        )
    }
}

impl ToSchema for ListCursor {}

/// A charge's `status`, as a query parameter.
pub struct ChargeStatus;

impl PartialSchema for ChargeStatus {
    fn schema() -> RefOr<Schema> {
        charge_status().into()
    }
}

impl ToSchema for ChargeStatus {}
