//! Per-vendor behaviour against mockups captured from real BMCs (shared
//! fixtures: Dell iDRAC9/17G, Lenovo XCC, Supermicro X12, DMTF
//! public-rackmount1), served by `MockupServer`, which records every request.
//! Resources the captures lack (account services, Ethernet interfaces,
//! collections) are built in the test from DSP0266 and the vendors'
//! documented behaviour; each test says so.
//!
//! The fixtures are the repository's own (`testdata/redfish`): a missing
//! one fails the test.

mod common;

use bmcfleet_provider::BmcSession;
use bmcfleet_provider::Offer;
use bmcfleet_redfish::{AuthKind, RedfishSession};
use bmcfleet_schema::{
    BmcResetKind, BootDevice, BootDeviceRequest, ErrorCode, MediaKind, NetworkSourceOp, PowerOp, PowerState,
    StaticIpv4, UserRole, UserSpec, UserUpdate,
};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{Fault, MockupBuilder, MockupServer, RecordedRequest};
use common::{connector, ctx};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

macro_rules! fixture {
    ($vendor:expr, $test:expr) => {
        mockup_dir($vendor)
    };
}

/// The fixture's mockup served and a session opened on it (or the test skipped).
macro_rules! session {
    ($builder:ident, $vendor:expr, $test:expr) => {{
        let dir = fixture!($vendor, $test);
        let server = $builder(&dir).start().await.unwrap();
        let s = open(&server).await;
        (server, s)
    }};
}

async fn open(server: &MockupServer) -> RedfishSession {
    connector().open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect")
}

/// Writes (non-GET) after the login, as (method, path, body).
fn writes(server: &MockupServer) -> Vec<(String, String, Value)> {
    server
        .writes()
        .into_iter()
        .filter(|r| r.path != "/redfish/v1/SessionService/Sessions")
        .map(|r: RecordedRequest| (r.method.clone(), r.path.clone(), r.json().unwrap_or(Value::Null)))
        .collect()
}

fn w(method: &str, path: &str, body: Value) -> (String, String, Value) {
    (method.to_owned(), path.to_owned(), body)
}

/// The resets of `types` POSTed to `target`, in order, as [`writes`] lists them.
fn resets(target: &str, types: &[&str]) -> Vec<(String, String, Value)> {
    types.iter().map(|t| w("POST", target, json!({"ResetType": t}))).collect()
}

/// The bmclib captures of a vendor's fixture (Dell, Lenovo).
fn bmclib(dir: &Path) -> MockupBuilder {
    MockupServer::builder().dir(dir.join("bmclib")).unwrap_or_else(|e| panic!("{} mockup: {e:?}", dir.display()))
}

// ---------------------------------------------------------------- Dell iDRAC

const DELL_SYSTEM: &str = "/redfish/v1/Systems/System.Embedded.1";
const DELL_RESET: &str = "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset";

#[tokio::test]
async fn dell_logs_in_with_a_session_reuses_the_token_and_logs_out() {
    let (server, mut s) = session!(bmclib, "dell", "dell_logs_in_with_a_session_reuses_the_token_and_logs_out");
    assert_eq!(s.auth_kind(), Some(AuthKind::Session));
    assert_eq!(s.system_path(), DELL_SYSTEM);
    assert_eq!(s.manager_path(), Some("/redfish/v1/Managers/iDRAC.Embedded.1"));
    assert_eq!(s.vendor(), Some("Dell"));
    s.power().unwrap().power(&ctx(5), PowerOp::Status).await.unwrap();

    let reqs = server.requests();
    assert!(
        reqs[0].is("GET", "/redfish/v1")
            && reqs[0].header("authorization").is_none()
            && reqs[0].header("x-auth-token").is_none()
    );
    let logins = server.requests_to("POST", "/redfish/v1/SessionService/Sessions");
    assert_eq!(logins.len(), 1);
    assert_eq!(logins[0].json().unwrap(), json!({"UserName": "admin", "Password": "password"}));
    for r in reqs.iter().skip(2) {
        assert!(r.header("x-auth-token").is_some(), "{} {} without the session token", r.method, r.path);
        assert!(r.header("authorization").is_none(), "{} {} also sent Basic credentials", r.method, r.path);
    }
    assert_eq!(server.active_sessions(), 1);
    s.close().await;
    assert_eq!(server.requests_to("DELETE", "/redfish/v1/SessionService/Sessions/1").len(), 1);
    assert_eq!(server.active_sessions(), 0);
}

#[tokio::test]
async fn dell_power_uses_advertised_reset_types() {
    let (server, mut s) = session!(bmclib, "dell", "dell_power_uses_advertised_reset_types");
    let p = s.power().unwrap();
    // The capture reports On: `on` sends nothing.
    assert_eq!(p.power(&ctx(5), PowerOp::On).await.unwrap(), Some(PowerState::On));
    assert!(writes(&server).is_empty());

    p.power(&ctx(5), PowerOp::Cycle).await.unwrap();
    p.power(&ctx(5), PowerOp::Nmi).await.unwrap();
    p.power(&ctx(5), PowerOp::SoftOff).await.unwrap();
    assert_eq!(server.resource(DELL_SYSTEM).unwrap()["PowerState"], "Off");
    p.power(&ctx(5), PowerOp::On).await.unwrap();
    p.power(&ctx(5), PowerOp::Reset).await.unwrap();
    assert_eq!(writes(&server), resets(DELL_RESET, &["PowerCycle", "Nmi", "GracefulShutdown", "On", "ForceRestart"]));
}

