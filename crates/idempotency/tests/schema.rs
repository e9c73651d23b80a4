//! The SQL files create exactly the table the Diesel `schema` modules
//! describe: the same columns, in the same order, of the types and
//! nullability the schema gives them; and a row of each kind the protocol
//! writes (in progress with its request, completed with its response)
//! reads back through the schema's every column. The same for the webhook
//! inbox's files.

mod support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use diesel::Column as _;
use diesel::connection::SimpleConnection as _;
use diesel::prelude::*;
use diesel::sql_types::{Bool, Text};
use idempotency::webhook::{Received, receive};
use idempotency::{KeyStore, KeyedRequest, NewKey, SavedResponse};
use serde_json::{Value, json};
use support::TestDb;

#[derive(QueryableByName, Debug, PartialEq)]
struct DbColumn {
    #[diesel(sql_type = Text)]
    name: String,
    #[diesel(sql_type = Text)]
    sql_type: String,
    #[diesel(sql_type = Bool)]
    nullable: bool,
}

fn expected(columns: &[(&str, &str, bool)]) -> Vec<DbColumn> {
    columns
        .iter()
        .map(|(name, sql_type, nullable)| DbColumn {
            name: (*name).to_owned(),
            sql_type: (*sql_type).to_owned(),
            nullable: *nullable,
        })
        .collect()
}

/// Writes the two kinds of row through the key store: `in-progress` (its
/// request and foreign step kept) and `completed` (its response).
fn write_both_kinds<S: KeyStore>(conn: &mut S) -> SavedResponse {
    let body = json!({ "amount": 500 });
    let response = SavedResponse {
        status: 201,
        headers: [("location".to_owned(), "/orders/o1".to_owned())].into(),
        body: json!({ "id": "o1" }),
    };
    for (key, completed) in [("in-progress", None), ("completed", Some(&response))] {
        let request = KeyedRequest::new(7, key, "POST", "/orders", &body);
        let row = NewKey {
            request: &request,
            ttl: Duration::from_secs(3600),
            lease: Duration::from_secs(30),
            foreign_step: Some("network"),
            completed,
        };
        assert!(conn.insert_key(&row).unwrap().is_some(), "{key} inserted");
    }
    response
}

mod on_postgres {
    use super::*;
    use idempotency::postgres::schema::idempotency_keys::dsl::*;

    /// The table's columns as PostgreSQL describes them.
    fn columns(conn: &mut PgConnection, table: &str) -> Vec<DbColumn> {
        diesel::sql_query(
            "SELECT column_name::text AS name, data_type::text AS sql_type, \
             is_nullable = 'YES' AS nullable FROM information_schema.columns \
             WHERE table_schema = 'public' AND table_name = $1 \
             ORDER BY ordinal_position",
        )
        .bind::<Text, _>(table)
        .load(conn)
        .unwrap()
    }

    type Row = (
        i64,
        String,
        String,
        String,
        Option<i16>,
        Option<Value>,
        Option<Value>,
        DateTime<Utc>,
        DateTime<Utc>,
        DateTime<Utc>,
        uuid::Uuid,
        Option<String>,
        Option<Value>,
        Option<String>,
    );

    #[test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "TEST_DATABASE_URL is not set: PostgreSQL was not tested"
    )]
    fn the_sql_file_creates_the_table_the_schema_describes() {
        let Some(db) = TestDb::<PgConnection>::create(
            "on_postgres::the_sql_file_creates_the_table_the_schema_describes",
        ) else {
            return;
        };
        let mut conn = db.conn();
        let columns = columns(&mut conn, "idempotency_keys");
        let tz = "timestamp with time zone";
        assert_eq!(
            columns,
            expected(&[
                (account_id::NAME, "bigint", false),
                (key::NAME, "text", false),
                (fingerprint::NAME, "text", false),
                (status::NAME, "text", false),
                (response_status::NAME, "smallint", true),
                (response_headers::NAME, "jsonb", true),
                (response_body::NAME, "jsonb", true),
                (created_at::NAME, tz, false),
                (expires_at::NAME, tz, false),
                (locked_until::NAME, tz, false),
                (lease_token::NAME, "uuid", false),
                (request_path::NAME, "text", true),
                (request_body::NAME, "jsonb", true),
                (foreign_step::NAME, "text", true),
            ])
        );

        let response = write_both_kinds(&mut conn);
        let rows: Vec<Row> = idempotency_keys
            .select(idempotency_keys::all_columns())
            .order(key)
            .load(&mut conn)
            .unwrap();
        assert_eq!(rows.len(), 2);
        let (done, running) = (&rows[0], &rows[1]);
        assert_eq!(
            (done.1.as_str(), done.3.as_str()),
            ("completed", "completed")
        );
        assert_eq!(done.4, Some(201));
        assert_eq!(done.6.as_ref(), Some(&response.body));
        assert_eq!(
            (running.1.as_str(), running.3.as_str()),
            ("in-progress", "in_progress")
        );
        assert_eq!(running.4, None);
        assert_eq!(running.11.as_deref(), Some("/orders"));
        assert_eq!(running.12, Some(json!({ "amount": 500 })));
        assert_eq!(running.13.as_deref(), Some("network"));
        assert!(running.9 > running.7, "a lease ahead of its creation");
        assert!(running.8 > running.9, "kept longer than its lease");
    }

    #[test]
    #[cfg_attr(
        not(postgres_tests),
        ignore = "TEST_DATABASE_URL is not set: PostgreSQL was not tested"
    )]
    fn the_inbox_sql_file_creates_the_table_the_schema_describes() {
        use idempotency::postgres::schema::webhook_inbox as inbox;
        let Some(db) = TestDb::<PgConnection>::create(
            "on_postgres::the_inbox_sql_file_creates_the_table_the_schema_describes",
        ) else {
            return;
        };
        let mut conn = db.conn();
        conn.batch_execute(idempotency::webhook::POSTGRES_INBOX)
            .unwrap();
        let columns = columns(&mut conn, "webhook_inbox");
        assert_eq!(
            columns,
            expected(&[
                (inbox::source::NAME, "text", false),
                (inbox::event_id::NAME, "text", false),
                (inbox::received_at::NAME, "timestamp with time zone", false),
            ])
        );
        assert_eq!(receive(&mut conn, "charges", "evt_1"), Ok(Received::First));
        let rows: Vec<(String, String, DateTime<Utc>)> = inbox::table
            .select(inbox::all_columns)
            .load(&mut conn)
            .unwrap();
        assert_eq!(
            (rows[0].0.as_str(), rows[0].1.as_str()),
            ("charges", "evt_1")
        );
        assert!((Utc::now() - rows[0].2).num_seconds().abs() < 60);
    }
}

