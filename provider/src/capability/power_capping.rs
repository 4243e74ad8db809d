//! Power capping: the machine's power reading, and its power limit (read,
//! set and/or activate, verified by read-back).

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, PowerLimit, PowerLimitSet, PowerReading};

#[async_trait]
pub trait PowerCapping: Send {
    async fn power_reading(&mut self, ctx: &Ctx) -> Result<PowerReading>;
    async fn power_limit(&mut self, ctx: &Ctx) -> Result<PowerLimit>;
    /// Apply `set` and answer the limit read back afterwards; an error when
    /// it does not read back as asked.
    async fn set_power_limit(&mut self, ctx: &Ctx, set: &PowerLimitSet) -> Result<PowerLimit>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::PowerReading | Action::PowerLimitGet | Action::PowerLimitSet(_))
}

pub(super) async fn perform(cap: &mut dyn PowerCapping, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::PowerReading => Ok(Some(ActionData::PowerReading(cap.power_reading(ctx).await?))),
        Action::PowerLimitGet => Ok(Some(ActionData::PowerLimit(cap.power_limit(ctx).await?))),
        Action::PowerLimitSet(set) => Ok(Some(ActionData::PowerLimit(cap.set_power_limit(ctx, set).await?))),
        _ => unreachable!("dispatched by `handles`"),
    }
}
