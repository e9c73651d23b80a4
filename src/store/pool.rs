//! The pool's edge: the one place that knows which backend a `DATABASE_URL`
//! names. It parses the URL, creates a missing PostgreSQL database, builds
//! the connection pool, and hands out connections as `&mut dyn Store`.

use std::cell::Cell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use diesel::Connection as _;
use diesel::RunQueryDsl;
use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel::sqlite::SqliteConnection;

use super::Store;

thread_local! {
    /// The connection this thread holds must not go back into the pool: a
    /// query found it lost (dead, cut by the server, or now read-only), or
    /// the request it served ran out of time and its state is unknown. The
    /// pool reads it when the connection comes back (on the same thread: a
    /// connection is used by one blocking closure at a time).
    static DISCARD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the connection this thread holds to be dropped, not reused, when it
/// returns to the pool.
pub fn discard_connection() {
    DISCARD.with(|d| d.set(true));
}

fn take_discard() -> bool {
    DISCARD.with(|d| d.replace(false))
}

/// libpq's settings added to a PostgreSQL URL that does not set them: a
/// connection attempt gives up after 5 s, and an idle connection whose peer
/// went away is noticed within about 25 s (keepalives), or 10 s after data
/// went unacknowledged (`tcp_user_timeout`). A server that is frozen but
/// whose kernel still answers TCP is noticed by none of these: only the
/// request deadline (`DbPool::run`) bounds that.
pub const PG_URL_DEFAULTS: &[(&str, &str)] = &[
    ("connect_timeout", "5"),
    ("keepalives", "1"),
    ("keepalives_idle", "10"),
    ("keepalives_interval", "5"),
    ("keepalives_count", "3"),
    ("tcp_user_timeout", "10000"),
];

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
        // libpq reads the URL itself, including multi-host ones
        // (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`),
        // which are no valid URL to a URL parser: only the scheme is ours to check.
        let postgres = ["postgres://", "postgresql://"].iter().any(|scheme| {
            url.len() > scheme.len()
                && url
                    .get(..scheme.len())
                    .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
        });
        if postgres && malformed_userinfo(url) {
            Err(SetupError::MalformedUserinfo(redact(url)))
        } else if postgres {
            Ok(Target::Postgres(url.to_owned()))
        } else {
            Err(SetupError::BadUrl(redact(url)))
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "DATABASE_URL {0:?} is neither a PostgreSQL URL (postgres://user@host:port/database) nor an SQLite one (sqlite://path/to/file.db)"
    )]
    BadUrl(String),
    #[error(
        "DATABASE_URL {0} is malformed: its user name or password holds a '/' or an '@', which a URL must write as %2F and %40 (the whole user information is hidden here)"
    )]
    MalformedUserinfo(String),
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

/// What the pool is built from.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub url: String,
    pub size: u32,
    /// How long a checkout waits for a free connection.
    pub timeout: Duration,
    /// PostgreSQL `statement_timeout` on every connection.
    pub statement_timeout: Duration,
    /// PostgreSQL `lock_timeout`; SQLite's busy timeout.
    pub lock_timeout: Duration,
    /// PostgreSQL `idle_in_transaction_session_timeout`.
    pub idle_in_transaction_timeout: Duration,
}

/// The command line's SQLite connection waits this long for the write lock
/// (a running server may hold it).
const CLI_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// A pool of either backend's connections.
#[derive(Clone)]
pub enum DbPool {
    Pg(Pool<PgManager>),
    Sqlite(Pool<SqliteManager>),
}

/// A connection checked out of the pool, returned to it on drop.
pub enum PooledStore {
    Pg(PooledConnection<PgManager>),
    Sqlite(PooledConnection<SqliteManager>),
}

/// Why [`DbPool::run`] did not run its work to the end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Pool(#[from] PoolTimeout),
    /// The database did not answer in time: the work may still complete, or
    /// not; its connection will not be reused.
    #[error("the database did not answer within {0:?}")]
    Deadline(Duration),
    #[error("the database work panicked")]
    Panicked,
}

/// No connection became free within the pool's timeout (or none could be
/// opened): the database is unreachable or busy.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct PoolTimeout(#[from] pub r2d2::Error);

impl DbPool {
    /// Connects (creating the database if it does not exist), migrates, and
    /// returns a pool.
    pub fn open(settings: &PoolSettings) -> Result<DbPool, SetupError> {
        DbPool::build(settings, true)
    }

