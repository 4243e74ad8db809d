//! Power capping over DCMI 1.5 (group extension netfn 0x2C, id 0xDC): Get
//! Power Reading (system power statistics), Get / Set / Activate Power Limit.
//!
//! Set keeps the exception action, correction time and sampling period the
//! BMC holds (read first with Get Power Limit) and changes only the watts;
//! activation is its own command. The result is Get Power Limit read back:
//! the watts and the active state must be what was asked (Get Power
//! Limit's 0x80 "no active set power limit" reads as `active: false`, its
//! data still the limit set). A limit the BMC will not take (0x84) is
//! `invalid_field`: DCMI advertises no range, the BMC's answer is the
//! range check. A BMC without DCMI (0xC1, as OpenIPMI's `ipmi_sim`):
//! `unsupported`.

use crate::cmd::{self, DcmiPowerLimit};
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{Ctx, PowerCapping, ProviderError, Result};
use bmcfleet_schema::{ErrorCode, PowerLimit, PowerLimitSet, PowerReading};

/// Get Power Limit's "a limit is set but not active".
const NO_ACTIVE_LIMIT: u8 = 0x80;

fn limit(l: &DcmiPowerLimit, active: bool) -> PowerLimit {
    PowerLimit {
        watts: Some(u32::from(l.watts)),
        active: Some(active),
        correction_ms: Some(l.correction_ms),
        exception: Some(cmd::dcmi_exception_name(l.exception)),
        source: "dcmi".into(),
        ..PowerLimit::default()
    }
}

impl<T: Transport> IpmiSession<T> {
    /// The limit the BMC holds, and whether it is active.
    async fn dcmi_limit(&mut self, ctx: &Ctx) -> Result<(DcmiPowerLimit, bool)> {
        let command = &cmd::DCMI_GET_POWER_LIMIT;
        let response = self.send(ctx, command, vec![cmd::DCMI, 0, 0]).await?;
        let active = match response.cc {
            0 => true,
            NO_ACTIVE_LIMIT => false,
            cc => return Err(crate::error::completion_code_error(command.id, cc, command.specific)),
        };
        let l = cmd::decode_dcmi_power_limit(&response.data)
            .ok_or_else(|| protocol(command.id, format!("{} bytes, not a DCMI power limit", response.data.len())))?;
        Ok((l, active))
    }
}

#[async_trait]
impl<T: Transport> PowerCapping for IpmiSession<T> {
    async fn power_reading(&mut self, ctx: &Ctx) -> Result<PowerReading> {
        let command = &cmd::DCMI_GET_POWER_READING;
        let data = self.exec(ctx, command, cmd::dcmi_power_reading_request()).await?;
        let r = cmd::decode_dcmi_power_reading(&data)
            .ok_or_else(|| protocol(command.id, format!("{} bytes, not a DCMI power reading", data.len())))?;
        if !r.active {
            return Err(ProviderError::new(
                ErrorCode::Unsupported,
                format!("{}: the BMC reports power measurement inactive (DCMI power reading state)", self.bmc),
            ));
        }
        Ok(PowerReading {
            watts: f64::from(r.current),
            min_watts: Some(f64::from(r.min)),
            max_watts: Some(f64::from(r.max)),
            average_watts: Some(f64::from(r.average)),
            interval_ms: Some(u64::from(r.period_ms)),
            source: "dcmi".into(),
        })
    }

    async fn power_limit(&mut self, ctx: &Ctx) -> Result<PowerLimit> {
        let (l, active) = self.dcmi_limit(ctx).await?;
        Ok(limit(&l, active))
    }

    async fn set_power_limit(&mut self, ctx: &Ctx, set: &PowerLimitSet) -> Result<PowerLimit> {
        let (mut current, mut active) = self.dcmi_limit(ctx).await?;
        if let Some(watts) = set.watts {
            let watts = u16::try_from(watts).map_err(|_| {
                ProviderError::new(ErrorCode::InvalidField, format!("{watts} W: DCMI limits are at most 65535 W"))
            })?;
            if watts != current.watts {
                current.watts = watts;
                self.exec(ctx, &cmd::DCMI_SET_POWER_LIMIT, cmd::encode_dcmi_power_limit(&current)).await?;
            }
        }
        if let Some(want) = set.active.filter(|want| *want != active) {
            self.exec(ctx, &cmd::DCMI_ACTIVATE_POWER_LIMIT, vec![cmd::DCMI, u8::from(want), 0, 0]).await?;
            active = want;
        }
        let (after, after_active) = self.dcmi_limit(ctx).await?;
        if after.watts != current.watts || after_active != active {
            return Err(ProviderError::new(
                ErrorCode::NotReached,
                format!(
                    "{}: the BMC accepted the power limit ({} W, {}) but Get Power Limit reads back {} W, {}",
                    self.bmc,
                    current.watts,
                    if active { "active" } else { "inactive" },
                    after.watts,
                    if after_active { "active" } else { "inactive" }
                ),
            ));
        }
        Ok(limit(&after, after_active))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcmi_frames_decode_per_spec() {
        // DC, current 300, min 120, max 450, avg 280, timestamp, period 60000 ms, state active.
        let d = [0xDC, 0x2C, 0x01, 0x78, 0x00, 0xC2, 0x01, 0x18, 0x01, 1, 2, 3, 4, 0x60, 0xEA, 0, 0, 0x40];
        let r = cmd::decode_dcmi_power_reading(&d).unwrap();
        assert_eq!((r.current, r.min, r.max, r.average, r.period_ms, r.active), (300, 120, 450, 280, 60_000, true));
        assert!(cmd::decode_dcmi_power_reading(&d[..17]).is_none());
        let l = DcmiPowerLimit { exception: 0x01, watts: 450, correction_ms: 1000, sampling_s: 5 };
        let set = cmd::encode_dcmi_power_limit(&l);
        assert_eq!(set.len(), 15);
        // Get Power Limit's answer: Set's request with one reserved byte fewer.
        let mut get = set.clone();
        get.remove(1);
        assert_eq!(cmd::decode_dcmi_power_limit(&get).unwrap(), l);
        assert_eq!(cmd::dcmi_exception_name(0x11), "log");
    }
}
