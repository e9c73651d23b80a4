//! Database access: the connection pools of the two backends, the embedded
//! migrations, and the charge queries.
//!
//! PostgreSQL is the reference backend; SQLite (a file, compiled in) is the
//! zero-setup default. Every query takes a [`Conn`] and has its two
//! backend versions side by side: the PostgreSQL one in Diesel's DSL over
//! `schema.rs`, the SQLite one as plain SQL over `migrations/sqlite` (Diesel
//! cannot share our schema's UUID, JSONB and TIMESTAMPTZ types across
//! backends). Diesel is synchronous, so handlers call all of this inside
//! `web::block`, taking the connection from the pool there.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use diesel::pg::PgConnection;
use diesel::prelude::*;
use diesel::r2d2::{ConnectionManager, CustomizeConnection, Pool, PooledConnection};
use diesel::sqlite::SqliteConnection;
use diesel_migrations::{EmbeddedMigrations, MigrationHarness, embed_migrations};
use uuid::Uuid;

use crate::config::Settings;
use crate::domain::NewCharge;
use crate::schema::charges;

pub const PG_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");
pub const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");

/// SQLite writers wait this long for the database's write lock: longer than
/// the longest demo delay, so a concurrent retry waits like PostgreSQL's.
pub const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgresql",
            Backend::Sqlite => "sqlite",
        }
    }

    /// As people write it.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "PostgreSQL",
            Backend::Sqlite => "SQLite",
        }
    }
}

/// What `DATABASE_URL` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Postgres(String),
    Sqlite(PathBuf),
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, SetupError> {
        if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            if path.is_empty() {
                return Err(SetupError::BadUrl(url.to_owned()));
            }
            return Ok(Target::Sqlite(PathBuf::from(path)));
        }
        match url::Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "postgres" | "postgresql") => {
                Ok(Target::Postgres(url.to_owned()))
            }
            _ => Err(SetupError::BadUrl(redact(url))),
        }
    }
}

#[derive(Clone)]
pub enum DbPool {
    Pg(Pool<PgManager>),
    Sqlite(Pool<ConnectionManager<SqliteConnection>>),
}

pub enum DbConn {
    Pg(PooledConnection<PgManager>),
    Sqlite(PooledConnection<ConnectionManager<SqliteConnection>>),
}

/// A connection of either backend, borrowed for one unit of work.
pub enum Conn<'a> {
    Pg(&'a mut PgConnection),
    Sqlite(&'a mut SqliteConnection),
}

impl DbPool {
    pub fn backend(&self) -> Backend {
        match self {
            DbPool::Pg(_) => Backend::Postgres,
            DbPool::Sqlite(_) => Backend::Sqlite,
        }
    }

    pub fn state(&self) -> r2d2::State {
        match self {
            DbPool::Pg(p) => p.state(),
            DbPool::Sqlite(p) => p.state(),
        }
    }

    pub fn get(&self) -> Result<DbConn, r2d2::Error> {
        Ok(match self {
            DbPool::Pg(p) => DbConn::Pg(p.get()?),
            DbPool::Sqlite(p) => DbConn::Sqlite(p.get()?),
        })
    }
}

impl DbConn {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            DbConn::Pg(c) => Conn::Pg(&mut c.conn),
            DbConn::Sqlite(c) => Conn::Sqlite(c),
        }
    }
}

