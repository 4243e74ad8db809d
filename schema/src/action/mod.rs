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
//!
//! # Layout
//! The batch and the [`Action`] set are here; what an action is sent to and
//! what a worker receives are in `target` and `job`; each capability's
//! parameters have a module of their own, named as in `provider/src/capability/`.
//! Everything is re-exported here (and at the crate root), so
//! `bmcfleet_schema::action::PowerOp` and `bmcfleet_schema::PowerOp` both name it.

mod bios;
mod bmc_clock;
mod bmc_reset;
mod boot;
mod certificates;
mod event_log;
mod firmware_update;
mod identify;
mod job;
mod network_source;
mod power;
mod power_capping;
mod raw;
mod secure_boot;
mod target;
mod users;
mod virtual_media;

pub use bios::*;
pub use bmc_clock::*;
pub use bmc_reset::*;
pub use boot::*;
pub use certificates::*;
pub use event_log::*;
pub use firmware_update::*;
pub use identify::*;
pub use job::*;
pub use network_source::*;
pub use power::*;
pub use power_capping::*;
pub use raw::*;
pub use secure_boot::*;
pub use target::*;
pub use users::*;
pub use virtual_media::*;

use crate::bmc::{BmcAddress, BmcKey};
use serde::{Deserialize, Serialize};
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
    /// Plan mode: run up to each action's first state-changing request and
    /// return, per action, what it read and the request it would send
    /// ([`crate::plan::ActionPlan`]), changing nothing (`docs/PLAN_MODE.md`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
    /// Which events the batch publishes on its event subject: every
    /// action's (`all`, the default) or only `batch_finished` (`final`), for
    /// producers that follow the batch by its result or status record
    /// (a rollout's machines: the rollout reports their progress).
    #[serde(default, skip_serializing_if = "EventsMode::is_all")]
    pub events: EventsMode,
}

/// The events a batch publishes ([`Batch::events`]). Its status record, its
/// final event and its result are the same in both modes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventsMode {
    /// `action_started`, `action_progress`, `action_finished` and `batch_finished`.
    #[default]
    All,
    /// `batch_finished` only: two messages fewer per action.
    Final,
}

impl EventsMode {
    pub fn is_all(&self) -> bool {
        *self == EventsMode::All
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
    /// The identify light's state: `"identify_get"`.
    IdentifyGet,
    /// Turn the identify light on, off or blinking, verified by read-back
    /// where the BMC reports it: `{"identify": {"light": "blink",
    /// "seconds": 30}}`.
    Identify(IdentifySet),
    /// The machine's power draw (current, min, max, average watts and the
    /// interval they cover): `"power_reading"`.
    PowerReading,
    /// The power limit: `"power_limit_get"`.
    PowerLimitGet,
    /// Set and/or activate the power limit, read back:
    /// `{"power_limit_set": {"watts": 450, "active": true}}`.
    PowerLimitSet(PowerLimitSet),
    /// The BMC's clock and its drift against the worker: `"bmc_clock_get"`.
    BmcClockGet,
    /// Set the BMC's clock to the worker's (UTC), read back:
    /// `"bmc_clock_sync"` (IPMI Set SEL Time; Redfish Manager `DateTime`).
    BmcClockSync,
    /// The BMC's NTP settings: `"ntp_get"`.
    NtpGet,
    /// Set the BMC's NTP servers and/or whether it uses NTP, read back:
    /// `{"ntp_set": {"servers": ["ntp1.example"], "enabled": true}}`.
    NtpSet(NtpSet),
    /// The HTTPS certificate the BMC serves (subject, issuer, validity,
    /// SHA-256): `"bmc_cert_get"`.
    BmcCertGet,
    /// Replace the BMC's HTTPS certificate with one the operator supplies
    /// (the key sealed like a password), read back by its fingerprint:
    /// `{"bmc_cert_replace": {"certificate_pem": "…", "private_key_pem": "…"}}`.
    BmcCertReplace(BmcCertReplace),
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
            | Action::SecureBootGet
            | Action::IdentifyGet
            | Action::PowerReading
            | Action::PowerLimitGet
            | Action::BmcClockGet
            | Action::BmcClockSync
            | Action::NtpGet
            | Action::BmcCertGet => String::new(),
            Action::NtpSet(n) => format!(
                "servers={} enabled={}",
                n.servers.as_ref().map(|s| s.join(",")).unwrap_or_else(|| "-".into()),
                n.enabled.map(|e| e.to_string()).unwrap_or_else(|| "-".into())
            ),
            // The key is never shown; the certificate by its size only.
            Action::BmcCertReplace(r) => format!("certificate=[{} bytes] key=[sealed]", r.certificate_pem.len()),
            Action::PowerLimitSet(p) => format!(
                "watts={} active={}",
                p.watts.map(|w| w.to_string()).unwrap_or_else(|| "-".into()),
                p.active.map(|a| a.to_string()).unwrap_or_else(|| "-".into())
            ),
            Action::Identify(i) => {
                format!("{:?} seconds={}", i.light, i.seconds.map(|s| s.to_string()).unwrap_or_else(|| "-".into()))
            }
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
            Action::EventLog(EventLogOp::Read { limit, offset, logs, log_ids }) => {
                format!(
                    "read limit={} offset={offset} logs={}",
                    limit.map(|l| l.to_string()).unwrap_or_else(|| "-".into()),
                    if log_ids.is_empty() { format!("{logs:?}") } else { log_ids.join(",") }
                )
            }
            Action::EventLog(EventLogOp::Clear { log_ids }) if log_ids.is_empty() => "clear".into(),
            Action::EventLog(EventLogOp::Clear { log_ids }) => format!("clear logs={}", log_ids.join(",")),
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
            Action::EventLog(EventLogOp::Clear { .. }) => "event_log_clear",
            Action::Sensors => "sensors",
            Action::BiosGet => "bios_get",
            Action::BiosSet(_) => "bios_set",
            Action::BiosReset => "bios_reset",
            Action::SecureBootGet => "secure_boot_get",
            Action::SecureBootSet(_) => "secure_boot_set",
            Action::SecureBootResetKeys(_) => "secure_boot_reset_keys",
            Action::FirmwareUpdate(_) => "firmware_update",
            Action::IdentifyGet => "identify_get",
            Action::Identify(_) => "identify",
            Action::PowerReading => "power_reading",
            Action::PowerLimitGet => "power_limit_get",
            Action::PowerLimitSet(_) => "power_limit_set",
            Action::BmcClockGet => "bmc_clock_get",
            Action::BmcClockSync => "bmc_clock_sync",
            Action::NtpGet => "ntp_get",
            Action::NtpSet(_) => "ntp_set",
            Action::BmcCertGet => "bmc_cert_get",
            Action::BmcCertReplace(_) => "bmc_cert_replace",
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
            // A timed identify started again runs its interval again: harmless.
            Action::IdentifyGet | Action::Identify(_) => true,
            Action::PowerReading | Action::PowerLimitGet | Action::PowerLimitSet(_) => true,
            Action::BmcClockGet | Action::BmcClockSync | Action::NtpGet | Action::NtpSet(_) => true,
            // The same certificate installed twice is served the same.
            Action::BmcCertGet | Action::BmcCertReplace(_) => true,
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
        matches!(self, Action::EventLog(EventLogOp::Clear { .. }) | Action::BiosReset | Action::SecureBootResetKeys(_))
    }

    /// A copy safe to log: secrets are already `[redacted]` by `Debug`, and
    /// raw bodies are summarised.
    pub fn describe(&self) -> String {
        format!("{self:?}")
    }
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

#[cfg(test)]
mod tests {
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
}
