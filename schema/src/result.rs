//! Results, events and the per-batch status record.

use crate::action::{
    BatchId, BmcCertificate, BmcClock, BootDeviceRequest, IdentifyState, NetworkSourceOp, NtpSettings, PowerLimit,
    PowerReading, UserRole,
};
use crate::error::ErrorBody;
use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerState {
    On,
    Off,
    /// Transitioning or reported as something else by the BMC.
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    Error,
}

/// What one action returned.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActionResult {
    pub index: u32,
    /// [`crate::Action::kind`].
    pub action: String,
    pub outcome: Outcome,
    pub error: Option<ErrorBody>,
    pub data: Option<ActionData>,
    /// The provider that ran it (`ipmi`, `redfish`, `amt`, `sim`).
    pub provider: Option<String>,
    /// IPMI: the RMCP+ cipher suite of the session that ran it (the suite
    /// the BMC answered with, within the machine's list).
    #[serde(default)]
    pub cipher_suite: Option<u8>,
    pub duration_ms: u64,
    /// Plan mode (`Batch::plan`) only: what the action read and the
    /// state-changing request it would have sent.
    #[serde(default)]
    pub plan: Option<crate::plan::ActionPlan>,
}

impl ActionResult {
    pub fn ok(index: u32, action: &str, provider: Option<String>, data: Option<ActionData>, duration_ms: u64) -> Self {
        ActionResult {
            index,
            action: action.into(),
            outcome: Outcome::Ok,
            error: None,
            data,
            provider,
            cipher_suite: None,
            duration_ms,
            plan: None,
        }
    }

    pub fn err(index: u32, action: &str, provider: Option<String>, error: ErrorBody, duration_ms: u64) -> Self {
        ActionResult {
            index,
            action: action.into(),
            outcome: Outcome::Error,
            error: Some(error),
            data: None,
            provider,
            cipher_suite: None,
            duration_ms,
            plan: None,
        }
    }

    /// The same result with `plan` attached.
    pub fn with_plan(mut self, plan: Option<crate::plan::ActionPlan>) -> Self {
        self.plan = plan;
        self
    }

    pub fn is_ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }
}

/// Data an action returns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionData {
    PowerState(PowerState),
    BootDevice(BootDeviceRequest),
    /// A boot device set in a settings object: it becomes the override when
    /// the system next resets (Redfish `@Redfish.Settings`). Also what
    /// `get_boot_device` answers while such a change waits.
    BootDevicePending(BootDeviceRequest),
    Users(Vec<UserInfo>),
    NetworkSource(NetworkSourceOp),
    Raw(RawResponse),
    /// Boxed: the component lists make it the largest variant by far.
    Inventory(Box<Inventory>),
    EventLog(EventLog),
    Sensors(Vec<SensorReading>),
    Bios(Bios),
    /// Attributes written to the BIOS settings object: they take effect
    /// when the system next resets (or as `apply_time` says).
    BiosPending(BiosPending),
    SecureBoot(SecureBootState),
    /// How a `firmware_update` ended.
    FirmwareUpdate(FirmwareUpdateResult),
    /// The identify light (`identify_get`, and `identify` after its read-back).
    Identify(IdentifyState),
    /// `power_reading`.
    PowerReading(PowerReading),
    /// `power_limit_get`, and `power_limit_set` after its read-back.
    PowerLimit(PowerLimit),
    /// `bmc_clock_get`, and `bmc_clock_sync` after its read-back.
    BmcClock(BmcClock),
    /// `ntp_get`, and `ntp_set` after its read-back.
    Ntp(NtpSettings),
    /// `bmc_cert_get`, and `bmc_cert_replace` as the BMC serves it afterwards.
    BmcCertificate(Box<BmcCertificate>),
    /// The action found nothing to do and did nothing (a success that
    /// changed nothing, said as such).
    NoChange(NoChange),
}

