//! A model of OpenBMC's Redfish server, bmcweb, built from its public
//! source and the DMTF schemas (no capture, no code of theirs): the
//! resources a current bmcweb serves for one host, with the shapes that
//! matter to a fleet tool, served by [`MockupBuilder`] like any mockup.
//!
//! # Sources
//! Followed: `openbmc/bmcweb` at commit `7debb8928f3d` (2026-08-21):
//! - log services: `redfish-core/include/utils/eventlog_utils.hpp` (EventLog:
//!   `LogService.v1_2_0`, no `LogEntryType`, `ClearLog`; entries `EntryType`
//!   `Event`, `MessageId`, `Severity`), `redfish-core/include/utils/dump_utils.hpp`
//!   (BMC and System `Dump`: `CollectDiagnosticData` and `ClearLog`, entries
//!   `EntryType` `Event` with `DiagnosticDataType` `Manager` / `OEM` +
//!   `OEMDiagnosticDataType` `System`, `AdditionalDataURI`; `FaultLog`:
//!   `ClearLog` only), `redfish-core/lib/systems_logservices_postcodes.hpp`
//!   (`PostCodes`: same service shape as EventLog, `ClearLog`; entries
//!   `EntryType` `Event`, `MessageId` `OpenBMC.0.2.BIOSPOSTCode`),
//!   `redfish-core/lib/manager_logservices_journal.hpp` and
//!   `include/utils/journal_utils.hpp` (`Journal`: no `ClearLog`; entries
//!   `EntryType` `Oem`, `OemRecordFormat` `BMC Journal Entry`),
//!   `redfish-core/lib/systems_logservices_hostlogger.hpp` (`HostLogger`:
//!   entries `Oem`, `OemRecordFormat` `Host Logger Entry`),
//!   `redfish-core/lib/log_services.hpp` (`Crashdump`: `ClearLog` and
//!   `CollectDiagnosticData`, entries `Oem`, `DiagnosticDataType` `OEM`).
//!   None of them advertises `LogEntryType`.
//! - virtual media: `redfish-core/lib/virtual_media.hpp` (every slot
//!   `VirtualMedia.v1_3_0`, `MediaTypes` `CD`+`USBStick`, `TransferMethod`
//!   `Stream`; `InsertMedia` only on legacy slots, `EjectMedia` on all;
//!   proxy slots carry `Oem.OpenBMC.WebSocketEndpoint`; no PATCH: `405`).
//!   Slot names and modes as in the default `virtual-media` configuration
//!   (Slot_0, Slot_1 proxy; Slot_2, Slot_3 legacy).
//! - software inventory: `redfish-core/lib/update_service.hpp` (every item
//!   named `Software Inventory`; told apart by `Id`, `Description`
//!   `BMC image` / `Host image`, `RelatedItem`).
//! - resets and boot: `redfish-core/lib/systems.hpp` (`ResetActionInfo`,
//!   `BootSourceOverrideTarget`/`Mode` allowable values, the `Bios` link),
//!   `redfish-core/lib/managers.hpp` (`Manager.Reset` with its ActionInfo),
//!   `redfish-core/lib/service_root.hpp`.
//! - accounts: `redfish-core/lib/account_service.hpp` (accounts at
//!   `AccountService/Accounts/<user name>`, `Id` = `UserName`, `RoleId`,
//!   `Enabled`, `Locked`, `AccountTypes`; POST to the collection creates,
//!   DELETE of a member removes).
//! - BIOS: `redfish-core/lib/bios.hpp` (`Bios.v1_1_0`, `#Bios.ResetBios`
//!   without ActionInfo, no attributes in the base service).
//!
//! bmcweb serves no `SecureBoot` resource; tests that need one add a
//! spec-built one (DSP0268 `SecureBoot` v1_1).

use super::MockupBuilder;
use serde_json::{json, Value};

