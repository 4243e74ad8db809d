//! Parameters of the system event log capability.

use serde::{Deserialize, Serialize};

/// What to do with the system event log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", from = "EventLogOpWire", into = "EventLogOpOut")]
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
        /// The logs named by the BMC's own id (Redfish: a LogService's `Id`
        /// or its path; IPMI: `sel`), instead of `logs`: exactly those are
        /// read, whatever they hold. Empty: `logs` decides.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        log_ids: Vec<String>,
    },
    /// Erase every entry of the event log (never any other log), or of the
    /// logs named in `log_ids` (never a diagnostic data service: dumps,
    /// crash data).
    Clear {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        log_ids: Vec<String>,
    },
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

    /// The most logs one action names.
    pub const MAX_LOG_IDS: usize = 16;
    /// The longest log name (a Redfish path included).
    pub const MAX_LOG_ID_LEN: usize = 256;

    /// `read` with the defaults.
    pub fn read() -> Self {
        EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Event, log_ids: Vec::new() }
    }

    /// `clear` of the event log.
    pub fn clear() -> Self {
        EventLogOp::Clear { log_ids: Vec::new() }
    }

    /// `clear` of the logs of these names.
    pub fn clear_logs<S: Into<String>>(ids: impl IntoIterator<Item = S>) -> Self {
        EventLogOp::Clear { log_ids: ids.into_iter().map(Into::into).collect() }
    }

    /// The logs this operation names (empty: the event log, or `logs`).
    pub fn log_ids(&self) -> &[String] {
        match self {
            EventLogOp::Read { log_ids, .. } | EventLogOp::Clear { log_ids } => log_ids,
        }
    }

    /// Why the named logs cannot be asked for, if they cannot: at most
    /// [`Self::MAX_LOG_IDS`], each 1 to [`Self::MAX_LOG_ID_LEN`] bytes of
    /// printable text, no name twice; a read names logs or a `logs` set,
    /// not both.
    pub fn check_log_ids(&self) -> Result<(), String> {
        let ids = self.log_ids();
        if ids.len() > Self::MAX_LOG_IDS {
            return Err(format!("at most {} log_ids", Self::MAX_LOG_IDS));
        }
        for (n, id) in ids.iter().enumerate() {
            if id.is_empty() || id.len() > Self::MAX_LOG_ID_LEN || id.chars().any(char::is_control) {
                return Err(format!("log_ids[{n}] must be 1 to {} bytes of printable text", Self::MAX_LOG_ID_LEN));
            }
            if ids[..n].contains(id) {
                return Err(format!("log_ids[{n}] names `{id}` twice"));
            }
        }
        if let EventLogOp::Read { logs, log_ids, .. } = self {
            if !log_ids.is_empty() && !logs.is_event() {
                return Err("name logs (log_ids) or choose a set (logs), not both".into());
            }
        }
        Ok(())
    }
}

/// What is written: a clear without names stays the bare `"clear"` (what
/// every worker reads); names are written only when given.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum EventLogOpOut {
    Read {
        #[serde(skip_serializing_if = "Option::is_none")]
        limit: Option<u32>,
        offset: u32,
        #[serde(skip_serializing_if = "LogSet::is_event")]
        logs: LogSet,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        log_ids: Vec<String>,
    },
    Clear,
    #[serde(rename = "clear")]
    ClearNamed {
        log_ids: Vec<String>,
    },
}

