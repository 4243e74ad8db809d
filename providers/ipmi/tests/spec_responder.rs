//! The typed command layer against `testing::SpecBmc`, the in-process BMC
//! built from the IPMI 2.0 spec. These are the paths OpenIPMI's `ipmi_sim`
//! refuses or ignores, so they are tested here instead of skipped:
//! NMI (ipmi_sim: 0xCC), warm and cold reset (ipmi_sim: 0xC1), persistent
//! and EFI boot flags (ipmi_sim stores neither), safe-mode boot (ipmi_sim:
//! 0xFF), privilege errors, and exact request sequences (LAN commit,
//! user-slot rollback) that a simulator cannot show.

use bmcfleet_ipmi::{IpmiSession, CAPABILITIES};
use bmcfleet_provider::{
    capabilities, BmcReset, BmcSession, BootControl, Ctx, Inventory, NetworkSource, Power, Raw, Users,
};
use bmcfleet_schema::{
    BmcResetKind, BootDevice, BootDeviceRequest, ErrorCode, NetworkSourceOp, PowerOp, PowerState, RawIpmi, RawRequest,
    Secret, StaticIpv4, UserRole, UserSpec, UserUpdate,
};
use bmcfleet_testing::ipmi::{Fault, SpecBmc, SpecHandle};
use std::time::Duration;

fn session() -> (IpmiSession<SpecBmc>, SpecHandle) {
    let bmc = SpecBmc::new();
    let handle = bmc.handle();
    (IpmiSession::new(bmc, "spec-bmc"), handle)
}

fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(5))
}

#[tokio::test]
async fn capabilities_are_the_declared_ones() {
    let (mut s, _) = session();
    assert_eq!(capabilities(&mut s), CAPABILITIES.to_vec());
}

#[tokio::test]
async fn nmi_pulses_a_diagnostic_interrupt() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    // 28.3: a diagnostic interrupt needs a running system.
    let e = Power::power(&mut s, &ctx, PowerOp::Nmi).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(e.message.contains("0xD5"), "{e}");
    Power::power(&mut s, &ctx, PowerOp::On).await.unwrap();
    Power::power(&mut s, &ctx, PowerOp::Nmi).await.unwrap();
    let state = bmc.snapshot();
    assert_eq!(state.nmis, 1);
    assert!(state.power_on, "NMI does not change power");
    assert_eq!(state.calls.last(), Some(&(0x00, 0x02)));
}

#[tokio::test]
async fn every_power_operation_maps_to_its_chassis_control_code() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    Power::power(&mut s, &ctx, PowerOp::On).await.unwrap();
    Power::power(&mut s, &ctx, PowerOp::Cycle).await.unwrap();
    Power::power(&mut s, &ctx, PowerOp::Reset).await.unwrap();
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));
    Power::power(&mut s, &ctx, PowerOp::SoftOff).await.unwrap();
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    let st = bmc.snapshot();
    assert_eq!((st.power_cycles, st.hard_resets, st.soft_offs), (1, 1, 1));
}

#[tokio::test]
async fn warm_and_cold_reset() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    s.reset_bmc(&ctx, BmcResetKind::Warm).await.unwrap();
    s.reset_bmc(&ctx, BmcResetKind::Cold).await.unwrap();
    let st = bmc.snapshot();
    assert_eq!((st.warm_resets, st.cold_resets), (1, 1));
    assert_eq!(st.calls, vec![(0x06, 0x03), (0x06, 0x02)]);
}