impl Conn<'_> {
    pub fn backend(&self) -> Backend {
        match self {
            Conn::Pg(_) => Backend::Postgres,
            Conn::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// One transaction. PostgreSQL: READ COMMITTED, where a second insert of
    /// the same key waits on the unique index (REPEATABLE READ would make it
    /// fail instead). SQLite: `BEGIN IMMEDIATE`, which takes the database's
    /// write lock up front, so a concurrent writer waits (busy timeout) for
    /// the whole transaction rather than failing halfway.
    pub fn transaction<T, E>(
        &mut self,
        f: impl FnOnce(&mut Conn<'_>) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<diesel::result::Error>,
    {
        match self {
            Conn::Pg(c) => c
                .build_transaction()
                .read_committed()
                .run(|tx| f(&mut Conn::Pg(tx))),
            Conn::Sqlite(c) => c.immediate_transaction(|tx| f(&mut Conn::Sqlite(tx))),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "DATABASE_URL {0:?} is neither a PostgreSQL URL (postgres://user@host:port/database) nor an SQLite one (sqlite://path/to/file.db)"
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

/// Connects (creating the database if it does not exist), migrates, and
/// returns a pool.
pub fn setup(settings: &Settings) -> Result<DbPool, SetupError> {
    let url = settings.database_url.clone();
    let shown = redact(&url);
    let migrate_error = |reason: String| SetupError::Migrate {
        url: shown.clone(),
        reason,
    };
    let connect_error = |e: r2d2::Error| SetupError::Connect {
        url: shown.clone(),
        reason: e.to_string(),
    };
    let pool = match Target::parse(&url)? {
        Target::Postgres(url) => {
            let mut conn = connect_or_create(&url)?;
            migrate(&mut Conn::Pg(&mut conn)).map_err(migrate_error)?;
            DbPool::Pg(
                pool_builder(settings)
                    .build(PgManager(ConnectionManager::new(url)))
                    .map_err(connect_error)?,
            )
        }
        Target::Sqlite(path) => {
            let pool = pool_builder(settings)
                .connection_customizer(Box::new(SqlitePragmas))
                .build(ConnectionManager::new(path.to_string_lossy()))
                .map_err(connect_error)?;
            let mut conn = pool.get().map_err(connect_error)?;
            migrate(&mut Conn::Sqlite(&mut conn)).map_err(migrate_error)?;
            DbPool::Sqlite(pool)
        }
    };
    Ok(pool)
}

fn pool_builder<M: r2d2::ManageConnection>(settings: &Settings) -> r2d2::Builder<M> {
    Pool::builder()
        .max_size(settings.pool_size)
        .connection_timeout(settings.pool_timeout)
        .test_on_check_out(true)
}

/// A connection that sat in the pool longer than this is checked with a
/// `SELECT 1` before it is handed out.
pub const PG_IDLE_BEFORE_CHECK: Duration = Duration::from_millis(500);

/// Diesel's PostgreSQL connection manager, with a cheaper checkout check.
///
/// Diesel marks a connection broken only when its transaction state is bad,
/// so a connection the database closed (a restart, `pg_terminate_backend`)
/// would be handed out again and again. Checking every checkout with a
/// `SELECT 1` finds those but costs a round trip per request. A connection
/// in steady use was just proven alive by its last request, and one that
/// fails mid-use is marked broken by Diesel's prepared-statement handling;
/// so only connections idle for a while are checked.
#[derive(Debug)]
pub struct PgManager(ConnectionManager<PgConnection>);

pub struct PgPooled {
    conn: PgConnection,
    returned: std::time::Instant,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgPooled;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<PgPooled, Self::Error> {
        Ok(PgPooled {
            conn: self.0.connect()?,
            returned: std::time::Instant::now(),
        })
    }

    fn is_valid(&self, pooled: &mut PgPooled) -> Result<(), Self::Error> {
        if pooled.returned.elapsed() < PG_IDLE_BEFORE_CHECK {
            Ok(())
        } else {
            self.0.is_valid(&mut pooled.conn)
        }
    }

    fn has_broken(&self, pooled: &mut PgPooled) -> bool {
        pooled.returned = std::time::Instant::now();
        self.0.has_broken(&mut pooled.conn)
    }
}

/// Every SQLite connection: wait for the write lock instead of failing,
/// enforce foreign keys, and use the write-ahead log so readers never block
/// on the writer (a replay's read does not wait for an open transaction).
#[derive(Debug)]
struct SqlitePragmas;

impl CustomizeConnection<SqliteConnection, diesel::r2d2::Error> for SqlitePragmas {
    fn on_acquire(&self, conn: &mut SqliteConnection) -> Result<(), diesel::r2d2::Error> {
        use diesel::connection::SimpleConnection;
        conn.batch_execute(&format!(
            "PRAGMA busy_timeout = {}; PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
            SQLITE_BUSY_TIMEOUT.as_millis()
        ))
        .map_err(diesel::r2d2::Error::QueryError)
    }
}

/// A connection from the pool, waiting at most the pool's timeout (then
/// `ApiError::Unavailable`, a 503). Call it inside `web::block`: it blocks.
pub fn checkout(pool: &DbPool) -> Result<DbConn, crate::problem::ApiError> {
    let started = std::time::Instant::now();
    let conn = pool.get();
    crate::metrics::observe_pool_wait(started.elapsed(), conn.is_err());
    Ok(conn?)
}

/// Runs the pending migrations of the connection's backend. On PostgreSQL
/// under a session advisory lock, so several instances starting at once on
/// one database take turns instead of racing (SQLite's write lock does that).
pub fn migrate(conn: &mut Conn<'_>) -> Result<Vec<String>, String> {
    let names = |applied: Vec<diesel::migration::MigrationVersion>| {
        applied.iter().map(|m| m.to_string()).collect()
    };
    match conn {
        Conn::Pg(conn) => {
            const LOCK: i64 = 0x0063_6861_7267_6573; // "charges" in ASCII
            let lock = |conn: &mut PgConnection, sql: &str| {
                diesel::sql_query(sql)
                    .bind::<diesel::sql_types::BigInt, _>(LOCK)
                    .execute(conn)
                    .map_err(|e| e.to_string())
            };
            lock(conn, "SELECT pg_advisory_lock($1)")?;
            let applied = conn
                .run_pending_migrations(PG_MIGRATIONS)
                .map(names)
                .map_err(|e| e.to_string());
            lock(conn, "SELECT pg_advisory_unlock($1)")?;
            applied
        }
        Conn::Sqlite(conn) => conn
            .run_pending_migrations(SQLITE_MIGRATIONS)
            .map(names)
            .map_err(|e| e.to_string()),
    }
}

/// `charges migrate` and `purge-expired`: one connection to either backend.
pub fn connect(url: &str) -> Result<AnyConnection, SetupError> {
    match Target::parse(url)? {
        Target::Postgres(url) => Ok(AnyConnection::Pg(connect_or_create(&url)?)),
        Target::Sqlite(path) => {
            let mut conn = SqliteConnection::establish(&path.to_string_lossy()).map_err(|e| {
                SetupError::Connect {
                    url: url.to_owned(),
                    reason: one_line(&e.to_string()),
                }
            })?;
            SqlitePragmas
                .on_acquire(&mut conn)
                .map_err(|e| SetupError::Connect {
                    url: url.to_owned(),
                    reason: e.to_string(),
                })?;
            Ok(AnyConnection::Sqlite(conn))
        }
    }
}

/// An owned connection of either backend.
pub enum AnyConnection {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

impl AnyConnection {
    pub fn conn(&mut self) -> Conn<'_> {
        match self {
            AnyConnection::Pg(c) => Conn::Pg(c),
            AnyConnection::Sqlite(c) => Conn::Sqlite(c),
        }
    }
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

/// The URL with every password replaced by `***`, for messages and logs:
/// the one in `user:password@` and `password=` (or `sslpassword=`) in the
/// query string. Written by hand rather than with a URL parser, so that a
/// libpq multi-host URL (`host1:5432,host2:5432`), which is no valid URL,
/// is redacted too.
pub fn redact(url: &str) -> String {
    let (before_fragment, fragment) = match url.find('#') {
        Some(i) => url.split_at(i),
        None => (url, ""),
    };
    let (base, query) = match before_fragment.find('?') {
        Some(i) => (&before_fragment[..i], Some(&before_fragment[i + 1..])),
        None => (before_fragment, None),
    };
    let mut out = String::with_capacity(url.len());
    match base.find("://") {
        Some(scheme_end) => {
            let authority_start = scheme_end + 3;
            let authority_end = base[authority_start..]
                .find('/')
                .map_or(base.len(), |i| authority_start + i);
            let authority = &base[authority_start..authority_end];
            out.push_str(&base[..authority_start]);
            match authority.rfind('@') {
                Some(at) => {
                    let userinfo = &authority[..at];
                    match userinfo.find(':') {
                        Some(colon) => {
                            out.push_str(&userinfo[..colon]);
                            out.push_str(":***");
                        }
                        None => out.push_str(userinfo),
                    }
                    out.push_str(&authority[at..]);
                }
                None => out.push_str(authority),
            }
            out.push_str(&base[authority_end..]);
        }
        None => out.push_str(base),
    }
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _))
                    if name.eq_ignore_ascii_case("password")
                        || name.eq_ignore_ascii_case("sslpassword") =>
                {
                    format!("{name}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out.push_str(fragment);
    out
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A statement whose SQL text is the same every time it runs: no optional
/// parts, no IN lists. Diesel never caches upserts, UPDATEs or SQL literals
/// as prepared statements, because in general their text can vary; ours
/// cannot, and wrapping them lets PostgreSQL plan them once per connection
/// instead of on every request (the cache is keyed by the SQL text). Run it
/// with `get_result`/`load`: Diesel's `execute` path ignores the wrapper.
#[derive(Debug, Clone, Copy)]
pub struct Prepared<Q>(pub Q);

impl<Q> diesel::query_builder::QueryId for Prepared<Q> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<Q: diesel::query_builder::Query> diesel::query_builder::Query for Prepared<Q> {
    type SqlType = Q::SqlType;
}

impl<Q, DB> diesel::query_builder::QueryFragment<DB> for Prepared<Q>
where
    DB: diesel::backend::Backend,
    Q: diesel::query_builder::QueryFragment<DB>,
{
    fn walk_ast<'b>(&'b self, pass: diesel::query_builder::AstPass<'_, 'b, DB>) -> QueryResult<()> {
        self.0.walk_ast(pass)
    }

    fn is_safe_to_cache_prepared(&self, _backend: &DB) -> QueryResult<bool> {
        Ok(true)
    }
}

impl<Q, Conn> RunQueryDsl<Conn> for Prepared<Q> {}

/// A time as fixed-width RFC 3339 UTC with microseconds, e.g.
/// `2026-12-02T14:47:33.173074Z`: how the API shows times, and how SQLite
/// stores them (fixed width, so text order is time order).
pub fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

pub fn parse_sqlite_time(text: &str) -> QueryResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
}

pub fn parse_uuid(text: &str) -> QueryResult<Uuid> {
    Uuid::parse_str(text).map_err(|e| diesel::result::Error::DeserializationError(Box::new(e)))
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

/// A charge row as SQLite returns it (TEXT ids and times).
#[derive(QueryableByName)]
struct SqliteCharge {
    #[diesel(sql_type = diesel::sql_types::Text)]
    id: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    account_id: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    amount: i64,
    #[diesel(sql_type = diesel::sql_types::Text)]
    currency: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    description: Option<String>,
    #[diesel(sql_type = diesel::sql_types::Text)]
    created_at: String,
}

impl SqliteCharge {
    fn into_charge(self) -> QueryResult<Charge> {
        Ok(Charge {
            id: parse_uuid(&self.id)?,
            account_id: self.account_id,
            amount: self.amount,
            currency: self.currency,
            description: self.description,
            created_at: parse_sqlite_time(&self.created_at)?,
        })
    }
}

const SQLITE_CHARGE_COLUMNS: &str = "id, account_id, amount, currency, description, created_at";

pub fn insert_charge(conn: &mut Conn<'_>, account_id: i64, new: &NewCharge) -> QueryResult<Charge> {
    use diesel::sql_types::{BigInt, Nullable, Text};
    let id = Uuid::new_v4();
    let description = new.description.as_ref().map(|d| d.as_str());
    match conn {
        Conn::Pg(c) => diesel::insert_into(charges::table)
            .values((
                charges::id.eq(id),
                charges::account_id.eq(account_id),
                charges::amount.eq(new.amount.get()),
                charges::currency.eq(new.currency.code()),
                charges::description.eq(description),
            ))
            .returning(Charge::as_returning())
            .get_result(*c),
        Conn::Sqlite(c) => diesel::sql_query(format!(
            "INSERT INTO charges ({SQLITE_CHARGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) RETURNING {SQLITE_CHARGE_COLUMNS}"
        ))
        .bind::<Text, _>(id.to_string())
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(new.amount.get())
        .bind::<Text, _>(new.currency.code())
        .bind::<Nullable<Text>, _>(description)
        .bind::<Text, _>(time_text(Utc::now()))
        .get_result::<SqliteCharge>(*c)?
        .into_charge(),
    }
}

pub fn find_charge(conn: &mut Conn<'_>, account_id: i64, id: Uuid) -> QueryResult<Option<Charge>> {
    use diesel::sql_types::{BigInt, Text};
    match conn {
        Conn::Pg(c) => charges::table
            .filter(charges::id.eq(id))
            .filter(charges::account_id.eq(account_id))
            .select(Charge::as_select())
            .first(*c)
            .optional(),
        Conn::Sqlite(c) => diesel::sql_query(format!(
            "SELECT {SQLITE_CHARGE_COLUMNS} FROM charges WHERE id = ? AND account_id = ?"
        ))
        .bind::<Text, _>(id.to_string())
        .bind::<BigInt, _>(account_id)
        .get_result::<SqliteCharge>(*c)
        .optional()?
        .map(SqliteCharge::into_charge)
        .transpose(),
    }
}

pub fn list_charges(conn: &mut Conn<'_>, account_id: i64, limit: i64) -> QueryResult<Vec<Charge>> {
    use diesel::sql_types::BigInt;
    match conn {
        Conn::Pg(c) => charges::table
            .filter(charges::account_id.eq(account_id))
            .order((charges::created_at.desc(), charges::id.desc()))
            .limit(limit)
            .select(Charge::as_select())
            .load(*c),
        Conn::Sqlite(c) => diesel::sql_query(format!(
            "SELECT {SQLITE_CHARGE_COLUMNS} FROM charges WHERE account_id = ? ORDER BY created_at DESC, id DESC LIMIT ?"
        ))
        .bind::<BigInt, _>(account_id)
        .bind::<BigInt, _>(limit)
        .load::<SqliteCharge>(*c)?
        .into_iter()
        .map(SqliteCharge::into_charge)
        .collect(),
    }
}

pub fn ping(conn: &mut Conn<'_>) -> QueryResult<()> {
    match conn {
        Conn::Pg(c) => diesel::sql_query("SELECT 1").execute(*c).map(|_| ()),
        Conn::Sqlite(c) => diesel::sql_query("SELECT 1").execute(*c).map(|_| ()),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_redacted_in_the_userinfo_and_the_query() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/charges"),
            "postgres://app:***@db:5432/charges"
        );
        assert_eq!(
            redact("postgres://app@db/charges?password=s3cret&sslmode=require"),
            "postgres://app@db/charges?password=***&sslmode=require"
        );
        assert_eq!(
            redact("postgresql://db/charges?sslmode=verify-full&sslpassword=pw"),
            "postgresql://db/charges?sslmode=verify-full&sslpassword=***"
        );
    }

    #[test]
    fn a_multi_host_url_is_redacted_too() {
        assert_eq!(
            redact(
                "postgres://app:pw@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write"
            ),
            "postgres://app:***@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write"
        );
    }

    #[test]
    fn urls_without_passwords_are_unchanged() {
        for url in [
            "postgres://postgres@127.0.0.1:5432/postgres",
            "sqlite://charges.db",
            "postgres://db/x?sslmode=disable",
            "postgres://user%40x@db/x",
        ] {
            assert_eq!(redact(url), url);
        }
    }

    #[test]
    fn a_password_containing_at_signs_is_hidden_whole() {
        assert_eq!(
            redact("postgres://app:p@ss@db/x"),
            "postgres://app:***@db/x"
        );
    }
}
