//! The real `charges` binary (the one Cargo built for this package) as a
//! child process on `127.0.0.1:0`, killed (SIGKILL) when its guard drops.
//! Its stderr (the log) goes to a file, its stdout after the ready line is
//! kept; both are printed when the test fails, and searched for panics.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::client::AppClient;

const READY: &str = "charges is ready: open ";
/// An `env` value that removes the variable instead (the binary's default).
pub const UNSET: &str = "\0unset";
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
/// How much of a log a failing test prints (its end).
const PRINTED_LOG: usize = 16 * 1024;

pub struct ServerProcess {
    /// What the test calls it in messages (`server`, `instance 2`, …).
    pub name: String,
    /// `http://HOST:PORT`, as the server printed it.
    pub address: String,
    port: u16,
    child: Option<Child>,
    log: PathBuf,
    /// The demo's own card network's ledger (SQLite, removed on drop), unless
    /// the test names one: no test leaves a `<database>_network` behind.
    network_db: PathBuf,
    stdout: Arc<Mutex<String>>,
    reader: Option<JoinHandle<()>>,
}

impl ServerProcess {
    /// Starts the binary on `database_url` with `env` added to its
    /// environment, and waits (bounded) for its ready line. Blocking: call
    /// it from a thread to start several at once.
    pub fn start(database_url: &str, env: &[(&str, &str)]) -> ServerProcess {
        ServerProcess::start_named("server", database_url, env)
    }

    /// [`ServerProcess::start`] under a name of the test's choosing.
    pub fn start_named(name: &str, database_url: &str, env: &[(&str, &str)]) -> ServerProcess {
        ServerProcess::try_start(name, database_url, env).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`ServerProcess::start_named`], but a server that exits or hangs
    /// before its ready line is an `Err` with its output.
    pub fn try_start(
        name: &str,
        database_url: &str,
        env: &[(&str, &str)],
    ) -> Result<ServerProcess, String> {
        ServerProcess::try_start_with(name, &[], database_url, env)
    }

