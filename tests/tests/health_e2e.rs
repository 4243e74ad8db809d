//! Sensors, BIOS and secure boot end to end: producer → gateway →
//! JetStream → worker → OpenIPMI `ipmi_sim` (SDR sensors of
//! tests/ipmi_sim/bmc.emu.in) and a real `sushy-emulator` (Thermal, secure
//! boot). What a protocol lacks comes back `unsupported`, naming what the
//! provider offers; destructive actions are refused by the default policy.

use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::producer::{batch_for, wait_gateway, wait_partitions_owned, Stack, Topology};
use bmcfleet_tests::{NatsServer, Producer};

fn code(r: &ActionResult) -> Option<ErrorCode> {
    r.error.as_ref().map(|e| e.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sensors_bios_and_secure_boot_through_the_pipeline() {
    let bmc = IpmiSim::start().expect("ipmi_sim (Debian package openipmi) must be installed");
    let stack = Stack::start(1, &[]).await;

    // IPMI: sensors; BIOS and secure boot are unsupported (the batch goes on).
    let mut b = batch_for(
        bmc.target(),
        vec![Action::Sensors, Action::BiosGet, Action::SecureBootGet, Action::Power(PowerOp::Status)],
    );
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
    let Some(emu) = bmcfleet_tests::sushy_node(9, "sensors_bios_and_secure_boot_through_the_pipeline").await else {
        return;
    };
    let r = stack
        .run(&batch_for(
            emu.target(),
            vec![Action::Sensors, Action::SecureBootSet(SecureBootSet { enabled: true }), Action::SecureBootGet],
        ))
        .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let Some(ActionData::Sensors(sensors)) = &r.results[0].data else { panic!("sensors") };
    assert!(sensors.iter().any(|s| s.name == "Chassis Intake Temp" && s.value == Some(25.0)), "{sensors:?}");
    let Some(ActionData::SecureBoot(sb)) = &r.results[2].data else { panic!("secure boot") };
    assert!(sb.enabled);
    assert_eq!(
        emu.get(&format!("{}/SecureBoot", emu.system_path(0))).await.unwrap()["SecureBootEnable"],
        serde_json::json!(true)
    );

    // Destructive: refused at admission by the default policy.
    let mut reset = batch_for(emu.target(), vec![Action::SecureBootResetKeys(SecureBootResetKeys::DeleteAllKeys)]);
    reset.machine = Some(stack.topology.register_machine(&stack.producer.client, reset.bmc.as_ref().unwrap()).await);
    reset.bmc = None;
    match stack.producer.submit(&reset, true).await {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::RawNotAllowed, "{e:?}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// BIOS settings wait for the reset and the event log records power
/// changes, through the pipeline against `bmc-sim`; with `action:` rules
/// on both gateway and worker the destructive actions run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bios_pending_until_reset_and_destructive_actions_allowed_by_rules() {
    let nats = NatsServer::start();
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let policy = ["--raw-policy", "allow action:event_log_clear; allow action:bios_reset; default"];
    let _gateway = topo.gateway(&nats, &policy);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let _worker = topo.worker(&nats, "w0", sim.addr(), &policy);
    wait_partitions_owned(&producer.client, &topo.subjects()).await;
    let run = |actions: Vec<Action>| {
        let producer = &producer;
        async move {
            match producer.submit(&bmcfleet_tests::checks::sim_batch("10.0.7.1", actions), true).await {
                Reply::Result(r) => r,
                other => panic!("expected a result, got {other:?}"),
            }
        }
    };

    let set = BiosSet { attributes: [("BootMode".to_owned(), serde_json::json!("Bios"))].into() };
    let r = run(vec![
        Action::BiosSet(set),
        Action::BiosGet,
        Action::Power(PowerOp::On),
        Action::Power(PowerOp::Cycle),
        Action::BiosGet,
    ])
    .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let Some(ActionData::BiosPending(p)) = &r.results[0].data else { panic!("pending") };
    assert_eq!(p.apply_time.as_deref(), Some("OnReset"));
    let Some(ActionData::Bios(before)) = &r.results[1].data else { panic!("bios") };
    assert_eq!(
        (before.attributes["BootMode"].clone(), before.pending["BootMode"].clone()),
        (serde_json::json!("Uefi"), serde_json::json!("Bios"))
    );
    let Some(ActionData::Bios(after)) = &r.results[4].data else { panic!("bios") };
    assert_eq!(after.attributes["BootMode"], serde_json::json!("Bios"), "applied by the cycle");
    assert!(after.pending.is_empty());

    let r = run(vec![
        Action::EventLog(EventLogOp::Read { limit: Some(1), offset: 0, logs: Default::default(), log_ids: vec![] }),
        Action::EventLog(EventLogOp::clear()),
        Action::EventLog(EventLogOp::read()),
        Action::BiosReset,
        Action::BiosGet,
    ])
    .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let Some(ActionData::EventLog(log)) = &r.results[0].data else { panic!("event log") };
    assert_eq!(
        (log.total, log.entries.len(), log.entries[0].message.as_str()),
        (Some(2), 1, "power cycle"),
        "newest first, paged"
    );
    let Some(ActionData::EventLog(log)) = &r.results[2].data else { panic!("event log") };
    assert!(log.entries.is_empty());
    let Some(ActionData::Bios(reset)) = &r.results[4].data else { panic!("bios") };
    assert_eq!(reset.attributes["BootMode"], serde_json::json!("Uefi"));

    // Allowed kinds only: secure boot keys are still refused.
    match producer
        .submit(
            &bmcfleet_tests::checks::sim_batch(
                "10.0.7.1",
                vec![Action::SecureBootResetKeys(SecureBootResetKeys::DeletePk)],
            ),
            true,
        )
        .await
    {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::RawNotAllowed),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
