//! Which BMC a batch goes to and how it is spoken to: address, protocol,
//! provider options, credentials and TLS.

use crate::bmc::BmcAddress;
use crate::secret::Secret;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which BMC, spoken to how.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BmcTarget {
    pub address: BmcAddress,
    #[serde(default)]
    pub protocol: Protocol,
    pub credentials: Credentials,
    #[serde(default, skip_serializing_if = "TlsOptions::is_default")]
    pub tls: TlsOptions,
    /// Redfish: which ComputerSystem to drive when a BMC exposes several.
    pub system_id: Option<String>,
    /// Protocol preference and provider options: set only from an
    /// operator's machine record (an ad hoc target carrying any is refused).
    #[serde(default, skip_serializing_if = "TargetOptions::is_default")]
    pub options: TargetOptions,
}

/// How the worker may speak to a machine, beyond its protocol: set by the
/// operator on the machine record (`bmcctl machine`), never by producers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetOptions {
    /// With `protocol: auto`: the protocols to try, in this order, instead
    /// of the worker's default (Redfish, IPMI, AMT). Trying stops at the
    /// first service that answers, as for `auto`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub protocols: Vec<Protocol>,
    /// Redfish provider options.
    #[serde(default, skip_serializing_if = "RedfishOptions::is_default")]
    pub redfish: RedfishOptions,
    /// IPMI provider options.
    #[serde(default, skip_serializing_if = "IpmiOptions::is_default")]
    pub ipmi: IpmiOptions,
    /// The addresses the worker resolved an ad hoc host name to and checked
    /// against its `--ad-hoc-targets`: providers connect to these and never
    /// look the name up again, so a DNS answer that changes in between
    /// (rebinding) cannot send the request elsewhere. Set by the worker only
    /// (a target arriving with any option set is refused).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<std::net::IpAddr>,
}

impl TargetOptions {
    pub fn is_default(&self) -> bool {
        *self == TargetOptions::default()
    }
}

/// Redfish provider options of a machine.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedfishOptions {
    /// How the worker authenticates.
    #[serde(default)]
    pub auth: RedfishAuth,
}

impl RedfishOptions {
    pub fn is_default(&self) -> bool {
        *self == RedfishOptions::default()
    }
}

/// A machine's enforced power state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum DesiredPower {
    On,
    Off,
}

/// IPMI provider options of a machine.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpmiOptions {
    /// RMCP+ cipher suites to offer, in this order (3 and 17); empty: the
    /// worker's order, 17 then 3.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cipher_suites: Vec<u8>,
    /// The privilege level the session logs in with; none: administrator.
    pub privilege: Option<IpmiPrivilege>,
}

impl IpmiOptions {
    /// Cipher suites a machine may name: 17 (SHA-256, AES) and 3 (SHA-1,
    /// AES). Suites 1 and 2 have no confidentiality: a new BMC user's
    /// password or raw request data would cross the network in clear, so
    /// the registry refuses them (and 0, no authentication at all).
    pub const ALLOWED_SUITES: [u8; 2] = [17, 3];

    pub fn is_default(&self) -> bool {
        *self == IpmiOptions::default()
    }

    /// Checks the options (what the registry accepts).
    pub fn validate(&self) -> Result<(), String> {
        for (i, s) in self.cipher_suites.iter().enumerate() {
            if !Self::ALLOWED_SUITES.contains(s) {
                return Err(format!(
                    "ipmi.cipher_suites: {s} is not allowed (17 or 3; suites 0-2 lack authentication or encryption, so passwords and raw data could cross the network in clear)"
                ));
            }
            if self.cipher_suites[..i].contains(s) {
                return Err(format!("ipmi.cipher_suites: {s} is listed twice"));
            }
        }
        Ok(())
    }
}

/// An IPMI session privilege level (IPMI v2.0 §6.8). What a lower level
/// may do: user — power status, inventory, boot device read; operator —
/// also power control and boot device set; administrator — everything
/// (users, BMC reset, network source).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum IpmiPrivilege {
    User,
    Operator,
    #[default]
    Administrator,
}

impl IpmiPrivilege {
    /// The level's number in RAKP 1 and Set Session Privilege Level.
    pub fn level(self) -> u8 {
        match self {
            IpmiPrivilege::User => 2,
            IpmiPrivilege::Operator => 3,
            IpmiPrivilege::Administrator => 4,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            IpmiPrivilege::User => "user",
            IpmiPrivilege::Operator => "operator",
            IpmiPrivilege::Administrator => "administrator",
        }
    }
}

impl std::fmt::Display for IpmiPrivilege {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the Redfish provider authenticates to a machine's BMC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum RedfishAuth {
    /// A SessionService session when the BMC offers one, HTTP Basic when it
    /// does not (or will not create one).
    #[default]
    Auto,
    /// A SessionService session only: a BMC that cannot create one fails
    /// the action (`auth_failed` or `protocol_error`), and the password is
    /// never sent with HTTP Basic.
    Session,
    /// HTTP Basic on every request, no session (BMCs whose session service
    /// is broken or whose session slots run out).
    Basic,
}

