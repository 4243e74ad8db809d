//! Entry point for the `ipmi_response` fuzz target (`fuzz/`) and for the
//! corpus replay test (`tests/tests/fuzz_corpus.rs`). Not a public API.
//!
//! [`ipmi_response`] drives the real [`IpmiSession`] capability code over a
//! scripted [`Transport`] whose replies (completion code and data) come from
//! the fuzzer's bytes, so every decoder is reached the way a BMC's answers
//! reach it in production: completion-code mapping, Get Chassis Status,
//! boot options, LAN configuration, user slots, Get Device ID, FRU, and
//! the SDR and SEL walks (record ids, lengths and reservations the BMC
//! chooses).
//! One selector value instead feeds the bytes straight to the pure decoders
//! and to the session-less RMCP reply parser of [`crate::probe`] (with the
//! flags byte as the expected sequence number) and every RMCP+ session
//! parser (routing, packet verification and decryption for each cipher
//! suite, handshake replies, IPMI messages, the replay window).
//!
//! Input layout: `[op, flags, reply*]`, each reply `[cc, len, data[len]]`.
//! Op 14 picks by `flags % 4`: NMI, sensors, read the event log (limit
//! `flags >> 2`, offset `flags >> 5`), clear it.
//! When the script runs out the transport answers with a timeout.

use crate::cmd;
use crate::error::{completion_code_class, completion_code_error, completion_code_meaning, CommandId, TransportError};
use crate::fru;
use crate::transport::{Request, Response, Transport};
use crate::{IpmiSession, TransportErrorKind};
use async_trait::async_trait;
use bmcfleet_provider::{BmcReset, BootControl, Ctx, EventLog, Inventory, NetworkSource, Power, Raw, Sensors, Users};
use bmcfleet_schema::{
    BmcResetKind, BootDevice, BootDeviceRequest, PowerOp, RawIpmi, RawRequest, Secret, StaticIpv4, UserRole, UserSpec,
    UserUpdate,
};
use std::time::Duration;
use tokio::time::Instant;

/// Replies taken from the fuzzer's bytes, in order.
struct Scripted<'a> {
    rest: &'a [u8],
    calls: usize,
}

#[async_trait]
impl Transport for Scripted<'_> {
    async fn call(&mut self, _deadline: Instant, request: &Request) -> Result<Response, TransportError> {
        self.calls += 1;
        // Requests the session builds must fit one IPMI message.
        assert!(request.data.len() <= 255 + 2, "oversized request {request:?}");
        let timeout = || TransportError::new(TransportErrorKind::Timeout, "script exhausted");
        let (&cc, rest) = self.rest.split_first().ok_or_else(timeout)?;
        let (&len, rest) = rest.split_first().ok_or_else(timeout)?;
        let len = usize::from(len).min(rest.len());
        let (data, rest) = rest.split_at(len);
        self.rest = rest;
        Ok(Response { cc, data: data.to_vec() })
    }
}

thread_local! {
    static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime");
}

/// One fuzz input: see the module docs for the layout.
pub fn ipmi_response(data: &[u8]) {
    let [op, flags, script @ ..] = data else { return };
    if op % 16 == 15 {
        decoders(*flags, script);
        return;
    }
    RUNTIME.with(|rt| rt.block_on(session_op(*op, *flags, script)));
}

