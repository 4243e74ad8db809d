//! Sensors: the chassis of the ComputerSystem (`Links.Chassis`, else the
//! service's `Chassis` collection), read through the `Sensors` collection
//! where the BMC has one (Redfish 2020.4+), else the older `Thermal`
//! (temperatures, fans) and `Power` (consumption, voltages) resources.
//! Bounded like the inventory: at most `MAX_CHASSIS` chassis,
//! `MAX_COMPONENTS` sensors per collection or array, and `MAX_READS`
//! Sensor resources read one by one.

use crate::error::unsupported;
use crate::event_log::health;
use crate::inventory::{MAX_CHASSIS, MAX_READS};
use crate::json::{link, links, members, str_of};
use crate::session::RedfishSession;
use bmcfleet_provider::{Ctx, Result, Sensors};
use bmcfleet_schema::components::{self, MAX_COMPONENTS};
use bmcfleet_schema::health::ResourceHealth;
use bmcfleet_schema::{SensorKind, SensorReading, Thresholds};
use serde_json::Value;

fn num(v: &Value, k: &str) -> Option<f64> {
    v.get(k).and_then(Value::as_f64)
}

fn status_health(v: &Value) -> Option<bmcfleet_schema::Health> {
    v.get("Status").and_then(|s| str_of(s, "Health")).and_then(health)
}

/// The name a BMC gives, clipped like the inventory's text (it goes into the batch's status record).
fn name_of(v: &Value, fallback: &str) -> String {
    components::clip(
        str_of(v, "Name").or_else(|| str_of(v, "FanName")).or_else(|| str_of(v, "MemberId")).unwrap_or(fallback).trim(),
    )
}

/// Absent or disabled sensors (`Status.State` `Absent`/`Disabled`) are left out.
fn present(v: &Value) -> bool {
    !matches!(v.get("Status").and_then(|s| str_of(s, "State")), Some("Absent" | "Disabled" | "UnavailableOffline"))
}

/// The legacy threshold properties (`UpperThresholdNonCritical`, ...); the
/// fatal ones count as critical where there is no critical one.
fn legacy_thresholds(v: &Value) -> Thresholds {
    Thresholds {
        lower_critical: num(v, "LowerThresholdCritical").or_else(|| num(v, "LowerThresholdFatal")),
        lower_warning: num(v, "LowerThresholdNonCritical"),
        upper_warning: num(v, "UpperThresholdNonCritical"),
        upper_critical: num(v, "UpperThresholdCritical").or_else(|| num(v, "UpperThresholdFatal")),
    }
}

/// One array of the legacy `Thermal` or `Power` resource.
struct Legacy {
    array: &'static str,
    kind: SensorKind,
    /// The name of a member that has none.
    name: &'static str,
    /// The property holding the reading, and its unit.
    value: &'static str,
    unit: &'static str,
    /// Whether members carry the legacy threshold properties.
    thresholds: bool,
}

/// `Thermal`: `Temperatures` and `Fans` (RPM unless `ReadingUnits` says `Percent`).
const THERMAL: [Legacy; 2] = [
    Legacy {
        array: "Temperatures",
        kind: SensorKind::Temperature,
        name: "temperature",
        value: "ReadingCelsius",
        unit: "Cel",
        thresholds: true,
    },
    Legacy { array: "Fans", kind: SensorKind::Fan, name: "fan", value: "Reading", unit: "RPM", thresholds: true },
];

/// `Power`: `PowerControl` (consumed watts) and `Voltages`.
const POWER: [Legacy; 2] = [
    Legacy {
        array: "PowerControl",
        kind: SensorKind::Power,
        name: "power",
        value: "PowerConsumedWatts",
        unit: "W",
        thresholds: false,
    },
    Legacy {
        array: "Voltages",
        kind: SensorKind::Voltage,
        name: "voltage",
        value: "ReadingVolts",
        unit: "V",
        thresholds: true,
    },
];

fn legacy(resource: &Value, arrays: &[Legacy]) -> Vec<SensorReading> {
    let mut out = Vec::new();
    for l in arrays {
        for v in resource
            .get(l.array)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|v| present(v))
            .take(MAX_COMPONENTS)
        {
            let unit = match str_of(v, "ReadingUnits") {
                Some("Percent") if l.kind == SensorKind::Fan => "%",
                _ => l.unit,
            };
            out.push(SensorReading {
                name: name_of(v, l.name),
                kind: l.kind,
                value: num(v, l.value),
                unit: Some(unit.into()),
                thresholds: if l.thresholds { legacy_thresholds(v) } else { Thresholds::default() },
                health: status_health(v),
            });
        }
    }
    out
}

/// A `Thermal` resource: `Temperatures` and `Fans`.
pub(crate) fn from_thermal(thermal: &Value) -> Vec<SensorReading> {
    legacy(thermal, &THERMAL)
}

