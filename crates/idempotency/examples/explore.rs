//! Serves stateright's Explorer on the protocol's model (the one
//! `tests/model` checks), to step through it by hand in a browser:
//!
//! ```sh
//! cargo run -p idempotency --example explore                      # key-first with the card network
//! cargo run -p idempotency --example explore -- atomic            # atomic, no foreign step
//! cargo run -p idempotency --example explore -- key-first 127.0.0.1:3001
//! ```
//!
//! Then open http://127.0.0.1:3000. Loopback only: the Explorer has no
//! authentication, so any other address is refused.

// The test target's model, shared as it is; the Explorer uses part of it.
#![allow(dead_code)]

#[path = "../tests/model/machine/mod.rs"]
mod machine;

use std::net::SocketAddr;

use idempotency::Mode;
use machine::{Budget, ClientSpec, Config, Protocol};
use stateright::Model;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mode, foreign) = match args.next().as_deref() {
        None | Some("key-first") => (Mode::KeyFirst, true),
        Some("atomic") => (Mode::Atomic, false),
        Some(other) => panic!("{other:?}: expected atomic or key-first"),
    };
    let address: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:3000".into())
        .parse()
        .expect("an address such as 127.0.0.1:3000");
    assert!(
        address.ip().is_loopback(),
        "{address}: the Explorer serves loopback only"
    );
    let client = |body, sends| ClientSpec {
        account: 0,
        key: 0,
        body,
        sends,
    };
    let budget = Budget {
        crashes: 1,
        lost_answers: 1,
        lost_calls: u8::from(foreign),
        expiries: 1,
        other_recoveries: 1,
    };
    let clients = vec![client(0, 2), client(0, 1), client(1, 1)];
    let model = Protocol(Config::new(mode, foreign, clients, 2, budget));
    println!("the Explorer on http://{address}");
    model.checker().serve(address);
}
