//! One-time boot device, its call order, and the sequence "set PXE, then
//! power cycle" that the mission exists for.

use crate::common::{ctx, session};
use crate::fixture_server;
use bmcfleet_provider::Offer;
use bmcfleet_provider::{BootControl, Power};
use bmcfleet_schema::{BootDevice, BootDeviceRequest, ErrorCode, PowerOp};
use bmcfleet_testing::amt::{AmtEvent, Class, Injection, Op, ServerOptions};

const PXE: &str = "Intel(r) AMT: Force PXE Boot";
const HDD: &str = "Intel(r) AMT: Force Hard-drive Boot";
const CD: &str = "Intel(r) AMT: Force CD/DVD Boot";

fn once(device: BootDevice) -> BootDeviceRequest {
    BootDeviceRequest { device, persistent: false, efi: false }
}

#[tokio::test]
async fn set_pxe_then_power_cycle_boots_from_pxe_once() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.clear_log();

    s.boot().unwrap().set_boot_device(&ctx(), &once(BootDevice::Pxe)).await.unwrap();
    assert_eq!(
        server.ops(),
        vec![
            Op::Get(Class::BootCapabilities),
            Op::Get(Class::BootSettingData),
            Op::Put(Class::BootSettingData),
            Op::ChangeBootOrder,
            Op::SetBootConfigRole,
        ],
        "Intel's order: options, then source, then role"
    );
    let st = server.boot_state();
    assert_eq!(st.source.as_deref(), Some(PXE));
    assert!(st.role_next && !st.bios_setup && !st.safe_mode);

    // Read back.
    assert_eq!(s.boot_device(&ctx()).await.unwrap(), once(BootDevice::Pxe));

    // Then the power action.
    Power::power(&mut s, &ctx(), PowerOp::Cycle).await.unwrap();
    assert_eq!(
        server.events(),
        vec![
            AmtEvent::BootSettingsPut { bios_setup: false, safe_mode: false, use_ider: false, use_sol: false },
            AmtEvent::BootOrderChanged { source: Some(PXE.into()) },
            AmtEvent::BootConfigRoleSet { role: 1 },
            AmtEvent::PowerStateChange { requested: 5, return_value: 0 },
            AmtEvent::Booted { source: Some(PXE.into()), bios_setup: false, safe_mode: false },
        ]
    );
    // One-time: AMT cleared it after the boot.
    assert!(!server.boot_state().role_next);
    assert_eq!(s.boot_device(&ctx()).await.unwrap().device, BootDevice::None);
    Power::power(&mut s, &ctx(), PowerOp::Reset).await.unwrap();
    assert_eq!(server.events().last(), Some(&AmtEvent::Booted { source: None, bios_setup: false, safe_mode: false }));
}

#[tokio::test]
async fn disk_and_cdrom_select_their_sources() {
    for (device, source) in [(BootDevice::Disk, HDD), (BootDevice::Cdrom, CD)] {
        let server = fixture_server!(ServerOptions { power_state: 8, ..ServerOptions::default() });
        let mut s = session(&server).await;
        s.set_boot_device(&ctx(), &once(device)).await.unwrap();
        assert_eq!(server.boot_state().source.as_deref(), Some(source));
        assert_eq!(s.boot_device(&ctx()).await.unwrap(), once(device));
        // Off host: power on boots it with the override.
        Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap();
        assert_eq!(
            server.events().last(),
            Some(&AmtEvent::Booted { source: Some(source.into()), bios_setup: false, safe_mode: false })
        );
    }
}

/// BIOS setup cannot coexist with a forced source: the source is cleared
/// before `BIOSSetup` is written (the server refuses the other order).
#[tokio::test]
async fn bios_setup_clears_the_source_first() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    s.set_boot_device(&ctx(), &once(BootDevice::Pxe)).await.unwrap();
    server.clear_log();
    s.set_boot_device(&ctx(), &once(BootDevice::Bios)).await.unwrap();
    assert_eq!(
        server.ops(),
        vec![
            Op::Get(Class::BootCapabilities),
            Op::Get(Class::BootSettingData),
            Op::ChangeBootOrder,
            Op::Put(Class::BootSettingData),
            Op::SetBootConfigRole,
        ]
    );
    let st = server.boot_state();
    assert_eq!(st.source, None);
    assert!(st.bios_setup && st.role_next);
    assert_eq!(s.boot_device(&ctx()).await.unwrap(), once(BootDevice::Bios));
    Power::power(&mut s, &ctx(), PowerOp::Reset).await.unwrap();
    assert_eq!(server.events().last(), Some(&AmtEvent::Booted { source: None, bios_setup: true, safe_mode: false }));
    // PXE again afterwards works (options were cleared by the boot).
    s.set_boot_device(&ctx(), &once(BootDevice::Pxe)).await.unwrap();
    assert_eq!(server.boot_state().source.as_deref(), Some(PXE));
}

#[tokio::test]
async fn what_amt_cannot_do_is_unsupported() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.clear_log();
    let e = s
        .set_boot_device(&ctx(), &BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: false })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert!(e.message.contains("one-time"), "{}", e.message);
    assert!(server.requests().is_empty(), "refused before any call");
    // The captured AMT_BootCapabilities says ForceHardDriveSafeModeBoot=false.
    let e = s.set_boot_device(&ctx(), &once(BootDevice::Safe)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert!(e.message.contains("ForceHardDriveSafeModeBoot"), "{}", e.message);
    assert_eq!(server.ops(), vec![Op::Get(Class::BootCapabilities)], "nothing was changed");
    let e = s.set_boot_device(&ctx(), &once(BootDevice::None)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField);
}

#[tokio::test]
async fn a_failed_step_stops_the_sequence() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::ChangeBootOrder, Injection::ReturnValue(36));
    server.clear_log();
    let e = s.set_boot_device(&ctx(), &once(BootDevice::Pxe)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(e.message.contains("CIM_BootConfigSetting.ChangeBootOrder returned ReturnValue 36"), "{}", e.message);
    assert!(!server.ops().contains(&Op::SetBootConfigRole), "the role is not armed after a failure");
    assert!(!server.boot_state().role_next);
}