pub const SYSTEM: &str = "/redfish/v1/Systems/system";
pub const MANAGER: &str = "/redfish/v1/Managers/bmc";
pub const SYSTEM_LOGS: &str = "/redfish/v1/Systems/system/LogServices";
pub const MANAGER_LOGS: &str = "/redfish/v1/Managers/bmc/LogServices";
pub const VIRTUAL_MEDIA: &str = "/redfish/v1/Managers/bmc/VirtualMedia";
pub const FIRMWARE_INVENTORY: &str = "/redfish/v1/UpdateService/FirmwareInventory";
pub const ACCOUNTS: &str = "/redfish/v1/AccountService/Accounts";
pub const BIOS: &str = "/redfish/v1/Systems/system/Bios";

/// The accounts of the model: (user name, role). The mockup's login
/// account (`admin`) is one of them.
pub const USERS: [(&str, &str); 4] =
    [("root", "Administrator"), ("admin", "Administrator"), ("ops", "Operator"), ("viewer", "ReadOnly")];

/// The path of an account.
pub fn account(user: &str) -> String {
    format!("{ACCOUNTS}/{user}")
}

/// The `ClearLog` target of a log service.
pub fn clear_log(service: &str) -> String {
    format!("{service}/Actions/LogService.ClearLog")
}

/// The log services bmcweb serves: (path, whether the event log).
pub fn log_services() -> Vec<(String, bool)> {
    let s = |id: &str| format!("{SYSTEM_LOGS}/{id}");
    let m = |id: &str| format!("{MANAGER_LOGS}/{id}");
    vec![
        (s("EventLog"), true),
        (s("PostCodes"), false),
        (s("Dump"), false),
        (s("Crashdump"), false),
        (s("HostLogger"), false),
        (m("Journal"), false),
        (m("Dump"), false),
        (m("FaultLog"), false),
    ]
}

fn service(path: &str, id: &str, name: &str, clear: bool, collect: bool) -> Value {
    let mut v = json!({"@odata.id": path, "@odata.type": "#LogService.v1_2_0.LogService", "Id": id, "Name": name,
        "Description": name, "OverWritePolicy": "WrapsWhenFull", "DateTime": "2026-08-21T10:00:00+00:00",
        "DateTimeLocalOffset": "+00:00", "Entries": {"@odata.id": format!("{path}/Entries")}});
    if clear {
        v["Actions"]["#LogService.ClearLog"] = json!({"target": clear_log(path)});
    }
    if collect {
        v["Actions"]["#LogService.CollectDiagnosticData"] =
            json!({"target": format!("{path}/Actions/LogService.CollectDiagnosticData")});
    }
    v
}

fn entries(b: MockupBuilder, service: &str, items: Vec<Value>) -> MockupBuilder {
    let coll = format!("{service}/Entries");
    let items: Vec<Value> = items
        .into_iter()
        .map(|mut e| {
            let id = e["Id"].as_str().unwrap_or("0").to_owned();
            e["@odata.id"] = json!(format!("{coll}/{id}"));
            e
        })
        .collect();
    let mut b = b.resource(
        &coll,
        json!({"@odata.id": coll, "@odata.type": "#LogEntryCollection.LogEntryCollection", "Name": "Entries",
               "Members@odata.count": items.len(), "Members": items.clone()}),
    );
    for e in items {
        let p = e["@odata.id"].as_str().unwrap_or_default().to_owned();
        b = b.resource(&p, e);
    }
    b
}

fn event(id: &str, created: &str, severity: &str, message_id: &str, message: &str) -> Value {
    json!({"@odata.type": "#LogEntry.v1_9_0.LogEntry", "Id": id, "Name": "System Event Log Entry", "EntryType": "Event",
           "Created": created, "Severity": severity, "MessageId": message_id, "Message": message, "MessageArgs": []})
}

