//! Sensor readings (temperatures, fans, voltages, power) with thresholds
//! and health; and the BMC's own rollup of its resources' health, where it
//! keeps one (read by the fleet-state health check, `bmcfleet_schema::health`).

use crate::{Ctx, ProviderError, Result};
use async_trait::async_trait;
use bmcfleet_schema::health::ResourceHealth;
use bmcfleet_schema::{Action, ActionData, ErrorCode, SensorReading};

#[async_trait]
pub trait Sensors: Send {
    async fn sensors(&mut self, ctx: &Ctx) -> Result<Vec<SensorReading>>;

    /// The BMC's own health rollup of the machine (Redfish: each system's
    /// and chassis's `Status.Health` and `Status.HealthRollup`). A BMC that
    /// keeps none (IPMI: its sensors' states and the SEL are its whole
    /// word) answers `unsupported`, nothing sent.
    async fn health_rollup(&mut self, _ctx: &Ctx) -> Result<Vec<ResourceHealth>> {
        Err(ProviderError::new(
            ErrorCode::Unsupported,
            "this BMC keeps no health rollup (its sensors and event log are its word)",
        ))
    }
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::Sensors)
}

pub(super) async fn perform(cap: &mut dyn Sensors, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    debug_assert!(handles(action));
    Ok(Some(ActionData::Sensors(cap.sensors(ctx).await?)))
}
