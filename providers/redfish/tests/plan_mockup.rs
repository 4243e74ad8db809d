//! Plan mode equals execution, for every capability, on vendor mockups
//! (`testdata/redfish`) served by `MockupServer`, which records every
//! request. Each case plans an action (nothing that is no GET may reach
//! the server), then executes it on the same session: the reads the
//! execution made before its first write are the plan's reads, and that
//! first write is the plan's change (method, path, body as the plan shows
//! it: secrets redacted). Resources the captures lack are built as in
//! `mockups.rs`, `event_log.rs` and `bios_mockup.rs` (DSP0266).

mod common;

use bmcfleet_provider::{perform, ActionPlan, Ctx, Plan, PlannedRequest};
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::plan::redact_json;
use bmcfleet_schema::*;
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{MockupBuilder, MockupServer, RecordedRequest};
use common::{connector, ctx, power_legacy, power_metrics, spec_service, MANAGER};
use serde_json::{json, Value};

/// Requests of the action itself (not the login or logout).
fn own(server: &MockupServer) -> Vec<RecordedRequest> {
    server.requests().into_iter().filter(|r| !r.path.starts_with("/redfish/v1/SessionService")).collect()
}

fn is_write(r: &RecordedRequest) -> bool {
    r.method != "GET" && r.method != "HEAD"
}

/// The request as a plan shows it.
fn shown(r: &RecordedRequest) -> PlannedRequest {
    let body = if r.body.is_empty() {
        None
    } else if r.headers.iter().any(|(k, v)| k == "content-type" && v.starts_with("multipart/")) {
        Some(Value::String("[multipart/form-data: firmware image]".into()))
    } else {
        Some(r.json().map(|v| redact_json(&v)).unwrap_or(Value::String("[redacted]".into())))
    };
    PlannedRequest::Redfish { method: r.method.clone(), path: r.path.clone(), body }
}

fn norm(p: PlannedRequest) -> PlannedRequest {
    match p {
        PlannedRequest::Redfish { method, path, body } => {
            let path = match path.trim_end_matches('/') {
                "" => "/".to_owned(),
                p => p.to_owned(),
            };
            PlannedRequest::Redfish { method, path, body }
        }
        other => other,
    }
}

/// Plan `action`, check nothing was written, execute it, compare.
/// Returns the plan and the execution's result.
async fn plan_equals_execution(
    server: &MockupServer,
    s: &mut RedfishSession,
    action: &Action,
) -> (ActionPlan, bmcfleet_provider::Result<Option<ActionData>>) {
    server.clear_requests();
    let plan = Plan::new();
    let pctx: Ctx = ctx(20).with_plan(plan.clone()).for_attempt();
    let planned = perform(s, &pctx, action).await;
    let recorded = plan.snapshot();
    let sent = own(server);
    assert!(sent.iter().all(|r| !is_write(r)), "{}: plan mode wrote: {:?}", action.kind(), sent);
    if plan.stopped() {
        let e = planned.as_ref().expect_err("a stopped plan is no success");
        assert_eq!(*e, bmcfleet_provider::ProviderError::planned(), "{}", action.kind());
    }
    let reads: Vec<PlannedRequest> = sent.iter().map(shown).collect();
    assert_eq!(
        recorded.reads.iter().cloned().map(norm).collect::<Vec<_>>(),
        reads[..reads.len().min(bmcfleet_schema::plan::MAX_PLAN_READS)],
        "{}: the plan lists what it read",
        action.kind()
    );

    server.clear_requests();
    let done = perform(s, &ctx(20).for_attempt(), action).await;
    let sent = own(server);
    let first_write = sent.iter().position(is_write);
    let before: Vec<PlannedRequest> = sent[..first_write.unwrap_or(sent.len())].iter().map(shown).collect();
    match (&recorded.change, first_write) {
        (Some(change), Some(i)) => {
            assert_eq!(
                norm(change.clone()),
                shown(&sent[i]),
                "{}: the plan's change is the first write",
                action.kind()
            );
            assert_eq!(
                recorded.reads.iter().cloned().map(norm).collect::<Vec<_>>(),
                before[..before.len().min(bmcfleet_schema::plan::MAX_PLAN_READS)],
                "{}: execution read what the plan read before its change",
                action.kind()
            );
        }
        (None, None) => assert!(
            done.is_ok() == planned.is_ok(),
            "{}: a plan without a change ends as the execution does: {planned:?} / {done:?}",
            action.kind()
        ),
        (change, write) => panic!(
            "{}: plan change {change:?}, execution's first write {:?}",
            action.kind(),
            write.map(|i| shown(&sent[i]))
        ),
    }
    (recorded, done)
}

