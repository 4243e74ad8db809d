//! Parameters of the power capability.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum PowerOp {
    On,
    /// Hard off.
    Off,
    /// ACPI / graceful shutdown.
    SoftOff,
    Cycle,
    /// Hard reset.
    Reset,
    Status,
    /// Diagnostic interrupt.
    Nmi,
}

/// A power change with per-action verification settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PowerSettle {
    /// `on`, `off`, `soft_off`, `cycle` or `reset`.
    pub op: PowerOp,
    /// How long the machine may take to report the state the action leads
    /// to (overrides the worker's `--power-settle-timeout`); then `not_reached`.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::duration::option")]
    pub settle: Option<std::time::Duration>,
    /// `soft_off` only: still on after this long, the machine is switched
    /// off hard (and the result is the hard off's).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "crate::duration::option")]
    pub escalate_after: Option<std::time::Duration>,
}

/// The longest settle timeout an action may ask for.
pub const MAX_POWER_SETTLE: std::time::Duration = std::time::Duration::from_secs(3600);

impl PowerSettle {
    /// Checks what the gateway accepts.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.op, PowerOp::Status | PowerOp::Nmi) {
            return Err(
                format!("power_settle.op: {:?} changes no power state to wait for (use power)", self.op).to_lowercase()
            );
        }
        for (name, d) in [("settle", self.settle), ("escalate_after", self.escalate_after)] {
            if let Some(d) = d {
                if d.is_zero() || d > MAX_POWER_SETTLE {
                    return Err(format!(
                        "power_settle.{name}: more than 0s and at most {}",
                        crate::duration::format(MAX_POWER_SETTLE)
                    ));
                }
            }
        }
        if self.escalate_after.is_some() && self.op != PowerOp::SoftOff {
            return Err("power_settle.escalate_after: only with op soft_off".into());
        }
        Ok(())
    }
}