    /// Another pool on the database [`open`](Self::open) has migrated: its
    /// own connections, so that what runs on it cannot take this one's.
    pub fn sibling(&self, settings: &PoolSettings) -> Result<DbPool, SetupError> {
        DbPool::build(settings, false)
    }

    fn build(settings: &PoolSettings, main: bool) -> Result<DbPool, SetupError> {
        let migrate = main;
        let shown = redact(&settings.url);
        let migrate_error = |reason: String| SetupError::Migrate {
            url: shown.clone(),
            reason: redact_message(&reason, &settings.url),
        };
        let connect_error = |e: r2d2::Error| SetupError::Connect {
            url: shown.clone(),
            reason: redact_message(&e.to_string(), &settings.url),
        };
        fn builder<M: r2d2::ManageConnection>(
            settings: &PoolSettings,
            main: bool,
        ) -> r2d2::Builder<M> {
            Pool::builder()
                .max_size(settings.size)
                // Opened as needed, one kept idle: a server and the pools
                // beside it (the demo's, a network's) take only what they use.
                .min_idle(Some(if main { 1 } else { 0 }))
                .connection_timeout(settings.timeout)
                .test_on_check_out(true)
        }
        match Target::parse(&settings.url)? {
            Target::Postgres(url) => {
                init_openssl();
                let url = with_pg_defaults(&url);
                if migrate {
                    connect_or_create(&url)?.migrate().map_err(migrate_error)?;
                }
                let manager = PgManager {
                    inner: ConnectionManager::new(url),
                    session: format!(
                        "SET statement_timeout = {}; SET lock_timeout = {}; SET idle_in_transaction_session_timeout = {};",
                        settings.statement_timeout.as_millis(),
                        settings.lock_timeout.as_millis(),
                        settings.idle_in_transaction_timeout.as_millis()
                    ),
                };
                Ok(DbPool::Pg(
                    builder(settings, main)
                        .build(manager)
                        .map_err(connect_error)?,
                ))
            }
            Target::Sqlite(path) => {
                // Migrated on one connection first, as on PostgreSQL: that
                // also switches a new file to WAL once, before the pool opens
                // its connections at once (a switch racing others fails with
                // "database is locked" without waiting).
                if migrate {
                    Connection::open(&settings.url)?
                        .store()
                        .migrate()
                        .map_err(migrate_error)?;
                }
                let manager = SqliteManager {
                    inner: ConnectionManager::new(path.to_string_lossy()),
                    busy_timeout: settings.lock_timeout,
                };
                let pool = builder(settings, main)
                    .build(manager)
                    .map_err(connect_error)?;
                Ok(DbPool::Sqlite(pool))
            }
        }
    }

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

