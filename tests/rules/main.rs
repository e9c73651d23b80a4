//! The house's rules, read from the source, not from a running app: modules
//! import downward only (`layers`), no file over 600 lines and no function
//! over 80 (`sizes`), the design document names only real code (`docs`), and
//! the backends share at most 100 lines (`shared`).

mod docs;
mod layers;
mod shared;
mod sizes;
