//! Entry point for the `redfish_json` fuzz target (`fuzz/`) and for the
//! corpus replay test (`tests/tests/fuzz_corpus.rs`). Not a public API.
//!
//! [`redfish_json`] reads the bytes the way a BMC's answer is read
//! ([`Reply::json`], the error-body extraction of [`status_error`]) and hands
//! the value to every reader the session uses on a resource: service root
//! and links, `Actions` with inline or ActionInfo allowable values, power
//! state and reset planning, boot override read-back and PATCH bodies,
//! inventory, manager network interfaces, account slots, virtual media
//! devices and InsertMedia bodies, and Task Monitor polling.
//!
//! Input layout: `[status_selector, headers_selector, body…]`; the headers
//! selector adds `Location` / `Retry-After` headers taken from the body's
//! first line.

use crate::boot::{device_for, patch_body, read_override, target_for};
use crate::discovery::{action_info_allowed, action_of, normalise_reset_types, ResetAction, RootInfo};
use crate::error::{bmc_messages, status_error};
use crate::inventory::from_resources;
use crate::json::{last_segment, link, links, members, norm_path};
use crate::manager::{choose_interface, read_source, source_body};
use crate::power::{needs_state, parse_power_state, plan};
use crate::raw::canonical_path;
use crate::transport::{read_poll, retry_after, task_monitor, Reply, Resource};
use crate::users::{pick_slot, role_of, Account};
use crate::virtual_media::{choose_device, insert_body, redact};
use bmcfleet_schema::{BootDevice, BootDeviceRequest, MediaKind, NetworkSourceOp, PowerOp, StaticIpv4};
use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde_json::Value;

const STATUSES: [u16; 8] = [200, 202, 200, 204, 400, 404, 500, 503];

/// One fuzz input: see the module docs for the layout.
pub fn redfish_json(data: &[u8]) {
    let [status, header_sel, body @ ..] = data else { return };
    let status = StatusCode::from_u16(STATUSES[usize::from(status % 8)]).expect("a valid status");
    let mut headers = HeaderMap::new();
    let first_line = body.split(|b| *b == b'\n').next().unwrap_or(&[]);
    if let Ok(v) = HeaderValue::from_bytes(first_line) {
        if header_sel & 1 != 0 {
            headers.insert(LOCATION, v.clone());
        }
        if header_sel & 2 != 0 {
            headers.insert(RETRY_AFTER, v);
        }
    }
    let reply = Reply::new(status, headers, Bytes::copy_from_slice(body));

    let _ = bmc_messages(body);
    let _ = status_error("GET", "/redfish/v1/Systems/1", status, body).to_string();
    let _ = retry_after(&reply);
    let _ = read_poll(
        &Method::POST,
        "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
        "/redfish/v1/TaskService/Tasks/1",
        &reply,
    );
    if let Ok(text) = std::str::from_utf8(body) {
        let _ =
            (norm_path(text), last_segment(text), canonical_path(text), redact(text), role_of(text), device_for(text));
        let _ = normalise_reset_types(text.split(',').map(str::to_owned).collect());
    }
    let Ok(v) = reply.json(&Method::GET, "/redfish/v1/fuzz") else { return };
    let _ = task_monitor(&reply, &v);
    resource(&v);
}

