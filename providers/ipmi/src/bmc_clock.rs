//! The BMC clock: Get SEL Time (storage 0x0A / 0x48) and Set SEL Time
//! (0x0A / 0x49), four bytes of seconds since 1970 (UTC; IPMI v2.0 §31.10,
//! §31.11, timestamps §37). Drift is the BMC's time minus the worker's,
//! taken halfway through the read; a sync writes the worker's time and is
//! read back within `SYNC_TOLERANCE_MS`.

use crate::cmd;
use crate::session::{protocol, IpmiSession};
use crate::transport::Transport;
use async_trait::async_trait;
use bmcfleet_provider::{now_unix_ms, BmcClockControl, Ctx, ProviderError, Result, SYNC_TOLERANCE_MS};
use bmcfleet_schema::{BmcClock, ErrorCode};

fn rfc3339(secs: u32) -> String {
    time::OffsetDateTime::from_unix_timestamp(i64::from(secs))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_default()
}

impl<T: Transport> IpmiSession<T> {
    async fn read_sel_time(&mut self, ctx: &Ctx) -> Result<BmcClock> {
        let before = now_unix_ms();
        let data = self.exec(ctx, &cmd::GET_SEL_TIME, vec![]).await?;
        let after = now_unix_ms();
        let secs = cmd::decode_sel_time(&data)
            .ok_or_else(|| protocol(cmd::GET_SEL_TIME.id, format!("{} bytes, not a time", data.len())))?;
        Ok(BmcClock {
            time: rfc3339(secs),
            drift_ms: i64::from(secs) * 1000 - (before + after) / 2,
            utc_offset: None,
            source: "sel_time".into(),
        })
    }
}

#[async_trait]
impl<T: Transport> BmcClockControl for IpmiSession<T> {
    /// IPMI has no NTP settings: it can only set the clock (Set SEL Time,
    /// `bmc_clock_sync`). Vendors' NTP settings are OEM commands, not sent.
    fn no_ntp(&self) -> ProviderError {
        ProviderError::new(
            ErrorCode::Unsupported,
            "IPMI has no NTP settings: it can only set the BMC's clock (Set SEL Time: bmc_clock_sync); \
             register the machine with protocol redfish for NTP",
        )
    }

    async fn bmc_clock(&mut self, ctx: &Ctx) -> Result<BmcClock> {
        self.read_sel_time(ctx).await
    }

    async fn sync_bmc_clock(&mut self, ctx: &Ctx) -> Result<BmcClock> {
        // Rounded to the nearest second: the clock keeps whole seconds.
        let now = u32::try_from((now_unix_ms() + 500) / 1000)
            .map_err(|_| ProviderError::new(ErrorCode::InvalidField, "the worker's clock is past 2106"))?;
        self.exec(ctx, &cmd::SET_SEL_TIME, now.to_le_bytes().to_vec()).await?;
        let after = self.read_sel_time(ctx).await?;
        if after.drift_ms.abs() > SYNC_TOLERANCE_MS {
            return Err(ProviderError::new(
                ErrorCode::NotReached,
                format!(
                    "{}: the BMC accepted Set SEL Time but reads back {} ({} ms off the worker)",
                    self.bmc, after.time, after.drift_ms
                ),
            ));
        }
        Ok(after)
    }
}