mod on_sqlite {
    use super::*;
    use idempotency::sqlite::schema::idempotency_keys::dsl::*;

    /// The table's columns as SQLite describes them.
    fn columns(conn: &mut SqliteConnection, table: &str) -> Vec<DbColumn> {
        diesel::sql_query(
            "SELECT name, type AS sql_type, \"notnull\" = 0 AS nullable \
             FROM pragma_table_info(?) ORDER BY cid",
        )
        .bind::<Text, _>(table)
        .load(conn)
        .unwrap()
    }

    type Row = (
        i64,
        String,
        String,
        String,
        Option<i32>,
        Option<String>,
        Option<String>,
        String,
        String,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    );

    #[test]
    fn the_sql_file_creates_the_table_the_schema_describes() {
        let Some(db) = TestDb::<SqliteConnection>::create(
            "on_sqlite::the_sql_file_creates_the_table_the_schema_describes",
        ) else {
            return;
        };
        let mut conn = db.conn();
        let columns = columns(&mut conn, "idempotency_keys");
        assert_eq!(
            columns,
            expected(&[
                (account_id::NAME, "INTEGER", false),
                (key::NAME, "TEXT", false),
                (fingerprint::NAME, "TEXT", false),
                (status::NAME, "TEXT", false),
                (response_status::NAME, "INTEGER", true),
                (response_headers::NAME, "TEXT", true),
                (response_body::NAME, "TEXT", true),
                (created_at::NAME, "TEXT", false),
                (expires_at::NAME, "TEXT", false),
                (locked_until::NAME, "TEXT", false),
                (lease_token::NAME, "TEXT", false),
                (request_path::NAME, "TEXT", true),
                (request_body::NAME, "TEXT", true),
                (foreign_step::NAME, "TEXT", true),
            ])
        );

        let response = write_both_kinds(&mut conn);
        let rows: Vec<Row> = idempotency_keys
            .select(idempotency_keys::all_columns())
            .order(key)
            .load(&mut conn)
            .unwrap();
        assert_eq!(rows.len(), 2);
        let (done, running) = (&rows[0], &rows[1]);
        assert_eq!(
            (done.1.as_str(), done.3.as_str()),
            ("completed", "completed")
        );
        assert_eq!(done.4, Some(201));
        let stored: Value = serde_json::from_str(done.6.as_deref().unwrap()).unwrap();
        assert_eq!(stored, response.body);
        assert_eq!(
            (running.1.as_str(), running.3.as_str()),
            ("in-progress", "in_progress")
        );
        assert_eq!(running.4, None);
        assert_eq!(running.11.as_deref(), Some("/orders"));
        let request: Value = serde_json::from_str(running.12.as_deref().unwrap()).unwrap();
        assert_eq!(request, json!({ "amount": 500 }));
        assert_eq!(running.13.as_deref(), Some("network"));
        // Times as text in one fixed-width form, so that text order is time order.
        for t in [&running.7, &running.8, &running.9] {
            assert!(t.parse::<DateTime<Utc>>().is_ok(), "{t}");
            assert_eq!(t.len(), "2026-01-01T00:00:00.000000Z".len(), "{t}");
        }
        assert!(running.9 > running.7 && running.8 > running.9);
        assert!(running.10.parse::<uuid::Uuid>().is_ok());
    }

    #[test]
    fn the_inbox_sql_file_creates_the_table_the_schema_describes() {
        use idempotency::sqlite::schema::webhook_inbox as inbox;
        let Some(db) = TestDb::<SqliteConnection>::create(
            "on_sqlite::the_inbox_sql_file_creates_the_table_the_schema_describes",
        ) else {
            return;
        };
        let mut conn = db.conn();
        conn.batch_execute(idempotency::webhook::SQLITE_INBOX)
            .unwrap();
        let columns = columns(&mut conn, "webhook_inbox");
        assert_eq!(
            columns,
            expected(&[
                (inbox::source::NAME, "TEXT", false),
                (inbox::event_id::NAME, "TEXT", false),
                (inbox::received_at::NAME, "TEXT", false),
            ])
        );
        assert_eq!(receive(&mut conn, "charges", "evt_1"), Ok(Received::First));
        let rows: Vec<(String, String, String)> = inbox::table
            .select(inbox::all_columns)
            .load(&mut conn)
            .unwrap();
        assert_eq!(
            (rows[0].0.as_str(), rows[0].1.as_str()),
            ("charges", "evt_1")
        );
        // The key table's fixed-width time text, so that text order is time order.
        let at: DateTime<Utc> = rows[0].2.parse().unwrap();
        assert_eq!(rows[0].2.len(), "2026-01-01T00:00:00.000000Z".len());
        assert!((Utc::now() - at).num_seconds().abs() < 60);
    }
}