/// A `Power` resource: `PowerControl` (consumed watts) and `Voltages`.
pub(crate) fn from_power(power: &Value) -> Vec<SensorReading> {
    legacy(power, &POWER)
}

/// One member of a `Sensors` collection (Sensor v1.x).
pub(crate) fn from_sensor(s: &Value) -> SensorReading {
    let kind = match str_of(s, "ReadingType") {
        Some("Temperature") => SensorKind::Temperature,
        Some("Rotational") => SensorKind::Fan,
        Some("Voltage") => SensorKind::Voltage,
        Some("Power" | "EnergykWh" | "EnergyJoules") => SensorKind::Power,
        _ => SensorKind::Other,
    };
    let t = |k: &str| s.get("Thresholds").and_then(|t| t.get(k)).and_then(|t| num(t, "Reading"));
    SensorReading {
        name: name_of(s, "sensor"),
        kind,
        value: num(s, "Reading"),
        unit: str_of(s, "ReadingUnits").map(components::clip),
        thresholds: Thresholds {
            lower_critical: t("LowerCritical").or_else(|| t("LowerFatal")),
            lower_warning: t("LowerCaution"),
            upper_warning: t("UpperCaution"),
            upper_critical: t("UpperCritical").or_else(|| t("UpperFatal")),
        },
        health: status_health(s),
    }
}

#[async_trait::async_trait]
impl Sensors for RedfishSession {
    async fn sensors(&mut self, ctx: &Ctx) -> Result<Vec<SensorReading>> {
        let system = self.transport.get(ctx, &self.service.system.path.clone()).await?;
        let mut chassis = system.body.get("Links").map(|l| links(l, "Chassis")).unwrap_or_default();
        if chassis.is_empty() {
            let root = self.transport.get(ctx, "/redfish/v1").await?;
            if let Some(coll) = link(&root.body, "Chassis") {
                chassis = members(&self.transport.get_linked(ctx, &coll, "Chassis").await?.body);
            }
        }
        let mut out = Vec::new();
        let mut any = false;
        // Bounded like the inventory: a BMC listing its chassis or sensors
        // over and over is not read until the action's deadline.
        let mut reads = 0;
        for path in chassis.into_iter().take(MAX_CHASSIS) {
            let c = self.transport.get(ctx, &path).await?.body;
            if let Some(coll) = link(&c, "Sensors") {
                any = true;
                let coll = self.transport.get_linked(ctx, &coll, "Sensors").await?.body;
                for item in coll
                    .get("Members")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .take(MAX_COMPONENTS)
                {
                    let body = if item.get("ReadingType").is_some() || item.get("Reading").is_some() {
                        item
                    } else if let Some(p) = item.get("@odata.id").and_then(Value::as_str) {
                        if reads >= MAX_READS {
                            tracing::debug!(bmc = %self.transport.bmc(), "Sensor read budget spent; the other sensors are left unread.");
                            break;
                        }
                        reads += 1;
                        self.transport.get(ctx, &crate::json::norm_path(p)).await?.body
                    } else {
                        continue;
                    };
                    if present(&body) {
                        out.push(from_sensor(&body));
                    }
                }
                continue;
            }
            if let Some(p) = link(&c, "Thermal") {
                any = true;
                out.extend(from_thermal(&self.transport.get_linked(ctx, &p, "Thermal").await?.body));
            }
            if let Some(p) = link(&c, "Power") {
                any = true;
                out.extend(from_power(&self.transport.get_linked(ctx, &p, "Power").await?.body));
            }
        }
        if !any {
            return Err(unsupported("no chassis of this BMC links Sensors, Thermal or Power"));
        }
        Ok(out)
    }

    /// The ComputerSystem's and its chassis' (`Links.Chassis`, at most
    /// `MAX_CHASSIS`) `Status.Health` and `Status.HealthRollup`; a resource
    /// that says neither is left out.
    async fn health_rollup(&mut self, ctx: &Ctx) -> Result<Vec<ResourceHealth>> {
        let system = self.transport.get(ctx, &self.service.system.path.clone()).await?.body;
        let mut out = Vec::new();
        out.extend(rollup_of(&system, "system"));
        let chassis = system.get("Links").map(|l| links(l, "Chassis")).unwrap_or_default();
        for path in chassis.into_iter().take(MAX_CHASSIS) {
            let c = self.transport.get(ctx, &path).await?.body;
            out.extend(rollup_of(&c, "chassis"));
        }
        Ok(out)
    }
}

