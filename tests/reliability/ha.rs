//! A pg_auto_failover formation on loopback, made with the manager's own
//! commands: a monitor and two keeper-managed PostgreSQL nodes in a
//! temporary directory, each `pg_autoctl run` a child process of the test.
//! Dropped, it kills every process it started and removes the directory,
//! whatever happened.
//!
//! pg_autoctl refuses root, so every call runs as `postgres` through
//! `runuser`, with its configuration and state (`XDG_CONFIG_HOME`,
//! `XDG_DATA_HOME`) and PostgreSQL's sockets inside the directory: nothing
//! lands in `~postgres` or `/var/run/postgresql`. The test decides nothing
//! about roles: it reads them from the monitor (`pg_autoctl show state`).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::free_port;

/// The database the nodes are created with (`--dbname`): the manager's URI
/// names it.
pub const DATABASE: &str = "charges_failover";

/// The monitor's failover timing, short for a test that kills a node and
/// waits for the promotion (pg_auto_failover's defaults in brackets).
/// Written into the monitor's `postgresql.conf` before it first starts.
const MONITOR_SETTINGS: &[(&str, &str)] = &[
    // A health check of each node every second [5 s], 1 s to connect [5 s],
    // retried once [2] after half a second [2 s].
    ("pgautofailover.health_check_period", "1000"),
    ("pgautofailover.health_check_timeout", "1000"),
    ("pgautofailover.health_check_max_retries", "1"),
    ("pgautofailover.health_check_retry_delay", "500"),
    // Failed health checks make a node unhealthy only once its keeper has
    // not reported for this long either [20 s]; keepers report every second.
    ("pgautofailover.node_considered_unhealthy_timeout", "3000"),
    // The fence: the promoted node takes no writes until the old primary has
    // had this long to demote itself [30 s]. It must exceed the keepers'
    // NETWORK_PARTITION_TIMEOUT, after which a primary that sees neither the
    // monitor nor a standby demotes itself.
    ("pgautofailover.primary_demote_timeout", "5000"),
    // No failover in the monitor's first seconds [10 s].
    ("pgautofailover.startup_grace_period", "3000"),
];

/// Keeper setting `timeout.network_partition_timeout`, in seconds [20].
const NETWORK_PARTITION_TIMEOUT: &str = "3";

/// Small servers: pg_auto_failover's own tuning gives each a quarter of
/// the machine's memory, three times over. Appended after its include line,
/// so these win; the secondary's copy of `postgresql.conf` carries them.
const SMALL: &str = "shared_buffers = 32MB\nwork_mem = 4MB\nmaintenance_work_mem = 64MB\n";

/// Every one-shot `pg_autoctl` call gets this long (`timeout`), then fails.
const COMMAND_LIMIT: &str = "120";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// pg_auto_failover's default: the secondary is in the replication
    /// quorum, and the primary waits for it on every commit.
    Synchronous,
    /// The secondary is created with `--replication-quorum false`: the
    /// primary's `synchronous_standby_names` stays empty.
    Asynchronous,
}

/// One pg_auto_failover node: the monitor, or a PostgreSQL node.
pub struct Node {
    pub name: &'static str,
    pub port: u16,
    home: PathBuf,
    /// Its `pg_autoctl run`, while it runs (a lost machine has none).
    keeper: Mutex<Option<Child>>,
}

impl Node {
    fn pgdata(&self) -> PathBuf {
        self.home.join("pgdata")
    }

    /// Its running postmaster: the pid in `postmaster.pid`, if that process
    /// is a postgres on this data directory (not a stale file's reused pid).
    fn postmaster_pid(&self) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(self.pgdata().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let pgdata = self.pgdata().display().to_string();
        String::from_utf8_lossy(&cmdline)
            .contains(&pgdata)
            .then_some(pid)
    }
}

/// What the monitor says of one node.
#[derive(Debug, Clone)]
pub struct NodeState {
    pub name: String,
    pub reported: String,
    pub assigned: String,
}

