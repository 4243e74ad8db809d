//! Batches and the closed set of actions a producer can ask for.
//!
//! JSON shape (MessagePack uses the same field names):
//! ```json
//! {
//!   "id": "01JD0XQ5Z8M7J4N3V2T1S0R9QP",
//!   "machine": "rack12-node3",
//!   "actions": [
//!     {"boot_device": {"device": "pxe", "persistent": false, "efi": true}},
//!     {"power": "on"}
//!   ],
//!   "on_error": "stop",
//!   "deadline": "5m"
//! }
//! ```
//!
//! The target is a registered machine (`"machine"`), or, where the operator
//! allows ad hoc targets, `"bmc": {"address": "10.0.0.5", "protocol":
//! "ipmi", "credentials": {"inline": {...}}}` (see [`crate::machine`]).

use crate::bmc::{BmcAddress, BmcKey};
use crate::secret::Secret;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;
use ulid::Ulid;

/// A batch id: a ULID, set by the producer for idempotency or by the gateway.
pub type BatchId = Ulid;

/// An ordered list of actions for one BMC, executed in order, one batch at a
/// time per BMC.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Batch {
    /// Client-chosen id makes a resubmission a no-op (JetStream dedupe window
    /// plus the status record).
    pub id: Option<BatchId>,
    /// The registered machine to act on (exactly one of `machine` and `bmc`).
    pub machine: Option<String>,
    /// An ad hoc target, where the deployment allows them.
    pub bmc: Option<BmcTarget>,
    pub actions: Vec<Action>,
    #[serde(default)]
    pub on_error: OnError,
    /// Time allowed from admission to the end of the last action.
    #[serde(default, with = "crate::duration::option", skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Duration>,
}

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
    /// `insecure`. Takes precedence over `ca_pem` and `insecure`.
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

    /// The pinned fingerprint as bytes, if one is set and well formed.
    pub fn pin(&self) -> Result<Option<[u8; 32]>, String> {
        let Some(text) = &self.pin_sha256 else { return Ok(None) };
        let hex: String = text.chars().filter(|c| *c != ':' && !c.is_whitespace()).collect();
        let bad = || "tls.pin_sha256 must be a SHA-256 fingerprint: 64 hex digits (`:` separators allowed)".to_owned();
        if hex.len() != 64 {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
        }
        Ok(Some(out))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Skip the remaining actions after the first failure.
    #[default]
    Stop,
    /// Run every action whatever happened before.
    Continue,
}

/// One thing to do to a BMC. Externally tagged: `{"power": "on"}`,
/// `"inventory"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Power(PowerOp),
    /// A power change with its own settle timeout (and, for `soft_off`, an
    /// escalation to a hard off): `{"power_settle": {"op": "soft_off",
    /// "settle": "5m", "escalate_after": "2m"}}`.
    PowerSettle(PowerSettle),
    BootDevice(BootDeviceRequest),
    GetBootDevice,
    User(UserOp),
    BmcReset(BmcResetKind),
    NetworkSource(NetworkSourceOp),
    Raw(RawRequest),
    VirtualMedia(VirtualMediaOp),
    Inventory,
    /// The system event log: `{"event_log": "read"}` (newest first; paged
    /// with `{"event_log": {"read": {"limit": 50, "offset": 0}}}`) or
    /// `{"event_log": "clear"}` (destructive: refused unless the policy
    /// allows it, see [`Action::is_destructive`]).
    EventLog(EventLogOp),
    /// Sensor readings with thresholds and health: `"sensors"`.
    Sensors,
    /// BIOS attributes (with the attribute registry's types and allowed
    /// values where the BMC offers it): `"bios_get"`.
    BiosGet,
    /// Set BIOS attributes, pending until the system resets:
    /// `{"bios_set": {"attributes": {"BootMode": "Uefi"}}}`.
    BiosSet(BiosSet),
    /// BIOS settings back to the defaults (destructive): `"bios_reset"`.
    BiosReset,
    /// UEFI secure boot state: `"secure_boot_get"`.
    SecureBootGet,
    /// `{"secure_boot_set": {"enabled": true}}`.
    SecureBootSet(SecureBootSet),
    /// `{"secure_boot_reset_keys": "reset_all_keys_to_default"}` (destructive).
    SecureBootResetKeys(SecureBootResetKeys),
    /// Update firmware through the BMC's update service (Redfish
    /// `UpdateService.SimpleUpdate`), watched through the BMC's task until
    /// it ends: `{"firmware_update": {"image_uri":
    /// "https://repo.example/bios-2.1.bin", "targets":
    /// ["/redfish/v1/UpdateService/FirmwareInventory/BIOS"]}}`. Refused
    /// unless the operator allows firmware updates for the batch's tenant
    /// (`--allow-firmware-update` on gateway and worker). Not idempotent:
    /// a worker that takes the batch over watches the task its predecessor
    /// started and never starts a second update.
    FirmwareUpdate(FirmwareUpdate),
}