#[tokio::test]
async fn dell_boot_override_patch_and_read_back() {
    let (server, mut s) = session!(bmclib, "dell", "dell_boot_override_patch_and_read_back");
    let req = BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true };
    s.boot().unwrap().set_boot_device(&ctx(5), &req).await.unwrap();
    assert_eq!(
        writes(&server),
        vec![w(
            "PATCH",
            DELL_SYSTEM,
            json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI"}})
        )]
    );
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap(), req);
    // Bios maps to BiosSetup, which iDRAC advertises.
    let bios = BootDeviceRequest { device: BootDevice::Bios, persistent: true, efi: false };
    s.boot().unwrap().set_boot_device(&ctx(5), &bios).await.unwrap();
    assert_eq!(server.resource(DELL_SYSTEM).unwrap()["Boot"]["BootSourceOverrideTarget"], "BiosSetup");
}

#[tokio::test]
async fn dell_bmc_reset_cold_falls_back_to_graceful_restart() {
    let (server, mut s) = session!(bmclib, "dell", "dell_bmc_reset_cold_falls_back_to_graceful_restart");
    assert!(s.is_healthy());
    s.bmc_reset().unwrap().reset_bmc(&ctx(5), BmcResetKind::Cold).await.unwrap();
    assert_eq!(
        writes(&server),
        resets("/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Manager.Reset", &["GracefulRestart"])
    );
    assert!(!s.is_healthy(), "a session on a rebooting BMC must not be reused");
}

#[tokio::test]
async fn dell_17g_virtual_media_sends_advertised_transfer_parameters() {
    let dir = fixture!("dell", "dell_17g_virtual_media_sends_advertised_transfer_parameters");
    // The 17G capture of the system links its VirtualMedia collection.
    let server =
        bmclib(&dir).file(dir.join("bmclib/system.embedded.1.virtualmedia.json")).unwrap().start().await.unwrap();
    let mut s = open(&server).await;
    let url = "http://192.0.2.10/images/boot.iso";
    s.virtual_media().unwrap().insert_media(&ctx(5), url, MediaKind::Cd).await.unwrap();
    let vm1 = "/redfish/v1/Systems/System.Embedded.1/VirtualMedia/1";
    assert_eq!(
        writes(&server),
        vec![w(
            "POST",
            &format!("{vm1}/Actions/VirtualMedia.InsertMedia"),
            json!({"Image": url, "Inserted": true, "WriteProtected": true, "TransferProtocolType": "HTTP", "TransferMethod": "Stream"})
        )]
    );
    assert_eq!(server.resource(vm1).unwrap()["Inserted"], true);
    // The listed member VirtualMedia/2 is not in the capture (404): skipped, not fatal.
    assert_eq!(server.requests_to("GET", "/redfish/v1/Systems/System.Embedded.1/VirtualMedia/2").len(), 1);

    server.clear_requests();
    s.virtual_media().unwrap().eject_media(&ctx(5), MediaKind::Cd).await.unwrap();
    assert_eq!(writes(&server), vec![w("POST", &format!("{vm1}/Actions/VirtualMedia.EjectMedia"), json!({}))]);
    assert_eq!(server.resource(vm1).unwrap()["Inserted"], false);
}

#[tokio::test]
async fn dell_users_fill_an_empty_slot_and_empty_it_on_delete() {
    let dir = fixture!("dell", "dell_users_fill_an_empty_slot_and_empty_it_on_delete");
    // iDRAC's AccountService is not in the capture: 16 fixed slots, built
    // from its documented behaviour (slot 1 reserved, POST/DELETE refused).
    let server = common::slot_accounts(bmclib(&dir), 16).start().await.unwrap();
    let mut s = open(&server).await;
    let u = s.users().unwrap();
    let spec = UserSpec { name: "ops".into(), password: "S3cret!pass".into(), role: UserRole::Operator, enabled: true };
    let info = u.create_user(&ctx(5), &spec).await.unwrap();
    assert_eq!(
        (info.id.as_str(), info.name.as_str(), info.role, info.enabled),
        ("3", "ops", Some(UserRole::Operator), true)
    );
    assert_eq!(
        writes(&server),
        vec![w(
            "PATCH",
            "/redfish/v1/AccountService/Accounts/3",
            json!({"UserName": "ops", "Password": "S3cret!pass", "RoleId": "Operator", "Enabled": true})
        )]
    );
    assert!(server.resource("/redfish/v1/AccountService/Accounts/3").unwrap()["Password"].is_null());

    let names: Vec<String> = u.list_users(&ctx(5)).await.unwrap().into_iter().map(|u| u.name).collect();
    assert_eq!(names, vec!["root", "ops"]);

    let e = u.create_user(&ctx(5), &spec).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Conflict, "{e}");

    server.clear_requests();
    let upd = UserUpdate { name: "ops".into(), password: None, role: Some(UserRole::Admin), enabled: None };
    assert_eq!(u.update_user(&ctx(5), &upd).await.unwrap().role, Some(UserRole::Admin));
    assert_eq!(
        writes(&server),
        vec![w("PATCH", "/redfish/v1/AccountService/Accounts/3", json!({"RoleId": "Administrator"}))]
    );

    server.clear_requests();
    let missing = UserUpdate { name: "ghost".into(), password: None, role: None, enabled: Some(false) };
    assert_eq!(u.update_user(&ctx(5), &missing).await.unwrap_err().code, ErrorCode::TargetNotFound);
    assert_eq!(u.delete_user(&ctx(5), "ghost").await.unwrap_err().code, ErrorCode::TargetNotFound);
    assert!(writes(&server).is_empty(), "a missing user caused a write");

    u.delete_user(&ctx(5), "ops").await.unwrap();
    assert_eq!(
        writes(&server),
        vec![w("PATCH", "/redfish/v1/AccountService/Accounts/3", json!({"UserName": "", "Enabled": false}))]
    );
    let e = u.delete_user(&ctx(5), "admin").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "deleting the login account: {e}");
}

