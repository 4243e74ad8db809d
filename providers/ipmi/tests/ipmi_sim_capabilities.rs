//! Every capability against a real OpenIPMI `ipmi_sim`, through the
//! provider API (connect → call → assert), cross-checked with the reference
//! client `ipmitool -I lanplus -C 3` in both directions.
//!
//! What `ipmi_sim` refuses (NMI, warm/cold reset, safe-mode boot) is
//! asserted here as the typed error the simulator's answer maps to; the
//! success paths of those commands run against the spec responder in
//! `spec_responder.rs`.

mod common;

use bmcfleet_ipmi::CAPABILITIES;
use bmcfleet_provider::{capabilities, BootControl, Connector, Inventory, NetworkSource, Power, Raw, Users};
use bmcfleet_schema::{
    BmcResetKind, BootDevice, BootDeviceRequest, ErrorCode, HttpMethod, NetworkSourceOp, PowerOp, PowerState, RawIpmi,
    RawRedfish, RawRequest, Secret, StaticIpv4, UserRole, UserSpec, UserUpdate,
};
use bmcfleet_testing::ipmi::wait_until;
use common::{ctx, field, ipmitool_users, open, open_powered_on, start_sim};
use std::time::Duration;

#[tokio::test]
async fn declared_capabilities_match_a_real_session() {
    let sim = start_sim();
    let mut session = common::connector().connect(&ctx(), &sim.target(), &sim.credentials()).await.unwrap();
    assert_eq!(session.provider(), "ipmi");
    assert_eq!(capabilities(session.as_mut()), CAPABILITIES.to_vec());
    assert_eq!(common::connector().declared_capabilities(), CAPABILITIES);
    session.close().await;
}

#[tokio::test]
async fn power_on_off_status_agree_with_ipmitool() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;

    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    assert_eq!(
        Power::power(&mut s, &ctx, PowerOp::On).await.unwrap(),
        Some(PowerState::On),
        "verified: the chassis reports on"
    );
    assert!(sim.power_on(), "chassis program state");
    assert_eq!(sim.ipmitool(&["power", "status"]).unwrap().trim(), "Chassis Power is on");
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));

    // Changed by ipmitool, read by us.
    sim.ipmitool(&["power", "off"]).unwrap();
    assert!(!sim.power_on());
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));

    Power::power(&mut s, &ctx, PowerOp::On).await.unwrap();
    Power::power(&mut s, &ctx, PowerOp::Off).await.unwrap();
    assert_eq!(sim.ipmitool(&["power", "status"]).unwrap().trim(), "Chassis Power is off");
    assert_eq!(sim.chassis_log(), vec!["power 1", "power 0", "power 1", "power 0"]);
}

#[tokio::test]
async fn power_cycle_reset_and_soft_off() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open_powered_on(&sim).await;

    // ipmi_sim powers off, then on again from a one-second timer.
    Power::power(&mut s, &ctx, PowerOp::Cycle).await.unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || sim.chassis_log().ends_with(&["power 0".into(), "power 1".into()])),
        "cycle: {:?}",
        sim.chassis_log()
    );
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));

    Power::power(&mut s, &ctx, PowerOp::Reset).await.unwrap();
    assert_eq!(sim.resets(), 1);
    sim.ipmitool(&["power", "reset"]).unwrap();
    assert_eq!(sim.resets(), 2, "ipmitool's reset lands on the same machine");

    Power::power(&mut s, &ctx, PowerOp::SoftOff).await.unwrap();
    assert_eq!(sim.shutdowns(), 1);
    assert!(!sim.power_on());
    assert_eq!(sim.ipmitool(&["power", "status"]).unwrap().trim(), "Chassis Power is off");
}

#[tokio::test]
async fn nmi_is_refused_by_ipmi_sim_as_unsupported() {
    // ipmi_sim answers Chassis Control 4 (diagnostic interrupt) with 0xCC;
    // the success path is tested against the spec responder.
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open_powered_on(&sim).await;
    let e = Power::power(&mut s, &ctx, PowerOp::Nmi).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("0xCC") && e.message.contains("Chassis Control"), "{e}");
    assert!(bmcfleet_provider::BmcSession::is_healthy(&s), "a refused command is not a transport failure");
}

