//! The next boot device: set it, read it back.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, BootDeviceRequest};

#[async_trait]
pub trait BootControl: Send {
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<()>;
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::BootDevice(_) | Action::GetBootDevice)
}

pub(super) async fn perform(cap: &mut dyn BootControl, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::BootDevice(req) => cap.set_boot_device(ctx, req).await.map(|_| None),
        Action::GetBootDevice => Ok(Some(ActionData::BootDevice(cap.boot_device(ctx).await?))),
        _ => unreachable!("dispatched by `handles`"),
    }
}
