//! The identify light: Chassis Identify (chassis 0x04) and the identify
//! state of Get Chassis Status, against OpenIPMI's `ipmi_sim` (which passes
//! the request to its chassis program but reports no identify state) and
//! `bmcfleet_testing::ipmi::SpecBmc` (which reports it, as IPMI v2.0 §28.2
//! allows; the same responder `ipmitool chassis identify` is run against in
//! `testing/tests/ipmi_lan_responder.rs`).

mod common;

use bmcfleet_ipmi::IpmiSession;
use bmcfleet_provider::{perform, Ctx, Identify};
use bmcfleet_schema::{Action, ActionData, ErrorCode, IdentifyLight, IdentifySet, IdentifyState};
use bmcfleet_testing::ipmi::{SpecBmc, SpecHandle, SpecIdentify};
use std::time::Duration;

fn spec() -> (IpmiSession<SpecBmc>, SpecHandle) {
    let bmc = SpecBmc::new();
    let handle = bmc.handle();
    (IpmiSession::new(bmc, "spec-bmc"), handle)
}

fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(5))
}

fn set(light: IdentifyLight, seconds: Option<u16>) -> IdentifySet {
    IdentifySet { light, seconds }
}

#[tokio::test]
async fn on_off_and_timed_identify_are_read_back() {
    let (mut s, bmc) = spec();
    let ctx = ctx();
    let off = s.identify(&ctx).await.unwrap();
    assert_eq!((off.light, off.timed, off.note.as_deref()), (Some(IdentifyLight::Off), false, None));

    let on = s.set_identify(&ctx, &set(IdentifyLight::On, None)).await.unwrap();
    assert_eq!((on.light, on.timed), (Some(IdentifyLight::On), false));
    assert_eq!(bmc.snapshot().identify, SpecIdentify::Forced);

    let timed = s.set_identify(&ctx, &set(IdentifyLight::Blink, Some(30))).await.unwrap();
    assert_eq!((timed.light, timed.timed), (Some(IdentifyLight::On), true));
    assert!(matches!(bmc.snapshot().identify, SpecIdentify::Until(_)));

    let off = s.set_identify(&ctx, &set(IdentifyLight::Off, None)).await.unwrap();
    assert_eq!(off.light, Some(IdentifyLight::Off));
    assert_eq!(bmc.snapshot().identify, SpecIdentify::Off);
    // Chassis Identify then Get Chassis Status, three times over, after the first read.
    let calls = bmc.snapshot().calls;
    assert_eq!(calls[1..], [(0x00, 0x04), (0x00, 0x01), (0x00, 0x04), (0x00, 0x01), (0x00, 0x04), (0x00, 0x01)]);
}

#[tokio::test]
async fn a_timed_identify_goes_off_by_itself() {
    let (mut s, bmc) = spec();
    let ctx = ctx();
    s.set_identify(&ctx, &set(IdentifyLight::On, Some(1))).await.unwrap();
    // The BMC's own timer, moved to its end rather than waited for.
    bmc.update(|st| st.identify = SpecIdentify::Until(tokio::time::Instant::now()));
    assert_eq!(s.identify(&ctx).await.unwrap().light, Some(IdentifyLight::Off));
}

#[tokio::test]
async fn a_change_the_bmc_accepts_but_does_not_make_is_not_reported_done() {
    let (mut s, bmc) = spec();
    let ctx = ctx();
    // The BMC answers 0x00 to Chassis Identify and changes nothing: the
    // read-back must catch it (without it this reports success).
    bmc.inject(0x00, 0x04, bmcfleet_testing::ipmi::Fault::CompletionCode(0x00));
    let e = s.set_identify(&ctx, &set(IdentifyLight::On, None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotReached, "{e}");
    assert!(e.message.contains("still reports the light off"), "{e}");
}

#[tokio::test]
async fn force_on_refused_says_to_ask_for_seconds() {
    let (mut s, bmc) = spec();
    let ctx = ctx();
    bmc.update(|st| st.identify_force_supported = false);
    let e = s.set_identify(&ctx, &set(IdentifyLight::On, None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("Force Identify On"), "{e}");
    assert_eq!(bmc.snapshot().identify, SpecIdentify::Off);
    // A timed identify still works there.
    let on = s.set_identify(&ctx, &set(IdentifyLight::On, Some(10))).await.unwrap();
    assert_eq!((on.light, on.timed), (Some(IdentifyLight::On), true));
}

#[tokio::test]
async fn a_bmc_that_does_not_report_identify_state_says_so() {
    let (mut s, bmc) = spec();
    let ctx = ctx();
    bmc.update(|st| st.identify_state_reported = false);
    let read = s.identify(&ctx).await.unwrap();
    assert_eq!(read.light, None);
    assert!(read.note.unwrap().contains("does not report"));
    let done = s.set_identify(&ctx, &set(IdentifyLight::On, None)).await.unwrap();
    assert_eq!(done.light, None, "not verified: no light claimed");
    assert!(done.note.unwrap().contains("not read back"));
    assert_eq!(bmc.snapshot().identify, SpecIdentify::Forced);
}

#[tokio::test]
async fn identify_needs_operator_privilege() {
    let (mut s, bmc) = spec();
    let ctx = ctx();
    bmc.update(|st| st.session_privilege = 2);
    let e = s.set_identify(&ctx, &set(IdentifyLight::On, None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
}

/// ipmi_sim accepts Chassis Identify (passing it to its chassis program as
/// `identify INTERVAL FORCE`) but its Get Chassis Status reports no
/// identify state: the result says so and claims no light.
#[tokio::test]
async fn ipmi_sim_receives_identify_and_reports_no_state() {
    let sim = common::start_sim();
    let mut s = common::open(&sim).await;
    let ctx = common::ctx();
    let got = perform(&mut s, &ctx, &Action::Identify(set(IdentifyLight::On, None))).await.unwrap();
    let Some(ActionData::Identify(IdentifyState { light, note, source, .. })) = got else { panic!("{got:?}") };
    assert_eq!((light, source.as_str()), (None, "chassis_status"));
    assert!(note.unwrap().contains("not read back"));
    assert_eq!(sim.identify().as_deref(), Some("0 1"), "Force Identify On");

    s.set_identify(&ctx, &set(IdentifyLight::Blink, Some(42))).await.unwrap();
    assert_eq!(sim.identify().as_deref(), Some("42 0"));
    s.set_identify(&ctx, &set(IdentifyLight::Off, None)).await.unwrap();
    assert_eq!(sim.identify().as_deref(), Some("0 0"));
    assert_eq!(s.identify(&ctx).await.unwrap().light, None);
    // ipmitool's view of the same BMC: identify is accepted now.
    sim.ipmitool(&["chassis", "identify", "5"]).expect("ipmitool chassis identify 5");
    assert_eq!(sim.identify().as_deref(), Some("5 0"));
}
