//! The pool's edge: the one place that knows which backend a `DATABASE_URL`
//! names ([`Target`], read in `database.rs`). It builds the connection pool
//! and hands out connections as `&mut dyn Store`.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use diesel::Connection as _;
use diesel::pg::PgConnection;
use diesel::r2d2::{ConnectionManager, Pool, PooledConnection};
use diesel::sqlite::SqliteConnection;

use super::database::{
    SetupError, Target, connect_or_create, init_openssl, one_line, with_pg_defaults,
};
use super::redact::{redact, redact_message};
use super::{Failure, QueryError, Store, classify};

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

/// Whether each database (by its URL as logged) was last found
/// unreachable: its pools (the server's, the demo's beside it) log an outage
/// once as it starts and once as it ends, not each failed connection (r2d2's
/// own handler logged each, over several lines) or each probe.
static UNREACHABLE: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<String>>> =
    std::sync::LazyLock::new(Default::default);

/// r2d2's handler of a pool's connection errors (the database is
/// unreachable) and new connections (it is reachable).
#[derive(Debug, Clone)]
struct OutageLog {
    /// The URL, redacted: how the log names the database.
    database: String,
    /// The URL as given, to redact its secrets out of an error's text.
    url: String,
}

impl<E: std::fmt::Display> r2d2::HandleError<E> for OutageLog {
    fn handle_error(&self, error: E) {
        let mut down = UNREACHABLE.lock().unwrap_or_else(|e| e.into_inner());
        if down.insert(self.database.clone()) {
            let cause = redact_message(&one_line(&error.to_string()), &self.url);
            tracing::warn!(database = %self.database, %cause, "the database is unreachable; requests that need it answer 503 until it is back (logged once, and again when it is)");
        }
    }
}

impl r2d2::HandleEvent for OutageLog {
    fn handle_acquire(&self, _: r2d2::event::AcquireEvent) {
        let mut down = UNREACHABLE.lock().unwrap_or_else(|e| e.into_inner());
        if down.remove(&self.database) {
            tracing::warn!(database = %self.database, "the database is reachable again");
        }
    }
}

/// A pool of either backend's connections; a clone shares them.
#[derive(Clone)]
pub struct DbPool {
    pools: Pools,
    /// What each session is named while a task of this pool holds it
    /// (PostgreSQL's `application_name`; see [`DbPool::named`]).
    label: Option<Arc<str>>,
}

#[derive(Clone)]
enum Pools {
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
            let outage = OutageLog {
                database: redact(&settings.url),
                url: settings.url.clone(),
            };
            Pool::builder()
                .error_handler(Box::new(outage.clone()))
                .event_handler(Box::new(outage))
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
                let pool = builder(settings, main)
                    .build(manager)
                    .map_err(connect_error)?;
                Ok(DbPool {
                    pools: Pools::Pg(pool),
                    label: None,
                })
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
                Ok(DbPool {
                    pools: Pools::Sqlite(pool),
                    label: None,
                })
            }
        }
    }

    pub fn backend(&self) -> Backend {
        match self.pools {
            Pools::Pg(_) => Backend::Postgres,
            Pools::Sqlite(_) => Backend::Sqlite,
        }
    }

    pub fn state(&self) -> r2d2::State {
        match &self.pools {
            Pools::Pg(p) => p.state(),
            Pools::Sqlite(p) => p.state(),
        }
    }

    /// The same connections, each session named `label` while a task of
    /// the returned pool holds it (PostgreSQL's `application_name`, a round
    /// trip only when it changes): who a lock wait in `pg_stat_activity`
    /// is. The demo names its sessions per sandbox.
    pub fn named(&self, label: Arc<str>) -> DbPool {
        DbPool {
            pools: self.pools.clone(),
            label: Some(label),
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
        self.run_checkouts(deadline, move |checkouts| {
            checkouts.with(|store| work(store))
        })
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
        let conn = match &self.pools {
            Pools::Pg(p) => p.get().map(PooledStore::Pg),
            Pools::Sqlite(p) => p.get().map(PooledStore::Sqlite),
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
        work: impl FnOnce(&mut (dyn Store + 'static)) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut conn = self.pool.checkout().map_err(RunError::from)?;
        if let (Some(label), PooledStore::Pg(pooled)) = (&self.pool.label, &mut conn)
            && pooled.name(label).is_err()
        {
            // A session that cannot be named is lost (cut, or closed by the
            // server): dropped, not reused, and another checked out, so that
            // the work meets the pool's answer to a lost database (503), not
            // a half-dead connection's.
            discard_connection();
            drop(conn);
            conn = self.pool.checkout().map_err(RunError::from)?;
            if let PooledStore::Pg(pooled) = &mut conn
                && pooled.name(label).is_err()
            {
                discard_connection();
            }
        }
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

/// The protocol's connections: one checked out for each of its
/// transactions.
impl idempotency::Connections for Checkouts {
    type Store = dyn Store;

    fn run<T>(
        &mut self,
        work: impl FnOnce(&mut (dyn Store + 'static)) -> Result<T, idempotency::Error>,
    ) -> Result<T, idempotency::Error> {
        self.with(|store| {
            let done = work(store);
            // The key table's statements are the protocol crate's, which
            // knows no pool: a connection they found lost is not given back.
            if let Err(idempotency::Error::Database(e)) = &done
                && classify(e) == Failure::ConnectionLost
            {
                discard_connection();
            }
            done
        })
    }

    fn transaction<T, E: From<QueryError>>(
        store: &mut (dyn Store + 'static),
        work: impl FnOnce(&mut (dyn Store + 'static)) -> Result<T, E>,
    ) -> Result<T, E> {
        store.transaction(work)
    }

    fn until(&self) -> Instant {
        self.until
    }
}

/// No connection for the protocol: its [`Connection`](idempotency::Error::Connection) error.
impl From<RunError> for idempotency::Error {
    fn from(e: RunError) -> Self {
        idempotency::Error::Connection(Box::new(e))
    }
}

impl PooledStore {
    pub fn store(&mut self) -> &mut (dyn Store + 'static) {
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
    /// The `application_name` a labelled checkout gave the session last.
    label: Option<Arc<str>>,
}

impl PgPooled {
    /// Names the session `label` (a round trip only when it changes).
    /// Labels are the application's own text, never a client's.
    fn name(&mut self, label: &Arc<str>) -> diesel::QueryResult<()> {
        use diesel::connection::SimpleConnection;
        if self.label.as_deref() != Some(&**label) {
            debug_assert!(
                label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            );
            self.conn
                .batch_execute(&format!("SET application_name = '{label}'"))?;
            self.label = Some(label.clone());
        }
        Ok(())
    }
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
            label: None,
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
