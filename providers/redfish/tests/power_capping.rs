//! Power reading and power limit against the Supermicro X12 mockup (bmclib
//! fixture: its System links `Chassis/1`), extended from the DMTF schemas
//! with what the fixture lacks: the chassis with a deprecated `Power`
//! resource (`PowerControl` with `PowerMetrics` and `PowerLimit`, the
//! values of DMTF's public-rackmount1 mockup), or with `EnvironmentMetrics`
//! (`PowerWatts`, `PowerLimitWatts` with its allowable range and
//! `ControlMode`). Limits outside the advertised range send nothing; every
//! change is read back. (sushy-emulator 2.2 serves no power resources.)

mod common;

use bmcfleet_provider::PowerCapping;
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{ErrorCode, PowerLimitSet};
use bmcfleet_testing::redfish::{Fault, MockupServer};
use common::{connector, ctx, patches, power_legacy, power_metrics, supermicro, CHASSIS, METRICS, POWER};
use serde_json::json;

async fn legacy() -> MockupServer {
    power_legacy().start().await.unwrap()
}

async fn metrics() -> MockupServer {
    power_metrics().start().await.unwrap()
}

async fn open(server: &MockupServer) -> RedfishSession {
    connector().open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect")
}

fn set(watts: Option<u32>, active: Option<bool>) -> PowerLimitSet {
    PowerLimitSet { watts, active }
}

#[tokio::test]
async fn legacy_power_control_reading_and_limit() {
    let server = legacy().await;
    let mut s = open(&server).await;
    let c = ctx(10);
    let r = s.power_reading(&c).await.unwrap();
    assert_eq!(
        (r.watts, r.min_watts, r.max_watts, r.average_watts, r.interval_ms, r.source.as_str()),
        (344.0, Some(271.0), Some(489.0), Some(319.0), Some(1_800_000), "PowerControl")
    );
    let l = s.power_limit(&c).await.unwrap();
    assert_eq!(
        (l.watts, l.active, l.allowed_max, l.exception.as_deref()),
        (Some(500), Some(true), Some(800), Some("LogEventOnly"))
    );

    let l = s.set_power_limit(&c, &set(Some(450), None)).await.unwrap();
    assert_eq!((l.watts, l.active), (Some(450), Some(true)));
    assert_eq!(patches(&server, POWER), [json!({"PowerControl": [{"PowerLimit": {"LimitInWatts": 450}}]})]);

    let l = s.set_power_limit(&c, &set(None, Some(false))).await.unwrap();
    assert_eq!((l.watts, l.active), (None, Some(false)));

    // Above PowerCapacityWatts: refused, nothing written.
    server.clear_requests();
    let e = s.set_power_limit(&c, &set(Some(801), Some(true))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(server.writes().is_empty());
}

#[tokio::test]
async fn environment_metrics_limit_is_range_checked_activated_and_read_back() {
    let server = metrics().await;
    let mut s = open(&server).await;
    let c = ctx(10);
    let r = s.power_reading(&c).await.unwrap();
    assert_eq!((r.watts, r.source.as_str()), (374.2, "EnvironmentMetrics"));
    let l = s.power_limit(&c).await.unwrap();
    assert_eq!((l.watts, l.active, l.allowed_min, l.allowed_max), (Some(500), Some(false), Some(200), Some(900)));

    let e = s.set_power_limit(&c, &set(Some(150), None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(server.requests_to("PATCH", METRICS).is_empty(), "below AllowableMin: nothing sent");

    let l = s.set_power_limit(&c, &set(Some(600), Some(true))).await.unwrap();
    assert_eq!((l.watts, l.active), (Some(600), Some(true)));
    assert_eq!(patches(&server, METRICS), [json!({"PowerLimitWatts": {"SetPoint": 600, "ControlMode": "Automatic"}})]);
    assert_eq!(server.resource(METRICS).unwrap()["PowerLimitWatts"]["AllowableMax"], json!(900), "the rest kept");
}

#[tokio::test]
async fn a_limit_the_bmc_accepts_but_does_not_apply_is_an_error() {
    let server = legacy().await;
    let mut s = open(&server).await;
    server.push_fault(Fault::status("PATCH", POWER, 204).times(1));
    let e = s.set_power_limit(&ctx(10), &set(Some(450), None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("reads back 500 W"), "{e}");
}

#[tokio::test]
async fn a_chassis_without_power_resources_is_unsupported() {
    let server = supermicro()
        .resource(CHASSIS, json!({"@odata.id": CHASSIS, "Id": "1", "Name": "Chassis"}))
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    assert_eq!(s.power_reading(&ctx(10)).await.unwrap_err().code, ErrorCode::Unsupported);
    assert_eq!(s.set_power_limit(&ctx(10), &set(Some(400), None)).await.unwrap_err().code, ErrorCode::Unsupported);
    assert!(server.writes().iter().all(|w| w.path.starts_with("/redfish/v1/SessionService")));
}
