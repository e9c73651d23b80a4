//! A private PostgreSQL server of the test's own, on a free loopback port in
//! a temporary directory, that the test may freeze (`SIGSTOP` of the
//! postmaster and every backend) and thaw: a server that stops answering
//! without closing its connections. Stopped and removed on drop, whatever
//! happened (thawed first). Needs the server binaries and `runuser` (initdb
//! refuses root), as the failover test does.

use std::path::PathBuf;
use std::process::Command;

use crate::support::free_port;

pub struct PgNode {
    dir: PathBuf,
    bin: PathBuf,
    pub port: u16,
}

/// The directory of PostgreSQL's server binaries.
fn bin_dir() -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|d| d.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop().expect("PostgreSQL server binaries")
}

impl PgNode {
    pub fn start() -> PgNode {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let node = PgNode {
            dir: std::env::temp_dir().join(format!("charges-pg-{}-{nanos}", std::process::id())),
            bin: bin_dir(),
            port: free_port(),
        };
        let ok = Command::new("runuser")
            .args(["-u", "postgres", "--", "mkdir", "-p"])
            .arg(&node.dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mkdir as postgres");
        let data = node.data();
        node.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "--auth=trust", "-N"],
        );
        let conf = format!(
            "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             shared_buffers = 32MB\nmax_connections = 60\nfsync = off\n",
            node.port,
            node.dir.display()
        );
        use std::io::Write;
        std::fs::OpenOptions::new()
            .append(true)
            .open(node.dir.join("data/postgresql.conf"))
            .unwrap()
            .write_all(conf.as_bytes())
            .unwrap();
        let log = format!("{}/server.log", node.dir.display());
        node.run("pg_ctl", &["-D", &data, "-l", &log, "-w", "start"]);
        node
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

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

    /// A database on this server (created by the app on first start).
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub fn psql(&self, database: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-t", "-A", "-h", "127.0.0.1", "-U", "postgres"])
            .args(["-p", &self.port.to_string(), "-d", database, "-c", sql])
            .output()
            .expect("psql");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }

    /// The postmaster and its children (every backend, the checkpointer, …).
    fn processes(&self) -> Vec<u32> {
        let Some(postmaster) = self.postmaster_pid() else {
            return Vec::new();
        };
        let children = Command::new("pgrep")
            .args(["-P", &postmaster.to_string()])
            .output()
            .expect("pgrep");
        let mut pids = vec![postmaster];
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .lines()
                .filter_map(|l| l.trim().parse::<u32>().ok()),
        );
        pids
    }

    fn signal(&self, signal: &str) -> usize {
        let pids = self.processes();
        for pid in &pids {
            let _ = Command::new("kill")
                .args([signal, &pid.to_string()])
                .status();
        }
        pids.len()
    }

    /// `SIGSTOP` to the postmaster and every child: the server accepts TCP
    /// connections and ACKs bytes (the kernel does), and answers nothing.
    /// Returns how many processes were stopped.
    pub fn freeze(&self) -> usize {
        // The postmaster first, so that it forks no new backend meanwhile.
        self.signal("-STOP")
    }

    /// `SIGCONT` to the same processes, and to any the postmaster forked
    /// (they inherit nothing stopped, but a fork may have raced the freeze).
    pub fn thaw(&self) -> usize {
        self.signal("-CONT")
    }
}

impl Drop for PgNode {
    fn drop(&mut self) {
        self.thaw();
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &self.data(), "-m", "immediate", "stop"])
            .output();
        if let Some(pid) = self.postmaster_pid() {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
