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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineState {
    pub machine: String,
    pub tenant: String,
    /// Power as last read (`None`: never read successfully).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<PowerState>,
    /// Whether the BMC answered the last poll (or batch).
    pub contactable: bool,
    /// Why it is not contactable (the error code and message of the last
    /// failure, or the open circuit breaker); none while contactable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<ErrorCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Last successful contact (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_seen_ms: Option<u64>,
    /// When power or reachability last changed.
    pub last_changed_ms: u64,
    /// When the state was last written (a change or the heartbeat).
    pub updated_ms: u64,
    /// Failed polls in a row.
    #[serde(default)]
    pub consecutive_failures: u32,
    /// The provider that answered (`ipmi`, `redfish`, `amt`, `sim`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The worker that observed it.
    pub worker: String,
}

impl MachineState {
    /// What an event compares: power and reachability (and the failure's code).
    pub fn same_condition(&self, other: &MachineState) -> bool {
        self.power == other.power && self.contactable == other.contactable && self.error_code == other.error_code
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
}

impl MachineEventKind {
    /// The `Bmcfleet-Event` header value.
    pub fn name(&self) -> &'static str {
        match self {
            MachineEventKind::PowerChanged { .. } => "power_changed",
            MachineEventKind::Unreachable { .. } => "unreachable",
            MachineEventKind::Recovered => "recovered",
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
            worker: "w".into(),
        }
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
        assert_eq!(changes(Some(&on), &down), vec![K::Unreachable { code: ErrorCode::Unreachable, reason: "no reply".into() }]);
        assert_eq!(changes(Some(&down), &down), vec![], "one unreachable event per outage");
        assert_eq!(changes(Some(&down), &on), vec![K::Recovered], "recovered with the power it had");
        assert_eq!(changes(Some(&down), &state(Some(Off), true)), vec![K::Recovered, K::PowerChanged { from: Some(On), to: Off }]);
        assert_eq!(changes(None, &state(None, false)).len(), 1, "unreachable from the first poll");
    }

    #[test]
    fn the_wire_form_is_stable() {
        let e = MachineEvent { machine: "m".into(), at_ms: 1, event: MachineEventKind::PowerChanged { from: None, to: PowerState::On }, state: state(Some(PowerState::On), true) };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["event"], serde_json::json!({"power_changed": {"to": "on"}}));
        assert_eq!(json["state"]["contactable"], true);
        assert_eq!(serde_json::from_value::<MachineEvent>(json).unwrap(), e);
    }
}
