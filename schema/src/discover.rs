//! BMC discovery (`<service-prefix>.discover`, docs/BMCCTL.md "Discovery"):
//! an operator asks for address ranges to be probed for BMCs before they are
//! registered. The gateway admits the request (operators only) and hands it
//! to a worker (`<prefix>.discover.run`), which has the network reach; the
//! worker probes only inside its `--discover-allow` ranges, at a bounded
//! rate, and answers a [`DiscoverReport`]. Nothing is registered: the report
//! becomes proposed machine records ([`proposals`]) in the `bmcctl machine
//! apply` file format for the operator to review. No credential is ever
//! sent: every probe is unauthenticated (RMCP/ASF presence ping, IPMI Get
//! Channel Authentication Capabilities, Redfish service root, AMT HTTP
//! banner).

use crate::bmc::BmcAddress;
use crate::machine::{Cidr, Machine};
use crate::Protocol;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

/// The port a protocol's BMC listens on when a machine's address names none.
pub const IPMI_PORT: u16 = 623;
pub const REDFISH_PORT: u16 = 443;
/// Intel AMT over TLS (16992 is plain HTTP).
pub const AMT_PORT: u16 = 16993;
pub const AMT_PLAIN_PORT: u16 = 16992;

/// Most addresses any request may name (a worker's
/// `--discover-max-addresses` is at most this; the gateway refuses more
/// before asking a worker).
pub const MAX_ADDRESSES: u64 = 65_536;
/// Most ports one request may list per protocol.
pub const MAX_PORTS: usize = 32;
/// Most targets (addresses or ranges) one request may list.
pub const MAX_TARGETS: usize = 256;
/// Longest a discovery may take at the rate it runs at (probes / rate +
/// one probe's timeout); a longer one is refused before any probe, so the
/// gateway and bmcctl know how long to wait.
pub const MAX_DURATION: Duration = Duration::from_secs(300);
/// Probes per second when the request names no rate (the worker's
/// `--discover-rate` caps it).
pub const DEFAULT_RATE: u32 = 50;
/// One probe's timeout when the request names none.
pub const DEFAULT_TIMEOUT_MS: u32 = 1000;
/// Bounds of a probe's timeout.
pub const TIMEOUT_MS_RANGE: std::ops::RangeInclusive<u32> = 50..=10_000;

fn default_ipmi() -> Vec<u16> {
    vec![IPMI_PORT]
}
fn default_redfish() -> Vec<u16> {
    vec![REDFISH_PORT]
}
fn default_amt() -> Vec<u16> {
    vec![AMT_PORT, AMT_PLAIN_PORT]
}

/// The ports probed on every address, per protocol; an empty list probes
/// none of that protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverPorts {
    /// UDP ports of the RMCP/ASF presence ping and IPMI Get Channel
    /// Authentication Capabilities (default `[623]`).
    #[serde(default = "default_ipmi")]
    pub ipmi: Vec<u16>,
    /// TCP ports of the Redfish service root over TLS (default `[443]`).
    #[serde(default = "default_redfish")]
    pub redfish: Vec<u16>,
    /// TCP ports of Intel AMT (default `[16993, 16992]`: TLS, then plain HTTP).
    #[serde(default = "default_amt")]
    pub amt: Vec<u16>,
}

impl Default for DiscoverPorts {
    fn default() -> Self {
        DiscoverPorts { ipmi: default_ipmi(), redfish: default_redfish(), amt: default_amt() }
    }
}

impl DiscoverPorts {
    /// Every (protocol, port) pair probed on each address, in probe order.
    pub fn each(&self) -> impl Iterator<Item = (Protocol, u16)> + '_ {
        let ipmi = self.ipmi.iter().map(|p| (Protocol::Ipmi, *p));
        let redfish = self.redfish.iter().map(|p| (Protocol::Redfish, *p));
        let amt = self.amt.iter().map(|p| (Protocol::Amt, *p));
        ipmi.chain(redfish).chain(amt)
    }

    fn count(&self) -> usize {
        self.ipmi.len() + self.redfish.len() + self.amt.len()
    }
}

