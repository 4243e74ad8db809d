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
}
