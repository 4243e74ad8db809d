//! Power capping: the power reading and the power limit of the system's
//! chassis (`Links.Chassis` of the ComputerSystem, else the service's
//! `Chassis` collection), from the chassis' `EnvironmentMetrics`
//! (`PowerWatts`, `PowerLimitWatts`: Redfish 2021.2 on) where it links one
//! carrying them, else from the deprecated `Power` resource's first
//! `PowerControl` (`PowerConsumedWatts`, `PowerMetrics`, `PowerLimit`).
//!
//! A limit is checked against what the resource advertises before any
//! PATCH (`AllowableMin`/`AllowableMax`; `PowerCapacityWatts`), PATCHed with
//! the resource's ETag and read back. `EnvironmentMetrics`: `SetPoint`, and
//! `ControlMode` `Automatic`/`Disabled` for activation, only where the
//! excerpt has a `ControlMode`. `PowerControl`: `LimitInWatts`; deactivating
//! writes it `null` (the schema's "no limit"), so it takes no `watts`.

use crate::error::{err, invalid, unsupported};
use crate::json::{link, links, members};
use crate::session::RedfishSession;
use crate::transport::Resource;
use bmcfleet_provider::{Ctx, PowerCapping, Result};
use bmcfleet_schema::{ErrorCode, PowerLimit, PowerLimitSet, PowerReading};
use serde_json::{json, Value};

/// Chassis looked at for power resources, at most.
const MAX_CHASSIS: usize = 8;

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn watts_u32(v: &Value, key: &str) -> Option<u32> {
    num(v, key).filter(|w| *w >= 0.0 && *w <= f64::from(u32::MAX)).map(|w| w.round() as u32)
}

/// Where the chassis keeps power: the resource and which kind it is.
enum Source {
    Metrics(Resource),
    Legacy(Resource),
}

pub(crate) fn reading_from_metrics(m: &Value) -> Option<PowerReading> {
    let watts = num(m.get("PowerWatts")?, "Reading")?;
    Some(PowerReading { watts, source: "EnvironmentMetrics".into(), ..PowerReading::default() })
}

pub(crate) fn reading_from_power(p: &Value) -> Option<PowerReading> {
    let control = p.get("PowerControl")?.as_array()?.first()?;
    let watts = num(control, "PowerConsumedWatts")?;
    let metrics = control.get("PowerMetrics").cloned().unwrap_or(Value::Null);
    Some(PowerReading {
        watts,
        min_watts: num(&metrics, "MinConsumedWatts"),
        max_watts: num(&metrics, "MaxConsumedWatts"),
        average_watts: num(&metrics, "AverageConsumedWatts"),
        interval_ms: num(&metrics, "IntervalInMin").filter(|m| *m >= 0.0).map(|m| (m * 60_000.0) as u64),
        source: "PowerControl".into(),
    })
}

pub(crate) fn limit_from_metrics(m: &Value) -> Option<PowerLimit> {
    let l = m.get("PowerLimitWatts")?.as_object()?;
    let l = Value::Object(l.clone());
    Some(PowerLimit {
        watts: watts_u32(&l, "SetPoint"),
        active: l.get("ControlMode").and_then(Value::as_str).map(|m| m != "Disabled"),
        allowed_min: watts_u32(&l, "AllowableMin"),
        allowed_max: watts_u32(&l, "AllowableMax"),
        source: "EnvironmentMetrics".into(),
        ..PowerLimit::default()
    })
}

pub(crate) fn limit_from_power(p: &Value) -> Option<PowerLimit> {
    let control = p.get("PowerControl")?.as_array()?.first()?;
    let limit = control.get("PowerLimit")?;
    let watts = watts_u32(limit, "LimitInWatts");
    Some(PowerLimit {
        watts,
        active: Some(watts.is_some()),
        allowed_max: watts_u32(control, "PowerCapacityWatts"),
        correction_ms: watts_u32(limit, "CorrectionInMs"),
        exception: limit.get("LimitException").and_then(Value::as_str).map(str::to_owned),
        source: "PowerControl".into(),
        ..PowerLimit::default()
    })
}

