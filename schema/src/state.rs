//! Observed machine state (issue 19): what the owning worker last saw of a
//! registered machine — power, whether its BMC answers, since when — kept
//! in the `<STREAM>_STATE` bucket (key: machine name) and announced on
//! `<prefix>.events.<tenant>.machine.<name>` whenever it changes.
//!
//! Only workers write state; operators read it (`bmcctl machine ls`,
//! `bmcctl machine watch`); a tenant receives its own machines' events
//! through the same per-tenant export as its batch events.

use crate::error::ErrorCode;
use crate::result::PowerState;
use serde::{Deserialize, Serialize};

/// The last observation of one machine.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    pub machine: String,
    pub tenant: String,
    /// Power as last read (`None`: never read successfully).
    pub power: Option<PowerState>,
    /// Whether the BMC answered the last poll (or batch).
    pub contactable: bool,
    /// Why it is not contactable (the error code and message of the last
    /// failure, or the open circuit breaker); none while contactable.
    pub error_code: Option<ErrorCode>,
    pub reason: Option<String>,
    /// Last successful contact (ms since the epoch).
    pub last_seen_ms: Option<u64>,
    /// When power or reachability last changed.
    pub last_changed_ms: u64,
    /// When the state was last written (a change or the heartbeat).
    pub updated_ms: u64,
    /// Failed polls in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The provider that answered (`ipmi`, `redfish`, `amt`, `sim`).
    pub provider: Option<String>,
    /// The BMC firmware version the last inventory read reported.
    pub firmware: Option<String>,
    /// When the inventory (key `<name>.inventory`) was last read.
    pub inventory_ms: Option<u64>,
    /// The worker that observed it.
    pub worker: String,
    /// When that worker last observed the machine, by a poll or a batch,
    /// whatever the outcome (ms since the epoch; absent in records of
    /// releases before issue 34: `updated_ms` stands for it). Between
    /// writes, the partition's [`PartitionSeen`] record carries it.
    pub observed_ms: Option<u64>,
    /// The interval the worker polls the machine at (absent: not polled).
    pub poll_interval_ms: Option<u64>,
    /// The record is stale once its observation is older than this: the
    /// poll interval plus a grace (see [`stale_after`]). Absent: the
    /// machine is not polled, and nothing says how old is too old.
    pub stale_after_ms: Option<u64>,
    /// The health verdict of the last health check (issue 37; absent: not
    /// checked, the worker's `--health-interval` is `off`, or no source
    /// could be read yet).
    pub health: Option<crate::health::HealthSummary>,
    /// The last power reading (watts) and when it was taken (ms since the
    /// epoch), with `--power-reading-interval`. The record carries the
    /// reading of its last write (a change or the heartbeat); the worker's
    /// metrics carry each one.
    pub power_watts: Option<f64>,
    pub power_read_ms: Option<u64>,
    /// The BMC's clock minus the worker's (ms) at the last clock reading,
    /// and when it was taken, with `--clock-interval`; written like the
    /// power reading.
    pub clock_drift_ms: Option<i64>,
    pub clock_read_ms: Option<u64>,
    /// When the BMC's HTTPS certificate expires (its `notAfter`, ms since
    /// the epoch), as last read (`bmc_cert_get`, `bmc_cert_replace`, or the
    /// inventory poll where the provider offers `bmc_certificates`).
    #[serde(default)]
    pub cert_not_after_ms: Option<u64>,
}

/// Whether a state record still says how the machine is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freshness {
    /// Observed within its poll interval plus the grace.
    Current,
    /// Older than that: the owner stopped polling it (no worker owns its
    /// partition, or the worker is stuck). Its power is not known.
    Stale,
    /// Nothing to judge by: never observed, or not polled.
    Unknown,
}

impl Freshness {
    pub fn as_str(self) -> &'static str {
        match self {
            Freshness::Current => "current",
            Freshness::Stale => "stale",
            Freshness::Unknown => "unknown",
        }
    }
}

