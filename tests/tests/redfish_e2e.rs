//! Redfish end to end: producer → gateway → JetStream → worker → a real
//! `sushy-emulator` (HTTPS with a per-test CA, Basic auth). State is read back
//! from the emulator independently. sushy changes power state 1–11 s after
//! accepting a reset, so read-back waits with a deadline.
//!
//! sushy answers 404 for AccountService, SessionService and Manager.Reset and
//! 501 for Nmi: those come back as typed errors here and are tested for
//! success against vendor mockups in providers/redfish/tests/mockups.rs.

use bmcfleet_schema::*;
use bmcfleet_testing::redfish::ImageServer;
use bmcfleet_tests::producer::{batch_for, Stack};
use std::time::Duration;

fn code(r: &ActionResult) -> Option<ErrorCode> {
    r.error.as_ref().map(|e| e.code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_through_the_pipeline_against_sushy() {
    let Some(emu) = bmcfleet_tests::sushy_node(1, "capabilities_through_the_pipeline_against_sushy").await else {
        return;
    };
    let image = ImageServer::start("boot.iso", vec![0u8; 64 * 1024]).await.unwrap();
    let stack = Stack::start(1, &[]).await;
    let system = emu.system_path(0);

    let r = stack
        .run(&batch_for(
            emu.target(),
            vec![
                Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
                Action::VirtualMedia(VirtualMediaOp::Insert { url: image.url(), media: MediaKind::Cd }),
                Action::Power(PowerOp::On),
                Action::GetBootDevice,
                Action::Inventory,
                Action::Raw(RawRequest::Redfish(RawRedfish {
                    method: HttpMethod::Get,
                    path: system.clone(),
                    body: None,
                })),
            ],
        ))
        .await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert!(r.results.iter().all(|a| a.provider.as_deref() == Some("redfish")));
    let sys = emu.get(&system).await.unwrap();
    assert_eq!(sys["Boot"]["BootSourceOverrideTarget"], "Pxe", "{sys}");
    assert_eq!(sys["Boot"]["BootSourceOverrideMode"], "UEFI", "{sys}");
    let cd = emu.get(&format!("{system}/VirtualMedia/Cd")).await.unwrap();
    assert_eq!(cd["Inserted"], true);
    assert_eq!(cd["Image"], image.url());
    emu.wait_for(&system, Duration::from_secs(30), |v| v["PowerState"] == "On").await.expect("power on lands");
    let Some(ActionData::Raw(raw)) = &r.results[5].data else { panic!("raw") };
    assert_eq!(raw.status, 200);
    assert!(raw.body.as_ref().is_some_and(|b| b["Id"].is_string()));

    // Power status reads the emulator's state; unsupported operations are typed.
    let r = stack
        .run(&batch_for(
            emu.target(),
            vec![
                Action::Power(PowerOp::Status),
                Action::Power(PowerOp::Nmi),
                Action::BmcReset(BmcResetKind::Warm),
                Action::VirtualMedia(VirtualMediaOp::Eject { media: MediaKind::Cd }),
            ],
        ))
        .await;
    assert_eq!(r.results[0].data, Some(ActionData::PowerState(PowerState::On)), "{r:#?}");
    assert_eq!(code(&r.results[1]), Some(ErrorCode::Unsupported), "{r:#?}");
    assert!(code(&r.results[2]).is_some(), "sushy has no Manager.Reset: {r:#?}");
    assert!(r.results[3].is_ok());
    assert_eq!(emu.get(&format!("{system}/VirtualMedia/Cd")).await.unwrap()["Inserted"], false);

    // Wrong password is a typed auth failure; the lane goes on.
    let mut t = emu.target();
    t.credentials = Credentials::Inline { username: "admin".into(), password: Secret::new("wrong-password") };
    let r = stack.run(&batch_for(t, vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(code(&r.results[0]), Some(ErrorCode::AuthFailed), "{r:#?}");
    // TLS verification is on: without the test CA the BMC is refused.
    let mut t = emu.target();
    t.tls = TlsOptions::default();
    let r = stack.run(&batch_for(t, vec![Action::Power(PowerOp::Status)])).await;
    let e = r.results[0].error.as_ref().expect("untrusted certificate refused");
    assert!(e.message.contains("TLS") || e.message.contains("certificate"), "{e}");
    let r = stack.run(&batch_for(emu.target(), vec![Action::Power(PowerOp::Status)])).await;
    assert!(r.results[0].is_ok());
}

/// Issue 33: several systems behind one Redfish service (sushy-tools
/// serving many VMs, a chassis manager) are machines of their own, told
/// apart by `system_id`: both register at the same address, run batches
/// side by side under their own ordering keys, and each acts on its own
/// system only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_systems_behind_one_redfish_service_are_two_machines() {
    use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
    let systems = vec![
        FakeSystem::new("9a1d0c6e-3333-4c3a-9d55-000000000001", "vm-1", "Off"),
        FakeSystem::new("9a1d0c6e-3333-4c3a-9d55-000000000002", "vm-2", "Off"),
    ];
    let builder = SushyEmulator::builder().systems(systems.clone());
    let Some(emu) =
        SushyEmulator::start_or_skip(builder, "two_systems_behind_one_redfish_service_are_two_machines").await
    else {
        return;
    };
    let stack = Stack::start(1, &[]).await;
    let target = |n: usize| BmcTarget { system_id: Some(systems[n].uuid.clone()), ..emu.target() };
    let boot = |device| Action::BootDevice(BootDeviceRequest { device, persistent: false, efi: false });
    let (batch_1, batch_2) = (
        batch_for(target(0), vec![boot(BootDevice::Pxe), Action::Power(PowerOp::On)]),
        batch_for(target(1), vec![boot(BootDevice::Cdrom), Action::GetBootDevice]),
    );
    let (r1, r2) = tokio::join!(stack.run(&batch_1), stack.run(&batch_2));
    assert_eq!(r1.state, BatchState::Succeeded, "{r1:#?}");
    assert_eq!(r2.state, BatchState::Succeeded, "{r2:#?}");
    assert_ne!(r1.bmc, r2.bmc, "each system its own machine and ordering key");
    let (s1, s2) = (emu.system_path(0), emu.system_path(1));
    assert_eq!(emu.get(&s1).await.unwrap()["Boot"]["BootSourceOverrideTarget"], "Pxe");
    assert_eq!(emu.get(&s2).await.unwrap()["Boot"]["BootSourceOverrideTarget"], "Cd");
    let Some(ActionData::BootDevice(read)) = &r2.results[1].data else { panic!("boot device: {r2:#?}") };
    assert_eq!(read.device, BootDevice::Cdrom, "vm-2's own override, not vm-1's");
    emu.wait_for(&s1, Duration::from_secs(30), |v| v["PowerState"] == "On").await.expect("vm-1 powers on");
    assert_eq!(emu.get(&s2).await.unwrap()["PowerState"], "Off", "vm-1's power on did not reach vm-2");
}
