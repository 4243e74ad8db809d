//! BIOS settings and secure boot keys against the DMTF public-rackmount1
//! mockup (Bios with a settings object, `Bios.ResetBios`), extended from
//! the DMTF schemas with what it lacks: the Registries collection, a
//! registry file whose `Location` gives the AttributeRegistry
//! (`BiosAttributeRegistryP89.v1_0_0`) and a SecureBoot resource with
//! `SecureBoot.ResetKeys`. (sushy-emulator 2.2's fake driver implements
//! no BIOS; its secure boot is tested in sushy_bios.rs.) Faults: attribute
//! not in the registry, read-only, out of range, not an allowed value: all
//! refused before anything is written.

mod common;

use bmcfleet_provider::{Bios, SecureBoot};
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{BiosSet, ErrorCode, SecureBootResetKeys};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::MockupServer;
use common::{connector, ctx};
use serde_json::{json, Value};

const SYS: &str = "/redfish/v1/Systems/437XR1138R2";

fn registry() -> Value {
    json!({"@odata.id": "/redfish/v1/Registries/BiosAttributeRegistryP89/en", "@odata.type": "#AttributeRegistry.v1_3_0.AttributeRegistry",
        "Id": "BiosAttributeRegistryP89.v1_0_0", "RegistryVersion": "1.0.0", "Language": "en", "OwningEntity": "Contoso",
        "RegistryEntries": {"Attributes": [
            {"AttributeName": "BootMode", "Type": "Enumeration", "ReadOnly": false, "Value": [{"ValueName": "Bios"}, {"ValueName": "Uefi"}]},
            {"AttributeName": "EmbeddedSata", "Type": "Enumeration", "ReadOnly": true, "Value": [{"ValueName": "Raid"}, {"ValueName": "Ahci"}]},
            {"AttributeName": "ProcCoreDisable", "Type": "Integer", "LowerBound": 0, "UpperBound": 8},
            {"AttributeName": "AdminPhone", "Type": "String", "MaxLength": 20},
            {"AttributeName": "ProcTurboMode", "Type": "Enumeration", "Value": [{"ValueName": "Enabled"}, {"ValueName": "Disabled"}]}]}})
}

async fn start() -> (MockupServer, RedfishSession) {
    let dir = mockup_dir("dmtf-public-rackmount1");
    let server = MockupServer::builder()
        .dir(&dir)
        .unwrap()
        .resource("/redfish/v1/Registries", json!({"@odata.id": "/redfish/v1/Registries", "Members": [
            {"@odata.id": "/redfish/v1/Registries/Base"}, {"@odata.id": "/redfish/v1/Registries/BiosAttributeRegistryP89"}]}))
        .resource("/redfish/v1/Registries/Base", json!({"@odata.id": "/redfish/v1/Registries/Base", "Id": "Base", "Registry": "Base.1.0", "Location": []}))
        .resource("/redfish/v1/Registries/BiosAttributeRegistryP89", json!({"@odata.id": "/redfish/v1/Registries/BiosAttributeRegistryP89",
            "@odata.type": "#MessageRegistryFile.v1_1_0.MessageRegistryFile", "Id": "BiosAttributeRegistryP89.v1_0_0", "Registry": "BiosAttributeRegistryP89.v1_0_0",
            "Location": [{"Language": "en", "Uri": "/redfish/v1/Registries/BiosAttributeRegistryP89/en"}]}))
        .resource("/redfish/v1/Registries/BiosAttributeRegistryP89/en", registry())
        .resource(&format!("{SYS}/SecureBoot"), json!({"@odata.id": format!("{SYS}/SecureBoot"), "@odata.type": "#SecureBoot.v1_1_0.SecureBoot", "Id": "SecureBoot",
            "SecureBootEnable": false, "SecureBootCurrentBoot": "Disabled", "SecureBootMode": "UserMode",
            "Actions": {"#SecureBoot.ResetKeys": {"target": format!("{SYS}/SecureBoot/Actions/SecureBoot.ResetKeys"),
                "ResetKeysType@Redfish.AllowableValues": ["ResetAllKeysToDefault", "DeleteAllKeys"]}}}))
        .start()
        .await
        .unwrap();
    let s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    (server, s)
}

