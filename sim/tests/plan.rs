//! Plan mode equals execution on `bmc-sim`, which speaks whole actions and
//! records every request (`SimServer::calls`): an action of every
//! capability is planned (a reading action is sent, a state-changing one is
//! recorded and not sent: the simulator sees no call and changes nothing),
//! then executed: the one request it sends is the plan's change or read.

use bmcfleet_provider::{perform, Connector, Ctx, Plan, PlannedRequest, ProviderError, ResolvedCredentials};
use bmcfleet_schema::*;
use bmcfleet_sim::SimConnector;
use bmcfleet_testing::{SimConfig, SimServer};
use std::time::Duration;

fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn sim_plans_equal_execution_for_every_capability() {
    let sim = SimServer::start(SimConfig { record_calls: true, ..SimConfig::default() }).await.unwrap();
    let c = SimConnector::new(sim.addr());
    let target = BmcTarget {
        address: "10.0.0.9".parse().unwrap(),
        protocol: Protocol::Sim,
        credentials: Credentials::Ref("x".into()),
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    };
    let creds = ResolvedCredentials { username: "admin".into(), password: "pw".into() };
    let mut s = c.connect(&ctx(), &target, &creds).await.unwrap();
    let key = "v4-10-0-0-9";
    // The simulator makes a BMC's state on its first action.
    perform(s.as_mut(), &ctx(), &Action::Power(PowerOp::Status)).await.unwrap();
    let state =
        || format!("{:?} {:?} {:?} {:?}", sim.power(key), sim.boot(key), sim.media(key), sim.user_password(key, "ops"));
    let cases = [
        Action::Power(PowerOp::Status),
        Action::Power(PowerOp::On),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: true }),
        Action::GetBootDevice,
        Action::User(UserOp::List),
        Action::User(UserOp::Create(UserSpec {
            name: "ops".into(),
            password: "S1m-secret".into(),
            role: UserRole::Operator,
            enabled: true,
        })),
        Action::BmcReset(BmcResetKind::Cold),
        Action::NetworkSource(NetworkSourceOp::Get),
        Action::NetworkSource(NetworkSourceOp::Dhcp),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 6, cmd: 1, data: vec![0xC3, 0x5E] })),
        Action::VirtualMedia(VirtualMediaOp::Insert {
            url: "http://u:pw@192.0.2.1/x.iso?t=1".into(),
            media: MediaKind::Cd,
        }),
        Action::Inventory,
        Action::EventLog(EventLogOp::read()),
        Action::EventLog(EventLogOp::clear()),
        Action::Sensors,
        Action::BiosGet,
        Action::SecureBootGet,
        Action::IdentifyGet,
        Action::Identify(IdentifySet { light: IdentifyLight::On, seconds: Some(15) }),
        Action::BmcClockGet,
        Action::BmcClockSync,
        Action::PowerReading,
        Action::PowerLimitSet(PowerLimitSet { watts: Some(400), active: Some(true) }),
        Action::FirmwareUpdate(FirmwareUpdate {
            image_uri: Some("https://repo.example/x.bin".into()),
            ..Default::default()
        }),
    ];
    for action in &cases {
        let what = action.kind();
        let calls = sim.calls(key).len();
        let before = state();
        let plan = Plan::new();
        let planned = perform(s.as_mut(), &ctx().with_plan(plan.clone()).for_attempt(), action).await;
        let p = plan.snapshot();
        let sent: Vec<String> = sim.calls(key)[calls..].iter().filter_map(|c| c.action.clone()).collect();
        assert_eq!(state(), before, "{what}: plan mode changed the simulated BMC");
        let expected = PlannedRequest::Sim { action: what.to_owned(), params: action.loggable() };
        if bmcfleet_schema::plan::reads_only(action) {
            assert_eq!(sent, [what], "{what}: a reading action is sent");
            assert_eq!((p.reads.as_slice(), &p.change), (std::slice::from_ref(&expected), &None), "{what}");
        } else {
            assert!(sent.is_empty(), "{what}: a state-changing action is not sent: {sent:?}");
            assert_eq!(planned.unwrap_err(), ProviderError::planned(), "{what}");
            assert_eq!(p.change.as_ref(), Some(&expected), "{what}");
        }
        let text = serde_json::to_string(&p).unwrap();
        assert!(!text.contains("S1m-secret") && !text.contains("u:pw") && !text.contains("c35e"), "{what}: {text}");

        let calls = sim.calls(key).len();
        let _ = perform(s.as_mut(), &ctx().for_attempt(), action).await;
        let sent: Vec<String> = sim.calls(key)[calls..].iter().filter_map(|c| c.action.clone()).collect();
        assert_eq!(sent, [what], "{what}: execution sends the planned request");
    }
    assert_eq!(sim.power(key), Some(PowerState::On), "executed");
}
