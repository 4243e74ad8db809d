//! Power: Get Chassis Status and Chassis Control, with verified effects.
//!
//! A power action succeeds when the chassis reports the state it leads to,
//! not when the BMC accepts the command: after Chassis Control the session
//! reads Get Chassis Status until it reads that state (on: On; off and soft
//! off: Off; cycle and hard reset: On again), for at most the configured
//! verification time and never past the action's deadline. Diagnostic
//! interrupt (NMI) changes no power state and is not verified. The off half
//! of a power cycle is too short to observe reliably by polling, so a cycle
//! is verified by the chassis being on afterwards.

use crate::cmd;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, Power, ProviderError, Result};
use bmcfleet_schema::{ErrorCode, PowerOp, PowerState};
use tokio::time::Instant;

/// The state a power action leads to, if it leads to one.
pub(crate) fn expected_state(op: PowerOp) -> Option<PowerState> {
    match op {
        PowerOp::On | PowerOp::Cycle | PowerOp::Reset => Some(PowerState::On),
        PowerOp::Off | PowerOp::SoftOff => Some(PowerState::Off),
        PowerOp::Nmi | PowerOp::Status => None,
    }
}

impl<T: Transport> IpmiSession<T> {
    async fn chassis_power(&mut self, ctx: &Ctx) -> Result<PowerState> {
        let data = self.exec(ctx, &cmd::GET_CHASSIS_STATUS, vec![]).await?;
        let status =
            cmd::decode_chassis_status(&data).ok_or_else(|| protocol(cmd::GET_CHASSIS_STATUS.id, "empty response"))?;
        Ok(if status.power_on { PowerState::On } else { PowerState::Off })
    }

    /// Poll the chassis until it reports `want` (see the module docs).
    async fn verify_power(&mut self, ctx: &Ctx, op: PowerOp, want: PowerState) -> Result<PowerState> {
        let started = Instant::now();
        // The settle timeout the worker or the action set; without one a
        // soft off waits for the operating system as long as the action may last.
        let give_up = match (ctx.settle, op) {
            (Some(settle), _) => (started + settle).min(ctx.deadline),
            (None, PowerOp::SoftOff) => ctx.deadline,
            (None, _) => (started + self.verify.limit).min(ctx.deadline),
        };
        let mut last = None;
        loop {
            match self.chassis_power(ctx).await {
                Ok(s) if s == want => return Ok(s),
                Ok(s) => last = Some(s),
                // A read cut short by the deadline: the command was accepted, its effect unseen.
                Err(e)
                    if matches!(e.code, ErrorCode::DeadlineExceeded | ErrorCode::Timeout)
                        && Instant::now() >= give_up => {}
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            if now + self.verify.poll >= give_up {
                return Err(ProviderError::new(
                    ErrorCode::NotReached,
                    format!(
                        "{}: the BMC accepted power {:?} but the chassis still reported {} after {} ms; the action is not verified",
                        self.bmc,
                        op,
                        last.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_else(|| "nothing".into()),
                        now.duration_since(started).as_millis()
                    ),
                ));
            }
            tokio::time::sleep(self.verify.poll).await;
        }
    }
}

#[async_trait]
impl<T: Transport> Power for IpmiSession<T> {
    /// Status: Get Chassis Status (chassis 0x01). Everything else: Chassis
    /// Control (chassis 0x02) with 0 off, 1 on, 2 cycle, 3 hard reset,
    /// 4 diagnostic interrupt (NMI), 5 soft off (ACPI), then verified.
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
        let Some(code) = cmd::chassis_control_code(op) else {
            return self.chassis_power(ctx).await.map(Some);
        };
        self.exec(ctx, &cmd::CHASSIS_CONTROL, vec![code]).await?;
        match expected_state(op) {
            Some(want) => self.verify_power(ctx, op, want).await.map(Some),
            None => Ok(None),
        }
    }
}