#[tokio::test]
async fn boot_flags_persistent_efi_and_safe_mode_round_trip() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    assert_eq!(s.boot_device(&ctx).await.unwrap().device, BootDevice::None);
    for device in [BootDevice::Pxe, BootDevice::Disk, BootDevice::Safe, BootDevice::Cdrom, BootDevice::Bios] {
        for (persistent, efi) in [(false, false), (true, false), (false, true), (true, true)] {
            let req = BootDeviceRequest { device, persistent, efi };
            s.set_boot_device(&ctx, &req).await.unwrap();
            assert_eq!(s.boot_device(&ctx).await.unwrap(), req);
        }
    }
    // Exact spec bytes for "PXE, persistent, UEFI": valid|persistent|EFI, selector 0001b.
    s.set_boot_device(&ctx, &BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: true }).await.unwrap();
    assert_eq!(bmc.snapshot().boot_flags, [0xE0, 0x04, 0, 0, 0]);
    // Safe mode: selector 0011b, legacy, one-time.
    s.set_boot_device(&ctx, &BootDeviceRequest { device: BootDevice::Safe, persistent: false, efi: false })
        .await
        .unwrap();
    assert_eq!(bmc.snapshot().boot_flags, [0x80, 0x0C, 0, 0, 0]);
    // An expired one-time override (valid bit cleared by the BMC) reads as none.
    bmc.update(|st| st.boot_flags[0] &= 0x7F);
    assert_eq!(s.boot_device(&ctx).await.unwrap().device, BootDevice::None);
    // A selector bmcfleet has no name for (floppy/primary removable media)
    // is reported as `other`, readably, not guessed and not a failed read.
    bmc.update(|st| st.boot_flags = [0x80, 0x0F << 2, 0, 0, 0]);
    assert_eq!(s.boot_device(&ctx).await.unwrap().device, BootDevice::Other);
    // UEFI HTTP boot has no IPMI selector: refused, nothing sent.
    let before = bmc.snapshot().calls.len();
    let e = s
        .set_boot_device(&ctx, &BootDeviceRequest { device: BootDevice::Http, persistent: false, efi: true })
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert_eq!(bmc.snapshot().calls.len(), before, "a request was sent");
}

#[tokio::test]
async fn insufficient_privilege_is_permission_denied() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    bmc.update(|st| st.session_privilege = 2); // User
    let e = Power::power(&mut s, &ctx, PowerOp::On).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    assert!(e.message.contains("0xD4 (insufficient privilege level)"), "{e}");
    // Reading status needs only User.
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    assert!(!bmc.snapshot().power_on);
}

#[tokio::test]
async fn users_with_spec_enable_status() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    let spec = UserSpec {
        name: "alice".into(),
        password: Secret::new("a-20-byte-password!!"),
        role: UserRole::Operator,
        enabled: false,
    };
    let created = s.create_user(&ctx, &spec).await.unwrap();
    assert_eq!((created.id.as_str(), created.enabled, created.role), ("3", false, Some(UserRole::Operator)));
    let st = bmc.snapshot();
    let (_, alice) = st.user("alice").unwrap();
    assert_eq!(alice.password_str(), "a-20-byte-password!!", "20-byte password form");
    assert_eq!((alice.privilege, alice.enabled, alice.ipmi_messaging), (3, false, false));

    let updated = s
        .update_user(
            &ctx,
            &UserUpdate { name: "alice".into(), password: Some(Secret::new("new")), role: None, enabled: Some(true) },
        )
        .await
        .unwrap();
    assert_eq!((updated.enabled, updated.role), (true, Some(UserRole::Operator)));
    assert_eq!(bmc.snapshot().user("alice").unwrap().1.password_str(), "new");

    let before = bmc.snapshot().users;
    let e = s
        .update_user(
            &ctx,
            &UserUpdate { name: "bob".into(), password: Some(Secret::new("x")), role: None, enabled: None },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound);
    assert_eq!(bmc.snapshot().users, before, "a missing user is never created");

    s.delete_user(&ctx, "alice").await.unwrap();
    let st = bmc.snapshot();
    assert!(st.user("alice").is_none());
    let slot = &st.users[2];
    assert_eq!((slot.name.as_str(), slot.enabled, slot.privilege, slot.ipmi_messaging), ("", false, 0xF, false));
}