/// Why an action changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoChange {
    /// Eject: no media of that kind is inserted in any slot.
    NotInserted,
    /// Insert: that image is inserted already.
    AlreadyInserted,
}

/// How a firmware update ended (Redfish: the BMC's task).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirmwareUpdateResult {
    /// The BMC's task the update ran as (its Task Monitor or Task, a path
    /// on the BMC); absent when the BMC finished the request without one.
    pub task: Option<String>,
    /// The task's final state as the BMC names it (`Completed`), or
    /// `Accepted` for a request the BMC answered without a task.
    pub state: String,
    /// The last `PercentComplete` the BMC reported.
    pub percent: Option<u8>,
    /// The task's messages (BMC text, scrubbed of the batch's secrets).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<String>,
    /// True when this worker took over watching a task that an earlier
    /// owner of the batch started (no second update was requested).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resumed: bool,
}

/// BIOS attributes as the BMC reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Bios {
    /// Current values.
    pub attributes: std::collections::BTreeMap<String, serde_json::Value>,
    /// Values waiting in the settings object that differ from the current ones.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub pending: std::collections::BTreeMap<String, serde_json::Value>,
    /// What the attribute registry says about the current attributes, where
    /// the BMC offers one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub registry: Vec<BiosAttribute>,
}

/// One attribute's registry entry.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BiosAttribute {
    pub name: String,
    /// `Enumeration`, `String`, `Integer`, `Boolean` or `Password`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub read_only: bool,
    /// Enumeration: the allowed values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<String>,
    pub lower_bound: Option<i64>,
    pub upper_bound: Option<i64>,
    pub max_length: Option<u64>,
}

/// What a `bios_set` left pending.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BiosPending {
    pub attributes: std::collections::BTreeMap<String, serde_json::Value>,
    /// When the BMC applies them (`OnReset`, `AtMaintenanceWindowStart`, ...).
    pub apply_time: Option<String>,
}

/// UEFI secure boot.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecureBootState {
    /// Enabled for the next boot.
    pub enabled: bool,
    /// Whether the current boot was secure (`Enabled`, `Disabled`, `Unknown`).
    pub current_boot: Option<String>,
    /// `SetupMode`, `UserMode`, `AuditMode`, `DeployedMode`.
    pub mode: Option<String>,
}

/// How bad something is: an event log entry's severity, a sensor's health.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Ok,
    Warning,
    Critical,
}

/// A page of the system event log, newest first.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLog {
    /// Entries in the whole log (all pages), where the BMC says.
    pub total: Option<u32>,
    pub entries: Vec<EventLogEntry>,
}

/// One event log entry. Text comes from the BMC (scrubbed of the batch's
/// secrets like every BMC message).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLogEntry {
    /// The BMC's id of the entry (IPMI record id in hex, Redfish entry `Id`).
    pub id: String,
    /// RFC 3339; absent when the BMC does not know (IPMI timestamps taken
    /// before its clock was set).
    pub time: Option<String>,
    /// Absent where the entry does not say (IPMI discrete events).
    pub severity: Option<Health>,
    /// The sensor the event is about (IPMI sensor number, Redfish `SensorNumber`/`OriginOfCondition`).
    pub sensor: Option<String>,
    /// The sensor type or entry type (`Temperature`, `Power Supply`, `Oem`, ...).
    pub kind: Option<String>,
    pub message: String,
    /// IPMI: the 16-byte SEL record, lower-case hex.
    pub raw: Option<String>,
    /// Redfish: the log service the entry comes from (`SEL`, `IML`, `Log1`, ...).
    pub log: Option<String>,
}

/// What a sensor measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SensorKind {
    Temperature,
    Fan,
    Voltage,
    Power,
    Other,
}

/// One sensor's reading.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SensorReading {
    pub name: String,
    pub kind: SensorKind,
    /// Absent when the sensor has no reading (unavailable, scanning disabled).
    pub value: Option<f64>,
    /// `Cel`, `RPM`, `V`, `W`, `%`, ... (UCUM-style, as Redfish spells them).
    pub unit: Option<String>,
    #[serde(default, skip_serializing_if = "Thresholds::is_empty")]
    pub thresholds: Thresholds,
    pub health: Option<Health>,
}