async fn open(server: &MockupServer) -> RedfishSession {
    connector().open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect")
}

const DMTF_SYS: &str = "/redfish/v1/Systems/437XR1138R2";

fn dmtf() -> MockupBuilder {
    MockupServer::builder()
        .dir(mockup_dir("dmtf-public-rackmount1"))
        .expect("dmtf mockup")
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": "/redfish/v1/Managers/BMC"}]}))
        .resource(
            &format!("{DMTF_SYS}/VirtualMedia"),
            json!({"Members": [{"@odata.id": format!("{DMTF_SYS}/VirtualMedia/CD1")}]}),
        )
        .resource("/redfish/v1/Registries", json!({"@odata.id": "/redfish/v1/Registries", "Members": [
            {"@odata.id": "/redfish/v1/Registries/BiosAttributeRegistryP89"}]}))
        .resource("/redfish/v1/Registries/BiosAttributeRegistryP89", json!({"@odata.id": "/redfish/v1/Registries/BiosAttributeRegistryP89",
            "Id": "BiosAttributeRegistryP89.v1_0_0", "Registry": "BiosAttributeRegistryP89.v1_0_0",
            "Location": [{"Language": "en", "Uri": "/redfish/v1/Registries/BiosAttributeRegistryP89/en"}]}))
        .resource("/redfish/v1/Registries/BiosAttributeRegistryP89/en", json!({"@odata.id": "/redfish/v1/Registries/BiosAttributeRegistryP89/en",
            "Id": "BiosAttributeRegistryP89.v1_0_0", "RegistryVersion": "1.0.0", "Language": "en", "OwningEntity": "Contoso",
            "RegistryEntries": {"Attributes": [
                {"AttributeName": "ProcTurboMode", "Type": "Enumeration", "Value": [{"ValueName": "Enabled"}, {"ValueName": "Disabled"}]}]}}))
        .resource(&format!("{DMTF_SYS}/SecureBoot"), json!({"@odata.id": format!("{DMTF_SYS}/SecureBoot"), "Id": "SecureBoot",
            "SecureBootEnable": false, "SecureBootCurrentBoot": "Disabled", "SecureBootMode": "UserMode",
            "Actions": {"#SecureBoot.ResetKeys": {"target": format!("{DMTF_SYS}/SecureBoot/Actions/SecureBoot.ResetKeys"),
                "ResetKeysType@Redfish.AllowableValues": ["ResetAllKeysToDefault", "DeleteAllKeys"]}}}))
}