/// A firmware update, by one of two transfers:
///
/// - **SimpleUpdate** (`image_uri`): Redfish `UpdateService.SimpleUpdate`;
///   the BMC fetches the image itself from `image_uri`: the worker never
///   does. A URI with user info or a query string is a secret like a media
///   URL: sealed before it is stored, hidden in logs, scrubbed from messages.
/// - **multipart HTTP push** (`image_file`): the worker sends the image to
///   the BMC's `UpdateService.MultipartHttpPushUri`. The image is a plain
///   file name in the operator's `--firmware-image-dir` on the worker: a
///   producer never names a URL or a path the worker would read.
///
/// Exactly one of `image_uri` and `image_file`.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareUpdate {
    /// Where the BMC fetches the image (`ImageURI`): SimpleUpdate.
    pub image_uri: Option<String>,
    /// The image to push (multipart HTTP push): a file name in the worker's
    /// `--firmware-image-dir` ([`validate_image_file`]).
    pub image_file: Option<String>,
    /// The SHA-256 of `image_file` (64 hex digits): the worker checks it
    /// before anything is sent. Only with `image_file`.
    pub sha256: Option<String>,
    /// The firmware inventory items to update (`Targets`: resource paths on
    /// the BMC, `/redfish/v1/...`); none: the BMC decides from the image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// How the BMC fetches the image (`TransferProtocol`); none: the
    /// image URI's scheme says. Only with `image_uri`.
    pub transfer_protocol: Option<TransferProtocol>,
    /// When the BMC applies the update (`@Redfish.OperationApplyTime`);
    /// none: the BMC's default.
    pub apply_time: Option<UpdateApplyTime>,
}

/// Where a [`FirmwareUpdate`]'s image comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSource<'a> {
    /// The BMC fetches it (SimpleUpdate).
    Uri(&'a str),
    /// The worker pushes this file of its image directory (multipart HTTP
    /// push), checked against `sha256` when given.
    File { name: &'a str, sha256: Option<&'a str> },
}

/// Most `targets` one update may name.
pub const MAX_FIRMWARE_TARGETS: usize = 16;
/// Longest `image_uri`.
pub const MAX_IMAGE_URI: usize = 2048;
/// Longest `image_file`, in bytes.
pub const MAX_IMAGE_FILE: usize = 255;

/// Checks a firmware image file name (`firmware_update.image_file`): one
/// path component of 1 to [`MAX_IMAGE_FILE`] characters from `A-Z a-z 0-9
/// . _ - + = @ , ~`, not starting with `.` (no `..`, no hidden files): never
/// a path, a separator (`/`, `\`), NUL, a control character or a space.
pub fn validate_image_file(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-+=@,~".contains(c);
    if name.is_empty() || name.len() > MAX_IMAGE_FILE || name.starts_with('.') || !name.chars().all(allowed) {
        return Err(format!(
            "firmware_update.image_file {:?}: a plain file name of the worker's firmware image directory \
             (1 to {MAX_IMAGE_FILE} characters of A-Z a-z 0-9 . _ - + = @ , ~, not starting with `.`; no path)",
            name.chars().take(64).collect::<String>()
        ));
    }
    Ok(())
}

impl FirmwareUpdate {
    /// The image's source (after [`FirmwareUpdate::validate`]: exactly one).
    pub fn source(&self) -> ImageSource<'_> {
        match (&self.image_uri, &self.image_file) {
            (_, Some(name)) => ImageSource::File { name, sha256: self.sha256.as_deref() },
            (Some(uri), None) => ImageSource::Uri(uri),
            (None, None) => ImageSource::Uri(""),
        }
    }

    /// Checks what the gateway accepts (and the worker before sending).
    pub fn validate(&self) -> Result<(), String> {
        match (&self.image_uri, &self.image_file) {
            (Some(_), Some(_)) => return Err(
                "firmware_update: image_uri (the BMC fetches) and image_file (the worker pushes) exclude each other"
                    .into(),
            ),
            (None, None) => {
                return Err(
                    "firmware_update: needs image_uri (the BMC fetches the image) or image_file (the worker pushes it)"
                        .into(),
                )
            }
            (Some(uri), None) => {
                if self.sha256.is_some() {
                    return Err(
                        "firmware_update.sha256: only with image_file (the worker cannot check what the BMC fetches)"
                            .into(),
                    );
                }
                validate_image_uri(uri)?;
            }
            (None, Some(name)) => {
                validate_image_file(name)?;
                if self.transfer_protocol.is_some() {
                    return Err(
                        "firmware_update.transfer_protocol: only with image_uri (a pushed image is sent by the worker)"
                            .into(),
                    );
                }
                if let Some(h) = &self.sha256 {
                    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err("firmware_update.sha256: 64 hexadecimal digits".into());
                    }
                }
            }
        }
        if self.targets.len() > MAX_FIRMWARE_TARGETS {
            return Err(format!("firmware_update.targets: at most {MAX_FIRMWARE_TARGETS}"));
        }
        for t in &self.targets {
            match crate::raw_policy::canonical_redfish_path(t) {
                Ok(c) if c == *t && !t.contains('?') && t.len() <= 512 => {}
                _ => {
                    let shown = crate::raw_policy::without_query(t);
                    return Err(format!("firmware_update.targets: {shown:?} is not a plain resource path under /redfish/v1 (canonical, no query, at most 512 bytes)"));
                }
            }
        }
        Ok(())
    }
}

