//! The BMC clock against the DMTF public-rackmount1 mockup's Manager
//! (`DateTime`, `DateTimeLocalOffset`): drift measured, a sync PATCHed with
//! the worker's UTC time and read back; a PATCH that does not apply is an error.

mod common;

use bmcfleet_provider::BmcClockControl;
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{Action, ErrorCode, NtpSet};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{Fault, MockupServer};
use common::{connector, ctx};
use serde_json::json;

const MGR: &str = "/redfish/v1/Managers/BMC";

async fn start() -> (MockupServer, RedfishSession) {
    let server = MockupServer::builder()
        .dir(mockup_dir("dmtf-public-rackmount1"))
        .unwrap()
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": MGR}]}))
        .start()
        .await
        .unwrap();
    let s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    (server, s)
}

#[tokio::test]
async fn manager_datetime_drift_and_sync() {
    let (server, mut s) = start().await;
    let c = s.bmc_clock(&ctx(10)).await.unwrap();
    assert_eq!((c.source.as_str(), c.utc_offset.as_deref()), ("DateTime", Some("+06:00")));
    assert!(c.drift_ms < -300_000_000_000, "the mockup's clock is in 2015: {c:?}");

    let synced = s.sync_bmc_clock(&ctx(10)).await.unwrap();
    assert!(synced.drift_ms.abs() <= 2_000, "{synced:?}");
    let patches = server.requests_to("PATCH", MGR);
    assert_eq!(patches.len(), 1);
    let body = patches[0].json().unwrap();
    assert_eq!(body.as_object().unwrap().keys().collect::<Vec<_>>(), ["DateTime"], "nothing else written");
}

