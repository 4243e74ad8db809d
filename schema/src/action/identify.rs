//! Parameters and result of the identify light capability (the chassis
//! light that finds a machine in the row).

use serde::{Deserialize, Serialize};

/// What the identify light is asked to do, or what it is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum IdentifyLight {
    /// On until turned off (IPMI: Chassis Identify *force on*; Redfish:
    /// `LocationIndicatorActive` true, or `IndicatorLED` `Lit`).
    On,
    Off,
    /// Blinking (Redfish `IndicatorLED` `Blinking`; IPMI's identify is the
    /// BMC's own pattern, so on an IPMI BMC `blink` and `on` ask the same).
    Blink,
}

/// Turn the identify light on, off or blinking:
/// `{"identify": {"light": "on"}}`, `{"identify": {"light": "blink",
/// "seconds": 30}}` (on for 30 s, then off by itself).
#[serde_with::skip_serializing_none]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentifySet {
    pub light: IdentifyLight,
    /// On or blinking for this long, then off by the BMC itself (1 to
    /// [`IdentifySet::MAX_SECONDS`]); absent: until turned off. Not with
    /// `off`. Only IPMI has a timed identify (Chassis Identify's interval):
    /// a Redfish BMC answers `unsupported`.
    pub seconds: Option<u16>,
}

impl IdentifySet {
    /// The longest timed identify (IPMI's interval is one byte).
    pub const MAX_SECONDS: u16 = 255;

    /// Why the request is malformed, if it is.
    pub fn validate(&self) -> Result<(), String> {
        match (self.light, self.seconds) {
            (IdentifyLight::Off, Some(_)) => Err("identify: `seconds` goes with `on` or `blink`, not `off`".into()),
            (_, Some(s)) if s == 0 || s > Self::MAX_SECONDS => {
                Err(format!("identify: `seconds` must be 1 to {} (got {s})", Self::MAX_SECONDS))
            }
            _ => Ok(()),
        }
    }
}

/// The identify light as the BMC reports it.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentifyState {
    /// Absent when the BMC does not say (an IPMI BMC whose Get Chassis
    /// Status does not report identify state: the command was accepted,
    /// its effect could not be read back, see `note`).
    pub light: Option<IdentifyLight>,
    /// IPMI: the light is on for an interval and turns itself off.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed: bool,
    /// Where the state was read: `chassis_status` (IPMI),
    /// `LocationIndicatorActive` or `IndicatorLED` (Redfish).
    pub source: String,
    /// Why the state is not known or not verified.
    pub note: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_go_with_on_or_blink_within_one_byte() {
        let set = |light, seconds| IdentifySet { light, seconds };
        assert!(set(IdentifyLight::On, None).validate().is_ok());
        assert!(set(IdentifyLight::Blink, Some(255)).validate().is_ok());
        assert!(set(IdentifyLight::Off, Some(5)).validate().unwrap_err().contains("not `off`"));
        assert!(set(IdentifyLight::On, Some(0)).validate().is_err());
        assert!(set(IdentifyLight::On, Some(256)).validate().is_err());
        let batch = r#"{"machine": "m", "actions": [{"identify": {"light": "off", "seconds": 5}}]}"#;
        let parsed: crate::Batch = serde_json::from_str(batch).unwrap();
        let e = crate::validate::validate(&parsed, &Default::default()).unwrap_err();
        assert!(e.message.contains("not `off`"), "{}", e.message);
    }
}
