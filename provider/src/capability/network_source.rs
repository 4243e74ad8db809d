//! The BMC's own network source (DHCP or a static address).

use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, NetworkSourceOp, StaticIpv4};

#[async_trait]
pub trait NetworkSource: Send {
    /// Returns `Dhcp` or `Static(..)` with the current address.
    async fn network_source(&mut self, ctx: &Ctx) -> Result<NetworkSourceOp>;
    async fn set_dhcp(&mut self, ctx: &Ctx) -> Result<()>;
    async fn set_static(&mut self, ctx: &Ctx, addr: &StaticIpv4) -> Result<()>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::NetworkSource(_))
}

pub(super) async fn perform(cap: &mut dyn NetworkSource, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::NetworkSource(op) = action else { unreachable!("dispatched by `handles`") };
    match op {
        NetworkSourceOp::Get => Ok(Some(ActionData::NetworkSource(cap.network_source(ctx).await?))),
        NetworkSourceOp::Dhcp => cap.set_dhcp(ctx).await.map(|_| None),
        NetworkSourceOp::Static(s) => cap.set_static(ctx, s).await.map(|_| None),
    }
}
