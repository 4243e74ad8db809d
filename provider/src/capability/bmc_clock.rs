//! The BMC's clock: read it with its drift against the worker; set it to
//! the worker's time, read back; and how the BMC keeps it (its NTP servers,
//! where the protocol has them). One capability for the BMC's time keeping:
//! a provider that can set the clock but has no NTP (IPMI) answers the NTP
//! actions `unsupported` with its reason.

use crate::ProviderError;
use crate::{Ctx, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, BmcClock, ErrorCode, NtpSet, NtpSettings};

/// How far a synced clock may read from the worker's and still count as
/// set (IPMI keeps whole seconds; the read-back takes a round trip).
pub const SYNC_TOLERANCE_MS: i64 = 2_000;

#[async_trait]
pub trait BmcClockControl: Send {
    async fn bmc_clock(&mut self, ctx: &Ctx) -> Result<BmcClock>;
    /// Set the BMC's clock to the worker's (UTC) and answer it read back;
    /// an error when it reads more than [`SYNC_TOLERANCE_MS`] off.
    async fn sync_bmc_clock(&mut self, ctx: &Ctx) -> Result<BmcClock>;
    /// The BMC's NTP settings.
    async fn ntp(&mut self, _ctx: &Ctx) -> Result<NtpSettings> {
        Err(self.no_ntp())
    }
    /// Apply `set` and answer the settings read back; an error when they do
    /// not read back as asked.
    async fn set_ntp(&mut self, _ctx: &Ctx, _set: &NtpSet) -> Result<NtpSettings> {
        Err(self.no_ntp())
    }
    /// Why this provider has no NTP settings (the `unsupported` answer of
    /// the NTP actions when it does not implement them).
    fn no_ntp(&self) -> ProviderError {
        ProviderError::new(ErrorCode::Unsupported, "this provider has no NTP settings")
    }
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::BmcClockGet | Action::BmcClockSync | Action::NtpGet | Action::NtpSet(_))
}

pub(super) async fn perform(cap: &mut dyn BmcClockControl, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    match action {
        Action::BmcClockGet => Ok(Some(ActionData::BmcClock(cap.bmc_clock(ctx).await?))),
        Action::BmcClockSync => Ok(Some(ActionData::BmcClock(cap.sync_bmc_clock(ctx).await?))),
        Action::NtpGet => Ok(Some(ActionData::Ntp(cap.ntp(ctx).await?))),
        Action::NtpSet(set) => Ok(Some(ActionData::Ntp(cap.set_ntp(ctx, set).await?))),
        _ => unreachable!("dispatched by `handles`"),
    }
}

/// Milliseconds since the Unix epoch, now (the worker's clock).
pub fn now_unix_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
