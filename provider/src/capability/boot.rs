//! The next boot device: set it, read it back.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, BootDeviceRequest};

/// When a boot device that was set takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applies {
    /// The override is in place now (it acts at the next boot).
    Now,
    /// It is stored in a settings object (Redfish `@Redfish.Settings`) and
    /// becomes the override when the system next resets.
    OnReset,
}

#[async_trait]
pub trait BootControl: Send {
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<Applies>;
    /// The override in place now.
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest>;

    /// What the next boot will use: a change waiting in a settings object
    /// (`Applies::OnReset`) when there is one, else the override in place.
    /// `boot get` answers this.
    async fn next_boot(&mut self, ctx: &Ctx) -> Result<(BootDeviceRequest, Applies)> {
        Ok((self.boot_device(ctx).await?, Applies::Now))
    }
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::BootDevice(_) | Action::GetBootDevice)
}

pub(super) async fn perform(cap: &mut dyn BootControl, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::BootDevice(req) => match cap.set_boot_device(ctx, req).await? {
            Applies::Now => Ok(None),
            Applies::OnReset => Ok(Some(ActionData::BootDevicePending(req.clone()))),
        },
        Action::GetBootDevice => match cap.next_boot(ctx).await? {
            (req, Applies::Now) => Ok(Some(ActionData::BootDevice(req))),
            (req, Applies::OnReset) => Ok(Some(ActionData::BootDevicePending(req))),
        },
        _ => unreachable!("dispatched by `handles`"),
    }
}