/// A resource's `Status.Health` and `Status.HealthRollup` (`None`: it says neither).
pub(crate) fn rollup_of(resource: &Value, kind: &str) -> Option<ResourceHealth> {
    let status = resource.get("Status")?;
    let own = str_of(status, "Health").and_then(health);
    let rollup = str_of(status, "HealthRollup").and_then(health);
    if own.is_none() && rollup.is_none() {
        return None;
    }
    let id = str_of(resource, "Id").or_else(|| str_of(resource, "Name")).unwrap_or("?");
    Some(ResourceHealth { resource: format!("{kind} {}", components::clip(id.trim())), health: own, rollup })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_resource_rollup_is_read_from_its_status() {
        let r =
            rollup_of(&json!({"Id": "1U", "Status": {"Health": "OK", "HealthRollup": "Critical"}}), "chassis").unwrap();
        assert_eq!((r.resource.as_str(), r.health, r.rollup), ("chassis 1U", Some(Health::Ok), Some(Health::Critical)));
        assert_eq!(rollup_of(&json!({"Id": "1", "Status": {"State": "Enabled"}}), "system"), None, "says neither");
        assert_eq!(rollup_of(&json!({"Id": "1"}), "system"), None);
        let weird =
            rollup_of(&json!({"Name": "x\ny", "Status": {"Health": "Bogus", "HealthRollup": "Warning"}}), "system")
                .unwrap();
        assert_eq!((weird.resource.as_str(), weird.health, weird.rollup), ("system x y", None, Some(Health::Warning)));
    }

    use super::*;
    use bmcfleet_schema::Health;
    use serde_json::json;

    #[test]
    fn thermal_power_and_sensor_resources_decode() {
        // Shapes of the DMTF Thermal v1.x / Power v1.x / Sensor v1.x schemas.
        let thermal = json!({"Temperatures": [
            {"Name": "CPU Temp", "ReadingCelsius": 41, "UpperThresholdNonCritical": 42, "UpperThresholdCritical": 45, "UpperThresholdFatal": 48, "Status": {"State": "Enabled", "Health": "OK"}},
            {"Name": "Gone", "Status": {"State": "Absent"}}],
            "Fans": [{"MemberId": "0", "FanName": "Fan A", "Reading": 40, "ReadingUnits": "Percent", "LowerThresholdFatal": 5, "Status": {"Health": "Warning"}}]});
        let r = from_thermal(&thermal);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].name.as_str(), r[0].value, r[0].unit.as_deref()), ("CPU Temp", Some(41.0), Some("Cel")));
        assert_eq!(
            r[0].thresholds,
            Thresholds { upper_warning: Some(42.0), upper_critical: Some(45.0), ..Thresholds::default() }
        );
        assert_eq!(
            (r[1].name.as_str(), r[1].kind, r[1].unit.as_deref(), r[1].health),
            ("Fan A", SensorKind::Fan, Some("%"), Some(Health::Warning))
        );
        assert_eq!(r[1].thresholds.lower_critical, Some(5.0), "fatal counts as critical");

        let power = json!({"PowerControl": [{"Name": "System Power", "PowerConsumedWatts": 344}],
            "Voltages": [{"Name": "VRM1", "ReadingVolts": 12.1, "LowerThresholdCritical": 11.0, "UpperThresholdCritical": 13.0, "Status": {"Health": "Critical"}}]});
        let r = from_power(&power);
        assert_eq!((r[0].kind, r[0].value, r[0].unit.as_deref()), (SensorKind::Power, Some(344.0), Some("W")));
        assert_eq!((r[1].kind, r[1].value, r[1].health), (SensorKind::Voltage, Some(12.1), Some(Health::Critical)));

        let s = from_sensor(
            &json!({"Name": "Inlet", "ReadingType": "Temperature", "Reading": 24.5, "ReadingUnits": "Cel",
            "Thresholds": {"UpperCaution": {"Reading": 40}, "UpperCritical": {"Reading": 45}}, "Status": {"Health": "OK"}}),
        );
        assert_eq!(
            (s.kind, s.value, s.unit.as_deref(), s.health),
            (SensorKind::Temperature, Some(24.5), Some("Cel"), Some(Health::Ok))
        );
        assert_eq!(
            s.thresholds,
            Thresholds { upper_warning: Some(40.0), upper_critical: Some(45.0), ..Thresholds::default() }
        );
        assert_eq!(from_sensor(&json!({"Name": "x", "ReadingType": "Rotational"})).kind, SensorKind::Fan);
    }

    #[test]
    fn a_hostile_sensor_is_clipped() {
        // Names and units a BMC writes go into the batch's status record.
        let huge = format!("Inlet\n{}", "x".repeat(1 << 20));
        let max = bmcfleet_schema::components::MAX_TEXT;
        let s = from_sensor(&json!({"Name": huge, "ReadingType": "Temperature", "Reading": 1, "ReadingUnits": huge}));
        assert!(
            s.name.chars().count() <= max && s.unit.as_ref().unwrap().chars().count() <= max,
            "{} characters",
            s.name.len()
        );
        assert!(s.name.starts_with("Inlet ") && !s.name.chars().any(char::is_control));
        let t = from_thermal(
            &json!({"Temperatures": [{"Name": huge, "ReadingCelsius": 1}], "Fans": [{"FanName": huge, "Reading": 1}]}),
        );
        assert!(t.iter().all(|r| r.name.chars().count() <= max), "{} characters", t[0].name.len());
    }
}