#[tokio::test]
async fn boot_device_set_by_us_is_seen_by_ipmitool_and_vice_versa() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;

    for (device, sim_name, ipmitool_text) in [
        (BootDevice::Pxe, "pxe", "Force PXE"),
        (BootDevice::Disk, "default", "Force Boot from default Hard-Drive"),
        (BootDevice::Cdrom, "cdrom", "Force Boot from CD/DVD"),
        (BootDevice::Bios, "bios", "Force Boot into BIOS Setup"),
    ] {
        let req = BootDeviceRequest { device, persistent: false, efi: false };
        s.set_boot_device(&ctx, &req).await.unwrap();
        assert_eq!(sim.boot_device().as_deref(), Some(sim_name));
        let out = sim.ipmitool(&["chassis", "bootparam", "get", "5"]).unwrap();
        assert!(out.contains(ipmitool_text), "{device:?}: {out}");
    }

    // Set by ipmitool, read by us. ipmi_sim keeps only the device selector
    // and always reports the boot-flags-valid bit clear, which the spec
    // defines as "no override": a conformant reader says `none`.
    sim.ipmitool(&["chassis", "bootdev", "pxe"]).unwrap();
    assert_eq!(sim.boot_device().as_deref(), Some("pxe"));
    let read = s.boot_device(&ctx).await.unwrap();
    assert_eq!(read, BootDeviceRequest { device: BootDevice::None, persistent: false, efi: false });
    // The selector itself is there, as raw passthrough shows.
    let raw = Raw::raw(&mut s, &ctx, &RawRequest::Ipmi(RawIpmi { netfn: 0x00, cmd: 0x09, data: vec![5, 0, 0] }))
        .await
        .unwrap();
    assert_eq!((raw.status, raw.data[3] >> 2 & 0x0F), (0, 0x1), "PXE selector: {:?}", raw.data);
}

#[tokio::test]
async fn safe_mode_boot_is_refused_by_ipmi_sim() {
    // ipmi_sim's chassis program interface has no name for selector 0011b
    // and answers 0xFF; success is tested against the spec responder.
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;
    let e = s
        .set_boot_device(&ctx, &BootDeviceRequest { device: BootDevice::Safe, persistent: false, efi: false })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("0xFF"), "{e}");
}

#[tokio::test]
async fn users_lifecycle_cross_checked_with_ipmitool() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;

    let users = s.list_users(&ctx).await.unwrap();
    assert_eq!(users.len(), 1);
    assert_eq!((users[0].id.as_str(), users[0].name.as_str()), ("2", "admin"));
    assert_eq!((users[0].role, users[0].enabled), (Some(UserRole::Admin), true));

    // Create: lands in the first free slot, visible to ipmitool.
    let spec =
        UserSpec { name: "ops".into(), password: Secret::new("ops-pass-1"), role: UserRole::Operator, enabled: true };
    let created = s.create_user(&ctx, &spec).await.unwrap();
    assert_eq!((created.id.as_str(), created.role, created.enabled), ("3", Some(UserRole::Operator), true));
    let tool = ipmitool_users(&sim);
    let row = tool.iter().find(|u| u.id == 3).unwrap();
    assert_eq!((row.name.as_str(), row.ipmi_msg, row.privilege.as_str()), ("ops", true, "OPERATOR"));

    // The password works: an Administrator created by us can log in.
    let admin2 = UserSpec {
        name: "admin2".into(),
        password: Secret::new("s3cret-admin2"),
        role: UserRole::Admin,
        enabled: true,
    };
    s.create_user(&ctx, &admin2).await.unwrap();
    let creds = bmcfleet_provider::ResolvedCredentials { username: "admin2".into(), password: admin2.password.clone() };
    let mut s2 = common::connector().open(&ctx, &sim.target(), &creds).await.expect("log in as the created user");
    assert_eq!(Power::power(&mut s2, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    bmcfleet_provider::BmcSession::close(&mut s2).await;

    // Duplicate names are refused.
    assert_eq!(s.create_user(&ctx, &spec).await.unwrap_err().code, ErrorCode::Conflict);

    // Updating a missing user is an error and creates nothing.
    let before = s.list_users(&ctx).await.unwrap();
    let missing = UserUpdate {
        name: "ghost".into(),
        password: Some(Secret::new("x")),
        role: Some(UserRole::Admin),
        enabled: Some(true),
    };
    let e = s.update_user(&ctx, &missing).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound, "{e}");
    assert_eq!(s.list_users(&ctx).await.unwrap(), before);
    assert!(ipmitool_users(&sim).iter().all(|u| u.name != "ghost"));

    // Update role and enable state; ipmitool sees both.
    let update = UserUpdate { name: "ops".into(), password: None, role: Some(UserRole::User), enabled: Some(false) };
    let updated = s.update_user(&ctx, &update).await.unwrap();
    assert_eq!((updated.role, updated.enabled), (Some(UserRole::User), false));
    let row = ipmitool_users(&sim).into_iter().find(|u| u.id == 3).unwrap();
    assert_eq!((row.privilege.as_str(), row.ipmi_msg), ("USER", false));

    // Created by ipmitool, read and deleted by us.
    sim.ipmitool(&["user", "set", "name", "7", "fromtool"]).unwrap();
    sim.ipmitool(&["user", "set", "password", "7", "tool-pass"]).unwrap();
    sim.ipmitool(&["user", "priv", "7", "3", "1"]).unwrap();
    sim.ipmitool(&["user", "enable", "7"]).unwrap();
    let listed = s.list_users(&ctx).await.unwrap();
    let fromtool = listed.iter().find(|u| u.name == "fromtool").expect("user made by ipmitool");
    assert_eq!((fromtool.id.as_str(), fromtool.role), ("7", Some(UserRole::Operator)));

    s.delete_user(&ctx, "fromtool").await.unwrap();
    s.delete_user(&ctx, "ops").await.unwrap();
    let names: Vec<String> = s.list_users(&ctx).await.unwrap().into_iter().map(|u| u.name).collect();
    assert_eq!(names, vec!["admin", "admin2"]);
    let tool = ipmitool_users(&sim);
    for id in [3, 7] {
        let row = tool.iter().find(|u| u.id == id).unwrap();
        assert_eq!((row.name.as_str(), row.ipmi_msg), ("", false), "slot {id} after delete");
    }
    assert_eq!(s.delete_user(&ctx, "ops").await.unwrap_err().code, ErrorCode::TargetNotFound);

    // The freed slot is reused.
    let again = s.create_user(&ctx, &UserSpec { name: "ops3".into(), ..spec }).await.unwrap();
    assert_eq!(again.id, "3");
}

