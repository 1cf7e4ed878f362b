//! The egress policy of json and oci channels: which addresses the operator may connect to
//! when it fetches a channel's data or pulls its image. Anyone who may create a channel chooses its URL, so without a
//! policy a channel could make the operator read its own `/metrics`, a cloud metadata
//! service or anything else only the operator's network reaches.
//!
//! An address is refused when a `--egress-deny-cidr` network holds it, unless a
//! `--egress-allow-cidr` network holds it too (`--json-deny-cidr` and `--json-allow-cidr`
//! are their old names). The decision is pure; `fetch` and the registry client apply it to
//! the addresses they are about to connect to (after resolving a name once) and to IP
//! literals in URLs.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::str::FromStr;

use ipnet::IpNet;

/// The flag named in every refusal: the deny list's old name (an alias of
/// `--egress-deny-cidr`), kept because the refusal's text is part of the operator's
/// contract that users and alerts match on.
const DENY_FLAG: &str = "--json-deny-cidr";

/// `--egress-deny-cidr` when not given: loopback, link-local (the cloud metadata service
/// 169.254.169.254 among them), unspecified, multicast, the metadata services that are
/// not link-local (Alibaba Cloud's 100.100.100.200, AWS's IPv6 fd00:ec2::254), Azure's
/// wire server (168.63.129.16: it hands out VM extension settings and certificates), and
/// the NAT64 local-use prefix (64:ff9b:1::/48, RFC 8215), whose embedding of an IPv4
/// address is the site's own choice and so cannot be mapped to the IPv4 rule.
pub const DEFAULT_DENY: [&str; 12] = [
    "127.0.0.0/8",
    "::1/128",
    "169.254.0.0/16",
    "fe80::/10",
    "0.0.0.0/32",
    "::/128",
    "224.0.0.0/4",
    "ff00::/8",
    "100.100.100.200/32",
    "fd00:ec2::254/128",
    "168.63.129.16/32",
    "64:ff9b:1::/48",
];

/// The private ranges (`--egress-deny-private-ranges` adds them to the deny list): RFC 1918,
/// carrier-grade NAT (RFC 6598) and IPv6 unique local addresses.
const PRIVATE_RANGES: [&str; 5] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
];

/// The IPv4 address an IPv6 address stands for, in the forms that reach an IPv4 host:
/// IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, but not `::` and `::1`),
/// SIIT IPv4-translated (`::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4
/// (`2002:AABB:CCDD::/48`). Judged as that IPv4 address, none slips past an IPv4 rule.
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else {
        return None;
    };
    let s = v6.segments();
    let last = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0, 0, 0, 0 | 1] => None,
        [0, 0, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(last(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(last(hi, lo)),
        [0x2002, hi, lo, ..] => Some(last(hi, lo)),
        _ => None,
    }
}

/// The address a rule judges: the IPv4 address an IPv6 form stands for, else itself.
fn judged(ip: IpAddr) -> IpAddr {
    embedded_ipv4(ip).map_or(ip, IpAddr::V4)
}

/// A network: an address and a prefix length, host bits cleared (an `ipnet::IpNet`).
/// IPv4 networks written in IPv4-mapped IPv6 form (`::ffff:127.0.0.0/104`) are kept as the
/// IPv4 network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr(IpNet);

impl Cidr {
    /// Whether the network holds `ip`, or the IPv4 address an IPv6 form of it stands for
    /// ([`embedded_ipv4`]: a connection to it reaches that IPv4 host). An IPv4-mapped
    /// address is an IPv4 connection: it is judged as IPv4 only; the other forms are IPv6
    /// packets (to a translator or relay) and are judged both ways.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let canonical = ip.to_canonical();
        if canonical != ip {
            return self.0.contains(&canonical);
        }
        self.0.contains(&ip) || self.0.contains(&judged(ip))
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

/// [`DEFAULT_DENY`], parsed.
pub fn default_deny() -> Vec<Cidr> {
    DEFAULT_DENY.iter().filter_map(|c| c.parse().ok()).collect()
}

/// A clap value parser for the CIDR flags (a bad value is a usage error that names it).
pub fn parse_cidr(text: &str) -> Result<Cidr, String> {
    text.parse()
}

/// The networks json and oci channels may not connect to, and the exceptions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    deny: Vec<Cidr>,
    allow: Vec<Cidr>,
}

impl Default for Policy {
    /// [`DEFAULT_DENY`], no exceptions: what the operator runs with unless told otherwise.
    fn default() -> Self {
        Policy::new(default_deny(), Vec::new())
    }
}

impl Policy {
    pub fn new(deny: Vec<Cidr>, allow: Vec<Cidr>) -> Self {
        Policy { deny, allow }
    }

    /// This policy with the private ranges denied too (`--egress-deny-private-ranges`).
    pub fn deny_private_ranges(mut self) -> Self {
        for range in PRIVATE_RANGES.iter().filter_map(|c| c.parse::<Cidr>().ok()) {
            if !self.deny.contains(&range) {
                self.deny.push(range);
            }
        }
        self
    }

    /// Whether a failure toward `ip` withholds what answered: `ip` is in a private range,
    /// or loopback, link-local or unspecified, in any of its forms, and `--egress-allow-cidr`
    /// does not list it. An HTTP status, a connect error, a timeout or a body size from
    /// there would map the private network for whoever wrote the channel.
    pub fn withholds(&self, ip: IpAddr) -> bool {
        let mut private = PRIVATE_RANGES
            .iter()
            .chain(DEFAULT_DENY.iter())
            .filter_map(|c| c.parse::<Cidr>().ok());
        private.any(|c| c.contains(ip)) && !self.allow.iter().any(|c| c.contains(ip))
    }

    /// Whether a json channel may connect to `ip`.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        let held = |list: &[Cidr]| list.iter().any(|c| c.contains(ip));
        if held(&self.deny) && !held(&self.allow) {
            Err(Refused(judged(ip)))
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
            (true, Some(first)) => Err(Refused(judged(*first))),
            _ => Ok(allowed),
        }
    }
}

/// A connection the policy refuses: the address, as the status names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("address {0} is not allowed ({DENY_FLAG})")]
pub struct Refused(pub IpAddr);

#[cfg(test)]
mod tests;
