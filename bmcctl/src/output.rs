//! How replies, results, events, fleet runs and machines' observed state
//! read on a terminal (`--json` prints the wire types, and a fleet run's
//! [`Outcome`] lines, instead).

use crate::cmd::fleet::{Outcome, Schedule, Stopped, Verdict};
use crate::progress::paint;
use bmcfleet_schema::state::{MachineEvent, MachineEventKind, MachineState};
use bmcfleet_schema::{ActionData, BatchResult, Event, EventKind, Machine, PowerState, Reply};

fn data_text(d: &ActionData) -> String {
    match d {
        ActionData::PowerState(s) => format!("power={}", serde_json::to_value(s).unwrap_or_default().as_str().unwrap_or("?")),
        // One row each under the action's line (the JSON is in --json).
        ActionData::EventLog(log) => {
            let mut out = format!("{} of {} entries", log.entries.len(), log.total.map(|t| t.to_string()).unwrap_or_else(|| "?".into()));
            for e in &log.entries {
                let sev = e.severity.map(|h| name(&h)).unwrap_or_else(|| "-".into());
                let what = [e.log.as_deref(), e.kind.as_deref(), e.sensor.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" ");
                out.push_str(&format!("\n       {:<6} {:<25} {:<8} {what}: {}", e.id, e.time.as_deref().unwrap_or("-"), sev, e.message));
            }
            out
        }
        ActionData::Sensors(sensors) => {
            let mut out = format!("{} sensors", sensors.len());
            for r in sensors {
                let value = r.value.map(|v| format!("{v} {}", r.unit.as_deref().unwrap_or(""))).unwrap_or_else(|| "-".into());
                let health = r.health.map(|h| name(&h)).unwrap_or_else(|| "-".into());
                out.push_str(&format!("\n       {:<24} {:<12} {:<14} {health}", r.name, name(&r.kind), value.trim_end()));
            }
            out
        }
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

/// A wire enum's snake_case name.
fn name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "?".into())
}

/// A finished batch: one line, then one line per action.
pub fn result(r: &BatchResult) {
    println!("batch {} on {}: {:?} (worker {}, delivery {})", r.id, r.bmc, r.state, r.worker, r.deliveries);
    for a in &r.results {
        let detail = match (&a.error, &a.data) {
            (Some(e), _) => format!("{}: {}", e.code, e.message),
            (None, Some(d)) => data_text(d),
            (None, None) => String::new(),
        };
        println!(
            "  {:>2} {:<22} {:<5} {:>6}ms {:<8} {}",
            a.index,
            a.action,
            if a.is_ok() { "ok" } else { "ERROR" },
            a.duration_ms,
            a.provider.as_deref().unwrap_or("-"),
            detail
        );
    }
}

/// Any gateway reply.
pub fn reply(reply: &Reply) {
    match reply {
        Reply::Accepted(a) => println!(
            "accepted {}{} (stream sequence {}, subject {})",
            a.id,
            if a.duplicate { " (already known: not queued again)" } else { "" },
            a.stream_sequence,
            a.subject
        ),
        Reply::Result(r) => result(r),
        Reply::Status(s) => {
            println!("batch {} on {}: {:?}, {} of {} actions done", s.id, s.bmc, s.state, s.results.len(), s.actions.len());
            if let Some(r) = &s.result {
                result(r);
            }
        }
        Reply::Cancelled { id, state } => println!("cancel requested for {id}: now {state:?}"),
        Reply::Error(e) => eprintln!("error: {}: {}", e.code, e.message),
    }
}

/// One event, as a line (or the result table when the batch finished).
pub fn event(ev: &Event) {
    match &ev.event {
        EventKind::ActionStarted { index, action } => println!("{} #{index} {action} started", ev.batch),
        EventKind::ActionFinished { result } => println!(
            "{} #{} {} {}{}",
            ev.batch,
            result.index,
            result.action,
            if result.is_ok() { "ok" } else { "failed" },
            result.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
        ),
        EventKind::ActionProgress { index, action, percent, state } => {
            let pct = percent.map(|p| format!("{p}%")).unwrap_or_else(|| "?%".into());
            println!("{} #{index} {action} {pct} {}", ev.batch, state.as_deref().unwrap_or("-"))
        }
        EventKind::BatchFinished { result: r } => result(r),
    }
}