impl From<EventLogOp> for EventLogOpOut {
    fn from(op: EventLogOp) -> Self {
        match op {
            EventLogOp::Read { limit, offset, logs, log_ids } => EventLogOpOut::Read { limit, offset, logs, log_ids },
            EventLogOp::Clear { log_ids } if log_ids.is_empty() => EventLogOpOut::Clear,
            EventLogOp::Clear { log_ids } => EventLogOpOut::ClearNamed { log_ids },
        }
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
        #[serde(default)]
        log_ids: Vec<String>,
    },
    Clear(Option<ClearParams>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClearParams {
    #[serde(default)]
    log_ids: Vec<String>,
}

impl From<EventLogOpWire> for EventLogOp {
    fn from(w: EventLogOpWire) -> Self {
        match w {
            EventLogOpWire::Name(EventLogOpName::Read) => EventLogOp::read(),
            EventLogOpWire::Name(EventLogOpName::Clear) => EventLogOp::clear(),
            EventLogOpWire::Tagged(EventLogOpTagged::Clear(p)) => {
                EventLogOp::Clear { log_ids: p.map(|p| p.log_ids).unwrap_or_default() }
            }
            EventLogOpWire::Tagged(EventLogOpTagged::Read { limit, offset, logs, log_ids }) => {
                EventLogOp::Read { limit, offset, logs, log_ids }
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
        assert_eq!(parse(r#"{"event_log": "clear"}"#), Action::EventLog(EventLogOp::clear()));
        assert_eq!(
            parse(r#"{"event_log": {"read": {"limit": 5, "offset": 2}}}"#),
            Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 2, logs: LogSet::Event, log_ids: vec![] })
        );
        assert_eq!(
            parse(r#"{"event_log": {"read": {"logs": "other"}}}"#),
            Action::EventLog(EventLogOp::Read { limit: None, offset: 0, logs: LogSet::Other, log_ids: vec![] })
        );
        // The default set is not written: what older workers read stays as it was.
        assert_eq!(serde_json::to_string(&EventLogOp::read()).unwrap(), r#"{"read":{"offset":0}}"#);
        assert!(serde_json::from_str::<Action>(r#"{"event_log": {"read": {"logs": "journal"}}}"#).is_err());
        assert_eq!(parse(r#""sensors""#), Action::Sensors);
        assert!(serde_json::from_str::<Action>(r#"{"event_log": "erase"}"#).is_err());
        let a = Action::EventLog(EventLogOp::Read { limit: Some(5), offset: 2, logs: LogSet::Event, log_ids: vec![] });
        assert_eq!(parse(&serde_json::to_string(&a).unwrap()), a);
        let bytes = rmp_serde::to_vec_named(&a).unwrap();
        assert_eq!(rmp_serde::from_slice::<Action>(&bytes).unwrap(), a);
        assert_eq!((a.kind(), Action::EventLog(EventLogOp::clear()).kind()), ("event_log_read", "event_log_clear"));
    }

    #[test]
    fn logs_are_named_by_their_ids_and_an_unnamed_clear_is_written_as_before() {
        let parse = |j: &str| serde_json::from_str::<Action>(j);
        let named = Action::EventLog(EventLogOp::clear_logs(["EventLog"]));
        assert_eq!(parse(r#"{"event_log": {"clear": {"log_ids": ["EventLog"]}}}"#).unwrap(), named);
        assert_eq!(parse(r#"{"event_log": {"clear": null}}"#).unwrap(), Action::EventLog(EventLogOp::clear()));
        assert_eq!(parse(r#"{"event_log": {"clear": {}}}"#).unwrap(), Action::EventLog(EventLogOp::clear()));
        assert!(parse(r#"{"event_log": {"clear": {"log": ["EventLog"]}}}"#).is_err(), "a misspelt field");
        // A clear without names is the bare name every worker reads; with
        // names it is the tagged form (a worker without names refuses it
        // rather than clearing its default log).
        assert_eq!(serde_json::to_string(&EventLogOp::clear()).unwrap(), r#""clear""#);
        assert_eq!(
            serde_json::to_string(&EventLogOp::clear_logs(["EventLog"])).unwrap(),
            r#"{"clear":{"log_ids":["EventLog"]}}"#
        );
        for a in [named, Action::EventLog(EventLogOp::clear())] {
            let bytes = rmp_serde::to_vec_named(&a).unwrap();
            assert_eq!(rmp_serde::from_slice::<Action>(&bytes).unwrap(), a);
            assert_eq!(parse(&serde_json::to_string(&a).unwrap()).unwrap(), a);
            assert!(a.is_destructive());
        }
        let read = parse(r#"{"event_log": {"read": {"log_ids": ["PostCodes", "sel"]}}}"#).unwrap();
        let Action::EventLog(op) = &read else { panic!() };
        assert_eq!(op.log_ids(), ["PostCodes", "sel"]);
        assert_eq!(op.check_log_ids(), Ok(()));
        let bytes = rmp_serde::to_vec_named(&read).unwrap();
        assert_eq!(rmp_serde::from_slice::<Action>(&bytes).unwrap(), read);

        let bad = |op: EventLogOp| op.check_log_ids().unwrap_err();
        assert!(bad(EventLogOp::clear_logs([""])).contains("log_ids[0]"));
        assert!(bad(EventLogOp::clear_logs(["a\nb"])).contains("printable"));
        assert!(bad(EventLogOp::clear_logs(["a", "b", "a"])).contains("twice"));
        assert!(bad(EventLogOp::clear_logs((0..17).map(|i| i.to_string()))).contains("at most 16"));
        let both = EventLogOp::Read { limit: None, offset: 0, logs: LogSet::All, log_ids: vec!["EventLog".into()] };
        assert!(bad(both).contains("not both"));
    }
}