    /// Runs `work` on a connection of the pool, on the blocking thread pool,
    /// and gives up waiting for it after `deadline`: a database that stops
    /// answering without closing its connections (frozen, or behind a path
    /// that drops packets) is noticed by nothing else. The work's thread
    /// stays blocked until the database answers, but its connection is then
    /// dropped, not reused (its state is unknown), so the threads stuck at
    /// once are at most the pool's size; a thread still waiting for a
    /// checkout gives up after the pool's timeout.
    pub async fn run<T, E>(
        &self,
        deadline: Duration,
        work: impl FnOnce(&mut dyn Store) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<RunError> + Send + 'static,
    {
        self.run_checkouts(deadline, move |checkouts| checkouts.with(work))
            .await
    }

    /// Runs `work` on the blocking thread pool, as [`run`](Self::run) does,
    /// but without a connection: `work` checks one out for each of its
    /// steps ([`Checkouts::with`]) and gives it back in between, so that it
    /// can wait on something else (a call to another service, a concurrent
    /// request) holding none.
    pub async fn run_checkouts<T, E>(
        &self,
        deadline: Duration,
        work: impl FnOnce(&mut Checkouts) -> Result<T, E> + Send + 'static,
    ) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<RunError> + Send + 'static,
    {
        let abandoned = Arc::new(AtomicBool::new(false));
        let mut checkouts = Checkouts {
            pool: self.clone(),
            late: abandoned.clone(),
            until: Instant::now() + deadline,
        };
        let task = tokio::task::spawn_blocking(move || work(&mut checkouts));
        match tokio::time::timeout(deadline, task).await {
            Ok(Ok(done)) => done,
            Ok(Err(_)) => Err(RunError::Panicked.into()),
            Err(_) => {
                abandoned.store(true, Ordering::SeqCst);
                crate::metrics::METRICS.deadlines_exceeded.inc();
                Err(RunError::Deadline(deadline).into())
            }
        }
    }

    /// A connection, waiting at most the pool's timeout. It blocks: call it
    /// on the blocking thread pool (as [`run`](Self::run) does).
    pub fn checkout(&self) -> Result<PooledStore, PoolTimeout> {
        let started = Instant::now();
        let conn = match self {
            DbPool::Pg(p) => p.get().map(PooledStore::Pg),
            DbPool::Sqlite(p) => p.get().map(PooledStore::Sqlite),
        };
        crate::metrics::observe_pool_wait(started.elapsed(), conn.is_err());
        Ok(conn?)
    }
}

/// A blocking task's way to the pool ([`DbPool::run_checkouts`]): one
/// connection at a time, each given back when its step returns.
pub struct Checkouts {
    pool: DbPool,
    /// Set when the task's caller stopped waiting for it: a connection it
    /// still uses then is dropped, not reused (its state is unknown).
    late: Arc<AtomicBool>,
    until: Instant,
}

impl Checkouts {
    /// Runs `work` on a connection checked out for it (waiting at most the
    /// pool's timeout), and gives the connection back.
    pub fn with<T, E: From<RunError>>(
        &mut self,
        work: impl FnOnce(&mut dyn Store) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.pool.checkout().map_err(RunError::from)?;
        let done = work(conn.store());
        if self.late.load(Ordering::SeqCst) {
            discard_connection();
        }
        done
    }

    /// When the task's caller stops waiting for it (the request's deadline).
    pub fn until(&self) -> Instant {
        self.until
    }
}

impl PooledStore {
    pub fn store(&mut self) -> &mut dyn Store {
        match self {
            PooledStore::Pg(c) => &mut c.conn,
            PooledStore::Sqlite(c) => &mut **c,
        }
    }
}

/// One connection of either backend, outside any pool: the command line's.
pub enum Connection {
    Pg(PgConnection),
    Sqlite(SqliteConnection),
}

impl Connection {
    /// Connects to `url` (creating a missing PostgreSQL database).
    pub fn open(url: &str) -> Result<Connection, SetupError> {
        match Target::parse(url)? {
            Target::Postgres(url) => {
                Ok(Connection::Pg(connect_or_create(&with_pg_defaults(&url))?))
            }
            Target::Sqlite(path) => {
                let connect_error = |reason: String| SetupError::Connect {
                    url: redact(url),
                    reason,
                };
                let mut conn = SqliteConnection::establish(&path.to_string_lossy())
                    .map_err(|e| connect_error(one_line(&e.to_string())))?;
                sqlite_pragmas(&mut conn, CLI_BUSY_TIMEOUT)
                    .map_err(|e| connect_error(e.to_string()))?;
                Ok(Connection::Sqlite(conn))
            }
        }
    }

    pub fn store(&mut self) -> &mut dyn Store {
        match self {
            Connection::Pg(c) => c,
            Connection::Sqlite(c) => c,
        }
    }
}

/// A connection that sat in the pool longer than this is checked with a
/// `SELECT 1` before it is handed out.
pub const PG_IDLE_BEFORE_CHECK: Duration = Duration::from_millis(500);

/// Diesel's PostgreSQL connection manager, with the session's timeouts set
/// on every new connection and a cheaper checkout check.
///
/// Diesel marks a connection broken only when its transaction state is bad,
/// so a connection the database closed (a restart, `pg_terminate_backend`)
/// would be handed out again and again. Checking every checkout with a
/// `SELECT 1` finds those but costs a round trip per request. A connection
/// in steady use was just proven alive by its last request, and one that
/// fails mid-use is marked for discarding (see [`discard_connection`]); so
/// only connections idle for a while are checked.
#[derive(Debug)]
pub struct PgManager {
    inner: ConnectionManager<PgConnection>,
    /// `SET statement_timeout …; SET lock_timeout …; …`
    session: String,
}

pub struct PgPooled {
    conn: PgConnection,
    returned: std::time::Instant,
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgPooled;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<PgPooled, Self::Error> {
        use diesel::connection::SimpleConnection;
        let mut conn = self.inner.connect()?;
        conn.batch_execute(&self.session)
            .map_err(diesel::r2d2::Error::QueryError)?;
        Ok(PgPooled {
            conn,
            returned: std::time::Instant::now(),
        })
    }

