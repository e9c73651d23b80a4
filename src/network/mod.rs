//! The card network itself: [`simulator`], a service of its own (`charges
//! network`) built on the edge and the charges' parsing, so it sits above
//! them. How a charge calls it is [`crate::network_client`], a leaf below
//! the edge: kept apart so that no folder imports one above it.

pub mod simulator;
