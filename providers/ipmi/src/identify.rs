//! The identify light: Chassis Identify (chassis 0x04) and the identify
//! state of Get Chassis Status (chassis 0x01, byte 3).
//!
//! Chassis Identify takes an interval (byte 1: seconds, 0 turns it off) and
//! an optional Force Identify On (byte 2 bit 0: on until turned off). `on`
//! or `blink` without `seconds` is Force Identify On, with `seconds` the
//! interval; `off` is interval 0. IPMI has one identify state, shown in the
//! BMC's own pattern, so `on` and `blink` ask the same.
//!
//! A change is verified by reading Get Chassis Status back where the BMC
//! reports identify state (byte 3 bit 6; optional in the spec). Where it
//! does not (OpenIPMI's `ipmi_sim`, many older BMCs), the result carries no
//! `light` and a `note` saying the command was accepted but not read back.

use crate::cmd;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, Identify, ProviderError, Result};
use bmcfleet_schema::{ErrorCode, IdentifyLight, IdentifySet, IdentifyState};

/// Reads of Get Chassis Status after a change before it counts as not taken.
const READ_BACKS: u32 = 3;

fn state(misc: u8) -> IdentifyState {
    match cmd::identify_state(misc) {
        Some((on, timed)) => IdentifyState {
            light: Some(if on { IdentifyLight::On } else { IdentifyLight::Off }),
            timed,
            source: "chassis_status".into(),
            note: None,
        },
        None => IdentifyState {
            light: None,
            timed: false,
            source: "chassis_status".into(),
            note: Some("the BMC's Get Chassis Status does not report the identify state".into()),
        },
    }
}

impl<T: Transport> IpmiSession<T> {
    async fn identify_misc(&mut self, ctx: &Ctx) -> Result<u8> {
        let data = self.exec(ctx, &cmd::GET_CHASSIS_STATUS, vec![]).await?;
        let status =
            cmd::decode_chassis_status(&data).ok_or_else(|| protocol(cmd::GET_CHASSIS_STATUS.id, "empty response"))?;
        Ok(status.misc)
    }
}

#[async_trait]
impl<T: Transport> Identify for IpmiSession<T> {
    async fn identify(&mut self, ctx: &Ctx) -> Result<IdentifyState> {
        Ok(state(self.identify_misc(ctx).await?))
    }

    async fn set_identify(&mut self, ctx: &Ctx, set: &IdentifySet) -> Result<IdentifyState> {
        let on = set.light != IdentifyLight::Off;
        let data = cmd::identify_data(on, set.seconds);
        if let Err(e) = self.exec(ctx, &cmd::CHASSIS_IDENTIFY, data).await {
            return Err(match (e.code, on && set.seconds.is_none()) {
                (ErrorCode::Unsupported, true) => ProviderError::new(
                    ErrorCode::Unsupported,
                    format!(
                        "{}: the BMC refused Force Identify On (optional in IPMI); ask for a timed identify with seconds (1-255)",
                        self.bmc
                    ),
                ),
                _ => e,
            });
        }
        // (on, timed) as Get Chassis Status should report it now.
        let want = (on, on && set.seconds.is_some());
        let mut round = 0;
        loop {
            let misc = self.identify_misc(ctx).await?;
            match cmd::identify_state(misc) {
                None => {
                    let mut s = state(misc);
                    s.note = Some(
                        "the BMC accepted Chassis Identify; its Get Chassis Status does not report the identify state, so the change is not read back"
                            .into(),
                    );
                    return Ok(s);
                }
                Some(got) if got == want => return Ok(state(misc)),
                Some(got) => {
                    round += 1;
                    let wait = self.verify.poll;
                    if round >= READ_BACKS || ctx.remaining().map_or(true, |left| left <= wait) {
                        return Err(ProviderError::new(
                            ErrorCode::NotReached,
                            format!(
                                "{}: the BMC accepted Chassis Identify ({}) but Get Chassis Status still reports the light {}",
                                self.bmc,
                                describe(want),
                                describe(got)
                            ),
                        ));
                    }
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

fn describe((on, timed): (bool, bool)) -> &'static str {
    match (on, timed) {
        (false, _) => "off",
        (true, true) => "on for an interval",
        (true, false) => "on until turned off",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identify_bits_decode_per_spec() {
        assert_eq!(cmd::identify_state(0x00), None, "bit 6 clear: not reported");
        assert_eq!(cmd::identify_state(0x30), None, "bit 6 clear whatever bits 5:4 say");
        assert_eq!(cmd::identify_state(0x40), Some((false, false)));
        assert_eq!(cmd::identify_state(0x50), Some((true, true)));
        assert_eq!(cmd::identify_state(0x60), Some((true, false)));
        assert_eq!(cmd::identify_state(0x70), None, "reserved");
        assert_eq!(cmd::identify_data(false, None), [0]);
        assert_eq!(cmd::identify_data(true, None), [0, 1]);
        assert_eq!(cmd::identify_data(true, Some(30)), [30]);
        assert_eq!(state(0x60).light, Some(IdentifyLight::On));
        assert!(state(0x00).note.is_some());
    }
}
