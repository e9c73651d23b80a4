//! The card network: [`client`], how a charge calls it (the foreign step
//! the protocol runs outside any transaction), a leaf below the edge; and
//! [`simulator`], the network itself, a service of its own (`charges
//! network`) built on the edge and the charges' parsing, so it sits above
//! them.

pub mod client;
pub mod simulator;