/// The added lateness a polled machine's record is allowed before it is
/// stale, on top of what the schedule itself takes (see [`stale_after`]):
/// the default of the worker's `--state-stale-grace`.
pub const STALE_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

/// How old a polled machine's observation may get before it is stale: its
/// poll `interval`, plus the grace, which is what the schedule may add by
/// itself (the next poll comes up to a tenth of the interval late, a poll
/// may take `poll_timeout`, and the observation reaches the bucket with
/// the partition's next [`PartitionSeen`] write, every `seen_every`) and
/// `grace` on top (`--state-stale-grace`, [`STALE_GRACE`]).
pub fn stale_after(
    interval: std::time::Duration,
    poll_timeout: std::time::Duration,
    seen_every: std::time::Duration,
    grace: std::time::Duration,
) -> std::time::Duration {
    interval + interval / 10 + poll_timeout + seen_every + grace
}

/// Whether an observation at `observed_ms` with the limit `stale_after_ms`
/// still holds at `now_ms`.
pub fn freshness(observed_ms: u64, stale_after_ms: Option<u64>, now_ms: u64) -> Freshness {
    match stale_after_ms {
        None => Freshness::Unknown,
        Some(limit) if now_ms.saturating_sub(observed_ms) > limit => Freshness::Stale,
        Some(_) => Freshness::Current,
    }
}

/// The prefix of the keys of [`PartitionSeen`] records in the state
/// bucket (never a machine name: those are DNS labels).
pub const SEEN_KEY_PREFIX: &str = "_seen.p";

/// One partition's latest observations, written by its owner every
/// `--state-seen-interval` (one write per partition, however many
/// machines): what each machine's record does not carry between its
/// writes (on change or heartbeat). Key: [`crate::Subjects::seen_key`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartitionSeen {
    pub partition: u16,
    /// The owner that wrote it.
    pub worker: String,
    /// When it was written (ms since the epoch).
    pub at_ms: u64,
    /// Each polled machine of the partition the owner has observed.
    pub machines: std::collections::BTreeMap<String, SeenAt>,
}

/// A machine's latest observation in a [`PartitionSeen`] record.
#[serde_with::skip_serializing_none]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenAt {
    /// Last observation (any outcome).
    pub observed_ms: u64,
    /// Last answer.
    pub last_seen_ms: Option<u64>,
    /// As [`MachineState::stale_after_ms`].
    pub stale_after_ms: Option<u64>,
}

impl SeenAt {
    pub fn freshness(&self, now_ms: u64) -> Freshness {
        freshness(self.observed_ms, self.stale_after_ms, now_ms)
    }
}

impl MachineState {
    /// When the machine was last observed.
    pub fn observed_at(&self) -> u64 {
        self.observed_ms.unwrap_or(self.updated_ms)
    }

    /// Takes in the partition's later word on the machine (from `worker`):
    /// its last observation and answer, when newer than the record's.
    pub fn merge_seen(&mut self, seen: &SeenAt, worker: &str) {
        if seen.observed_ms > self.observed_at() {
            self.observed_ms = Some(seen.observed_ms);
            self.worker = worker.to_owned();
            if seen.stale_after_ms.is_some() {
                self.stale_after_ms = seen.stale_after_ms;
            }
        }
        if seen.last_seen_ms > self.last_seen_ms {
            self.last_seen_ms = seen.last_seen_ms;
        }
    }

    /// Whether the record still says how the machine is at `now_ms`.
    pub fn freshness(&self, now_ms: u64) -> Freshness {
        freshness(self.observed_at(), self.stale_after_ms, now_ms)
    }

    /// The power as far as it is known at `now_ms`: the last reading only
    /// while the machine answers and the record is not stale; otherwise
    /// `unknown` (never the last known power as if current).
    pub fn power_now(&self, now_ms: u64) -> Option<PowerState> {
        if !self.contactable || self.freshness(now_ms) == Freshness::Stale {
            return Some(PowerState::Unknown);
        }
        self.power
    }

