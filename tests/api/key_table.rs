//! The key table is the protocol crate's: `crates/idempotency/sql/` holds
//! it, one file per backend, and the application's migrations must build
//! exactly that table (columns, types, defaults, checks, primary key,
//! indexes), plus the one thing only the application has: the foreign key
//! to its accounts. A migration that changes the key table without the
//! crate's file (or the other way round) fails here.

use charges::store::Connection;

use crate::support::{TestBackend, TestDatabase};

/// The crate's schema file for the running backend.
fn crate_sql(backend: TestBackend) -> String {
    let file = match backend {
        TestBackend::Postgres => "postgres.sql",
        TestBackend::Sqlite => "sqlite.sql",
    };
    let path = format!(
        "{}/crates/idempotency/sql/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every fact about `idempotency_keys` except its foreign keys, one line
/// each, sorted; and its foreign keys' targets.
fn describe(db: &TestDatabase) -> (Vec<String>, Vec<String>) {
    let (mut facts, foreign) = match db.backend() {
        TestBackend::Postgres => {
            let mut facts = db.strings(
                "SELECT concat_ws(' ', 'column', column_name, data_type, is_nullable, \
                 coalesce(column_default, '-')) AS value \
                 FROM information_schema.columns WHERE table_name = 'idempotency_keys'",
            );
            facts.extend(db.strings(
                "SELECT concat_ws(' ', 'constraint', conname, pg_get_constraintdef(oid)) AS value \
                 FROM pg_constraint WHERE conrelid = 'idempotency_keys'::regclass AND contype <> 'f'",
            ));
            facts.extend(db.strings(
                "SELECT concat_ws(' ', 'index', indexdef) AS value FROM pg_indexes \
                 WHERE tablename = 'idempotency_keys'",
            ));
            let foreign = db.strings(
                "SELECT confrelid::regclass::text AS value FROM pg_constraint \
                 WHERE conrelid = 'idempotency_keys'::regclass AND contype = 'f'",
            );
            (facts, foreign)
        }
        TestBackend::Sqlite => {
            let mut facts = db.strings(
                "SELECT 'column ' || name || ' ' || type || ' ' || \"notnull\" || ' ' || \
                 coalesce(dflt_value, '-') || ' ' || pk AS value \
                 FROM pragma_table_info('idempotency_keys')",
            );
            facts.extend(db.strings(
                "SELECT 'index ' || l.name || ' ' || l.\"unique\" || ' ' || group_concat(i.name) AS value \
                 FROM pragma_index_list('idempotency_keys') l, pragma_index_info(l.name) i \
                 GROUP BY l.name",
            ));
            let sql = db.strings(
                "SELECT sql AS value FROM sqlite_master \
                 WHERE type = 'table' AND name = 'idempotency_keys'",
            );
            facts.extend(checks(&sql[0]));
            let foreign = db.strings(
                "SELECT \"table\" AS value FROM pragma_foreign_key_list('idempotency_keys')",
            );
            (facts, foreign)
        }
    };
    facts.sort();
    (facts, foreign)
}

/// SQLite keeps a table's CHECK constraints only in its CREATE text: each
/// `CHECK (…)`, white space squeezed.
fn checks(create: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = create;
    while let Some(at) = rest.find("CHECK") {
        let open = at + rest[at..].find('(').expect("CHECK (");
        let mut depth = 0;
        let close = rest[open..]
            .char_indices()
            .find_map(|(i, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                (depth == 0).then_some(open + i)
            })
            .expect("a CHECK's closing parenthesis");
        let body = rest[open..=close].split_whitespace().collect::<Vec<_>>();
        found.push(format!("check {}", body.join(" ")));
        rest = &rest[close..];
    }
    found
}

crate::on_both_backends! {
    async fn the_migrations_build_exactly_the_protocol_crates_key_table() {
        let migrated = TestDatabase::create();
        Connection::open(&migrated.url)
            .expect("open the migrated database")
            .store()
            .migrate()
            .expect("the application's migrations");
        let from_crate = TestDatabase::create();
        from_crate.batch(&crate_sql(from_crate.backend()));

        let (app, app_foreign) = describe(&migrated);
        let (krate, crate_foreign) = describe(&from_crate);
        assert!(app.len() > 15, "too little was read of the table: {app:#?}");
        assert_eq!(app, krate, "the migrations' key table and the crate's differ");
        assert_eq!(app_foreign, ["accounts"], "the application adds its foreign key");
        assert!(crate_foreign.is_empty(), "the crate's table names no table of an application");
    }
}
