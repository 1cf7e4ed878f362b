//! The egress policy of json channels: which addresses the operator may connect to when it
//! fetches a channel's data. Anyone who may create a channel chooses its URL, so without a
//! policy a channel could make the operator read its own `/metrics`, a cloud metadata
//! service or anything else only the operator's network reaches.
//!
//! An address is refused when a `--json-deny-cidr` network holds it, unless a
//! `--json-allow-cidr` network holds it too. The decision is pure; `fetch` applies it to
//! the addresses it is about to connect to (after resolving a name once) and to IP
//! literals in URLs.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;

/// The flag the deny list is set with, named in every refusal.
pub const DENY_FLAG: &str = "--json-deny-cidr";

/// `--json-deny-cidr` when not given: loopback, link-local (the cloud metadata service
/// 169.254.169.254 among them), unspecified, multicast.
pub const DEFAULT_DENY: [&str; 8] = [
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/32",
    "::/128",
    "224.0.0.0/4",
    "ff00::/8",
];

/// A network: an address and a prefix length, host bits cleared (an `ipnet::IpNet`).
/// IPv4 networks written in IPv4-mapped IPv6 form (`::ffff:127.0.0.0/104`) are kept as the
/// IPv4 network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr(IpNet);

impl Cidr {
    /// Whether the network holds `ip`; an IPv4-mapped IPv6 address is judged as the IPv4
    /// address it maps (a connection to it is an IPv4 connection).
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.contains(&ip.to_canonical())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.0.addr(), self.0.prefix_len())
    }
}

impl FromStr for Cidr {
    type Err = String;

    /// `10.0.0.0/8`, `fd00::/8`, or one address (`10.1.2.3`: a /32, `::1`: a /128).
    /// Host bits are cleared (`10.1.2.3/8` is `10.0.0.0/8`), as most network tools do.
    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let bad =
            || format!("{text:?} is not a CIDR (like 10.0.0.0/8 or fd00::/8) or an IP address");
        let (addr, prefix) = match t.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (t, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            // Digits only: `u8::from_str` would also take `+8`.
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                p.parse::<u8>().ok().filter(|p| *p <= bits).ok_or_else(|| {
                    format!("{text:?} has a prefix length above {bits}, the most for its address")
                })?
            }
            Some(_) => return Err(bad()),
        };
        canonical(addr, prefix).ok_or_else(bad)
    }
}

/// The network with host bits cleared; an IPv4-mapped IPv6 network of at least /96 as
/// the IPv4 network it maps.
fn canonical(addr: IpAddr, prefix: u8) -> Option<Cidr> {
    if let IpAddr::V6(v6) = addr
        && prefix >= 96
        && let Some(v4) = v6.to_ipv4_mapped()
    {
        return canonical(IpAddr::V4(v4), prefix.saturating_sub(96));
    }
    IpNet::new(addr, prefix).ok().map(|n| Cidr(n.trunc()))
}

/// A clap value parser for the CIDR flags (a bad value is a usage error that names it).
pub fn parse_cidr(text: &str) -> Result<Cidr, String> {
    text.parse()
}

/// The networks json channels may not connect to, and the exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    deny: Vec<Cidr>,
    allow: Vec<Cidr>,
}

impl Default for Policy {
    /// [`DEFAULT_DENY`], no exceptions: what the operator runs with unless told otherwise.
    fn default() -> Self {
        let deny = DEFAULT_DENY.iter().filter_map(|c| c.parse().ok()).collect();
        Policy::new(deny, Vec::new())
    }
}

impl Policy {
    pub fn new(deny: Vec<Cidr>, allow: Vec<Cidr>) -> Self {
        Policy { deny, allow }
    }