    /// What an event compares: power and reachability (and the failure's
    /// code), and the health verdict's status.
    pub fn same_condition(&self, other: &MachineState) -> bool {
        self.power == other.power
            && self.contactable == other.contactable
            && self.error_code == other.error_code
            && self.health_status() == other.health_status()
    }

    /// The health verdict's status, where checked.
    pub fn health_status(&self) -> Option<crate::result::Health> {
        self.health.as_ref().map(|h| h.status)
    }
}

/// A change of a machine's observed state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MachineEventKind {
    /// Power read differs from the last reading (`from` none: first reading).
    PowerChanged {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<PowerState>,
        to: PowerState,
    },
    /// The BMC stopped answering (or its breaker opened).
    Unreachable { code: ErrorCode, reason: String },
    /// The BMC answers again.
    Recovered,
    /// A periodic inventory read differs from the previous one.
    InventoryChanged { changes: Vec<InventoryChange> },
    /// The health verdict's status changed (`from` none: first verdict),
    /// with the new verdict's reasons (issue 37, [`crate::health`]).
    HealthChanged {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<crate::result::Health>,
        to: crate::result::Health,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasons: Vec<String>,
    },
}

/// One thing of the inventory that changed: a field (`model`,
/// `extra.<name>` for the provider's additional pairs), a component
/// (`drives.Disk.Bay.0`, added or removed: `from`/`to` summarise it), a
/// component's field (`memory.DIMM1.capacity_mib`) or a firmware version
/// (`firmware.BMC`). See [`crate::inventory`].
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryChange {
    pub field: String,
    pub from: Option<String>,
    pub to: Option<String>,
    /// Absent in events from before components were typed: `changed`.
    #[serde(default)]
    pub change: ChangeKind,
}

impl InventoryChange {
    pub fn added(field: String, summary: String) -> Self {
        InventoryChange { field, from: None, to: Some(summary), change: ChangeKind::Added }
    }

    pub fn removed(field: String, summary: String) -> Self {
        InventoryChange { field, from: Some(summary), to: None, change: ChangeKind::Removed }
    }
}

/// What happened to the thing an [`InventoryChange`] names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A component appeared.
    Added,
    /// A component is gone.
    Removed,
    /// A value differs.
    #[default]
    Changed,
}

/// What differs between two inventories (power state aside: that is the
/// poll's business): the identity fields, the `extra` pairs, and every
/// typed component ([`crate::components::component_drift`]).
pub fn inventory_drift(before: &crate::result::Inventory, after: &crate::result::Inventory) -> Vec<InventoryChange> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: &Option<String>, b: &Option<String>| {
        if a != b {
            out.push(InventoryChange {
                field: name.to_owned(),
                from: a.clone(),
                to: b.clone(),
                change: ChangeKind::Changed,
            });
        }
    };
    field("manufacturer", &before.manufacturer, &after.manufacturer);
    field("model", &before.model, &after.model);
    field("serial", &before.serial, &after.serial);
    field("firmware_version", &before.firmware_version, &after.firmware_version);
    let old: std::collections::BTreeMap<&str, &str> =
        before.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let new: std::collections::BTreeMap<&str, &str> =
        after.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for key in old.keys().chain(new.keys()).collect::<std::collections::BTreeSet<_>>() {
        let (a, b) = (old.get(key).map(|v| v.to_string()), new.get(key).map(|v| v.to_string()));
        if a != b {
            out.push(InventoryChange { field: format!("extra.{key}"), from: a, to: b, change: ChangeKind::Changed });
        }
    }
    out.extend(crate::components::component_drift(before, after));
    out
}

impl MachineEventKind {
    /// The `Bmcfleet-Event` header value.
    pub fn name(&self) -> &'static str {
        match self {
            MachineEventKind::PowerChanged { .. } => "power_changed",
            MachineEventKind::Unreachable { .. } => "unreachable",
            MachineEventKind::Recovered => "recovered",
            MachineEventKind::InventoryChanged { .. } => "inventory_changed",
            MachineEventKind::HealthChanged { .. } => "health_changed",
        }
    }
}

