//! Helpers shared by the integration tests.
#![allow(dead_code)]

use bmcfleet_provider::Ctx;
use bmcfleet_redfish::{RedfishConfig, RedfishConnector};
use std::time::Duration;

/// Log to the test output when `RUST_LOG` is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A connector with short poll intervals (tests wait on real state).
pub fn connector() -> RedfishConnector {
    init_tracing();
    RedfishConnector::new(RedfishConfig {
        request_timeout: Duration::from_secs(20),
        task_poll_interval: Duration::from_millis(20),
        state_poll_interval: Duration::from_millis(200),
        ..RedfishConfig::default()
    })
}

pub fn ctx(secs: u64) -> Ctx {
    Ctx::with_timeout(Duration::from_secs(secs))
}

/// A raw `GET path` through the session's raw capability.
pub async fn raw_get(
    s: &mut bmcfleet_redfish::RedfishSession,
    path: &str,
) -> Result<bmcfleet_schema::RawResponse, bmcfleet_provider::ProviderError> {
    use bmcfleet_provider::Offer as _;
    use bmcfleet_schema::{HttpMethod, RawRedfish, RawRequest};
    let request = RawRequest::Redfish(RawRedfish { method: HttpMethod::Get, path: path.into(), body: None });
    s.raw().unwrap().raw(&ctx(10), &request).await
}

/// `e` has `code` and its message says `words` (the BMC's own, or ours).
#[track_caller]
pub fn assert_error(e: &bmcfleet_provider::ProviderError, code: bmcfleet_schema::ErrorCode, words: &str) {
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(words), "{e}");
}

/// Opening a session on `target` with `credentials` but `password`
/// instead of theirs: the error (the test fails if the session opens).
pub async fn open_with_password(
    target: &bmcfleet_schema::BmcTarget,
    mut credentials: bmcfleet_provider::ResolvedCredentials,
    password: &str,
    secs: u64,
) -> bmcfleet_provider::ProviderError {
    credentials.password = password.into();
    connector().open(&ctx(secs), target, &credentials).await.err().expect("must fail")
}

use bmcfleet_testing::redfish::fixtures::mockup_dir;
#[allow(unused_imports)]
pub use bmcfleet_testing::redfish::spec::{spec_service, MANAGER, RESET, SYSTEM};
use bmcfleet_testing::redfish::{MockupBuilder, MockupServer};
use serde_json::json;

/// A standard (POST/DELETE) AccountService with the login account and one more.
pub fn standard_accounts(builder: MockupBuilder) -> MockupBuilder {
    builder
        .resource(
            "/redfish/v1/AccountService",
            json!({"@odata.type": "#AccountService.v1_12_0.AccountService", "Id": "AccountService",
                   "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"},
                   "Roles": {"@odata.id": "/redfish/v1/AccountService/Roles"}}),
        )
        .resource(
            "/redfish/v1/AccountService/Accounts",
            json!({"Members": [{"@odata.id": "/redfish/v1/AccountService/Accounts/1"},
                               {"@odata.id": "/redfish/v1/AccountService/Accounts/2"}], "Members@odata.count": 2}),
        )
        .resource(
            "/redfish/v1/AccountService/Accounts/1",
            json!({"Id": "1", "UserName": "admin", "RoleId": "Administrator", "Enabled": true, "Password": null,
                   "@odata.etag": "W/\"acct-1\""}),
        )
        .resource(
            "/redfish/v1/AccountService/Accounts/2",
            json!({"Id": "2", "UserName": "viewer", "RoleId": "ReadOnly", "Enabled": true, "Password": null,
                   "@odata.etag": "W/\"acct-2\""}),
        )
}

