//! BMC addresses and the subject-safe key derived from them.
//!
//! # Key mapping
//! A [`BmcKey`] is one NATS subject token built only from `[0-9a-zA-Z_-]`:
//!
//! | address                  | key                          |
//! |--------------------------|------------------------------|
//! | `10.0.0.5`               | `v4-10-0-0-5`                |
//! | `10.0.0.5:623`           | `v4-10-0-0-5-P623`           |
//! | `fe80::1`, `[fe80::1]`   | `v6-fe80-0-0-0-0-0-0-1`      |
//! | `[fe80::1]:443`          | `v6-fe80-0-0-0-0-0-0-1-P443` |
//! | `BMC-12.Rack.example.`   | `h-bmc-12_rack_example`      |
//! | `bmc-12.rack.example:8443` | `h-bmc-12_rack_example-P8443` |
//!
//! Hostnames are lower-cased and lose a trailing dot; dots become `_`
//! (never valid in a hostname, so the mapping stays injective). IPv6 is
//! written as its eight groups in lower-case hex without leading zeros, so
//! every spelling of one address (`::1`, `0:0::1`, `[::0001]`) gets one key.
//! The port suffix uses an upper-case `P`, which never occurs in the
//! lower-cased host part. Distinct normalised addresses give distinct keys
//! (property-tested). `10.0.0.5` and `10.0.0.5:623` are *different* keys:
//! producers must spell a BMC consistently for ordering to hold.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The host part of a BMC address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    V4(Ipv4Addr),
    V6(Ipv6Addr),
    /// A normalised (lower-case, no trailing dot) DNS name.
    Name(String),
}

/// A normalised BMC address: host plus optional port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BmcAddress {
    pub host: Host,
    pub port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid BMC address `{input}`: {reason}")]
pub struct AddressError {
    pub input: String,
    pub reason: &'static str,
}

/// The input as a refusal may show it (answered, and logged by the
/// gateway): anything before an `@` is user info (a pasted URL's
/// credentials) and is hidden.
fn err(input: &str, reason: &'static str) -> AddressError {
    let shown = match input.rsplit_once('@') {
        Some((before, after)) => {
            let scheme = before.split_once("://").map(|(s, _)| format!("{s}://")).unwrap_or_default();
            format!("{scheme}[hidden]@{after}")
        }
        None => input.to_owned(),
    };
    AddressError { input: shown.chars().take(300).collect(), reason }
}

fn valid_hostname(name: &str) -> bool {
    if name.is_empty() || name.len() > 253 {
        return false;
    }
    name.split('.').all(|label| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

impl FromStr for BmcAddress {
    type Err = AddressError;

    fn from_str(input: &str) -> Result<Self, AddressError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(err(input, "empty address"));
        }
        if s.contains("://") {
            return Err(err(input, "give a host or host:port, not a URL"));
        }
        let parse_port = |p: &str| -> Result<u16, AddressError> {
            match p.parse::<u16>() {
                Ok(0) | Err(_) => Err(err(input, "port must be a number from 1 to 65535")),
                Ok(n) => Ok(n),
            }
        };
        // [v6] or [v6]:port
        if let Some(rest) = s.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or_else(|| err(input, "unclosed `[` in IPv6 address"))?;
            let ip: Ipv6Addr = inner.parse().map_err(|_| err(input, "not a valid IPv6 address inside brackets"))?;
            let port = match after {
                "" => None,
                a => Some(parse_port(a.strip_prefix(':').ok_or_else(|| err(input, "expected `:port` after `]`"))?)?),
            };
            return Ok(BmcAddress { host: Host::V6(ip), port });
        }
        // Bare IPv6 (two or more colons, no brackets, no port).
        if s.matches(':').count() >= 2 {
            let ip: Ipv6Addr =
                s.parse().map_err(|_| err(input, "not a valid IPv6 address (use [addr]:port to add a port)"))?;
            return Ok(BmcAddress { host: Host::V6(ip), port: None });
        }
        let (host, port) = match s.split_once(':') {
            Some((h, p)) => (h, Some(parse_port(p)?)),
            None => (s, None),
        };
        if let Ok(ip) = host.parse::<IpAddr>() {
            let host = match ip {
                IpAddr::V4(v4) => Host::V4(v4),
                IpAddr::V6(v6) => Host::V6(v6),
            };
            return Ok(BmcAddress { host, port });
        }
        let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return Err(err(input, "not a valid IPv4 address"));
        }
        if !valid_hostname(&name) {
            return Err(err(input, "not a valid IP address or hostname"));
        }
        Ok(BmcAddress { host: Host::Name(name), port })
    }
}

