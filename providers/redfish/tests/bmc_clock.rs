//! The BMC clock against the DMTF public-rackmount1 mockup's Manager
//! (`DateTime`, `DateTimeLocalOffset`): drift measured, a sync PATCHed with
//! the worker's UTC time and read back; a PATCH that does not apply is an error.

mod common;

use bmcfleet_provider::BmcClockControl;
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::ErrorCode;
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
