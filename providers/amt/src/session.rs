//! [`AmtSession`]: one authenticated WS-Man conversation with one AMT.
//!
//! The session keeps the HTTP connection pool and the Digest nonce, so a
//! lane's later actions skip the 401 round trip. It implements
//! [`Power`], [`BootControl`] and [`Inventory`].

use crate::wsman::client::WsmanClient;
use crate::{boot, inventory, power};
use async_trait::async_trait;
use bmcfleet_provider::{Applies, BmcSession, BootControl, Ctx, Inventory, Power, Result};
use bmcfleet_schema::{BootDeviceRequest, Inventory as InventoryData, PowerOp, PowerState};

pub struct AmtSession {
    pub(crate) client: WsmanClient,
}

impl AmtSession {
    pub(crate) fn new(client: WsmanClient) -> Self {
        AmtSession { client }
    }
}

#[async_trait]
impl BmcSession for AmtSession {
    fn provider(&self) -> &'static str {
        "amt"
    }

    fn is_healthy(&self) -> bool {
        self.client.is_healthy()
    }

    /// WS-Man over HTTP has no session to log out of; dropping the
    /// connection pool is all there is.
    async fn close(&mut self) {}
}

#[async_trait]
impl Power for AmtSession {
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
        Ok(power::power(&mut self.client, ctx, op).await?)
    }
}

#[async_trait]
impl BootControl for AmtSession {
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<Applies> {
        boot::set(&mut self.client, ctx, req).await?;
        Ok(Applies::Now)
    }

    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest> {
        Ok(boot::get(&mut self.client, ctx).await?)
    }
}

#[async_trait]
impl Inventory for AmtSession {
    async fn inventory(&mut self, ctx: &Ctx) -> Result<InventoryData> {
        Ok(inventory::inventory(&mut self.client, ctx).await?)
    }
}
