//! Resetting the BMC itself (warm or cold).

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, BmcResetKind};

#[async_trait]
pub trait BmcReset: Send {
    async fn reset_bmc(&mut self, ctx: &Ctx, kind: BmcResetKind) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::BmcReset(_))
}

pub(super) async fn perform(cap: &mut dyn BmcReset, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::BmcReset(kind) = action else { unreachable!("dispatched by `handles`") };
    cap.reset_bmc(ctx, *kind).await.map(|_| None)
}
