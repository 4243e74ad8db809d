//! BIOS settings: read (with the attribute registry where offered), set a
//! subset (pending until the system resets), reset to defaults.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, Bios as BiosData, BiosPending, BiosSet};

#[async_trait]
pub trait Bios: Send {
    async fn bios(&mut self, ctx: &Ctx) -> Result<BiosData>;
    /// Validates the attributes against the registry where there is one and
    /// writes them to the settings object.
    async fn set_bios(&mut self, ctx: &Ctx, set: &BiosSet) -> Result<BiosPending>;
    async fn reset_bios(&mut self, ctx: &Ctx) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::BiosGet | Action::BiosSet(_) | Action::BiosReset)
}

pub(super) async fn perform(cap: &mut dyn Bios, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::BiosGet => Ok(Some(ActionData::Bios(cap.bios(ctx).await?))),
        Action::BiosSet(set) => Ok(Some(ActionData::BiosPending(cap.set_bios(ctx, set).await?))),
        Action::BiosReset => cap.reset_bios(ctx).await.map(|_| None),
        _ => unreachable!("dispatched by `handles`"),
    }
}