/// A sensor's thresholds, where known.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub lower_critical: Option<f64>,
    pub lower_warning: Option<f64>,
    pub upper_warning: Option<f64>,
    pub upper_critical: Option<f64>,
}

impl Thresholds {
    pub fn is_empty(&self) -> bool {
        *self == Thresholds::default()
    }

    /// The health a value has against these thresholds.
    pub fn health(&self, value: f64) -> Health {
        let below = |t: Option<f64>| t.is_some_and(|t| value <= t);
        let above = |t: Option<f64>| t.is_some_and(|t| value >= t);
        if below(self.lower_critical) || above(self.upper_critical) {
            Health::Critical
        } else if below(self.lower_warning) || above(self.upper_warning) {
            Health::Warning
        } else {
            Health::Ok
        }
    }
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserInfo {
    /// Slot / account id on the BMC.
    pub id: String,
    pub name: String,
    pub role: Option<UserRole>,
    pub enabled: bool,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RawResponse {
    /// IPMI completion code or HTTP status.
    pub status: u16,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data: Vec<u8>,
    pub body: Option<serde_json::Value>,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub manufacturer: Option<String>,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware_version: Option<String>,
    pub power_state: Option<PowerState>,
    /// Anything else the provider found, as name/value pairs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<(String, String)>,
    /// Typed components ([`crate::inventory`]); empty where the BMC does
    /// not offer them (or the record predates them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processors: Vec<crate::components::Processor>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<crate::components::MemoryModule>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drives: Vec<crate::components::Drive>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nics: Vec<crate::components::Nic>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_supplies: Vec<crate::components::PowerSupply>,
    /// Every component's firmware version (Redfish `FirmwareInventory`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub firmware: Vec<crate::components::Firmware>,
    /// IPMI FRU device 0.
    pub fru: Option<crate::components::Fru>,
    /// Sections the BMC offers but that could not be read this time (it
    /// answered an error): not the same as having no such components.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<crate::components::Section>,
    /// Sections cut to fit the size bounds ([`crate::components::bound`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub truncated: Vec<crate::components::Section>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    /// Admitted, waiting for its BMC's lane.
    Queued,
    Running,
    /// Every action ran and succeeded.
    Succeeded,
    /// At least one action failed.
    Failed,
    /// Cancelled before it finished.
    Cancelled,
}

impl BatchState {
    pub fn is_final(self) -> bool {
        matches!(self, BatchState::Succeeded | BatchState::Failed | BatchState::Cancelled)
    }
}

/// The final result of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchResult {
    pub id: BatchId,
    pub bmc: String,
    pub state: BatchState,
    pub results: Vec<ActionResult>,
    /// The worker that finished the batch.
    pub worker: String,
    /// How many times the batch was delivered to a worker.
    pub deliveries: u64,
    pub admitted_at_ms: u64,
    pub finished_at_ms: u64,
}

/// The status record kept per batch in the status KV bucket; it is also how
/// a redelivered batch resumes after its last completed action.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchStatus {
    pub id: BatchId,
    pub bmc: String,
    /// The tenant that owns the batch: only it (and operators) may read or cancel it.
    #[serde(default = "crate::machine::default_tenant")]
    pub tenant: String,
    pub state: BatchState,
    /// Results of the actions finished so far, in order.
    #[serde(default)]
    pub results: Vec<ActionResult>,
    /// Index of an action started but not (yet) finished.
    pub in_progress: Option<u32>,
    /// A long-running BMC task an action started (a firmware update): what
    /// the next owner needs to watch it instead of starting it again.
    pub task: Option<Box<TaskRecord>>,
    #[serde(default)]
    pub cancel_requested: bool,
    /// The kinds ([`crate::Action::kind`]) of the batch's actions, in order.
    pub actions: Vec<String>,
    /// Sequence of the job in the jobs stream.
    pub stream_sequence: Option<u64>,
    pub worker: Option<String>,
    /// How many times a worker started (or resumed) the batch.
    #[serde(default)]
    pub deliveries: u64,
    pub admitted_at_ms: u64,
    pub updated_at_ms: u64,
    pub result: Option<BatchResult>,
}

