//! Plan mode equals execution, for every capability, against OpenIPMI's
//! `ipmi_sim` over RMCP+ and against the spec responder (`SpecBmc`) for
//! what `ipmi_sim` refuses (NMI, warm reset, clearing the SEL in steps).
//! The transport is the real one wrapped in `Recorded`, which keeps every
//! request it sent: plan mode sends exactly the plan's reads and leaves the
//! BMC as it was; execution sends the same reads, then the plan's change.

mod common;

use bmcfleet_ipmi::{IpmiSession, Request, RmcpConfig, RmcpSockets, RmcpTransport, Transport};
use bmcfleet_provider::{perform, ActionPlan, Ctx, Plan, PlannedRequest, ProviderError};
use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::{IpmiSim, Recorded, SpecBmc};
use common::{ctx, start_sim};
use std::time::Duration;

fn take(s: &IpmiSession<Recorded<impl Transport>>) -> Vec<Request> {
    std::mem::take(&mut *s.transport().log().lock().unwrap())
}

fn matches(sent: &Request, planned: &PlannedRequest) -> bool {
    let PlannedRequest::Ipmi { netfn, cmd, data, .. } = planned else { return false };
    (sent.netfn, sent.cmd) == (*netfn, *cmd)
        && if data == bmcfleet_schema::plan::REDACTED {
            !sent.data.is_empty()
        } else {
            // `x`: a reservation id's nibble (the BMC's, per call) or the
            // worker's clock (Set SEL Time: a run sends a later time).
            let hex = bmcfleet_schema::hex(&sent.data);
            hex.len() == data.len() && hex.chars().zip(data.chars()).all(|(h, d)| d == 'x' || h == d)
        }
}

/// Whether `sent` is `plan` in order, with some of the plan's reads left
/// out (the session caches what it read once, such as the channel number).
fn in_order(sent: &[Request], plan: &[PlannedRequest]) -> bool {
    let mut rest = plan.iter();
    sent.iter().all(|r| rest.any(|p| matches(r, p)))
}

/// Plan `action`; `state` says what the BMC holds (it must not change);
/// execute; compare the wire with the plan.
async fn plan_equals_execution<T: Transport + 'static>(
    s: &mut IpmiSession<Recorded<T>>,
    action: &Action,
    state: &dyn Fn() -> String,
) -> (ActionPlan, bmcfleet_provider::Result<Option<ActionData>>) {
    let what = action.kind();
    let before = state();
    take(s);
    let plan = Plan::new();
    let pctx: Ctx = ctx().with_plan(plan.clone()).for_attempt();
    let planned = perform(s, &pctx, action).await;
    let p = plan.snapshot();
    let sent = take(s);
    assert_eq!(state(), before, "{what}: plan mode changed the BMC");
    assert_eq!(sent.len(), p.reads.len() + p.reads_omitted as usize, "{what}: plan mode sent only its reads");
    assert!(sent.iter().zip(&p.reads).all(|(r, p)| matches(r, p)), "{what}: {sent:?} / {p:?}");
    if plan.stopped() {
        assert_eq!(planned.as_ref().unwrap_err(), &ProviderError::planned(), "{what}");
    }

    let done = perform(s, &ctx().for_attempt(), action).await;
    let sent = take(s);
    let first_change = sent.iter().position(|r| !bmcfleet_ipmi::reads_only(r.netfn, r.cmd));
    let reads = &sent[..first_change.unwrap_or(sent.len())];
    if p.reads_omitted == 0 {
        assert!(in_order(reads, &p.reads), "{what}: execution read what the plan read: {reads:?} / {p:?}");
    }
    match (&p.change, first_change) {
        (Some(change), Some(i)) => {
            assert!(matches(&sent[i], change), "{what}: the plan's change {change:?}, sent {:?}", sent[i])
        }
        (None, None) => assert_eq!(planned.is_ok(), done.is_ok(), "{what}: {planned:?} / {done:?}"),
        (change, i) => panic!("{what}: the plan's change {change:?}, execution's {:?}", i.map(|i| &sent[i])),
    }
    (p, done)
}