#[tokio::test]
async fn dell_job_error_body_is_quoted_and_not_retried() {
    let dir = fixture!("dell", "dell_job_error_body_is_quoted_and_not_retried");
    let body: Value =
        serde_json::from_slice(&std::fs::read(dir.join("sushy-oem/error_running_job.json")).unwrap()).unwrap();
    let server = bmclib(&dir).start().await.unwrap();
    server.push_fault(Fault::status("POST", DELL_RESET, 400).json(&body));
    let mut s = open(&server).await;
    let e = s.power().unwrap().power(&ctx(5), PowerOp::Reset).await.unwrap_err();
    common::assert_error(&e, ErrorCode::BmcError, "A job operation is already running");
    assert!(!e.retryable);
    assert_eq!(server.requests_to("POST", DELL_RESET).len(), 1);
}

// --------------------------------------------------------------- Lenovo XCC

const LENOVO_RESET: &str = "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset";

#[tokio::test]
async fn lenovo_cycle_without_power_cycle_is_force_off_then_on() {
    let (server, mut s) = session!(bmclib, "lenovo", "lenovo_cycle_without_power_cycle_is_force_off_then_on");
    s.power().unwrap().power(&ctx(5), PowerOp::Cycle).await.unwrap();
    assert_eq!(writes(&server), resets(LENOVO_RESET, &["ForceOff", "On"]));
    // The power state was read between the two.
    let reqs = server.requests();
    let off = reqs.iter().position(|r| r.method == "POST" && r.json().unwrap()["ResetType"] == "ForceOff").unwrap();
    let on = reqs.iter().position(|r| r.method == "POST" && r.json().unwrap()["ResetType"] == "On").unwrap();
    assert!(reqs[off..on].iter().any(|r| r.is("GET", "/redfish/v1/Systems/1")));
}

#[tokio::test]
async fn lenovo_boot_refuses_persistent_before_sending() {
    let (server, mut s) = session!(bmclib, "lenovo", "lenovo_boot_refuses_persistent_before_sending");
    let b = s.boot().unwrap();
    let e = b
        .set_boot_device(&ctx(5), &BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: false })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(writes(&server).is_empty());
    b.set_boot_device(&ctx(5), &BootDeviceRequest { device: BootDevice::Cdrom, persistent: false, efi: false })
        .await
        .unwrap();
    assert_eq!(
        writes(&server),
        vec![w(
            "PATCH",
            "/redfish/v1/Systems/1",
            json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}})
        )]
    );
}

#[tokio::test]
async fn lenovo_virtual_media_without_actions_is_patched_on_the_manager() {
    let (server, mut s) = session!(bmclib, "lenovo", "lenovo_virtual_media_without_actions_is_patched_on_the_manager");
    let url = "https://192.0.2.10/isos/install.iso";
    let cd = "/redfish/v1/Managers/1/VirtualMedia/CD";
    s.virtual_media().unwrap().insert_media(&ctx(5), url, MediaKind::Cd).await.unwrap();
    assert_eq!(writes(&server), vec![w("PATCH", cd, json!({"Image": url, "Inserted": true, "WriteProtected": true}))]);
    assert_eq!(server.resource(cd).unwrap()["Image"], url);
    server.clear_requests();
    s.virtual_media().unwrap().eject_media(&ctx(5), MediaKind::Cd).await.unwrap();
    assert_eq!(writes(&server), vec![w("PATCH", cd, json!({"Image": null, "Inserted": false}))]);
    // The Floppy member is listed but not captured: no USB device.
    let e = s.virtual_media().unwrap().insert_media(&ctx(5), url, MediaKind::Usb).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
}

