//! The card network: [`client`], how a charge calls it (the foreign step
//! the protocol runs outside any transaction), and [`simulator`], the
//! network itself, a separate service with idempotency keys of its own that
//! `charges network` runs (or the demo runs in-process).

pub mod client;
pub mod simulator;
