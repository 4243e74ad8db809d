//! The BMC clock: the Manager's `DateTime` (with `DateTimeLocalOffset`).
//! A sync PATCHes `DateTime` with the worker's UTC time (with `If-Match`),
//! only where the Manager has a `DateTime` to change, and reads it back
//! within `SYNC_TOLERANCE_MS`. A BMC that keeps its clock by NTP may refuse
//! the PATCH: its answer is the error.

use crate::error::{err, protocol, unsupported};
use crate::session::RedfishSession;
use bmcfleet_provider::{now_unix_ms, BmcClockControl, Ctx, Result, SYNC_TOLERANCE_MS};
use bmcfleet_schema::{BmcClock, ErrorCode};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;

/// The clock of a Manager resource read between `before` and `after`
/// (the worker's ms since 1970).
pub(crate) fn clock(manager: &Value, before: i64, after: i64) -> Result<BmcClock> {
    let text =
        manager.get("DateTime").and_then(Value::as_str).ok_or_else(|| unsupported("the Manager has no DateTime"))?;
    let t = time::OffsetDateTime::parse(text, &Rfc3339)
        .map_err(|e| protocol(format!("the Manager's DateTime {text:?} is not RFC 3339: {e}")))?;
    let bmc_ms = (t.unix_timestamp_nanos() / 1_000_000) as i64;
    Ok(BmcClock {
        time: text.chars().take(64).collect(),
        drift_ms: bmc_ms - (before + after) / 2,
        utc_offset: manager.get("DateTimeLocalOffset").and_then(Value::as_str).map(|s| s.chars().take(16).collect()),
        source: "DateTime".into(),
    })
}

impl RedfishSession {
    async fn manager_clock(&mut self, ctx: &Ctx) -> Result<(crate::transport::Resource, BmcClock)> {
        let path = self.manager_path().ok_or_else(|| unsupported("the service has no Manager"))?.to_owned();
        let before = now_unix_ms();
        let m = self.transport.get(ctx, &path).await?;
        let c = clock(&m.body, before, now_unix_ms())?;
        Ok((m, c))
    }
}

#[async_trait::async_trait]
impl BmcClockControl for RedfishSession {
    async fn bmc_clock(&mut self, ctx: &Ctx) -> Result<BmcClock> {
        Ok(self.manager_clock(ctx).await?.1)
    }

    async fn sync_bmc_clock(&mut self, ctx: &Ctx) -> Result<BmcClock> {
        let (manager, _) = self.manager_clock(ctx).await?;
        let path = manager.path.clone();
        let now =
            time::OffsetDateTime::now_utc().replace_nanosecond(0).unwrap_or_else(|_| time::OffsetDateTime::now_utc());
        let text = now.format(&Rfc3339).map_err(|e| err(ErrorCode::Internal, e.to_string()))?;
        self.patch_with_etag(ctx, manager, &json!({"DateTime": text})).await?;
        let before = now_unix_ms();
        let r = self
            .transport
            .read_back(ctx, &path, |r| {
                clock(&r.body, before, now_unix_ms()).is_ok_and(|c| c.drift_ms.abs() <= SYNC_TOLERANCE_MS)
            })
            .await?;
        let after = clock(&r.body, before, now_unix_ms())?;
        if after.drift_ms.abs() > SYNC_TOLERANCE_MS {
            return Err(err(
                ErrorCode::BmcError,
                format!(
                    "the BMC accepted DateTime {text} but {path} reads back {} ({} ms off)",
                    after.time, after.drift_ms
                ),
            ));
        }
        Ok(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datetime_and_offset_decode_with_drift() {
        let m = json!({"DateTime": "2015-03-13T04:14:33+06:00", "DateTimeLocalOffset": "+06:00"});
        let c = clock(&m, 1_426_198_473_000, 1_426_198_473_000).unwrap();
        assert_eq!((c.drift_ms, c.utc_offset.as_deref()), (0, Some("+06:00")));
        assert_eq!(clock(&json!({}), 0, 0).unwrap_err().code, ErrorCode::Unsupported);
        assert_eq!(clock(&json!({"DateTime": "yesterday"}), 0, 0).unwrap_err().code, ErrorCode::ProtocolError);
    }
}
