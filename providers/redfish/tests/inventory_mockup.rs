//! Typed component inventory against the DMTF public-rackmount1 mockup.
//! The fixture's excerpt has the ComputerSystem (which links Processors,
//! Memory, EthernetInterfaces and SimpleStorage), the chassis link `1U`
//! and the service root's UpdateService link, but not those resources:
//! they are added here in the shapes of the DMTF schemas (Processor,
//! Memory, Storage/Drive, EthernetInterface, Chassis/Power,
//! PowerSubsystem/PowerSupply, SoftwareInventory), with the values of
//! DMTF's published mockup where it has them. Also: components found only
//! through links, a failing collection left `unread` (not "removed"),
//! SimpleStorage as the fallback, a hostile oversized collection bounded,
//! and a hung collection failing the read within its deadline.

mod common;

use bmcfleet_provider::Offer;
use bmcfleet_schema::components::{component_drift, Section, MAX_COMPONENTS, MAX_ENCODED};
use bmcfleet_schema::{ErrorCode, Health};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{Fault, MockupBuilder, MockupServer};
use common::{connector, ctx};
use serde_json::{json, Value};
use std::time::Duration;

const SYS: &str = "/redfish/v1/Systems/437XR1138R2";
const CH: &str = "/redfish/v1/Chassis/1U";

fn at(path: &str, mut body: Value) -> (String, Value) {
    body["@odata.id"] = json!(path);
    (path.to_owned(), body)
}

fn coll(path: &str, members: &[&str]) -> (String, Value) {
    let m: Vec<Value> = members.iter().map(|p| json!({"@odata.id": p})).collect();
    at(path, json!({"Members": m, "Members@odata.count": members.len()}))
}

