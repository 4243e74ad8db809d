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
