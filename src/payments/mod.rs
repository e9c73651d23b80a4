//! The payments domain: what a charge and a refund are ([`domain`]:
//! amounts, currencies, ids and the field errors of a body, validated once;
//! [`methods`]: the test payment methods and their declines; [`events`]:
//! what an event is, its JSON and id, the same bytes for the API and every
//! webhook delivery). It knows nothing of HTTP: the operations that run
//! under the Idempotency-Key protocol and answer in HTTP terms are the
//! edge's (`crate::http::charges`, `crate::http::refunds`).

pub mod domain;
pub mod events;
pub mod methods;