    /// [`ServerProcess::start`] with command-line arguments (`["serve"]`):
    /// without any, the binary runs its default command, `demo`.
    pub fn start_with(args: &[&str], database_url: &str, env: &[(&str, &str)]) -> ServerProcess {
        ServerProcess::try_start_with("server", args, database_url, env)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ServerProcess::try_start`] with command-line arguments.
    pub fn try_start_with(
        name: &str,
        args: &[&str],
        database_url: &str,
        env: &[(&str, &str)],
    ) -> Result<ServerProcess, String> {
        let log = std::env::temp_dir().join(format!(
            "charges-test-{}.log",
            uuid::Uuid::new_v4().simple()
        ));
        let network_db = std::env::temp_dir().join(format!(
            "charges-test-{}-network.db",
            uuid::Uuid::new_v4().simple()
        ));
        let mut command = Command::new(env!("CARGO_BIN_EXE_charges"));
        command
            .args(args)
            .env("DATABASE_URL", database_url)
            // Its metrics on a port of its own, picked by the system.
            .env("METRICS_BIND", "127.0.0.1:0")
            .env("BIND", "127.0.0.1:0")
            .env("WORKERS", "2")
            .env("RUST_LOG", "warn")
            .env("RUST_BACKTRACE", "1")
            // Storms from one account and one address are what these tests
            // send; the rate limits have tests of their own.
            .env("RATE_LIMIT_PER_ACCOUNT", "0")
            .env("RATE_LIMIT_PER_CLIENT", "0")
            .env("MAX_CONNECTIONS_PER_PEER", "0")
            // No card network unless the test points the server at one.
            .env("NETWORK_URL", "off")
            .env_remove("IDEMPOTENCY_TTL")
            // The lease and the timeouts it is checked against at start:
            // their defaults unless the test sets them.
            .env_remove("IDEMPOTENCY_LEASE")
            .env_remove("NETWORK_TIMEOUT")
            .env_remove("POOL_TIMEOUT")
            .env_remove("REQUIRE_IDEMPOTENCY_KEY")
            .env_remove("WEB_DIR")
            .env(
                "NETWORK_DATABASE_URL",
                format!("sqlite://{}", network_db.display()),
            );
        for (name, value) in env {
            match *value {
                UNSET => command.env_remove(name),
                value => command.env(name, value),
            };
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create the server's log file"))
            .spawn()
            .expect("spawn the charges binary");
        let stdout = Arc::new(Mutex::new(String::new()));
        let (ready_tx, ready_rx) = mpsc::channel();
        let reader = {
            let (out, stdout) = (child.stdout.take().unwrap(), stdout.clone());
            // Keeps reading what it prints, so that it never writes to a
            // closed pipe; the first line says where it listens.
            std::thread::spawn(move || {
                let mut ready = Some(ready_tx);
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if let Some(url) = line.strip_prefix(READY)
                        && let Some(tx) = ready.take()
                    {
                        let _ = tx.send(url.trim().trim_end_matches('/').to_owned());
                        continue;
                    }
                    let mut stdout = stdout.lock().unwrap();
                    stdout.push_str(&line);
                    stdout.push('\n');
                }
            })
        };
        let mut server = ServerProcess {
            name: name.to_owned(),
            address: String::new(),
            port: 0,
            child: Some(child),
            log,
            network_db,
            stdout,
            reader: Some(reader),
        };
        match ready_rx.recv_timeout(STARTUP_LIMIT) {
            Ok(url) => {
                server.port = url
                    .rsplit(':')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or_else(|| panic!("{name}: unexpected ready URL {url:?}"));
                server.address = url;
                Ok(server)
            }
            Err(e) => {
                // Exited (its stdout closed) or hung: say which.
                let mut status = server.exited();
                if matches!(e, mpsc::RecvTimeoutError::Disconnected) {
                    let deadline = Instant::now() + Duration::from_secs(5);
                    while status.is_none() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(10));
                        status = server.exited();
                    }
                }
                server.kill();
                let how = match status {
                    Some(status) => format!("exited ({status}) before its ready line"),
                    None => format!("printed no ready line within {STARTUP_LIMIT:?}"),
                };
                Err(format!("{name} {how}; its output:\n{}", server.output()))
            }
        }
    }

    /// What it printed on stdout after its ready line (the rest of its banner).
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Its `/metrics` URL, as its banner printed it.
    pub fn metrics_url(&self) -> String {
        let line = self.banner_line("metrics: ");
        line.strip_prefix("metrics: ")
            .filter(|url| url.starts_with("http://"))
            .unwrap_or_else(|| panic!("{}: no metrics URL in {line:?}", self.name))
            .to_owned()
    }

    /// Its card network's URL (NETWORK_URL), as its banner printed it
    /// (passwords redacted): no route of the server's tells it.
    pub fn network_url(&self) -> String {
        let line = self.banner_line("card network: ");
        line.strip_prefix("card network: ")
            .and_then(|rest| rest.split_once(": every charge"))
            .map(|(url, _)| url.to_owned())
            .unwrap_or_else(|| panic!("{}: no card network in {line:?}", self.name))
    }

    /// The banner's line that starts with `prefix`. The banner's lines come
    /// after the ready line, read as they arrive: waited for (bounded).
    pub fn banner_line(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let stdout = self.stdout();
            if let Some(line) = stdout
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with(prefix))
            {
                return line.to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "{}: no {prefix:?} line in {stdout:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A client of this server.
    pub fn client(&self) -> AppClient {
        AppClient::new(&self.address)
    }

    /// Where to reach it on loopback (whatever address it was bound to).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
    }

    /// `kill -9`: no shutdown, no flush, open transactions left to the
    /// database.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            // The pipe is closed now: let the reader take the last lines.
            if let Some(reader) = self.reader.take() {
                let _ = reader.join();
            }
        }
    }

    /// Whether the process has exited on its own, and how.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Waits (bounded) for the process to exit by itself; its exit status.
    pub fn wait_for_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// What the process wrote to stderr so far: its log.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Log lines containing `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.logs()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// Its log, then what it printed on stdout after the ready line.
    fn output(&self) -> String {
        let stdout = self.stdout.lock().unwrap();
        if stdout.is_empty() {
            return self.logs();
        }
        format!("{}----- stdout -----\n{stdout}", self.logs())
    }

    /// The server is still running (unless the test killed it), and nothing
    /// in it panicked.
    #[track_caller]
    pub fn assert_healthy(&mut self) {
        if let Some(status) = self.exited() {
            panic!(
                "{} exited on its own ({status}); its output:\n{}",
                self.name,
                self.output()
            );
        }
        let panics = self.log_lines("panicked");
        assert!(
            panics.is_empty(),
            "{} panicked: {panics:#?}\nits output:\n{}",
            self.name,
            self.output()
        );
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let started = Instant::now();
        self.kill();
        if std::thread::panicking() {
            let output = self.output();
            let cut = output.len().saturating_sub(PRINTED_LOG);
            let cut = (cut..=output.len())
                .find(|i| output.is_char_boundary(*i))
                .unwrap_or(0);
            eprintln!(
                "----- {} ({}) output{} -----\n{}\n----- end of {} output (killed in {:?}) -----",
                self.name,
                self.address,
                if cut > 0 { ", last 16 KiB" } else { "" },
                &output[cut..],
                self.name,
                started.elapsed()
            );
        }
        let _ = std::fs::remove_file(&self.log);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.network_db.display()));
        }
    }
}