    /// Whether a json channel may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        let held = |list: &[Cidr]| list.iter().any(|c| c.contains(ip));
        if held(&self.deny) && !held(&self.allow) {
            Err(Refused(ip.to_canonical()))
        } else {
            Ok(())
        }
    }

    /// The check for a URL's host: an IP literal (`127.0.0.1`, `[::1]`; the URL parser
    /// has already turned `127.1` and `0x7f.1` into dotted form) is checked here, since no
    /// name is resolved for it; a name is checked when it is resolved ([`Policy::filter`]).
    pub fn check_host(&self, host: &str) -> Result<(), Refused> {
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        match literal.parse::<IpAddr>() {
            Ok(ip) => self.check(ip),
            Err(_) => Ok(()),
        }
    }

    /// Of the addresses a name resolved to, the ones a json channel may connect to; when
    /// there are none, the refusal of the first.
    pub fn filter(&self, addrs: &[IpAddr]) -> Result<Vec<IpAddr>, Refused> {
        let allowed: Vec<IpAddr> = addrs
            .iter()
            .copied()
            .filter(|ip| self.check(*ip).is_ok())
            .collect();
        match (allowed.is_empty(), addrs.first()) {
            (true, Some(first)) => Err(Refused(first.to_canonical())),
            _ => Ok(allowed),
        }
    }
}

