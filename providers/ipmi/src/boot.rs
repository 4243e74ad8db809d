//! Boot device: Set / Get System Boot Options, parameters 3 and 5.
//!
//! Setting the next boot device, as Ironic does: first parameter 3 turns
//! off the 60-second timeout after which a BMC clears the boot flags when no
//! Chassis Control command followed (a BMC without the parameter answers
//! with a completion code and the set goes on), then parameter 5 writes the
//! flags, then they are read back: the device must be the one set, and
//! where the BMC reports them valid, persistence and mode too.

use crate::cmd;
use crate::session::IpmiSession;
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Applies, BootControl, Ctx, Result};
use bmcfleet_schema::BootDeviceRequest;

#[async_trait]
impl<T: Transport> BootControl for IpmiSession<T> {
    /// Set System Boot Options (chassis 0x08) parameters 3 and 5, then Get
    /// System Boot Options (chassis 0x09) parameter 5 to verify.
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<Applies> {
        // Nothing is sent for a device IPMI cannot express.
        let flags = cmd::encode_boot_flags(req)?;
        let timer = self.send(ctx, &cmd::SET_BOOT_OPTIONS, cmd::encode_keep_boot_flags_valid()).await?;
        if timer.cc != 0 {
            tracing::debug!(
                bmc = %self.bmc, cc = timer.cc,
                "The BMC does not take boot option parameter 3 (boot-flag valid bit clearing); its 60-second boot-flag timeout stays on."
            );
        }
        self.exec(ctx, &cmd::SET_BOOT_OPTIONS, flags).await?;
        let data = self.exec(ctx, &cmd::GET_BOOT_OPTIONS, cmd::get_boot_flags_request()).await?;
        if cmd::check_boot_read_back(req, &data)? == cmd::BootReadBack::SelectorOnly {
            // Known of ipmi_sim: logged once per machine by the worker, not per action.
            ctx.quirk(
                "ipmi_boot_flags_reported_invalid",
                "The BMC reads back the boot device that was set but reports the boot flags invalid (it keeps only the device, as ipmi_sim does); persistence and mode cannot be verified.",
            );
        }
        Ok(Applies::Now)
    }

    /// Get System Boot Options (chassis 0x09), parameter 5.
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest> {
        let data = self.exec(ctx, &cmd::GET_BOOT_OPTIONS, cmd::get_boot_flags_request()).await?;
        cmd::decode_boot_flags(&data)
    }
}
