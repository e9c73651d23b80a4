//! A real webhook receiver on loopback for the delivery tests: it records
//! every request (method, path, headers, body) and answers a scripted
//! sequence (a status, a redirect, or a hang), then 200 to everything.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the receiver answers a request with.
#[derive(Debug, Clone)]
pub enum Reply {
    Status(u16),
    /// `302 Found` to this location.
    Redirect(String),
    /// Reads the request and answers nothing for this long.
    Hang(Duration),
}

/// A request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Lowercase names.
    pub headers: HashMap<String, String>,
    pub body: String,
    pub at: Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(String::as_str).unwrap_or("")
    }
}

#[derive(Clone)]
pub struct Receiver {
    pub port: u16,
    script: Arc<Mutex<VecDeque<Reply>>>,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    /// A receiver answering `script` in order, then 200.
    pub async fn start(script: Vec<Reply>) -> Receiver {
        Receiver::start_on(0, script).await
    }

    /// [`Receiver::start`] on `port` of 127.0.0.1 (0: any free one).
    pub async fn start_on(port: u16, script: Vec<Reply>) -> Receiver {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let receiver = Receiver {
            port: listener.local_addr().unwrap().port(),
            script: Arc::new(Mutex::new(script.into())),
            received: Arc::new(Mutex::new(Vec::new())),
        };
        let this = receiver.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(this.clone().serve(stream));
            }
        });
        receiver
    }

    /// `http://127.0.0.1:PORT/hook`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// Waits (at most `within`) until `n` requests arrived; them.
    pub async fn until(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = Instant::now() + within;
        loop {
            let got = self.received();
            if got.len() >= n || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn serve(self, mut stream: TcpStream) {
        let Some(request) = read_request(&mut stream).await else {
            return;
        };
        self.received.lock().unwrap().push(request);
        let reply = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Reply::Status(200));
        let head = match reply {
            Reply::Status(status) => format!("HTTP/1.1 {status} Scripted\r\n"),
            Reply::Redirect(to) => format!("HTTP/1.1 302 Found\r\nlocation: {to}\r\n"),
            Reply::Hang(pause) => {
                tokio::time::sleep(pause).await;
                return;
            }
        };
        let answer = format!("{head}content-length: 2\r\nconnection: close\r\n\r\nok");
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    }
}

async fn read_request(stream: &mut TcpStream) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, path) = (first.next()?.to_owned(), first.next()?.to_owned());
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
        at: Instant::now(),
    })
}
