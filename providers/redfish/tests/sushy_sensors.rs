//! Sensors and the event log against a real `sushy-emulator` 2.2 (fake
//! driver): its Chassis `Thermal` resource (CPU and intake temperatures,
//! a fan) is read with thresholds and health; it has no `Power`, `Sensors`
//! or LogServices, so the event log is `unsupported`. Skips when
//! sushy-emulator is missing, unless `BMCFLEET_REQUIRE_PEERS=1`.

mod common;

use bmcfleet_provider::{EventLog, Sensors};
use bmcfleet_schema::{ErrorCode, Health, SensorKind, Thresholds};
use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
use common::{connector, ctx};

#[tokio::test]
async fn thermal_sensors_with_thresholds_and_no_event_log() {
    let builder =
        SushyEmulator::builder().systems(vec![FakeSystem::new("9a1d0c6e-1111-4c3a-9d55-000000000003", "node3", "On")]);
    let Some(emu) = SushyEmulator::start_or_skip(builder, "thermal_sensors_with_thresholds_and_no_event_log").await
    else {
        return;
    };
    let mut s = connector().open(&ctx(20), &emu.target(), &emu.credentials()).await.expect("connect");
    let sensors = s.sensors(&ctx(20)).await.unwrap();
    let by = |name: &str| sensors.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("{name} in {sensors:?}"));
    let intake = by("Chassis Intake Temp");
    assert_eq!(
        (intake.kind, intake.value, intake.unit.as_deref(), intake.health),
        (SensorKind::Temperature, Some(25.0), Some("Cel"), Some(Health::Ok))
    );
    assert_eq!(
        intake.thresholds,
        Thresholds {
            lower_critical: Some(5.0),
            lower_warning: Some(10.0),
            upper_warning: Some(30.0),
            upper_critical: Some(40.0)
        }
    );
    let cpu = by("CPU Temp");
    assert_eq!((cpu.value, cpu.thresholds.upper_critical), (Some(41.0), Some(45.0)));
    let fan = sensors.iter().find(|r| r.kind == SensorKind::Fan).expect("a fan");
    assert_eq!((fan.value, fan.unit.as_deref()), (Some(2100.0), Some("RPM")));

    let e = s.read_event_log(&ctx(20), 10, 0).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
}
