//! Power capping over DCMI: against `bmcfleet_testing::ipmi::SpecBmc`
//! (DCMI 1.5 Get Power Reading, Get/Set/Activate Power Limit; proven with
//! `ipmitool dcmi power reading|get_limit|set_limit|activate` in
//! `testing/tests/ipmi_lan_responder.rs`) and OpenIPMI's `ipmi_sim`, which
//! has no DCMI (0xC1: `unsupported`).

mod common;

use bmcfleet_ipmi::IpmiSession;
use bmcfleet_provider::{Ctx, PowerCapping};
use bmcfleet_schema::{ErrorCode, PowerLimitSet};
use bmcfleet_testing::ipmi::{Fault, SpecBmc, SpecHandle};
use std::time::Duration;

fn spec() -> (IpmiSession<SpecBmc>, SpecHandle) {
    let bmc = SpecBmc::new();
    let handle = bmc.handle();
    (IpmiSession::new(bmc, "spec-bmc"), handle)
}

fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(5))
}

fn set(watts: Option<u32>, active: Option<bool>) -> PowerLimitSet {
    PowerLimitSet { watts, active }
}

#[tokio::test]
async fn power_reading_has_the_statistics_and_their_period() {
    let (mut s, bmc) = spec();
    let r = s.power_reading(&ctx()).await.unwrap();
    assert_eq!(
        (r.watts, r.min_watts, r.max_watts, r.average_watts, r.interval_ms, r.source.as_str()),
        (300.0, Some(120.0), Some(450.0), Some(280.0), Some(60_000), "dcmi")
    );
    // Measurement off: no reading is made up.
    bmc.update(|st| st.dcmi.as_mut().unwrap().measuring = false);
    assert_eq!(s.power_reading(&ctx()).await.unwrap_err().code, ErrorCode::Unsupported);
}

#[tokio::test]
async fn limit_is_set_activated_and_read_back() {
    let (mut s, bmc) = spec();
    let c = ctx();
    let before = s.power_limit(&c).await.unwrap();
    assert_eq!(before.active, Some(false), "0x80: no active limit");

    let l = s.set_power_limit(&c, &set(Some(450), Some(true))).await.unwrap();
    assert_eq!((l.watts, l.active, l.exception.as_deref()), (Some(450), Some(true), Some("none")));
    let dcmi = bmc.snapshot().dcmi.unwrap();
    assert_eq!((dcmi.limit_watts, dcmi.limit_active, dcmi.correction_ms), (450, true, 1000), "the rest kept");

    // Deactivate only: no Set Power Limit sent.
    bmc.update(|st| st.calls.clear());
    let l = s.set_power_limit(&c, &set(None, Some(false))).await.unwrap();
    assert_eq!((l.watts, l.active), (Some(450), Some(false)));
    assert_eq!(bmc.snapshot().calls, [(0x2C, 0x03), (0x2C, 0x05), (0x2C, 0x03)]);
}

#[tokio::test]
async fn a_limit_outside_the_bmcs_range_is_refused() {
    let (mut s, bmc) = spec();
    let e = s.set_power_limit(&ctx(), &set(Some(5000), None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(e.message.contains("out of the range"), "{e}");
    assert_eq!(bmc.snapshot().dcmi.unwrap().limit_watts, 0);
}

#[tokio::test]
async fn a_limit_the_bmc_accepts_but_does_not_keep_is_not_reported_done() {
    let (mut s, bmc) = spec();
    // Set Power Limit answered 0x00 without effect: only the read-back tells.
    bmc.inject(0x2C, 0x04, Fault::CompletionCode(0x00));
    let e = s.set_power_limit(&ctx(), &set(Some(400), None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotReached, "{e}");
    assert!(e.message.contains("reads back 0 W"), "{e}");
}

#[tokio::test]
async fn setting_needs_operator_privilege_and_reading_does_not() {
    let (mut s, bmc) = spec();
    bmc.update(|st| st.session_privilege = 2);
    s.power_reading(&ctx()).await.unwrap();
    let e = s.set_power_limit(&ctx(), &set(Some(400), None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
}

#[tokio::test]
async fn ipmi_sim_has_no_dcmi() {
    let sim = common::start_sim();
    let mut s = common::open(&sim).await;
    let e = s.power_reading(&common::ctx()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    let e = s.set_power_limit(&common::ctx(), &set(Some(400), Some(true))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
}
