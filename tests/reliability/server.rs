//! A real `charges` server process on `127.0.0.1:0`, killed (SIGKILL) when its
//! guard drops. Its stderr (the log) and any stdout after the ready line are
//! kept, printed if the test fails, and searched for panics.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const READY: &str = "charges is ready: open ";
const STARTUP_LIMIT: Duration = Duration::from_secs(30);
/// How much of a log a failing test prints (its end).
const PRINTED_LOG: usize = 16 * 1024;

pub struct Config {
    pub pool_size: u32,
    pub pool_timeout: &'static str,
    pub workers: u32,
    /// `DEMO_MAX_DELAYED`: transactions `delay-commit` may hold at once.
    pub demo_max_delayed: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            pool_size: 8,
            pool_timeout: "5s",
            workers: 2,
            demo_max_delayed: 2,
        }
    }
}

pub struct Server {
    pub name: String,
    /// `http://127.0.0.1:PORT`
    pub url: String,
    pub addr: SocketAddr,
    child: Option<Child>,
    log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
}

fn spawn_reader(
    stream: impl std::io::Read + Send + 'static,
    prefix: &'static str,
    log: Arc<Mutex<String>>,
    ready: Option<mpsc::Sender<String>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut ready = ready;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(url) = line.strip_prefix(READY)
                && let Some(tx) = ready.take()
            {
                let _ = tx.send(url.trim().trim_end_matches('/').to_owned());
            }
            let mut log = log.lock().unwrap();
            log.push_str(prefix);
            log.push_str(&line);
            log.push('\n');
        }
    })
}

impl Server {
    /// Starts the binary on `database_url` and waits (bounded) for its ready
    /// line. Blocking: call it from a thread to start several at once.
    pub fn start(name: &str, database_url: &str, config: &Config) -> Server {
        Server::try_start(name, database_url, config).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Like [`Server::start`], but a server that exits or hangs before its
    /// ready line is an `Err` with its output.
    pub fn try_start(name: &str, database_url: &str, config: &Config) -> Result<Server, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_charges"))
            .env("DATABASE_URL", database_url)
            .env("BIND", "127.0.0.1:0")
            .env("POOL_SIZE", config.pool_size.to_string())
            .env("POOL_TIMEOUT", config.pool_timeout)
            .env("WORKERS", config.workers.to_string())
            .env("DEMO", "true")
            .env("DEMO_MAX_DELAYED", config.demo_max_delayed.to_string())
            .env("RUST_LOG", "info,actix_server=warn")
            .env("RUST_BACKTRACE", "1")
            .env("NO_COLOR", "1")
            .env_remove("IDEMPOTENCY_TTL")
            .env_remove("REQUIRE_IDEMPOTENCY_KEY")
            .env_remove("WEB_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the charges binary");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let readers = vec![
            spawn_reader(
                child.stdout.take().unwrap(),
                "[stdout] ",
                log.clone(),
                Some(tx),
            ),
            spawn_reader(child.stderr.take().unwrap(), "", log.clone(), None),
        ];
        let mut server = Server {
            name: name.to_owned(),
            url: String::new(),
            addr: "127.0.0.1:0".parse().unwrap(),
            child: Some(child),
            log,
            readers,
        };
        match rx.recv_timeout(STARTUP_LIMIT) {
            Ok(url) => {
                server.addr = url
                    .strip_prefix("http://")
                    .and_then(|a| a.parse().ok())
                    .unwrap_or_else(|| panic!("{name}: unexpected ready URL {url:?}"));
                server.url = url;
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
                Err(format!("{name} {how}; its output:\n{}", server.log()))
            }
        }
    }

    /// `kill -9`: no shutdown, no flush, open transactions left to PostgreSQL.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            // The pipes are closed now: let the readers take the last lines.
            for reader in self.readers.drain(..) {
                let _ = reader.join();
            }
        }
    }

    /// Whether the process has exited on its own (it should not).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Log lines containing `needle`.
    pub fn log_lines(&self, needle: &str) -> Vec<String> {
        self.log()
            .lines()
            .filter(|l| l.contains(needle))
            .map(str::to_owned)
            .collect()
    }

    /// The server is still running (unless the test killed it), and nothing
    /// in it panicked.
    pub fn assert_healthy(&mut self) {
        if let Some(status) = self.exited() {
            panic!(
                "{} exited on its own ({status}); its log:\n{}",
                self.name,
                self.log()
            );
        }
        let panics = self.log_lines("panicked");
        assert!(
            panics.is_empty(),
            "{} panicked: {panics:#?}\nits log:\n{}",
            self.name,
            self.log()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let started = Instant::now();
        self.kill();
        if std::thread::panicking() {
            let log = self.log();
            let cut = log.len().saturating_sub(PRINTED_LOG);
            let cut = (cut..=log.len())
                .find(|i| log.is_char_boundary(*i))
                .unwrap_or(0);
            eprintln!(
                "----- {} ({}) log{} -----\n{}\n----- end of {} log (killed in {:?}) -----",
                self.name,
                self.url,
                if cut > 0 { ", last 16 KiB" } else { "" },
                &log[cut..],
                self.name,
                started.elapsed()
            );
        }
    }
}