    fn is_valid(&self, pooled: &mut PgPooled) -> Result<(), Self::Error> {
        if pooled.returned.elapsed() < PG_IDLE_BEFORE_CHECK {
            Ok(())
        } else {
            self.inner.is_valid(&mut pooled.conn)
        }
    }

    /// Also broken: a connection marked for discarding (lost, or its request
    /// ran out of time). Dropped here, it is replaced by a new one, which
    /// libpq opens on the host that is the primary now
    /// (`target_session_attrs=read-write`).
    fn has_broken(&self, pooled: &mut PgPooled) -> bool {
        pooled.returned = std::time::Instant::now();
        take_discard() || self.inner.has_broken(&mut pooled.conn)
    }
}

/// Diesel's SQLite connection manager, with our pragmas on every connection
/// and the same discarding as PostgreSQL's.
#[derive(Debug)]
pub struct SqliteManager {
    inner: ConnectionManager<SqliteConnection>,
    busy_timeout: Duration,
}

impl r2d2::ManageConnection for SqliteManager {
    type Connection = SqliteConnection;
    type Error = diesel::r2d2::Error;

    fn connect(&self) -> Result<SqliteConnection, Self::Error> {
        let mut conn = self.inner.connect()?;
        sqlite_pragmas(&mut conn, self.busy_timeout).map_err(diesel::r2d2::Error::QueryError)?;
        Ok(conn)
    }

    fn is_valid(&self, conn: &mut SqliteConnection) -> Result<(), Self::Error> {
        self.inner.is_valid(conn)
    }

    fn has_broken(&self, conn: &mut SqliteConnection) -> bool {
        take_discard() || self.inner.has_broken(conn)
    }
}

/// Every SQLite connection: wait for the write lock (up to `busy_timeout`)
/// instead of failing at once, enforce foreign keys, and use the write-ahead
/// log so readers never block on the writer (a replay's read does not wait
/// for an open transaction).
fn sqlite_pragmas(conn: &mut SqliteConnection, busy_timeout: Duration) -> diesel::QueryResult<()> {
    use diesel::connection::SimpleConnection;
    conn.batch_execute(&format!(
        "PRAGMA busy_timeout = {}; PRAGMA foreign_keys = ON; PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;",
        busy_timeout.as_millis()
    ))
}

/// `url` with each of [`PG_URL_DEFAULTS`] it does not set (a
/// `key=value` connection string is left as it is). The query starts where
/// libpq starts it: at the first '?' after the userinfo (up to an '@' before
/// the first '/'), which may hold a '?' or a '#' of the password; libpq has
/// no fragments.
pub fn with_pg_defaults(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + "://".len()..];
    let host_start = match (rest.find('@'), rest.find('/')) {
        (Some(at), Some(slash)) if at < slash => at + 1,
        (Some(at), None) => at + 1,
        _ => 0,
    };
    let query = rest[host_start..].split_once('?').map(|(_, q)| q);
    let present: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter_map(|pair| pair.split('=').next())
        .collect();
    let mut out = url.to_owned();
    let mut separator = if query.is_some() { '&' } else { '?' };
    for (name, value) in PG_URL_DEFAULTS {
        if !present.iter().any(|p| p.eq_ignore_ascii_case(name)) {
            out.push(separator);
            out.push_str(&format!("{name}={value}"));
            separator = '&';
        }
    }
    out
}

/// libpq's TLS is OpenSSL's, and OpenSSL by default frees its global state
/// in an `atexit` handler: a process that exits while other threads still
/// hold TLS connections then crashes in libcrypto (SIGSEGV after
/// "test result: ok" was seen in a test binary; openssl/openssl#3505).
/// Initialized first with `OPENSSL_INIT_NO_ATEXIT`, which is what
/// `openssl_sys::init` does, OpenSSL registers no such handler. Idempotent;
/// call it before libpq's first connection.
pub fn init_openssl() {
    openssl_sys::init();
}