/// A connection the policy refuses: the address, as the status names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("address {0} is not allowed ({DENY_FLAG})")]
pub struct Refused(pub IpAddr);

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn cidrs_parse_and_clear_host_bits() {
        assert_eq!(cidr("10.1.2.3/8").to_string(), "10.0.0.0/8");
        assert_eq!(cidr(" 10.0.0.0/8 ").to_string(), "10.0.0.0/8");
        assert_eq!(cidr("fd00::1/8").to_string(), "fd00::/8");
        assert_eq!(cidr("10.1.2.3").to_string(), "10.1.2.3/32");
        assert_eq!(cidr("::1").to_string(), "::1/128");
        assert_eq!(cidr("0.0.0.0/0").to_string(), "0.0.0.0/0");
        assert_eq!(cidr("::/0").to_string(), "::/0");
        // IPv4-mapped networks are the IPv4 network.
        assert_eq!(cidr("::ffff:127.0.0.1/104").to_string(), "127.0.0.0/8");
        assert_eq!(cidr("::ffff:10.0.0.1").to_string(), "10.0.0.1/32");
        // Shorter than /96 it is an IPv6 network that holds more than mapped addresses.
        assert_eq!(cidr("::ffff:0.0.0.0/80").to_string(), "::/80");
    }

    #[test]
    fn bad_cidrs_name_the_value() {
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0/8",
            "localhost",
            "10.0.0.0/8/8",
            "fd00::/x",
            "10.0.0.0 /8",
        ] {
            let e = Cidr::from_str(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?} is not a CIDR")), "{bad}: {e}");
        }
        for (bad, bits) in [("10.0.0.0/33", 32), ("fd00::/129", 128), ("::/300", 128)] {
            let e = Cidr::from_str(bad).unwrap_err();
            assert!(
                e.contains(&format!("prefix length above {bits}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn cidrs_hold_their_addresses_only() {
        let net = cidr("10.0.0.0/8");
        assert!(net.contains(ip("10.0.0.0")));
        assert!(net.contains(ip("10.255.255.255")));
        assert!(!net.contains(ip("11.0.0.0")));
        assert!(!net.contains(ip("9.255.255.255")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!cidr("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(cidr("1.2.3.4").contains(ip("1.2.3.4")));
        assert!(!cidr("1.2.3.4").contains(ip("1.2.3.5")));
        let v6 = cidr("fe80::/10");
        assert!(v6.contains(ip("fe80::1")));
        assert!(v6.contains(ip("febf:ffff::1")));
        assert!(!v6.contains(ip("fec0::1")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        assert!(!cidr("::/0").contains(ip("1.2.3.4")));
    }

    #[test]
    fn v4_mapped_addresses_are_judged_as_ipv4() {
        assert!(cidr("127.0.0.0/8").contains(ip("::ffff:127.0.0.1")));
        assert!(cidr("169.254.0.0/16").contains(ip("::ffff:169.254.169.254")));
        assert!(!cidr("127.0.0.0/8").contains(ip("::ffff:10.0.0.1")));
        assert!(cidr("::ffff:127.0.0.0/104").contains(ip("127.0.0.2")));
        assert!(cidr("::ffff:127.0.0.0/104").contains(ip("::ffff:127.0.0.2")));
        // A mapped address is an IPv4 connection: IPv6 networks do not hold it.
        assert!(!cidr("::/0").contains(ip("::ffff:127.0.0.1")));
        let policy = Policy::default();
        assert_eq!(
            policy.check(ip("::ffff:127.0.0.1")),
            Err(Refused(ip("127.0.0.1")))
        );
        assert_eq!(
            policy
                .check(ip("::ffff:169.254.169.254"))
                .unwrap_err()
                .to_string(),
            "address 169.254.169.254 is not allowed (--json-deny-cidr)"
        );
        assert!(policy.check(ip("::ffff:192.0.2.2")).is_ok());
    }

    #[test]
    fn the_default_policy_refuses_local_link_local_unspecified_and_multicast() {
        let policy = Policy::default();
        assert_eq!(
            policy.deny.len(),
            DEFAULT_DENY.len(),
            "a default did not parse"
        );
        for refused in [
            "127.0.0.1",
            "127.0.0.2",
            "127.255.255.255",
            "::1",
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "239.255.255.250",
            "ff02::1",
        ] {
            assert_eq!(
                policy.check(ip(refused)).unwrap_err().to_string(),
                format!("address {refused} is not allowed (--json-deny-cidr)")
            );
        }
        for allowed in [
            "192.0.2.2",
            "10.96.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "8.8.8.8",
            "128.0.0.1",
            "0.0.0.1",
            "169.255.0.1",
            "240.0.0.1",
            "2001:db8::1",
            "fd00::2",
            "::2",
        ] {
            assert_eq!(policy.check(ip(allowed)), Ok(()), "{allowed}");
        }
    }

    #[test]
    fn allow_overrides_deny_for_what_it_lists_only() {
        let policy = Policy::new(
            vec![cidr("127.0.0.0/8"), cidr("10.0.0.0/8")],
            vec![cidr("127.0.0.2/32"), cidr("10.1.0.0/16")],
        );
        assert!(policy.check(ip("127.0.0.2")).is_ok());
        assert!(policy.check(ip("::ffff:127.0.0.2")).is_ok());
        assert!(policy.check(ip("10.1.2.3")).is_ok());
        assert!(policy.check(ip("127.0.0.1")).is_err());
        assert!(policy.check(ip("10.2.0.1")).is_err());
        // Allowing what is not denied changes nothing.
        assert!(policy.check(ip("192.0.2.2")).is_ok());
        // An empty deny list refuses nothing.
        assert!(Policy::new(vec![], vec![]).check(ip("127.0.0.1")).is_ok());
    }

    #[test]
    fn ip_literal_hosts_are_checked_and_names_left_to_the_resolver() {
        let policy = Policy::default();
        assert_eq!(
            policy.check_host("127.0.0.1"),
            Err(Refused(ip("127.0.0.1")))
        );
        assert_eq!(policy.check_host("[::1]"), Err(Refused(ip("::1"))));
        assert_eq!(
            policy.check_host("[::ffff:169.254.169.254]"),
            Err(Refused(ip("169.254.169.254")))
        );
        assert_eq!(policy.check_host("192.0.2.2"), Ok(()));
        assert_eq!(policy.check_host("[2001:db8::1]"), Ok(()));
        assert_eq!(policy.check_host("localhost"), Ok(()));
        assert_eq!(policy.check_host("example.com"), Ok(()));
    }

    #[test]
    fn filtering_keeps_the_allowed_addresses_or_refuses_the_first() {
        let policy = Policy::default();
        let mixed = [
            ip("127.0.0.1"),
            ip("192.0.2.2"),
            ip("::1"),
            ip("2001:db8::1"),
        ];
        assert_eq!(
            policy.filter(&mixed),
            Ok(vec![ip("192.0.2.2"), ip("2001:db8::1")])
        );
        assert_eq!(
            policy.filter(&[ip("::1"), ip("127.0.0.1")]),
            Err(Refused(ip("::1")))
        );
        assert_eq!(
            policy.filter(&[ip("::ffff:127.0.0.1"), ip("::1")]),
            Err(Refused(ip("127.0.0.1")))
        );
        assert_eq!(policy.filter(&[]), Ok(vec![]));
    }
}
