//! The payment operations: what a charge and a refund are
//! ([`domain`]: amounts, currencies, ids, validated once; [`methods`]: the
//! test payment methods and their declines), the handlers that
//! run them under the Idempotency-Key protocol ([`charges`], [`refunds`];
//! their OpenAPI schemas, [`schemas`]),
//! and the recovery of keys a crash left in progress ([`recovery`]).

pub mod charges;
pub mod domain;
pub mod methods;
pub mod recovery;
pub mod refunds;
pub mod schemas;
