//! Power status and every power operation, end to end.

use crate::common::{ctx, session};
use crate::fixture_server;
use bmcfleet_provider::Offer;
use bmcfleet_provider::Power;
use bmcfleet_schema::{ErrorCode, PowerOp, PowerState};
use bmcfleet_testing::amt::{AmtEvent, Class, Injection, Op, ServerOptions};

fn power_changes(events: &[AmtEvent]) -> Vec<(u16, u32)> {
    events
        .iter()
        .filter_map(|e| match e {
            AmtEvent::PowerStateChange { requested, return_value } => Some((*requested, *return_value)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn status_reads_the_captured_power_state() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.clear_log();
    let st = Offer::power(&mut s).unwrap().power(&ctx(), PowerOp::Status).await.unwrap();
    assert_eq!(st, Some(PowerState::On));
    assert_eq!(
        server.ops(),
        vec![Op::Enumerate(Class::AssociatedPowerManagementService), Op::Pull(Class::AssociatedPowerManagementService)]
    );
    server.set_power_state(8);
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    server.set_power_state(7);
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    server.set_power_state(4);
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::Unknown));
}

/// Each op sends the documented PowerState value with the right selectors.
#[tokio::test]
async fn each_op_sends_its_power_state_value() {
    let cases = [
        (PowerOp::Off, 2u16, 8u16, 8u16),
        (PowerOp::SoftOff, 2, 12, 8),
        (PowerOp::Cycle, 2, 5, 2),
        (PowerOp::Reset, 2, 10, 2),
        (PowerOp::Nmi, 2, 11, 2),
        (PowerOp::On, 8, 2, 2),
        (PowerOp::Cycle, 8, 2, 2), // a powered-off host is powered on
        (PowerOp::Reset, 8, 2, 2),
    ];
    for (op, from, sent, after) in cases {
        let server = fixture_server!(ServerOptions { power_state: from, ..ServerOptions::default() });
        let mut s = session(&server).await;
        server.clear_log();
        let r = Power::power(&mut s, &ctx(), op).await.unwrap();
        assert_eq!(r, None, "{op:?}: the state is in transition after a change");
        assert_eq!(power_changes(&server.events()), vec![(sent, 0)], "{op:?} from {from}");
        assert_eq!(server.power_state(), after, "{op:?} from {from}");
        let req = server.requests().into_iter().find(|r| r.op == Some(Op::RequestPowerStateChange)).unwrap();
        let mut sel = req.selectors.clone();
        sel.sort();
        assert_eq!(
            sel,
            vec![
                ("CreationClassName".to_owned(), "CIM_PowerManagementService".to_owned()),
                ("Name".into(), "Intel(r) AMT Power Management Service".into()),
                ("SystemCreationClassName".into(), "CIM_ComputerSystem".into()),
                ("SystemName".into(), "Intel(r) AMT".into()),
            ]
        );
    }
}

#[tokio::test]
async fn on_and_off_are_idempotent() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap(), Some(PowerState::On));
    server.set_power_state(8);
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Off).await.unwrap(), Some(PowerState::Off));
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::SoftOff).await.unwrap(), Some(PowerState::Off));
    assert!(power_changes(&server.events()).is_empty(), "no request for a no-op");
    assert!(!server.ops().contains(&Op::RequestPowerStateChange));
}

#[tokio::test]
async fn nmi_needs_a_running_host_and_an_offer() {
    let server = fixture_server!(ServerOptions { power_state: 8, ..ServerOptions::default() });
    let mut s = session(&server).await;
    let e = Power::power(&mut s, &ctx(), PowerOp::Nmi).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("host is off"), "{e}");
    // Asleep: AMT offers 2, 8 and 10 only.
    server.set_power_state(4);
    let e = Power::power(&mut s, &ctx(), PowerOp::Nmi).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    let e = Power::power(&mut s, &ctx(), PowerOp::SoftOff).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(power_changes(&server.events()).is_empty());
}

#[tokio::test]
async fn a_non_zero_return_value_is_a_bmc_error() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::RequestPowerStateChange, Injection::ReturnValue(2));
    let e = Power::power(&mut s, &ctx(), PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(!e.retryable);
    assert!(
        e.message.contains("CIM_PowerManagementService.RequestPowerStateChange returned ReturnValue 2"),
        "{}",
        e.message
    );
    assert!(e.message.contains("PT_STATUS_NOT_READY"), "{}", e.message);
    assert_eq!(server.power_state(), 2, "the injected failure changed nothing");
    // The next request is normal again.
    Power::power(&mut s, &ctx(), PowerOp::Off).await.unwrap();
    assert_eq!(server.power_state(), 8);
}