/// Connects to `url`; if its database does not exist, creates it through the
/// server's `postgres` database first. For a multi-host URL (an HA
/// manager's), on the host that accepts writes: the administrative URL asks
/// libpq for `target_session_attrs=read-write` unless the URL chose already.
pub fn connect_or_create(url: &str) -> Result<PgConnection, SetupError> {
    init_openssl();
    let shown = redact(url);
    let reason = |e: &dyn std::fmt::Display| redact_message(&one_line(&e.to_string()), url);
    match PgConnection::establish(url) {
        Ok(conn) => Ok(conn),
        Err(e) if e.to_string().contains("does not exist") => {
            let Some((admin_url, name)) = admin_url(url) else {
                return Err(SetupError::Connect {
                    url: shown,
                    reason: reason(&e),
                });
            };
            let mut admin =
                PgConnection::establish(&admin_url).map_err(|e| SetupError::Connect {
                    url: shown.clone(),
                    reason: reason(&e),
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
                        reason: reason(&e),
                    });
                }
            }
            tracing::info!(database = %name, "created database");
            PgConnection::establish(url).map_err(|e| SetupError::Connect {
                url: shown,
                reason: reason(&e),
            })
        }
        Err(e) => Err(SetupError::Connect {
            url: shown,
            reason: reason(&e),
        }),
    }
}

/// The URL of the `postgres` database on the server(s) `url` names, and
/// the database `url` names: `scheme://[userinfo@]hosts/name[?query]`, read
/// by hand, since a multi-host URL is no URL to a URL parser. The query is
/// kept, with `target_session_attrs=read-write` added unless it has one, so
/// that of several hosts the primary is the one asked. `None`: no name.
fn admin_url(url: &str) -> Option<(String, String)> {
    let scheme_end = url.find("://")? + "://".len();
    let rest = &url[scheme_end..];
    // The userinfo ends at the last '@' before the path (a password may hold
    // '/' or '?' only percent-encoded in a URL libpq reads).
    let hosts_start = rest[..rest.find('/').unwrap_or(rest.len())]
        .rfind('@')
        .map_or(0, |at| at + 1);
    let path_start = hosts_start + rest[hosts_start..].find('/')?;
    let (path, query) = match rest[path_start..].split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (&rest[path_start..], None),
    };
    let name = path.trim_start_matches('/');
    if name.is_empty() {
        return None;
    }
    let mut admin = format!("{}{}/postgres", &url[..scheme_end], &rest[..path_start]);
    let mut separator = '?';
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        admin.push('?');
        admin.push_str(query);
        separator = '&';
    }
    let chose = query.is_some_and(|q| {
        q.split('&')
            .any(|pair| pair.split('=').next() == Some("target_session_attrs"))
    });
    if !chose {
        admin.push(separator);
        admin.push_str("target_session_attrs=read-write");
    }
    Some((admin, name.to_owned()))
}

/// `DATABASE_URL` with every password replaced by `***`, for messages and
/// logs, in each form libpq reads: a URL's `user:password@` and its
/// `password=` or `sslpassword=` query parameters (in any case, the name
/// percent-decoded as libpq decodes it), and the same keywords in a
/// `key=value` connection string (`host=db password='se cret'`), including a
/// URL given there as `dbname`. Written by hand rather than with a URL
/// parser, so that what no URL parser accepts is redacted too: a libpq
/// multi-host URL (`host1:5432,host2:5432`), or a password with an unencoded
/// `@`, `#`, `/` or `?` (libpq fails on some of these, and its error is
/// exactly where the URL would be printed). When in doubt it hides more: in
/// `postgres://h:5432/db?user=a@b` everything between `:` and the last `@`.
pub fn redact(url: &str) -> String {
    redact_collecting(url, &mut Vec::new())
}

