//! Human text for the result kinds the table formats had no rows for
//! (they printed raw JSON): boot device, users, network source, raw
//! replies, BIOS, secure boot, firmware updates, identify light, power
//! readings and limits, the BMC clock, "no change". The JSON is
//! still what `--output json` prints.

use bmcfleet_schema::{ActionData, BootDeviceRequest, NetworkSourceOp, UserInfo};

/// A wire enum's snake_case name.
fn name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "?".into())
}

/// A value, or `-` when the BMC did not give it.
fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A JSON value as a person writes it: strings unquoted.
fn value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn boot(b: &BootDeviceRequest) -> String {
    format!(
        "boot={} {} {}",
        name(&b.device),
        if b.persistent { "persistent" } else { "once" },
        if b.efi { "uefi" } else { "legacy" }
    )
}

fn users(list: &[UserInfo]) -> String {
    let mut out = format!("{} users", list.len());
    for u in list {
        let role = u.role.as_ref().map(name).unwrap_or_else(|| "-".into());
        let state = if u.enabled { "enabled" } else { "disabled" };
        out.push_str(&format!("\n       {:<4} {:<20} {role:<14} {state}", u.id, u.name));
    }
    out
}

/// The text of `d`, for every kind `output::data_text` does not lay out itself.
pub fn text(d: &ActionData, wide: bool) -> String {
    match d {
        ActionData::PowerState(s) => format!("power={}", name(s)),
        ActionData::BootDevice(b) => boot(b),
        ActionData::BootDevicePending(b) => format!("{} (pending: applies at the next reset)", boot(b)),
        ActionData::Users(list) => users(list),
        ActionData::NetworkSource(NetworkSourceOp::Get) => "network=get".into(),
        ActionData::NetworkSource(NetworkSourceOp::Dhcp) => "network=dhcp".into(),
        ActionData::NetworkSource(NetworkSourceOp::Static(s)) => format!(
            "network=static address {} netmask {} gateway {}",
            s.address,
            s.netmask,
            s.gateway.map_or_else(|| "-".to_owned(), |g| g.to_string())
        ),
        ActionData::Raw(r) => {
            let mut out = format!("status {}", r.status);
            if !r.data.is_empty() {
                let hex: Vec<String> = r.data.iter().map(|b| format!("{b:02x}")).collect();
                out.push_str(&format!(", data {}", hex.join(" ")));
            }
            if let Some(body) = &r.body {
                let text = body.to_string();
                let cut = 200;
                if wide || text.chars().count() <= cut {
                    out.push_str(&format!(", body {text}"));
                } else {
                    let head: String = text.chars().take(cut).collect();
                    out.push_str(&format!(", body {head}… (--output wide or json: all of it)"));
                }
            }
            out
        }
        ActionData::Bios(b) => {
            let mut out = format!("{} attributes, {} pending", b.attributes.len(), b.pending.len());
            for (k, v) in &b.attributes {
                let pending = b.pending.get(k).map(|p| format!(" (pending: {})", value(p))).unwrap_or_default();
                out.push_str(&format!("\n       {k:<32} {}{pending}", value(v)));
            }
            for (k, p) in b.pending.iter().filter(|(k, _)| !b.attributes.contains_key(*k)) {
                out.push_str(&format!("\n       {k:<32} - (pending: {})", value(p)));
            }
            if wide {
                for a in &b.registry {
                    let allowed =
                        if a.allowed.is_empty() { String::new() } else { format!(" {}", a.allowed.join("|")) };
                    let ro = if a.read_only { " read-only" } else { "" };
                    out.push_str(&format!("\n       registry {:<24} {}{ro}{allowed}", a.name, a.kind));
                }
            }
            out
        }
        ActionData::BiosPending(p) => {
            let when = p.apply_time.as_deref().unwrap_or("at the next reset");
            let mut out = format!("{} attributes pending ({when})", p.attributes.len());
            for (k, v) in &p.attributes {
                out.push_str(&format!("\n       {k:<32} {}", value(v)));
            }
            out
        }
        ActionData::SecureBoot(s) => format!(
            "secure_boot={} current_boot={} mode={}",
            if s.enabled { "enabled" } else { "disabled" },
            s.current_boot.as_deref().unwrap_or("-"),
            s.mode.as_deref().unwrap_or("-")
        ),
        ActionData::FirmwareUpdate(f) => {
            let mut out = format!("firmware update {}", f.state);
            if let Some(p) = f.percent {
                out.push_str(&format!(" {p}%"));
            }
            if let Some(t) = &f.task {
                out.push_str(&format!(" (task {t})"));
            }
            if f.resumed {
                out.push_str(" (resumed)");
            }
            for m in &f.messages {
                out.push_str(&format!("\n       {m}"));
            }
            out
        }
        ActionData::BmcClock(c) => format!("time={} drift={} ms from {}", c.time, c.drift_ms, c.source),
        ActionData::Ntp(n) => format!(
            "ntp={} servers={} from {}",
            n.enabled.map(|e| if e { "enabled" } else { "disabled" }).unwrap_or("-"),
            if n.servers.is_empty() { "-".to_owned() } else { n.servers.join(",") },
            n.source
        ),
        ActionData::BmcCertificate(c) => format!(
            "subject={} issuer={} not_before={} not_after={} sha256={}{}",
            c.subject,
            c.issuer,
            c.not_before,
            c.not_after,
            c.sha256,
            c.uri.as_deref().map(|u| format!(" at {u}")).unwrap_or_default()
        ),
        ActionData::PowerReading(r) => format!(
            "{} W (min {} max {} average {} over {}) from {}",
            r.watts,
            or_dash(r.min_watts),
            or_dash(r.max_watts),
            or_dash(r.average_watts),
            r.interval_ms.map(|ms| format!("{} s", ms as f64 / 1000.0)).unwrap_or_else(|| "-".into()),
            r.source
        ),
        ActionData::PowerLimit(l) => format!(
            "limit={} active={} allowed={}..{} from {}",
            l.watts.map(|w| format!("{w} W")).unwrap_or_else(|| "none".into()),
            or_dash(l.active),
            or_dash(l.allowed_min),
            or_dash(l.allowed_max),
            l.source
        ),
        ActionData::Identify(i) => {
            let light = i.light.map(|l| name(&l)).unwrap_or_else(|| "unknown".into());
            let timed = if i.timed { " (timed)" } else { "" };
            let note = i.note.as_deref().map(|n| format!(": {n}")).unwrap_or_default();
            format!("identify={light}{timed} from {}{note}", i.source)
        }
        ActionData::NoChange(why) => format!("no change: {}", name(why).replace('_', " ")),
        // Laid out by output::data_text (never reached from there).
        ActionData::Inventory(_) | ActionData::EventLog(_) | ActionData::Sensors(_) => {
            serde_json::to_string(d).unwrap_or_default()
        }
    }
}

