//! The machine registry's records, and the rules for targets a batch names
//! itself ("ad hoc" targets).
//!
//! # Trust
//! A [`Machine`] is written by an operator (`bmcctl machine`, NATS user with
//! write access to `<STREAM>_MACHINES`); gateways and workers only read it.
//! It binds an address, a protocol, TLS settings and a **named credential**
//! together: a batch says `{"machine": "rack12-node3"}` and nothing else
//! about where or how, so a producer can never aim the operator's credential
//! at a host of its choosing.
//!
//! A batch that names its own target (`{"bmc": {...}}`) is refused unless the
//! operator lists the address ranges it may reach ([`AdHocPolicy`]); such a
//! batch may only carry the producer's own (inline or sealed) credentials,
//! never a named one, and may not weaken TLS verification.

use crate::action::{BmcTarget, Credentials, Protocol, TlsOptions};
use crate::bmc::{BmcAddress, BmcKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The tenant of machines that name none.
pub const DEFAULT_TENANT: &str = "default";

/// One BMC, as the operator registered it. Key in the registry: `name`.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Machine {
    /// 1-63 characters of `[a-z0-9-]`, starting and ending with a letter or
    /// digit (a DNS label): safe in subjects and KV keys.
    pub name: String,
    pub address: BmcAddress,
    #[serde(default)]
    pub protocol: Protocol,
    /// The named credential (credentials file or bucket) used for this
    /// machine, and only through it.
    pub credentials: String,
    /// Set by the operator: a CA bundle to trust, or (explicitly) no
    /// verification. Default: the system roots.
    #[serde(default, skip_serializing_if = "is_default_tls")]
    pub tls: TlsOptions,
    /// Redfish: the ComputerSystem to drive when the BMC has several.
    pub system_id: Option<String>,
    /// With `protocol: auto` (or no protocol): the protocols to try, in
    /// order (e.g. `[redfish, ipmi]`); trying stops at the first service that
    /// answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<Protocol>,
    /// Redfish provider options (`auth: auto|session|basic`).
    #[serde(default, skip_serializing_if = "crate::action::RedfishOptions::is_default")]
    pub redfish: crate::action::RedfishOptions,
    /// How often the owning worker reads the machine's power and checks its
    /// BMC answers (default: the worker's `--poll-interval`, 3 minutes;
    /// at least 1 s).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::duration::option")]
    pub poll_interval: Option<std::time::Duration>,
    /// Power state to enforce: when a poll finds the machine otherwise, the
    /// worker switches it (Ironic's force-power-state). Off by default.
    pub desired_power: Option<crate::DesiredPower>,
    /// IPMI provider options (`cipher_suites: [17, 3]`, `privilege: operator`).
    #[serde(default, skip_serializing_if = "crate::action::IpmiOptions::is_default")]
    pub ipmi: crate::action::IpmiOptions,
    /// Serial console settings (`console: {always_on: true}`: the owning
    /// worker logs the console even when nobody watches, conserver-style).
    #[serde(default, skip_serializing_if = "MachineConsole::is_default")]
    pub console: MachineConsole,
    /// Free-form operator labels (`rack=12`, `site=fra1`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The tenant owning the machine (same rule as names).
    #[serde(default = "default_tenant")]
    pub tenant: String,
}

/// A machine's serial console settings (docs/CONSOLE.md).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineConsole {
    /// Hold the console session (and log its output to the console stream)
    /// whether or not anyone watches.
    #[serde(default)]
    pub always_on: bool,
}

impl MachineConsole {
    pub fn is_default(&self) -> bool {
        *self == MachineConsole::default()
    }
}

/// [`DEFAULT_TENANT`], for serde defaults.
pub fn default_tenant() -> String {
    DEFAULT_TENANT.into()
}

fn is_default_tls(t: &TlsOptions) -> bool {
    *t == TlsOptions::default()
}

/// Why a machine record is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("machine `{name}`: {reason}")]
pub struct MachineError {
    pub name: String,
    pub reason: String,
}

/// Why an address range or an ad hoc target was refused (a machine record
/// is refused with a [`MachineError`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Not an IP address or CIDR range (`--ad-hoc-targets`).
    Range,
    /// Ad hoc targets are off in this deployment.
    AdHocOff,
    /// The address is outside the allowed ranges (or in a sensitive block
    /// no listed range covers whole).
    OutsideRanges,
}