fn validate_image_uri(uri: &str) -> Result<(), String> {
    if uri.len() > MAX_IMAGE_URI || uri.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "firmware_update.image_uri: at most {MAX_IMAGE_URI} characters, no spaces or control characters"
        ));
    }
    let u = url::Url::parse(uri).map_err(|e| format!("firmware_update.image_uri is not a URL: {e}"))?;
    if TransferProtocol::from_scheme(u.scheme()).is_none() {
        return Err(format!("firmware_update.image_uri: scheme `{}` is not one a BMC fetches from (http, https, ftp, sftp, scp, tftp, nfs, cifs)", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("firmware_update.image_uri names no host".into());
    }
    Ok(())
}

/// How a BMC fetches an update image (Redfish `TransferProtocolType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum TransferProtocol {
    Http,
    Https,
    Ftp,
    Sftp,
    Scp,
    Tftp,
    Nfs,
    Cifs,
}

impl TransferProtocol {
    /// The Redfish name.
    pub fn redfish(self) -> &'static str {
        match self {
            TransferProtocol::Http => "HTTP",
            TransferProtocol::Https => "HTTPS",
            TransferProtocol::Ftp => "FTP",
            TransferProtocol::Sftp => "SFTP",
            TransferProtocol::Scp => "SCP",
            TransferProtocol::Tftp => "TFTP",
            TransferProtocol::Nfs => "NFS",
            TransferProtocol::Cifs => "CIFS",
        }
    }

    /// The protocol a URI scheme names.
    pub fn from_scheme(scheme: &str) -> Option<TransferProtocol> {
        Some(match scheme.to_ascii_lowercase().as_str() {
            "http" => TransferProtocol::Http,
            "https" => TransferProtocol::Https,
            "ftp" => TransferProtocol::Ftp,
            "sftp" => TransferProtocol::Sftp,
            "scp" => TransferProtocol::Scp,
            "tftp" => TransferProtocol::Tftp,
            "nfs" => TransferProtocol::Nfs,
            "cifs" | "smb" => TransferProtocol::Cifs,
            _ => return None,
        })
    }
}

/// When a BMC applies an update (Redfish `OperationApplyTime`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum UpdateApplyTime {
    Immediate,
    OnReset,
    AtMaintenanceWindowStart,
    InMaintenanceWindowOnReset,
    OnStartUpdateRequest,
}

impl UpdateApplyTime {
    /// The Redfish name.
    pub fn redfish(self) -> &'static str {
        match self {
            UpdateApplyTime::Immediate => "Immediate",
            UpdateApplyTime::OnReset => "OnReset",
            UpdateApplyTime::AtMaintenanceWindowStart => "AtMaintenanceWindowStart",
            UpdateApplyTime::InMaintenanceWindowOnReset => "InMaintenanceWindowOnReset",
            UpdateApplyTime::OnStartUpdateRequest => "OnStartUpdateRequest",
        }
    }
}

/// BIOS attributes to set, by their registry names; values are strings,
/// numbers or booleans.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BiosSet {
    pub attributes: std::collections::BTreeMap<String, serde_json::Value>,
}

/// Enable or disable UEFI secure boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecureBootSet {
    pub enabled: bool,
}

/// Redfish `SecureBoot.ResetKeys` reset types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum SecureBootResetKeys {
    ResetAllKeysToDefault,
    DeleteAllKeys,
    DeletePk,
}

impl SecureBootResetKeys {
    /// The Redfish `ResetKeysType`.
    pub fn redfish(self) -> &'static str {
        match self {
            SecureBootResetKeys::ResetAllKeysToDefault => "ResetAllKeysToDefault",
            SecureBootResetKeys::DeleteAllKeys => "DeleteAllKeys",
            SecureBootResetKeys::DeletePk => "DeletePK",
        }
    }
}

/// What to do with the system event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", from = "EventLogOpWire")]
pub enum EventLogOp {
    /// Entries newest first: skip `offset`, return at most `limit`
    /// (default [`EventLogOp::DEFAULT_LIMIT`], at most [`EventLogOp::MAX_LIMIT`]).
    Read {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
        #[serde(default)]
        offset: u32,
    },
    /// Erase every entry.
    Clear,
}

impl EventLogOp {
    pub const DEFAULT_LIMIT: u32 = 100;
    pub const MAX_LIMIT: u32 = 1000;

    /// `read` with the defaults.
    pub fn read() -> Self {
        EventLogOp::Read { limit: None, offset: 0 }
    }
}

