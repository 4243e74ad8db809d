//! Sensors against the DMTF public-rackmount1 mockup, extended from the
//! DMTF schemas with its chassis `1U`: first with the newer `Sensors`
//! collection (links to Sensor resources; an absent sensor is left out),
//! then, without it, with `Thermal` and `Power` (which sushy-emulator
//! lacks: it has Thermal only).

mod common;

use bmcfleet_provider::Sensors;
use bmcfleet_schema::{Health, SensorKind, Thresholds};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::MockupServer;
use common::{connector, ctx};
use serde_json::json;

const CH: &str = "/redfish/v1/Chassis/1U";

#[tokio::test]
async fn the_sensors_collection_is_preferred_then_thermal_and_power() {
    let dir = mockup_dir("dmtf-public-rackmount1");
    let sensor = |id: &str, body: serde_json::Value| {
        let mut b = body;
        b["@odata.id"] = json!(format!("{CH}/Sensors/{id}"));
        b["Id"] = json!(id);
        b
    };
    let server = MockupServer::builder()
        .dir(&dir)
        .unwrap()
        .resource(CH, json!({"@odata.id": CH, "Id": "1U", "Sensors": {"@odata.id": format!("{CH}/Sensors")},
            "Thermal": {"@odata.id": format!("{CH}/Thermal")}, "Power": {"@odata.id": format!("{CH}/Power")}}))
        .resource(&format!("{CH}/Sensors"), json!({"@odata.id": format!("{CH}/Sensors"), "Members": [
            {"@odata.id": format!("{CH}/Sensors/Inlet")}, {"@odata.id": format!("{CH}/Sensors/PS1")}, {"@odata.id": format!("{CH}/Sensors/Gone")}]}))
        .resource(&format!("{CH}/Sensors/Inlet"), sensor("Inlet", json!({"Name": "Inlet Temp", "ReadingType": "Temperature", "Reading": 31.5, "ReadingUnits": "Cel",
            "Thresholds": {"UpperCaution": {"Reading": 30}, "UpperCritical": {"Reading": 40}}, "Status": {"State": "Enabled", "Health": "Warning"}})))
        .resource(&format!("{CH}/Sensors/PS1"), sensor("PS1", json!({"Name": "PS1 Input Power", "ReadingType": "Power", "Reading": 344, "ReadingUnits": "W", "Status": {"Health": "OK"}})))
        .resource(&format!("{CH}/Sensors/Gone"), sensor("Gone", json!({"Name": "Fan 9", "ReadingType": "Rotational", "Status": {"State": "Absent"}})))
        .resource(&format!("{CH}/Thermal"), json!({"@odata.id": format!("{CH}/Thermal"), "Temperatures": [{"Name": "CPU1", "ReadingCelsius": 50, "UpperThresholdCritical": 90}],
            "Fans": [{"Name": "Fan 1", "Reading": 4000, "ReadingUnits": "RPM", "LowerThresholdCritical": 500, "Status": {"Health": "OK"}}]}))
        .resource(&format!("{CH}/Power"), json!({"@odata.id": format!("{CH}/Power"), "PowerControl": [{"Name": "System", "PowerConsumedWatts": 250}],
            "Voltages": [{"Name": "12V", "ReadingVolts": 12.05, "LowerThresholdCritical": 11.0, "UpperThresholdCritical": 13.0, "Status": {"Health": "OK"}}]}))
        .start()
        .await
        .unwrap();
    let mut s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();

    let r = s.sensors(&ctx(10)).await.unwrap();
    let names: Vec<&str> = r.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["Inlet Temp", "PS1 Input Power"], "the Sensors collection, absent sensor left out");
    assert_eq!((r[0].kind, r[0].value, r[0].health), (SensorKind::Temperature, Some(31.5), Some(Health::Warning)));
    assert_eq!(
        r[0].thresholds,
        Thresholds { upper_warning: Some(30.0), upper_critical: Some(40.0), ..Thresholds::default() }
    );
    assert_eq!((r[1].kind, r[1].unit.as_deref()), (SensorKind::Power, Some("W")));
    assert!(server.requests_to("GET", &format!("{CH}/Thermal")).is_empty(), "Thermal not read when Sensors exists");

    // An older BMC: no Sensors collection.
    server.set_resource(CH, json!({"@odata.id": CH, "Id": "1U", "Thermal": {"@odata.id": format!("{CH}/Thermal")}, "Power": {"@odata.id": format!("{CH}/Power")}}));
    let r = s.sensors(&ctx(10)).await.unwrap();
    let got: Vec<(&str, SensorKind, Option<f64>)> = r.iter().map(|x| (x.name.as_str(), x.kind, x.value)).collect();
    assert_eq!(
        got,
        [
            ("CPU1", SensorKind::Temperature, Some(50.0)),
            ("Fan 1", SensorKind::Fan, Some(4000.0)),
            ("System", SensorKind::Power, Some(250.0)),
            ("12V", SensorKind::Voltage, Some(12.05))
        ]
    );
    assert_eq!(
        r[3].thresholds,
        Thresholds { lower_critical: Some(11.0), upper_critical: Some(13.0), ..Thresholds::default() }
    );
}

/// A hostile BMC listing its chassis, and the chassis' sensors, thousands of
/// times over: the read stays bounded (as the inventory's is) instead of
/// running one GET after another until the action's deadline.
#[tokio::test]
async fn endless_chassis_and_sensor_lists_are_read_within_a_budget() {
    let dir = mockup_dir("dmtf-public-rackmount1");
    const SYS: &str = "/redfish/v1/Systems/437XR1138R2";
    let inlet = format!("{CH}/Sensors/Inlet");
    let server = MockupServer::builder()
        .dir(&dir)
        .unwrap()
        .resource(CH, json!({"@odata.id": CH, "Id": "1U", "Sensors": {"@odata.id": format!("{CH}/Sensors")}}))
        .resource(&format!("{CH}/Sensors"), json!({"@odata.id": format!("{CH}/Sensors"), "Members": vec![json!({"@odata.id": inlet}); 2000]}))
        .resource(&inlet, json!({"@odata.id": inlet, "Id": "Inlet", "Name": "Inlet Temp", "ReadingType": "Temperature", "Reading": 31.5, "ReadingUnits": "Cel"}))
        .start()
        .await
        .unwrap();
    server.merge_resource(SYS, &json!({"Links": {"Chassis": vec![json!({"@odata.id": CH}); 50]}}));
    let mut s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let r = s.sensors(&ctx(10)).await.unwrap();
    let chassis = server.requests_to("GET", CH).len();
    let sensors = server.requests_to("GET", &inlet).len();
    assert!(chassis <= 8, "{chassis} chassis reads");
    assert!(sensors <= 1024, "{sensors} sensor reads");
    assert!(!r.is_empty() && r.len() <= sensors);
}
