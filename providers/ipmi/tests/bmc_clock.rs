//! The BMC clock (Get / Set SEL Time) against `SpecBmc` and OpenIPMI's
//! `ipmi_sim`, cross-checked with `ipmitool sel time get`.

mod common;

use bmcfleet_ipmi::IpmiSession;
use bmcfleet_provider::{BmcClockControl, Ctx};
use bmcfleet_schema::ErrorCode;
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

#[tokio::test]
async fn drift_is_measured_and_a_sync_is_read_back() {
    let (mut s, bmc) = spec();
    bmc.update(|st| st.sel_clock_offset = -3600);
    let c = s.bmc_clock(&ctx()).await.unwrap();
    assert_eq!(c.source, "sel_time");
    // An hour behind, within the clock's one-second resolution.
    assert!((c.drift_ms + 3_600_000).abs() <= 1_500, "{c:?}");
    assert!(c.time.ends_with('Z'), "{c:?}");
    let synced = s.sync_bmc_clock(&ctx()).await.unwrap();
    assert!(synced.drift_ms.abs() <= 1_500, "{synced:?}");
    assert!(bmc.snapshot().sel_clock_offset.abs() <= 1);
}

#[tokio::test]
async fn a_sync_the_bmc_accepts_but_does_not_make_is_not_reported_done() {
    let (mut s, bmc) = spec();
    bmc.update(|st| st.sel_clock_offset = -3600);
    bmc.inject(0x0A, 0x49, Fault::CompletionCode(0x00));
    let e = s.sync_bmc_clock(&ctx()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotReached, "{e}");
}

#[tokio::test]
async fn setting_the_clock_needs_operator_privilege() {
    let (mut s, bmc) = spec();
    bmc.update(|st| st.session_privilege = 2);
    s.bmc_clock(&ctx()).await.unwrap();
    assert_eq!(s.sync_bmc_clock(&ctx()).await.unwrap_err().code, ErrorCode::PermissionDenied);
}

#[tokio::test]
async fn ipmi_sim_clock_is_read_and_synced() {
    let sim = common::start_sim();
    let mut s = common::open(&sim).await;
    let c = common::ctx();
    let before = s.bmc_clock(&c).await.unwrap();
    eprintln!("ipmi_sim clock before: {before:?}");
    let synced = s.sync_bmc_clock(&c).await.unwrap();
    assert!(synced.drift_ms.abs() <= 2_000, "{synced:?}");
    // ipmitool reads the same clock: MM/DD/YY HH:MM:SS UTC (the date is compared).
    let tool = sim.ipmitool(&["sel", "time", "get"]).expect("ipmitool sel time get");
    let day = time::OffsetDateTime::parse(&synced.time, &time::format_description::well_known::Rfc3339).unwrap();
    let want = format!("{:02}/{:02}/{:02}", u8::from(day.month()), day.day(), day.year() % 100);
    assert!(tool.contains(&want), "{tool} vs {synced:?}");
}

/// IPMI has no NTP settings: both NTP actions answer `unsupported` with the
/// reason (the clock can only be set), and nothing is sent to the BMC.
#[tokio::test]
async fn ntp_is_unsupported_with_the_reason_and_sends_nothing() {
    let (mut s, bmc) = spec();
    let before = bmc.snapshot().sel_clock_offset;
    for action in [
        bmcfleet_schema::Action::NtpGet,
        bmcfleet_schema::Action::NtpSet(bmcfleet_schema::NtpSet {
            servers: Some(vec!["10.0.0.1".into()]),
            enabled: None,
        }),
    ] {
        let e = bmcfleet_provider::perform(&mut s, &ctx(), &action).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
        assert!(e.message.contains("Set SEL Time"), "{e}");
    }
    assert_eq!(bmc.snapshot().sel_clock_offset, before);
}
