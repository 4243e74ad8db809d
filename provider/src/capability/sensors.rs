//! Sensor readings (temperatures, fans, voltages, power) with thresholds
//! and health.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, SensorReading};

#[async_trait]
pub trait Sensors: Send {
    async fn sensors(&mut self, ctx: &Ctx) -> Result<Vec<SensorReading>>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::Sensors)
}

pub(super) async fn perform(cap: &mut dyn Sensors, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    debug_assert!(handles(action));
    Ok(Some(ActionData::Sensors(cap.sensors(ctx).await?)))
}