/// What a worker recorded, durably and before going on, about the BMC task
/// an action ([`crate::Action::watches_task`]) started.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The action's index in the batch.
    pub index: u32,
    /// The request that starts the task may have left (recorded right
    /// before it is sent): from here on the action is never started again.
    pub requested: bool,
    /// The BMC's task (Task Monitor or Task path on the BMC), recorded as
    /// soon as the BMC named it.
    pub uri: Option<String>,
}

/// Published on `<prefix>.events.<batch-id>` (and kept in the results stream).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub batch: BatchId,
    pub at_ms: u64,
    pub event: EventKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    ActionStarted {
        index: u32,
        action: String,
    },
    ActionFinished {
        result: ActionResult,
    },
    /// A long-running action's progress (a firmware update's BMC task):
    /// published when the percentage or the task state changes.
    ActionProgress {
        index: u32,
        action: String,
        /// The task's `PercentComplete`, when the BMC reports one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        percent: Option<u8>,
        /// The task's `TaskState` (`Running`, `Completed`, ...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
    },
    BatchFinished {
        result: BatchResult,
    },
}

/// Reply to `submit` when the producer does not wait (or, with
/// [`Accepted::unowned`], when waiting would be in vain).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Accepted {
    pub id: BatchId,
    pub stream_sequence: u64,
    /// True when this id was already admitted (nothing new was queued).
    pub duplicate: bool,
    pub subject: String,
    /// Set when the request asked to wait but the gateway answered at once:
    /// no worker owns the batch's partition, so it stays `queued` until one
    /// does (issue 34).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unowned: Option<Unowned>,
}

/// No worker owns a partition: why a waiting submit was not waited for.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unowned {
    pub partition: u16,
    /// Since when no worker owns it (ms since the epoch), where known:
    /// when its last lease was handed back or expired, else when this
    /// gateway first found it free.
    pub since_ms: Option<u64>,
    /// The same for people: `no worker owns partition N since …`.
    pub message: String,
}

impl Unowned {
    /// Partition `partition` has had no owner since `since_ms` (where known).
    pub fn new(partition: u16, since_ms: Option<u64>) -> Unowned {
        let message = match since_ms {
            Some(ms) => {
                let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
                format!(
                    "no worker owns partition {partition} since {}; the batch stays queued until one does",
                    humantime::format_rfc3339_seconds(at)
                )
            }
            None => format!("no worker owns partition {partition}; the batch stays queued until one does"),
        };
        Unowned { partition, since_ms, message }
    }
}

/// Every gateway reply: exactly one of the variants.
// One value per request, built, encoded and dropped: never stored in bulk,
// so a variant's size costs nothing worth an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Accepted(Accepted),
    Result(BatchResult),
    Status(BatchStatus),
    Cancelled {
        id: BatchId,
        state: BatchState,
    },
    Error(ErrorBody),
    /// A rollout (`rollout.submit`, `.status`, `.pause`, `.resume`, `.abort`).
    Rollout(crate::rollout::RolloutView),
    /// `rollout.list`: the requester's rollouts, newest first.
    Rollouts {
        rollouts: Vec<crate::rollout::RolloutRecord>,
    },
    /// `discover`: what a worker's probes found (operators only).
    Discovery(crate::discover::DiscoverReport),
    /// `console.log`: one page of a machine's stored console output.
    ConsoleLog(crate::console::ConsoleLogPage),
}

/// Request body of `status` and `cancel`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdRequest {
    pub id: BatchId,
}