#[tokio::test]
async fn lenovo_bmc_reset_types() {
    let dir = fixture!("lenovo", "lenovo_bmc_reset_types");
    let server = bmclib(&dir).start().await.unwrap();
    let target = "/redfish/v1/Managers/1/Actions/Manager.Reset";
    let mut s = open(&server).await;
    s.bmc_reset().unwrap().reset_bmc(&ctx(5), BmcResetKind::Warm).await.unwrap();
    let mut s = open(&server).await;
    s.bmc_reset().unwrap().reset_bmc(&ctx(5), BmcResetKind::Cold).await.unwrap();
    assert_eq!(writes(&server), resets(target, &["GracefulRestart", "ForceRestart"]));
}

// ----------------------------------------------------------- Supermicro X12

const SMC_SYSTEM: &str = "/redfish/v1/Systems/1";

fn supermicro(dir: &Path) -> MockupBuilder {
    let d = dir.join("bmclib");
    MockupServer::builder()
        .file(d.join("smc_1.14.0_serviceroot.json"))
        .unwrap()
        .file(d.join("smc_1.14.0_systems.json"))
        .unwrap()
        .file(d.join("smc_1.14.0_systems_1.json"))
        .unwrap()
        // X12 firmware advertises "GracefulShutdownGracefulRestart" yet
        // accepts the two values separately.
        .validate_allowable(false)
}

#[tokio::test]
async fn supermicro_concatenated_reset_types_are_split() {
    let (server, mut s) = session!(supermicro, "supermicro", "supermicro_concatenated_reset_types_are_split");
    let reset = s.system_reset().unwrap();
    assert!(reset.allows("GracefulShutdown") && reset.allows("GracefulRestart"), "{:?}", reset.allowed);
    s.power().unwrap().power(&ctx(5), PowerOp::SoftOff).await.unwrap();
    assert_eq!(writes(&server), resets("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", &["GracefulShutdown"]));
}

#[tokio::test]
async fn supermicro_boot_patch_carries_if_match() {
    let dir = fixture!("supermicro", "supermicro_boot_patch_carries_if_match");
    let server = supermicro(&dir).require_if_match(true).start().await.unwrap();
    let mut s = open(&server).await;
    let req = BootDeviceRequest { device: BootDevice::Disk, persistent: true, efi: true };
    s.boot().unwrap().set_boot_device(&ctx(5), &req).await.unwrap();
    let patches = server.requests_to("PATCH", SMC_SYSTEM);
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].header("if-match"), Some("\"27ffd39c216000b3013c84008394dffd\""));
    assert_eq!(
        patches[0].json().unwrap(),
        // The mode is UEFI already: not sent (some BMCs refuse any PATCH carrying it).
        json!({"Boot": {"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideEnabled": "Continuous"}})
    );
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap(), req);
}

/// BootSourceOverrideMode is sent only when it must change (iLO 5 answers
/// 400 to any PATCH carrying it); a 400 naming it gets one retry without
/// it, and a mode the BMC keeps is reported, not passed off as done.
#[tokio::test]
async fn boot_mode_is_sent_only_to_change_it_and_a_refusal_is_reported() {
    let dir = fixture!("dmtf-public-rackmount1", "boot_mode_is_sent_only_to_change_it_and_a_refusal_is_reported");
    let system = "/redfish/v1/Systems/437XR1138R2";
    // The mode is the firmware's on this BMC: a PATCH carrying it is refused
    // with the error body iLO 5 gives (HPE iLO RESTful API, PropertyNotWritable).
    let ilo_refusal = json!({"error": {"code": "iLO.0.10.ExtendedInfo", "message": "See @Message.ExtendedInfo for more information.",
        "@Message.ExtendedInfo": [{"MessageId": "Base.1.4.PropertyNotWritable", "MessageArgs": ["BootSourceOverrideMode"],
            "RelatedProperties": ["#/Boot/BootSourceOverrideMode"]}]}});
    let server = dmtf(&dir).read_only(system, "/Boot/BootSourceOverrideMode", ilo_refusal).start().await.unwrap();
    let mut s = open(&server).await;
    // Already UEFI: the mode is not sent, and the BMC takes the PATCH.
    let uefi = BootDeviceRequest { device: BootDevice::Disk, persistent: false, efi: true };
    s.boot().unwrap().set_boot_device(&ctx(5), &uefi).await.unwrap();
    assert_eq!(
        server.requests_to("PATCH", system)[0].json().unwrap(),
        json!({"Boot": {"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideEnabled": "Once"}})
    );
    // Legacy asked: refused for the mode, once more without it; the BMC
    // keeps UEFI, so the device set by the retry is put back: nothing is
    // left half-applied, and the action says so.
    server.clear_requests();
    let legacy = BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false };
    let e = s.boot().unwrap().set_boot_device(&ctx(5), &legacy).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Unsupported, "refused BootSourceOverrideMode Legacy and keeps UEFI");
    assert!(e.message.contains("nothing changed") && e.message.contains("restored"), "{}", e.message);
    let boot = server.resource(system).unwrap()["Boot"].clone();
    assert_eq!(
        (boot["BootSourceOverrideTarget"].as_str(), boot["BootSourceOverrideEnabled"].as_str()),
        (Some("Hdd"), Some("Once"))
    );
    let patches = server.requests_to("PATCH", system);
    assert_eq!(patches.len(), 3, "one retry, one restore");
    assert_eq!(
        patches[2].json().unwrap(),
        json!({"Boot": {"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideEnabled": "Once"}})
    );
    assert_eq!(patches[0].json().unwrap()["Boot"]["BootSourceOverrideMode"], json!("Legacy"));
    assert_eq!(
        patches[1].json().unwrap(),
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}})
    );
    // Any other 400 is not retried.
    server.clear_requests();
    server.push_fault(Fault::status("PATCH", system, 400).times(1));
    let e = s.boot().unwrap().set_boot_device(&ctx(5), &legacy).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert_eq!(server.requests_to("PATCH", system).len(), 1);
}