/// The bmcweb model: root, one system (`system`), its BMC (`bmc`), log
/// services with entries, four virtual media slots, the update service
/// with a two-item software inventory. Tests add or change what they need.
pub fn service_model() -> MockupBuilder {
    let sys_logs = ["EventLog", "PostCodes", "Dump", "Crashdump", "HostLogger"];
    let mgr_logs = ["Journal", "Dump", "FaultLog"];
    let mut b = MockupBuilder::default()
        .resource(
            "/redfish/v1",
            json!({"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService",
                   "Name": "Root Service", "RedfishVersion": "1.17.0", "UUID": "3a6f1e2c-4d5b-4c8e-9f70-1b2c3d4e5f60",
                   "Systems": {"@odata.id": "/redfish/v1/Systems"}, "Managers": {"@odata.id": "/redfish/v1/Managers"},
                   "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
                   "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                   "AccountService": {"@odata.id": "/redfish/v1/AccountService"},
                   "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
                   "Tasks": {"@odata.id": "/redfish/v1/TaskService"},
                   "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"},
                             "ManagerProvidingService": {"@odata.id": MANAGER}}}),
        )
        .resource("/redfish/v1/Systems", json!({"Members": [{"@odata.id": SYSTEM}], "Members@odata.count": 1}))
        .resource(
            SYSTEM,
            json!({"@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem", "Id": "system", "Name": "system",
                   "SystemType": "Physical", "Manufacturer": "OpenBMC", "Model": "evb", "SerialNumber": "0000000",
                   "PowerState": "On",
                   "Boot": {"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
                            "BootSourceOverrideMode": "UEFI",
                            "BootSourceOverrideEnabled@Redfish.AllowableValues": ["Disabled", "Once", "Continuous"],
                            "BootSourceOverrideMode@Redfish.AllowableValues": ["Legacy", "UEFI"],
                            "BootSourceOverrideTarget@Redfish.AllowableValues":
                                ["None", "Pxe", "Hdd", "Cd", "Diags", "BiosSetup", "Usb"]},
                   "LogServices": {"@odata.id": SYSTEM_LOGS}, "Bios": {"@odata.id": BIOS},
                   "Links": {"ManagedBy": [{"@odata.id": MANAGER}], "Chassis": [{"@odata.id": "/redfish/v1/Chassis/chassis"}]},
                   "Actions": {"#ComputerSystem.Reset": {"target": format!("{SYSTEM}/Actions/ComputerSystem.Reset"),
                       "@Redfish.ActionInfo": format!("{SYSTEM}/ResetActionInfo")}}}),
        )
        .resource(
            &format!("{SYSTEM}/ResetActionInfo"),
            json!({"@odata.type": "#ActionInfo.v1_1_2.ActionInfo", "Id": "ResetActionInfo", "Name": "Reset Action Info",
                   "Parameters": [{"Name": "ResetType", "Required": true, "DataType": "String",
                       "AllowableValues": ["On", "ForceOff", "ForceOn", "ForceRestart", "GracefulRestart",
                                           "GracefulShutdown", "PowerCycle", "Nmi"]}]}),
        )
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": MANAGER}], "Members@odata.count": 1}))
        .resource(
            MANAGER,
            json!({"@odata.type": "#Manager.v1_14_0.Manager", "Id": "bmc", "Name": "OpenBmc Manager",
                   "ManagerType": "BMC", "FirmwareVersion": "2.18.0-dev-1234-g7debb89",
                   "LogServices": {"@odata.id": MANAGER_LOGS}, "VirtualMedia": {"@odata.id": VIRTUAL_MEDIA},
                   "Links": {"ManagerForServers": [{"@odata.id": SYSTEM}]},
                   "Actions": {"#Manager.Reset": {"target": format!("{MANAGER}/Actions/Manager.Reset"),
                       "@Redfish.ActionInfo": format!("{MANAGER}/ResetActionInfo")},
                       "#Manager.ResetToDefaults": {"target": format!("{MANAGER}/Actions/Manager.ResetToDefaults"),
                       "ResetType@Redfish.AllowableValues": ["ResetAll"]}}}),
        )
        .resource(
            &format!("{MANAGER}/ResetActionInfo"),
            json!({"@odata.type": "#ActionInfo.v1_1_2.ActionInfo", "Id": "ResetActionInfo", "Name": "Reset Action Info",
                   "Parameters": [{"Name": "ResetType", "Required": true, "DataType": "String",
                       "AllowableValues": ["GracefulRestart", "ForceRestart"]}]}),
        )
        .resource(
            SYSTEM_LOGS,
            json!({"@odata.type": "#LogServiceCollection.LogServiceCollection", "Name": "System Log Services Collection",
                   "Members": sys_logs.iter().map(|id| json!({"@odata.id": format!("{SYSTEM_LOGS}/{id}")})).collect::<Vec<_>>(),
                   "Members@odata.count": sys_logs.len()}),
        )
        .resource(
            MANAGER_LOGS,
            json!({"@odata.type": "#LogServiceCollection.LogServiceCollection", "Name": "Open BMC Log Services Collection",
                   "Members": mgr_logs.iter().map(|id| json!({"@odata.id": format!("{MANAGER_LOGS}/{id}")})).collect::<Vec<_>>(),
                   "Members@odata.count": mgr_logs.len()}),
        );
    let sl = |id: &str| format!("{SYSTEM_LOGS}/{id}");
    let ml = |id: &str| format!("{MANAGER_LOGS}/{id}");
    b = b
        .resource(&sl("EventLog"), service(&sl("EventLog"), "EventLog", "Event Log Service", true, false))
        .resource(&sl("PostCodes"), service(&sl("PostCodes"), "PostCodes", "POST Code Log Service", true, false))
        .resource(&sl("Dump"), service(&sl("Dump"), "Dump", "Dump LogService", true, true))
        .resource(
            &sl("Crashdump"),
            service(&sl("Crashdump"), "Crashdump", "Open BMC Oem Crashdump Service", true, true),
        )
        .resource(&sl("HostLogger"), service(&sl("HostLogger"), "HostLogger", "Host Logger Service", false, false))
        .resource(&ml("Journal"), service(&ml("Journal"), "Journal", "Open BMC Journal Log Service", false, false))
        .resource(&ml("Dump"), service(&ml("Dump"), "Dump", "Dump LogService", true, true))
        .resource(&ml("FaultLog"), service(&ml("FaultLog"), "FaultLog", "Dump LogService", true, false));
    b = entries(
        b,
        &sl("EventLog"),
        vec![
            event("1", "2026-08-20T08:00:00+00:00", "OK", "OpenBMC.0.1.DCPowerOn", "Host system DC power is on"),
            event(
                "2",
                "2026-08-20T09:30:00+00:00",
                "Critical",
                "OpenBMC.0.1.SensorThresholdCriticalHighGoingHigh",
                "CPU0 Temp sensor crossed a critical high threshold going high.",
            ),
        ],
    );
    b = entries(
        b,
        &sl("PostCodes"),
        vec![json!({"@odata.type": "#LogEntry.v1_9_0.LogEntry", "Id": "B1-1", "Name": "POST Code Log Entry",
                    "EntryType": "Event", "Created": "2026-08-20T08:00:05+00:00", "Severity": "OK",
                    "MessageId": "OpenBMC.0.2.BIOSPOSTCode", "MessageArgs": ["1", "5.000", "0x0000000000000092"],
                    "Message": "Boot Count: 1; Time Stamp Offset: 5.000 seconds; POST Code: 0x0000000000000092"})],
    );
    let dump = |id: &str, t: &str, diag: &str| {
        let mut e = json!({"@odata.type": "#LogEntry.v1_11_0.LogEntry", "Id": id, "EntryType": "Event",
                           "Created": t, "DiagnosticDataType": diag, "AdditionalDataSizeBytes": 1_048_576});
        if diag == "OEM" {
            e["OEMDiagnosticDataType"] = json!("System");
            e["Name"] = json!("System Dump Entry");
        } else {
            e["Name"] = json!("BMC Dump Entry");
        }
        e
    };
    b = entries(b, &sl("Dump"), vec![dump("1", "2026-08-20T10:00:00+00:00", "OEM")]);
    b = entries(
        b,
        &ml("Dump"),
        vec![dump("1", "2026-08-20T11:00:00+00:00", "Manager"), dump("2", "2026-08-20T12:00:00+00:00", "Manager")],
    );
    b = entries(
        b,
        &sl("Crashdump"),
        vec![
            json!({"@odata.type": "#LogEntry.v1_9_0.LogEntry", "Id": "0", "Name": "CPU Crashdump", "EntryType": "Oem",
                    "Created": "2026-08-20T10:30:00+00:00", "DiagnosticDataType": "OEM",
                    "OEMDiagnosticDataType": "PECICrashdump", "OemRecordFormat": "Crashdump URI"}),
        ],
    );
    b = entries(
        b,
        &sl("HostLogger"),
        vec![
            json!({"@odata.type": "#LogEntry.v1_9_0.LogEntry", "Id": "1", "Name": "Host Logger Entry", "EntryType": "Oem",
                    "Severity": "OK", "OemRecordFormat": "Host Logger Entry", "Message": "Linux version 6.6.0"}),
        ],
    );
    let journal: Vec<Value> = (1..=20)
        .map(|i| {
            json!({"@odata.type": "#LogEntry.v1_9_0.LogEntry", "Id": format!("{i:012x}"), "Name": "BMC Journal Entry",
                   "EntryType": "Oem", "OemRecordFormat": "BMC Journal Entry", "Severity": "OK",
                   "Created": format!("2026-08-20T13:{:02}:00+00:00", i),
                   "Message": format!("bmcweb[412]: GET /redfish/v1/Systems/system request {i}")})
        })
        .collect();
    b = entries(b, &ml("Journal"), journal);
    b = entries(b, &ml("FaultLog"), vec![]);

    // Virtual media: two proxy slots (no InsertMedia), two legacy ones.
    let slots = ["Slot_0", "Slot_1", "Slot_2", "Slot_3"];
    b = b.resource(
        VIRTUAL_MEDIA,
        json!({"@odata.type": "#VirtualMediaCollection.VirtualMediaCollection", "Name": "Virtual Media Services",
               "Members": slots.iter().map(|s| json!({"@odata.id": format!("{VIRTUAL_MEDIA}/{s}")})).collect::<Vec<_>>(),
               "Members@odata.count": slots.len()}),
    );
    for (i, slot) in slots.iter().enumerate() {
        let path = format!("{VIRTUAL_MEDIA}/{slot}");
        let mut v = json!({"@odata.id": path, "@odata.type": "#VirtualMedia.v1_3_0.VirtualMedia", "Id": slot,
                           "Name": "Virtual Removable Media", "WriteProtected": true, "ConnectedVia": "NotConnected",
                           "MediaTypes": ["CD", "USBStick"], "TransferMethod": "Stream", "Inserted": false,
                           "Oem": {"OpenBMC": {"@odata.type": "#OpenBMCVirtualMedia.v1_0_0.VirtualMedia"}},
                           "Actions": {"#VirtualMedia.EjectMedia": {"target": format!("{path}/Actions/VirtualMedia.EjectMedia")}}});
        if i < 2 {
            v["Oem"]["OpenBMC"]["WebSocketEndpoint"] = json!(format!("/nbd/{i}"));
            v["TransferProtocolType"] = json!("OEM");
        } else {
            v["Actions"]["#VirtualMedia.InsertMedia"] =
                json!({"target": format!("{path}/Actions/VirtualMedia.InsertMedia")});
        }
        b = b.resource(&path, v).deny("PATCH", &path);
    }

    // Accounts and the BIOS.
    b = b
        .resource(
            "/redfish/v1/AccountService",
            json!({"@odata.type": "#AccountService.v1_15_0.AccountService", "Id": "AccountService",
                   "Name": "Account Service", "ServiceEnabled": true, "MinPasswordLength": 8, "MaxPasswordLength": 20,
                   "Accounts": {"@odata.id": ACCOUNTS}, "Roles": {"@odata.id": "/redfish/v1/AccountService/Roles"}}),
        )
        .resource(
            ACCOUNTS,
            json!({"@odata.type": "#ManagerAccountCollection.ManagerAccountCollection", "Name": "Accounts Collection",
                   "Members": USERS.iter().map(|(u, _)| json!({"@odata.id": account(u)})).collect::<Vec<_>>(),
                   "Members@odata.count": USERS.len()}),
        );
    for (user, role) in USERS {
        b = b.resource(
            &account(user),
            json!({"@odata.id": account(user), "@odata.type": "#ManagerAccount.v1_7_0.ManagerAccount", "Id": user,
                   "Name": "User Account", "Description": "User Account", "UserName": user, "RoleId": role,
                   "Enabled": true, "Locked": false, "Password": null, "AccountTypes": ["Redfish", "IPMI", "HostConsole", "ManagerConsole", "WebUI"],
                   "Links": {"Role": {"@odata.id": format!("/redfish/v1/AccountService/Roles/{role}")}}}),
        );
    }
    b = b.resource(
        BIOS,
        json!({"@odata.id": BIOS, "@odata.type": "#Bios.v1_1_0.Bios", "Id": "BIOS", "Name": "BIOS Configuration",
               "Description": "BIOS Configuration Service",
               "Actions": {"#Bios.ResetBios": {"target": format!("{BIOS}/Actions/Bios.ResetBios")}}}),
    );

    // Update service and a software inventory of two items of one name.
    b = b
        .resource(
            "/redfish/v1/UpdateService",
            json!({"@odata.type": "#UpdateService.v1_11_1.UpdateService", "Id": "UpdateService", "Name": "Update Service",
                   "ServiceEnabled": true, "HttpPushUri": "/redfish/v1/UpdateService/update",
                   "MultipartHttpPushUri": "/redfish/v1/UpdateService/update-multipart",
                   "FirmwareInventory": {"@odata.id": FIRMWARE_INVENTORY}}),
        )
        .resource(
            FIRMWARE_INVENTORY,
            json!({"@odata.type": "#SoftwareInventoryCollection.SoftwareInventoryCollection",
                   "Name": "Software Inventory Collection",
                   "Members": [{"@odata.id": format!("{FIRMWARE_INVENTORY}/a3c1f2e9")}, {"@odata.id": format!("{FIRMWARE_INVENTORY}/5b7d9e01")}],
                   "Members@odata.count": 2}),
        )
        .resource(
            &format!("{FIRMWARE_INVENTORY}/a3c1f2e9"),
            json!({"@odata.type": "#SoftwareInventory.v1_1_0.SoftwareInventory", "Id": "a3c1f2e9", "Name": "Software Inventory",
                   "Description": "BMC image", "Version": "2.18.0-dev-1234-g7debb89", "Updateable": true,
                   "Status": {"Health": "OK", "HealthRollup": "OK", "State": "Enabled"},
                   "RelatedItem": [{"@odata.id": MANAGER}], "RelatedItem@odata.count": 1}),
        )
        .resource(
            &format!("{FIRMWARE_INVENTORY}/5b7d9e01"),
            json!({"@odata.type": "#SoftwareInventory.v1_1_0.SoftwareInventory", "Id": "5b7d9e01", "Name": "Software Inventory",
                   "Description": "Host image", "Version": "v2.4.1", "Updateable": true,
                   "Status": {"Health": "OK", "HealthRollup": "OK", "State": "Enabled"},
                   "RelatedItem": [{"@odata.id": format!("{SYSTEM}/Bios")}], "RelatedItem@odata.count": 1}),
        );
    b
}
