//! Parameters of the system event log capability.

use serde::{Deserialize, Serialize};

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
        /// Which logs: the event log (default), or explicitly the BMC's
        /// other logs (diagnostic dumps, journals, POST codes, OEM logs).
        #[serde(default, skip_serializing_if = "LogSet::is_event")]
        logs: LogSet,
    },
    /// Erase every entry of the event log (never any other log).
    Clear,
}

/// The logs an `event_log` read covers. What a log is, is what the BMC
/// advertises about it (Redfish `LogEntryType`, `CollectDiagnosticData`,
/// its entries' `EntryType`/`DiagnosticDataType`/`OemRecordFormat`), never
/// its name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogSet {
    /// The system event log (IPMI SEL, Redfish SEL/event logs).
    #[default]
    Event,
    /// Every log except the event log.
    Other,
    /// Every log the BMC offers.
    All,
}

impl LogSet {
    /// True for the default (serialised only when another set is asked).
    pub fn is_event(&self) -> bool {
        *self == LogSet::Event
    }
}

impl EventLogOp {
    pub const DEFAULT_LIMIT: u32 = 100;
    pub const MAX_LIMIT: u32 = 1000;

    /// `read` with the defaults.
    pub fn read() -> Self {
        EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Event }
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
        #[serde(default)]
        logs: LogSet,
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
            EventLogOpWire::Tagged(EventLogOpTagged::Read { limit, offset, logs }) => {
                EventLogOp::Read { limit, offset, logs }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Action;

    #[test]
    fn event_log_ops_have_a_bare_and_a_tagged_spelling() {
        let parse = |j: &str| serde_json::from_str::<Action>(j).unwrap();
        assert_eq!(parse(r#"{"event_log": "read"}"#), Action::EventLog(EventLogOp::read()));
        assert_eq!(parse(r#"{"event_log": "clear"}"#), Action::EventLog(EventLogOp::Clear));
        assert_eq!(
            parse(r#"{"event_log": {"read": {"limit": 5, "offset": 2}}}"#),
            Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 2, logs: LogSet::Event })
        );
        assert_eq!(
            parse(r#"{"event_log": {"read": {"logs": "other"}}}"#),
            Action::EventLog(EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Other })
        );
        // The default set is not written: what older workers read stays as it was.
        assert_eq!(serde_json::to_string(&EventLogOp::read()).unwrap(), r#"{"read":{"offset":0}}"#);
        assert!(serde_json::from_str::<Action>(r#"{"event_log": {"read": {"logs": "journal"}}}"#).is_err());
        assert_eq!(parse(r#""sensors""#), Action::Sensors);
        assert!(serde_json::from_str::<Action>(r#"{"event_log": "erase"}"#).is_err());
        let a = Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 2, logs: LogSet::Event });
        assert_eq!(parse(&serde_json::to_string(&a).unwrap()), a);
        let bytes = rmp_serde::to_vec_named(&a).unwrap();
        assert_eq!(rmp_serde::from_slice::<Action>(&bytes).unwrap(), a);
        assert_eq!((a.kind(), Action::EventLog(EventLogOp::Clear).kind()), ("event_log_read", "event_log_clear"));
    }
}
