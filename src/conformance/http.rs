//! The checker's HTTP: HTTP/1.1 written by hand on a plain `TcpStream`, one
//! connection per request (`Connection: close`). By hand because the checks
//! send what a polite client library will not (two `Idempotency-Key` lines,
//! non-ASCII bytes in a field value) and lose a response on purpose (write
//! the request, close the connection before reading). Plain `http://` only.
//!
//! Bounded, because it is pointed at servers nobody vouches for: a response
//! head of at most [`MAX_HEAD`] bytes, a body of at most [`MAX_BODY`], one
//! deadline for the whole exchange (a server dripping a byte a second
//! cannot hold it past `--timeout`), and no redirect is ever followed (a
//! 3xx is an answer like any other).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// The longest status line and header block read.
pub const MAX_HEAD: usize = 32 * 1024;
/// The longest body read (a list of 100 resources fits many times over).
pub const MAX_BODY: usize = 512 * 1024;

use serde_json::Value;

/// Where the server listens: `host:port` from an `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub host: String,
    pub port: u16,
}

/// Splits `http://host[:port][/path?query]` into its origin and its
/// path (`/` when it has none). `https://` is refused with a reason.
pub fn parse_url(url: &str) -> Result<(Origin, String), String> {
    if url.starts_with("https://") {
        return Err(format!(
            "{url}: https:// is not supported: the checker speaks plain HTTP/1.1 only \
             (point it at the server's own http:// address, or at a local TLS-terminating proxy)"
        ));
    }
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: not an http:// URL"))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_owned()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_owned()),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(format!("{url}: expected http://host[:port]/path"));
    }
    // [v6]:port, host:port, or host alone.
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("{url}: bad port {p:?}"))?,
        ),
        _ => (authority, 80),
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok((Origin { host, port }, path))
}

impl Origin {
    /// The `Host` header's value.
    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    /// A connection, not yet used: the concurrent checks open theirs
    /// before the burst, so that the requests leave together.
    pub fn connect(&self, timeout: Duration) -> Result<TcpStream, String> {
        let addrs = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {}: {e}", self.authority()))?;
        let mut last = format!("{} has no address", self.authority());
        for addr in addrs {
            match TcpStream::connect_timeout(&addr, timeout) {
                Ok(stream) => {
                    stream.set_read_timeout(Some(timeout)).ok();
                    stream.set_write_timeout(Some(timeout)).ok();
                    stream.set_nodelay(true).ok();
                    return Ok(stream);
                }
                Err(e) => last = format!("cannot connect to {addr}: {e}"),
            }
        }
        Err(last)
    }
}

