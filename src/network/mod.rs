//! The card network as a charge sees it: [`client`], how a charge calls it
//! (the foreign step the protocol runs outside any transaction). The
//! network itself is a service of its own, `crate::simulator`, above the
//! operations it reuses.

pub mod client;