#[tokio::test]
async fn supermicro_stale_etag_is_read_again_and_retried_once() {
    let dir = fixture!("supermicro", "supermicro_stale_etag_is_read_again_and_retried_once");
    let server = supermicro(&dir).start().await.unwrap();
    server.push_fault(Fault::status("PATCH", SMC_SYSTEM, 412).times(1));
    let mut s = open(&server).await;
    let req = BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true };
    s.boot().unwrap().set_boot_device(&ctx(5), &req).await.unwrap();
    assert_eq!(server.requests_to("PATCH", SMC_SYSTEM).len(), 2);
    assert_eq!(server.resource(SMC_SYSTEM).unwrap()["Boot"]["BootSourceOverrideTarget"], "Pxe");
}

#[tokio::test]
async fn supermicro_without_a_manager_reports_manager_capabilities_unsupported() {
    let dir = fixture!("supermicro", "supermicro_without_a_manager_reports_manager_capabilities_unsupported");
    // The capture has no Managers: discovery must still succeed.
    let server = supermicro(&dir).start().await.unwrap();
    let mut s = open(&server).await;
    assert_eq!(s.manager_path(), None);
    let e = s.bmc_reset().unwrap().reset_bmc(&ctx(5), BmcResetKind::Warm).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    let e = s.network_source().unwrap().network_source(&ctx(5)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    let inv = s.inventory().unwrap().inventory(&ctx(5)).await.unwrap();
    assert_eq!(inv.manufacturer.as_deref(), Some("Supermicro"));
    assert_eq!(inv.serial.as_deref(), Some("S482931X2814218"));
}

#[tokio::test]
async fn supermicro_users_are_posted_and_deleted() {
    let dir = fixture!("supermicro", "supermicro_users_are_posted_and_deleted");
    // Supermicro's AccountService is a standard collection (spec-built here).
    let server = common::standard_accounts(supermicro(&dir)).start().await.unwrap();
    let mut s = open(&server).await;
    let u = s.users().unwrap();
    let info = u
        .create_user(
            &ctx(5),
            &UserSpec { name: "deploy".into(), password: "pw-123456".into(), role: UserRole::User, enabled: false },
        )
        .await
        .unwrap();
    assert_eq!((info.id.as_str(), info.role, info.enabled), ("3", Some(UserRole::User), false));
    u.delete_user(&ctx(5), "deploy").await.unwrap();
    assert_eq!(
        writes(&server),
        vec![
            w(
                "POST",
                "/redfish/v1/AccountService/Accounts",
                json!({"UserName": "deploy", "Password": "pw-123456", "RoleId": "ReadOnly", "Enabled": false})
            ),
            w("DELETE", "/redfish/v1/AccountService/Accounts/3", Value::Null),
        ]
    );
    assert!(server.resource("/redfish/v1/AccountService/Accounts/3").is_none());
}

// ------------------------------------------------- DMTF public-rackmount1

const DMTF_RESET: &str = "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset";
const DMTF_CD1: &str = "/redfish/v1/Systems/437XR1138R2/VirtualMedia/CD1";

fn dmtf(dir: &Path) -> MockupBuilder {
    MockupServer::builder()
        .dir(dir)
        .expect("dmtf mockup")
        // Collections the excerpt of the mockup lacks, per DSP0266.
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": "/redfish/v1/Managers/BMC"}]}))
        .resource("/redfish/v1/Systems/437XR1138R2/VirtualMedia", json!({"Members": [{"@odata.id": DMTF_CD1}]}))
}

#[tokio::test]
async fn dmtf_reset_is_force_restart_and_cycle_is_off_then_on() {
    let (server, mut s) =
        session!(dmtf, "dmtf-public-rackmount1", "dmtf_reset_is_force_restart_and_cycle_is_off_then_on");
    s.power().unwrap().power(&ctx(5), PowerOp::Reset).await.unwrap();
    s.power().unwrap().power(&ctx(5), PowerOp::Cycle).await.unwrap();
    assert_eq!(writes(&server), resets(DMTF_RESET, &["ForceRestart", "ForceOff", "On"]));
    s.bmc_reset().unwrap().reset_bmc(&ctx(5), BmcResetKind::Cold).await.unwrap();
    assert_eq!(
        writes(&server).last().unwrap(),
        &w("POST", "/redfish/v1/Managers/BMC/Actions/Manager.Reset", json!({"ResetType": "ForceRestart"}))
    );
}

#[tokio::test]
async fn dmtf_inventory() {
    let (_server, mut s) = session!(dmtf, "dmtf-public-rackmount1", "dmtf_inventory");
    let inv = s.inventory().unwrap().inventory(&ctx(5)).await.unwrap();
    assert_eq!(inv.manufacturer.as_deref(), Some("Contoso"));
    assert_eq!(inv.model.as_deref(), Some("3500"));
    assert_eq!(inv.serial.as_deref(), Some("437XR1138R2"));
    assert_eq!(inv.firmware_version.as_deref(), Some("1.45.455b66-rev4"));
    assert_eq!(inv.power_state, Some(PowerState::On));
    assert!(inv.extra.contains(&("bios_version".into(), "P79 v1.45 (12/06/2017)".into())), "{:?}", inv.extra);
}

#[tokio::test]
async fn dmtf_basic_auth_when_sessions_are_not_implemented() {
    let dir = fixture!("dmtf-public-rackmount1", "dmtf_basic_auth_when_sessions_are_not_implemented");
    // The mockup's SessionService resource exists, its Sessions collection does not: POST → 404.
    let server = dmtf(&dir).sessions(false).start().await.unwrap();
    let mut s = open(&server).await;
    assert_eq!(s.auth_kind(), Some(AuthKind::Basic));
    s.power().unwrap().power(&ctx(5), PowerOp::Status).await.unwrap();
    let after_login: Vec<_> = server.requests().into_iter().filter(|r| !r.is("GET", "/redfish/v1")).collect();
    assert!(after_login[0].is("POST", "/redfish/v1/SessionService/Sessions"));
    for r in &after_login[1..] {
        assert!(r.header("authorization").is_some_and(|h| h.starts_with("Basic ")), "{} {}", r.method, r.path);
    }
    s.close().await; // nothing to delete
    assert!(server.requests_to("DELETE", "/redfish/v1/SessionService/Sessions/1").is_empty());
}

/// `redfish.auth: session` (an operator's machine option): a BMC that
/// will not create a session fails the action, and the password never goes
/// out with HTTP Basic.
#[tokio::test]
async fn session_only_machines_never_fall_back_to_basic() {
    let dir = fixture!("dmtf-public-rackmount1", "session_only_machines_never_fall_back_to_basic");
    let server = dmtf(&dir).sessions(false).start().await.unwrap();
    let mut target = server.target();
    target.options.redfish.auth = bmcfleet_schema::RedfishAuth::Session;
    let e = connector().open(&ctx(10), &target, &server.credentials()).await.err().expect("no session, no login");
    assert_eq!(e.code, ErrorCode::AuthFailed, "{e:?}");
    assert!(e.message.contains("redfish.auth: session"), "{}", e.message);
    for r in server.requests() {
        assert!(
            !r.header("authorization").is_some_and(|h| h.starts_with("Basic ")),
            "Basic sent: {} {}",
            r.method,
            r.path
        );
    }
    // The same BMC with the default (`auto`) falls back to Basic, as before.
    let s = open(&server).await;
    assert_eq!(s.auth_kind(), Some(AuthKind::Basic));
}

/// `redfish.auth: basic`: no session is created; every request, the
/// service root included, carries Basic.
#[tokio::test]
async fn basic_only_machines_create_no_session() {
    let dir = fixture!("dmtf-public-rackmount1", "basic_only_machines_create_no_session");
    let server = dmtf(&dir).start().await.unwrap();
    let mut target = server.target();
    target.options.redfish.auth = bmcfleet_schema::RedfishAuth::Basic;
    let mut s = connector().open(&ctx(10), &target, &server.credentials()).await.expect("connect");
    assert_eq!(s.auth_kind(), Some(AuthKind::Basic));
    s.power().unwrap().power(&ctx(5), PowerOp::Status).await.unwrap();
    assert!(server.requests_to("POST", "/redfish/v1/SessionService/Sessions").is_empty(), "a session was created");
    for r in server.requests() {
        assert!(
            r.header("authorization").is_some_and(|h| h.starts_with("Basic ")),
            "{} {} without Basic",
            r.method,
            r.path
        );
    }
}

#[tokio::test]
async fn dmtf_expired_session_is_renewed_once() {
    let (server, mut s) = session!(dmtf, "dmtf-public-rackmount1", "dmtf_expired_session_is_renewed_once");
    server.expire_sessions();
    s.power().unwrap().power(&ctx(5), PowerOp::Nmi).await.unwrap();
    assert_eq!(server.requests_to("POST", "/redfish/v1/SessionService/Sessions").len(), 2);
    // The 401'd request was resent once, after the new login.
    assert_eq!(server.requests_to("POST", DMTF_RESET).len(), 2);
    assert_eq!(writes(&server), resets(DMTF_RESET, &["Nmi", "Nmi"]));
}

#[tokio::test]
async fn dmtf_virtual_media_replaces_an_inserted_image() {
    let (server, mut s) = session!(dmtf, "dmtf-public-rackmount1", "dmtf_virtual_media_replaces_an_inserted_image");
    let url = "http://192.0.2.10/new.iso";
    s.virtual_media().unwrap().insert_media(&ctx(5), url, MediaKind::Cd).await.unwrap();
    assert_eq!(
        writes(&server),
        vec![
            w("PATCH", DMTF_CD1, json!({"Image": null, "Inserted": false})),
            w("PATCH", DMTF_CD1, json!({"Image": url, "Inserted": true, "WriteProtected": true})),
        ]
    );
}

#[tokio::test]
async fn insert_media_adds_transfer_protocol_when_the_bmc_demands_it() {
    // A device with standard actions that does not advertise transfer
    // parameters but demands them (error body captured from an AMI-based BMC).
    let misc = fixture!("misc", "insert_media_adds_transfer_protocol_when_the_bmc_demands_it");
    let demand: Value =
        serde_json::from_slice(&std::fs::read(misc.join("sushy/transfer_proto_required_error.json")).unwrap()).unwrap();
    let cd = "/redfish/v1/Managers/BMC/VirtualMedia/CD1";
    let insert = format!("{cd}/Actions/VirtualMedia.InsertMedia");
    let server = common::spec_service()
        .resource(
            common::MANAGER,
            json!({"Id": "BMC", "VirtualMedia": {"@odata.id": "/redfish/v1/Managers/BMC/VirtualMedia"}}),
        )
        .resource("/redfish/v1/Managers/BMC/VirtualMedia", json!({"Members": [{"@odata.id": cd}]}))
        .resource(
            cd,
            json!({"Id": "CD1", "MediaTypes": ["CD", "DVD"], "Inserted": false, "Image": null,
                   "Actions": {"#VirtualMedia.InsertMedia": {"target": insert},
                               "#VirtualMedia.EjectMedia": {"target": format!("{cd}/Actions/VirtualMedia.EjectMedia")}}}),
        )
        .start()
        .await
        .unwrap();
    server.push_fault(Fault::status("POST", &insert, 400).json(&demand).times(1));
    let mut s = open(&server).await;
    let url = "http://192.0.2.10/a.iso";
    s.virtual_media().unwrap().insert_media(&ctx(5), url, MediaKind::Cd).await.unwrap();
    assert_eq!(
        writes(&server),
        vec![
            w("POST", &insert, json!({"Image": url, "Inserted": true, "WriteProtected": true})),
            w(
                "POST",
                &insert,
                json!({"Image": url, "Inserted": true, "WriteProtected": true, "TransferProtocolType": "HTTP"})
            ),
        ]
    );
    assert_eq!(server.resource(cd).unwrap()["Inserted"], true);
}

#[tokio::test]
async fn network_source_on_the_interface_carrying_the_bmc_address() {
    // EthernetInterfaces per DSP0266 (not in any capture here): the one with
    // 127.0.0.1 is the interface this session talks to.
    let eth = "/redfish/v1/Managers/BMC/EthernetInterfaces";
    let server = common::spec_service()
        .resource(common::MANAGER, json!({"Id": "BMC", "EthernetInterfaces": {"@odata.id": eth}}))
        .resource(eth, json!({"Members": [{"@odata.id": format!("{eth}/1")}, {"@odata.id": format!("{eth}/2")}]}))
        .resource(
            &format!("{eth}/1"),
            json!({"Id": "1", "InterfaceEnabled": true, "DHCPv4": {"DHCPEnabled": true},
                   "IPv4Addresses": [{"Address": "192.0.2.50", "SubnetMask": "255.255.255.0", "AddressOrigin": "DHCP"}],
                   "IPv4StaticAddresses": []}),
        )
        .resource(
            &format!("{eth}/2"),
            json!({"Id": "2", "InterfaceEnabled": true, "DHCPv4": {"DHCPEnabled": false},
                   "IPv4Addresses": [{"Address": "127.0.0.1", "SubnetMask": "255.0.0.0", "Gateway": "127.0.0.254", "AddressOrigin": "Static"}],
                   "IPv4StaticAddresses": [{"Address": "127.0.0.1", "SubnetMask": "255.0.0.0", "Gateway": "127.0.0.254"}],
                   "@odata.etag": "W/\"eth2\""}),
        )
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    let current = s.network_source().unwrap().network_source(&ctx(5)).await.unwrap();
    assert_eq!(
        current,
        NetworkSourceOp::Static(StaticIpv4 {
            address: "127.0.0.1".parse().unwrap(),
            netmask: "255.0.0.0".parse().unwrap(),
            gateway: Some("127.0.0.254".parse().unwrap())
        })
    );
    let addr =
        StaticIpv4 { address: "127.0.0.1".parse().unwrap(), netmask: "255.255.0.0".parse().unwrap(), gateway: None };
    s.network_source().unwrap().set_static(&ctx(5), &addr).await.unwrap();
    s.network_source().unwrap().set_dhcp(&ctx(5)).await.unwrap();
    let two = format!("{eth}/2");
    assert_eq!(
        writes(&server),
        vec![
            w(
                "PATCH",
                &two,
                json!({"DHCPv4": {"DHCPEnabled": false}, "IPv4StaticAddresses": [{"Address": "127.0.0.1", "SubnetMask": "255.255.0.0"}]})
            ),
            w("PATCH", &two, json!({"DHCPv4": {"DHCPEnabled": true}})),
        ]
    );
    let patches = server.requests_to("PATCH", &two);
    assert_eq!(patches[0].header("if-match"), Some("W/\"eth2\""));
    assert!(!s.is_healthy(), "changing the address we talk to must end the session");
}

#[tokio::test]
async fn task_monitor_is_polled_until_completed() {
    let server = common::spec_service().start().await.unwrap();
    server.push_fault(Fault::task("POST", common::RESET, 3, "Completed"));
    let mut s = open(&server).await;
    s.power().unwrap().power(&ctx(5), PowerOp::Reset).await.unwrap();
    let monitor =
        server.requests().into_iter().filter(|r| r.path.starts_with("/redfish/v1/TaskService/TaskMonitors/")).count();
    assert_eq!(monitor, 4, "3 x 202 then the final Task");
    assert_eq!(server.requests_to("POST", common::RESET).len(), 1);
}

#[tokio::test]
async fn task_exception_is_a_bmc_error_with_the_task_messages() {
    let server = common::spec_service().start().await.unwrap();
    server.push_fault(
        Fault::task("POST", common::RESET, 1, "Exception").task_message("The host is in a firmware update"),
    );
    let mut s = open(&server).await;
    let e = s.power().unwrap().power(&ctx(5), PowerOp::Reset).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("Exception") && e.message.contains("firmware update"), "{e}");
}

