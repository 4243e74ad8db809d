//! Durations on the wire are human strings (`"30s"`, `"5m"`), parsed by
//! `humantime`; a bare number without a unit is rejected.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// Why a duration was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    Empty,
    /// A bare number: the unit is not guessed.
    NoUnit,
    /// Not a duration (the source is `humantime`'s error).
    Invalid,
}

impl crate::error::Coded for ErrorKind {
    fn code(self) -> crate::ErrorCode {
        crate::ErrorCode::InvalidField
    }
}

pub type Error = crate::error::Error<ErrorKind>;

/// Parse a duration that must carry a unit (`15s`, `250ms`, `5m`).
pub fn parse(s: &str) -> Result<Duration, Error> {
    let t = s.trim();
    if t.is_empty() {
        return Err(Error::new(ErrorKind::Empty, "empty duration"));
    }
    if t.chars().all(|c| c.is_ascii_digit()) {
        return Err(Error::new(
            ErrorKind::NoUnit,
            format!("duration `{t}` has no unit (write e.g. `{t}s` or `{t}ms`)"),
        ));
    }
    humantime::parse_duration(t)
        .map_err(|e| Error::with_source(ErrorKind::Invalid, format!("invalid duration `{t}`"), e))
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
        assert_eq!(parse("15").unwrap_err().kind(), ErrorKind::NoUnit);
        assert_eq!(parse(" ").unwrap_err().kind(), ErrorKind::Empty);
        assert_eq!(parse("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        let e = parse("soon").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid);
        assert!(e.to_string().starts_with("invalid duration `soon`: "), "{e}");
        assert!(std::error::Error::source(&e).is_some(), "humantime's error is kept");
    }
}