/// One request, its field values as bytes (a check may send non-ASCII).
#[derive(Debug, Clone)]
pub struct Request {
    pub method: &'static str,
    pub path: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn new(method: &'static str, path: &str) -> Request {
        Request {
            method,
            path: path.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a field line (another line if the name is already there).
    pub fn header(mut self, name: &str, value: impl Into<Vec<u8>>) -> Request {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    pub fn json_body(mut self, body: &str) -> Request {
        self.body = body.as_bytes().to_vec();
        if !self.has("content-type") {
            self = self.header("Content-Type", "application/json");
        }
        self
    }

    fn has(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    fn to_bytes(&self, origin: &Origin) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.path).into_bytes();
        out.extend_from_slice(
            format!("Host: {}\r\nConnection: close\r\n", origin.authority()).as_bytes(),
        );
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        if self.method != "GET" || !self.body.is_empty() {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// What came back.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The evidence a failed check shows: the status, the content type and
    /// the start of the body.
    pub fn summary(&self) -> String {
        let mut text: String = self.text().chars().take(160).collect();
        if self.body.len() > text.len() {
            text.push('…');
        }
        let text = text.replace(['\r', '\n'], " ");
        match self.header("content-type") {
            Some(ct) => format!("{} ({ct}) {text}", self.status),
            None => format!("{} {text}", self.status),
        }
    }
}

/// Sends `request` on a new connection and reads the whole response, all
/// within `timeout`.
pub fn send(origin: &Origin, request: &Request, timeout: Duration) -> Result<Response, String> {
    let deadline = Instant::now() + timeout;
    let stream = origin.connect(timeout)?;
    exchange(stream, origin, request, deadline)
}

/// Writes `request` on `stream` and reads its response by `deadline`.
pub fn exchange(
    mut stream: TcpStream,
    origin: &Origin,
    request: &Request,
    deadline: Instant,
) -> Result<Response, String> {
    let late = || "no complete answer within --timeout".to_owned();
    let remaining = deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or_else(late)?;
    stream.set_write_timeout(Some(remaining)).ok();
    stream
        .write_all(&request.to_bytes(origin))
        .map_err(|e| format!("writing the request: {e}"))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let remaining = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(late)?;
        stream.set_read_timeout(Some(remaining)).ok();
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            // A server may reset the connection after a complete answer.
            Err(_) if parse(&buf, true).is_some() => 0,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(late());
            }
            Err(e) => return Err(format!("reading the response: {e}")),
        };
        if n > 0 {
            buf.extend_from_slice(&chunk[..n]);
        }
        if let Some(parsed) = parse(&buf, n == 0) {
            return parsed;
        }
        if n == 0 {
            return Err("the server closed the connection without an answer".to_owned());
        }
        too_big(&buf)?;
    }
}

/// `Err` once `buf` holds more than a bounded answer may.
fn too_big(buf: &[u8]) -> Result<(), String> {
    match buf.windows(4).position(|w| w == b"\r\n\r\n") {
        None if buf.len() > MAX_HEAD => Err(format!(
            "the response's head exceeded {} KiB: not read further",
            MAX_HEAD / 1024
        )),
        // Chunk framing adds a little: the raw body may exceed MAX_BODY by it.
        Some(end) if buf.len() - end - 4 > MAX_BODY + MAX_BODY / 8 => Err(format!(
            "the response's body exceeded {} KiB: not read further",
            MAX_BODY / 1024
        )),
        _ => Ok(()),
    }
}

/// Sends `request` and closes the connection at once, without reading:
/// the response is lost, as when a client times out or its network drops.
pub fn send_and_lose(origin: &Origin, request: &Request, timeout: Duration) -> Result<(), String> {
    let mut stream = origin.connect(timeout)?;
    stream
        .write_all(&request.to_bytes(origin))
        .map_err(|e| format!("writing the request: {e}"))?;
    stream.flush().ok();
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

/// A complete response in `buf` (`None`: read more). `eof`: the server
/// closed its side, so a body without a length ends here.
fn parse(buf: &[u8], eof: bool) -> Option<Result<Response, String>> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = match status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
    {
        Some(s) => s,
        None => return Some(Err(format!("not an HTTP status line: {status_line:?}"))),
    };
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let rest = &buf[end + 4..];
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let body = if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        match dechunk(rest) {
            Some(body) => body,
            None if eof => return Some(Err("the chunked body was cut short".to_owned())),
            None => return None,
        }
    } else if let Some(length) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        if length > MAX_BODY {
            return Some(Err(format!(
                "the response announced a {length}-byte body, over {} KiB: not read",
                MAX_BODY / 1024
            )));
        }
        if rest.len() < length {
            return eof.then(|| Err("the body was cut short".to_owned()));
        }
        rest[..length].to_vec()
    } else if status == 204 || status == 304 || eof {
        rest.to_vec()
    } else {
        return None;
    };
    Some(Ok(Response {
        status,
        headers,
        body,
    }))
}

/// The body of a complete chunked message, or `None` if more is to come.
fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        if data.len() < size + 2 {
            return None;
        }
        body.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_origin_and_path() {
        let (o, p) = parse_url("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, p.as_str()),
            ("127.0.0.1", 8080, "/")
        );
        let (o, p) = parse_url("http://example.com/orders?x=1").unwrap();
        assert_eq!(
            (o.host.as_str(), o.port, p.as_str()),
            ("example.com", 80, "/orders?x=1")
        );
        let (o, _) = parse_url("http://[::1]:9/").unwrap();
        assert_eq!((o.host.as_str(), o.port), ("::1", 9));
        assert!(
            parse_url("https://example.com")
                .unwrap_err()
                .contains("plain HTTP")
        );
        assert!(parse_url("ftp://example.com").is_err());
    }

    #[test]
    fn responses_parse_with_a_length_chunked_or_until_close() {
        let r = parse(
            b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (201, &b"{}"[..]));
        assert!(
            parse(
                b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\n{}",
                false
            )
            .is_none()
        );
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse(chunked, false).unwrap().unwrap().body, b"abcde");
        assert!(parse(&chunked[..chunked.len() - 9], false).is_none());
        let close = parse(b"HTTP/1.0 200 OK\r\n\r\nhello", true)
            .unwrap()
            .unwrap();
        assert_eq!(close.body, b"hello");
    }
}
