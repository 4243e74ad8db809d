//! Against pyghmi's BMC server (what VirtualBMC runs), at its defaults and
//! ours: the default cipher-suite list (17, then 3) is answered with suite
//! 3's algorithms, which the session takes (3 is in the list) and reports;
//! power and boot with read-back work, cross-checked with
//! `ipmitool -I lanplus -C 3`. pyghmi has no user commands: users answer a
//! typed `unsupported` (users are proven against ipmi_sim and the spec
//! responders).

mod common;

use bmcfleet_ipmi::{CipherSuite, IpmiConfig, IpmiConnector, RmcpConfig};
use bmcfleet_provider::{BootControl, Ctx, Power, Users};
use bmcfleet_schema::{BootDevice, BootDeviceRequest, ErrorCode, PowerOp, PowerState};
use bmcfleet_testing::ipmi::{wait_until, PyghmiBmc};
use bmcfleet_testing::peers;
use common::ctx;
use std::time::Duration;

fn start() -> Option<PyghmiBmc> {
    match PyghmiBmc::start() {
        Ok(bmc) => Some(bmc),
        Err(e @ bmcfleet_testing::ipmi::SimError::NotInstalled(_)) => {
            peers::or_skip(None::<()>, &e.to_string(), "pip install -r examples/python/requirements.txt");
            None
        }
        Err(e) => panic!("start pyghmi's BMC: {e}"),
    }
}

#[tokio::test]
async fn the_default_suite_list_takes_pyghmis_suite_3_and_every_action_works() {
    let Some(bmc) = start() else { return };
    let ctx = ctx();
    let mut s = common::connector().open(&ctx, &bmc.target(), &bmc.credentials()).await.expect("a session");
    assert_eq!(s.transport().cipher_suite(), Some(CipherSuite::S3), "the suite the BMC answered with");
    assert_eq!(s.transport().answered_other_than(), Some(CipherSuite::S17), "17 was proposed first");
    assert_eq!(s.transport().handshakes(), 1);

    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::On).await.unwrap(), Some(PowerState::On));
    assert_eq!(bmc.state().power, "on");
    assert_eq!(bmc.ipmitool(&["power", "status"]).unwrap().trim(), "Chassis Power is on");
    bmc.ipmitool(&["power", "off"]).unwrap();
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off), "ipmitool's change");
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::On).await.unwrap(), Some(PowerState::On));
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Reset).await.unwrap(), Some(PowerState::On));
    assert_eq!(bmc.state().resets, 1);

    // Boot with read-back: pyghmi reports the flags valid, so the device is checked by our read.
    for (device, pyghmi_name, ipmitool_text) in [
        (BootDevice::Pxe, "network", "Force PXE"),
        (BootDevice::Disk, "hd", "Force Boot from default Hard-Drive"),
        (BootDevice::Cdrom, "optical", "Force Boot from CD/DVD"),
        (BootDevice::Bios, "setup", "Force Boot into BIOS Setup"),
    ] {
        let req = BootDeviceRequest { device, persistent: false, efi: false };
        s.set_boot_device(&ctx, &req).await.unwrap();
        assert_eq!(bmc.state().boot, pyghmi_name, "{device:?}");
        assert_eq!(s.boot_device(&ctx).await.unwrap(), req, "read back");
        let out = bmc.ipmitool(&["chassis", "bootparam", "get", "5"]).unwrap();
        assert!(out.contains(ipmitool_text) && out.contains("Boot Flag Valid"), "{device:?}: {out}");
    }
    bmc.ipmitool(&["chassis", "bootdev", "pxe"]).unwrap();
    assert_eq!(s.boot_device(&ctx).await.unwrap().device, BootDevice::Pxe, "ipmitool's change, read by us");

    // No user commands on pyghmi: typed, not a timeout.
    let e = Users::list_users(&mut s, &ctx).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert_eq!(s.transport().handshakes(), 1, "one session for everything");
    bmcfleet_provider::BmcSession::close(&mut s).await;
    assert!(bmc.log().is_empty(), "pyghmi logged nothing: {}", bmc.log());
}

#[tokio::test]
async fn a_machine_allowing_suite_17_only_is_refused_by_pyghmi_at_once() {
    let Some(bmc) = start() else { return };
    let connector = IpmiConnector::new(IpmiConfig {
        rmcp: RmcpConfig {
            attempt_timeout: Duration::from_millis(300),
            cipher_suites: vec![CipherSuite::S17],
            ..Default::default()
        }
        .into(),
        ..Default::default()
    });
    let started = std::time::Instant::now();
    let e = connector.open(&Ctx::with_timeout(Duration::from_secs(10)), &bmc.target(), &bmc.credentials()).await.err();
    let e = e.expect("suite 3 is not allowed");
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("answered with cipher suite 3, which this machine's list does not allow"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "a typed answer, not a timeout");
    // The BMC kept working for others.
    assert!(wait_until(Duration::from_secs(5), || bmc.ipmitool(&["power", "status"]).is_ok()));
}