fn check_range(limit: &PowerLimit, watts: u32) -> Result<()> {
    let below = limit.allowed_min.is_some_and(|min| watts < min);
    let above = limit.allowed_max.is_some_and(|max| watts > max);
    if below || above {
        return Err(invalid(format!(
            "{watts} W is outside what the BMC allows ({}..{} W)",
            limit.allowed_min.map(|w| w.to_string()).unwrap_or_default(),
            limit.allowed_max.map(|w| w.to_string()).unwrap_or_default()
        )));
    }
    Ok(())
}

/// The PATCH body for `set` on the resource, or why not.
pub(crate) fn change(source_is_metrics: bool, resource: &Value, set: &PowerLimitSet) -> Result<Value> {
    if source_is_metrics {
        let current =
            limit_from_metrics(resource).ok_or_else(|| unsupported("EnvironmentMetrics has no PowerLimitWatts"))?;
        let mut body = serde_json::Map::new();
        if let Some(w) = set.watts {
            check_range(&current, w)?;
            body.insert("SetPoint".into(), json!(w));
        }
        if let Some(active) = set.active {
            if current.active.is_none() {
                return Err(unsupported(
                    "PowerLimitWatts has no ControlMode: the limit cannot be activated or deactivated",
                ));
            }
            body.insert("ControlMode".into(), json!(if active { "Automatic" } else { "Disabled" }));
        }
        return Ok(json!({ "PowerLimitWatts": body }));
    }
    let current =
        limit_from_power(resource).ok_or_else(|| unsupported("the Power resource has no PowerControl.PowerLimit"))?;
    let value = match (set.watts, set.active) {
        (Some(_), Some(false)) => {
            return Err(invalid(
                "PowerControl has no inactive limit: deactivating writes LimitInWatts null, without watts",
            ))
        }
        (None, Some(false)) => Value::Null,
        (Some(w), _) => {
            check_range(&current, w)?;
            json!(w)
        }
        (None, _) => match current.watts {
            Some(w) => json!(w),
            None => return Err(invalid("no limit is set: activating a PowerControl limit needs watts")),
        },
    };
    Ok(json!({"PowerControl": [{"PowerLimit": {"LimitInWatts": value}}]}))
}

impl RedfishSession {
    /// The first chassis of the system that links `EnvironmentMetrics`
    /// with `want` in it, else one that links `Power`.
    async fn power_source(&mut self, ctx: &Ctx, want: &str) -> Result<Source> {
        let system = self.transport.get(ctx, &self.service.system.path.clone()).await?;
        let mut chassis = system.body.get("Links").map(|l| links(l, "Chassis")).unwrap_or_default();
        if chassis.is_empty() {
            let root = self.transport.get(ctx, "/redfish/v1").await?;
            if let Some(coll) = link(&root.body, "Chassis") {
                chassis = members(&self.transport.get_linked(ctx, &coll, "Chassis").await?.body);
            }
        }
        let mut legacy = None;
        for path in chassis.into_iter().take(MAX_CHASSIS) {
            let c = self.transport.get(ctx, &path).await?.body;
            if let Some(m) = link(&c, "EnvironmentMetrics") {
                let r = self.transport.get_linked(ctx, &m, "EnvironmentMetrics").await?;
                if r.body.get(want).is_some_and(Value::is_object) {
                    return Ok(Source::Metrics(r));
                }
            }
            if legacy.is_none() {
                legacy = link(&c, "Power");
            }
        }
        match legacy {
            Some(p) => Ok(Source::Legacy(self.transport.get_linked(ctx, &p, "Power").await?)),
            None => Err(unsupported(format!(
                "no chassis of the system has {want} in EnvironmentMetrics, nor a Power resource"
            ))),
        }
    }
}

#[async_trait::async_trait]
impl PowerCapping for RedfishSession {
    async fn power_reading(&mut self, ctx: &Ctx) -> Result<PowerReading> {
        match self.power_source(ctx, "PowerWatts").await? {
            Source::Metrics(r) => reading_from_metrics(&r.body),
            Source::Legacy(r) => reading_from_power(&r.body),
        }
        .ok_or_else(|| unsupported("the chassis' power resource has no reading"))
    }

