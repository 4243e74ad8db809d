//! Durations on the wire are human strings (`"30s"`, `"5m"`), parsed by
//! `humantime`; a bare number without a unit is rejected.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Parse a duration that must carry a unit (`15s`, `250ms`, `5m`).
pub fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if t.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("duration `{t}` has no unit (write e.g. `{t}s` or `{t}ms`)"));
    }
    humantime::parse_duration(t).map_err(|e| format!("invalid duration `{t}`: {e}"))
}

pub fn format(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

pub mod option {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&super::format(*d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let v: Option<String> = Option::deserialize(d)?;
        v.map(|s| super::parse(&s).map_err(serde::de::Error::custom)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requires_unit() {
        assert!(parse("15").is_err());
        assert_eq!(parse("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse("soon").is_err());
    }
}