impl crate::error::Coded for ErrorKind {
    fn code(self) -> crate::ErrorCode {
        match self {
            ErrorKind::Range => crate::ErrorCode::InvalidField,
            ErrorKind::AdHocOff | ErrorKind::OutsideRanges => crate::ErrorCode::TargetForbidden,
        }
    }
}

pub type Error = crate::error::Error<ErrorKind>;

/// The rule for machine and tenant names: a DNS label (1-63 of `[a-z0-9-]`,
/// no leading or trailing `-`).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// What [`valid_name`] requires, for messages.
/// Shortest poll interval a machine may ask for.
pub const MIN_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

pub const NAME_RULE: &str = "1-63 characters of [a-z0-9-], not starting or ending with `-`";

impl Machine {
    /// A machine of the default tenant with the system's TLS roots, no
    /// labels and no provider options (set the fields to change them).
    pub fn new(
        name: impl Into<String>,
        address: BmcAddress,
        protocol: Protocol,
        credentials: impl Into<String>,
    ) -> Machine {
        Machine {
            name: name.into(),
            address,
            protocol,
            credentials: credentials.into(),
            tls: TlsOptions::default(),
            system_id: None,
            protocols: vec![],
            redfish: Default::default(),
            ipmi: Default::default(),
            poll_interval: None,
            desired_power: None,
            console: MachineConsole::default(),
            labels: BTreeMap::new(),
            tenant: default_tenant(),
        }
    }

    /// Check a record (what `bmcctl` writes and what readers accept).
    pub fn validate(&self) -> Result<(), MachineError> {
        let bad = |reason: String| MachineError { name: self.name.chars().take(80).collect(), reason };
        if !valid_name(&self.name) {
            return Err(bad(format!("the name must be {NAME_RULE}")));
        }
        if !valid_name(&self.tenant) {
            return Err(bad(format!("the tenant must be {NAME_RULE}")));
        }
        crate::validate::credential_name(&self.credentials).map_err(|why| bad(format!("credentials: {why}")))?;
        self.tls.pins().map_err(bad)?;
        if let Some(sys) = &self.system_id {
            if sys.is_empty() || sys.len() > 128 || sys.contains('/') {
                return Err(bad("system_id must be 1-128 characters without `/`".into()));
            }
        }
        if !self.protocols.is_empty() {
            if self.protocol != Protocol::Auto {
                return Err(bad(format!(
                    "protocols (a preference list) needs protocol `auto` (or none), not `{}`",
                    self.protocol
                )));
            }
            if self.protocols.len() > 3 {
                return Err(bad("protocols: at most 3 (redfish, ipmi, amt)".into()));
            }
            for (i, p) in self.protocols.iter().enumerate() {
                if matches!(p, Protocol::Auto | Protocol::Sim) {
                    return Err(bad(format!(
                        "protocols: `{p}` cannot be in a preference list (use redfish, ipmi, amt)"
                    )));
                }
                if self.protocols[..i].contains(p) {
                    return Err(bad(format!("protocols: `{p}` is listed twice")));
                }
            }
        }
        let redfish_possible = matches!(self.protocol, Protocol::Redfish)
            || (self.protocol == Protocol::Auto
                && (self.protocols.is_empty() || self.protocols.contains(&Protocol::Redfish)));
        if !self.redfish.is_default() && !redfish_possible {
            return Err(bad("redfish options on a machine the worker never speaks Redfish to".into()));
        }
        let ipmi_possible = matches!(self.protocol, Protocol::Ipmi)
            || (self.protocol == Protocol::Auto
                && (self.protocols.is_empty() || self.protocols.contains(&Protocol::Ipmi)));
        if !self.ipmi.is_default() && !ipmi_possible {
            return Err(bad("ipmi options on a machine the worker never speaks IPMI to".into()));
        }
        self.ipmi.validate().map_err(bad)?;
        if self.poll_interval.is_some_and(|d| d < MIN_POLL_INTERVAL) {
            return Err(bad(format!("poll_interval: at least {}", crate::duration::format(MIN_POLL_INTERVAL))));
        }
        for (k, v) in &self.labels {
            let key_ok =
                !k.is_empty() && k.len() <= 63 && k.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./".contains(&b));
            if !key_ok || v.len() > 63 || v.chars().any(|c| c.is_control()) {
                return Err(bad(format!(
                    "label `{}`: keys are 1-63 of [A-Za-z0-9-_./], values at most 63 printable characters",
                    k.chars().take(80).collect::<String>()
                )));
            }
        }
        if self.labels.len() > 64 {
            return Err(bad("at most 64 labels".into()));
        }
        Ok(())
    }

