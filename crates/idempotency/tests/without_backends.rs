//! Built without both backends (`--no-default-features`), the tests on a
//! real database are not built at all (Cargo.toml's `required-features`):
//! this says so, as an ignored test, rather than passing in silence.

#[test]
#[cfg(not(all(feature = "postgres", feature = "sqlite")))]
#[ignore = "protocol, schema, takeover_twin and inbox need the features postgres and sqlite"]
fn the_database_tests_need_both_backends() {}
