//! Sensors, BIOS and secure boot end to end: producer → gateway →
//! JetStream → worker → OpenIPMI `ipmi_sim` (SDR sensors of
//! tests/ipmi_sim/bmc.emu.in) and a real `sushy-emulator` (Thermal, secure
//! boot). What a protocol lacks comes back `unsupported`, naming what the
//! provider offers; destructive actions are refused by the default policy.

use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
use bmcfleet_tests::producer::{batch_for, Stack};

fn code(r: &ActionResult) -> Option<ErrorCode> {
    r.error.as_ref().map(|e| e.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sensors_bios_and_secure_boot_through_the_pipeline() {
    let bmc = IpmiSim::start().expect("ipmi_sim (Debian package openipmi) must be installed");
    let stack = Stack::start(1, &[]).await;

    // IPMI: sensors; BIOS and secure boot are unsupported (the batch goes on).
    let mut b = batch_for(bmc.target(), vec![Action::Sensors, Action::BiosGet, Action::SecureBootGet, Action::Power(PowerOp::Status)]);
    b.on_error = OnError::Continue;
    let r = stack.run(&b).await;
    let Some(ActionData::Sensors(sensors)) = &r.results[0].data else { panic!("sensors: {r:#?}") };
    let fan = sensors.iter().find(|s| s.name == "Fan 1").expect("Fan 1");
    assert_eq!((fan.kind, fan.value, fan.health), (SensorKind::Fan, Some(750.0), Some(Health::Warning)));
    assert_eq!(sensors.len(), 3);
    for i in [1, 2] {
        assert_eq!(code(&r.results[i]), Some(ErrorCode::Unsupported), "{r:#?}");
        let msg = &r.results[i].error.as_ref().unwrap().message;
        assert!(msg.contains("the ipmi provider does not implement") && msg.contains("sensors"), "{msg}");
    }
    assert!(r.results[3].is_ok());

    // Redfish (sushy-emulator): Thermal sensors, secure boot set and read back.
    let Some(emu) = SushyEmulator::start_or_skip(
        SushyEmulator::builder().systems(vec![FakeSystem::new("9a1d0c6e-2222-4c3a-9d55-000000000009", "node9", "Off")]),
        "sensors_bios_and_secure_boot_through_the_pipeline",
    )
    .await
    else {
        return;
    };
    let r = stack
        .run(&batch_for(emu.target(), vec![Action::Sensors, Action::SecureBootSet(SecureBootSet { enabled: true }), Action::SecureBootGet]))
        .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let Some(ActionData::Sensors(sensors)) = &r.results[0].data else { panic!("sensors") };
    assert!(sensors.iter().any(|s| s.name == "Chassis Intake Temp" && s.value == Some(25.0)), "{sensors:?}");
    let Some(ActionData::SecureBoot(sb)) = &r.results[2].data else { panic!("secure boot") };
    assert!(sb.enabled);
    assert_eq!(emu.get(&format!("{}/SecureBoot", emu.system_path(0))).await.unwrap()["SecureBootEnable"], serde_json::json!(true));

    // Destructive: refused at admission by the default policy.
    let mut reset = batch_for(emu.target(), vec![Action::SecureBootResetKeys(SecureBootResetKeys::DeleteAllKeys)]);
    reset.machine = Some(stack.topology.register_machine(&stack.producer.client, reset.bmc.as_ref().unwrap()).await);
    reset.bmc = None;
    match stack.producer.submit(&reset, true).await {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::RawNotAllowed, "{e:?}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