    /// How the worker reaches the machine: its address, protocol and TLS,
    /// with its named credential.
    pub fn target(&self) -> BmcTarget {
        BmcTarget {
            address: self.address.clone(),
            protocol: self.protocol,
            credentials: Credentials::Ref(self.credentials.clone()),
            tls: self.tls.clone(),
            system_id: self.system_id.clone(),
            options: crate::action::TargetOptions {
                protocols: self.protocols.clone(),
                redfish: self.redfish.clone(),
                ipmi: self.ipmi.clone(),
                resolved: vec![],
            },
        }
    }

    /// The ordering key of the machine's batches.
    pub fn key(&self) -> BmcKey {
        BmcKey::machine(&self.name)
    }

    /// The address as registered, without the port, in one spelling
    /// ([`BmcAddress::host_identity`]): what ad hoc targets and a BMC's
    /// static address are compared by (a host with a registered machine is
    /// never an ad hoc target, whatever the port).
    pub fn host_identity(&self) -> String {
        self.address.host_identity()
    }

    /// The system this record picks among several behind one Redfish
    /// service: only for a machine the worker speaks Redfish alone to
    /// (another protocol would reach the whole BMC at that port).
    fn system_of_service(&self) -> Option<&str> {
        let redfish_only = self.protocol == Protocol::Redfish
            || (self.protocol == Protocol::Auto && self.protocols == [Protocol::Redfish]);
        self.system_id.as_deref().filter(|_| redfish_only)
    }

    /// Why `self` and `other` may not both be registered, if they may not.
    ///
    /// A machine is its BMC endpoint: host (in one spelling), port, and for
    /// a Redfish service serving several systems, the system. Two records
    /// collide when they name one endpoint: the same host and the same
    /// port (a record without a port stands for every port of its host:
    /// the protocols' defaults and `auto`'s probing), unless both are
    /// Redfish-only records picking different systems of that service;
    /// those share the service's manager (its users, resets, raw access),
    /// so they must belong to one tenant.
    pub fn conflict_with(&self, other: &Machine) -> Option<String> {
        if self.name == other.name || self.host_identity() != other.host_identity() {
            return None;
        }
        let (a, b) = (self.address.port, other.address.port);
        if a.is_some() && b.is_some() && a != b {
            return None;
        }
        let endpoint = match a.or(b) {
            Some(port) if a.is_some() && b.is_some() => format!("{}:{port}", self.address.host_for_url()),
            _ => format!("host {}", self.host_identity()),
        };
        match (self.system_of_service(), other.system_of_service()) {
            (Some(x), Some(y)) if x != y && a == b => {
                if self.tenant == other.tenant {
                    None
                } else {
                    Some(format!(
                        "machines `{}` and `{}` are systems of one Redfish service ({endpoint}) but of different tenants; the systems of one service share its manager and belong to one tenant",
                        self.name, other.name
                    ))
                }
            }
            _ => Some(format!(
                "machines `{}` and `{}` are registered at the same BMC endpoint ({endpoint}); one BMC endpoint is one machine (give each its own port, or its own system_id behind one Redfish service)",
                self.name, other.name
            )),
        }
    }
}

/// What an ad hoc target may never carry, whoever checks it (the gateway at
/// admission, the worker again before sending): a named credential (usable
/// only through its machine) or TLS options (they belong to machine records).
pub fn ad_hoc_refusal(target: &BmcTarget) -> Option<&'static str> {
    if target.tls != TlsOptions::default() {
        return Some(
            "bmc.tls: an ad hoc target is verified against the system roots; only an operator's machine record may trust another CA, pin a certificate, skip verification or allow plain HTTP",
        );
    }
    if matches!(target.credentials, Credentials::Ref(_)) {
        return Some(
            "bmc.credentials.ref: a named credential is usable only through the registered machine it is bound to",
        );
    }
    if !target.options.is_default() {
        return Some(
            "bmc.options: protocol preferences and provider options come only from an operator's machine record",
        );
    }
    None
}

