//! Power: Get Chassis Status and Chassis Control.

use crate::cmd;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, Power, Result};
use bmcfleet_schema::{PowerOp, PowerState};

#[async_trait]
impl<T: Transport> Power for IpmiSession<T> {
    /// Status: Get Chassis Status (chassis 0x01). Everything else: Chassis
    /// Control (chassis 0x02) with 0 off, 1 on, 2 cycle, 3 hard reset,
    /// 4 diagnostic interrupt (NMI), 5 soft off (ACPI).
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
        match cmd::chassis_control_code(op) {
            None => {
                let data = self.exec(ctx, &cmd::GET_CHASSIS_STATUS, vec![]).await?;
                let status = cmd::decode_chassis_status(&data)
                    .ok_or_else(|| protocol(cmd::GET_CHASSIS_STATUS.id, "empty response"))?;
                Ok(Some(if status.power_on {
                    PowerState::On
                } else {
                    PowerState::Off
                }))
            }
            Some(code) => {
                self.exec(ctx, &cmd::CHASSIS_CONTROL, vec![code]).await?;
                Ok(None)
            }
        }
    }
}