/// The two spellings of an event log operation: a bare name (`"read"`,
/// `"clear"`) or the tagged form with parameters.
#[derive(Deserialize)]
#[serde(untagged)]
enum EventLogOpWire {
    Name(EventLogOpName),
    Tagged(EventLogOpTagged),
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum EventLogOpName {
    Read,
    Clear,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum EventLogOpTagged {
    Read {
        #[serde(default)]
        limit: Option<u32>,
        #[serde(default)]
        offset: u32,
    },
    Clear,
}

impl From<EventLogOpWire> for EventLogOp {
    fn from(w: EventLogOpWire) -> Self {
        match w {
            EventLogOpWire::Name(EventLogOpName::Read) => EventLogOp::read(),
            EventLogOpWire::Name(EventLogOpName::Clear) | EventLogOpWire::Tagged(EventLogOpTagged::Clear) => {
                EventLogOp::Clear
            }
            EventLogOpWire::Tagged(EventLogOpTagged::Read { limit, offset }) => EventLogOp::Read { limit, offset },
        }
    }
}

/// A power change with per-action verification settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSettle {
    /// `on`, `off`, `soft_off`, `cycle` or `reset`.
    pub op: PowerOp,
    /// How long the machine may take to report the state the action leads
    /// to (overrides the worker's `--power-settle-timeout`); then `not_reached`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::duration::option")]
    pub settle: Option<std::time::Duration>,
    /// `soft_off` only: still on after this long, the machine is switched
    /// off hard (and the result is the hard off's).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::duration::option")]
    pub escalate_after: Option<std::time::Duration>,
}

/// The longest settle timeout an action may ask for.
pub const MAX_POWER_SETTLE: std::time::Duration = std::time::Duration::from_secs(3600);

impl PowerSettle {
    /// Checks what the gateway accepts.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.op, PowerOp::Status | PowerOp::Nmi) {
            return Err(
                format!("power_settle.op: {:?} changes no power state to wait for (use power)", self.op).to_lowercase()
            );
        }
        for (name, d) in [("settle", self.settle), ("escalate_after", self.escalate_after)] {
            if let Some(d) = d {
                if d.is_zero() || d > MAX_POWER_SETTLE {
                    return Err(format!(
                        "power_settle.{name}: more than 0s and at most {}",
                        crate::duration::format(MAX_POWER_SETTLE)
                    ));
                }
            }
        }
        if self.escalate_after.is_some() && self.op != PowerOp::SoftOff {
            return Err("power_settle.escalate_after: only with op soft_off".into());
        }
        Ok(())
    }
}

/// A URL as logs may show it: scheme, host, port and path; no user info,
/// query or fragment (they carry credentials and signatures).
pub fn loggable_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let hidden =
                if u.username().is_empty() && u.password().is_none() && u.query().is_none() && u.fragment().is_none() {
                    ""
                } else {
                    " [credentials and query hidden]"
                };
            format!("{}://{}{port}{}{hidden}", u.scheme(), u.host_str().unwrap_or(""), u.path())
        }
        Err(_) => "[unparsable URL hidden]".into(),
    }
}

impl Action {
    /// The parameters logs may show: no password, no raw request data or
    /// body, no credentials or query string of a media URL.
    pub fn loggable(&self) -> String {
        match self {
            Action::Power(op) => format!("{op:?}"),
            Action::PowerSettle(p) => format!(
                "{:?} settle={} escalate_after={}",
                p.op,
                p.settle.map(crate::duration::format).unwrap_or_else(|| "-".into()),
                p.escalate_after.map(crate::duration::format).unwrap_or_else(|| "-".into())
            ),
            Action::BootDevice(b) => format!("{:?} persistent={} efi={}", b.device, b.persistent, b.efi),
            Action::GetBootDevice
            | Action::Inventory
            | Action::Sensors
            | Action::BiosGet
            | Action::BiosReset
            | Action::SecureBootGet => String::new(),
            // Names only: a value may be anything the BIOS keeps.
            Action::BiosSet(b) => format!("attributes={}", b.attributes.keys().cloned().collect::<Vec<_>>().join(",")),
            Action::SecureBootSet(s) => format!("enabled={}", s.enabled),
            Action::SecureBootResetKeys(k) => format!("{k:?}"),
            Action::FirmwareUpdate(u) => format!(
                "{} targets={} protocol={} apply_time={}",
                match u.source() {
                    ImageSource::Uri(uri) => loggable_url(uri),
                    ImageSource::File { name, sha256 } => format!("push file={name} sha256={}", sha256.unwrap_or("-")),
                },
                if u.targets.is_empty() { "-".into() } else { u.targets.join(",") },
                u.transfer_protocol.map(|p| p.redfish()).unwrap_or("-"),
                u.apply_time.map(|a| a.redfish()).unwrap_or("-")
            ),
            Action::EventLog(EventLogOp::Read { limit, offset }) => {
                format!("read limit={} offset={offset}", limit.map(|l| l.to_string()).unwrap_or_else(|| "-".into()))
            }
            Action::EventLog(EventLogOp::Clear) => "clear".into(),
            Action::User(UserOp::List) => String::new(),
            Action::User(UserOp::Create(u)) => format!("name={} role={:?} enabled={}", u.name, u.role, u.enabled),
            Action::User(UserOp::Update(u)) => {
                format!(
                    "name={} password={} role={:?} enabled={:?}",
                    u.name,
                    if u.password.is_some() { "[changed]" } else { "-" },
                    u.role,
                    u.enabled
                )
            }
            Action::User(UserOp::Delete { name }) => format!("name={name}"),
            Action::BmcReset(k) => format!("{k:?}"),
            Action::NetworkSource(op) => format!("{op:?}"),
            Action::Raw(RawRequest::Ipmi(r)) => {
                format!("netfn=0x{:02x} cmd=0x{:02x} data=[{} bytes]", r.netfn, r.cmd, r.data.len())
            }
            Action::Raw(RawRequest::Redfish(r)) => {
                format!(
                    "{} {} body={}",
                    r.method.as_str(),
                    crate::raw_policy::without_query(&r.path),
                    if r.body.is_some() { "[hidden]" } else { "-" }
                )
            }
            Action::VirtualMedia(VirtualMediaOp::Insert { url, media }) => format!("{media:?} {}", loggable_url(url)),
            Action::VirtualMedia(VirtualMediaOp::Eject { media }) => format!("{media:?}"),
        }
    }