/// The resources the fixture excerpt lacks.
fn components() -> Vec<(String, Value)> {
    let p = |s: &str| format!("{SYS}/{s}");
    vec![
        coll(&p("Processors"), &[&p("Processors/CPU1"), &p("Processors/CPU2")]),
        at(
            &p("Processors/CPU1"),
            json!({"Id": "CPU1", "ProcessorType": "CPU", "Manufacturer": "Intel(R) Corporation",
            "Model": "Multi-Core Intel(R) Xeon(R) processor 7xxx Series", "MaxSpeedMHz": 3700, "TotalCores": 8, "TotalThreads": 16,
            "Status": {"State": "Enabled", "Health": "OK"}}),
        ),
        at(&p("Processors/CPU2"), json!({"Id": "CPU2", "ProcessorType": "CPU", "Status": {"State": "Absent"}})),
        coll(&p("Memory"), &[&p("Memory/DIMM1"), &p("Memory/DIMM2"), &p("Memory/DIMM3")]),
        at(
            &p("Memory/DIMM1"),
            json!({"Id": "DIMM1", "CapacityMiB": 32768, "MemoryDeviceType": "DDR4", "OperatingSpeedMhz": 2400,
            "Manufacturer": "Contoso", "PartNumber": "M393A4K40BB1", "SerialNumber": "SN-DIMM1", "Status": {"State": "Enabled", "Health": "OK"}}),
        ),
        at(
            &p("Memory/DIMM2"),
            json!({"Id": "DIMM2", "CapacityMiB": 32768, "MemoryDeviceType": "DDR4", "SerialNumber": "SN-DIMM2",
            "Status": {"State": "Enabled", "Health": "Warning"}}),
        ),
        at(&p("Memory/DIMM3"), json!({"Id": "DIMM3", "Status": {"State": "Absent"}})),
        at(
            &p("SimpleStorage/1"),
            json!({"Id": "1", "Devices": [
            {"Name": "SATA Bay 1", "Manufacturer": "Contoso", "Model": "3000GT8", "CapacityBytes": 8000000000000u64, "Status": {"State": "Enabled", "Health": "OK"}},
            {"Name": "SATA Bay 2", "Status": {"State": "Absent"}}]}),
        ),
        coll(&p("SimpleStorage"), &[&p("SimpleStorage/1")]),
        coll(&p("EthernetInterfaces"), &[&p("EthernetInterfaces/12446A3B0411")]),
        at(
            &p("EthernetInterfaces/12446A3B0411"),
            json!({"Id": "12446A3B0411", "MACAddress": "12:44:6A:3B:04:11",
            "PermanentMACAddress": "12:44:6A:3B:04:11", "SpeedMbps": 1000, "LinkStatus": "LinkUp", "Status": {"State": "Enabled", "Health": "OK"}}),
        ),
        at(CH, json!({"Id": "1U", "Power": {"@odata.id": format!("{CH}/Power")}})),
        at(
            &format!("{CH}/Power"),
            json!({"Id": "Power", "PowerSupplies": [
            {"@odata.id": format!("{CH}/Power#/PowerSupplies/0"), "MemberId": "0", "Name": "Power Supply Bay", "Model": "499253-B21",
             "Manufacturer": "ManufacturerName", "SerialNumber": "1Z0000001", "PartNumber": "0000001A3A", "FirmwareVersion": "1.00",
             "PowerCapacityWatts": 800, "Status": {"State": "Enabled", "Health": "Warning"}}]}),
        ),
        at(
            "/redfish/v1/UpdateService",
            json!({"Id": "UpdateService", "FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"}}),
        ),
        // Expanded members, as some BMCs send them.
        at(
            "/redfish/v1/UpdateService/FirmwareInventory",
            json!({"Members": [
            {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC", "Id": "BMC", "Name": "Contoso BMC Firmware", "Version": "1.45.455b66-rev4", "Updateable": true},
            {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BIOS", "Id": "BIOS", "Name": "Contoso BIOS Firmware", "Version": "P79 v1.45", "Updateable": true}]}),
        ),
    ]
}

fn builder(dir: &std::path::Path) -> MockupBuilder {
    let mut b = MockupServer::builder()
        .dir(dir)
        .expect("dmtf mockup")
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": "/redfish/v1/Managers/BMC"}]}));
    for (path, body) in components() {
        b = b.resource(&path, body);
    }
    b
}

#[tokio::test]
async fn components_are_read_through_the_links_the_bmc_gives() {
    let dir = mockup_dir("dmtf-public-rackmount1");
    let server = builder(&dir).start().await.unwrap();
    let mut s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let inv = s.inventory().unwrap().inventory(&ctx(10)).await.unwrap();
    assert!(inv.unread.is_empty() && inv.truncated.is_empty(), "{inv:?}");
    // The identity fields stay as they were.
    assert_eq!(
        (inv.manufacturer.as_deref(), inv.firmware_version.as_deref()),
        (Some("Contoso"), Some("1.45.455b66-rev4"))
    );

    assert_eq!(inv.processors.len(), 1, "the absent socket is left out: {:?}", inv.processors);
    let cpu = &inv.processors[0];
    assert_eq!(
        (cpu.id.as_str(), cpu.cores, cpu.threads, cpu.max_speed_mhz, cpu.health),
        ("CPU1", Some(8), Some(16), Some(3700), Some(Health::Ok))
    );
    let dimms: Vec<(&str, Option<u64>, Option<Health>)> =
        inv.memory.iter().map(|m| (m.id.as_str(), m.capacity_mib, m.health)).collect();
    assert_eq!(dimms, [("DIMM1", Some(32768), Some(Health::Ok)), ("DIMM2", Some(32768), Some(Health::Warning))]);
    assert_eq!(inv.memory[0].part_number.as_deref(), Some("M393A4K40BB1"));
    // No Storage link: the SimpleStorage devices.
    let drives: Vec<(&str, Option<u64>)> = inv.drives.iter().map(|d| (d.id.as_str(), d.capacity_bytes)).collect();
    assert_eq!(drives, [("1.SATA Bay 1", Some(8_000_000_000_000))]);
    assert_eq!(inv.nics.len(), 1);
    assert_eq!(
        (inv.nics[0].mac_addresses.as_slice(), inv.nics[0].speed_mbps),
        (&["12:44:6a:3b:04:11".to_owned()][..], Some(1000))
    );
    let psu = &inv.power_supplies[0];
    assert_eq!(
        (psu.id.as_str(), psu.capacity_w, psu.serial.as_deref(), psu.firmware_version.as_deref()),
        ("0", Some(800), Some("1Z0000001"), Some("1.00"))
    );
    let fw: Vec<(&str, Option<&str>)> = inv.firmware.iter().map(|f| (f.id.as_str(), f.version.as_deref())).collect();
    assert_eq!(fw, [("BMC", Some("1.45.455b66-rev4")), ("BIOS", Some("P79 v1.45"))]);
    // Expanded firmware members were not read again; nothing was written.
    assert!(server.requests_to("GET", "/redfish/v1/UpdateService/FirmwareInventory/BMC").is_empty());
    assert!(
        server.writes().iter().all(|w| w.path.starts_with("/redfish/v1/SessionService")),
        "only the login was a write"
    );

    // A DIMM swapped and the BMC flashed: drift names both.
    server.merge_resource(&format!("{SYS}/Memory/DIMM2"), &json!({"SerialNumber": "SN-NEW"}));
    server.merge_resource("/redfish/v1/UpdateService/FirmwareInventory", &json!({"Members": [
        {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC", "Id": "BMC", "Name": "Contoso BMC Firmware", "Version": "1.46", "Updateable": true},
        {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BIOS", "Id": "BIOS", "Name": "Contoso BIOS Firmware", "Version": "P79 v1.45", "Updateable": true}]}));
    let after = s.inventory().unwrap().inventory(&ctx(10)).await.unwrap();
    let d = component_drift(&inv, &after);
    let keys: Vec<&str> = d.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(keys, ["memory.DIMM2.serial", "firmware.BMC"], "{d:?}");
    assert_eq!((d[1].from.as_deref(), d[1].to.as_deref()), (Some("1.45.455b66-rev4"), Some("1.46")));
}

#[tokio::test]
async fn newer_resources_are_preferred_and_a_failing_collection_is_unread() {
    let dir = mockup_dir("dmtf-public-rackmount1");
    let server = builder(&dir)
        // Storage with Drives, and a PowerSubsystem beside the older Power.
        .resource(SYS, {
            let mut sys: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("Systems/437XR1138R2/index.json")).unwrap()).unwrap();
            sys["Storage"] = json!({"@odata.id": format!("{SYS}/Storage")});
            sys
        })
        .resource(&format!("{SYS}/Storage"), json!({"Members": [{"@odata.id": format!("{SYS}/Storage/1")}]}))
        .resource(&format!("{SYS}/Storage/1"), json!({"Id": "1", "Drives": [{"@odata.id": format!("{CH}/Drives/Disk.Bay.0")}, {"@odata.id": format!("{CH}/Drives/Disk.Bay.1")}]}))
        .resource(&format!("{CH}/Drives/Disk.Bay.0"), json!({"Id": "Disk.Bay.0", "Model": "PM883", "SerialNumber": "S1", "CapacityBytes": 960197124096u64,
            "MediaType": "SSD", "Protocol": "SATA", "Revision": "HXT7", "Status": {"Health": "OK"}}))
        .resource(&format!("{CH}/Drives/Disk.Bay.1"), json!({"Id": "Disk.Bay.1", "Status": {"State": "Absent"}}))
        .resource(CH, json!({"@odata.id": CH, "Id": "1U", "Power": {"@odata.id": format!("{CH}/Power")},
            "PowerSubsystem": {"@odata.id": format!("{CH}/PowerSubsystem")}}))
        .resource(&format!("{CH}/PowerSubsystem"), json!({"PowerSupplies": {"@odata.id": format!("{CH}/PowerSubsystem/PowerSupplies")}}))
        .resource(&format!("{CH}/PowerSubsystem/PowerSupplies"), json!({"Members": [{"@odata.id": format!("{CH}/PowerSubsystem/PowerSupplies/Bay1")}]}))
        .resource(&format!("{CH}/PowerSubsystem/PowerSupplies/Bay1"), json!({"Id": "Bay1", "Model": "RKS-830W", "PowerCapacityWatts": 830,
            "FirmwareVersion": "2.1", "Status": {"Health": "OK"}}))
        .start()
        .await
        .unwrap();
    let mut s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let inv = s.inventory().unwrap().inventory(&ctx(10)).await.unwrap();
    let drives: Vec<(&str, Option<&str>, Option<&str>)> =
        inv.drives.iter().map(|d| (d.id.as_str(), d.protocol.as_deref(), d.firmware_version.as_deref())).collect();
    assert_eq!(
        drives,
        [("Disk.Bay.0", Some("SATA"), Some("HXT7"))],
        "Storage drives, the empty bay left out, SimpleStorage not needed"
    );
    assert!(server.requests_to("GET", &format!("{SYS}/SimpleStorage")).is_empty());
    let psus: Vec<(&str, Option<u32>)> = inv.power_supplies.iter().map(|p| (p.id.as_str(), p.capacity_w)).collect();
    assert_eq!(psus, [("Bay1", Some(830))], "PowerSubsystem preferred");
    assert!(server.requests_to("GET", &format!("{CH}/Power")).is_empty());

    // The BMC fails the Memory collection and a firmware member: those
    // sections are unread (not empty), the read still succeeds, and drift
    // says nothing about them.
    server.merge_resource(
        "/redfish/v1/UpdateService/FirmwareInventory",
        &json!({"Members": [{"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory/BMC"}]}),
    );
    server.push_fault(Fault::status("GET", &format!("{SYS}/Memory"), 500));
    server.push_fault(Fault::status("GET", "/redfish/v1/UpdateService/FirmwareInventory/BMC", 503));
    let failed = s.inventory().unwrap().inventory(&ctx(10)).await.unwrap();
    assert_eq!(failed.unread, [Section::Memory, Section::Firmware]);
    assert!(failed.memory.is_empty() && failed.firmware.is_empty());
    assert!(component_drift(&inv, &failed).is_empty(), "{:?}", component_drift(&inv, &failed));
    assert_eq!(failed.drives, inv.drives);

    // A collection that does not answer fails the read, within its deadline.
    server.clear_faults();
    server.push_fault(Fault::hang("GET", &format!("{SYS}/Processors")));
    let started = tokio::time::Instant::now();
    let e = s.inventory().unwrap().inventory(&common::ctx(2)).await.unwrap_err();
    assert!(matches!(e.code, ErrorCode::Timeout | ErrorCode::DeadlineExceeded), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn a_hostile_collection_is_bounded() {
    let dir = mockup_dir("dmtf-public-rackmount1");
    // 3000 expanded DIMMs with long strings and repeated ids (well under the
    // 8 MiB response limit), and a link to another host.
    let long = "X".repeat(600);
    let dimms: Vec<Value> = (0..3000)
        .map(|i| {
            json!({"@odata.id": format!("{SYS}/Memory/D{i}"), "Id": format!("D{}", i % 1500), "CapacityMiB": 8192,
            "SerialNumber": long, "PartNumber": long})
        })
        .collect();
    let server = builder(&dir)
        .resource(&format!("{SYS}/Memory"), json!({"Members": dimms}))
        .resource(
            &format!("{SYS}/EthernetInterfaces"),
            json!({"Members": [{"@odata.id": "https://192.0.2.1/redfish/v1/Systems/x/EthernetInterfaces/1"}]}),
        )
        .start()
        .await
        .unwrap();
    let mut s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let inv = s.inventory().unwrap().inventory(&ctx(20)).await.unwrap();
    assert!(!inv.memory.is_empty() && inv.memory.len() <= MAX_COMPONENTS, "{}", inv.memory.len());
    assert!(inv.truncated.contains(&Section::Memory));
    assert!(serde_json::to_vec(&inv).unwrap().len() <= MAX_ENCODED);
    let ids: std::collections::BTreeSet<&str> = inv.memory.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids.len(), inv.memory.len(), "unique ids");
    assert!(inv.memory.iter().all(|m| m.serial.as_ref().unwrap().len() <= 128));
    // The link to another host was refused, not followed; the section says so.
    assert!(inv.unread.contains(&Section::Nics), "{:?}", inv.unread);
    assert!(inv.nics.is_empty());
}