/// An IP range: `10.0.0.0/8`, `fd00::/8`, or one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    len: u8,
}

impl Cidr {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.net, canonical_ip(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = if self.len == 0 { 0 } else { u32::MAX << (32 - u32::from(self.len)) };
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = if self.len == 0 { 0 } else { u128::MAX << (128 - u32::from(self.len)) };
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }

    /// Whether every address of `self` lies in `other`.
    fn within(&self, other: &Cidr) -> bool {
        self.len >= other.len && other.contains(self.net)
    }

    /// How many addresses the range holds (saturating: an IPv6 range
    /// shorter than /64 holds more than any request may name).
    pub fn size(&self) -> u64 {
        let host_bits = u32::from(if self.net.is_ipv4() { 32 } else { 128 } - self.len);
        1u64.checked_shl(host_bits).unwrap_or(u64::MAX)
    }

    /// The range's `i`-th address (`None` past its end).
    pub fn nth(&self, i: u64) -> Option<IpAddr> {
        if i >= self.size() {
            return None;
        }
        Some(match self.net {
            IpAddr::V4(n) => IpAddr::V4(Ipv4Addr::from(u32::from(n).checked_add(u32::try_from(i).ok()?)?)),
            IpAddr::V6(n) => IpAddr::V6(Ipv6Addr::from(u128::from(n).checked_add(u128::from(i))?)),
        })
    }

    /// Whether `ip` may be reached through one of `ranges`: inside one of
    /// them, and inside a sensitive block (loopback, link-local, metadata,
    /// multicast: [`SENSITIVE`]) only where that range lies entirely inside
    /// the block. The rule of ad hoc targets and of discovery.
    pub fn reachable(ranges: &[Cidr], ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        static BLOCKS: std::sync::LazyLock<Vec<Cidr>> =
            std::sync::LazyLock::new(|| SENSITIVE.iter().map(|s| s.parse().expect("valid constant")).collect());
        ranges.iter().any(|r| r.contains(ip) && BLOCKS.iter().filter(|s| s.contains(ip)).all(|s| r.within(s)))
    }
}

impl std::str::FromStr for Cidr {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let s = s.trim();
        let (ip, len) = match s.split_once('/') {
            Some((ip, len)) => (ip, Some(len)),
            None => (s, None),
        };
        let bad = |why: String| Error::new(ErrorKind::Range, why);
        let ip: IpAddr = ip.parse().map_err(|_| bad(format!("`{s}` is not an IP address or CIDR range")))?;
        let ip = canonical_ip(ip);
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len = match len {
            None => max,
            Some(l) => l
                .parse::<u8>()
                .ok()
                .filter(|l| *l <= max)
                .ok_or_else(|| bad(format!("`{s}`: prefix length must be 0-{max}")))?,
        };
        let cidr = Cidr { net: ip, len };
        if !cidr.contains(ip) || mask_host_bits(ip, len) != ip {
            return Err(bad(format!("`{s}` has host bits set; write the network address")));
        }
        Ok(cidr)
    }
}

fn mask_host_bits(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.net, self.len)
    }
}

/// IPv4-mapped and -compatible IPv6 addresses are judged as IPv4.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// Address blocks a worker must never reach unless a listed range lies
/// entirely inside the block (listing `127.0.0.0/8` allows loopback;
/// `0.0.0.0/0` does not): loopback, unspecified, "this network",
/// link-local (including the 169.254.169.254 cloud metadata service),
/// multicast and broadcast, and the IPv6 metadata and unique-local
/// well-knowns.
const SENSITIVE: &[&str] = &[
    "127.0.0.0/8",
    "0.0.0.0/8",
    "169.254.0.0/16",
    "224.0.0.0/4",
    "255.255.255.255/32",
    "100.100.100.200/32",
    "::1/128",
    "::/128",
    "fe80::/10",
    "ff00::/8",
    "fd00:ec2::254/128",
];

/// Which ad hoc targets (a batch naming an address instead of a machine)
/// are allowed. Empty (the default): none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AdHocPolicy {
    ranges: Vec<Cidr>,
}

