//! Intel AMT end to end: producer → gateway → JetStream → worker → the
//! Digest-enforcing AMT fixture server that answers with captured WS-MAN
//! responses (testdata/amt, or $BMCFLEET_FIXTURES/amt) and keeps
//! power and boot state, so the order of operations can be asserted.

use bmcfleet_schema::*;
use bmcfleet_testing::amt::{AmtEvent, AmtFixtureServer, ServerOptions};
use bmcfleet_tests::producer::{batch_for, Stack};

const PXE: &str = "Intel(r) AMT: Force PXE Boot";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pxe_then_cycle_through_the_pipeline() {
    let amt = AmtFixtureServer::start_for_test(ServerOptions { power_state: 8, ..ServerOptions::default() }).await;
    let stack = Stack::start(1, &[]).await;
    let r = stack
        .run(&batch_for(
            amt.target(),
            vec![
                Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false }),
                Action::Power(PowerOp::On),
                Action::Power(PowerOp::Status),
                Action::Inventory,
            ],
        ))
        .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert!(r.results.iter().all(|a| a.provider.as_deref() == Some("amt")));
    assert_eq!(r.results[2].data, Some(ActionData::PowerState(PowerState::On)));
    let Some(ActionData::Inventory(inv)) = &r.results[3].data else { panic!("inventory") };
    assert!(inv.firmware_version.is_some(), "{inv:?}");
    // The host booted from PXE because the boot source was set before power on.
    let events = amt.events();
    let booted = events.iter().find(|e| matches!(e, AmtEvent::Booted { .. })).expect("host booted");
    assert_eq!(
        booted,
        &AmtEvent::Booted { source: Some(PXE.into()), bios_setup: false, safe_mode: false },
        "{events:?}"
    );
    let set = events.iter().position(|e| matches!(e, AmtEvent::BootConfigRoleSet { role: 1 })).unwrap();
    let power = events.iter().position(|e| matches!(e, AmtEvent::PowerStateChange { requested: 2, .. })).unwrap();
    assert!(set < power, "{events:?}");

    // Persistent boot is not something AMT offers: typed, not silently ignored.
    let r = stack
        .run(&batch_for(
            amt.target(),
            vec![Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: false })],
        ))
        .await;
    assert_eq!(r.results[0].error.as_ref().map(|e| e.code), Some(ErrorCode::Unsupported), "{r:#?}");
    // Capabilities AMT lacks are reported, not attempted.
    let r = stack.run(&batch_for(amt.target(), vec![Action::User(UserOp::List)])).await;
    let e = r.results[0].error.as_ref().expect("unsupported");
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert!(e.message.contains("users"), "{e}");

    // Wrong password: one challenge, one refusal, a typed error; the lane goes on.
    let mut t = amt.target();
    t.credentials = Credentials::Inline { username: "admin".into(), password: Secret::new("wrong") };
    let before = amt.requests().len();
    let r = stack.run(&batch_for(t, vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.results[0].error.as_ref().map(|e| e.code), Some(ErrorCode::AuthFailed), "{r:#?}");
    assert!(amt.requests().len() - before <= 3, "a 401 loop: {} requests", amt.requests().len() - before);
    let r = stack.run(&batch_for(amt.target(), vec![Action::Power(PowerOp::Cycle)])).await;
    assert!(r.results[0].is_ok(), "{r:#?}");
}