/// `message`, an error about `url`, with each of the URL's secrets replaced
/// by `***`, and any quoted text that is part of one: libpq quotes what it
/// could not read (`invalid integer value "pa" for connection option
/// "port"` for `postgres://u:pa/ss@h/db`), which may be a piece of a password.
pub fn redact_message(message: &str, url: &str) -> String {
    let mut secrets = Vec::new();
    redact_collecting(url, &mut secrets);
    secrets.retain(|s| !s.is_empty());
    let mut out = String::with_capacity(message.len());
    let mut parts = message.split('"').peekable();
    let mut quoted = false;
    while let Some(part) = parts.next() {
        // Inside quotes only if the quote closes.
        if quoted
            && parts.peek().is_some()
            && !part.is_empty()
            && secrets.iter().any(|s| s.contains(part))
        {
            out.push_str("***");
        } else {
            out.push_str(part);
        }
        if parts.peek().is_some() {
            out.push('"');
        }
        quoted = !quoted;
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in &secrets {
        out = out.replace(secret.as_str(), "***");
    }
    out
}

/// [`redact`], adding each value it hides to `secrets`.
fn redact_collecting(url: &str, secrets: &mut Vec<String>) -> String {
    match url.find("://") {
        Some(i) if is_scheme(&url[..i]) => redact_url(url, i + "://".len(), secrets),
        _ => redact_conninfo(url, secrets),
    }
}

const SECRET_KEYWORDS: [&str; 2] = ["password", "sslpassword"];

fn is_secret_keyword(name: &str) -> bool {
    SECRET_KEYWORDS
        .iter()
        .any(|k| k.eq_ignore_ascii_case(name.trim()))
}

fn is_scheme(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// `url` whose authority starts at `start`.
fn redact_url(url: &str, start: usize, secrets: &mut Vec<String>) -> String {
    let rest = &url[start..];
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..start]);
    let host_start = userinfo_end(rest).map(|at| at + 1);
    let after_userinfo = match host_start {
        Some(host_start) => {
            let userinfo = &rest[..host_start - 1];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                    let password = &userinfo[colon + 1..];
                    secrets.extend([password.to_owned(), percent_decode(password)]);
                }
                None => out.push_str(userinfo),
            }
            out.push('@');
            &rest[host_start..]
        }
        None => rest,
    };
    // libpq has no fragments: a '#' after the '?' is part of a value.
    match after_userinfo.split_once('?') {
        Some((host_and_path, query)) => {
            out.push_str(host_and_path);
            out.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) if is_secret_keyword(&percent_decode(name)) => {
                        secrets.extend([value.to_owned(), percent_decode(value)]);
                        format!("{name}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
        }
        None => out.push_str(after_userinfo),
    }
    out
}

/// Where the userinfo of `authority_on` (a URL after its `scheme://`) ends:
/// the last '@' before the query (the first '?' after the first '@'), so
/// that a password holding '@', '/', '?' or '#' is hidden whole, and so is
/// everything up to the host of a URL that is malformed that way.
fn userinfo_end(authority_on: &str) -> Option<usize> {
    let first = authority_on.find('@')?;
    let query = authority_on[first..]
        .find('?')
        .map_or(authority_on.len(), |i| first + i);
    authority_on[..query].rfind('@')
}

/// Whether `url`'s user name or password holds a '/' or an '@' not written
/// as `%2F` / `%40`: libpq then reads part of the password as the host or
/// the database, and would name it in its error.
pub fn malformed_userinfo(url: &str) -> bool {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return false;
    };
    let rest = &url[start..];
    userinfo_end(rest).is_some_and(|end| rest[..end].contains(['/', '@']))
}

/// `%XX` decoded (as libpq decodes a URL's parameter names); anything else,
/// a malformed escape included, as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap() * 16 + hex(l).unwrap()) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A libpq `key=value` connection string, its secret values as `***`:
/// values are single-quoted (`\'` and `\\` escaped inside) or end at white
/// space (a backslash escapes the next character). A secret keyword not
/// followed by `=` (libpq's error) still has the next word hidden.
fn redact_conninfo(conninfo: &str, secrets: &mut Vec<String>) -> String {
    let mut out = String::with_capacity(conninfo.len());
    let mut rest = conninfo;
    loop {
        let word = rest.trim_start();
        out.push_str(&rest[..rest.len() - word.len()]);
        if word.is_empty() {
            return out;
        }
        let keyword_len = word
            .find(|c: char| c == '=' || c.is_whitespace())
            .unwrap_or(word.len());
        let (keyword, after) = word.split_at(keyword_len);
        out.push_str(keyword);
        // `keyword = value`: white space around '=' is allowed.
        let trimmed = after.trim_start();
        let (separator, value) = match trimmed.strip_prefix('=') {
            Some(v) => {
                let value = v.trim_start();
                (&after[..after.len() - value.len()], value)
            }
            None if is_secret_keyword(keyword) => (&after[..after.len() - trimmed.len()], trimmed),
            None => {
                rest = after;
                continue;
            }
        };
        out.push_str(separator);
        let value_len = conninfo_value_len(value);
        let raw = &value[..value_len];
        if is_secret_keyword(keyword) {
            out.push_str("***");
            secrets.push(raw.to_owned());
            let unquoted = raw.strip_prefix('\'').unwrap_or(raw);
            secrets.push(unquoted.strip_suffix('\'').unwrap_or(unquoted).to_owned());
        } else if raw.contains("://") {
            // libpq reads a `dbname` that is a URL as that URL.
            match raw.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
                Some(inner) => out.push_str(&format!("'{}'", redact_collecting(inner, secrets))),
                None => out.push_str(&redact_collecting(raw, secrets)),
            }
        } else {
            out.push_str(raw);
        }
        rest = &value[value_len..];
    }
}