/// The target a batch result names: a registered machine by its name
/// (its key is `m-<name>`), an ad hoc BMC by its key.
pub fn target(bmc: &str) -> String {
    match bmc.strip_prefix("m-") {
        Some(name) => name.to_owned(),
        None => bmc.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn data(v: serde_json::Value) -> ActionData {
        serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{v}: {e}"))
    }

    #[test]
    fn every_result_kind_reads_as_text_not_json() {
        for (v, want) in [
            (json!({"power_state": "on"}), "power=on"),
            (json!({"boot_device": {"device": "pxe", "persistent": false, "efi": true}}), "boot=pxe once uefi"),
            (
                json!({"boot_device_pending": {"device": "disk", "persistent": true, "efi": false}}),
                "boot=disk persistent legacy (pending: applies at the next reset)",
            ),
            (
                json!({"users": [{"id": "2", "name": "admin", "role": "admin", "enabled": true}]}),
                "1 users\n       2    admin                admin          enabled",
            ),
            (json!({"network_source": "dhcp"}), "network=dhcp"),
            (
                json!({"network_source": {"static": {"address": "10.0.0.5", "netmask": "255.255.255.0"}}}),
                "network=static address 10.0.0.5 netmask 255.255.255.0 gateway -",
            ),
            (json!({"raw": {"status": 0, "data": [1, 2, 255]}}), "status 0, data 01 02 ff"),
            (
                json!({"bios": {"attributes": {"BootMode": "Uefi"}, "pending": {"BootMode": "Bios"}}}),
                "1 attributes, 1 pending\n       BootMode                         Uefi (pending: Bios)",
            ),
            (
                json!({"bios_pending": {"attributes": {"ProcTurbo": true}, "apply_time": "OnReset"}}),
                "1 attributes pending (OnReset)\n       ProcTurbo                        true",
            ),
            (
                json!({"secure_boot": {"enabled": true, "current_boot": "Enabled", "mode": "DeployedMode"}}),
                "secure_boot=enabled current_boot=Enabled mode=DeployedMode",
            ),
            (
                json!({"firmware_update": {"state": "Completed", "percent": 100, "task": "/redfish/v1/TaskService/Tasks/1"}}),
                "firmware update Completed 100% (task /redfish/v1/TaskService/Tasks/1)",
            ),
            (
                json!({"identify": {"light": "blink", "timed": true, "source": "ipmi"}}),
                "identify=blink (timed) from ipmi",
            ),
            (
                json!({"power_reading": {"watts": 212.0, "min_watts": 180.0, "interval_ms": 60000, "source": "dcmi"}}),
                "212 W (min 180 max - average - over 60 s) from dcmi",
            ),
            (
                json!({"power_limit": {"watts": 450, "active": true, "allowed_min": 100, "source": "redfish"}}),
                "limit=450 W active=true allowed=100..- from redfish",
            ),
            (
                json!({"bmc_clock": {"time": "2026-12-06T06:00:00Z", "drift_ms": -1200, "source": "sel_time"}}),
                "time=2026-12-06T06:00:00Z drift=-1200 ms from sel_time",
            ),
            (json!({"no_change": "not_inserted"}), "no change: not inserted"),
        ] {
            let d = data(v);
            let got = text(&d, false);
            assert_eq!(got, want);
            assert_eq!(crate::output::data_text_for_tests(&d), want, "the table uses it");
        }
    }

    #[test]
    fn a_machine_s_key_reads_as_its_name() {
        assert_eq!(target("m-rf-a"), "rf-a");
        assert_eq!(target("v4-10-0-0-1"), "v4-10-0-0-1");
    }
}