/// A BMC that answers a user change with completion code 0 and does not
/// make it: the action fails, since the slot does not read back as asked,
/// instead of reporting the requested user as done (a create that did
/// not take leaves the slot cleared).
#[tokio::test]
async fn user_changes_acknowledged_but_not_made_are_not_reported_done() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    let spec = UserSpec {
        name: "alice".into(),
        password: Secret::new("a-password-1"),
        role: UserRole::Operator,
        enabled: true,
    };
    // Set User Name (app 0x45) answered 0, not done.
    bmc.inject(0x06, 0x45, Fault::CompletionCode(0));
    let e = s.create_user(&ctx, &spec).await.expect_err("no slot was named alice");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    let slot = bmc.snapshot().users[2].clone();
    assert_eq!((slot.name.as_str(), slot.enabled, slot.privilege), ("", false, 0xF), "the half-made slot is cleared");
    assert_eq!(s.create_user(&ctx, &spec).await.expect("created").role, Some(UserRole::Operator));

    // Set User Access (app 0x43) answered 0, not done.
    bmc.inject(0x06, 0x43, Fault::CompletionCode(0));
    let promote = UserUpdate { name: "alice".into(), password: None, role: Some(UserRole::Admin), enabled: None };
    let e = s.update_user(&ctx, &promote).await.expect_err("still an operator");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert_eq!(bmc.snapshot().user("alice").unwrap().1.privilege, 3);

    // The name is not cleared.
    bmc.inject(0x06, 0x45, Fault::CompletionCode(0));
    let e = s.delete_user(&ctx, "alice").await.expect_err("alice is still there");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    s.delete_user(&ctx, "alice").await.expect("deleted");
    assert!(bmc.snapshot().user("alice").is_none());
}

#[tokio::test]
async fn user_creation_validates_and_rolls_back() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    let base = UserSpec { name: "carol".into(), password: Secret::new("pw"), role: UserRole::User, enabled: true };
    for bad in [
        UserSpec { name: "".into(), ..base.clone() },
        UserSpec { name: "a-very-long-user-name".into(), ..base.clone() },
        UserSpec { password: Secret::new("x".repeat(21)), ..base.clone() },
    ] {
        assert_eq!(s.create_user(&ctx, &bad).await.unwrap_err().code, ErrorCode::InvalidField);
    }
    // A failure after the name was written clears the slot again.
    bmc.inject(0x06, 0x43, Fault::CompletionCode(0xFF));
    let e = s.create_user(&ctx, &base).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(bmc.snapshot().user("carol").is_none(), "half-created user removed");

    // Full table: no free slot.
    bmc.update(|st| {
        for (i, u) in st.users.iter_mut().enumerate().skip(2) {
            u.name = format!("u{i}");
        }
    });
    let e = s.create_user(&ctx, &base).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError);
    assert!(e.message.contains("no free user slot"), "{e}");
}

#[tokio::test]
async fn static_network_is_written_between_set_in_progress_and_commit() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    assert!(matches!(NetworkSource::network_source(&mut s, &ctx).await.unwrap(), NetworkSourceOp::Static(_)));
    bmc.update(|st| st.calls.clear());
    let addr = StaticIpv4 {
        address: "203.0.113.9".parse().unwrap(),
        netmask: "255.255.255.128".parse().unwrap(),
        gateway: Some("203.0.113.1".parse().unwrap()),
    };
    s.set_static(&ctx, &addr).await.unwrap();
    assert_eq!(NetworkSource::network_source(&mut s, &ctx).await.unwrap(), NetworkSourceOp::Static(addr.clone()));
    let st = bmc.snapshot();
    assert_eq!((st.lan.ip_source, st.lan.address, st.lan.set_in_progress), (1, [203, 0, 113, 9], 0));

    s.set_dhcp(&ctx).await.unwrap();
    assert_eq!(NetworkSource::network_source(&mut s, &ctx).await.unwrap(), NetworkSourceOp::Dhcp);

    // A BMC without a gateway parameter: the error is typed and the
    // set-in-progress lock is still released (set complete, no commit).
    bmc.update(|st| {
        st.lan_unsupported = vec![12];
        st.calls.clear();
    });
    let e = s.set_static(&ctx, &addr).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("LAN parameter not supported"), "{e}");
    let st = bmc.snapshot();
    assert_eq!(st.lan.set_in_progress, 0, "lock released");
    assert_eq!(st.calls.len(), 6, "in progress, source, address, mask, gateway (refused), complete");
}

