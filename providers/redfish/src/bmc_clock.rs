//! The BMC clock: the Manager's `DateTime` (with `DateTimeLocalOffset`).
//! A sync PATCHes `DateTime` with the worker's UTC time (with `If-Match`),
//! only where the Manager has a `DateTime` to change, and reads it back
//! within `SYNC_TOLERANCE_MS`. A BMC that keeps its clock by NTP may refuse
//! the PATCH: its answer is the error.
//!
//! NTP: the Manager's `NetworkProtocol` resource, `NTP.NTPServers` and
//! `NTP.ProtocolEnabled`. Only what the resource shows is changed (a BMC
//! that does not show `NTPServers` is not sent one); the PATCH carries
//! `If-Match` where the BMC gave an ETag, and the change is read back
//! (servers in order, empty slots dropped) before it counts.

use crate::error::{err, protocol, unsupported};
use crate::json::link;
use crate::session::RedfishSession;
use bmcfleet_provider::{now_unix_ms, BmcClockControl, Ctx, Result, SYNC_TOLERANCE_MS};
use bmcfleet_schema::{BmcClock, ErrorCode, NtpSet, NtpSettings};
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

/// The NTP settings of a NetworkProtocol resource.
pub(crate) fn ntp_of(np: &Value) -> Result<NtpSettings> {
    let ntp = np
        .get("NTP")
        .filter(|n| n.is_object())
        .ok_or_else(|| unsupported("the Manager's NetworkProtocol has no NTP settings"))?;
    let servers = ntp
        .get("NTPServers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.trim().is_empty())
                .take(NtpSet::MAX_SERVERS * 2)
                .map(|s| s.chars().take(NtpSet::MAX_SERVER_LEN).collect())
                .collect()
        })
        .unwrap_or_default();
    Ok(NtpSettings {
        servers,
        enabled: ntp.get("ProtocolEnabled").and_then(Value::as_bool),
        source: "NetworkProtocol".into(),
    })
}

/// Whether `got` shows what `set` asked for.
fn ntp_shows(got: &NtpSettings, set: &NtpSet) -> bool {
    set.servers.as_ref().is_none_or(|s| *s == got.servers) && set.enabled.is_none_or(|e| got.enabled == Some(e))
}

impl RedfishSession {
    async fn network_protocol(&mut self, ctx: &Ctx) -> Result<crate::transport::Resource> {
        let path = self.manager_path().ok_or_else(|| unsupported("the service has no Manager"))?.to_owned();
        let m = self.transport.get(ctx, &path).await?;
        let np = link(&m.body, "NetworkProtocol")
            .ok_or_else(|| unsupported("the Manager links no NetworkProtocol resource (no NTP settings)"))?;
        self.transport.get_linked(ctx, &np, "the Manager's NetworkProtocol").await
    }
}

#[async_trait::async_trait]
impl BmcClockControl for RedfishSession {
    async fn ntp(&mut self, ctx: &Ctx) -> Result<NtpSettings> {
        ntp_of(&self.network_protocol(ctx).await?.body)
    }

    async fn set_ntp(&mut self, ctx: &Ctx, set: &NtpSet) -> Result<NtpSettings> {
        let np = self.network_protocol(ctx).await?;
        ntp_of(&np.body)?;
        let shown = &np.body["NTP"];
        let mut ntp = serde_json::Map::new();
        if let Some(servers) = &set.servers {
            if shown.get("NTPServers").is_none() {
                return Err(unsupported("the BMC's NetworkProtocol shows no NTP.NTPServers to set; nothing was sent"));
            }
            ntp.insert("NTPServers".into(), json!(servers));
        }
        if let Some(enabled) = set.enabled {
            if shown.get("ProtocolEnabled").is_none() {
                return Err(unsupported(
                    "the BMC's NetworkProtocol shows no NTP.ProtocolEnabled to set; nothing was sent",
                ));
            }
            ntp.insert("ProtocolEnabled".into(), json!(enabled));
        }
        let path = np.path.clone();
        self.patch_with_etag(ctx, np, &json!({"NTP": ntp})).await?;
        let r = self.transport.read_back(ctx, &path, |r| ntp_of(&r.body).is_ok_and(|n| ntp_shows(&n, set))).await?;
        let after = ntp_of(&r.body)?;
        if !ntp_shows(&after, set) {
            return Err(err(
                ErrorCode::BmcError,
                format!(
                    "the BMC accepted the NTP settings but {path} reads back servers [{}] enabled {}",
                    after.servers.join(", "),
                    after.enabled.map(|e| e.to_string()).unwrap_or_else(|| "-".into())
                ),
            ));
        }
        Ok(after)
    }

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

    #[test]
    fn ntp_settings_decode_and_compare() {
        let np = json!({"NTP": {"ProtocolEnabled": true, "NTPServers": ["10.0.0.1", "", null, "ntp.example"]}});
        let n = ntp_of(&np).unwrap();
        assert_eq!((n.servers.clone(), n.enabled), (vec!["10.0.0.1".to_owned(), "ntp.example".to_owned()], Some(true)));
        assert!(ntp_shows(&n, &NtpSet { servers: Some(n.servers.clone()), enabled: Some(true) }));
        assert!(!ntp_shows(
            &n,
            &NtpSet { servers: Some(vec!["ntp.example".into(), "10.0.0.1".into()]), enabled: None }
        ));
        assert!(!ntp_shows(&n, &NtpSet { servers: None, enabled: Some(false) }));
        assert_eq!(ntp_of(&json!({})).unwrap_err().code, ErrorCode::Unsupported);
    }
}