/// Body of `<service-prefix>.discover` (and of the worker's
/// `<prefix>.discover.run`, which the gateway forwards it to).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverRequest {
    /// Addresses or CIDR ranges (`10.1.2.0/24`, `10.1.2.7`, `fd00::/120`):
    /// names are refused, so what is probed is exactly what was asked.
    pub targets: Vec<String>,
    #[serde(default)]
    pub ports: DiscoverPorts,
    /// Probes per second asked for (default [`DEFAULT_RATE`]); the worker's
    /// `--discover-rate` caps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<u32>,
    /// One probe's timeout in milliseconds (default 1000, 50-10000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
}

/// What is wrong with a discovery request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A malformed target, port list, rate or timeout, or too many addresses or probes.
    Invalid,
    /// An address outside the worker's `--discover-allow` ranges (or discovery off).
    OutsideRanges,
}

impl crate::error::Coded for ErrorKind {
    fn code(self) -> crate::ErrorCode {
        match self {
            ErrorKind::Invalid => crate::ErrorCode::InvalidField,
            ErrorKind::OutsideRanges => crate::ErrorCode::TargetForbidden,
        }
    }
}

pub type Error = crate::error::Error<ErrorKind>;

fn invalid(why: impl Into<String>) -> Error {
    Error::new(ErrorKind::Invalid, why.into())
}

/// A checked request: the ranges, and what probing them takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub ranges: Vec<Cidr>,
    /// Addresses in the ranges (each probed once, duplicates removed).
    pub addresses: u64,
    /// Probes: addresses × ports.
    pub probes: u64,
    pub timeout: Duration,
}

impl Plan {
    /// Every address, in request order, each once.
    pub fn addresses(&self) -> impl Iterator<Item = IpAddr> + '_ {
        let mut seen = std::collections::HashSet::new();
        self.ranges.iter().flat_map(|r| (0..r.size()).filter_map(move |i| r.nth(i))).filter(move |ip| seen.insert(*ip))
    }

    /// How long the discovery takes at `rate` probes per second, at most.
    pub fn duration(&self, rate: u32) -> Duration {
        Duration::from_secs_f64(self.probes as f64 / f64::from(rate.max(1))) + self.timeout * 2
    }
}

