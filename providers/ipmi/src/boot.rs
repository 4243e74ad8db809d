//! Boot device: Set / Get System Boot Options, parameter 5.

use crate::cmd;
use crate::session::IpmiSession;
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{BootControl, Ctx, Result};
use bmcfleet_schema::BootDeviceRequest;

#[async_trait]
impl<T: Transport> BootControl for IpmiSession<T> {
    /// Set System Boot Options (chassis 0x08), parameter 5 (boot flags).
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<()> {
        self.exec(ctx, &cmd::SET_BOOT_OPTIONS, cmd::encode_boot_flags(req))
            .await?;
        Ok(())
    }

    /// Get System Boot Options (chassis 0x09), parameter 5.
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest> {
        let data = self
            .exec(ctx, &cmd::GET_BOOT_OPTIONS, cmd::get_boot_flags_request())
            .await?;
        cmd::decode_boot_flags(&data)
    }
}