impl NodeState {
    /// Reported and assigned alike: the node has reached the state.
    pub fn is(&self, state: &str) -> bool {
        self.reported == state && self.assigned == state
    }
}

pub struct Formation {
    dir: PathBuf,
    bin: PathBuf,
    monitor: Node,
    pub nodes: [Node; 2],
}

/// The directory of the PostgreSQL server binaries whose version has the
/// `pgautofailover` extension installed.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|d| d.join("lib/pgautofailover.so").exists() && d.join("bin/pg_ctl").exists())
        .map(|d| d.join("bin"))
        .collect();
    dirs.sort();
    dirs.pop()
        .expect("PostgreSQL server binaries with pg_auto_failover")
}

fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `pid` and every process below it, from /proc (parents first).
fn process_tree(pid: i32) -> Vec<i32> {
    let mut children: std::collections::HashMap<i32, Vec<i32>> = Default::default();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(child) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(parent) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            children.entry(parent).or_default().push(child);
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        tree.extend(children.get(&tree[i]).into_iter().flatten().copied());
        i += 1;
    }
    tree
}

fn sigkill(pids: &[i32]) {
    for &pid in pids {
        // SAFETY: kill(2) with a pid from /proc; at worst it is gone (ESRCH).
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

impl Formation {
    /// The monitor, then the first node (it becomes the primary), then the
    /// second (the manager clones it from the primary and makes it the
    /// secondary); returns once the primary streams to it as `replication`
    /// asks. About 10 s.
    pub fn start(replication: Replication) -> Formation {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!("charges-ha-{}-{nanos}", std::process::id()));
        let node = |name: &'static str| Node {
            name,
            port: free_port(),
            home: dir.join(name),
            keeper: Mutex::new(None),
        };
        let formation = Formation {
            bin: bin_dir(),
            monitor: node("monitor"),
            nodes: [node("node1"), node("node2")],
            dir,
        };
        // Owned by postgres, who runs everything in it.
        let status = Command::new("runuser")
            .args(["-u", "postgres", "--", "mkdir", "-p"])
            .arg(formation.dir.join("sockets"))
            .status()
            .unwrap();
        assert!(status.success(), "mkdir as postgres");

        // The monitor and the first node on clusters made here, so that
        // their sockets and memory are set before they first start.
        formation.initdb(&formation.monitor);
        let settings: String = MONITOR_SETTINGS
            .iter()
            .map(|(name, value)| format!("{name} = {value}\n"))
            .collect();
        formation.append_conf(&formation.monitor, &settings);
        let port = formation.monitor.port.to_string();
        let pg_ctl = formation.bin.join("pg_ctl").display().to_string();
        formation.autoctl_ok(
            &formation.monitor,
            &["create", "monitor"],
            &[
                "--pgport",
                &port,
                "--pgctl",
                &pg_ctl,
                "--hostname",
                "127.0.0.1",
                "--listen",
                "127.0.0.1",
                "--auth",
                "trust",
                "--no-ssl",
            ],
        );
        formation.run_keeper(&formation.monitor);
        let monitor_uri = formation.wait_for_monitor();

        formation.initdb(&formation.nodes[0]);
        for (i, node) in formation.nodes.iter().enumerate() {
            let port = node.port.to_string();
            let quorum = match (i, replication) {
                (1, Replication::Asynchronous) => "false",
                _ => "true",
            };
            formation.autoctl_ok(
                node,
                &["create", "postgres"],
                &[
                    "--pgport",
                    &port,
                    "--pgctl",
                    &pg_ctl,
                    "--hostname",
                    "127.0.0.1",
                    "--listen",
                    "127.0.0.1",
                    "--name",
                    node.name,
                    "--dbname",
                    DATABASE,
                    "--auth",
                    "trust",
                    "--no-ssl",
                    "--monitor",
                    &monitor_uri,
                    "--replication-quorum",
                    quorum,
                ],
            );
            formation.autoctl_ok(
                node,
                &["config", "set"],
                &[
                    "timeout.network_partition_timeout",
                    NETWORK_PARTITION_TIMEOUT,
                ],
            );
            formation.run_keeper(node);
            // The first node alone is `single`; with the second, the
            // first is the primary and the second its secondary.
            let expected: &[&str] = if i == 0 {
                &["single"]
            } else {
                &["primary", "secondary"]
            };
            formation.wait_for_states(&format!("{expected:?}"), Duration::from_secs(60), |s| {
                s.len() == expected.len() && s.iter().zip(expected).all(|(s, e)| s.is(e))
            });
        }
        let streaming = match replication {
            // `ANY 1 (…)`: the one standby is in the quorum.
            Replication::Synchronous => "quorum",
            Replication::Asynchronous => "async",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = formation.psql(
                formation.nodes[0].port,
                "postgres",
                "SELECT string_agg(sync_state, ',') FROM pg_stat_replication",
            );
            if now.as_deref() == Ok(streaming) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the secondary never streamed as {streaming}: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        formation
    }

    fn initdb(&self, node: &Node) {
        let out = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("initdb"))
            .arg("-D")
            .arg(node.pgdata())
            .args(["-U", "postgres", "--auth=trust", "-N"])
            .output()
            .expect("runuser initdb");
        assert!(out.status.success(), "initdb: {}", output_text(&out));
        self.append_conf(
            node,
            &format!(
                "unix_socket_directories = '{}'\n",
                self.dir.join("sockets").display()
            ),
        );
    }

    fn append_conf(&self, node: &Node, lines: &str) {
        use std::io::Write;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(node.pgdata().join("postgresql.conf"))
            .unwrap();
        write!(conf, "\n# charges' failover test\n{SMALL}{lines}").unwrap();
    }

    /// `pg_autoctl` as postgres with `node`'s configuration: `runuser -u
    /// postgres -- env … pg_autoctl COMMAND --pgdata … OPTIONS`.
    fn autoctl_command(&self, node: &Node, command: &[&str], options: &[&str]) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", "env"])
            .arg(format!(
                "XDG_CONFIG_HOME={}",
                node.home.join("config").display()
            ))
            .arg(format!(
                "XDG_DATA_HOME={}",
                node.home.join("data").display()
            ))
            .arg(format!("PGHOST={}", self.dir.join("sockets").display()))
            .arg(format!("PATH={}:/usr/bin:/bin", self.bin.display()))
            .arg("pg_autoctl")
            .args(command)
            .arg("--pgdata")
            .arg(node.pgdata())
            .args(options)
            .stdin(Stdio::null());
        c
    }

    /// A one-shot `pg_autoctl` call (bounded): its stdout, or its output as
    /// the error.
    pub fn autoctl(
        &self,
        node: &Node,
        command: &[&str],
        options: &[&str],
    ) -> Result<String, String> {
        let inner = self.autoctl_command(node, command, options);
        let out = Command::new("timeout")
            .args(["-k", "5", COMMAND_LIMIT])
            .arg(inner.get_program())
            .args(inner.get_args())
            .stdin(Stdio::null())
            .output()
            .expect("timeout runuser pg_autoctl");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "pg_autoctl {} on {} ({}): {}",
                command.join(" "),
                node.name,
                out.status,
                output_text(&out)
            ))
        }
    }

    fn autoctl_ok(&self, node: &Node, command: &[&str], options: &[&str]) -> String {
        self.autoctl(node, command, options)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts `pg_autoctl run` for `node`, in a process group of its own,
    /// its output appended to `<name>.log`.
    fn run_keeper(&self, node: &Node) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path(node))
            .unwrap();
        let child = self
            .autoctl_command(node, &["run"], &[])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("runuser pg_autoctl run");
        *node.keeper.lock().unwrap() = Some(child);
    }

    /// What node `i`'s keepers (`pg_autoctl run`) have logged so far.
    pub fn keeper_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.log_path(&self.nodes[i])).unwrap_or_default()
    }

    fn log_path(&self, node: &Node) -> PathBuf {
        self.dir.join(format!("{}.log", node.name))
    }

    /// Waits (bounded) for the monitor to answer; its URI.
    fn wait_for_monitor(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let shown = self.autoctl(&self.monitor, &["show", "uri"], &["--json"]);
            let uri = shown
                .as_ref()
                .ok()
                .and_then(|json| serde_json::from_str::<Vec<serde_json::Value>>(json).ok())
                .and_then(|entries| {
                    entries
                        .iter()
                        .find(|e| e["type"] == "monitor")
                        .and_then(|e| e["uri"].as_str().map(str::to_owned))
                });
            let answers = self.psql(self.monitor.port, "pg_auto_failover", "SELECT 1");
            if let Some(uri) = uri
                && answers.is_ok()
            {
                return uri;
            }
            assert!(
                Instant::now() < deadline,
                "the monitor never came up: {shown:?}, {answers:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The nodes as the monitor sees them (`pg_autoctl show state --json`),
    /// in node order; empty while the monitor cannot say.
    pub fn states(&self) -> Vec<NodeState> {
        let Ok(json) = self.autoctl(&self.monitor, &["show", "state"], &["--json"]) else {
            return Vec::new();
        };
        let Ok(serde_json::Value::Array(nodes)) = serde_json::from_str(&json) else {
            return Vec::new();
        };
        let mut states: Vec<(i64, NodeState)> = nodes
            .iter()
            .map(|n| {
                let text = |k: &str| n[k].as_str().unwrap_or_default().to_owned();
                (
                    n["node_id"].as_i64().unwrap_or_default(),
                    NodeState {
                        name: text("nodename"),
                        reported: text("current_group_state"),
                        assigned: text("assigned_group_state"),
                    },
                )
            })
            .collect();
        states.sort_by_key(|(id, _)| *id);
        states.into_iter().map(|(_, s)| s).collect()
    }

    /// Waits (bounded) until the monitor's states satisfy `ready`.
    pub fn wait_for_states(
        &self,
        what: &str,
        limit: Duration,
        ready: impl Fn(&[NodeState]) -> bool,
    ) -> Vec<NodeState> {
        let deadline = Instant::now() + limit;
        loop {
            let states = self.states();
            if ready(&states) {
                return states;
            }
            assert!(
                Instant::now() < deadline,
                "the formation did not reach {what} within {limit:?}: {states:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The node the monitor holds as primary now, by index.
    pub fn primary(&self) -> usize {
        let states = self.states();
        states
            .iter()
            .position(|s| s.is("primary"))
            .unwrap_or_else(|| panic!("no primary: {states:?}"))
    }

    /// The URL the manager gives its clients (`pg_autoctl show uri
    /// --formation default`): every node, `target_session_attrs=read-write`.
    /// It names no user; libpq's default would be the OS user, so the
    /// superuser the nodes were made with is added.
    pub fn uri(&self) -> String {
        let uri = self.autoctl_ok(&self.monitor, &["show", "uri"], &["--formation", "default"]);
        let uri = uri.trim();
        let rest = uri
            .strip_prefix("postgres://")
            .unwrap_or_else(|| panic!("a postgres:// URI: {uri:?}"));
        assert!(rest.contains(',') && rest.contains(DATABASE), "{uri}");
        format!("postgres://postgres@{rest}")
    }

    /// `pg_autoctl perform switchover`: returns once the monitor has the
    /// other node primary and the old one secondary again.
    pub fn perform_switchover(&self) -> Result<String, String> {
        self.autoctl(
            &self.monitor,
            &["perform", "switchover"],
            &["--formation", "default"],
        )
    }

    /// A lost machine: `kill -9` of node `i`'s keeper, its PostgreSQL and
    /// every process under them, all at once.
    pub fn kill_machine(&self, i: usize) {
        let node = &self.nodes[i];
        let mut keeper = node.keeper.lock().unwrap();
        let mut pids: Vec<i32> = keeper
            .as_ref()
            .map(|k| process_tree(k.id() as i32))
            .unwrap_or_default();
        if let Some(postmaster) = node.postmaster_pid() {
            pids.extend(process_tree(postmaster));
        }
        assert!(!pids.is_empty(), "{} runs nothing to kill", node.name);
        sigkill(&pids);
        if let Some(mut child) = keeper.take() {
            let _ = child.wait();
        }
    }

    /// Stops (`SIGSTOP`) node `i`'s WAL senders: its replication stream
    /// stalls, as behind a slow link or a busy standby, while the node
    /// itself goes on. Returns how many.
    pub fn stall_replication(&self, i: usize) -> usize {
        let pids = self
            .psql(
                self.nodes[i].port,
                "postgres",
                "SELECT pid FROM pg_stat_replication",
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let pids: Vec<i32> = pids.lines().filter_map(|p| p.parse().ok()).collect();
        for &pid in &pids {
            // SAFETY: kill(2) on a WAL sender PostgreSQL just named.
            unsafe {
                libc::kill(pid, libc::SIGSTOP);
            }
        }
        pids.len()
    }

    /// The machine is back: its keeper starts again, and asks the monitor
    /// what its node is now.
    pub fn restart_keeper(&self, i: usize) {
        self.run_keeper(&self.nodes[i]);
    }

    /// The monitor's events since `since` (`pg_autoctl show events`, from
    /// its table): when each happened, and what.
    pub fn events_since(
        &self,
        since: std::time::SystemTime,
    ) -> Vec<(std::time::SystemTime, String)> {
        let epoch = since
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let rows = self
            .psql(
                self.monitor.port,
                "pg_auto_failover",
                &format!(
                    "SELECT extract(epoch FROM eventtime) || ' ' || description \
                     FROM pgautofailover.event WHERE eventtime >= to_timestamp({epoch}) ORDER BY eventid"
                ),
            )
            .unwrap_or_default();
        rows.lines()
            .filter_map(|l| {
                let (at, what) = l.split_once(' ')?;
                let at = Duration::from_secs_f64(at.parse().ok()?);
                Some((std::time::UNIX_EPOCH + at, what.to_owned()))
            })
            .collect()
    }

    /// `psql -c sql` on 127.0.0.1:`port` as postgres: the output, or the
    /// error.
    pub fn psql(&self, port: u16, database: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-t", "-A", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &port.to_string(), "-d", database, "-c", sql])
            .env("PGCONNECT_TIMEOUT", "2")
            .stdin(Stdio::null())
            .output()
            .expect("psql");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
        }
    }

    fn print_logs(&self) {
        for node in std::iter::once(&self.monitor).chain(&self.nodes) {
            let log = std::fs::read_to_string(self.log_path(node)).unwrap_or_default();
            let cut = log.len().saturating_sub(8 * 1024);
            let cut = (cut..=log.len())
                .find(|i| log.is_char_boundary(*i))
                .unwrap_or(0);
            eprintln!(
                "----- pg_autoctl {} (port {}), last 8 KiB -----\n{}",
                node.name,
                node.port,
                &log[cut..]
            );
        }
    }
}

impl Drop for Formation {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_logs();
        }
        // The keepers first, so that none restarts its PostgreSQL.
        for node in self.nodes.iter().chain(std::iter::once(&self.monitor)) {
            let mut keeper = node.keeper.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(mut child) = keeper.take() {
                sigkill(&process_tree(child.id() as i32));
                let _ = child.wait();
            }
        }
        // A PostgreSQL no keeper holds any more.
        for node in self.nodes.iter().chain(std::iter::once(&self.monitor)) {
            if let Some(pid) = node.postmaster_pid() {
                sigkill(&process_tree(pid));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
