//! Where a webhook may be sent. An endpoint's URL is the account's to
//! choose, and our server makes the request: without this rule anyone with
//! an account could make it call the machines beside it (request forgery).
//! The rule is checked when an endpoint is registered **and** on every
//! connect, against the addresses the name resolves to then, so a name that
//! later resolves elsewhere (DNS rebinding) does not get around it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

/// What the operator allows beyond public `https://` addresses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetPolicy {
    /// `WEBHOOK_ALLOW_PRIVATE_TARGETS`: loopback, private and link-local
    /// addresses too (the loopback demo and the tests, whose receivers run
    /// on this machine).
    pub allow_private: bool,
    /// Loopback addresses alone (`127.0.0.0/8`, `::1`): the loopback demo,
    /// whose own receiver and the learner's run on this machine, while its
    /// network neighbours (private, link-local: a cloud's metadata service)
    /// stay refused.
    pub allow_loopback: bool,
    /// `WEBHOOK_ALLOW_HTTP`: `http://` as well as `https://`.
    pub allow_http: bool,
    /// Exact addresses allowed whatever their range, over `http://` too:
    /// the hosted demo's own address, so that it reaches the receiver it
    /// hosts and nothing else on its machine.
    pub also_allow: Vec<SocketAddr>,
}

impl TargetPolicy {
    /// Whether `http://` may be used to `host:port`: where the operator
    /// allows it, or to an address of [`also_allow`](Self::also_allow)
    /// written as itself.
    pub fn http_allowed(&self, host: &str, port: u16) -> bool {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        self.allow_http
            || bare
                .parse::<IpAddr>()
                .is_ok_and(|ip| self.also_allow.contains(&SocketAddr::new(ip, port)))
    }
}

/// The range name of `127.0.0.0/8` and `::1` (and `::ffff:127.0.0.1`).
const LOOPBACK: &str = "loopback";

/// Why an address may not be sent to, or `None` if it may: the name of its
/// range, for the error a client reads.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            // An IPv4 address written as IPv6 is the IPv4 address.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            forbidden_v6(v6)
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        _ if ip.is_unspecified() || a == 0 => "unspecified",
        _ if ip.is_loopback() => LOOPBACK,
        _ if ip.is_private() => "private",
        // Carrier-grade NAT (RFC 6598): private in all but name.
        _ if a == 100 && (64..128).contains(&b) => "shared (carrier-grade NAT)",
        // 169.254.0.0/16 holds cloud metadata services (169.254.169.254).
        _ if ip.is_link_local() => "link-local",
        _ if ip.is_multicast() => "multicast",
        // 240.0.0.0/4, the broadcast address included.
        _ if a >= 240 => "reserved",
        _ => return None,
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(match () {
        _ if ip.is_unspecified() => "unspecified",
        _ if ip.is_loopback() => LOOPBACK,
        _ if ip.is_multicast() => "multicast",
        // fe80::/10
        _ if first & 0xffc0 == 0xfe80 => "link-local",
        // fc00::/7, unique local: IPv6's private range.
        _ if first & 0xfe00 == 0xfc00 => "private (unique local)",
        // ::/96, the deprecated IPv4-compatible form, and 64:ff9b::/96
        // (NAT64), which reach an IPv4 address of the rule's choosing.
        _ if ip.segments()[..6] == [0; 6] || ip.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => {
            "IPv4 embedded in IPv6"
        }
        _ => return None,
    })
}

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("{host} could not be resolved")]
    Unresolved { host: String },
    #[error("{host} resolves to {ip}, a {range} address, which webhooks are not sent to")]
    Forbidden {
        host: String,
        ip: IpAddr,
        range: &'static str,
    },
}

