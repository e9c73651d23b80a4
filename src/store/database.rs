//! Which database `DATABASE_URL` names, and getting to it: the URL read the
//! way libpq reads it (multi-host URLs included), libpq's safety defaults
//! added, and a missing PostgreSQL database created on the primary.

use std::path::PathBuf;

use diesel::Connection as _;
use diesel::RunQueryDsl;
use diesel::pg::PgConnection;

use super::redact::{malformed_userinfo, redact, redact_message};

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

pub(super) fn one_line(s: &str) -> String {
    // libpq ends each of its sentences with a line break, not a period:
    // joined, they must still read as sentences ("refused; Is the server…").
    s.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn libpq_s_lines_stay_apart_on_one_line() {
        let libpq = "connection to server at \"127.0.0.1\", port 1 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n";
        assert_eq!(
            super::one_line(libpq),
            "connection to server at \"127.0.0.1\", port 1 failed: Connection refused; Is the server running on that host and accepting TCP/IP connections?"
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
}