/// One action of every capability (the IPMI ones, and those IPMI lacks:
/// planned as `unsupported`, as they execute). `new_password` is a new user's.
fn actions(new_password: &str) -> Vec<Action> {
    vec![
        Action::Power(PowerOp::Status),
        Action::Power(PowerOp::On),
        Action::Power(PowerOp::Reset),
        Action::Power(PowerOp::Cycle),
        Action::Power(PowerOp::Off),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false }),
        Action::GetBootDevice,
        Action::User(UserOp::List),
        Action::User(UserOp::Create(UserSpec {
            name: "planned".into(),
            password: new_password.into(),
            role: UserRole::Operator,
            enabled: true,
        })),
        Action::User(UserOp::Update(UserUpdate {
            name: "planned".into(),
            password: Some(new_password.into()),
            role: None,
            enabled: None,
        })),
        Action::User(UserOp::Delete { name: "planned".into() }),
        Action::NetworkSource(NetworkSourceOp::Get),
        Action::NetworkSource(NetworkSourceOp::Dhcp),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: vec![] })),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x00, cmd: 0x02, data: vec![0x01] })),
        Action::Inventory,
        Action::EventLog(EventLogOp::read()),
        Action::EventLog(EventLogOp::clear()),
        Action::Sensors,
        Action::BmcReset(BmcResetKind::Cold),
        Action::BiosGet,
        Action::SecureBootGet,
        Action::IdentifyGet,
        Action::Identify(IdentifySet { light: IdentifyLight::On, seconds: None }),
        Action::Identify(IdentifySet { light: IdentifyLight::Blink, seconds: Some(20) }),
        Action::BmcClockGet,
        Action::BmcClockSync,
        Action::PowerReading,
        Action::PowerLimitGet,
        Action::PowerLimitSet(PowerLimitSet { watts: Some(400), active: Some(true) }),
        Action::VirtualMedia(VirtualMediaOp::Eject { media: MediaKind::Cd }),
        Action::FirmwareUpdate(FirmwareUpdate {
            image_uri: Some("https://repo.example/x.bin".into()),
            ..Default::default()
        }),
    ]
}

fn check_plan(action: &Action, p: &ActionPlan, new_password: &str) {
    let text = serde_json::to_string(p).unwrap();
    assert!(
        !text.contains(new_password) && !text.contains(&bmcfleet_schema::hex(new_password.as_bytes())),
        "{}: {text}",
        action.kind()
    );
    if let Action::Raw(RawRequest::Ipmi(r)) = action {
        if !r.data.is_empty() {
            assert!(text.contains("[redacted]"), "raw data is never shown: {text}");
        }
    }
}

#[tokio::test]
async fn spec_responder_plans_equal_execution_for_every_capability() {
    let bmc = SpecBmc::new();
    let handle = bmc.handle();
    let mut s = IpmiSession::new(Recorded::new(bmc), "spec-bmc");
    let state = || {
        let mut st = handle.snapshot();
        st.calls.clear();
        // Reserve SEL hands out a new reservation id: no state a machine keeps.
        st.sel_reservation = 0;
        format!("{st:?}")
    };
    let new_password = "Pl4n-pass!";
    let mut all = actions(new_password);
    all.push(Action::Power(PowerOp::On));
    all.push(Action::Power(PowerOp::Nmi));
    all.push(Action::Power(PowerOp::SoftOff));
    all.push(Action::BmcReset(BmcResetKind::Warm));
    all.push(Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
        address: "192.0.2.7".parse().unwrap(),
        netmask: "255.255.255.0".parse().unwrap(),
        gateway: None,
    })));
    for action in &all {
        let (p, _) = plan_equals_execution(&mut s, action, &state).await;
        check_plan(action, &p, new_password);
        assert_eq!(
            p.change.is_some(),
            !bmcfleet_schema::plan::reads_only(action)
                && !matches!(action, Action::Raw(RawRequest::Ipmi(r)) if r.cmd == 0x01)
                && !unsupported_on_ipmi(action),
            "{}: {p:?}",
            action.kind()
        );
    }
}

fn unsupported_on_ipmi(action: &Action) -> bool {
    matches!(action, Action::BiosGet | Action::SecureBootGet | Action::VirtualMedia(_) | Action::FirmwareUpdate(_))
}

async fn rmcp_session(sim: &IpmiSim) -> IpmiSession<Recorded<RmcpTransport>> {
    let config = RmcpConfig { attempt_timeout: Duration::from_millis(300), retries: 2, ..Default::default() };
    let transport = RmcpTransport::connect(
        &RmcpSockets::new(4),
        sim.socket_addr(),
        sim.username().to_owned(),
        sim.password().clone(),
        config,
        tokio::time::Instant::now() + Duration::from_secs(10),
        None,
    )
    .await
    .expect("RMCP+ session");
    IpmiSession::new(Recorded::new(transport), "ipmi_sim")
}

#[tokio::test]
async fn ipmi_sim_plans_equal_execution_for_every_capability() {
    let sim = start_sim();
    let mut s = rmcp_session(&sim).await;
    let state = || {
        let users = sim.ipmitool(&["user", "list", "1"]).expect("ipmitool user list");
        let sel = sim.ipmitool(&["sel", "info"]).map(|o| common::field(&o, "Entries")).expect("ipmitool sel info");
        let lan = sim.ipmitool(&["lan", "print", "1"]).map(|o| common::field(&o, "IP Address Source")).expect("lan");
        format!("{:?} {users} {sel:?} {lan:?} {:?}", sim.chassis_log(), sim.boot_device())
    };
    let new_password = "Pl4n-pass!";
    for action in &actions(new_password) {
        let (p, _) = plan_equals_execution(&mut s, action, &state).await;
        check_plan(action, &p, new_password);
    }
    s.transport_mut().close().await;
}