impl AdHocPolicy {
    /// `off`, or a comma-separated list of ranges.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let text = text.trim();
        if text.is_empty() || text == "off" {
            return Ok(AdHocPolicy::default());
        }
        let ranges = text.split(',').map(|r| r.parse::<Cidr>()).collect::<Result<Vec<_>, _>>()?;
        Ok(AdHocPolicy { ranges })
    }

    pub fn is_off(&self) -> bool {
        self.ranges.is_empty()
    }

    /// `Ok` when `ip` may be reached, else why not.
    pub fn check(&self, ip: IpAddr) -> Result<(), Error> {
        let ip = canonical_ip(ip);
        if self.is_off() {
            return Err(Error::new(
                ErrorKind::AdHocOff,
                "ad hoc targets are off in this deployment: name a registered machine (`{\"machine\": \"NAME\"}`)",
            ));
        }
        if Cidr::reachable(&self.ranges, ip) {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::OutsideRanges,
                format!("{ip} is outside the address ranges this deployment allows for ad hoc targets ({self})"),
            ))
        }
    }
}

impl fmt::Display for AdHocPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_off() {
            return f.write_str("off");
        }
        let list: Vec<String> = self.ranges.iter().map(|r| r.to_string()).collect();
        f.write_str(&list.join(","))
    }
}

