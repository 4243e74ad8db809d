//! Plan mode equals execution, for every capability, against the AMT
//! fixture server (captured AMT answers behind real Digest auth), which
//! records every request. Plan mode sends only the plan's reads (Get,
//! Enumerate, Pull) and changes nothing (no event, the same power and
//! boot state); execution then sends the same reads and, as its first
//! state-changing request, the plan's change (action, resource, selectors).

use crate::common::{ctx, session};
use crate::fixture_server;
use bmcfleet_amt::AmtSession;
use bmcfleet_provider::{perform, ActionPlan, Plan, PlannedRequest, ProviderError};
use bmcfleet_schema::*;
use bmcfleet_testing::amt::{AmtFixtureServer, RecordedRequest};

/// The authenticated requests (a Digest challenge's 401 is the same request again).
fn sent(server: &AmtFixtureServer) -> Vec<RecordedRequest> {
    let out = server.requests().into_iter().filter(|r| r.status != 401).collect();
    server.clear_log();
    out
}

fn matches(r: &RecordedRequest, p: &PlannedRequest) -> bool {
    let PlannedRequest::Wsman { action, resource_uri, selectors, .. } = p else { return false };
    let mut got = r.selectors.clone();
    got.sort();
    let want: Vec<(String, String)> = selectors.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    r.action.as_deref() == Some(action.as_str())
        && r.resource_uri.as_deref() == Some(resource_uri.as_str())
        && got == want
}

fn reads_only(r: &RecordedRequest) -> bool {
    let a = r.action.as_deref().unwrap_or_default();
    ["/transfer/Get", "/enumeration/Enumerate", "/enumeration/Pull"].iter().any(|v| a.ends_with(v))
}

async fn plan_equals_execution(server: &AmtFixtureServer, s: &mut AmtSession, action: &Action) -> ActionPlan {
    let what = action.kind();
    let state = || format!("{} {:?} {:?}", server.power_state(), server.boot_state(), server.events());
    sent(server);
    let before = state();
    let plan = Plan::new();
    let planned = perform(s, &ctx().with_plan(plan.clone()).for_attempt(), action).await;
    let p = plan.snapshot();
    assert_eq!(state(), before, "{what}: plan mode changed the AMT device");
    let reads = sent(server);
    assert_eq!(reads.len(), p.reads.len(), "{what}: plan mode sent its reads only: {reads:?} / {p:?}");
    assert!(reads.iter().zip(&p.reads).all(|(r, p)| matches(r, p)), "{what}: {reads:?} / {p:?}");
    if plan.stopped() {
        // (AMT's error type wraps the message; the worker goes by the recorder.)
        let e = planned.as_ref().unwrap_err();
        assert!(e.code == ProviderError::planned().code && e.not_sent && !e.retryable, "{what}: {e:?}");
    }

    let done = perform(s, &ctx().for_attempt(), action).await;
    let exec = sent(server);
    let first_change = exec.iter().position(|r| !reads_only(r));
    let before_change = &exec[..first_change.unwrap_or(exec.len())];
    assert_eq!(before_change.len(), p.reads.len(), "{what}: execution read what the plan read");
    assert!(before_change.iter().zip(&p.reads).all(|(r, p)| matches(r, p)), "{what}");
    match (&p.change, first_change) {
        (Some(c), Some(i)) => assert!(matches(&exec[i], c), "{what}: plan {c:?}, sent {:?}", exec[i]),
        (None, None) => assert_eq!(planned.is_ok(), done.is_ok(), "{what}: {planned:?} / {done:?}"),
        (c, i) => panic!("{what}: the plan's change {c:?}, execution's {:?}", i.map(|i| &exec[i])),
    }
    p
}

#[tokio::test]
async fn amt_plans_equal_execution_for_every_capability() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    let cases = [
        Action::Power(PowerOp::Status),
        Action::Power(PowerOp::Off),
        Action::Power(PowerOp::On),
        Action::Power(PowerOp::Cycle),
        Action::Power(PowerOp::Reset),
        Action::Power(PowerOp::SoftOff),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false }),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Bios, persistent: false, efi: false }),
        Action::GetBootDevice,
        Action::Inventory,
        // Capabilities AMT lacks: `unsupported` whether planned or run.
        Action::User(UserOp::List),
        Action::EventLog(EventLogOp::clear()),
        Action::Sensors,
        Action::BiosGet,
        Action::SecureBootGet,
        Action::IdentifyGet,
        Action::Identify(IdentifySet { light: IdentifyLight::On, seconds: None }),
        Action::BmcClockGet,
        Action::BmcClockSync,
        Action::PowerReading,
        Action::PowerLimitSet(PowerLimitSet { watts: Some(400), active: None }),
        Action::NetworkSource(NetworkSourceOp::Dhcp),
        Action::BmcReset(BmcResetKind::Cold),
        Action::VirtualMedia(VirtualMediaOp::Eject { media: MediaKind::Cd }),
        Action::FirmwareUpdate(FirmwareUpdate {
            image_uri: Some("https://repo.example/x.bin".into()),
            ..Default::default()
        }),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 6, cmd: 1, data: vec![] })),
    ];
    let mut changes = 0;
    for action in &cases {
        let p = plan_equals_execution(&server, &mut s, action).await;
        changes += usize::from(p.change.is_some());
        if let Some(PlannedRequest::Wsman { body, .. }) = &p.change {
            assert!(body.values().all(|v| !v.contains("P@ssw0rd")), "{p:?}");
        }
    }
    assert!(changes >= 7, "power and boot changes were planned: {changes}");
}
