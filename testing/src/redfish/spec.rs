//! A minimal Redfish service built from DSP0266 (no vendor capture), for
//! tests that need a BMC without fixtures.

use super::MockupBuilder;
use serde_json::json;

pub const SYSTEM: &str = "/redfish/v1/Systems/1";
pub const RESET: &str = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset";
pub const MANAGER: &str = "/redfish/v1/Managers/BMC";

/// A minimal service built from DSP0266 (no vendor capture): root, one
/// system with a reset action and a boot object, one manager. Tests add
/// what they need on top.
pub fn spec_service() -> MockupBuilder {
    MockupBuilder::default()
        .resource(
            "/redfish/v1",
            json!({"@odata.id": "/redfish/v1/", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService",
                   "RedfishVersion": "1.15.0", "Vendor": "Spec",
                   "Systems": {"@odata.id": "/redfish/v1/Systems"},
                   "Managers": {"@odata.id": "/redfish/v1/Managers"},
                   "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                   "AccountService": {"@odata.id": "/redfish/v1/AccountService"},
                   "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}),
        )
        .resource(
            "/redfish/v1/Systems",
            json!({"Members": [{"@odata.id": SYSTEM}], "Members@odata.count": 1}),
        )
        .resource(
            SYSTEM,
            json!({"@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1", "Name": "spec system",
                   "Manufacturer": "Spec", "Model": "S1", "SerialNumber": "SN1", "PowerState": "On",
                   "Boot": {"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
                            "BootSourceOverrideMode": "UEFI",
                            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Cd", "Hdd", "BiosSetup"]},
                   "Links": {"ManagedBy": [{"@odata.id": MANAGER}]},
                   "Actions": {"#ComputerSystem.Reset": {"target": RESET,
                       "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle", "Nmi"]}}}),
        )
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": MANAGER}], "Members@odata.count": 1}))
        .resource(
            MANAGER,
            json!({"@odata.type": "#Manager.v1_17_0.Manager", "Id": "BMC", "ManagerType": "BMC", "FirmwareVersion": "1.0.0",
                   "Actions": {"#Manager.Reset": {"target": "/redfish/v1/Managers/BMC/Actions/Manager.Reset",
                       "ResetType@Redfish.AllowableValues": ["ForceRestart", "GracefulRestart"]}}}),
        )
}
