//! Plan mode end to end (issue 30): producer → gateway → JetStream →
//! worker → OpenIPMI `ipmi_sim`. A plan batch returns, per action, what it
//! read and the state-changing request it would send, changes nothing on
//! the BMC (ipmitool's view and the chassis log are as before), holds no
//! secret, and goes through admission exactly as a batch that runs does
//! (a destructive action the raw policy denies is refused). The same batch
//! without `plan` then sends what the plan said.

use bmcfleet_schema::plan::PlannedRequest;
use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_tests::producer::{batch_for, Stack};

const NEW_PASSWORD: &str = "E2e-plan-pw1";

fn actions() -> Vec<Action> {
    vec![
        Action::Power(PowerOp::Status),
        Action::Power(PowerOp::On),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false }),
        Action::User(UserOp::Create(UserSpec {
            name: "planned".into(),
            password: NEW_PASSWORD.into(),
            role: UserRole::Operator,
            enabled: true,
        })),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_batch_changes_nothing_and_returns_each_actions_request() {
    let bmc = IpmiSim::start().expect("ipmi_sim (Debian package openipmi) must be installed");
    let stack = Stack::start(1, &[]).await;
    let state = || {
        let users = bmc.ipmitool(&["user", "list", "1"]).unwrap();
        format!("{:?} {:?} {} {users}", bmc.chassis_log(), bmc.boot_device(), bmc.power_on())
    };
    let before = state();

    let mut plan = batch_for(bmc.target(), actions());
    plan.plan = true;
    let r = stack.run(&plan).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_eq!(state(), before, "the plan batch changed the BMC");
    let text = serde_json::to_string(&r).unwrap();
    assert!(!text.contains(NEW_PASSWORD) && !text.contains(&hex(NEW_PASSWORD.as_bytes())), "{text}");
    let plans: Vec<_> = r.results.iter().map(|a| a.plan.clone().unwrap_or_else(|| panic!("no plan: {a:?}"))).collect();
    // power status only reads: it ran, and says so.
    assert_eq!(r.results[0].data, Some(ActionData::PowerState(PowerState::Off)));
    assert!(plans[0].change.is_none() && !plans[0].reads.is_empty(), "{:?}", plans[0]);
    // power on: Chassis Control, data 01 (power up), not sent.
    assert!(
        matches!(&plans[1].change, Some(PlannedRequest::Ipmi { netfn: 0x00, cmd: 0x02, data, .. }) if data == "01"),
        "{:?}",
        plans[1]
    );
    assert!(r.results[1].data.is_none() && r.results[1].is_ok());
    // boot pxe: Set System Boot Options.
    assert!(matches!(&plans[2].change, Some(PlannedRequest::Ipmi { netfn: 0x00, cmd: 0x08, .. })), "{:?}", plans[2]);
    // user create: read the slots, then the first write (Set User Name): the password is never in it.
    assert!(matches!(&plans[3].change, Some(PlannedRequest::Ipmi { netfn: 0x06, cmd: 0x45, .. })), "{:?}", plans[3]);

    // A destructive action is refused at admission in plan mode too (default raw policy).
    let mut clear = batch_for(bmc.target(), vec![Action::EventLog(EventLogOp::clear())]);
    clear.plan = true;
    clear.machine = Some(stack.topology.register_machine(&stack.producer.client, clear.bmc.as_ref().unwrap()).await);
    clear.bmc = None;
    match stack.producer.submit(&clear, true).await {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::RawNotAllowed, "{e:?}"),
        other => panic!("a plan of a denied action must be refused as its execution is: {other:?}"),
    }

    // Executed, the batch does what its plan said.
    let r = stack.run(&batch_for(bmc.target(), actions())).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert!(r.results.iter().all(|a| a.plan.is_none()), "no plan on an executed batch");
    assert!(bmc.power_on());
    assert_eq!(bmc.boot_device().as_deref(), Some("pxe"));
    assert!(bmc.ipmitool(&["user", "list", "1"]).unwrap().contains("planned"));
}
