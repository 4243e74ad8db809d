//! Parameters and results of the power capping capability: the machine's
//! power reading, and its power limit (read, set, activate).

use serde::{Deserialize, Serialize};

/// Set and/or activate the power limit:
/// `{"power_limit_set": {"watts": 450, "active": true}}`. At least one of
/// the two. The change is read back; a limit outside what the BMC allows
/// (Redfish `AllowableMin`/`AllowableMax`, `PowerCapacityWatts`; IPMI: the
/// BMC's "out of range" answer) is refused.
#[serde_with::skip_serializing_none]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerLimitSet {
    /// The limit in watts (1 to 65535: DCMI's limit is two bytes).
    pub watts: Option<u32>,
    /// Enforce the limit (`true`) or stop enforcing it (`false`).
    pub active: Option<bool>,
}

impl PowerLimitSet {
    pub const MAX_WATTS: u32 = 65535;

    /// Why the request is malformed, if it is.
    pub fn validate(&self) -> Result<(), String> {
        match (self.watts, self.active) {
            (None, None) => Err("power_limit_set: give `watts`, `active` or both".into()),
            (Some(w), _) if w == 0 || w > Self::MAX_WATTS => {
                Err(format!("power_limit_set: `watts` must be 1 to {} (got {w})", Self::MAX_WATTS))
            }
            _ => Ok(()),
        }
    }
}

/// The machine's power draw as the BMC measures it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PowerReading {
    /// The current draw in watts.
    pub watts: f64,
    /// Lowest, highest and average draw over `interval_ms`, where the BMC says.
    pub min_watts: Option<f64>,
    pub max_watts: Option<f64>,
    pub average_watts: Option<f64>,
    /// The period the statistics cover (IPMI DCMI: the statistics reporting
    /// period; Redfish: `PowerMetrics.IntervalInMin`).
    pub interval_ms: Option<u64>,
    /// Where the reading came from: `dcmi` (IPMI DCMI Get Power Reading),
    /// `EnvironmentMetrics` or `PowerControl` (Redfish), `sim`.
    pub source: String,
}

/// The power limit as the BMC reports it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PowerLimit {
    /// The limit in watts; absent when none is set.
    pub watts: Option<u32>,
    /// Whether the BMC enforces it, where it says.
    pub active: Option<bool>,
    /// The range the BMC allows, where it advertises one.
    pub allowed_min: Option<u32>,
    pub allowed_max: Option<u32>,
    /// IPMI DCMI: how long the draw may exceed the limit before the
    /// exception action (milliseconds); Redfish `CorrectionInMs`.
    pub correction_ms: Option<u32>,
    /// What the BMC does when the limit cannot be held: `none`,
    /// `power_off` (IPMI: hard power off and log), `log` (log only), or the
    /// Redfish `LimitException` as the BMC spells it.
    pub exception: Option<String>,
    /// `dcmi`, `EnvironmentMetrics` or `PowerControl`, `sim`.
    pub source: String,
}