    /// Stable, low-cardinality name for logs, metrics and results.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::PowerSettle(p) => Action::Power(p.op).kind(),
            Action::Power(op) => match op {
                PowerOp::On => "power_on",
                PowerOp::Off => "power_off",
                PowerOp::SoftOff => "power_soft_off",
                PowerOp::Cycle => "power_cycle",
                PowerOp::Reset => "power_reset",
                PowerOp::Status => "power_status",
                PowerOp::Nmi => "power_nmi",
            },
            Action::BootDevice(_) => "boot_device",
            Action::GetBootDevice => "get_boot_device",
            Action::User(op) => match op {
                UserOp::List => "user_list",
                UserOp::Create(_) => "user_create",
                UserOp::Update(_) => "user_update",
                UserOp::Delete { .. } => "user_delete",
            },
            Action::BmcReset(_) => "bmc_reset",
            Action::NetworkSource(NetworkSourceOp::Get) => "network_source_get",
            Action::NetworkSource(_) => "network_source_set",
            Action::Raw(_) => "raw",
            Action::VirtualMedia(VirtualMediaOp::Insert { .. }) => "virtual_media_insert",
            Action::VirtualMedia(VirtualMediaOp::Eject { .. }) => "virtual_media_eject",
            Action::Inventory => "inventory",
            Action::EventLog(EventLogOp::Read { .. }) => "event_log_read",
            Action::EventLog(EventLogOp::Clear) => "event_log_clear",
            Action::Sensors => "sensors",
            Action::BiosGet => "bios_get",
            Action::BiosSet(_) => "bios_set",
            Action::BiosReset => "bios_reset",
            Action::SecureBootGet => "secure_boot_get",
            Action::SecureBootSet(_) => "secure_boot_set",
            Action::SecureBootResetKeys(_) => "secure_boot_reset_keys",
            Action::FirmwareUpdate(_) => "firmware_update",
        }
    }

    /// Whether running this action twice has the same effect as once. A
    /// redelivered batch whose worker died *during* a non-idempotent action
    /// reports `interrupted` for it instead of running it again.
    pub fn is_idempotent(&self) -> bool {
        match self {
            Action::Power(op) => matches!(op, PowerOp::On | PowerOp::Off | PowerOp::SoftOff | PowerOp::Status),
            Action::PowerSettle(p) => Action::Power(p.op).is_idempotent(),
            Action::BootDevice(_) | Action::GetBootDevice | Action::Inventory | Action::Sensors => true,
            // Clearing twice leaves the log as empty as clearing once.
            Action::EventLog(_) => true,
            // Settings and keys end up the same however often they are written.
            Action::BiosGet | Action::BiosSet(_) | Action::BiosReset => true,
            Action::SecureBootGet | Action::SecureBootSet(_) | Action::SecureBootResetKeys(_) => true,
            Action::User(op) => matches!(op, UserOp::List | UserOp::Update(_) | UserOp::Delete { .. }),
            Action::NetworkSource(_) => true,
            Action::VirtualMedia(_) => true,
            // A second update request starts a second update: a new owner
            // watches the first one's task instead (see `watches_task`).
            Action::BmcReset(_) | Action::Raw(_) | Action::FirmwareUpdate(_) => false,
        }
    }

    /// Whether the action starts a long-running task on the BMC that the
    /// worker records (the request, then the task's URI) so that a worker
    /// taking the batch over watches that task instead of starting another
    /// (or reports `interrupted` when it cannot find it).
    pub fn watches_task(&self) -> bool {
        matches!(self, Action::FirmwareUpdate(_))
    }

    /// Whether the action destroys data on the BMC that cannot be had back
    /// (the event log, every BIOS setting, secure boot keys): such an action
    /// runs only where the raw policy has a rule allowing `action:<kind>`
    /// (gateway at admission, worker before sending); the default policy
    /// denies them.
    pub fn is_destructive(&self) -> bool {
        matches!(self, Action::EventLog(EventLogOp::Clear) | Action::BiosReset | Action::SecureBootResetKeys(_))
    }

    /// A copy safe to log: secrets are already `[redacted]` by `Debug`, and
    /// raw bodies are summarised.
    pub fn describe(&self) -> String {
        format!("{self:?}")
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum PowerOp {
    On,
    /// Hard off.
    Off,
    /// ACPI / graceful shutdown.
    SoftOff,
    Cycle,
    /// Hard reset.
    Reset,
    Status,
    /// Diagnostic interrupt.
    Nmi,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum BootDevice {
    Pxe,
    Disk,
    Cdrom,
    Bios,
    Safe,
    /// UEFI HTTP boot (Redfish `UefiHttp`, where the BMC allows it).
    Http,
    /// No override (read back only).
    #[cfg_attr(feature = "clap", value(skip))]
    None,
    /// An override bmcfleet has no name for (read back only: e.g. Redfish
    /// `Usb`, `UefiTarget`, `UefiShell`, an IPMI remote-media selector).
    #[cfg_attr(feature = "clap", value(skip))]
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootDeviceRequest {
    pub device: BootDevice,
    /// Applies to every boot rather than the next one only.
    #[serde(default)]
    pub persistent: bool,
    /// UEFI boot rather than legacy BIOS.
    #[serde(default)]
    pub efi: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserRole {
    Admin,
    Operator,
    User,
    Callback,
    NoAccess,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UserOp {
    List,
    Create(UserSpec),
    /// Changes an existing user; a missing user is an error, never a create.
    Update(UserUpdate),
    Delete {
        name: String,
    },
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserSpec {
    pub name: String,
    pub password: Secret,
    pub role: UserRole,
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn yes() -> bool {
    true
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserUpdate {
    pub name: String,
    pub password: Option<Secret>,
    pub role: Option<UserRole>,
    pub enabled: Option<bool>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BmcResetKind {
    Warm,
    Cold,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkSourceOp {
    /// Read the current source and addresses.
    Get,
    Dhcp,
    Static(StaticIpv4),
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticIpv4 {
    pub address: std::net::Ipv4Addr,
    pub netmask: std::net::Ipv4Addr,
    pub gateway: Option<std::net::Ipv4Addr>,
}

/// Protocol-specific passthrough, bounded in size by [`crate::Limits`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawRequest {
    Ipmi(RawIpmi),
    Redfish(RawRedfish),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawIpmi {
    pub netfn: u8,
    pub cmd: u8,
    #[serde(default)]
    pub data: Vec<u8>,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedfish {
    pub method: HttpMethod,
    /// Must start with `/redfish/v1`.
    pub path: String,
    pub body: Option<serde_json::Value>,
}

/// Logs show the body with the values of secret-looking keys (password,
/// token, secret, key) replaced by `[redacted]`.
impl std::fmt::Debug for RawRedfish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRedfish")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("body", &self.body.as_ref().map(redact_json))
            .finish()
    }
}

fn redact_json(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let l = k.to_ascii_lowercase();
                    let secret = ["password", "token", "secret", "key", "community"].iter().any(|s| l.contains(s));
                    (k.clone(), if secret { Value::String("[redacted]".into()) } else { redact_json(v) })
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(redact_json).collect()),
        other => other.clone(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    Get,
    Post,
    Patch,
    Put,
    Delete,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            HttpMethod::Get => "GET",
            HttpMethod::Post => "POST",
            HttpMethod::Patch => "PATCH",
            HttpMethod::Put => "PUT",
            HttpMethod::Delete => "DELETE",
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaKind {
    #[default]
    Cd,
    Usb,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VirtualMediaOp {
    Insert {
        url: String,
        #[serde(default)]
        media: MediaKind,
    },
    Eject {
        #[serde(default)]
        media: MediaKind,
    },
}

/// What a worker receives on a job subject: the batch as admitted.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// The batch, with its id always set.
    pub batch: Batch,
    pub id: BatchId,
    /// Where the batch goes: the machine's registered target as the gateway
    /// found it, or the ad hoc target. A worker re-reads a machine's target
    /// from its own copy of the registry and never trusts this one for it.
    pub target: BmcTarget,
    /// Unix milliseconds at admission.
    pub admitted_at_ms: u64,
    /// Unix milliseconds after which no further action starts.
    pub deadline_at_ms: u64,
    /// The tenant the batch belongs to (its events go to its subject).
    #[serde(default = "crate::machine::default_tenant")]
    pub tenant: String,
    /// Secrets taken out of the actions by the gateway (new users'
    /// passwords, media URLs with credentials or signed queries, raw
    /// requests' data and bodies), each
    /// sealed to the workers' key and bound to its batch, action and field;
    /// the actions hold a placeholder in their place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealed_params: Vec<SealedParam>,
    /// Admitted for an operator (a client of the gateway's own NATS
    /// account), not through a tenant's account. The operator's own
    /// batches (tenant `default`) hold no tenant's share of a worker's
    /// slots; a batch of the `default` account's producers does, like any
    /// tenant's. (A job queued before this field existed reads `false`.)
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_operator: bool,
}

/// One secret action parameter, sealed (see [`Job::sealed_params`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SealedParam {
    /// Index of the action in the batch.
    pub action: u32,
    pub field: ParamField,
    pub sealed: SealedCredentials,
}

/// Which parameter of an action a [`SealedParam`] replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamField {
    /// `user.create.password` or `user.update.password`.
    Password,
    /// `virtual_media.insert.url` or `firmware_update.image_uri`.
    Url,
    /// A raw request's data: `raw.ipmi.data` (as hex) or `raw.redfish.body`
    /// (as JSON).
    Raw,
}

impl ParamField {
    pub fn as_str(self) -> &'static str {
        match self {
            ParamField::Password => "password",
            ParamField::Url => "url",
            ParamField::Raw => "raw",
        }
    }
}

/// Lower-case hex of `bytes` (hashes, digests, raw records and data).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| text.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok())).collect()
}

impl Action {
    /// The BMC account this action creates, changes or deletes, if any (a
    /// listing changes none).
    pub fn user_changed(&self) -> Option<&str> {
        match self {
            Action::User(
                UserOp::Create(UserSpec { name, .. })
                | UserOp::Update(UserUpdate { name, .. })
                | UserOp::Delete { name },
            ) => Some(name),
            _ => None,
        }
    }

    /// The secret parameter this action carries, if any: (field, value).
    /// A media URL counts when it has user info or a query string; a raw
    /// request's data or body always does.
    pub fn secret_param(&self) -> Option<(ParamField, String)> {
        match self {
            Action::Raw(RawRequest::Ipmi(r)) if !r.data.is_empty() => Some((ParamField::Raw, hex(&r.data))),
            Action::Raw(RawRequest::Redfish(RawRedfish { body: Some(body), .. })) => {
                Some((ParamField::Raw, body.to_string()))
            }
            Action::User(UserOp::Create(u)) => Some((ParamField::Password, u.password.expose().to_owned())),
            Action::User(UserOp::Update(UserUpdate { password: Some(p), .. })) => {
                Some((ParamField::Password, p.expose().to_owned()))
            }
            Action::VirtualMedia(VirtualMediaOp::Insert { url, .. })
            | Action::FirmwareUpdate(FirmwareUpdate { image_uri: Some(url), .. }) => {
                let u = url::Url::parse(url).ok()?;
                (!u.username().is_empty() || u.password().is_some() || u.query().is_some())
                    .then(|| (ParamField::Url, url.clone()))
            }
            _ => None,
        }
    }

    /// The secret strings of this action, as a BMC might echo them back in
    /// an error: a user's password; a media URL's password, user info,
    /// query string and each query parameter's value (and the whole URL),
    /// each as written in the URL and decoded (a BMC quotes what it
    /// decoded: `p%40ss` is the password `p@ss`; a query value's `+` may be
    /// read as a space). The worker removes them, and their percent-encoded
    /// forms, from every message a BMC sends back before it is logged or stored.
    pub fn secret_values(&self) -> Vec<String> {
        let Some((field, value)) = self.secret_param() else { return vec![] };
        match field {
            ParamField::Password => vec![value],
            // Request bytes and JSON, not strings a BMC would echo (and
            // scrubbing short hex runs would mangle its messages).
            ParamField::Raw => vec![],
            ParamField::Url => {
                let mut out = vec![value.clone()];
                let mut add = |s: &str| {
                    for form in [s.to_owned(), crate::secret::percent_decoded(s)] {
                        if !out.contains(&form) {
                            out.push(form);
                        }
                    }
                };
                add(&value);
                if let Ok(u) = url::Url::parse(&value) {
                    add(u.as_str());
                    if let Some(password) = u.password() {
                        add(password);
                        add(&format!("{}:{password}", u.username()));
                    }
                    if !u.username().is_empty() {
                        add(&format!("{}:", u.username()));
                    }
                    if let Some(query) = u.query() {
                        add(query);
                        for pair in query.split('&') {
                            add(pair.split_once('=').map_or(pair, |(_, v)| v));
                        }
                        for (_, v) in u.query_pairs() {
                            add(&v);
                        }
                    }
                }
                out
            }
        }
    }

    /// Put `value` back as the `field` parameter (the worker, after opening it).
    /// `false` when the action has no such parameter.
    pub fn set_secret_param(&mut self, field: ParamField, value: String) -> bool {
        match (self, field) {
            (Action::User(UserOp::Create(u)), ParamField::Password) => u.password = Secret::new(value),
            (Action::User(UserOp::Update(UserUpdate { password: Some(p), .. })), ParamField::Password) => {
                *p = Secret::new(value)
            }
            (Action::VirtualMedia(VirtualMediaOp::Insert { url, .. }), ParamField::Url) => *url = value,
            (Action::FirmwareUpdate(FirmwareUpdate { image_uri: Some(u), .. }), ParamField::Url) => *u = value,
            (Action::Raw(RawRequest::Ipmi(r)), ParamField::Raw) => match from_hex(&value) {
                Some(data) => r.data = data,
                None => return false,
            },
            (Action::Raw(RawRequest::Redfish(r)), ParamField::Raw) => match serde_json::from_str(&value) {
                Ok(body) => r.body = Some(body),
                Err(_) => return false,
            },
            _ => return false,
        }
        true
    }

    /// Replace the secret parameter by what logs may show (`[sealed]` for a
    /// password, the URL without credentials and query, nothing of a raw
    /// request's data or body).
    pub fn hide_secret_param(&mut self) {
        let Some((field, value)) = self.secret_param() else { return };
        let shown = match field {
            ParamField::Url => loggable_url(&value),
            ParamField::Password => "[sealed]".into(),
            // Nothing of the request's data stays: the worker puts it back.
            ParamField::Raw => {
                match self {
                    Action::Raw(RawRequest::Ipmi(r)) => r.data.clear(),
                    Action::Raw(RawRequest::Redfish(r)) => r.body = None,
                    _ => {}
                }
                return;
            }
        };
        self.set_secret_param(field, shown);
    }
}

/// The ordering key of a batch for `machine`, else for the ad hoc `address`.
pub fn ordering_key(machine: Option<&str>, address: &BmcAddress) -> BmcKey {
    match machine {
        Some(name) => BmcKey::machine(name),
        None => address.key(),
    }
}

impl Batch {
    /// The ordering key as the batch states it (`None`: it names no target).
    pub fn key(&self) -> Option<BmcKey> {
        match (&self.machine, &self.bmc) {
            (Some(name), _) => Some(BmcKey::machine(name)),
            (None, Some(t)) => Some(t.address.key()),
            (None, None) => None,
        }
    }
}

impl Job {
    /// The ordering key: the machine's, or the ad hoc address's.
    pub fn key(&self) -> BmcKey {
        ordering_key(self.batch.machine.as_deref(), &self.target.address)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn event_log_ops_have_a_bare_and_a_tagged_spelling() {
        let parse = |j: &str| serde_json::from_str::<Action>(j).unwrap();
        assert_eq!(parse(r#"{"event_log": "read"}"#), Action::EventLog(EventLogOp::read()));
        assert_eq!(parse(r#"{"event_log": "clear"}"#), Action::EventLog(EventLogOp::Clear));
        assert_eq!(
            parse(r#"{"event_log": {"read": {"limit": 5, "offset": 2}}}"#),
            Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 2 })
        );
        assert_eq!(parse(r#""sensors""#), Action::Sensors);
        assert!(serde_json::from_str::<Action>(r#"{"event_log": "erase"}"#).is_err());
        let a = Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 2 });
        assert_eq!(parse(&serde_json::to_string(&a).unwrap()), a);
        let bytes = rmp_serde::to_vec_named(&a).unwrap();
        assert_eq!(rmp_serde::from_slice::<Action>(&bytes).unwrap(), a);
        assert_eq!((a.kind(), Action::EventLog(EventLogOp::Clear).kind()), ("event_log_read", "event_log_clear"));
    }

    use super::*;

    #[test]
    fn logs_never_see_parameters_that_carry_secrets() {
        let url = Action::VirtualMedia(VirtualMediaOp::Insert {
            url: "https://u:p4ss@img.example/x.iso?sig=S3CR".into(),
            media: MediaKind::Cd,
        });
        let raw = Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 1, data: vec![0xde, 0xad] }));
        let body = Action::Raw(RawRequest::Redfish(RawRedfish {
            method: HttpMethod::Post,
            path: "/redfish/v1/x?token=T0K".into(),
            body: Some(serde_json::json!({"Password": "p4ss"})),
        }));
        let user = Action::User(UserOp::Create(UserSpec {
            name: "ops".into(),
            password: "p4ss".into(),
            role: UserRole::Admin,
            enabled: true,
        }));
        for a in [url, raw, body, user] {
            let shown = a.loggable();
            for secret in ["p4ss", "S3CR", "T0K", "222", "173", "dead"] {
                assert!(!shown.contains(secret), "{shown}");
            }
        }
        assert_eq!(loggable_url("http://img.example:8080/a.iso"), "http://img.example:8080/a.iso");
        assert!(loggable_url("https://u:p@h/x").ends_with("[credentials and query hidden]"));
    }

    #[test]
    fn raw_request_data_is_a_secret_parameter() {
        // What the gateway seals and hides, and the worker puts back whole.
        let ipmi = Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 1, data: vec![0xde, 0xad, 0x00, 0x0f] }));
        let redfish = Action::Raw(RawRequest::Redfish(RawRedfish {
            method: HttpMethod::Patch,
            path: "/redfish/v1/AccountService/Accounts/3".into(),
            body: Some(serde_json::json!({"Password": "p4ss", "Nested": [1, {"a": null}]})),
        }));
        for original in [ipmi, redfish] {
            let (field, value) = original.secret_param().expect("a secret parameter");
            assert_eq!(field, ParamField::Raw);
            assert!(original.secret_values().is_empty(), "request bytes are not scrubbed from BMC messages");
            let mut hidden = original.clone();
            hidden.hide_secret_param();
            let stored = serde_json::to_string(&hidden).unwrap();
            assert!(!stored.contains("p4ss") && !stored.contains("222") && !stored.contains("dead"), "{stored}");
            assert_eq!(hidden.secret_param(), None, "nothing of it stays");
            assert!(hidden.set_secret_param(field, value), "put back");
            assert_eq!(hidden, original);
        }
        let mut bad = Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 1, data: vec![] }));
        assert_eq!(bad.secret_param(), None, "no data, nothing to seal");
        assert!(!bad.set_secret_param(ParamField::Raw, "0g".into()), "not hex");
    }
}
