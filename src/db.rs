//! Database access: the connection pool, the embedded migrations, and the
//! charge queries. Diesel is synchronous, so handlers call these inside
//! `web::block`, taking the connection from the pool there.

use chrono::{DateTime, Utc};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use uuid::Uuid;

use crate::config::Settings;
use crate::domain::NewCharge;
use crate::schema::charges;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations");

pub type DbPool = Pool<ConnectionManager<PgConnection>>;
pub type DbConn = PooledConnection<ConnectionManager<PgConnection>>;

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "DATABASE_URL {0:?} is not a PostgreSQL URL (expected postgres://user@host:port/database)"
    )]
    BadUrl(String),
    #[error("cannot connect to the database at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("cannot create database {name:?} at {url}: {reason}")]
    Create {
        url: String,
        name: String,
        reason: String,
    },
    #[error("migrations failed on {url}: {reason}")]
    Migrate { url: String, reason: String },
}

/// Connects (creating the database if it does not exist), migrates, seeds the
/// demo account, and returns a pool.
pub fn setup(settings: &Settings) -> Result<DbPool, SetupError> {
    let url = &settings.database_url;
    let shown = redact(url);
    let mut conn = connect_or_create(url)?;
    migrate(&mut conn).map_err(|reason| SetupError::Migrate {
        url: shown.clone(),
        reason,
    })?;
    crate::accounts::seed_demo_account(&mut conn).map_err(|e| SetupError::Migrate {
        url: shown.clone(),
        reason: e.to_string(),
    })?;
    drop(conn);
    Pool::builder()
        .max_size(settings.pool_size)
        .connection_timeout(settings.pool_timeout)
        // A SELECT 1 at checkout: Diesel marks a connection broken only when
        // its transaction state is bad, so a connection the database closed
        // (restart, pg_terminate_backend) would otherwise be handed out again
        // and again. The check finds it, and r2d2 replaces it.
        .test_on_check_out(true)
        .build(ConnectionManager::new(url))
        .map_err(|e| SetupError::Connect {
            url: shown,
            reason: e.to_string(),
        })
}

/// A connection from the pool, waiting at most the pool's timeout (then
/// `ApiError::Unavailable`, a 503). Call it inside `web::block`: it blocks.
pub fn checkout(pool: &DbPool) -> Result<DbConn, crate::problem::ApiError> {
    let started = std::time::Instant::now();
    let conn = pool.get();
    crate::metrics::observe_pool_wait(started.elapsed(), conn.is_err());
    Ok(conn?)
}

/// Runs the pending migrations under a session advisory lock, so several
/// instances starting at once on one database take turns instead of racing.
pub fn migrate(conn: &mut PgConnection) -> Result<Vec<String>, String> {
    const LOCK: i64 = 0x0063_6861_7267_6573; // "charges" in ASCII
    let lock = |conn: &mut PgConnection, sql: &str| {
        diesel::sql_query(sql)
            .bind::<diesel::sql_types::BigInt, _>(LOCK)
            .execute(conn)
            .map_err(|e| e.to_string())
    };
    lock(conn, "SELECT pg_advisory_lock($1)")?;
    let applied = conn
        .run_pending_migrations(MIGRATIONS)
        .map(|applied| applied.iter().map(|m| m.to_string()).collect())
        .map_err(|e| e.to_string());
    lock(conn, "SELECT pg_advisory_unlock($1)")?;
    applied
}

/// Connects to `url`; if its database does not exist, creates it through the
/// server's `postgres` database first.
pub fn connect_or_create(url: &str) -> Result<PgConnection, SetupError> {
    let shown = redact(url);
    let parsed = url::Url::parse(url).map_err(|_| SetupError::BadUrl(shown.clone()))?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err(SetupError::BadUrl(shown));
    }
    let name = parsed.path().trim_start_matches('/').to_owned();
    match PgConnection::establish(url) {
        Ok(conn) => Ok(conn),
        Err(e) if !name.is_empty() && e.to_string().contains("does not exist") => {
            let mut admin_url = parsed.clone();
            admin_url.set_path("/postgres");
            let mut admin =
                PgConnection::establish(admin_url.as_str()).map_err(|e| SetupError::Connect {
                    url: shown.clone(),
                    reason: one_line(&e.to_string()),
                })?;
            let create = format!("CREATE DATABASE \"{}\"", name.replace('"', "\"\""));
            if let Err(e) = diesel::sql_query(create).execute(&mut admin) {
                // Another process may have created it in between: PostgreSQL
                // says "already exists", or, when both CREATEs ran at once,
                // reports the catalog's unique index.
                let message = e.to_string();
                if !message.contains("already exists")
                    && !message.contains("pg_database_datname_index")
                {
                    return Err(SetupError::Create {
                        url: shown,
                        name,
                        reason: one_line(&e.to_string()),
                    });
                }
            }
            tracing::info!(database = %name, "created database");
            PgConnection::establish(url).map_err(|e| SetupError::Connect {
                url: shown,
                reason: one_line(&e.to_string()),
            })
        }
        Err(e) => Err(SetupError::Connect {
            url: shown,
            reason: one_line(&e.to_string()),
        }),
    }
}

/// The URL with any password replaced, for messages and logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = charges, check_for_backend(diesel::pg::Pg))]
pub struct Charge {
    pub id: Uuid,
    pub account_id: i64,
    pub amount: i64,
    pub currency: String,
    pub description: Option<String>,
    pub created_at: DateTime<Utc>,
}

pub fn insert_charge(
    conn: &mut PgConnection,
    account_id: i64,
    new: &NewCharge,
) -> QueryResult<Charge> {
    diesel::insert_into(charges::table)
        .values((
            charges::id.eq(Uuid::new_v4()),
            charges::account_id.eq(account_id),
            charges::amount.eq(new.amount.get()),
            charges::currency.eq(new.currency.code()),
            charges::description.eq(new.description.as_ref().map(|d| d.as_str())),
        ))
        .returning(Charge::as_returning())
        .get_result(conn)
}

pub fn find_charge(
    conn: &mut PgConnection,
    account_id: i64,
    id: Uuid,
) -> QueryResult<Option<Charge>> {
    charges::table
        .filter(charges::id.eq(id))
        .filter(charges::account_id.eq(account_id))
        .select(Charge::as_select())
        .first(conn)
        .optional()
}

pub fn list_charges(
    conn: &mut PgConnection,
    account_id: i64,
    limit: i64,
) -> QueryResult<Vec<Charge>> {
    charges::table
        .filter(charges::account_id.eq(account_id))
        .order((charges::created_at.desc(), charges::id.desc()))
        .limit(limit)
        .select(Charge::as_select())
        .load(conn)
}

pub fn ping(conn: &mut PgConnection) -> QueryResult<()> {
    diesel::sql_query("SELECT 1").execute(conn).map(|_| ())
}