/// A reset with an 800 ms action deadline, which must fail.
async fn reset_with_800ms(s: &mut RedfishSession) -> bmcfleet_provider::ProviderError {
    s.power()
        .unwrap()
        .power(&bmcfleet_provider::Ctx::with_timeout(Duration::from_millis(800)), PowerOp::Reset)
        .await
        .unwrap_err()
}

#[tokio::test]
async fn task_still_running_at_the_deadline_is_a_timeout() {
    let server = common::spec_service().start().await.unwrap();
    server.push_fault(Fault::task("POST", common::RESET, usize::MAX, "Completed"));
    let mut s = open(&server).await;
    let started = tokio::time::Instant::now();
    let e = reset_with_800ms(&mut s).await;
    common::assert_error(&e, ErrorCode::Timeout, "still running");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_task_monitor_unanswered_until_the_deadline_is_a_task_still_running() {
    let server = common::spec_service().start().await.unwrap();
    server.push_fault(Fault::task("POST", common::RESET, usize::MAX, "Completed"));
    // Whichever monitor the BMC names, reading it is never answered: the
    // action deadline passes while a monitor read is in flight.
    for n in 1..=16 {
        server.push_fault(Fault::hang("GET", &format!("/redfish/v1/TaskService/TaskMonitors/{n}")));
    }
    let e = reset_with_800ms(&mut open(&server).await).await;
    common::assert_error(&e, ErrorCode::Timeout, "still running at the action deadline");
    assert!(
        server
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.path.starts_with("/redfish/v1/TaskService/TaskMonitors/")),
        "a monitor was read"
    );
}