impl DiscoverRequest {
    /// Check the request's form (targets, ports, timeout, rate) and size:
    /// at most `max_addresses` addresses. No address is checked against an
    /// allowed range here ([`DiscoverRequest::allowed`] does).
    pub fn plan(&self, max_addresses: u64) -> Result<Plan, Error> {
        if self.targets.is_empty() {
            return Err(invalid("targets: name at least one address or CIDR range"));
        }
        if self.targets.len() > MAX_TARGETS {
            return Err(invalid(format!("targets: at most {MAX_TARGETS} entries")));
        }
        let mut ranges = Vec::with_capacity(self.targets.len());
        for t in &self.targets {
            let r: Cidr = t.parse().map_err(|e: crate::machine::Error| {
                invalid(format!("targets: {} (an address or CIDR range; names are not resolved)", e.context()))
            })?;
            ranges.push(r);
        }
        for (name, list) in [("ipmi", &self.ports.ipmi), ("redfish", &self.ports.redfish), ("amt", &self.ports.amt)] {
            if list.len() > MAX_PORTS {
                return Err(invalid(format!("ports.{name}: at most {MAX_PORTS} ports")));
            }
            if list.contains(&0) {
                return Err(invalid(format!("ports.{name}: port 0 is not a port")));
            }
            let mut sorted = list.clone();
            sorted.sort_unstable();
            sorted.dedup();
            if sorted.len() != list.len() {
                return Err(invalid(format!("ports.{name}: a port is listed twice")));
            }
        }
        if self.ports.count() == 0 {
            return Err(invalid("ports: every port list is empty; nothing would be probed"));
        }
        if self.rate == Some(0) {
            return Err(invalid("rate: at least 1 probe per second"));
        }
        let timeout_ms = self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS);
        if !TIMEOUT_MS_RANGE.contains(&timeout_ms) {
            return Err(invalid(format!(
                "timeout_ms: {}-{} milliseconds",
                TIMEOUT_MS_RANGE.start(),
                TIMEOUT_MS_RANGE.end()
            )));
        }
        // Sizes first (a /8 is refused without listing it), then the exact count.
        let upper = ranges.iter().fold(0u64, |a, r| a.saturating_add(r.size()));
        let mut plan = Plan { ranges, addresses: upper, probes: 0, timeout: Duration::from_millis(timeout_ms.into()) };
        if upper > max_addresses {
            return Err(invalid(format!(
                "targets: {upper} addresses; at most {max_addresses} per request (`--discover-max-addresses` of the worker)"
            )));
        }
        plan.addresses = plan.addresses().count() as u64;
        plan.probes = plan.addresses * self.ports.count() as u64;
        Ok(plan)
    }

    /// The rate the discovery runs at: the request's, capped by `ceiling`.
    pub fn rate(&self, ceiling: u32) -> u32 {
        self.rate.unwrap_or(DEFAULT_RATE).min(ceiling).max(1)
    }

    /// `Ok` when every address of `plan` lies in `allowed` (the rule of
    /// [`Cidr::reachable`]); else the first that does not, before any probe.
    pub fn allowed(plan: &Plan, allowed: &[Cidr]) -> Result<(), Error> {
        if allowed.is_empty() {
            return Err(Error::new(
                ErrorKind::OutsideRanges,
                "discovery is off on this worker (no --discover-allow range)",
            ));
        }
        let list = allowed.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(",");
        for r in &plan.ranges {
            // A whole range inside an allowed one is allowed at once; else address by address.
            if let Some(ip) = plan_range_outside(r, allowed) {
                return Err(Error::new(
                    ErrorKind::OutsideRanges,
                    format!("{ip} (of {r}) is outside the ranges this deployment allows for discovery ({list})"),
                ));
            }
        }
        Ok(())
    }
}

fn plan_range_outside(r: &Cidr, allowed: &[Cidr]) -> Option<IpAddr> {
    (0..r.size()).filter_map(|i| r.nth(i)).find(|ip| !Cidr::reachable(allowed, *ip))
}

/// One service a probe found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Found {
    pub address: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
    /// Who made it, where the unauthenticated answer says (Redfish `Vendor`
    /// or the first `Oem` key, AMT: `Intel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vendor: Option<String>,
    /// Redfish `Product`, AMT's `Server` banner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// Redfish `RedfishVersion`, IPMI `2.0` / `1.5`, the AMT version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Redfish service root `UUID`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// SHA-256 of the TLS certificate the service presented (Redfish, AMT
    /// over TLS): 64 lowercase hex digits, what `tls.pin_sha256` takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_sha256: Option<String>,
    /// IPMI: whether the RMCP/ASF presence ping was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asf: Option<bool>,
}

/// The reply to a discovery: what was probed and what answered. Addresses
/// where nothing answered are not listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscoverReport {
    /// The worker that probed.
    pub worker: String,
    pub addresses: u64,
    pub probes: u64,
    /// The rate it ran at (probes per second).
    pub rate: u32,
    pub elapsed_ms: u64,
    /// Every service found, by address then port.
    pub found: Vec<Found>,
}

/// A proposed machine record and what it was made from.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    pub machine: Machine,
    pub found: Vec<Found>,
}

fn default_port(protocol: Protocol) -> u16 {
    match protocol {
        Protocol::Ipmi => IPMI_PORT,
        Protocol::Redfish => REDFISH_PORT,
        _ => AMT_PORT,
    }
}

fn rank(p: Protocol) -> u8 {
    match p {
        Protocol::Redfish => 0,
        Protocol::Ipmi => 1,
        _ => 2,
    }
}

