//! The event log end to end: producer → gateway → JetStream → worker →
//! OpenIPMI `ipmi_sim` (SEL), cross-checked with `ipmitool sel`. Clearing
//! is destructive: refused at admission by the default raw policy
//! (`raw_not_allowed`), by the worker when only the gateway allows it, and
//! done when both allow `action:event_log_clear`.

use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_tests::producer::{batch_for, Stack};

const ALLOW_CLEAR: &str = "allow action:event_log_clear; default";

fn add_events(sim: &IpmiSim) {
    let file = sim.dir().join("events.txt");
    std::fs::write(&file, "0x04 0x01 0x30 0x01 0x09 0xff 0xff\n0x04 0x08 0x41 0x6f 0x01 0xff 0xff\n").unwrap();
    sim.ipmitool(&["sel", "add", file.to_str().unwrap()]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_log_read_and_clear_behind_the_policy() {
    let bmc = IpmiSim::start().expect("ipmi_sim (Debian package openipmi) must be installed");
    add_events(&bmc);

    // Default policy: read works, clear is refused at admission.
    let stack = Stack::start(1, &[]).await;
    let r = stack.run(&batch_for(bmc.target(), vec![Action::EventLog(EventLogOp::read())])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_eq!(r.results[0].action, "event_log_read");
    let Some(ActionData::EventLog(log)) = &r.results[0].data else { panic!("event log: {r:#?}") };
    assert!(log.entries.len() >= 2, "{log:?}");
    assert_eq!(log.entries[0].kind.as_deref(), Some("Power Supply"), "newest first");
    assert_eq!(log.entries[1].severity, Some(Health::Critical));
    assert_eq!(log.entries[1].raw.as_ref().map(String::len), Some(32));

    let mut clear = batch_for(bmc.target(), vec![Action::EventLog(EventLogOp::clear())]);
    clear.machine = Some(stack.topology.register_machine(&stack.producer.client, clear.bmc.as_ref().unwrap()).await);
    clear.bmc = None;
    match stack.producer.submit(&clear, true).await {
        Reply::Error(e) => {
            assert_eq!(e.code, ErrorCode::RawNotAllowed, "{e:?}");
            assert!(e.message.contains("event_log_clear"), "{}", e.message);
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(bmc.ipmitool(&["sel", "list"]).unwrap().contains("Temperature"), "nothing was cleared");
    drop(stack);

    // The gateway allows it, the worker does not: refused before sending.
    let stack = Stack::start_with(&["--raw-policy", ALLOW_CLEAR], 1, &[]).await;
    let r = stack.run(&clear_for(&bmc)).await;
    assert_eq!(r.results[0].error.as_ref().map(|e| e.code), Some(ErrorCode::RawNotAllowed), "{r:#?}");
    assert!(bmc.ipmitool(&["sel", "list"]).unwrap().contains("Temperature"), "nothing was cleared");
    drop(stack);

    // Both allow it: cleared, as ipmitool sees.
    let stack = Stack::start_with(&["--raw-policy", ALLOW_CLEAR], 1, &["--raw-policy", ALLOW_CLEAR]).await;
    let r = stack
        .run(&batch_for(
            bmc.target(),
            vec![
                Action::EventLog(EventLogOp::clear()),
                Action::EventLog(EventLogOp::Read {
                    limit: Some(10),
                    offset: 0,
                    logs: Default::default(),
                    log_ids: vec![],
                }),
            ],
        ))
        .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let Some(ActionData::EventLog(log)) = &r.results[1].data else { panic!("event log") };
    assert!(log.entries.iter().all(|e| e.kind.as_deref() != Some("Temperature")), "{log:?}");
    assert!(!bmc.ipmitool(&["sel", "list"]).unwrap().contains("Temperature"));
}

fn clear_for(bmc: &IpmiSim) -> Batch {
    batch_for(bmc.target(), vec![Action::EventLog(EventLogOp::clear())])
}