/// The addresses `host:port` resolves to now, if every one of them may be
/// sent to under `policy`. One forbidden address refuses the whole name (a
/// connect could otherwise pick it).
pub fn resolve(
    host: &str,
    port: u16,
    policy: &TargetPolicy,
) -> Result<Vec<SocketAddr>, TargetError> {
    // A bracketed IPv6 literal (as a URL writes it) resolves to itself.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let unresolved = || TargetError::Unresolved {
        host: host.to_owned(),
    };
    let addrs: Vec<SocketAddr> = (bare, port)
        .to_socket_addrs()
        .map_err(|_| unresolved())?
        .collect();
    if addrs.is_empty() {
        return Err(unresolved());
    }
    check(host, &addrs, policy)?;
    Ok(addrs)
}

/// Refuses `addrs` if any is forbidden under `policy`.
pub fn check(host: &str, addrs: &[SocketAddr], policy: &TargetPolicy) -> Result<(), TargetError> {
    if policy.allow_private {
        return Ok(());
    }
    for addr in addrs.iter().filter(|a| !policy.also_allow.contains(a)) {
        if let Some(range) = forbidden(addr.ip())
            && !(policy.allow_loopback && range == LOOPBACK)
        {
            return Err(TargetError::Forbidden {
                host: host.to_owned(),
                ip: addr.ip(),
                range,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_address_is_allowed_and_its_neighbours_are_not() {
        let own: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let policy = TargetPolicy {
            also_allow: vec![own],
            ..TargetPolicy::default()
        };
        assert_eq!(check("x", &[own], &policy), Ok(()));
        for other in ["127.0.0.1:8081", "127.0.0.2:8080", "[::1]:8080"] {
            let addr: SocketAddr = other.parse().unwrap();
            assert!(check("x", &[addr], &policy).is_err(), "{other}");
            assert!(check("x", &[own, addr], &policy).is_err(), "{other}");
        }
        assert!(policy.http_allowed("127.0.0.1", 8080));
        assert!(!policy.http_allowed("127.0.0.1", 8081));
        assert!(!policy.http_allowed("localhost", 8080));
    }

    fn range(ip: &str) -> Option<&'static str> {
        forbidden(ip.parse().unwrap())
    }

    #[test]
    fn every_internal_range_is_refused_in_both_families() {
        for (ip, expected) in [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("100.64.0.1", "shared (carrier-grade NAT)"),
            ("100.127.255.255", "shared (carrier-grade NAT)"),
            ("169.254.169.254", "link-local"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("240.0.0.1", "reserved"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fc00::1", "private (unique local)"),
            ("fd12:3456::1", "private (unique local)"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::10.0.0.1", "IPv4 embedded in IPv6"),
            ("64:ff9b::a00:1", "IPv4 embedded in IPv6"),
        ] {
            assert_eq!(range(ip), Some(expected), "{ip}");
        }
    }

    #[test]
    fn public_addresses_may_be_sent_to() {
        for ip in [
            "93.184.215.14",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.32.0.1",
            "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(range(ip), None, "{ip}");
        }
    }

    #[test]
    fn a_name_is_refused_for_what_it_resolves_to_unless_the_operator_allows_it() {
        let refused_as = |host| match resolve(host, 443, &TargetPolicy::default()) {
            Err(TargetError::Forbidden { range, .. }) => range,
            other => panic!("{host}: {other:?}"),
        };
        assert_eq!(refused_as("localhost"), "loopback");
        assert_eq!(refused_as("[::1]"), "loopback");
        let allowed = TargetPolicy {
            allow_private: true,
            ..TargetPolicy::default()
        };
        assert!(!resolve("127.0.0.1", 8080, &allowed).unwrap().is_empty());
        let loopback = TargetPolicy {
            allow_loopback: true,
            ..TargetPolicy::default()
        };
        for own in ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "localhost"] {
            assert!(resolve(own, 8080, &loopback).is_ok(), "{own}");
        }
        for neighbour in ["10.0.0.1", "169.254.169.254", "[fd00::1]", "0.0.0.0"] {
            assert!(resolve(neighbour, 8080, &loopback).is_err(), "{neighbour}");
        }
        let err = resolve("no-such-host.invalid", 443, &allowed).unwrap_err();
        assert!(matches!(err, TargetError::Unresolved { .. }), "{err:?}");
    }
}