async fn session_op(op: u8, flags: u8, script: &[u8]) {
    let ctx = Ctx::new(Instant::now() + Duration::from_secs(3600));
    let transport = Scripted { rest: script, calls: 0 };
    // Verification polls without waiting: the script's replies decide.
    let mut s = IpmiSession::new(transport, "fuzz")
        .with_verify(crate::session::Verify { poll: Duration::ZERO, limit: Duration::from_secs(3600) });
    if flags & 0x80 != 0 {
        s = s.with_channel(flags);
    }
    let device = [BootDevice::Pxe, BootDevice::Disk, BootDevice::Cdrom, BootDevice::Bios, BootDevice::Safe]
        [usize::from(flags % 5)];
    let spec = UserSpec { name: "fuzzer".into(), password: Secret::new("pw"), role: UserRole::Operator, enabled: true };
    match op % 16 {
        0 => {
            let _ = s.power(&ctx, PowerOp::Status).await;
        }
        1 => {
            let _ = s.power(&ctx, PowerOp::Cycle).await;
        }
        2 => {
            if let Ok(b) = s.boot_device(&ctx).await {
                // What the BMC says must survive our own encoding.
                let _ = cmd::encode_boot_flags(&b);
            }
        }
        3 => {
            let req = BootDeviceRequest { device, persistent: flags & 1 != 0, efi: flags & 2 != 0 };
            let _ = s.set_boot_device(&ctx, &req).await;
        }
        4 => {
            let _ = s.list_users(&ctx).await;
        }
        5 => {
            let _ = s.create_user(&ctx, &spec).await;
        }
        6 => {
            let update = UserUpdate {
                name: "fuzzer".into(),
                password: (flags & 1 != 0).then(|| Secret::new("pw2")),
                role: (flags & 2 != 0).then_some(UserRole::Admin),
                enabled: (flags & 4 != 0).then_some(flags & 8 != 0),
            };
            let _ = s.update_user(&ctx, &update).await;
        }
        7 => {
            let _ = s.delete_user(&ctx, "fuzzer").await;
        }
        8 => {
            let _ = s.network_source(&ctx).await;
        }
        9 => {
            let _ = s.set_dhcp(&ctx).await;
        }
        10 => {
            let addr = StaticIpv4 {
                address: [10, 0, 0, 9].into(),
                netmask: [255, 255, 255, 0].into(),
                gateway: (flags & 1 != 0).then(|| [10, 0, 0, 1].into()),
            };
            let _ = s.set_static(&ctx, &addr).await;
        }
        11 => {
            let req = RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: flags, data: vec![1, 2, 3] });
            if let Ok(r) = s.raw(&ctx, &req).await {
                assert!(r.status <= 0xFF, "raw status {} is not a completion code", r.status);
            }
        }
        12 => {
            let _ = s.inventory(&ctx).await;
        }
        13 => {
            let kind = if flags & 1 != 0 { BmcResetKind::Cold } else { BmcResetKind::Warm };
            let _ = s.reset_bmc(&ctx, kind).await;
        }
        // The walkers over BMC-chosen record ids and lengths (SDR, SEL).
        _ => match flags % 4 {
            1 => {
                if let Ok(readings) = s.sensors(&ctx).await {
                    assert!(readings.len() <= 1024, "{} sensors from one SDR walk", readings.len());
                }
            }
            2 => {
                let (limit, offset) = (u32::from(flags >> 2), u32::from(flags >> 5));
                if let Ok(log) = s.read_event_log(&ctx, limit, offset).await {
                    assert!(
                        log.entries.len() <= limit as usize,
                        "{} entries for a limit of {limit}",
                        log.entries.len()
                    );
                }
            }
            3 => {
                // One status poll: the erase is polled 100 ms apart.
                let ctx = Ctx::new(Instant::now() + Duration::from_millis(50));
                let _ = s.clear_event_log(&ctx).await;
            }
            _ => {
                let _ = s.power(&ctx, PowerOp::Nmi).await;
            }
        },
    }
}

/// The pure decoders and the RMCP reply parser, fed the same bytes.
fn decoders(seq: u8, data: &[u8]) {
    let _ = cmd::decode_chassis_status(data).map(|s| cmd::restore_policy_name(s.restore_policy));
    if let Ok(b) = cmd::decode_boot_flags(data) {
        // Decode → encode → decode is stable for whatever a BMC reports.
        // (A Get response is the parameter version byte, then what Set sends.)
        let mut reply = vec![0x01];
        if let Ok(flags) = cmd::encode_boot_flags(&b) {
            reply.extend(flags);
            let again = cmd::decode_boot_flags(&reply);
            if b.device != BootDevice::None {
                assert_eq!(again.ok(), Some(b), "boot flags do not round-trip");
            }
        }
    }
    let _ = cmd::decode_user_name(data);
    let _ = cmd::decode_user_access(data).map(|a| (a.is_enabled(), cmd::privilege_role(a.privilege)));
    for len in [1, 4] {
        let _ = cmd::lan_param_value(data, len);
    }
    let _ = cmd::firmware_revision(data);
    let _ = ipmi_rs::app::DeviceId::from_data(data);
    let _ = fru::parse_header(data);
    let _ = fru::area_len(data);
    let _ = fru::parse_board(data);
    let _ = fru::parse_product(data);
    if let Some((&cc, _)) = data.split_first() {
        let id = CommandId { name: "fuzz", netfn: 0, cmd: 0 };
        let _ = (completion_code_meaning(cc), completion_code_class(cc));
        let _ = completion_code_error(id, cc, cmd::SET_USER_PASSWORD.specific);
    }
    let _ = crate::probe::decode(seq, data);
    crate::rmcp::fuzz_wire(data);
}