/// A moment (ms since the epoch) as RFC 3339 in UTC.
pub fn at(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| ms.to_string())
}

/// How long ago `then` was, at `now` (ms since the epoch): `12s ago`,
/// `3m ago`, `5h ago`, `2d ago`; `never` without a moment. A moment ahead
/// of this clock (another host's) reads `0s ago`.
pub fn ago(then: Option<u64>, now: u64) -> String {
    let Some(then) = then else { return "never".into() };
    let s = now.saturating_sub(then) / 1000;
    match s {
        0..=59 => format!("{s}s ago"),
        60..=3_599 => format!("{}m ago", s / 60),
        3_600..=86_399 => format!("{}h ago", s / 3_600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// A power state as the wire spells it.
fn power_name(p: PowerState) -> &'static str {
    match p {
        PowerState::On => "on",
        PowerState::Off => "off",
        PowerState::Unknown => "unknown",
    }
}

/// The POWER, CONTACTABLE and LAST SEEN cells of a machine (`-` without a
/// state record: no worker polled it yet).
fn state_cells(state: Option<&MachineState>, now: u64) -> [String; 3] {
    let Some(s) = state else { return ["-".into(), "-".into(), "-".into()] };
    let power = s.power.map_or("-", power_name).to_owned();
    let contactable = match (s.contactable, s.error_code) {
        (true, _) => "yes".to_owned(),
        (false, Some(code)) => format!("no ({code})"),
        (false, None) => "no".to_owned(),
    };
    [power, contactable, ago(s.last_seen_ms, now)]
}

/// `bmcctl machine ls`: a row per machine, its record and its observed state.
pub fn machine_table(rows: &[(&Machine, Option<&MachineState>)], now: u64) -> String {
    const HEAD: [&str; 8] = ["NAME", "ADDRESS", "PROTOCOL", "TENANT", "POWER", "CONTACTABLE", "LAST SEEN", "LABELS"];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|(m, state)| {
            let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let [power, contactable, seen] = state_cells(*state, now);
            [m.name.clone(), m.address.to_string(), m.protocol.to_string(), m.tenant.clone(), power, contactable, seen, labels.join(",")]
        })
        .collect();
    let mut width = HEAD.map(str::len);
    for row in &cells {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |row: [&str; 8]| {
        let mut out = String::new();
        for (cell, w) in row.iter().zip(width) {
            out.push_str(&format!("{cell:<w$}  "));
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = line(HEAD);
    for row in &cells {
        out.push_str(&line(row.each_ref().map(String::as_str)));
    }
    out
}

/// What a machine event says beyond its kind: `off→on`, `timeout: <reason>`,
/// `firmware_version 1.0→2.0` (`-` for a value that was or became absent).
pub fn machine_event_detail(kind: &MachineEventKind) -> String {
    match kind {
        MachineEventKind::PowerChanged { from, to } => format!("{}→{}", from.map_or("-", power_name), power_name(*to)),
        MachineEventKind::Unreachable { code, reason } if reason.is_empty() => code.to_string(),
        MachineEventKind::Unreachable { code, reason } => format!("{code}: {}", reason.replace(['\n', '\r'], " ")),
        MachineEventKind::Recovered => String::new(),
        MachineEventKind::InventoryChanged { changes } => changes
            .iter()
            .map(|c| format!("{} {}→{}", c.field, c.from.as_deref().unwrap_or("-"), c.to.as_deref().unwrap_or("-")))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// `bmcctl machine watch`: one event as a line (time, machine, event, detail).
pub fn machine_event(e: &MachineEvent) -> String {
    let line = format!("{}  {:<24} {:<17} {}", at(e.at_ms), e.machine, e.event.name(), machine_event_detail(&e.event));
    line.trim_end().to_owned()
}

/// The ANSI colour of a verdict.
fn verdict_color(v: Verdict) -> &'static str {
    match v {
        Verdict::Succeeded => "32",
        Verdict::Failed | Verdict::Refused | Verdict::Unknown => "31",
        Verdict::Cancelled | Verdict::NotStarted | Verdict::Running => "33",
    }
}

/// `812ms`, `12.3s`, `2m05s`.
fn elapsed(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{:.1}s", ms as f64 / 1000.0),
        _ => format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// The columns of one machine's row: machine, result, time, failed action,
/// error code, detail (the error's message, the data read, or the batch id
/// of a batch still running or lost track of).
fn fleet_row(o: &Outcome) -> [String; 6] {
    let failed = o.failed_action.as_ref().map(|f| format!("#{} {}", f.index, f.action)).unwrap_or_else(|| "-".into());
    let code = o.error.as_ref().map(|e| e.code.to_string()).unwrap_or_else(|| "-".into());
    let detail = match (o.result, &o.error, o.batch) {
        (Verdict::Running, _, Some(id)) => format!("batch {id} still running (bmcctl status {id})"),
        (Verdict::Unknown, Some(e), Some(id)) => format!("{} (bmcctl status {id})", e.message),
        (_, Some(e), _) => e.message.clone(),
        _ => o.results.iter().filter_map(|a| a.data.as_ref()).map(data_text).collect::<Vec<_>>().join("; "),
    };
    let time = o.elapsed_ms.map(elapsed).unwrap_or_else(|| "-".into());
    [o.machine.clone(), o.result.as_str().to_owned(), time, failed, code, detail.replace(['\n', '\r'], " ")]
}

/// One machine as a line of its own (failures as they happen, above the progress line).
pub fn fleet_row_line(o: &Outcome, color: bool) -> String {
    let [machine, result, time, failed, code, detail] = fleet_row(o);
    let result = paint(&result, verdict_color(o.result), color);
    format!("{machine}: {result} after {time}: {failed} {code}: {detail}")
}

/// The end of a fleet run: a row per machine, the totals, why it stopped.
pub fn fleet_summary(outcomes: &[Outcome], stopped: Option<Stopped>, schedule: Schedule, color: bool) -> String {
    const HEAD: [&str; 6] = ["MACHINE", "RESULT", "TIME", "FAILED ACTION", "ERROR", "DETAIL"];
    let rows: Vec<[String; 6]> = outcomes.iter().map(fleet_row).collect();
    let mut width = HEAD.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6], verdict: Option<Verdict>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 5 {
                out.push_str(cell);
                break;
            }
            let padded = format!("{cell:<w$}  ", w = width[i]);
            match (i, verdict) {
                (1, Some(v)) => out.push_str(&paint(&padded, verdict_color(v), color)),
                _ => out.push_str(&padded),
            }
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = line(HEAD, None);
    for (row, o) in rows.iter().zip(outcomes) {
        out.push_str(&line(row.each_ref().map(String::as_str), Some(o.result)));
    }
    let counts: Vec<String> = Verdict::ALL
        .iter()
        .filter_map(|v| {
            let n = outcomes.iter().filter(|o| o.result == *v).count();
            (n > 0).then(|| format!("{n} {}", v.as_str()))
        })
        .collect();
    out.push_str(&format!("{} machine{}: {}\n", outcomes.len(), if outcomes.len() == 1 { "" } else { "s" }, counts.join(", ")));
    if let Some(why) = stopped {
        out.push_str(&format!("{}\n", stopped_text(why, schedule)));
    }
    out
}

/// Why a run stopped, as the summary's last line.
fn stopped_text(why: Stopped, schedule: Schedule) -> String {
    match why {
        Stopped::Canary { failed, canaries } => {
            format!("Stopped: {failed} of {canaries} canary machine{} did not succeed (--canary {}); no other machine was started.", if canaries == 1 { "" } else { "s" }, schedule.canary)
        }
        Stopped::Failures(k) => format!("Stopped after {k} failure{} (--stop-after-failures {k}): no further machine was started.", if k == 1 { "" } else { "s" }),
        Stopped::Interrupted => "Interrupted: no further machine was started.".into(),
    }
}

/// The moment a run stops starting machines (on stderr, as it happens).
pub fn stopping(why: Stopped, schedule: Schedule) -> String {
    match why {
        Stopped::Canary { failed, canaries } => {
            format!("stopping: {failed} of {canaries} canary machine(s) did not succeed (--canary {}); no other machine starts", schedule.canary)
        }
        Stopped::Failures(k) => format!("stopping: {k} machine(s) failed (--stop-after-failures {k}); no further machine starts, running ones finish"),
        Stopped::Interrupted => "interrupted: no further machine starts; waiting for the running batches (Ctrl-C again to leave them running)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::{ActionResult, BatchState, ErrorBody, ErrorCode, PowerState};
    use std::time::Duration;

    #[test]
    fn the_fleet_summary_has_a_row_per_machine_the_totals_and_the_reason_it_stopped() {
        let result = |state, action: ActionResult| BatchResult {
            id: ulid::Ulid::new(),
            bmc: "m".into(),
            state,
            results: vec![action],
            worker: "w0".into(),
            deliveries: 1,
            admitted_at_ms: 1,
            finished_at_ms: 2,
        };
        let ok = ActionResult::ok(0, "power_status", Some("sim".into()), Some(ActionData::PowerState(PowerState::On)), 3);
        let bad = ActionResult::err(0, "power_status", None, ErrorBody::new(ErrorCode::UnknownCredential, "no credential `c`\nanywhere"), 3);
        let outcomes = [
            Outcome::finished("web-1", result(BatchState::Succeeded, ok), Duration::from_millis(812)),
            Outcome::finished("web-22", result(BatchState::Failed, bad), Duration::from_millis(12_340)),
            Outcome::not_started("web-3"),
        ];
        let schedule = Schedule { max_parallel: 16, canary: 0, stop_after_failures: Some(1) };
        let text = fleet_summary(&outcomes, Some(Stopped::Failures(1)), schedule, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "MACHINE  RESULT       TIME   FAILED ACTION    ERROR               DETAIL");
        assert_eq!(lines[1], "web-1    succeeded    812ms  -                -                   power=on");
        assert_eq!(lines[2], "web-22   failed       12.3s  #0 power_status  unknown_credential  no credential `c` anywhere");
        assert_eq!(lines[3], "web-3    not started  -      -                -");
        assert_eq!(lines[4], "3 machines: 1 succeeded, 1 failed, 1 not started");
        assert!(lines[5].starts_with("Stopped after 1 failure (--stop-after-failures 1)"), "{text}");
        assert!(!text.contains('\x1b'));
        assert!(fleet_summary(&outcomes, None, schedule, true).contains("\x1b[31mfailed"), "colour on a terminal");
        assert_eq!(elapsed(125_000), "2m05s");
    }

    fn state(power: Option<PowerState>, contactable: bool, last_seen_ms: Option<u64>) -> MachineState {
        MachineState {
            machine: "m".into(),
            tenant: "default".into(),
            power,
            contactable,
            error_code: (!contactable).then_some(ErrorCode::Timeout),
            reason: (!contactable).then(|| "no reply within 900ms".into()),
            last_seen_ms,
            last_changed_ms: 0,
            updated_ms: 0,
            consecutive_failures: u32::from(!contactable),
            provider: Some("sim".into()),
            firmware: None,
            inventory_ms: None,
            worker: "w0".into(),
        }
    }

    #[test]
    fn machine_ls_shows_power_contactable_and_last_seen_or_a_dash() {
        let m = |name: &str, address: &str, labels: &[(&str, &str)]| {
            let mut m = Machine::new(name, address.parse().unwrap(), Default::default(), "c");
            m.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            m
        };
        let (a, b, c, d) = (m("web-1", "10.0.0.1", &[("rack", "12")]), m("web-22", "10.0.0.2", &[]), m("web-3", "10.0.0.3", &[]), m("web-4", "10.0.0.4", &[]));
        let now = 1_700_000_000_000;
        let (up, down, unread) = (state(Some(PowerState::On), true, Some(now - 12_400)), state(Some(PowerState::Off), false, Some(now - 3 * 3_600_000)), state(None, false, None));
        let text = machine_table(&[(&a, Some(&up)), (&b, Some(&down)), (&c, Some(&unread)), (&d, None)], now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "NAME    ADDRESS   PROTOCOL  TENANT   POWER  CONTACTABLE   LAST SEEN  LABELS");
        assert_eq!(lines[1], "web-1   10.0.0.1  auto      default  on     yes           12s ago    rack=12");
        assert_eq!(lines[2], "web-22  10.0.0.2  auto      default  off    no (timeout)  3h ago");
        assert_eq!(lines[3], "web-3   10.0.0.3  auto      default  -      no (timeout)  never");
        assert_eq!(lines[4], "web-4   10.0.0.4  auto      default  -      -             -", "no state record: dashes");
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn relative_times_read_in_the_largest_whole_unit() {
        let now = 10_000_000_000;
        assert_eq!(ago(None, now), "never");
        assert_eq!(ago(Some(now), now), "0s ago");
        assert_eq!(ago(Some(now + 5_000), now), "0s ago", "another host's clock ahead of ours");
        assert_eq!(ago(Some(now - 59_999), now), "59s ago");
        assert_eq!(ago(Some(now - 60_000), now), "1m ago");
        assert_eq!(ago(Some(now - 7_200_000), now), "2h ago");
        assert_eq!(ago(Some(now - 3 * 86_400_000), now), "3d ago");
    }

    #[test]
    fn a_machine_event_is_one_line_time_machine_event_detail() {
        use bmcfleet_schema::state::InventoryChange;
        let at = 1_764_756_902_123;
        let e = |event| MachineEvent { machine: "web-1".into(), at_ms: at, event, state: state(Some(PowerState::On), true, Some(at)) };
        let on = machine_event(&e(MachineEventKind::PowerChanged { from: Some(PowerState::Off), to: PowerState::On }));
        assert_eq!(on, format!("2025-12-03T10:15:02.123Z  web-1{}power_changed     off→on", " ".repeat(20)));
        assert!(machine_event(&e(MachineEventKind::PowerChanged { from: None, to: PowerState::Off })).ends_with("power_changed     -→off"));
        let down = MachineEventKind::Unreachable { code: ErrorCode::Timeout, reason: "no reply\nwithin 900ms".into() };
        assert!(machine_event(&e(down)).ends_with("unreachable       timeout: no reply within 900ms"));
        assert!(machine_event(&e(MachineEventKind::Recovered)).ends_with("web-1                    recovered"));
        let changes = vec![
            InventoryChange { field: "firmware_version".into(), from: Some("1.0".into()), to: Some("2.0".into()) },
            InventoryChange { field: "extra.psus".into(), from: None, to: Some("2".into()) },
        ];
        assert!(machine_event(&e(MachineEventKind::InventoryChanged { changes })).ends_with("inventory_changed firmware_version 1.0→2.0, extra.psus -→2"));
    }

    #[test]
    fn event_logs_and_sensors_read_as_rows() {
        use bmcfleet_schema::{EventLog, EventLogEntry, Health, SensorKind, SensorReading, Thresholds};
        let log = ActionData::EventLog(EventLog {
            total: Some(7),
            entries: vec![EventLogEntry {
                id: "0042".into(),
                time: Some("2024-01-01T00:00:00Z".into()),
                severity: Some(Health::Critical),
                sensor: Some("0x30".into()),
                kind: Some("Temperature".into()),
                message: "Upper Critical going high (asserted)".into(),
                ..EventLogEntry::default()
            }],
        });
        let text = data_text(&log);
        assert!(text.starts_with("1 of 7 entries\n"), "{text}");
        assert!(text.contains("0042") && text.contains("critical") && text.contains("Temperature 0x30: Upper Critical going high (asserted)"), "{text}");
        let sensors = ActionData::Sensors(vec![SensorReading {
            name: "Fan 1".into(),
            kind: SensorKind::Fan,
            value: Some(750.0),
            unit: Some("RPM".into()),
            thresholds: Thresholds::default(),
            health: Some(Health::Warning),
        }]);
        let text = data_text(&sensors);
        assert!(text.starts_with("1 sensors\n") && text.contains("Fan 1") && text.contains("fan") && text.contains("750 RPM") && text.ends_with("warning"), "{text}");
    }
}