#[tokio::test]
async fn inventory_reads_device_id_chassis_and_fru() {
    let (mut s, _) = session();
    let ctx = ctx();
    let inv = Inventory::inventory(&mut s, &ctx).await.unwrap();
    assert_eq!(inv.manufacturer.as_deref(), Some("spec"));
    assert_eq!(inv.model.as_deref(), Some("SPEC-BMC"));
    assert_eq!(inv.serial.as_deref(), Some("SP-1"));
    assert_eq!(inv.firmware_version.as_deref(), Some("2.45"));
    assert_eq!(inv.power_state, Some(PowerState::Off));
    assert_eq!(inv.fru.as_ref().and_then(|f| f.asset_tag.as_deref()), Some("TAG-7"));
    assert!(inv.extra.contains(&("power_restore_policy".into(), "previous".into())));
}

#[tokio::test]
async fn completion_codes_and_transport_faults_are_typed() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    bmc.inject(0x00, 0x01, Fault::CompletionCode(0xC0));
    let e = Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap_err();
    assert_eq!((e.code, e.retryable), (ErrorCode::BmcError, true));
    assert!(e.message.contains("node busy"), "{e}");

    bmc.inject(0x00, 0x01, Fault::CompletionCode(0xCB));
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap_err().code, ErrorCode::TargetNotFound);

    bmc.inject(0x00, 0x01, Fault::NoReply);
    let e = Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap_err();
    assert_eq!((e.code, e.retryable), (ErrorCode::Timeout, true));

    // Raw returns the completion code as data, never as an error.
    bmc.inject(0x30, 0x01, Fault::CompletionCode(0xD4));
    let raw =
        Raw::raw(&mut s, &ctx, &RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 0x01, data: vec![1, 2] })).await.unwrap();
    assert_eq!(raw.status, 0xD4);
    let raw =
        Raw::raw(&mut s, &ctx, &RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 0x02, data: vec![] })).await.unwrap();
    assert_eq!(raw.status, 0xC1, "unknown OEM command");
}

#[tokio::test]
async fn close_reaches_the_transport() {
    let (mut s, bmc) = session();
    BmcSession::close(&mut s).await;
    assert!(bmc.snapshot().closed);
    let e = Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal);
}

/// Verified effects (issue 17): a power action succeeds when the chassis
/// reports the state it leads to and fails when it never does; setting the
/// boot device turns off the 60-second boot-flag timeout first and reads
/// the flags back.
#[tokio::test]
async fn power_and_boot_effects_are_verified() {
    let (s, bmc) = session();
    let mut s =
        s.with_verify(bmcfleet_ipmi::Verify { poll: Duration::from_millis(10), limit: Duration::from_millis(300) });
    let ctx = ctx();
    assert_eq!(
        Power::power(&mut s, &ctx, PowerOp::On).await.unwrap(),
        Some(PowerState::On),
        "the verified state is reported"
    );
    // A BMC that accepts Chassis Control (completion code 0) but whose chassis stays on.
    bmc.inject(0x00, 0x02, Fault::CompletionCode(0x00));
    let e = Power::power(&mut s, &ctx, PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotReached, "{e}");
    assert!(e.message.contains("accepted power Off but the chassis still reported on"), "{e}");
    assert!(bmc.snapshot().power_on);
    // The worker's (or the action's) settle timeout bounds the wait instead of the provider's default.
    bmc.inject(0x00, 0x02, Fault::CompletionCode(0x00));
    let started = std::time::Instant::now();
    let settled = ctx.clone().with_settle(Some(Duration::from_millis(50)));
    assert_eq!(Power::power(&mut s, &settled, PowerOp::Off).await.unwrap_err().code, ErrorCode::NotReached);
    assert!(
        started.elapsed() < Duration::from_millis(250),
        "bounded by the settle time, not the 300 ms limit: {:?}",
        started.elapsed()
    );

    let req = BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true };
    s.set_boot_device(&ctx, &req).await.unwrap();
    assert_eq!(bmc.snapshot().boot_valid_clearing, 0x08, "the 60-second boot-flag timeout is off");
    // A BMC without parameter 3 still gets its boot device.
    bmc.inject(0x00, 0x08, Fault::CompletionCode(0x80));
    s.set_boot_device(&ctx, &BootDeviceRequest { device: BootDevice::Disk, ..req }).await.unwrap();
    assert_eq!(bmc.snapshot().boot_flags[1], 0x08);
    // A BMC that accepts the flags but does not keep them: not set.
    bmc.inject(0x00, 0x08, Fault::CompletionCode(0x00)); // parameter 3
    bmc.inject(0x00, 0x08, Fault::CompletionCode(0x00)); // parameter 5, accepted and dropped
    let e = s.set_boot_device(&ctx, &BootDeviceRequest { device: BootDevice::Cdrom, ..req }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("reads back device selector 0x2 instead of 0x5"), "{e}");
}

