//! Sensors against a real OpenIPMI `ipmi_sim`: the three full sensor
//! records and live values of tests/ipmi_sim/bmc.emu.in, read through the
//! SDR repository and Get Sensor Reading, cross-checked with
//! `ipmitool sensor` (its values and thresholds).

mod common;

use bmcfleet_provider::Sensors;
use bmcfleet_schema::{Health, SensorKind, Thresholds};
use common::{ctx, open, start_sim};

#[tokio::test]
async fn sensors_read_with_units_thresholds_and_health_agree_with_ipmitool() {
    let sim = start_sim();
    let mut s = open(&sim).await;
    let sensors = s.sensors(&ctx()).await.unwrap();
    let tool = sim.ipmitool(&["sensor"]).unwrap();
    let by = |name: &str| {
        sensors.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{name} in {sensors:?}\nipmitool:\n{tool}"))
    };

    let cpu = by("CPU Temp");
    assert_eq!(
        (cpu.kind, cpu.value, cpu.unit.as_deref(), cpu.health),
        (SensorKind::Temperature, Some(45.0), Some("Cel"), Some(Health::Ok))
    );
    assert_eq!(
        cpu.thresholds,
        Thresholds {
            lower_critical: Some(5.0),
            lower_warning: Some(10.0),
            upper_warning: Some(75.0),
            upper_critical: Some(85.0)
        }
    );
    let fan = by("Fan 1");
    assert_eq!(
        (fan.kind, fan.value, fan.unit.as_deref(), fan.health),
        (SensorKind::Fan, Some(750.0), Some("RPM"), Some(Health::Warning))
    );
    assert_eq!(
        fan.thresholds,
        Thresholds { lower_critical: Some(500.0), lower_warning: Some(1000.0), ..Thresholds::default() }
    );
    let v = by("VCore");
    assert_eq!(
        (v.kind, v.value, v.unit.as_deref(), v.health),
        (SensorKind::Voltage, Some(1.2), Some("V"), Some(Health::Ok))
    );
    assert_eq!(sensors.len(), 3);

    // ipmitool's `sensor` table: name | value | unit | status | lnr | lcr | lnc | unc | ucr | unr.
    for r in &sensors {
        let line = tool
            .lines()
            .find(|l| l.split('|').next().map(str::trim) == Some(r.name.as_str()))
            .unwrap_or_else(|| panic!("{} in\n{tool}", r.name));
        let cols: Vec<&str> = line.split('|').map(str::trim).collect();
        let value: f64 = cols[1].parse().unwrap();
        assert!((value - r.value.unwrap()).abs() < 1e-3, "{line}");
        let status = match r.health {
            Some(Health::Ok) => "ok",
            Some(Health::Warning) => "nc",
            _ => "cr",
        };
        assert_eq!(cols[3], status, "{line}");
        let num = |c: &str| c.parse::<f64>().ok();
        assert_eq!(num(cols[5]), r.thresholds.lower_critical, "{line}");
        assert_eq!(num(cols[8]), r.thresholds.upper_critical, "{line}");
    }
}