impl std::str::FromStr for AdHocPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        AdHocPolicy::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> Machine {
        serde_json::from_value(serde_json::json!({
            "name": "rack12-node3", "address": "10.0.12.3", "protocol": "redfish", "credentials": "rack12-bmc",
            "labels": {"rack": "12"}
        }))
        .unwrap()
    }

    #[test]
    fn a_machine_binds_its_credential_to_its_address() {
        let m = machine();
        m.validate().unwrap();
        assert_eq!(m.tenant, DEFAULT_TENANT);
        let pinned = Machine {
            tls: TlsOptions { pin_sha256: Some("AB:".repeat(31) + "AB"), ..TlsOptions::default() },
            ..m.clone()
        };
        pinned.validate().unwrap();
        assert_eq!(pinned.tls.pins().unwrap(), vec![[0xab; 32]]);
        // During a certificate replacement: the old and the new pin, no more.
        let two = TlsOptions {
            pin_sha256: Some(format!("{},{}", "ab".repeat(32), "cd".repeat(32))),
            ..TlsOptions::default()
        };
        assert_eq!(two.pins().unwrap(), vec![[0xab; 32], [0xcd; 32]]);
        let three = TlsOptions { pin_sha256: Some(vec!["ab".repeat(32); 3].join(",")), ..TlsOptions::default() };
        assert!(three.pins().unwrap_err().contains("at most 2"));
        let half = TlsOptions { pin_sha256: Some(format!("{},", "ab".repeat(32))), ..TlsOptions::default() };
        assert!(half.pins().is_err(), "an empty second pin is no pin");
        let t = m.target();
        assert_eq!(t.address.to_string(), "10.0.12.3");
        assert_eq!(t.credentials, Credentials::Ref("rack12-bmc".into()));
        assert_eq!(m.key().as_str(), "m-rack12-node3");
    }

    fn at(name: &str, address: &str, protocol: &str, system: Option<&str>, tenant: &str) -> Machine {
        serde_json::from_value(serde_json::json!({
            "name": name, "address": address, "protocol": protocol, "credentials": "c",
            "system_id": system, "tenant": tenant,
        }))
        .unwrap()
    }

    #[test]
    fn a_machine_is_its_bmc_endpoint_not_its_host() {
        let vbmc = |name: &str, address: &str| at(name, address, "ipmi", None, "default");
        let (a, b) = (vbmc("port-a", "127.0.0.1:26400"), vbmc("port-b", "127.0.0.1:26401"));
        assert_eq!(a.conflict_with(&b), None, "VirtualBMC: one port per BMC");
        // Every spelling of one endpoint is one machine.
        let same = vbmc("again", "[::ffff:127.0.0.1]:26400");
        assert!(a.conflict_with(&same).unwrap().contains("same BMC endpoint (127.0.0.1:26400)"));
        // A record without a port stands for every port of its host.
        let bare = vbmc("bare", "127.0.0.1");
        assert!(a.conflict_with(&bare).is_some() && bare.conflict_with(&a).is_some());
        assert_eq!(a.key(), BmcKey::machine("port-a"), "the ordering key stays the machine's name");

        // Several systems behind one Redfish service, one tenant.
        let sys = |name: &str, system: Option<&str>, tenant: &str| at(name, "10.0.0.9", "redfish", system, tenant);
        let (s1, s2) = (sys("vm-1", Some("sys-1"), "default"), sys("vm-2", Some("sys-2"), "default"));
        assert_eq!(s1.conflict_with(&s2), None);
        assert!(s1.conflict_with(&sys("vm-1b", Some("sys-1"), "default")).is_some(), "one system is one machine");
        assert!(s1.conflict_with(&sys("whole", None, "default")).is_some(), "no system_id: the whole service");
        let other_tenant = sys("vm-3", Some("sys-3"), "blue");
        assert!(s1.conflict_with(&other_tenant).unwrap().contains("different tenants"));
        // A system_id does not split an endpoint another protocol reaches whole.
        let ipmi = at("ipmi-2", "10.0.0.9", "ipmi", Some("sys-2"), "default");
        assert!(s1.conflict_with(&ipmi).is_some());
        let auto = at("auto-2", "10.0.0.9", "auto", Some("sys-2"), "default");
        assert!(s1.conflict_with(&auto).is_some(), "auto may speak IPMI to that host");
    }

    #[test]
    fn bad_records_are_refused_with_the_field() {
        for (field, value, says) in [
            ("name", serde_json::json!("Rack 12"), "name"),
            ("name", serde_json::json!("-x"), "name"),
            ("tenant", serde_json::json!("a.b"), "tenant"),
            ("credentials", serde_json::json!("../x"), "credentials"),
            ("labels", serde_json::json!({"rack": "1\n2"}), "label"),
            ("tls", serde_json::json!({"pin_sha256": "12:34"}), "pin_sha256"),
        ] {
            let mut v = serde_json::to_value(machine()).unwrap();
            v[field] = value;
            let m: Machine = serde_json::from_value(v).unwrap();
            let e = m.validate().unwrap_err();
            assert!(e.reason.contains(says), "{field}: {e}");
        }
        let mut v = serde_json::to_value(machine()).unwrap();
        v["password"] = "x".into();
        assert!(serde_json::from_value::<Machine>(v).is_err(), "unknown fields are refused");
    }

    #[test]
    fn protocol_preferences_and_redfish_options_are_checked() {
        let with = |patch: serde_json::Value| {
            let mut v = serde_json::to_value(machine()).unwrap();
            for (k, x) in patch.as_object().unwrap() {
                v[k] = x.clone();
            }
            serde_json::from_value::<Machine>(v).unwrap().validate()
        };
        let ok = with(
            serde_json::json!({"protocol": "auto", "protocols": ["ipmi", "redfish"], "redfish": {"auth": "session"}}),
        );
        assert!(ok.is_ok(), "{ok:?}");
        let m: Machine = serde_json::from_value({
            let mut v = serde_json::to_value(machine()).unwrap();
            v["protocol"] = "auto".into();
            v["protocols"] = serde_json::json!(["ipmi", "redfish"]);
            v
        })
        .unwrap();
        assert_eq!(
            m.target().options.protocols,
            vec![Protocol::Ipmi, Protocol::Redfish],
            "the target carries the preference"
        );
        for (patch, says) in [
            (serde_json::json!({"protocols": ["ipmi"]}), "needs protocol `auto`"),
            (serde_json::json!({"protocol": "auto", "protocols": ["ipmi", "ipmi"]}), "twice"),
            (serde_json::json!({"protocol": "auto", "protocols": ["sim"]}), "cannot be in a preference"),
            (serde_json::json!({"protocol": "auto", "protocols": ["auto"]}), "cannot be in a preference"),
            (serde_json::json!({"protocol": "ipmi", "redfish": {"auth": "basic"}}), "never speaks Redfish"),
            (
                serde_json::json!({"protocol": "auto", "protocols": ["amt"], "redfish": {"auth": "basic"}}),
                "never speaks Redfish",
            ),
            (serde_json::json!({"protocol": "redfish", "ipmi": {"privilege": "operator"}}), "never speaks IPMI"),
            (serde_json::json!({"protocol": "ipmi", "ipmi": {"cipher_suites": [2]}}), "not allowed"),
            (serde_json::json!({"protocol": "ipmi", "ipmi": {"cipher_suites": [0]}}), "not allowed"),
            (serde_json::json!({"protocol": "ipmi", "ipmi": {"cipher_suites": [17, 17]}}), "twice"),
        ] {
            let e = with(patch.clone()).unwrap_err();
            assert!(e.reason.contains(says), "{patch}: {e}");
        }
        let ipmi =
            with(serde_json::json!({"protocol": "auto", "ipmi": {"cipher_suites": [3, 17], "privilege": "operator"}}));
        assert!(ipmi.is_ok(), "{ipmi:?}");
        let mut v = serde_json::to_value(machine()).unwrap();
        v["protocol"] = "ipmi".into();
        v["ipmi"] = serde_json::json!({"cipher_suites": [3], "privilege": "user"});
        let t = serde_json::from_value::<Machine>(v).unwrap().target();
        assert_eq!(
            (t.options.ipmi.cipher_suites.clone(), t.options.ipmi.privilege),
            (vec![3], Some(crate::IpmiPrivilege::User)),
            "the target carries them"
        );
        let mut v = serde_json::to_value(machine()).unwrap();
        v["ipmi"] = serde_json::json!({"privilege": "root"});
        assert!(serde_json::from_value::<Machine>(v).is_err(), "unknown privileges are refused");
        let mut v = serde_json::to_value(machine()).unwrap();
        v["redfish"] = serde_json::json!({"auth": "digest"});
        assert!(serde_json::from_value::<Machine>(v).is_err(), "unknown auth modes are refused");
    }

    #[test]
    fn producers_cannot_set_target_options() {
        let mut t = machine().target();
        t.credentials = Credentials::Inline { username: "u".into(), password: crate::Secret::new("p") };
        assert_eq!(ad_hoc_refusal(&t), None);
        t.options.redfish.auth = crate::RedfishAuth::Basic;
        assert!(ad_hoc_refusal(&t).is_some_and(|why| why.contains("bmc.options")));
        // Nor the addresses a host name resolves to (the worker's own, after its checks).
        t.options = Default::default();
        t.options.resolved = vec!["169.254.169.254".parse().unwrap()];
        assert!(ad_hoc_refusal(&t).is_some_and(|why| why.contains("bmc.options")));
    }

    #[test]
    fn ranges_parse_strictly() {
        assert!("10.0.0.0/8".parse::<Cidr>().is_ok());
        assert!("10.0.0.1/8".parse::<Cidr>().is_err(), "host bits");
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("fd00::/8".parse::<Cidr>().is_ok());
        assert_eq!("nope".parse::<Cidr>().unwrap_err().kind(), ErrorKind::Range);
        assert_eq!(AdHocPolicy::parse("off").unwrap(), AdHocPolicy::default());
    }

    #[test]
    fn ad_hoc_targets_stay_inside_the_listed_ranges() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            AdHocPolicy::default().check(ip("10.0.0.5")).unwrap_err().kind(),
            ErrorKind::AdHocOff,
            "off by default"
        );
        let p = AdHocPolicy::parse("10.0.0.0/8, 0.0.0.0/0").unwrap();
        assert!(p.check(ip("10.1.2.3")).is_ok());
        // A catch-all range never opens loopback, link-local, metadata or the unspecified address.
        for bad in [
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "::1",
            "::ffff:127.0.0.1",
            "fe80::1",
            "224.0.0.1",
            "100.100.100.200",
        ] {
            assert!(p.check(ip(bad)).is_err(), "{bad}");
        }
        let v6only = AdHocPolicy::parse("fd00::/8").unwrap();
        assert_eq!(v6only.check(ip("10.0.0.1")).unwrap_err().kind(), ErrorKind::OutsideRanges);
        // Listing loopback explicitly allows it (tests, a BMC proxy on the host).
        let lo = AdHocPolicy::parse("127.0.0.0/8").unwrap();
        assert!(lo.check(ip("127.0.0.1")).is_ok());
        assert!(lo.check(ip("::ffff:127.0.0.1")).is_ok(), "mapped addresses are judged as IPv4");
        assert!(lo.check(ip("10.0.0.1")).is_err());
    }
}
