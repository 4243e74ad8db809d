//! Hardware inventory (manufacturer, model, serial, firmware, power).

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, Inventory as InventoryData};

#[async_trait]
pub trait Inventory: Send {
    async fn inventory(&mut self, ctx: &Ctx) -> Result<InventoryData>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::Inventory)
}

pub(super) async fn perform(cap: &mut dyn Inventory, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    debug_assert!(handles(action));
    Ok(Some(ActionData::Inventory(Box::new(cap.inventory(ctx).await?))))
}