impl fmt::Display for BmcAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.host, self.port) {
            (Host::V4(ip), None) => write!(f, "{ip}"),
            (Host::V4(ip), Some(p)) => write!(f, "{ip}:{p}"),
            (Host::V6(ip), None) => write!(f, "{ip}"),
            (Host::V6(ip), Some(p)) => write!(f, "[{ip}]:{p}"),
            (Host::Name(n), None) => write!(f, "{n}"),
            (Host::Name(n), Some(p)) => write!(f, "{n}:{p}"),
        }
    }
}

impl BmcAddress {
    /// The host as a string usable in a URL authority (IPv6 bracketed).
    pub fn host_for_url(&self) -> String {
        match &self.host {
            Host::V4(ip) => ip.to_string(),
            Host::V6(ip) => format!("[{ip}]"),
            Host::Name(n) => n.clone(),
        }
    }

    /// The host part alone, IPv6 unbracketed (for socket addresses).
    pub fn host_string(&self) -> String {
        match &self.host {
            Host::V4(ip) => ip.to_string(),
            Host::V6(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    }

    /// The host as one physical BMC is known by, whatever its spelling:
    /// [`BmcAddress::host_string`], except that an IPv4-mapped IPv6
    /// address (`::ffff:10.0.0.1`, which a socket reaches as
    /// `10.0.0.1`) is its IPv4 address. What "a registered machine's
    /// address" is compared by.
    pub fn host_identity(&self) -> String {
        match &self.host {
            Host::V6(ip) => ip_identity(IpAddr::V6(*ip)),
            _ => self.host_string(),
        }
    }

    /// The same BMC in one spelling: an IPv4-mapped IPv6 address as its
    /// IPv4 address (what a socket reaches either way). The gateway stores
    /// ad hoc targets so, so that every spelling of one BMC has one
    /// ordering key: one queue, one per-BMC cap, one lane.
    pub fn canonical(self) -> BmcAddress {
        match self.host {
            Host::V6(ip) => match IpAddr::V6(ip).to_canonical() {
                IpAddr::V4(v4) => BmcAddress { host: Host::V4(v4), port: self.port },
                IpAddr::V6(_) => self,
            },
            _ => self,
        }
    }

    /// `host:port` with the given default port, IPv6 bracketed.
    pub fn authority(&self, default_port: u16) -> String {
        format!("{}:{}", self.host_for_url(), self.port.unwrap_or(default_port))
    }

    /// The subject-safe, collision-free key of this address.
    pub fn key(&self) -> BmcKey {
        let mut k = match &self.host {
            Host::V4(ip) => {
                let o = ip.octets();
                format!("v4-{}-{}-{}-{}", o[0], o[1], o[2], o[3])
            }
            Host::V6(ip) => {
                let g: Vec<String> = ip.segments().iter().map(|s| format!("{s:x}")).collect();
                format!("v6-{}", g.join("-"))
            }
            Host::Name(n) => format!("h-{}", n.replace('.', "_")),
        };
        if let Some(p) = self.port {
            k.push_str(&format!("-P{p}"));
        }
        BmcKey(k)
    }

    /// The address when it is a literal IP (names are resolved by the worker).
    pub fn ip(&self) -> Option<IpAddr> {
        match &self.host {
            Host::V4(ip) => Some(IpAddr::V4(*ip)),
            Host::V6(ip) => Some(IpAddr::V6(*ip)),
            Host::Name(_) => None,
        }
    }

    /// True for 127.0.0.0/8 and ::1.
    pub fn is_loopback(&self) -> bool {
        match &self.host {
            Host::V4(ip) => ip.is_loopback(),
            Host::V6(ip) => ip.is_loopback(),
            Host::Name(n) => n == "localhost",
        }
    }
}

/// The text form of `ip` that [`BmcAddress::host_identity`] gives: an
/// IPv4-mapped IPv6 address as its IPv4 address.
pub fn ip_identity(ip: IpAddr) -> String {
    ip.to_canonical().to_string()
}

impl Serialize for BmcAddress {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for BmcAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The subject token naming one BMC (see the module docs for the mapping).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BmcKey(String);

impl BmcKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key of a registered machine: `m-<name>` (machine names are
    /// lower-case DNS labels, so this never meets an address key, which
    /// starts `v4-`, `v6-` or `h-`).
    pub fn machine(name: &str) -> BmcKey {
        BmcKey(format!("m-{name}"))
    }

    /// Re-validate a key read from a subject.
    pub fn from_token(token: &str) -> Option<BmcKey> {
        let ok = !token.is_empty()
            && token.len() <= 300
            && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then(|| BmcKey(token.to_owned()))
    }

    /// A stable partition for this key: FNV-1a 64 of the key, modulo `partitions`.
    /// Stable across versions and platforms by construction (no std hasher).
    pub fn partition(&self, partitions: u16) -> u16 {
        let mut h: u64 = 0xcbf29ce484222325;
        for b in self.0.as_bytes() {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x100000001b3);
        }
        (h % u64::from(partitions.max(1))) as u16
    }
}

impl fmt::Display for BmcKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(s: &str) -> String {
        s.parse::<BmcAddress>().unwrap().key().to_string()
    }

    #[test]
    fn documented_mapping() {
        assert_eq!(key("10.0.0.5"), "v4-10-0-0-5");
        assert_eq!(key("10.0.0.5:623"), "v4-10-0-0-5-P623");
        assert_eq!(key("fe80::1"), "v6-fe80-0-0-0-0-0-0-1");
        assert_eq!(key("[fe80::1]"), "v6-fe80-0-0-0-0-0-0-1");
        assert_eq!(key("[fe80::1]:443"), "v6-fe80-0-0-0-0-0-0-1-P443");
        assert_eq!(key("BMC-12.Rack.example."), "h-bmc-12_rack_example");
        assert_eq!(key("bmc-12.rack.example:8443"), "h-bmc-12_rack_example-P8443");
        assert_eq!(key("[::0001]"), key("0:0::1"));
    }

    #[test]
    fn the_canonical_spelling_of_a_mapped_address_is_ipv4() {
        let canon = |s: &str| s.parse::<BmcAddress>().unwrap().canonical().to_string();
        assert_eq!(canon("[::ffff:10.0.0.5]:623"), "10.0.0.5:623");
        assert_eq!(canon("::ffff:10.0.0.5"), "10.0.0.5");
        for same in ["10.0.0.5:623", "[fe80::1]:443", "[::1]", "bmc-1.example"] {
            assert_eq!(canon(same), same.parse::<BmcAddress>().unwrap().to_string());
        }
    }

    #[test]
    fn rejects_bad_addresses() {
        for bad in [
            "",
            "  ",
            "10.0.0.256",
            "1.2.3",
            "http://10.0.0.1",
            "10.0.0.1:0",
            "10.0.0.1:99999",
            "host name",
            "a..b",
            "-a.b",
            "[fe80::1",
            "[fe80::1]x",
            "fe80::zz",
            "bmc.*",
            "bmc>",
            "x:y",
            "ünï.example",
        ] {
            assert!(bad.parse::<BmcAddress>().is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn a_refused_address_never_echoes_credentials() {
        // A careless producer pastes a URL with credentials: the refusal
        // (answered, and logged by the gateway) must not carry them.
        for bad in [
            "https://admin:s3cret@10.0.0.1/redfish/v1",
            "admin:s3cret@10.0.0.1",
            "[admin:s3cret@fe80::1]:443",
            "s3cret@bmc.example",
        ] {
            let e = bad.parse::<BmcAddress>().unwrap_err();
            assert!(!e.to_string().contains("s3cret"), "{e}");
            assert!(e.to_string().contains("[hidden]@"), "{e}");
        }
        let e = "10.0.0.300".parse::<BmcAddress>().unwrap_err();
        assert!(e.to_string().contains("`10.0.0.300`"), "other input is shown as given: {e}");
    }

    #[test]
    fn display_round_trips() {
        for s in ["10.0.0.5", "10.0.0.5:623", "fe80::1", "[fe80::1]:443", "bmc.example:80"] {
            let a: BmcAddress = s.parse().unwrap();
            assert_eq!(a.to_string().parse::<BmcAddress>().unwrap(), a);
        }
    }

    fn arb_address() -> impl Strategy<Value = BmcAddress> {
        let host = prop_oneof![
            any::<[u8; 4]>().prop_map(|o| Host::V4(Ipv4Addr::from(o))),
            any::<[u16; 8]>().prop_map(|g| Host::V6(Ipv6Addr::from(g))),
            "[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?){0,3}"
                .prop_filter("not all digits", |s| !s.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
                .prop_map(Host::Name),
        ];
        (host, proptest::option::of(1u16..)).prop_map(|(host, port)| BmcAddress { host, port })
    }

    proptest! {
        #[test]
        fn key_is_a_valid_nats_token(a in arb_address()) {
            let k = a.key();
            prop_assert!(BmcKey::from_token(k.as_str()).is_some());
            prop_assert!(!k.as_str().contains('.'));
        }

        #[test]
        fn key_is_injective(a in arb_address(), b in arb_address()) {
            if a != b {
                prop_assert_ne!(a.key(), b.key());
            } else {
                prop_assert_eq!(a.key(), b.key());
            }
        }

        #[test]
        fn parse_display_round_trip(a in arb_address()) {
            prop_assert_eq!(a.to_string().parse::<BmcAddress>().unwrap(), a);
        }

        #[test]
        fn partition_in_range(a in arb_address(), p in 1u16..1024) {
            prop_assert!(a.key().partition(p) < p);
        }
    }
}