#[tokio::test]
async fn dmtf_power_boot_media_bios_secure_boot_raw_and_reads_plan_what_they_send() {
    let server = dmtf().start().await.unwrap();
    let mut s = open(&server).await;
    let media_url = "https://deploy:S3cr3t@repo.example/boot.iso?sig=abc123";
    let cases = [
        Action::Power(PowerOp::Reset),
        Action::Power(PowerOp::Status),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
        Action::GetBootDevice,
        Action::VirtualMedia(VirtualMediaOp::Insert { url: media_url.into(), media: MediaKind::Cd }),
        Action::VirtualMedia(VirtualMediaOp::Eject { media: MediaKind::Cd }),
        Action::BiosGet,
        Action::BiosSet(BiosSet {
            attributes: [("ProcTurboMode".to_owned(), json!("Disabled"))].into_iter().collect(),
        }),
        Action::BiosReset,
        Action::SecureBootGet,
        Action::SecureBootSet(SecureBootSet { enabled: true }),
        Action::SecureBootResetKeys(SecureBootResetKeys::DeleteAllKeys),
        Action::IdentifyGet,
        Action::Identify(IdentifySet { light: IdentifyLight::Blink, seconds: None }),
        Action::BmcClockGet,
        Action::Inventory,
        Action::Sensors,
        Action::Raw(RawRequest::Redfish(RawRedfish {
            method: HttpMethod::Post,
            path: format!("{DMTF_SYS}/Actions/ComputerSystem.Reset"),
            body: Some(json!({"ResetType": "ForceOn"})),
        })),
    ];
    for action in &cases {
        let (plan, _) = plan_equals_execution(&server, &mut s, action).await;
        let text = serde_json::to_string(&plan).unwrap();
        assert!(!text.contains("S3cr3t") && !text.contains("abc123"), "{}: {text}", action.kind());
        assert_eq!(plan.change.is_none(), bmcfleet_schema::plan::reads_only(action), "{}: {plan:?}", action.kind());
    }
}

/// A BMC clock sync's change carries the worker's time when it is made:
/// the plan's and the execution's `DateTime` differ by the time between them.
#[tokio::test]
async fn bmc_clock_sync_plans_its_one_patch() {
    let server = dmtf().start().await.unwrap();
    let mut s = open(&server).await;
    server.clear_requests();
    let plan = Plan::new();
    perform(&mut s, &ctx(20).with_plan(plan.clone()).for_attempt(), &Action::BmcClockSync).await.expect_err("planned");
    assert!(own(&server).iter().all(|r| !is_write(r)), "plan mode wrote");
    let Some(PlannedRequest::Redfish { method, path, body: Some(body) }) = plan.snapshot().change else {
        panic!("a PATCH planned: {:?}", plan.snapshot())
    };
    server.clear_requests();
    perform(&mut s, &ctx(20).for_attempt(), &Action::BmcClockSync).await.expect("synced");
    let sent = own(&server);
    let write = sent.iter().find(|r| is_write(r)).expect("a write");
    assert_eq!((method.as_str(), path.as_str()), (write.method.as_str(), write.path.as_str()));
    let (planned, done) = (body.as_object().unwrap(), write.json().unwrap());
    let keys = |o: &serde_json::Map<String, Value>| o.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(planned), vec!["DateTime".to_owned()], "{body}");
    assert_eq!(keys(planned), keys(done.as_object().unwrap()), "{done}");
}

/// Power reading and limits, on the deprecated `Power` resource and on
/// `EnvironmentMetrics` (the Supermicro mockup extended as in power_capping.rs).
#[tokio::test]
async fn power_capping_plans_what_it_sends() {
    for builder in [power_legacy(), power_metrics()] {
        let server = builder.start().await.unwrap();
        let mut s = open(&server).await;
        let cases = [
            Action::PowerReading,
            Action::PowerLimitGet,
            Action::PowerLimitSet(PowerLimitSet { watts: Some(450), active: None }),
        ];
        for action in &cases {
            let (plan, done) = plan_equals_execution(&server, &mut s, action).await;
            assert_eq!(plan.change.is_none(), bmcfleet_schema::plan::reads_only(action), "{}: {plan:?}", action.kind());
            assert!(done.is_ok(), "{}: {done:?}", action.kind());
        }
    }
}

