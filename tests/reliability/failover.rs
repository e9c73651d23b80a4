//! The database server itself fails over: a primary and a synchronous
//! standby on loopback ports (PostgreSQL's own streaming replication), two
//! app instances on the libpq multi-host URL, retrying clients, `kill -9` of
//! the primary in the middle of the load, `pg_ctl promote` of the standby.
//! With synchronous replication every acknowledged commit is on the standby,
//! so on the new primary: every 201 a client received has its charge and its
//! completed key row, one charge per key, no charge without its key, and
//! every client's charge id is the database's.
//!
//! Needs the PostgreSQL server binaries (`initdb`, `pg_ctl`,
//! `pg_basebackup`) and `runuser` (initdb refuses to run as root): where
//! they are missing when the tests are built, the test is ignored with that
//! reason (see `build.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::client::{self, Charge, Retry};
use crate::server::{self, Config};
use crate::support::{AppClient, ServerProcess};
use crate::within;

const KEYS: usize = 120;
const CONCURRENCY: usize = 12;
/// The primary is killed once this many charges were answered 201.
const KILL_AFTER: usize = 30;
const DATABASE: &str = "charges_failover";

/// The directory of PostgreSQL's server binaries.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("pg_basebackup").exists())
        .collect();
    dirs.sort();
    dirs.pop().expect("PostgreSQL server binaries")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A primary and a synchronous standby in a temporary directory, stopped
/// and removed on drop, whatever happened.
struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    primary: u16,
    standby: u16,
}

impl Cluster {
    /// As the `postgres` user: the tool `tool` of the server binaries.
    fn run(&self, tool: &str, args: &[&str]) {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join(tool))
            .args(args)
            .output()
            .expect("runuser");
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn data(&self, node: &str) -> String {
        self.dir.join(node).display().to_string()
    }

    fn append(&self, file: &Path, lines: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
        f.write_all(lines.as_bytes()).unwrap();
    }