#[tokio::test]
async fn bmc_reset_is_unsupported_on_ipmi_sim() {
    // ipmi_sim answers both Cold Reset and Warm Reset with 0xC1 (ipmitool's
    // `mc reset cold` ignores the answer); success paths run against the
    // spec responder. The session stays usable.
    let sim = start_sim();
    let ctx = ctx();
    let mut session = common::connector().connect(&ctx, &sim.target(), &sim.credentials()).await.unwrap();
    for kind in [BmcResetKind::Warm, BmcResetKind::Cold] {
        let e = session.bmc_reset().unwrap().reset_bmc(&ctx, kind).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported, "{kind:?}: {e}");
        assert!(e.message.contains("0xC1 (invalid command)"), "{e}");
    }
    assert!(session.is_healthy());
    session.power().unwrap().power(&ctx, PowerOp::Status).await.unwrap();
}

#[tokio::test]
async fn network_source_static_and_dhcp_agree_with_ipmitool() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;

    // Documentation addresses (RFC 5737): configuration data only.
    let addr = StaticIpv4 {
        address: "192.0.2.50".parse().unwrap(),
        netmask: "255.255.255.0".parse().unwrap(),
        gateway: Some("192.0.2.1".parse().unwrap()),
    };
    s.set_static(&ctx, &addr).await.unwrap();
    let lan = sim.ipmitool(&["lan", "print", "1"]).unwrap();
    assert_eq!(field(&lan, "IP Address Source").as_deref(), Some("Static Address"));
    assert_eq!(field(&lan, "IP Address").as_deref(), Some("192.0.2.50"));
    assert_eq!(field(&lan, "Subnet Mask").as_deref(), Some("255.255.255.0"));
    assert_eq!(field(&lan, "Default Gateway IP").as_deref(), Some("192.0.2.1"));
    assert_eq!(field(&lan, "Set in Progress").as_deref(), Some("Set Complete"));
    assert_eq!(s.network_source(&ctx).await.unwrap(), NetworkSourceOp::Static(addr));

    s.set_dhcp(&ctx).await.unwrap();
    let lan = sim.ipmitool(&["lan", "print", "1"]).unwrap();
    assert_eq!(field(&lan, "IP Address Source").as_deref(), Some("DHCP Address"));
    assert_eq!(s.network_source(&ctx).await.unwrap(), NetworkSourceOp::Dhcp);

    // Set by ipmitool, read by us.
    sim.ipmitool(&["lan", "set", "1", "ipsrc", "static"]).unwrap();
    sim.ipmitool(&["lan", "set", "1", "ipaddr", "198.51.100.7"]).unwrap();
    sim.ipmitool(&["lan", "set", "1", "netmask", "255.255.0.0"]).unwrap();
    let NetworkSourceOp::Static(read) = s.network_source(&ctx).await.unwrap() else { panic!("expected static") };
    assert_eq!(read.address.to_string(), "198.51.100.7");
    assert_eq!(read.netmask.to_string(), "255.255.0.0");

    // Invalid input is refused before anything is sent.
    let bad = StaticIpv4 { netmask: "255.0.255.0".parse().unwrap(), ..read };
    assert_eq!(s.set_static(&ctx, &bad).await.unwrap_err().code, ErrorCode::InvalidField);
}