/// A fixed-slot AccountService like iDRAC's (16 slots, slot 1 reserved and
/// empty, slot 2 `root`, POST refused), built from its documented behaviour.
pub fn slot_accounts(builder: MockupBuilder, slots: u32) -> MockupBuilder {
    let members: Vec<_> =
        (1..=slots).map(|i| json!({"@odata.id": format!("/redfish/v1/AccountService/Accounts/{i}")})).collect();
    let mut b = builder
        .resource(
            "/redfish/v1/AccountService",
            json!({"Id": "AccountService", "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}}),
        )
        .resource("/redfish/v1/AccountService/Accounts", json!({"Members": members, "Members@odata.count": slots}))
        .deny("POST", "/redfish/v1/AccountService/Accounts");
    for i in 1..=slots {
        let (name, enabled, role) = match i {
            2 => ("root", true, "Administrator"),
            _ => ("", false, "None"),
        };
        b = b.resource(
            &format!("/redfish/v1/AccountService/Accounts/{i}"),
            json!({"Id": i.to_string(), "UserName": name, "Enabled": enabled, "RoleId": role, "Password": null}),
        );
        b = b.deny("DELETE", &format!("/redfish/v1/AccountService/Accounts/{i}"));
    }
    b
}

pub const CHASSIS: &str = "/redfish/v1/Chassis/1";
pub const POWER: &str = "/redfish/v1/Chassis/1/Power";
pub const METRICS: &str = "/redfish/v1/Chassis/1/EnvironmentMetrics";

pub fn supermicro() -> MockupBuilder {
    let d = mockup_dir("supermicro").join("bmclib");
    MockupServer::builder()
        .file(d.join("smc_1.14.0_serviceroot.json"))
        .unwrap()
        .file(d.join("smc_1.14.0_systems.json"))
        .unwrap()
        .file(d.join("smc_1.14.0_systems_1.json"))
        .unwrap()
}

/// The Supermicro X12 mockup with a chassis whose deprecated `Power`
/// resource has `PowerControl` (metrics and a limit: DMTF public-rackmount1's values).
pub fn power_legacy() -> MockupBuilder {
    supermicro()
        .resource(CHASSIS, json!({"@odata.id": CHASSIS, "@odata.type": "#Chassis.v1_14_0.Chassis", "Id": "1", "Name": "Chassis",
            "Power": {"@odata.id": POWER}}))
        .resource(POWER, json!({"@odata.id": POWER, "@odata.type": "#Power.v1_7_1.Power", "Id": "Power", "Name": "Power",
            "PowerControl": [{"@odata.id": format!("{POWER}#/PowerControl/0"), "MemberId": "0", "Name": "System Power Control",
                "PowerConsumedWatts": 344, "PowerRequestedWatts": 800, "PowerAvailableWatts": 0, "PowerCapacityWatts": 800, "PowerAllocatedWatts": 800,
                "PowerMetrics": {"IntervalInMin": 30, "MinConsumedWatts": 271, "MaxConsumedWatts": 489, "AverageConsumedWatts": 319},
                "PowerLimit": {"LimitInWatts": 500, "LimitException": "LogEventOnly", "CorrectionInMs": 50}}]}))
}

/// The Supermicro X12 mockup with a chassis' `EnvironmentMetrics`
/// (`PowerWatts`, `PowerLimitWatts` with its range and `ControlMode`).
pub fn power_metrics() -> MockupBuilder {
    supermicro()
        .resource(
            CHASSIS,
            json!({"@odata.id": CHASSIS, "@odata.type": "#Chassis.v1_23_0.Chassis", "Id": "1", "Name": "Chassis",
            "EnvironmentMetrics": {"@odata.id": METRICS}}),
        )
        .resource(
            METRICS,
            json!({"@odata.id": METRICS, "@odata.type": "#EnvironmentMetrics.v1_3_0.EnvironmentMetrics",
            "Id": "EnvironmentMetrics", "Name": "Chassis Environment Metrics",
            "PowerWatts": {"DataSourceUri": "/redfish/v1/Chassis/1/Sensors/TotalPower", "Reading": 374.2},
            "PowerLimitWatts": {"SetPoint": 500, "AllowableMin": 200, "AllowableMax": 900, "ControlMode": "Disabled"}}),
        )
}

/// The JSON bodies of the PATCHes `server` received for `path`, in order.
pub fn patches(server: &MockupServer, path: &str) -> Vec<serde_json::Value> {
    server.requests_to("PATCH", path).iter().map(|r| r.json().unwrap_or(serde_json::Value::Null)).collect()
}