#[tokio::test]
async fn dell_users_bmc_reset_and_event_log_clear_plan_what_they_send() {
    let dir = mockup_dir("dell");
    const MGR: &str = "/redfish/v1/Managers/iDRAC.Embedded.1";
    let server = common::slot_accounts(MockupServer::builder().dir(dir.join("bmclib")).unwrap(), 16)
        .resource(&format!("{MGR}/LogServices"), json!({"@odata.id": format!("{MGR}/LogServices"), "Members": [{"@odata.id": format!("{MGR}/LogServices/Sel")}]}))
        .resource(&format!("{MGR}/LogServices/Sel"), json!({"@odata.id": format!("{MGR}/LogServices/Sel"), "Id": "Sel", "LogEntryType": "SEL", "Entries": {"@odata.id": format!("{MGR}/LogServices/Sel/Entries")},
            "Actions": {"#LogService.ClearLog": {"target": format!("{MGR}/LogServices/Sel/Actions/LogService.ClearLog")}}}))
        .resource(&format!("{MGR}/LogServices/Sel/Entries"), json!({"@odata.id": format!("{MGR}/LogServices/Sel/Entries"), "Members": [], "Members@odata.count": 0}))
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    let new_password = "N3w-Passw0rd!";
    let cases = [
        Action::User(UserOp::Create(UserSpec {
            name: "ops".into(),
            password: new_password.into(),
            role: UserRole::Operator,
            enabled: true,
        })),
        Action::User(UserOp::List),
        Action::User(UserOp::Update(UserUpdate {
            name: "ops".into(),
            password: Some(new_password.into()),
            role: None,
            enabled: None,
        })),
        Action::User(UserOp::Delete { name: "ops".into() }),
        Action::BmcReset(BmcResetKind::Cold),
        Action::EventLog(EventLogOp::read()),
        Action::EventLog(EventLogOp::clear()),
    ];
    for action in &cases {
        let (plan, done) = plan_equals_execution(&server, &mut s, action).await;
        let text = serde_json::to_string(&plan).unwrap();
        assert!(!text.contains(new_password), "{}: {text}", action.kind());
        assert!(done.is_ok(), "{}: {done:?}", action.kind());
        assert_eq!(plan.change.is_none(), bmcfleet_schema::plan::reads_only(action), "{}: {plan:?}", action.kind());
    }
    // The password was sent on execution, and shown redacted in the plan.
    let created = server.resource("/redfish/v1/AccountService/Accounts/3").unwrap();
    assert_eq!(created["UserName"], "", "deleted again by the last user case");
}

#[tokio::test]
async fn network_source_and_firmware_update_plan_what_they_send() {
    let eth = "/redfish/v1/Managers/BMC/EthernetInterfaces";
    let server = spec_service()
        .update_service(bmcfleet_testing::redfish::UpdateBehaviour::completes_after(std::time::Duration::ZERO))
        .resource(MANAGER, json!({"Id": "BMC", "EthernetInterfaces": {"@odata.id": eth}}))
        .resource(eth, json!({"Members": [{"@odata.id": format!("{eth}/1")}]}))
        .resource(
            &format!("{eth}/1"),
            json!({"Id": "1", "InterfaceEnabled": true, "DHCPv4": {"DHCPEnabled": false},
                   "IPv4Addresses": [{"Address": "127.0.0.1", "SubnetMask": "255.0.0.0", "Gateway": "127.0.0.254", "AddressOrigin": "Static"}],
                   "IPv4StaticAddresses": [{"Address": "127.0.0.1", "SubnetMask": "255.0.0.0", "Gateway": "127.0.0.254"}]}),
        )
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    let cases = [
        Action::NetworkSource(NetworkSourceOp::Get),
        Action::NetworkSource(NetworkSourceOp::Dhcp),
        Action::FirmwareUpdate(FirmwareUpdate {
            image_uri: Some("https://fw:t0ken@repo.example/bios-2.1.bin?X-Amz-Signature=deadbeef".into()),
            transfer_protocol: Some(TransferProtocol::Https),
            ..FirmwareUpdate::default()
        }),
    ];
    for action in &cases {
        let (plan, _) = plan_equals_execution(&server, &mut s, action).await;
        let text = serde_json::to_string(&plan).unwrap();
        assert!(!text.contains("t0ken") && !text.contains("deadbeef"), "{}: {text}", action.kind());
        assert_eq!(plan.change.is_none(), bmcfleet_schema::plan::reads_only(action), "{}: {plan:?}", action.kind());
    }
}