fn resource(v: &Value) {
    // Service root, collections, links.
    let root = RootInfo::from_root(v);
    let _ = (root.systems, root.managers, root.account_service, root.vendor);
    let paths = members(v);
    for p in &paths {
        let _ = last_segment(p);
    }
    let _ = (links(v, "ManagedBy"), link(v, "VirtualMedia"), link(v, "EthernetInterfaces"));

    // Actions and reset planning.
    let current = Some(parse_power_state(v));
    let mut resets = vec![ResetAction { target: "/reset".into(), allowed: None }];
    for name in ["#ComputerSystem.Reset", "#Manager.Reset"] {
        if let Some((target, allowed, _info)) = action_of(v, name) {
            resets.push(ResetAction { target, allowed: allowed.map(normalise_reset_types) });
        }
    }
    if let Some(allowed) = action_info_allowed(v) {
        resets.push(ResetAction { target: "/info".into(), allowed: Some(normalise_reset_types(allowed)) });
    }
    for reset in &resets {
        let _ = reset.describe_allowed();
        for op in [PowerOp::On, PowerOp::Off, PowerOp::SoftOff, PowerOp::Cycle, PowerOp::Reset, PowerOp::Nmi] {
            let _ = needs_state(op, reset);
            let _ = plan(op, reset, current);
        }
    }

    // Boot override.
    let _ = read_override(v);
    if let Some(boot) = v.get("Boot") {
        for device in [BootDevice::Pxe, BootDevice::Disk, BootDevice::Cdrom, BootDevice::Bios] {
            for (persistent, efi) in [(false, false), (true, true)] {
                let req = BootDeviceRequest { device, persistent, efi };
                if let Ok(body) = patch_body(&req, boot) {
                    // The body names the target we asked for, and reads back as it.
                    let target = target_for(device).ok().flatten();
                    let sent = body.pointer("/Boot/BootSourceOverrideTarget").and_then(Value::as_str);
                    assert_eq!(sent, target, "PATCH body for {device:?} names another target: {body}");
                    let back = read_override(&body);
                    assert_eq!((back.device, back.persistent), (device, persistent), "{body}");
                }
            }
        }
    }

    // Inventory, manager network interface.
    let _ = from_resources(v, Some(v));
    let _ = read_source(v);
    let dhcp = source_body(v, &NetworkSourceOp::Dhcp);
    let fixed = StaticIpv4 { address: [10, 0, 0, 9].into(), netmask: [255, 255, 255, 0].into(), gateway: None };
    let _ = (dhcp, source_body(v, &NetworkSourceOp::Static(fixed)));

    // Expanded collection members as resources.
    let items: Vec<Resource> = v
        .get("Members")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .map(|(i, m)| Resource {
                    path: m
                        .get("@odata.id")
                        .and_then(Value::as_str)
                        .map(norm_path)
                        .unwrap_or_else(|| format!("/m/{i}")),
                    body: m.clone(),
                    etag: None,
                })
                .collect()
        })
        .unwrap_or_default();
    let _ = choose_interface(&items, Some([10, 0, 0, 9].into()));
    let accounts: Vec<Account> = items.iter().cloned().map(Account::from).collect();
    for a in &accounts {
        let _ = (a.is_empty_slot(), a.info());
    }
    if let Some(slot) = pick_slot(&accounts) {
        assert!(slot.is_empty_slot(), "picked a named slot");
    }
    for kind in [MediaKind::Cd, MediaKind::Usb] {
        if let Some(i) = choose_device(&items, kind) {
            assert!(i < items.len());
        }
    }
    for (fp, fm) in [(false, false), (true, true)] {
        let _ = insert_body("http://127.0.0.1/x.iso", v, fp, fm);
    }
}

/// BMC bases [`redfish_url_join`] resolves against (its first byte picks one).
const BASES: [&str; 4] =
    ["https://10.0.0.5:8443", "https://10.0.0.5", "https://[fd00::5]:443", "https://bmc-7.example:8443"];

/// The `redfish_url_join` target: every URL a BMC supplies (links, session
/// and `Location` headers, task monitors, action targets) goes through
/// `transport::resolve`. Input: `[base_selector, link…]`. Checks: a resolved
/// URL keeps the base's scheme, host and port and carries no user info
/// (never widens where a request goes), and resolving it again gives the
/// same URL (the join is idempotent, so what was checked is what is sent).
pub fn redfish_url_join(data: &[u8]) {
    let [sel, link @ ..] = data else { return };
    let Ok(link) = std::str::from_utf8(link) else { return };
    let base = BASES[usize::from(*sel) % BASES.len()];
    let Ok(url) = crate::transport::resolve(base, link) else { return };
    let b = url::Url::parse(base).expect("a valid base");
    assert_eq!(url.scheme(), b.scheme(), "{link:?} -> {url}");
    assert_eq!(url.host(), b.host(), "{link:?} -> {url}");
    assert_eq!(url.port_or_known_default(), b.port_or_known_default(), "{link:?} -> {url}");
    assert!(url.username().is_empty() && url.password().is_none(), "{link:?} -> {url}");
    let again = crate::transport::resolve(base, url.as_str())
        .unwrap_or_else(|e| panic!("{link:?} -> {url} is refused when resolved again: {e}"));
    assert_eq!(again, url, "resolving {link:?} is not idempotent");
}