    async fn power_limit(&mut self, ctx: &Ctx) -> Result<PowerLimit> {
        match self.power_source(ctx, "PowerLimitWatts").await? {
            Source::Metrics(r) => limit_from_metrics(&r.body),
            Source::Legacy(r) => limit_from_power(&r.body),
        }
        .ok_or_else(|| unsupported("the chassis' power resource has no power limit"))
    }

    async fn set_power_limit(&mut self, ctx: &Ctx, set: &PowerLimitSet) -> Result<PowerLimit> {
        let (resource, metrics) = match self.power_source(ctx, "PowerLimitWatts").await? {
            Source::Metrics(r) => (r, true),
            Source::Legacy(r) => (r, false),
        };
        let read = |v: &Value| if metrics { limit_from_metrics(v) } else { limit_from_power(v) };
        let before = read(&resource.body).unwrap_or_default();
        let body = change(metrics, &resource.body, set)?;
        let want_watts = match (metrics, set.watts, set.active) {
            (false, None, Some(false)) => None,
            (_, Some(w), _) => Some(w),
            (_, None, _) => before.watts,
        };
        let want_active = set.active.or(before.active);
        let path = resource.path.clone();
        if before.watts != want_watts || before.active != want_active {
            self.patch_with_etag(ctx, resource, &body).await?;
        }
        let done = |l: &PowerLimit| l.watts == want_watts && l.active == want_active;
        let after = self.transport.read_back(ctx, &path, |r| read(&r.body).is_some_and(|l| done(&l))).await?;
        let after = read(&after.body).unwrap_or_default();
        if !done(&after) {
            return Err(err(
                ErrorCode::BmcError,
                format!(
                    "the BMC accepted the power limit but {path} reads back {} W, {}",
                    after.watts.map(|w| w.to_string()).unwrap_or_else(|| "no".into()),
                    match after.active {
                        Some(true) => "active",
                        Some(false) => "inactive",
                        None => "activation unknown",
                    }
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
    fn limits_are_checked_against_what_the_resource_advertises() {
        let m = json!({"PowerLimitWatts": {"SetPoint": 500, "AllowableMin": 200, "AllowableMax": 800, "ControlMode": "Disabled"}});
        let l = limit_from_metrics(&m).unwrap();
        assert_eq!((l.watts, l.active, l.allowed_min, l.allowed_max), (Some(500), Some(false), Some(200), Some(800)));
        let set = |watts, active| PowerLimitSet { watts, active };
        assert_eq!(change(true, &m, &set(Some(900), None)).unwrap_err().code, ErrorCode::InvalidField);
        assert_eq!(
            change(true, &m, &set(Some(600), Some(true))).unwrap(),
            json!({"PowerLimitWatts": {"SetPoint": 600, "ControlMode": "Automatic"}})
        );
        let no_mode = json!({"PowerLimitWatts": {"SetPoint": 500}});
        assert_eq!(change(true, &no_mode, &set(None, Some(true))).unwrap_err().code, ErrorCode::Unsupported);
        let p = json!({"PowerControl": [{"PowerConsumedWatts": 344, "PowerCapacityWatts": 800,
            "PowerMetrics": {"IntervalInMin": 30, "MinConsumedWatts": 271, "MaxConsumedWatts": 489, "AverageConsumedWatts": 319},
            "PowerLimit": {"LimitInWatts": null, "LimitException": "LogEventOnly", "CorrectionInMs": 50}}]});
        let r = reading_from_power(&p).unwrap();
        assert_eq!((r.watts, r.min_watts, r.interval_ms), (344.0, Some(271.0), Some(1_800_000)));
        assert_eq!(limit_from_power(&p).unwrap().active, Some(false));
        assert_eq!(change(false, &p, &set(Some(801), None)).unwrap_err().code, ErrorCode::InvalidField);
        assert_eq!(change(false, &p, &set(None, Some(true))).unwrap_err().code, ErrorCode::InvalidField);
        assert_eq!(change(false, &p, &set(Some(400), Some(false))).unwrap_err().code, ErrorCode::InvalidField);
    }
}