/// What ipmi_sim cannot show: an erase that takes a while (Clear SEL
/// answers "in progress" until it completes), the reservation the erase
/// must carry, and a session below operator that may read but not clear.
#[tokio::test]
async fn sel_clear_polls_until_the_erase_completes() {
    use bmcfleet_provider::EventLog;
    let (mut s, bmc) = session();
    let ctx = ctx();
    let rec = |sensor: u8| [0, 0, 0x02, 0x00, 0x00, 0x00, 0x60, 0x20, 0x00, 0x04, 0x01, sensor, 0x01, 0x09, 0xFF, 0xFF];
    bmc.update(|st| {
        st.sel = vec![rec(0x30), rec(0x31), rec(0x32)];
        st.sel_erase_polls = 2;
    });
    let log = s.read_event_log(&ctx, 2, 0).await.unwrap();
    assert_eq!(log.total, Some(3));
    let ids: Vec<&str> = log.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["0003", "0002"], "newest first, paged");
    assert_eq!(log.entries[0].sensor.as_deref(), Some("0x32"));

    s.clear_event_log(&ctx).await.unwrap();
    let st = bmc.snapshot();
    assert!(st.sel.is_empty());
    let clears: Vec<&(u8, u8)> = st.calls.iter().filter(|c| **c == (0x0A, 0x47)).collect();
    assert_eq!(clears.len(), 3, "initiate, then status until complete: {:?}", st.calls);
    assert_eq!(st.calls.iter().filter(|c| **c == (0x0A, 0x42)).count(), 1, "one reservation");

    // A session the BMC holds at user level reads the log; its clear is refused (0xD4).
    bmc.update(|st| {
        st.sel = vec![rec(0x40)];
        st.session_privilege = 2;
    });
    assert_eq!(s.read_event_log(&ctx, 10, 0).await.unwrap().entries.len(), 1);
    let e = s.clear_event_log(&ctx).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    assert_eq!(bmc.snapshot().sel.len(), 1);
}

/// Deleting a user touches that user's slot only; two slots of one name
/// are not guessed between (nothing is written).
#[tokio::test]
async fn a_user_delete_touches_its_slot_only_and_never_guesses_between_two() {
    let (mut s, bmc) = session();
    let ctx = ctx();
    for name in ["alice", "bob"] {
        let spec =
            UserSpec { name: name.into(), password: Secret::new("a-password-1"), role: UserRole::User, enabled: true };
        s.create_user(&ctx, &spec).await.unwrap();
    }
    let before = bmc.snapshot().users;
    let (alice, _) = bmc.snapshot().user("alice").map(|(i, u)| (i, u.clone())).unwrap();
    s.delete_user(&ctx, "alice").await.unwrap();
    let after = bmc.snapshot().users;
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        if i as u8 + 1 != alice {
            assert_eq!(a, b, "slot {} changed", i + 1);
        }
    }
    // A second slot named bob, as a raw Set User Name could leave it.
    let free = after.iter().skip(1).position(|u| u.name.is_empty() && !u.enabled).unwrap() + 2;
    bmc.update(|st| st.users[free - 1].name = "bob".into());
    let before = bmc.snapshot();
    let e = s.delete_user(&ctx, "bob").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Conflict, "{e}");
    let after = bmc.snapshot();
    assert_eq!(after.users, before.users, "nothing written");
    let writes: Vec<_> =
        after.calls[before.calls.len()..].iter().filter(|c| c.0 == 0x06 && matches!(c.1, 0x43 | 0x45 | 0x47)).collect();
    assert!(writes.is_empty(), "{writes:?}");
}