#[tokio::test]
async fn a_sync_the_bmc_accepts_but_does_not_apply_is_an_error() {
    let (server, mut s) = start().await;
    server.push_fault(Fault::status("PATCH", MGR, 204).times(1));
    let e = s.sync_bmc_clock(&ctx(10)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
}

/// The Manager's NetworkProtocol, built after DSP0268 ManagerNetworkProtocol
/// (the capture links it but does not hold it): NTP with a fixed list of
/// three slots, one empty, as iDRAC and bmcweb show it.
fn with_ntp(builder: bmcfleet_testing::redfish::MockupBuilder) -> bmcfleet_testing::redfish::MockupBuilder {
    builder.resource(
        &format!("{MGR}/NetworkProtocol"),
        json!({"@odata.type": "#ManagerNetworkProtocol.v1_9_0.ManagerNetworkProtocol", "Id": "NetworkProtocol",
               "Name": "Manager Network Protocol", "@odata.etag": "\"np-1\"",
               "HTTPS": {"ProtocolEnabled": true, "Port": 443},
               "NTP": {"ProtocolEnabled": false, "Port": 123, "NTPServers": ["0.pool.ntp.org", "", ""]}}),
    )
}

async fn start_ntp(ntp: bool) -> (MockupServer, RedfishSession) {
    let mut b = MockupServer::builder()
        .dir(mockup_dir("dmtf-public-rackmount1"))
        .unwrap()
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": MGR}]}));
    if ntp {
        b = with_ntp(b);
    }
    let server = b.start().await.unwrap();
    let s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    server.clear_requests();
    (server, s)
}

#[tokio::test]
async fn ntp_servers_are_read_set_and_read_back() {
    let (server, mut s) = start_ntp(true).await;
    let n = s.ntp(&ctx(10)).await.unwrap();
    assert_eq!(
        (n.servers, n.enabled, n.source.as_str()),
        (vec!["0.pool.ntp.org".to_owned()], Some(false), "NetworkProtocol")
    );
    let set = NtpSet { servers: Some(vec!["10.0.0.1".into(), "ntp.example.org".into()]), enabled: Some(true) };
    let after = s.set_ntp(&ctx(10), &set).await.unwrap();
    assert_eq!((after.servers.clone(), after.enabled), (set.servers.clone().unwrap(), Some(true)));
    let patches = server.requests_to("PATCH", &format!("{MGR}/NetworkProtocol"));
    assert_eq!(patches.len(), 1);
    assert_eq!(
        patches[0].json().unwrap(),
        json!({"NTP": {"NTPServers": ["10.0.0.1", "ntp.example.org"], "ProtocolEnabled": true}})
    );
    assert_eq!(patches[0].header("if-match"), Some("\"np-1\""), "the BMC's ETag is sent back");
    // Only what is asked for is written.
    s.set_ntp(&ctx(10), &NtpSet { servers: None, enabled: Some(false) }).await.unwrap();
    let last = server.requests_to("PATCH", &format!("{MGR}/NetworkProtocol")).pop().unwrap();
    assert_eq!(last.json().unwrap(), json!({"NTP": {"ProtocolEnabled": false}}));
}

#[tokio::test]
async fn ntp_that_does_not_read_back_is_an_error() {
    let (server, mut s) = start_ntp(true).await;
    server.push_fault(Fault::status("PATCH", &format!("{MGR}/NetworkProtocol"), 204).times(1));
    let e = s.set_ntp(&ctx(10), &NtpSet { servers: Some(vec!["10.0.0.9".into()]), enabled: None }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
}

/// No NetworkProtocol resource (or none with NTP): unsupported, nothing sent.
#[tokio::test]
async fn no_ntp_advertised_means_nothing_is_sent() {
    let (server, mut s) = start_ntp(false).await;
    let e = s.ntp(&ctx(10)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    let e = s.set_ntp(&ctx(10), &NtpSet { servers: Some(vec!["10.0.0.9".into()]), enabled: None }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(server.writes().is_empty(), "{:?}", server.writes());

    // A NetworkProtocol whose NTP shows no server list is not sent one.
    let server = with_ntp(
        MockupServer::builder()
            .dir(mockup_dir("dmtf-public-rackmount1"))
            .unwrap()
            .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": MGR}]})),
    )
    .start()
    .await
    .unwrap();
    server.set_resource(
        &format!("{MGR}/NetworkProtocol"),
        json!({"@odata.id": format!("{MGR}/NetworkProtocol"), "NTP": {"ProtocolEnabled": true}}),
    );
    let mut s = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    server.clear_requests();
    let e = s.set_ntp(&ctx(10), &NtpSet { servers: Some(vec!["10.0.0.9".into()]), enabled: None }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(server.writes().is_empty(), "{:?}", server.writes());
}

#[tokio::test]
async fn ntp_set_plans_its_one_patch() {
    let (server, mut s) = start_ntp(true).await;
    let plan = bmcfleet_provider::Plan::new();
    let set = Action::NtpSet(NtpSet { servers: Some(vec!["10.0.0.1".into()]), enabled: Some(true) });
    let e = bmcfleet_provider::perform(&mut s, &ctx(20).with_plan(plan.clone()).for_attempt(), &set).await.unwrap_err();
    assert_eq!(e, bmcfleet_provider::ProviderError::planned());
    assert!(server.writes().is_empty());
    let Some(bmcfleet_provider::PlannedRequest::Redfish { method, path, body }) = plan.snapshot().change else {
        panic!("a PATCH planned")
    };
    assert_eq!((method.as_str(), path.as_str()), ("PATCH", format!("{MGR}/NetworkProtocol").as_str()));
    bmcfleet_provider::perform(&mut s, &ctx(20).for_attempt(), &set).await.unwrap();
    assert_eq!(server.writes()[0].json(), body);
}

#[tokio::test]
async fn sushy_emulator_has_no_ntp_settings() {
    use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
    let builder =
        SushyEmulator::builder().systems(vec![FakeSystem::new("9a1d0c6e-1111-4c3a-9d55-000000000032", "node32", "On")]);
    let Some(emu) = SushyEmulator::start_or_skip(builder, "sushy_ntp").await else { return };
    let mut s = connector().open(&ctx(20), &emu.target(), &emu.credentials()).await.unwrap();
    let e = s.ntp(&ctx(10)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    let e = s.set_ntp(&ctx(10), &NtpSet { servers: Some(vec!["10.0.0.9".into()]), enabled: None }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
}