fn writes(server: &MockupServer) -> Vec<(String, String, Value)> {
    server
        .writes()
        .into_iter()
        .filter(|r| !r.path.starts_with("/redfish/v1/SessionService"))
        .map(|r| (r.method.clone(), r.path.clone(), r.json().unwrap_or(Value::Null)))
        .collect()
}

#[tokio::test]
async fn bios_is_read_with_its_registry_and_set_through_the_settings_object() {
    let (server, mut s) = start().await;
    let c = ctx(10);
    let bios = s.bios(&c).await.unwrap();
    assert_eq!(bios.attributes.get("BootMode"), Some(&json!("Uefi")));
    // What waits in the settings object and differs from the current values.
    assert_eq!(bios.pending.get("EmbeddedSata"), Some(&json!("Ahci")));
    assert_eq!(bios.pending.get("ProcTurboMode"), Some(&json!("Disabled")));
    assert!(!bios.pending.contains_key("BootMode"));
    let names: Vec<&str> = bios.registry.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["AdminPhone", "BootMode", "EmbeddedSata", "ProcCoreDisable", "ProcTurboMode"]);
    assert!(bios.registry.iter().any(|a| a.name == "EmbeddedSata" && a.read_only));

    server.clear_requests();
    for (attrs, why) in [
        (json!({"NoSuchKnob": 1}), "`NoSuchKnob` is not in the BIOS attribute registry"),
        (json!({"EmbeddedSata": "Ahci"}), "`EmbeddedSata` is read-only"),
        (json!({"ProcCoreDisable": 9}), "`ProcCoreDisable` must be from 0 to 8, not 9"),
        (json!({"BootMode": "Legacy"}), "`BootMode` must be one of Bios, Uefi"),
        (json!({"AdminPhone": "x".repeat(21)}), "`AdminPhone` takes at most 20 characters"),
    ] {
        let set = BiosSet { attributes: serde_json::from_value(attrs).unwrap() };
        let e = s.set_bios(&c, &set).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidField);
        assert!(e.message.contains(why), "{e}");
    }
    assert!(writes(&server).is_empty(), "nothing was written: {:?}", writes(&server));

    let set =
        BiosSet { attributes: serde_json::from_value(json!({"BootMode": "Bios", "ProcCoreDisable": 2})).unwrap() };
    let pending = s.set_bios(&c, &set).await.unwrap();
    assert_eq!(pending.apply_time.as_deref(), Some("OnReset"));
    assert_eq!(
        writes(&server),
        vec![(
            "PATCH".to_owned(),
            format!("{SYS}/Bios/Settings"),
            json!({"Attributes": {"BootMode": "Bios", "ProcCoreDisable": 2}})
        )]
    );
    let after = s.bios(&c).await.unwrap();
    assert_eq!(after.attributes.get("BootMode"), Some(&json!("Uefi")), "the live value waits for the reset");
    assert_eq!(after.pending.get("BootMode"), Some(&json!("Bios")));

    server.clear_requests();
    s.reset_bios(&c).await.unwrap();
    assert_eq!(writes(&server), vec![("POST".to_owned(), format!("{SYS}/Bios/Actions/Bios.ResetBios"), json!({}))]);
}

#[tokio::test]
async fn secure_boot_keys_reset_with_the_offered_types_only() {
    let (server, mut s) = start().await;
    let c = ctx(10);
    let sb = s.secure_boot(&c).await.unwrap();
    assert_eq!((sb.enabled, sb.mode.as_deref()), (false, Some("UserMode")));
    assert!(s.set_secure_boot(&c, true).await.unwrap().enabled);
    server.clear_requests();
    s.set_secure_boot(&c, true).await.unwrap();
    assert!(writes(&server).is_empty(), "already enabled: nothing sent");

    s.reset_secure_boot_keys(&c, SecureBootResetKeys::DeleteAllKeys).await.unwrap();
    assert_eq!(
        writes(&server),
        vec![(
            "POST".to_owned(),
            format!("{SYS}/SecureBoot/Actions/SecureBoot.ResetKeys"),
            json!({"ResetKeysType": "DeleteAllKeys"})
        )]
    );
    let e = s.reset_secure_boot_keys(&c, SecureBootResetKeys::DeletePk).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField);
    assert!(e.message.contains("DeletePK") && e.message.contains("ResetAllKeysToDefault, DeleteAllKeys"), "{e}");
}
