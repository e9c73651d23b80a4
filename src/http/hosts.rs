//! Which `Host` a loopback-only service answers: a name of loopback
//! (`localhost`, `127.0.0.1`, `[::1]`, any port) or one of `ALLOWED_HOSTS`.
//!
//! A port on loopback is no wall against a web page: with DNS rebinding, a
//! page of `evil.example` has its own name resolve to 127.0.0.1 and reads
//! whatever the port answers, as its own origin. The browser still sends
//! `Host: evil.example`, so a service meant for this machine refuses a Host
//! it does not know. Demo mode (the page, `/demo/*`, the demo account),
//! `/metrics` and the in-process card network check it; the API of
//! `charges serve` does not (any name may front it).

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::middleware::Next;

use crate::http::problem::{self, HOST_NOT_ALLOWED};

/// The Host names a loopback-only service answers.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// `ALLOWED_HOSTS`, lowercased, without ports.
    configured: Vec<String>,
}

impl AllowedHosts {
    /// Loopback's names and `configured` (`ALLOWED_HOSTS`' entries).
    pub fn new(configured: &[String]) -> AllowedHosts {
        AllowedHosts {
            configured: configured
                .iter()
                .map(|name| name.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|name| !name.is_empty())
                .collect(),
        }
    }

    /// Whether a request with this `Host` header (`None`: none) is
    /// answered. A request without one comes from no browser, so it is no
    /// rebinding page's; but a browser always sends one, so it is refused
    /// like an unknown name rather than guessed at.
    pub fn allows(&self, host: Option<&str>) -> bool {
        let Some(name) = host.and_then(host_name) else {
            return false;
        };
        matches!(name.as_str(), "localhost" | "127.0.0.1" | "[::1]")
            || self.configured.contains(&name)
    }
}

/// The name part of a `Host` header (RFC 9110 §7.2: `host [":" port]`),
/// lowercased, without a trailing dot; `None` if it is not of that form.
fn host_name(header: &str) -> Option<String> {
    let header = header.trim();
    let name = if header.starts_with('[') {
        // An IPv6 literal: up to its closing bracket.
        let end = header.find(']')?;
        let (name, rest) = header.split_at(end + 1);
        if !(rest.is_empty() || port(rest.strip_prefix(':')?)) {
            return None;
        }
        name
    } else {
        match header.split_once(':') {
            Some((name, p)) if port(p) => name,
            Some(_) => return None,
            None => header,
        }
    };
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    (!name.is_empty()).then_some(name)
}

fn port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// Middleware: a request whose `Host` is not allowed is answered `421
/// host-not-allowed` before anything else runs (its body unread).
pub async fn check(
    allowed: std::sync::Arc<AllowedHosts>,
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let host = req
        .headers()
        .get(actix_web::http::header::HOST)
        .and_then(|h| h.to_str().ok());
    if allowed.allows(host) {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    let response = problem::response(
        &HOST_NOT_ALLOWED,
        "This service answers only requests addressed to this machine's loopback names (localhost, 127.0.0.1, [::1]) or to a name in ALLOWED_HOSTS.",
        Vec::new(),
    );
    Ok(req.into_response(response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_configured_ones_are_allowed_with_any_port() {
        let hosts = AllowedHosts::new(&["Pay.Example.com".to_owned(), " ".to_owned()]);
        for allowed in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:9464",
            "pay.example.com",
            "pay.example.com.:443",
        ] {
            assert!(hosts.allows(Some(allowed)), "{allowed}");
        }
        for refused in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "127.0.0.2",
            "[::2]",
            "localhost:80:80",
            "localhost:x",
            "[::1]x",
            "",
            ":8080",
        ] {
            assert!(!hosts.allows(Some(refused)), "{refused}");
        }
        assert!(!hosts.allows(None));
    }
}
