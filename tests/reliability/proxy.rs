//! A lossy TCP proxy on `127.0.0.1:0`. It forwards every connection to the
//! server; for a chosen share of connections it forwards the request, reads
//! the server's whole response (the client asked for `Connection: close`, so
//! the server closes when it has answered), and then closes the client's
//! side without sending it a byte: the server did the work, the client never
//! hears about it.

use std::net::SocketAddr;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const CONNECTION_LIMIT: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
pub struct Stats {
    pub connections: AtomicUsize,
    pub forwarded: AtomicUsize,
    /// Responses the server sent that the proxy threw away.
    pub lost_responses: AtomicUsize,
    /// Connections chosen to lose whose server sent nothing before closing.
    pub lost_without_response: AtomicUsize,
    pub upstream_errors: AtomicUsize,
}

impl Stats {
    pub fn get(counter: &AtomicUsize) -> usize {
        counter.load(Ordering::SeqCst)
    }
}

pub struct LossyProxy {
    pub url: String,
    pub stats: Arc<Stats>,
    accept: JoinHandle<()>,
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// A fixed pseudo-random choice per connection number (SplitMix64), so a run
/// loses the same share of connections every time.
fn chosen_to_lose(seed: u64, n: u64, per_mille: u64) -> bool {
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % 1000 < per_mille
}

impl LossyProxy {
    pub async fn start(upstream: SocketAddr, lose_per_mille: u64, seed: u64) -> LossyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let stats = Arc::new(Stats::default());
        let shared = stats.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let n = shared.connections.fetch_add(1, Ordering::SeqCst) as u64;
                let lose = chosen_to_lose(seed, n, lose_per_mille);
                let stats = shared.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(
                        CONNECTION_LIMIT,
                        relay(client, upstream, lose, &stats),
                    )
                    .await;
                });
            }
        });
        LossyProxy { url, stats, accept }
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, lose: bool, stats: &Stats) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        stats.upstream_errors.fetch_add(1, Ordering::SeqCst);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    if !lose {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
        stats.forwarded.fetch_add(1, Ordering::SeqCst);
        return;
    }
    let (mut from_client, _to_client) = client.split();
    let (mut from_server, mut to_server) = server.split();
    let mut forward = pin!(async {
        let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
        let _ = to_server.flush().await;
    });
    let mut swallow = pin!(async {
        let mut buf = [0u8; 8192];
        let mut total = 0usize;
        while let Ok(n) = from_server.read(&mut buf).await {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let mut forwarding = true;
    let swallowed = loop {
        tokio::select! {
            total = &mut swallow => break total,
            _ = &mut forward, if forwarding => forwarding = false,
        }
    };
    if swallowed > 0 {
        stats.lost_responses.fetch_add(1, Ordering::SeqCst);
    } else {
        stats.lost_without_response.fetch_add(1, Ordering::SeqCst);
    }
    // Dropping both halves closes the client's connection unanswered.
}

/// A TCP proxy on `127.0.0.1:0` in front of `upstream` that forwards every
/// byte both ways until it is paused; paused, it forwards nothing in either
/// direction and closes nothing (new connections are accepted and left
/// silent too): a network path that drops packets, as the ends see it. The
/// kernel keeps ACKing what it receives, so neither end's TCP notices.
pub struct PausableProxy {
    pub addr: SocketAddr,
    paused: tokio::sync::watch::Sender<bool>,
    /// Only the upstream's answers held (requests still go through).
    answers_paused: tokio::sync::watch::Sender<bool>,
    accept: JoinHandle<()>,
}

impl Drop for PausableProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl PausableProxy {
    pub async fn start(upstream: SocketAddr) -> PausableProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (paused, watch) = tokio::sync::watch::channel(false);
        let (answers_paused, answers_watch) = tokio::sync::watch::channel(false);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let watch = watch.clone();
                let answers_watch = answers_watch.clone();
                tokio::spawn(async move {
                    let mut gate = watch.clone();
                    // A new connection waits while paused, as a SYN would.
                    let _ = gate.wait_for(|p| !*p).await;
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    tokio::join!(
                        pump(client_read, server_write, watch.clone(), None),
                        pump(server_read, client_write, watch, Some(answers_watch)),
                    );
                });
            }
        });
        PausableProxy {
            addr,
            paused,
            answers_paused,
            accept,
        }
    }

    pub fn pause(&self) {
        let _ = self.paused.send(true);
    }

    /// Holds the upstream's answers only: it receives and does the work,
    /// and its client waits for an answer that does not come yet.
    pub fn pause_answers(&self) {
        let _ = self.answers_paused.send(true);
    }

    pub fn resume(&self) {
        let _ = self.paused.send(false);
        let _ = self.answers_paused.send(false);
    }
}

/// Copies `from` to `to`, holding each chunk (and reading nothing more)
/// while the proxy is paused.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: tokio::sync::watch::Receiver<bool>,
    mut also: Option<tokio::sync::watch::Receiver<bool>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if let Some(also) = also.as_mut()
            && also.wait_for(|p| !*p).await.is_err()
        {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// A proxy for HTTP/1.1 with keep-alive that loses each answer, not each
/// connection, with the given chance: it reads every response whole (head
/// and `Content-Length` body), and to lose one it closes the client's side
/// without sending it. The upstream did the work; the client never hears.
pub struct LossyHttpProxy {
    pub url: String,
    pub answers: Arc<AtomicUsize>,
    pub lost: Arc<AtomicUsize>,
    accept: JoinHandle<()>,
}

impl Drop for LossyHttpProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl LossyHttpProxy {
    pub async fn start(upstream: SocketAddr, lose_per_mille: u64, seed: u64) -> LossyHttpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (answers, lost) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (counted, dropped) = (answers.clone(), lost.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (counted, dropped) = (counted.clone(), dropped.clone());
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut client_read, mut client_write) = client.into_split();
                    let (server_read, mut server_write) = server.into_split();
                    let forward = async move {
                        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                    };
                    let answer = async move {
                        let mut reader = tokio::io::BufReader::new(server_read);
                        loop {
                            let Some(response) = read_response(&mut reader).await else {
                                return;
                            };
                            let n = counted.fetch_add(1, Ordering::SeqCst) as u64;
                            if chosen_to_lose(seed, n, lose_per_mille) {
                                dropped.fetch_add(1, Ordering::SeqCst);
                                return; // drops the client's side unanswered
                            }
                            if client_write.write_all(&response).await.is_err() {
                                return;
                            }
                        }
                    };
                    tokio::select! {
                        _ = forward => {}
                        _ = answer => {}
                    }
                });
            }
        });
        LossyHttpProxy {
            url,
            answers,
            lost,
            accept,
        }
    }
}

/// One whole HTTP/1.1 response (its head and a `Content-Length` body).
async fn read_response(
    reader: &mut tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Option<Vec<u8>> {
    use tokio::io::AsyncBufReadExt;
    let mut out = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = Vec::new();
        if reader.read_until(b'\n', &mut line).await.ok()? == 0 {
            return None;
        }
        out.extend_from_slice(&line);
        let text = String::from_utf8_lossy(&line).to_ascii_lowercase();
        if let Some(v) = text.strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        if line == b"\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).await.ok()?;
    out.extend_from_slice(&body);
    Some(out)
}
