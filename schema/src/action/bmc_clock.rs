//! The result of the BMC clock capability: the BMC's time and its drift
//! against the worker's clock.

use serde::{Deserialize, Serialize};

/// The BMC's clock as read, and how far it is from the worker's.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BmcClock {
    /// The BMC's time, RFC 3339 (UTC for IPMI, which keeps no zone).
    pub time: String,
    /// BMC time minus worker time in milliseconds, the worker's time taken
    /// halfway through the read (IPMI's clock has one-second resolution).
    pub drift_ms: i64,
    /// Redfish `DateTimeLocalOffset` (`+01:00`), where the BMC says.
    pub utc_offset: Option<String>,
    /// `sel_time` (IPMI Get SEL Time), `DateTime` (Redfish Manager), `sim`.
    pub source: String,
}

/// Set the BMC's NTP servers (and/or whether it uses NTP), read back:
/// `{"ntp_set": {"servers": ["ntp1.example", "10.0.0.1"], "enabled": true}}`.
/// Redfish `Managers/<id>/NetworkProtocol` `NTP`, only where the BMC
/// advertises it; IPMI has no NTP (it can only set the clock: `bmc_clock_sync`).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NtpSet {
    /// The servers, in order (replacing the BMC's list); absent: unchanged.
    pub servers: Option<Vec<String>>,
    /// Whether the BMC keeps its clock by NTP (`NTP.ProtocolEnabled`).
    pub enabled: Option<bool>,
}

impl NtpSet {
    /// Most servers accepted (BMCs keep a handful).
    pub const MAX_SERVERS: usize = 8;
    /// Longest server name (a DNS name).
    pub const MAX_SERVER_LEN: usize = 253;

    /// Why the request is malformed, if it is.
    pub fn validate(&self) -> Result<(), String> {
        if self.servers.is_none() && self.enabled.is_none() {
            return Err("ntp_set: give `servers`, `enabled` or both".into());
        }
        let servers = self.servers.as_deref().unwrap_or_default();
        if servers.len() > Self::MAX_SERVERS {
            return Err(format!("ntp_set: at most {} servers", Self::MAX_SERVERS));
        }
        for s in servers {
            let ok = !s.is_empty()
                && s.len() <= Self::MAX_SERVER_LEN
                && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']' | '_'));
            if !ok {
                return Err(format!(
                    "ntp_set: server {:?} is not a host name or address (1 to {} of letters, digits, `.-:_[]`)",
                    s.chars().take(64).collect::<String>(),
                    Self::MAX_SERVER_LEN
                ));
            }
        }
        Ok(())
    }
}

/// The BMC's NTP settings as read.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NtpSettings {
    /// The configured servers, in the BMC's order (empty entries dropped).
    pub servers: Vec<String>,
    /// `NTP.ProtocolEnabled`, where the BMC says.
    pub enabled: Option<bool>,
    /// `NetworkProtocol` (Redfish), `sim`.
    pub source: String,
}