/// One event on a machine's subject, with the state after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineEvent {
    pub machine: String,
    pub at_ms: u64,
    pub event: MachineEventKind,
    pub state: MachineState,
}

/// The events a new observation causes, given the previous state.
pub fn changes(before: Option<&MachineState>, after: &MachineState) -> Vec<MachineEventKind> {
    let mut out = Vec::new();
    let was_contactable = before.is_none_or(|b| b.contactable);
    if was_contactable && !after.contactable {
        out.push(MachineEventKind::Unreachable {
            code: after.error_code.unwrap_or(ErrorCode::Unreachable),
            reason: after.reason.clone().unwrap_or_default(),
        });
    }
    if before.is_some_and(|b| !b.contactable) && after.contactable {
        out.push(MachineEventKind::Recovered);
    }
    if let Some(to) = after.power {
        let from = before.and_then(|b| b.power);
        if after.contactable && from != Some(to) {
            out.push(MachineEventKind::PowerChanged { from, to });
        }
    }
    if let Some(health) = &after.health {
        let from = before.and_then(|b| b.health_status());
        if from != Some(health.status) {
            out.push(MachineEventKind::HealthChanged { from, to: health.status, reasons: health.reasons.clone() });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(power: Option<PowerState>, contactable: bool) -> MachineState {
        MachineState {
            machine: "m".into(),
            tenant: "default".into(),
            power,
            contactable,
            error_code: (!contactable).then_some(ErrorCode::Unreachable),
            reason: (!contactable).then(|| "no reply".into()),
            last_seen_ms: None,
            last_changed_ms: 0,
            updated_ms: 0,
            consecutive_failures: 0,
            provider: None,
            firmware: None,
            inventory_ms: None,
            worker: "w".into(),
            observed_ms: None,
            poll_interval_ms: None,
            stale_after_ms: None,
            health: None,
            power_watts: None,
            power_read_ms: None,
            clock_drift_ms: None,
            clock_read_ms: None,
            cert_not_after_ms: None,
        }
    }

    #[test]
    fn a_record_is_stale_past_its_limit_and_then_its_power_is_unknown() {
        let mut s = state(Some(PowerState::On), true);
        s.updated_ms = 1_000;
        assert_eq!(s.freshness(1_000_000), Freshness::Unknown, "not polled: nothing to judge by");
        assert_eq!(s.power_now(1_000_000), Some(PowerState::On));
        s.stale_after_ms = Some(10_000);
        assert_eq!(s.freshness(11_000), Freshness::Current);
        assert_eq!(s.freshness(11_001), Freshness::Stale);
        assert_eq!(s.power_now(11_001), Some(PowerState::Unknown), "never the last power as if current");
        // The partition's later word makes it current again, and says who saw it.
        s.merge_seen(&SeenAt { observed_ms: 9_000, last_seen_ms: Some(9_000), stale_after_ms: Some(10_000) }, "w2");
        assert_eq!((s.freshness(11_001), s.last_seen_ms, s.worker.as_str()), (Freshness::Current, Some(9_000), "w2"));
        // An older word changes nothing.
        s.merge_seen(&SeenAt { observed_ms: 5_000, last_seen_ms: Some(5_000), stale_after_ms: None }, "w3");
        assert_eq!((s.observed_at(), s.last_seen_ms, s.worker.as_str()), (9_000, Some(9_000), "w2"));
        let down = state(Some(PowerState::On), false);
        assert_eq!(down.power_now(0), Some(PowerState::Unknown), "not contactable: power unknown");
        let d = stale_after(
            std::time::Duration::from_secs(60),
            std::time::Duration::from_secs(10),
            std::time::Duration::from_secs(15),
            STALE_GRACE,
        );
        assert_eq!(d, std::time::Duration::from_secs(60 + 6 + 10 + 15 + 15));
    }

    #[test]
    fn events_follow_the_changes_only() {
        use MachineEventKind as K;
        use PowerState::{Off, On};
        let on = state(Some(On), true);
        assert_eq!(changes(None, &on), vec![K::PowerChanged { from: None, to: On }]);
        assert_eq!(changes(Some(&on), &on), vec![], "nothing changed, nothing said");
        assert_eq!(changes(Some(&on), &state(Some(Off), true)), vec![K::PowerChanged { from: Some(On), to: Off }]);
        let down = state(Some(On), false);
        assert_eq!(
            changes(Some(&on), &down),
            vec![K::Unreachable { code: ErrorCode::Unreachable, reason: "no reply".into() }]
        );
        assert_eq!(changes(Some(&down), &down), vec![], "one unreachable event per outage");
        assert_eq!(changes(Some(&down), &on), vec![K::Recovered], "recovered with the power it had");
        assert_eq!(
            changes(Some(&down), &state(Some(Off), true)),
            vec![K::Recovered, K::PowerChanged { from: Some(On), to: Off }]
        );
        assert_eq!(changes(None, &state(None, false)).len(), 1, "unreachable from the first poll");
    }

    #[test]
    fn health_changed_follows_the_verdicts_status_only() {
        use crate::health::HealthSummary;
        use crate::result::Health;
        let with = |status: Health, reasons: &[&str]| {
            let mut s = state(Some(PowerState::On), true);
            s.health = Some(HealthSummary {
                status,
                reasons: reasons.iter().map(|r| r.to_string()).collect(),
                unread: vec![],
                checked_ms: 1,
            });
            s
        };
        let on = state(Some(PowerState::On), true);
        let ok = with(Health::Ok, &[]);
        assert_eq!(
            changes(Some(&on), &ok),
            vec![MachineEventKind::HealthChanged { from: None, to: Health::Ok, reasons: vec![] }],
            "the first verdict"
        );
        let fan = with(Health::Critical, &["sensor Fan 1 critical"]);
        assert_eq!(
            changes(Some(&ok), &fan),
            vec![MachineEventKind::HealthChanged {
                from: Some(Health::Ok),
                to: Health::Critical,
                reasons: vec!["sensor Fan 1 critical".into()]
            }]
        );
        assert!(!ok.same_condition(&fan), "a changed verdict is written");
        let psu = with(Health::Critical, &["sensor PSU critical"]);
        assert_eq!(changes(Some(&fan), &psu), vec![], "other reasons, same status: no event");
        assert!(fan.same_condition(&psu));
        assert_eq!(changes(Some(&fan), &on), vec![], "no verdict this time: nothing said");
    }

    #[test]
    fn inventory_drift_names_each_changed_field() {
        use crate::result::Inventory;
        let a = Inventory {
            model: Some("R650".into()),
            firmware_version: Some("5.10".into()),
            extra: vec![("cpus".into(), "2".into())],
            ..Default::default()
        };
        assert!(inventory_drift(&a, &a).is_empty());
        let b = Inventory {
            firmware_version: Some("6.00".into()),
            extra: vec![("cpus".into(), "1".into()), ("psus".into(), "2".into())],
            power_state: Some(PowerState::On),
            ..a.clone()
        };
        let d = inventory_drift(&a, &b);
        let fields: Vec<&str> = d.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["firmware_version", "extra.cpus", "extra.psus"], "{d:?}");
        assert_eq!((d[0].from.as_deref(), d[0].to.as_deref()), (Some("5.10"), Some("6.00")));
    }

    #[test]
    fn the_wire_form_is_stable() {
        let e = MachineEvent {
            machine: "m".into(),
            at_ms: 1,
            event: MachineEventKind::PowerChanged { from: None, to: PowerState::On },
            state: state(Some(PowerState::On), true),
        };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["event"], serde_json::json!({"power_changed": {"to": "on"}}));
        assert_eq!(json["state"]["contactable"], true);
        assert_eq!(serde_json::from_value::<MachineEvent>(json).unwrap(), e);
    }
}
