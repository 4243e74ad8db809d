//! A secret string (BMC password, token) that never reaches logs.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A secret value. `Debug` and `Display` print `[redacted]`; the only way to
/// read it is [`Secret::expose`], which makes every use greppable.
///
/// It serialises as a plain string because a producer's request must carry
/// it (inline credentials, new BMC user passwords); the wire is not a log.
/// Inline credentials are sealed by the gateway before anything is stored.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Call only where the value is handed to a BMC.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_owned())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

/// For flags and environment variables holding a secret (clap parses through `FromStr`).
impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_owned()))
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_redfish_bodies_are_redacted_in_debug() {
        let a = crate::Action::Raw(crate::RawRequest::Redfish(crate::RawRedfish {
            method: crate::HttpMethod::Patch,
            path: "/redfish/v1/AccountService/Accounts/3".into(),
            body: Some(serde_json::json!({"UserName": "ops", "Password": "hunter2", "Oem": [{"AuthToken": "t0k"}]})),
        }));
        let d = format!("{a:?}");
        assert!(!d.contains("hunter2") && !d.contains("t0k"), "{d}");
        assert!(d.contains("ops"));
    }

    #[test]
    fn never_prints() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "[redacted]");
        assert_eq!(format!("{s}"), "[redacted]");
        assert_eq!(s.expose(), "hunter2");
    }
}
