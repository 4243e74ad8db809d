//! The identify light: read it; turn it on, off or blinking (for a time
//! where the protocol has one), verified by read-back where the BMC reports it.

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, IdentifySet, IdentifyState};

#[async_trait]
pub trait Identify: Send {
    async fn identify(&mut self, ctx: &Ctx) -> Result<IdentifyState>;
    /// Apply `set` and answer the state read back afterwards (with a
    /// `note` and no `light` where the BMC cannot report it).
    async fn set_identify(&mut self, ctx: &Ctx, set: &IdentifySet) -> Result<IdentifyState>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::IdentifyGet | Action::Identify(_))
}

pub(super) async fn perform(cap: &mut dyn Identify, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::IdentifyGet => Ok(Some(ActionData::Identify(cap.identify(ctx).await?))),
        Action::Identify(set) => Ok(Some(ActionData::Identify(cap.set_identify(ctx, set).await?))),
        _ => unreachable!("dispatched by `handles`"),
    }
}
