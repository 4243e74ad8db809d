//! Raw passthrough (IPMI request bytes, Redfish method + path + body).

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, RawRequest, RawResponse};

#[async_trait]
pub trait Raw: Send {
    /// Must refuse (with `InvalidField`/`Unsupported`) a request of another protocol.
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::Raw(_))
}

pub(super) async fn perform(cap: &mut dyn Raw, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::Raw(req) = action else { unreachable!("dispatched by `handles`") };
    Ok(Some(ActionData::Raw(cap.raw(ctx, req).await?)))
}