    fn start() -> Cluster {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir =
            std::env::temp_dir().join(format!("charges-failover-{}-{nanos}", std::process::id()));
        let cluster = Cluster {
            dir,
            bin: bin_dir(),
            primary: free_port(),
            standby: free_port(),
        };
        let status = Command::new("runuser")
            .args(["-u", "postgres", "--", "mkdir", "-p"])
            .arg(&cluster.dir)
            .status()
            .unwrap();
        assert!(status.success(), "mkdir as postgres");
        let primary = cluster.data("primary");
        cluster.run(
            "initdb",
            &["-D", &primary, "-U", "postgres", "--auth=trust", "-N"],
        );
        cluster.append(
            &cluster.dir.join("primary/postgresql.conf"),
            &format!(
                "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 4\nsynchronous_standby_names = 's1'\n\
                 synchronous_commit = on\nshared_buffers = 32MB\nmax_connections = 60\n",
                cluster.primary,
                cluster.dir.display()
            ),
        );
        let log = format!("{}/primary.log", cluster.dir.display());
        cluster.run("pg_ctl", &["-D", &primary, "-l", &log, "-w", "start"]);
        let standby = cluster.data("standby");
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name=s1",
            cluster.primary
        );
        cluster.run(
            "pg_basebackup",
            &["-d", &conninfo, "-D", &standby, "-R", "-X", "stream"],
        );
        cluster.append(
            &cluster.dir.join("standby/postgresql.auto.conf"),
            // Promoted, it has no standby of its own: it must not wait
            // for one (its copy of the primary's settings names `s1`).
            &format!(
                "\nport = {}\nprimary_conninfo = '{conninfo}'\nsynchronous_standby_names = ''\n",
                cluster.standby
            ),
        );
        let log = format!("{}/standby.log", cluster.dir.display());
        cluster.run("pg_ctl", &["-D", &standby, "-l", &log, "-w", "start"]);
        cluster
    }

    fn url(&self, port: u16) -> String {
        format!("postgres://postgres@127.0.0.1:{port}/{DATABASE}")
    }

    /// Both nodes; libpq takes the one that accepts writes.
    fn multi_host_url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{DATABASE}?target_session_attrs=read-write",
            self.primary, self.standby
        )
    }

    fn psql(&self, port: u16, database: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-t", "-A", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &port.to_string(), "-d", database, "-c", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Waits (bounded) until the standby streams as the synchronous one.
    fn wait_for_sync(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let state = self.psql(
                self.primary,
                "postgres",
                "SELECT string_agg(sync_state, ',') FROM pg_stat_replication",
            );
            if state == "sync" {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the standby never became synchronous: {state:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn postmaster_pid(&self, node: &str) -> Option<i32> {
        std::fs::read_to_string(self.dir.join(node).join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// `kill -9` of the primary's postmaster: no shutdown, no last WAL flush.
    fn kill_primary(&self) {
        let pid = self.postmaster_pid("primary").expect("the primary runs");
        let status = Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn promote_standby(&self) {
        self.run("pg_ctl", &["-D", &self.data("standby"), "-w", "promote"]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for node in ["standby", "primary"] {
            if self.dir.join(node).exists() {
                let _ = Command::new("runuser")
                    .args(["-u", "postgres", "--"])
                    .arg(self.bin.join("pg_ctl"))
                    .args(["-D", &self.data(node), "-m", "immediate", "stop"])
                    .output();
            }
            // A postmaster that pg_ctl could not stop (its parent killed).
            if let Some(pid) = self.postmaster_pid(node) {
                let _ = Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn config() -> Config {
    Config {
        pool_size: 6,
        pool_timeout: "2s",
        workers: 2,
        demo_max_delayed: 2,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(
    replication_tests_unavailable,
    ignore = "needs the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup in /usr/lib/postgresql/*/bin) and runuser"
)]
async fn a_failover_to_a_synchronous_standby_loses_no_acknowledged_charge() {
    let cluster = Cluster::start();
    cluster.wait_for_sync();
    // The database and its schema on the primary (the multi-host URL does
    // not create databases); the standby replays them.
    let migrate = Command::new(env!("CARGO_BIN_EXE_charges"))
        .args(["migrate", "--database-url", &cluster.url(cluster.primary)])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );

    let url = cluster.multi_host_url();
    let servers: Vec<ServerProcess> = (0..2)
        .map(|i| server::start(&format!("instance {i}"), &url, &config()))
        .collect();
    let clients: Arc<Vec<AppClient>> =
        Arc::new(servers.iter().map(ServerProcess::client).collect());

    let retry = Retry {
        max_attempts: 400,
        backoff: Duration::from_millis(100),
        deadline: Instant::now() + Duration::from_secs(60),
    };
    let created = Arc::new(AtomicUsize::new(0));
    let load = {
        let (clients, created, retry) = (clients.clone(), created.clone(), retry);
        async move {
            futures::stream::iter(0..KEYS)
                .map(|i| {
                    let (clients, created) = (clients.clone(), created.clone());
                    let retry = Retry { ..retry };
                    async move {
                        let charge = client::charge_until_answered(
                            &clients,
                            i,
                            client::new_key(),
                            &retry,
                            |_| Vec::new(),
                        )
                        .await;
                        if charge.answer().is_some_and(|r| r.status == 201) {
                            created.fetch_add(1, Ordering::SeqCst);
                        }
                        charge
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect::<Vec<Charge>>()
                .await
        }
    };
    let failover = async {
        let deadline = Instant::now() + Duration::from_secs(30);
        while created.load(Ordering::SeqCst) < KILL_AFTER {
            assert!(Instant::now() < deadline, "no load before the failover");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let killed_at = Instant::now();
        cluster.kill_primary();
        // Some time without any primary, as a failover manager takes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::block_in_place(|| cluster.promote_standby());
        killed_at
    };
    let (charges, killed_at) = within(
        Duration::from_secs(90),
        "the load and the failover",
        async { tokio::join!(load, failover) },
    )
    .await;
    let unavailable = charges
        .iter()
        .flat_map(|c| c.attempts.iter())
        .filter_map(|a| a.reply())
        .filter(|r| r.status == 503)
        .count();
    eprintln!(
        "failover: {KEYS} charges, {unavailable} answers 503 during the switch; the primary was killed {:?} before the end",
        killed_at.elapsed()
    );

    // Every charge ended with an answer, and no answer was a 500.
    for charge in &charges {
        let answer = charge
            .answer()
            .unwrap_or_else(|| panic!("unanswered: {}", charge.history()));
        assert_eq!(answer.status, 201, "{}", charge.history());
        for reply in charge.attempts.iter().filter_map(|a| a.reply()) {
            assert!(
                reply.status == 201 || reply.status == 503,
                "only 201 and 503 during a failover: {}",
                charge.history()
            );
        }
    }
    // On the new primary: each 201's charge and completed key row, one
    // charge per key, no charge without its key, the client's id.
    let new_primary = cluster.standby;
    let count = |sql: &str| -> i64 { cluster.psql(new_primary, DATABASE, sql).parse().unwrap() };
    assert_eq!(
        count(
            "SELECT count(*) FROM charges c LEFT JOIN idempotency_keys k ON k.charge_id = c.id WHERE k.key IS NULL"
        ),
        0,
        "charges without their key"
    );
    for charge in &charges {
        let id = charge.answer().unwrap().charge_id();
        let key = charge.key.replace('\'', "''");
        assert_eq!(
            cluster.psql(
                new_primary,
                DATABASE,
                &format!(
                    "SELECT k.status || ' ' || k.charge_id FROM idempotency_keys k \
                     JOIN charges c ON c.id = k.charge_id WHERE k.key = '{key}'"
                )
            ),
            format!("completed {id}"),
            "{}",
            charge.history()
        );
    }
    let keys: Vec<String> = charges
        .iter()
        .map(|c| format!("'{}'", c.key.replace('\'', "''")))
        .collect();
    assert_eq!(
        count(&format!(
            "SELECT count(*) FROM charges c JOIN idempotency_keys k ON k.charge_id = c.id WHERE k.key IN ({})",
            keys.join(",")
        )),
        KEYS as i64,
        "one charge per key"
    );
    drop(servers);
}
