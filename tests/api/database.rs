//! The database under the app: one that becomes read-only (as a demoted
//! primary or a standby is) makes writes a 503 with `Retry-After` that
//! writes nothing, and the pool replaces its connections once the database
//! takes writes again. (Failover itself is in `tests/reliability`.)

#[cfg(postgres_tests)]
use std::time::Duration;

#[cfg(postgres_tests)]
use crate::support::{charge_body, spawn_app_with};

/// A failover's other half, without replication: the server the pool
/// reaches becomes read-only (as a demoted primary or a standby is). Writes
/// answer 503 with Retry-After, never 500, and write nothing; each such
/// connection is dropped, so once the server takes writes again the pool's
/// new connections do (`default_transaction_read_only` applies when a
/// session starts: a connection kept from the read-only time would fail
/// forever).
#[cfg(postgres_tests)]
#[tokio::test]
async fn a_read_only_database_is_a_503_and_its_connections_are_replaced() {
    crate::support::BACKEND
        .scope(crate::support::TestBackend::Postgres, async {
            let app = spawn_app_with(|s| {
                s.pool_size = 2;
                s.pool_timeout = Duration::from_secs(2);
            })
            .await;
            assert_eq!(app.charge(None, &charge_body()).await.status, 201);
            let name = app.db.url.rsplit('/').next().unwrap().to_owned();
            // Through the server's own database: a session of a read-only
            // database cannot alter it back.
            let admin = |sql: String| {
                use diesel::{Connection, RunQueryDsl};
                let mut conn =
                    diesel::PgConnection::establish(&crate::support::db::server_url()).unwrap();
                diesel::sql_query(sql).execute(&mut conn).unwrap();
            };
            admin(format!(
                "ALTER DATABASE \"{name}\" SET default_transaction_read_only = on"
            ));
            app.db.terminate_connections();
            for i in 0..6 {
                let r = app
                    .charge(format!("k-ro-{i}").as_str(), &charge_body())
                    .await;
                r.assert_problem(503, "service-unavailable");
                assert_eq!(r.header("retry-after"), Some("1"));
            }
            assert_eq!(app.charges(), 1, "nothing was written while read-only");
            admin(format!(
                "ALTER DATABASE \"{name}\" RESET default_transaction_read_only"
            ));
            // Connections the pool opened while the database was read-only
            // fail once each (at most the pool's two), are dropped, and
            // from then on every write is served by a new one.
            let mut refused = 0;
            for i in 0..8 {
                let r = app
                    .charge(format!("k-rw-{i}").as_str(), &charge_body())
                    .await;
                if r.status == 503 && i < 2 {
                    refused += 1;
                    continue;
                }
                assert_eq!(r.status, 201, "attempt {i}: {}", r.body);
            }
            assert_eq!(app.charges(), 1 + 8 - refused);
        })
        .await
}