#[tokio::test]
async fn raw_passthrough_matches_ipmitool_raw() {
    let sim = start_sim();
    let ctx = ctx();
    let mut session = common::connector().connect(&ctx, &sim.target(), &sim.credentials()).await.unwrap();
    let raw = session.raw().unwrap();

    let ours = raw.raw(&ctx, &RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: vec![] })).await.unwrap();
    assert_eq!(ours.status, 0);
    let theirs: Vec<u8> = sim
        .ipmitool(&["raw", "0x06", "0x01"])
        .unwrap()
        .split_whitespace()
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect();
    assert_eq!(ours.data, theirs);

    // A completion code is data for raw, not an error.
    let bad = raw.raw(&ctx, &RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0xFF, data: vec![] })).await.unwrap();
    assert_eq!((bad.status, bad.data.len()), (0xC1, 0));

    let redfish = RawRequest::Redfish(RawRedfish { method: HttpMethod::Get, path: "/redfish/v1".into(), body: None });
    assert_eq!(raw.raw(&ctx, &redfish).await.unwrap_err().code, ErrorCode::InvalidField);
    let odd = RawRequest::Ipmi(RawIpmi { netfn: 0x07, cmd: 0x01, data: vec![] });
    assert_eq!(raw.raw(&ctx, &odd).await.unwrap_err().code, ErrorCode::InvalidField);
    let big = RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: vec![0; 256] });
    assert_eq!(raw.raw(&ctx, &big).await.unwrap_err().code, ErrorCode::InvalidField);
}

#[tokio::test]
async fn inventory_matches_emu_fru_and_ipmitool() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open_powered_on(&sim).await;
    let inv = Inventory::inventory(&mut s, &ctx).await.unwrap();

    assert_eq!(inv.manufacturer.as_deref(), Some("bmcfleet"));
    assert_eq!(inv.model.as_deref(), Some("IPMI-SIM"));
    assert_eq!(inv.serial.as_deref(), Some("PRD-0001"));
    assert_eq!(inv.power_state, Some(PowerState::On));
    let extra = |k: &str| inv.extra.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    let fru = inv.fru.clone().expect("typed FRU");
    assert_eq!(fru.board_serial.as_deref(), Some("BRD-0001"));
    assert_eq!(fru.board_part_number.as_deref(), Some("PN-BRD-42"));
    assert_eq!(fru.product_version.as_deref(), Some("1.0"));
    assert_eq!(fru.chassis_type.as_deref(), Some("Rack Mount Chassis"));
    assert_eq!(fru.chassis_serial.as_deref(), Some("CH-0001"));

    let mc = sim.ipmitool(&["mc", "info"]).unwrap();
    assert_eq!(inv.firmware_version, field(&mc, "Firmware Revision"));
    assert_eq!(extra("manufacturer_id").map(str::to_owned), field(&mc, "Manufacturer ID"));
    assert_eq!(extra("ipmi_version").map(str::to_owned), field(&mc, "IPMI Version"));
    // Every FRU field as ipmitool reads it from the same simulator.
    let printed = sim.ipmitool(&["fru", "print", "0"]).unwrap();
    assert_eq!(field(&printed, "Product Name").as_deref(), inv.model.as_deref());
    for (label, ours) in [
        ("Chassis Type", &fru.chassis_type),
        ("Chassis Part Number", &fru.chassis_part_number),
        ("Chassis Serial", &fru.chassis_serial),
        ("Board Mfg", &fru.board_manufacturer),
        ("Board Product", &fru.board_product),
        ("Board Serial", &fru.board_serial),
        ("Board Part Number", &fru.board_part_number),
        ("Product Manufacturer", &fru.product_manufacturer),
        ("Product Name", &fru.product_name),
        ("Product Part Number", &fru.product_part_number),
        ("Product Version", &fru.product_version),
        ("Product Serial", &fru.product_serial),
    ] {
        assert_eq!(field(&printed, label).as_ref(), ours.as_ref(), "{label}:\n{printed}");
    }
}