/// The length of the value at the start of `s`, quotes and escapes included.
fn conninfo_value_len(s: &str) -> usize {
    let quoted = s.starts_with('\'');
    let mut chars = s.char_indices().skip(usize::from(quoted));
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '\'' if quoted => return i + 1,
            c if !quoted && c.is_whitespace() => return i,
            _ => {}
        }
    }
    s.len()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn everything_up_to_the_last_at_before_the_host_is_secret_and_such_a_url_malformed() {
        use super::{Target, malformed_userinfo};
        for (url, shown) in [
            (
                "postgres://app:p@ss/word@db.example:5432/charges",
                "postgres://app:***@db.example:5432/charges",
            ),
            (
                "postgres://app:pa/ss@h/db?sslmode=require",
                "postgres://app:***@h/db?sslmode=require",
            ),
            (
                "postgres://app:a@b@h/db?application_name=x@y",
                "postgres://app:***@h/db?application_name=x@y",
            ),
        ] {
            assert_eq!(redact(url), shown);
            assert!(malformed_userinfo(url), "{url}");
            let refused = Target::parse(url).unwrap_err().to_string();
            assert!(
                refused.contains("malformed") && refused.contains(shown),
                "{refused}"
            );
            for piece in ["ss/word", "pa/ss", "p@ss", "a@b"] {
                assert!(!refused.contains(piece), "{refused}");
            }
        }
        for fine in [
            "postgres://app:p%40ss%2Fword@h/db",
            "postgres://app@h/db?application_name=x@y",
            "postgres://u@h1:5432,h2:5433/db",
            "postgres://u:pa?ss@h/db",
        ] {
            assert!(!malformed_userinfo(fine), "{fine}");
        }
        assert_eq!(
            redact("http://netuser:NetPass123@net.example:8090"),
            "http://netuser:***@net.example:8090"
        );
    }

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
    fn the_defaults_go_where_libpq_reads_the_query() {
        use super::with_pg_defaults;
        let defaults = "connect_timeout=5&keepalives=1&keepalives_idle=10&keepalives_interval=5&keepalives_count=3&tcp_user_timeout=10000";
        for (url, with) in [
            ("postgres://u@h/db", format!("postgres://u@h/db?{defaults}")),
            (
                "postgres://u@h/db?sslmode=require",
                format!("postgres://u@h/db?sslmode=require&{defaults}"),
            ),
            // A '#' or '?' in the password is the password's.
            (
                "postgres://u:pa#ss@h/db",
                format!("postgres://u:pa#ss@h/db?{defaults}"),
            ),
            (
                "postgres://u:pa?ss@h/db",
                format!("postgres://u:pa?ss@h/db?{defaults}"),
            ),
            (
                "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
                format!(
                    "postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write&{defaults}"
                ),
            ),
            ("host=h password=x", "host=h password=x".to_owned()),
        ] {
            assert_eq!(with_pg_defaults(url), with, "{url}");
        }
        let set = with_pg_defaults("postgres://h/db?CONNECT_TIMEOUT=2&keepalives=0");
        assert!(
            set.starts_with("postgres://h/db?CONNECT_TIMEOUT=2&keepalives=0&keepalives_idle=10&"),
            "{set}"
        );
        assert_eq!(
            set.matches("connect_timeout").count() + set.matches("CONNECT_TIMEOUT").count(),
            1,
            "{set}"
        );
    }

    #[test]
    fn a_multi_host_url_is_a_postgresql_target() {
        let url = "postgres://app@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write";
        assert_eq!(
            super::Target::parse(url).unwrap(),
            super::Target::Postgres(url.to_owned())
        );
        assert!(super::Target::parse("mysql://db/x").is_err());
        assert!(super::Target::parse("postgres://").is_err());
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
    fn a_password_with_an_unencoded_hash_slash_or_question_mark_is_hidden_whole() {
        for (url, shown) in [
            ("postgres://u:pa#ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:pa?ss@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u:a/b?c#d@e@h:5432/db?sslmode=require",
                "postgres://u:***@h:5432/db?sslmode=require",
            ),
            (
                "postgresql://u:p#w@h1:5432,h2:5433/db",
                "postgresql://u:***@h1:5432,h2:5433/db",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn password_query_parameters_are_hidden_in_any_case_and_encoding() {
        for (url, shown) in [
            (
                "postgres://h/db?PASSWORD=s3cret",
                "postgres://h/db?PASSWORD=***",
            ),
            (
                "postgres://h/db?sslmode=verify-full&SslPassword=s3cret",
                "postgres://h/db?sslmode=verify-full&SslPassword=***",
            ),
            // libpq decodes the names of query parameters too.
            (
                "postgres://h/db?pass%77ord=s3cret",
                "postgres://h/db?pass%77ord=***",
            ),
            (
                "postgres://h/db?password=s3cret#x",
                "postgres://h/db?password=***",
            ),
            (
                "postgres://u:pw@h/db?password=s3cret",
                "postgres://u:***@h/db?password=***",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn a_key_value_connection_string_is_redacted_too() {
        for (conninfo, shown) in [
            (
                "host=db password=secret user=u",
                "host=db password=*** user=u",
            ),
            (
                "host=db password='se cret' user=u",
                "host=db password=*** user=u",
            ),
            (r"password='it\'s \\ se cret' user=u", "password=*** user=u"),
            ("host=db password = secret", "host=db password = ***"),
            (r"sslpassword=secret\ x host=db", "sslpassword=*** host=db"),
            ("PASSWORD=secret", "PASSWORD=***"),
            (
                "dbname=postgres://u:secret@h/db host=x",
                "dbname=postgres://u:***@h/db host=x",
            ),
            (
                "host=db user=u dbname=charges",
                "host=db user=u dbname=charges",
            ),
            // What libpq refuses is still hidden when the error prints it.
            ("password secret host=db", "password *** host=db"),
            (
                "host=db password='unterminated secret",
                "host=db password=***",
            ),
        ] {
            assert_eq!(redact(conninfo), shown, "{conninfo}");
        }
    }

    #[test]
    fn libpq_errors_quoting_a_piece_of_a_password_are_redacted_too() {
        use super::redact_message;
        for (message, url, shown) in [
            (
                r#"invalid integer value "pa" for connection option "port""#,
                "postgres://u:pa/ss@h/db",
                r#"invalid integer value "***" for connection option "port""#,
            ),
            (
                r#"unexpected spaces found in "pass word", use percent-encoded spaces (%20) instead"#,
                "postgres://u:pass word@h/db",
                r#"unexpected spaces found in "***", use percent-encoded spaces (%20) instead"#,
            ),
            (
                r#"invalid percent-encoded token: "s3c%ZZret""#,
                "postgres://u:s3c%ZZret@h/db",
                r#"invalid percent-encoded token: "***""#,
            ),
            (
                r#"missing "=" after "secret" in connection info string"#,
                "password secret",
                r#"missing "=" after "***" in connection info string"#,
            ),
            (
                "the password is p@ss w0rd, unquoted",
                "postgres://h/db?password=p%40ss%20w0rd",
                "the password is ***, unquoted",
            ),
            (
                r#"role "u" does not exist"#,
                "postgres://u:s3cret@h/db",
                r#"role "u" does not exist"#,
            ),
        ] {
            assert_eq!(redact_message(message, url), shown, "{url}");
        }
    }

    #[test]
    fn when_in_doubt_more_is_hidden() {
        // An '@' in the query of a URL with a port: "5432/db?user=a" could
        // be a password.
        assert_eq!(
            redact("postgres://h:5432/db?user=a@b"),
            "postgres://h:***@b"
        );
        assert_eq!(
            redact("postgres://h/db?user=a@b"),
            "postgres://h/db?user=a@b"
        );
    }

    #[test]
    fn a_password_containing_at_signs_is_hidden_whole() {
        assert_eq!(
            redact("postgres://app:p@ss@db/x"),
            "postgres://app:***@db/x"
        );
    }
}
