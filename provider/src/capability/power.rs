//! Power control and power state.

use crate::{Ctx, ProviderError, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, ErrorCode, PowerOp, PowerState};

#[async_trait]
pub trait Power: Send {
    /// Performs `op`; returns the power state for [`PowerOp::Status`] (and
    /// may return it for other ops when the BMC reports it for free).
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::Power(_))
}

pub(super) async fn perform(cap: &mut dyn Power, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::Power(op) = action else { unreachable!("dispatched by `handles`") };
    Ok(match (op, cap.power(ctx, *op).await?) {
        (_, Some(s)) => Some(ActionData::PowerState(s)),
        (PowerOp::Status, None) => return Err(ProviderError::new(ErrorCode::ProtocolError, "the BMC returned no power state")),
        _ => None,
    })
}