/// A machine name for a BMC at `ip` (and `port` when not the default):
/// `bmc-10-1-2-7`, `bmc-10-1-2-7-8443`, `bmc-fd00--7`.
fn name_of(ip: IpAddr, port: Option<u16>) -> String {
    let mut name = format!("bmc-{}", ip.to_string().replace(['.', ':'], "-"));
    if let Some(p) = port {
        name.push_str(&format!("-{p}"));
    }
    let name = name.trim_end_matches('-').to_owned();
    if crate::machine::valid_name(&name) {
        name
    } else {
        // Too long (IPv6): the digits that vary, after a fixed stem.
        let tail: String = name.chars().rev().take(50).collect::<Vec<_>>().into_iter().rev().collect();
        format!("bmc-x{}", tail.trim_start_matches('-'))
    }
}

/// Proposed machine records for what a discovery found, never registered
/// by anyone but the operator who applies them. One record per BMC
/// endpoint: the services of one address on their protocols' default ports
/// are one machine (`protocol: auto`, `protocols` Redfish first, when there
/// are several); a service on another port is a machine at `address:port`.
/// A Redfish service's certificate fingerprint becomes `tls.pin_sha256`.
/// `credentials` names the credential the operator will use (it must exist
/// when the file is applied).
pub fn proposals(found: &[Found], credentials: &str) -> Vec<Proposal> {
    let mut groups: BTreeMap<(IpAddr, Option<u16>), Vec<Found>> = BTreeMap::new();
    for f in found {
        let port = (f.port != default_port(f.protocol)).then_some(f.port);
        groups.entry((f.address, port)).or_default().push(f.clone());
    }
    groups
        .into_iter()
        .map(|((ip, port), mut services)| {
            services.sort_by_key(|f| (rank(f.protocol), f.port));
            let mut protocols: Vec<Protocol> = services.iter().map(|f| f.protocol).collect();
            protocols.dedup();
            let host = match ip {
                IpAddr::V4(v4) => crate::bmc::Host::V4(v4),
                IpAddr::V6(v6) => crate::bmc::Host::V6(v6),
            };
            let address = BmcAddress { host, port };
            let protocol = if protocols.len() == 1 { protocols[0] } else { Protocol::Auto };
            let mut machine = Machine::new(name_of(ip, port), address, protocol, credentials);
            if protocols.len() > 1 {
                machine.protocols = protocols;
            }
            machine.tls.pin_sha256 =
                services.iter().find(|f| f.protocol == Protocol::Redfish).and_then(|f| f.pin_sha256.clone());
            Proposal { machine, found: services }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(targets: &[&str]) -> DiscoverRequest {
        DiscoverRequest {
            targets: targets.iter().map(|t| t.to_string()).collect(),
            ports: DiscoverPorts::default(),
            rate: None,
            timeout_ms: None,
        }
    }

    #[test]
    fn a_request_is_checked_whole_before_anything_runs() {
        let plan = request(&["10.1.2.0/30", "10.1.2.1", "10.1.3.7"]).plan(1024).unwrap();
        assert_eq!(plan.addresses, 5, "duplicates once");
        assert_eq!(plan.probes, 5 * 4);
        let ips: Vec<String> = plan.addresses().map(|ip| ip.to_string()).collect();
        assert_eq!(ips, ["10.1.2.0", "10.1.2.1", "10.1.2.2", "10.1.2.3", "10.1.3.7"]);
        assert_eq!(request(&["10.0.0.0/8"]).plan(1024).unwrap_err().kind(), ErrorKind::Invalid);
        assert_eq!(request(&["fd00::/64"]).plan(1024).unwrap_err().kind(), ErrorKind::Invalid, "no overflow");
        assert_eq!(request(&["bmc.example.com"]).plan(1024).unwrap_err().kind(), ErrorKind::Invalid);
        assert_eq!(request(&[]).plan(1024).unwrap_err().kind(), ErrorKind::Invalid);
        let mut r = request(&["10.1.2.7"]);
        r.ports.ipmi = vec![623, 623];
        assert!(r.plan(1024).unwrap_err().context().contains("twice"));
        r.ports = DiscoverPorts { ipmi: vec![], redfish: vec![], amt: vec![] };
        assert!(r.plan(1024).is_err(), "nothing to probe");
        r.ports = DiscoverPorts::default();
        r.timeout_ms = Some(20_000);
        assert!(r.plan(1024).is_err());
        r.timeout_ms = None;
        r.rate = Some(0);
        assert!(r.plan(1024).is_err());
        r.rate = Some(10_000);
        assert_eq!(r.rate(50), 50, "the worker's ceiling holds");
        assert_eq!(request(&["10.1.2.7"]).rate(20), 20);
    }

    #[test]
    fn every_address_must_lie_in_the_allowed_ranges() {
        let allow: Vec<Cidr> = vec!["10.1.0.0/16".parse().unwrap(), "127.0.0.1/32".parse().unwrap()];
        let ok = request(&["10.1.2.0/24", "127.0.0.1"]).plan(1024).unwrap();
        DiscoverRequest::allowed(&ok, &allow).unwrap();
        let out = request(&["10.1.255.252/30", "10.2.0.0/31"]).plan(1024).unwrap();
        let e = DiscoverRequest::allowed(&out, &allow).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutsideRanges);
        assert!(e.context().contains("10.2.0.0"), "{}", e.context());
        // Loopback and metadata need a range inside them.
        let wide: Vec<Cidr> = vec!["0.0.0.0/0".parse().unwrap()];
        for sensitive in ["127.0.0.2", "169.254.169.254"] {
            let plan = request(&[sensitive]).plan(1024).unwrap();
            assert!(DiscoverRequest::allowed(&plan, &wide).is_err(), "{sensitive}");
        }
        assert!(DiscoverRequest::allowed(&ok, &[]).is_err(), "no range: discovery is off");
    }

    fn found(ip: &str, port: u16, protocol: Protocol) -> Found {
        Found {
            address: ip.parse().unwrap(),
            port,
            protocol,
            vendor: None,
            product: None,
            version: None,
            uuid: None,
            pin_sha256: (protocol == Protocol::Redfish).then(|| "ab".repeat(32)),
            asf: None,
        }
    }

    #[test]
    fn proposals_are_one_machine_per_bmc_endpoint() {
        let list = [
            found("10.1.2.7", 623, Protocol::Ipmi),
            found("10.1.2.7", 443, Protocol::Redfish),
            found("10.1.2.8", 16993, Protocol::Amt),
            found("127.0.0.1", 40001, Protocol::Ipmi),
            found("127.0.0.1", 40002, Protocol::Redfish),
        ];
        let p = proposals(&list, "rack7");
        let names: Vec<&str> = p.iter().map(|p| p.machine.name.as_str()).collect();
        assert_eq!(names, ["bmc-10-1-2-7", "bmc-10-1-2-8", "bmc-127-0-0-1-40001", "bmc-127-0-0-1-40002"]);
        let both = &p[0].machine;
        assert_eq!(
            (both.protocol, both.protocols.as_slice()),
            (Protocol::Auto, &[Protocol::Redfish, Protocol::Ipmi][..])
        );
        assert_eq!(both.address.to_string(), "10.1.2.7");
        assert_eq!(both.tls.pin_sha256.as_deref(), Some("ab".repeat(32).as_str()));
        assert_eq!((p[1].machine.protocol, p[1].machine.tls.pin_sha256.as_deref()), (Protocol::Amt, None));
        assert_eq!(p[3].machine.address.to_string(), "127.0.0.1:40002");
        for m in &p {
            assert_eq!(m.machine.credentials, "rack7");
            m.machine.validate().unwrap();
        }
        let v6 = proposals(&[found("fd00:1234:5678:9abc:def0:1234:5678:9abc", 8443, Protocol::Redfish)], "x");
        v6[0].machine.validate().unwrap();
    }
}