impl RedfishAuth {
    pub fn as_str(self) -> &'static str {
        match self {
            RedfishAuth::Auto => "auto",
            RedfishAuth::Session => "session",
            RedfishAuth::Basic => "basic",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    Ipmi,
    Redfish,
    Amt,
    /// Let the worker probe (Redfish, then IPMI, then AMT).
    #[default]
    Auto,
    /// The deterministic test BMC (`bmc-sim`); refused unless the worker
    /// is started with a sim endpoint.
    Sim,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Ipmi => "ipmi",
            Protocol::Redfish => "redfish",
            Protocol::Amt => "amt",
            Protocol::Auto => "auto",
            Protocol::Sim => "sim",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// BMC credentials: a named secret the worker resolves, inline, or sealed
/// to the workers' key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Credentials {
    /// `{"ref": "rack12-bmc"}`: resolved by the worker from its credentials
    /// file, then from the credentials KV bucket.
    Ref(String),
    /// `{"inline": {"username": "admin", "password": "..."}}`: accepted by a
    /// gateway with `--inline-credentials sealed`, which seals the password
    /// before the job is stored; never stored in this form.
    Inline { username: String, password: Secret },
    /// `{"sealed": {"username", "key", "sender", "sealed"}}`: the password in
    /// a curve25519 sealed box that only the workers can open. What the jobs
    /// stream carries for inline credentials.
    Sealed(SealedCredentials),
}

impl Credentials {
    /// `ref`, `inline` or `sealed`: what logs may say about credentials.
    pub fn kind(&self) -> &'static str {
        match self {
            Credentials::Ref(_) => "ref",
            Credentials::Inline { .. } => "inline",
            Credentials::Sealed(_) => "sealed",
        }
    }
}

/// A password sealed (NATS xkeys `xkv1` box: X25519 + XSalsa20-Poly1305) to
/// the workers' public key by a sender key that is never stored (one-off for
/// `bmcctl`; a gateway's lives in its memory for at most 10 minutes). Also the value format of
/// the credentials KV bucket.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedCredentials {
    pub username: String,
    /// The recipient's (workers') public xkey, `X...`: picks the seed to open it with.
    pub key: String,
    /// The sender's public xkey, `X...`.
    pub sender: String,
    /// The sealed password, standard base64.
    pub sealed: String,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// Skip certificate verification. Explicit opt-in only.
    #[serde(default)]
    pub insecure: bool,
    /// PEM CA bundle to trust for this BMC.
    pub ca_pem: Option<String>,
    /// Trust exactly the certificate with this SHA-256 fingerprint (64 hex
    /// digits, `:` separators allowed), whoever issued it and whatever name
    /// it carries: what a self-signed BMC certificate needs instead of
    /// `insecure`. Takes precedence over `ca_pem` and `insecure`. Two
    /// fingerprints separated by a comma trust either certificate: the
    /// registry holds the old and the new one while a BMC certificate is
    /// being replaced (`bmcctl bmc-cert replace`, docs/BMC_CERTIFICATES.md).
    pub pin_sha256: Option<String>,
    /// Intel AMT only: allow plain HTTP (port 16992). Off by default: Digest
    /// over HTTP lets an observer record the exchange; an operator allows it
    /// per machine where the network is trusted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_plain_http: bool,
}

impl TlsOptions {
    fn is_default(&self) -> bool {
        *self == TlsOptions::default()
    }

    /// Most fingerprints `pin_sha256` may hold (the old and the new one
    /// during a certificate replacement).
    pub const MAX_PINS: usize = 2;

    /// The pinned fingerprints as bytes (empty when none is set), if well
    /// formed: one, or two separated by a comma.
    pub fn pins(&self) -> Result<Vec<[u8; 32]>, String> {
        let Some(text) = &self.pin_sha256 else { return Ok(Vec::new()) };
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() > Self::MAX_PINS {
            return Err(format!("tls.pin_sha256 holds at most {} fingerprints (comma-separated)", Self::MAX_PINS));
        }
        parts.into_iter().map(parse_pin).collect()
    }
}

/// One SHA-256 fingerprint: 64 hex digits, `:` separators allowed.
pub fn parse_pin(text: &str) -> Result<[u8; 32], String> {
    let hex: String = text.chars().filter(|c| *c != ':' && !c.is_whitespace()).collect();
    let bad = || "tls.pin_sha256 must be a SHA-256 fingerprint: 64 hex digits (`:` separators allowed)".to_owned();
    if hex.len() != 64 {
        return Err(bad());
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
    }
    Ok(out)
}