#[tokio::test]
async fn reset_types_come_from_action_info_when_not_inline() {
    // DSP0266 @Redfish.ActionInfo instead of an inline AllowableValues list.
    let info = "/redfish/v1/Systems/1/ResetActionInfo";
    let server = common::spec_service()
        .resource(
            common::SYSTEM,
            json!({"Id": "1", "PowerState": "On", "Boot": {},
                   "Actions": {"#ComputerSystem.Reset": {"target": common::RESET, "@Redfish.ActionInfo": info}}}),
        )
        .resource(
            info,
            json!({"@odata.type": "#ActionInfo.v1_1_2.ActionInfo", "Id": "ResetActionInfo",
                   "Parameters": [{"Name": "ResetType", "Required": true, "DataType": "String",
                                   "AllowableValues": ["ForceOn", "ForceOff", "ForceRestart"]}]}),
        )
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    assert_eq!(
        s.system_reset().unwrap().allowed.as_deref(),
        Some(&["ForceOn".to_owned(), "ForceOff".to_owned(), "ForceRestart".to_owned()][..])
    );
    s.power().unwrap().power(&ctx(5), PowerOp::Off).await.unwrap();
    s.power().unwrap().power(&ctx(5), PowerOp::On).await.unwrap();
    let e = s.power().unwrap().power(&ctx(5), PowerOp::SoftOff).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Unsupported, "ForceOn, ForceOff, ForceRestart");
    assert_eq!(writes(&server), resets(common::RESET, &["ForceOff", "ForceOn"]));
}

#[tokio::test]
async fn service_root_behind_auth_falls_back_to_basic() {
    // Some firmware guards even /redfish/v1 (against the spec).
    let server = common::spec_service().start().await.unwrap();
    server.push_fault(Fault::status("GET", "/redfish/v1", 401).times(1));
    let mut s = open(&server).await;
    assert_eq!(s.auth_kind(), Some(AuthKind::Basic));
    let roots = server.requests_to("GET", "/redfish/v1");
    assert_eq!(roots.len(), 2);
    assert!(roots[0].header("authorization").is_none() && roots[1].header("authorization").is_some());
    assert!(server.requests_to("POST", "/redfish/v1/SessionService/Sessions").is_empty());
    s.power().unwrap().power(&ctx(5), PowerOp::Status).await.unwrap();
}
