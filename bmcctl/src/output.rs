//! How replies, results, events, fleet runs and machines' observed state
//! read, in each [`Format`] of `--output`: `table` (the default), `wide`
//! (the same with more columns: times, batch ids, workers, last errors),
//! `json` (the wire types, and a fleet run's [`Outcome`] lines).
//!
//! Functions return text (tested here) or print it; colour only where a
//! caller says so ([`crate::progress::color`]: a terminal and no `NO_COLOR`).

use crate::cmd::fleet::{Outcome, Schedule, Stopped, Verdict};
use crate::progress::paint;
use bmcfleet_schema::audit::AuditRecord;
use bmcfleet_schema::state::{MachineEvent, MachineEventKind, MachineState};
use bmcfleet_schema::{ActionData, BatchResult, Event, EventKind, Machine, PowerState, Reply};

pub mod data;
pub mod error;

/// How a command prints what it has (`--output`; `--json` is `--output json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Human-readable: tables, one line per event.
    #[default]
    Table,
    /// Tables with more columns: times, batch ids, workers, last errors, thresholds.
    Wide,
    /// Machine-readable: one JSON document, or one JSON line per item where the command streams.
    Json,
}

impl Format {
    pub fn is_json(self) -> bool {
        self == Format::Json
    }

    pub fn is_wide(self) -> bool {
        self == Format::Wide
    }
}

/// Rows under a header, each column as wide as its widest cell, two spaces
/// apart; the last column is not padded and no line ends in blanks.
/// `style(row, column, padded cell)` may dress a cell (colour); row 0 is the header.
fn grid<const N: usize>(
    head: [&str; N],
    rows: &[[String; N]],
    style: impl Fn(usize, usize, String) -> String,
) -> String {
    let mut width = head.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |r: usize, cells: [&str; N]| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let padded = if i + 1 == N { (*cell).to_owned() } else { format!("{cell:<w$}  ", w = width[i]) };
            out.push_str(&style(r, i, padded));
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = line(0, head);
    for (r, row) in rows.iter().enumerate() {
        out.push_str(&line(r + 1, row.each_ref().map(String::as_str)));
    }
    out
}

/// A value, or `-` without one.
fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn data_text(d: &ActionData, wide: bool) -> String {
    match d {
        ActionData::PowerState(s) => {
            format!("power={}", serde_json::to_value(s).unwrap_or_default().as_str().unwrap_or("?"))
        }
        // One row each under the action's line (the JSON is in --output json).
        ActionData::EventLog(log) => {
            let mut out = format!(
                "{} of {} entries",
                log.entries.len(),
                log.total.map(|t| t.to_string()).unwrap_or_else(|| "?".into())
            );
            for e in &log.entries {
                let sev = e.severity.map(|h| name(&h)).unwrap_or_else(|| "-".into());
                let what = [e.log.as_deref(), e.kind.as_deref(), e.sensor.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" ");
                out.push_str(&format!(
                    "\n       {:<6} {:<25} {:<8} {what}: {}",
                    e.id,
                    e.time.as_deref().unwrap_or("-"),
                    sev,
                    e.message
                ));
                if let (true, Some(raw)) = (wide, &e.raw) {
                    out.push_str(&format!(" [raw {raw}]"));
                }
            }
            out
        }
        ActionData::Sensors(sensors) => {
            let mut out = format!("{} sensors", sensors.len());
            for r in sensors {
                let value =
                    r.value.map(|v| format!("{v} {}", r.unit.as_deref().unwrap_or(""))).unwrap_or_else(|| "-".into());
                let health = r.health.map(|h| name(&h)).unwrap_or_else(|| "-".into());
                let row = format!("\n       {:<24} {:<12} {:<14} {health:<8}", r.name, name(&r.kind), value.trim_end());
                out.push_str(if wide { &row } else { row.trim_end() });
                if wide {
                    let t = &r.thresholds;
                    out.push_str(&format!(
                        " lower {}/{} upper {}/{} (critical/warning)",
                        or_dash(t.lower_critical),
                        or_dash(t.lower_warning),
                        or_dash(t.upper_critical),
                        or_dash(t.upper_warning)
                    ));
                }
            }
            out
        }
        ActionData::Inventory(inv) if inv.has_components() => component_tables(inv),
        other => data::text(other, wide),
    }
}

/// [`data_text`] in table mode, for the tests of [`data`].
#[cfg(test)]
pub(crate) fn data_text_for_tests(d: &ActionData) -> String {
    data_text(d, false)
}

/// An inventory with typed components: the identity on the action's line,
/// then one table per section (firmware versions included), indented
/// under it. Sections the BMC failed or that were cut say so.
pub fn component_tables(inv: &bmcfleet_schema::Inventory) -> String {
    fn o<T: ToString>(v: &Option<T>) -> String {
        v.as_ref().map_or_else(|| "-".to_owned(), ToString::to_string)
    }
    fn h(v: &Option<bmcfleet_schema::Health>) -> String {
        v.map_or_else(|| "-".to_owned(), |h| name(&h))
    }
    fn table(out: &mut String, title: &str, head: &[&str], rows: Vec<Vec<String>>) {
        if rows.is_empty() {
            return;
        }
        let mut width: Vec<usize> = head.iter().map(|c| c.len()).collect();
        for r in &rows {
            for (w, c) in width.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        out.push_str(&format!("\n     {title}"));
        for r in std::iter::once(head.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>()).chain(rows) {
            let line: Vec<String> = r.iter().zip(&width).map(|(c, w)| format!("{c:<w$}")).collect();
            out.push_str(&format!("\n       {}", line.join("  ").trim_end()));
        }
    }
    let mut out =
        [&inv.manufacturer, &inv.model, &inv.serial].into_iter().flatten().cloned().collect::<Vec<_>>().join(" ");
    if let Some(fw) = &inv.firmware_version {
        out.push_str(&format!(" (BMC firmware {fw})"));
    }
    table(
        &mut out,
        "processors",
        &["ID", "MODEL", "CORES", "THREADS", "MAX MHZ", "HEALTH"],
        inv.processors
            .iter()
            .map(|p| vec![p.id.clone(), o(&p.model), o(&p.cores), o(&p.threads), o(&p.max_speed_mhz), h(&p.health)])
            .collect(),
    );
    table(
        &mut out,
        "memory",
        &["ID", "MIB", "TYPE", "MHZ", "MANUFACTURER", "PART", "SERIAL", "HEALTH"],
        inv.memory
            .iter()
            .map(|m| {
                vec![
                    m.id.clone(),
                    o(&m.capacity_mib),
                    o(&m.memory_type),
                    o(&m.speed_mhz),
                    o(&m.manufacturer),
                    o(&m.part_number),
                    o(&m.serial),
                    h(&m.health),
                ]
            })
            .collect(),
    );
    table(
        &mut out,
        "drives",
        &["ID", "MODEL", "SERIAL", "BYTES", "MEDIA", "PROTOCOL", "FIRMWARE", "HEALTH"],
        inv.drives
            .iter()
            .map(|d| {
                vec![
                    d.id.clone(),
                    o(&d.model),
                    o(&d.serial),
                    o(&d.capacity_bytes),
                    o(&d.media_type),
                    o(&d.protocol),
                    o(&d.firmware_version),
                    h(&d.health),
                ]
            })
            .collect(),
    );
    table(
        &mut out,
        "nics",
        &["ID", "MAC", "MBPS", "LINK", "MODEL", "FIRMWARE", "HEALTH"],
        inv.nics
            .iter()
            .map(|n| {
                vec![
                    n.id.clone(),
                    if n.mac_addresses.is_empty() { "-".into() } else { n.mac_addresses.join(",") },
                    o(&n.speed_mbps),
                    o(&n.link_status),
                    o(&n.model),
                    o(&n.firmware_version),
                    h(&n.health),
                ]
            })
            .collect(),
    );
    table(
        &mut out,
        "power supplies",
        &["ID", "MODEL", "SERIAL", "WATTS", "FIRMWARE", "HEALTH"],
        inv.power_supplies
            .iter()
            .map(|p| {
                vec![p.id.clone(), o(&p.model), o(&p.serial), o(&p.capacity_w), o(&p.firmware_version), h(&p.health)]
            })
            .collect(),
    );
    table(
        &mut out,
        "firmware",
        &["ID", "NAME", "VERSION", "UPDATEABLE"],
        inv.firmware.iter().map(|f| vec![f.id.clone(), o(&f.name), o(&f.version), o(&f.updateable)]).collect(),
    );
    if let Some(fru) = &inv.fru {
        table(
            &mut out,
            "fru",
            &["FIELD", "VALUE"],
            fru.fields().iter().filter_map(|(k, v)| v.as_ref().map(|v| vec![(*k).to_owned(), v.clone()])).collect(),
        );
    }
    let list = |s: &[bmcfleet_schema::components::Section]| s.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ");
    if !inv.unread.is_empty() {
        out.push_str(&format!("\n     unread (the BMC answered an error): {}", list(&inv.unread)));
    }
    if !inv.truncated.is_empty() {
        out.push_str(&format!("\n     truncated (too many to keep): {}", list(&inv.truncated)));
    }
    out
}

/// A wire enum's snake_case name.
fn name<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "?".into())
}

/// A finished batch: one line, then one line per action; `wide` adds when
/// it was admitted and finished and how long it took.
pub fn result_text(r: &BatchResult, wide: bool) -> String {
    let on = data::target(&r.bmc);
    let mut out = format!("batch {} on {on}: {:?} (worker {}, delivery {}", r.id, r.state, r.worker, r.deliveries);
    if wide {
        let took = r.finished_at_ms.saturating_sub(r.admitted_at_ms);
        out.push_str(&format!(
            ", admitted {}, finished {}, {} in all",
            at(r.admitted_at_ms),
            at(r.finished_at_ms),
            elapsed(took)
        ));
    }
    out.push_str(")\n");
    for a in &r.results {
        let detail = match (&a.error, &a.data) {
            (Some(e), _) => format!("{}: {}", e.code, e.message),
            (None, Some(d)) => data_text(d, wide),
            (None, None) => String::new(),
        };
        let line = format!(
            "  {:>2} {:<22} {:<5} {:>6}ms {:<8} {}",
            a.index,
            a.action,
            if a.is_ok() { "ok" } else { "ERROR" },
            a.duration_ms,
            a.provider.as_deref().unwrap_or("-"),
            detail
        );
        out.push_str(line.trim_end());
        out.push('\n');
        if let Some(plan) = &a.plan {
            out.push_str(&plan_text(plan, wide));
        }
    }
    out
}

/// An action's plan under its result line: the change it would send (or
/// `no change`); `wide` adds each request it read to decide.
pub fn plan_text(plan: &bmcfleet_schema::plan::ActionPlan, wide: bool) -> String {
    let mut out = String::new();
    if wide {
        for r in &plan.reads {
            out.push_str(&format!("       read  {}\n", r.describe()));
        }
        if plan.reads_omitted > 0 {
            out.push_str(&format!("       read  … {} more\n", plan.reads_omitted));
        }
    }
    match &plan.change {
        Some(c) => out.push_str(&format!("       would send  {} (not sent)\n", c.describe())),
        None => out.push_str("       would send  nothing: no change\n"),
    }
    out
}

/// A fleet plan's groups: `412 machines: POST …`, the names of small groups.
pub fn plan_groups(groups: &[(String, Vec<String>)]) -> String {
    let mut out = String::from("\nplans:\n");
    for (plan, machines) in groups {
        let n = machines.len();
        let names = if n <= 5 { format!(" ({})", machines.join(", ")) } else { String::new() };
        out.push_str(&format!("  {n} machine{}{names}: {plan}\n", if n == 1 { "" } else { "s" }));
    }
    out
}

/// Any gateway reply, as text.
pub fn reply_text(reply: &Reply, wide: bool) -> String {
    match reply {
        Reply::Accepted(a) => format!(
            "accepted {}{} (stream sequence {}, subject {})\n",
            a.id,
            if a.duplicate { " (already known: not queued again)" } else { "" },
            a.stream_sequence,
            a.subject
        ),
        Reply::Result(r) => result_text(r, wide),
        Reply::Status(s) => {
            let mut out = format!(
                "batch {} on {}: {:?}, {} of {} actions done",
                s.id,
                data::target(&s.bmc),
                s.state,
                s.results.len(),
                s.actions.len()
            );
            if wide {
                out.push_str(&format!(
                    " (tenant {}, worker {}, delivery {}, admitted {}{})",
                    s.tenant,
                    s.worker.as_deref().unwrap_or("-"),
                    s.deliveries,
                    at(s.admitted_at_ms),
                    if s.cancel_requested { ", cancel requested" } else { "" }
                ));
            }
            out.push('\n');
            match &s.result {
                Some(r) => out.push_str(&result_text(r, wide)),
                // Still going: what is done, what runs, what waits.
                None if wide => {
                    for (i, kind) in s.actions.iter().enumerate() {
                        let i = i as u32;
                        let now = match s.results.iter().find(|a| a.index == i) {
                            Some(a) if a.is_ok() => "ok".to_owned(),
                            Some(a) => {
                                format!("ERROR {}", a.error.as_ref().map(|e| e.code.to_string()).unwrap_or_default())
                            }
                            None if s.in_progress == Some(i) => "running".to_owned(),
                            None => "pending".to_owned(),
                        };
                        out.push_str(&format!("  {i:>2} {kind:<22} {now}\n"));
                    }
                }
                None => {}
            }
            out
        }
        Reply::Cancelled { id, state } => format!("cancel requested for {id}: now {state:?}\n"),
        Reply::Error(e) => format!("error: {}: {}\n", e.code, e.message),
        Reply::Rollout(v) => crate::cmd::rollout::view_text(v, wide),
        Reply::Rollouts { rollouts } => crate::cmd::rollout::list_text(rollouts),
        Reply::Discovery(r) => {
            let mut out = format!("{}\n", crate::cmd::discover::summary(r, discover_machines(r)));
            for f in &r.found {
                out.push_str(&format!("  {} {} {}\n", f.address, f.port, f.protocol.as_str()));
            }
            out
        }
        Reply::ConsoleLog(page) => {
            format!(
                "console log of {}: {} entries{}\n",
                page.machine,
                page.entries.len(),
                if page.more { ", more" } else { "" }
            )
        }
    }
}

fn discover_machines(r: &bmcfleet_schema::discover::DiscoverReport) -> usize {
    bmcfleet_schema::discover::proposals(&r.found, "-").len()
}

/// Any gateway reply (an error on stderr).
pub fn reply(reply: &Reply, wide: bool) {
    let text = reply_text(reply, wide);
    match reply {
        Reply::Error(_) => eprint!("{text}"),
        _ => print!("{text}"),
    }
}

/// One event, as a line (or the result table when the batch finished);
/// `wide` puts the moment first.
pub fn event_text(ev: &Event, wide: bool) -> String {
    let text = match &ev.event {
        EventKind::ActionStarted { index, action } => format!("{} #{index} {action} started\n", ev.batch),
        EventKind::ActionFinished { result } => format!(
            "{} #{} {} {}{}\n",
            ev.batch,
            result.index,
            result.action,
            if result.is_ok() { "ok" } else { "failed" },
            result.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default()
        ),
        EventKind::ActionProgress { index, action, percent, state } => {
            let pct = percent.map(|p| format!("{p}%")).unwrap_or_else(|| "?%".into());
            format!("{} #{index} {action} {pct} {}\n", ev.batch, state.as_deref().unwrap_or("-"))
        }
        EventKind::BatchFinished { result: r } => result_text(r, wide),
    };
    if wide {
        format!("{}  {text}", at(ev.at_ms))
    } else {
        text
    }
}

/// One audit record: when, then who did what; `wide` adds a registry change's record.
pub fn audit_line(r: &AuditRecord, wide: bool) -> String {
    let mut line = format!("{}  {}", at(r.at_ms), r.describe());
    if let (true, bmcfleet_schema::audit::AuditEvent::MachinePut { record, .. }) = (wide, &r.what) {
        line.push_str(&format!(": {record}"));
    }
    line
}

/// A moment (ms since the epoch) as RFC 3339 in UTC, fixed width
/// (milliseconds always: `2026-12-06T05:01:12.000Z`), so columns line up.
pub fn at(ms: u64) -> String {
    match time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000) {
        Ok(t) => format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.millisecond()
        ),
        Err(_) => ms.to_string(),
    }
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
/// state record: no worker polled it yet). A stale record (older than its
/// poll interval plus the grace) is CONTACTABLE `stale`; the power of a
/// machine not contactable, or stale, is `unknown`.
fn state_cells(state: Option<&MachineState>, now: u64) -> [String; 3] {
    let Some(s) = state else { return ["-".into(), "-".into(), "-".into()] };
    let power = s.power_now(now).map_or("-", power_name).to_owned();
    let stale = s.freshness(now) == bmcfleet_schema::state::Freshness::Stale;
    let contactable = match (s.contactable, s.error_code) {
        _ if stale => "stale".to_owned(),
        (true, _) => "yes".to_owned(),
        (false, Some(code)) => format!("no ({code})"),
        (false, None) => "no".to_owned(),
    };
    [power, contactable, ago(s.last_seen_ms, now)]
}

/// The HEALTH cell: the last verdict (`ok`, `warning`, `critical`) while
/// the machine answers and its record is current; `unknown` otherwise
/// (never the last verdict as if current); `-` when never checked.
pub fn health_cell(state: Option<&MachineState>, now: u64) -> &'static str {
    let Some(s) = state else { return "-" };
    let Some(h) = &s.health else { return "-" };
    if !s.contactable || s.freshness(now) == bmcfleet_schema::state::Freshness::Stale {
        return "unknown";
    }
    h.status.as_str()
}

/// `bmcctl machine ls`: a row per machine, its record and its observed
/// state with its health verdict; `wide` adds when it last changed, failed
/// polls in a row, the provider, firmware, power draw and clock drift,
/// worker and credential, the last error and the health verdict's reasons.
pub fn machine_table(rows: &[(&Machine, Option<&MachineState>)], now: u64, wide: bool) -> String {
    if wide {
        const HEAD: [&str; 19] = [
            "NAME",
            "ADDRESS",
            "PROTOCOL",
            "TENANT",
            "POWER",
            "CONTACTABLE",
            "LAST SEEN",
            "HEALTH",
            "LAST CHANGED",
            "FAILURES",
            "PROVIDER",
            "FIRMWARE",
            "WATTS",
            "CLOCK DRIFT",
            "WORKER",
            "CREDENTIALS",
            "LABELS",
            "LAST ERROR",
            "HEALTH REASONS",
        ];
        let cells: Vec<[String; 19]> = rows
            .iter()
            .map(|(m, state)| {
                let [power, contactable, seen] = state_cells(*state, now);
                let s = *state;
                let changed = s.map(|s| ago(Some(s.last_changed_ms), now)).unwrap_or_else(|| "-".into());
                let error = s.and_then(|s| s.reason.as_deref()).map(|r| r.replace(['\n', '\r'], " "));
                let reasons = s
                    .and_then(|s| s.health.as_ref())
                    .filter(|h| !h.reasons.is_empty())
                    .map(|h| h.reasons.join("; ").replace(['\n', '\r'], " "));
                let watts = s.and_then(|s| s.power_watts).map(|w| format!("{w:.0}"));
                let drift = s.and_then(|s| s.clock_drift_ms).map(|d| format!("{:+.1}s", d as f64 / 1000.0));
                [
                    m.name.clone(),
                    m.address.to_string(),
                    m.protocol.to_string(),
                    m.tenant.clone(),
                    power,
                    contactable,
                    seen,
                    health_cell(s, now).to_owned(),
                    changed,
                    or_dash(s.map(|s| s.consecutive_failures)),
                    or_dash(s.and_then(|s| s.provider.as_deref())),
                    or_dash(s.and_then(|s| s.firmware.as_deref())),
                    or_dash(watts),
                    or_dash(drift),
                    or_dash(s.map(|s| s.worker.as_str())),
                    m.credentials.clone(),
                    labels(m),
                    or_dash(error),
                    or_dash(reasons),
                ]
            })
            .collect();
        return grid(HEAD, &cells, |_, _, c| c);
    }
    const HEAD: [&str; 9] =
        ["NAME", "ADDRESS", "PROTOCOL", "TENANT", "POWER", "CONTACTABLE", "LAST SEEN", "HEALTH", "LABELS"];
    let cells: Vec<[String; 9]> = rows
        .iter()
        .map(|(m, state)| {
            let [power, contactable, seen] = state_cells(*state, now);
            [
                m.name.clone(),
                m.address.to_string(),
                m.protocol.to_string(),
                m.tenant.clone(),
                power,
                contactable,
                seen,
                health_cell(*state, now).to_owned(),
                labels(m),
            ]
        })
        .collect();
    grid(HEAD, &cells, |_, _, c| c)
}

/// A machine's labels, `k=v,k=v`.
fn labels(m: &Machine) -> String {
    m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
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
        MachineEventKind::HealthChanged { from, to, reasons } => {
            let change = format!("{}→{}", from.map_or("-", |h| h.as_str()), to.as_str());
            match reasons.is_empty() {
                true => change,
                false => format!("{change}: {}", reasons.join("; ").replace(['\n', '\r'], " ")),
            }
        }
    }
}

/// `bmcctl machine watch`: one event as a line (time, machine, event,
/// detail); `wide` adds the tenant, the worker that saw it and its provider.
pub fn machine_event(e: &MachineEvent, wide: bool) -> String {
    let line = format!("{}  {:<24} {:<17} {}", at(e.at_ms), e.machine, e.event.name(), machine_event_detail(&e.event));
    let line = line.trim_end();
    if wide {
        let s = &e.state;
        format!("{line} (tenant {}, worker {}, provider {})", s.tenant, s.worker, s.provider.as_deref().unwrap_or("-"))
    } else {
        line.to_owned()
    }
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
fn fleet_row(o: &Outcome, wide: bool) -> [String; 6] {
    let failed = o.failed_action.as_ref().map(|f| format!("#{} {}", f.index, f.action)).unwrap_or_else(|| "-".into());
    let code = o.error.as_ref().map(|e| e.code.to_string()).unwrap_or_else(|| "-".into());
    let detail = match (o.result, &o.error, o.batch) {
        (Verdict::Running, _, Some(id)) => format!("batch {id} still running (bmcctl status {id})"),
        (Verdict::Unknown, Some(e), Some(id)) => format!("{} (bmcctl status {id})", e.message),
        (_, Some(e), _) => e.message.clone(),
        _ => {
            o.results.iter().filter_map(|a| a.data.as_ref()).map(|d| data_text(d, wide)).collect::<Vec<_>>().join("; ")
        }
    };
    let time = o.elapsed_ms.map(elapsed).unwrap_or_else(|| "-".into());
    [o.machine.clone(), o.result.as_str().to_owned(), time, failed, code, detail.replace(['\n', '\r'], " ")]
}

/// One machine as a line of its own (failures as they happen, above the progress bar).
pub fn fleet_row_line(o: &Outcome, color: bool) -> String {
    let [machine, result, time, failed, code, detail] = fleet_row(o, false);
    let result = paint(&result, verdict_color(o.result), color);
    format!("{machine}: {result} after {time}: {failed} {code}: {detail}")
}

/// The end of a fleet run: a row per machine, the totals, why it stopped.
/// `wide` adds each machine's batch, worker, and when it was admitted and finished.
pub fn fleet_summary(
    outcomes: &[Outcome],
    stopped: Option<Stopped>,
    schedule: Schedule,
    color: bool,
    wide: bool,
) -> String {
    let style = |r: usize, column: usize, cell: String| match (r, column) {
        (1.., 1) => paint(&cell, verdict_color(outcomes[r - 1].result), color),
        _ => cell,
    };
    let mut out = if wide {
        const HEAD: [&str; 10] = [
            "MACHINE",
            "RESULT",
            "TIME",
            "FAILED ACTION",
            "ERROR",
            "BATCH",
            "WORKER",
            "ADMITTED",
            "FINISHED",
            "DETAIL",
        ];
        let rows: Vec<[String; 10]> = outcomes
            .iter()
            .map(|o| {
                let [machine, result, time, failed, code, detail] = fleet_row(o, true);
                let (batch, worker) = (or_dash(o.batch), or_dash(o.worker.as_deref()));
                [
                    machine,
                    result,
                    time,
                    failed,
                    code,
                    batch,
                    worker,
                    or_dash(o.admitted_at_ms.map(at)),
                    or_dash(o.finished_at_ms.map(at)),
                    detail,
                ]
            })
            .collect();
        grid(HEAD, &rows, style)
    } else {
        const HEAD: [&str; 6] = ["MACHINE", "RESULT", "TIME", "FAILED ACTION", "ERROR", "DETAIL"];
        let rows: Vec<[String; 6]> = outcomes.iter().map(|o| fleet_row(o, false)).collect();
        grid(HEAD, &rows, style)
    };
    let counts: Vec<String> = Verdict::ALL
        .iter()
        .filter_map(|v| {
            let n = outcomes.iter().filter(|o| o.result == *v).count();
            (n > 0).then(|| format!("{n} {}", v.as_str()))
        })
        .collect();
    out.push_str(&format!(
        "{} machine{}: {}\n",
        outcomes.len(),
        if outcomes.len() == 1 { "" } else { "s" },
        counts.join(", ")
    ));
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
        Stopped::Failures(k) => format!(
            "Stopped after {k} failure{} (--stop-after-failures {k}): no further machine was started.",
            if k == 1 { "" } else { "s" }
        ),
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
        let ok =
            ActionResult::ok(0, "power_status", Some("sim".into()), Some(ActionData::PowerState(PowerState::On)), 3);
        let bad = ActionResult::err(
            0,
            "power_status",
            None,
            ErrorBody::new(ErrorCode::UnknownCredential, "no credential `c`\nanywhere"),
            3,
        );
        let outcomes = [
            Outcome::finished("web-1", result(BatchState::Succeeded, ok), Duration::from_millis(812)),
            Outcome::finished("web-22", result(BatchState::Failed, bad), Duration::from_millis(12_340)),
            Outcome::not_started("web-3"),
        ];
        let schedule = Schedule { max_parallel: 16, canary: 0, stop_after_failures: Some(1) };
        let text = fleet_summary(&outcomes, Some(Stopped::Failures(1)), schedule, false, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "MACHINE  RESULT       TIME   FAILED ACTION    ERROR               DETAIL");
        assert_eq!(lines[1], "web-1    succeeded    812ms  -                -                   power=on");
        assert_eq!(
            lines[2],
            "web-22   failed       12.3s  #0 power_status  unknown_credential  no credential `c` anywhere"
        );
        assert_eq!(lines[3], "web-3    not started  -      -                -");
        assert_eq!(lines[4], "3 machines: 1 succeeded, 1 failed, 1 not started");
        assert!(lines[5].starts_with("Stopped after 1 failure (--stop-after-failures 1)"), "{text}");
        assert!(!text.contains('\x1b'));
        assert!(
            fleet_summary(&outcomes, None, schedule, true, false).contains("\x1b[31mfailed"),
            "colour on a terminal"
        );
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
            observed_ms: last_seen_ms,
            poll_interval_ms: Some(60_000),
            stale_after_ms: Some(106_000),
            health: None,
            power_watts: None,
            power_read_ms: None,
            clock_drift_ms: None,
            clock_read_ms: None,
            cert_not_after_ms: None,
        }
    }

    #[test]
    fn machine_ls_shows_power_contactable_and_last_seen_or_a_dash() {
        let m = |name: &str, address: &str, labels: &[(&str, &str)]| {
            let mut m = Machine::new(name, address.parse().unwrap(), Default::default(), "c");
            m.labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            m
        };
        let (a, b, c, d) = (
            m("web-1", "10.0.0.1", &[("rack", "12")]),
            m("web-22", "10.0.0.2", &[]),
            m("web-3", "10.0.0.3", &[]),
            m("web-4", "10.0.0.4", &[]),
        );
        let now = 1_700_000_000_000;
        let (up, mut down, mut unread) = (
            state(Some(PowerState::On), true, Some(now - 12_400)),
            state(Some(PowerState::Off), false, Some(now - 3 * 3_600_000)),
            state(None, false, None),
        );
        // Observed (failing) just now.
        (down.observed_ms, unread.observed_ms) = (Some(now - 1_000), Some(now - 1_000));
        // Nobody observed it for longer than its interval plus the grace.
        let stale = state(Some(PowerState::On), true, Some(now - 107_000));
        let e = m("web-5", "10.0.0.5", &[]);
        let mut up = up;
        up.health = Some(bmcfleet_schema::health::HealthSummary {
            status: bmcfleet_schema::Health::Ok,
            reasons: vec![],
            unread: vec![],
            checked_ms: now - 1_000,
        });
        let rows = [(&a, Some(&up)), (&b, Some(&down)), (&c, Some(&unread)), (&d, None), (&e, Some(&stale))];
        let text = machine_table(&rows, now, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "NAME    ADDRESS   PROTOCOL  TENANT   POWER    CONTACTABLE   LAST SEEN  HEALTH  LABELS");
        assert_eq!(lines[1], "web-1   10.0.0.1  auto      default  on       yes           12s ago    ok      rack=12");
        assert_eq!(
            lines[2], "web-22  10.0.0.2  auto      default  unknown  no (timeout)  3h ago     -",
            "never the last power"
        );
        assert_eq!(lines[3], "web-3   10.0.0.3  auto      default  unknown  no (timeout)  never      -");
        assert_eq!(
            lines[4], "web-4   10.0.0.4  auto      default  -        -             -          -",
            "no state record: dashes"
        );
        assert_eq!(
            lines[5], "web-5   10.0.0.5  auto      default  unknown  stale         1m ago     -",
            "stale: power unknown"
        );
        assert_eq!(lines.len(), 6);
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
        let e = |event| MachineEvent {
            machine: "web-1".into(),
            at_ms: at,
            event,
            state: state(Some(PowerState::On), true, Some(at)),
        };
        let on = machine_event(
            &e(MachineEventKind::PowerChanged { from: Some(PowerState::Off), to: PowerState::On }),
            false,
        );
        assert_eq!(on, format!("2025-12-03T10:15:02.123Z  web-1{}power_changed     off→on", " ".repeat(20)));
        assert!(machine_event(&e(MachineEventKind::PowerChanged { from: None, to: PowerState::Off }), false)
            .ends_with("power_changed     -→off"));
        let down = MachineEventKind::Unreachable { code: ErrorCode::Timeout, reason: "no reply\nwithin 900ms".into() };
        assert!(machine_event(&e(down), false).ends_with("unreachable       timeout: no reply within 900ms"));
        assert!(machine_event(&e(MachineEventKind::Recovered), false).ends_with("web-1                    recovered"));
        let changes = vec![
            InventoryChange {
                field: "firmware_version".into(),
                from: Some("1.0".into()),
                to: Some("2.0".into()),
                change: Default::default(),
            },
            InventoryChange {
                field: "extra.psus".into(),
                from: None,
                to: Some("2".into()),
                change: Default::default(),
            },
        ];
        assert!(machine_event(&e(MachineEventKind::InventoryChanged { changes }), false)
            .ends_with("inventory_changed firmware_version 1.0→2.0, extra.psus -→2"));
        let health = MachineEventKind::HealthChanged {
            from: Some(bmcfleet_schema::Health::Ok),
            to: bmcfleet_schema::Health::Critical,
            reasons: vec!["sensor Fan 1 critical".into(), "BMC rollup: system 1\nHealthRollup critical".into()],
        };
        assert!(
            machine_event(&e(health), false).ends_with(
                "health_changed    ok→critical: sensor Fan 1 critical; BMC rollup: system 1 HealthRollup critical"
            ),
            "{}",
            machine_event(
                &e(MachineEventKind::HealthChanged { from: None, to: bmcfleet_schema::Health::Ok, reasons: vec![] }),
                false
            )
        );
        let first = MachineEventKind::HealthChanged { from: None, to: bmcfleet_schema::Health::Ok, reasons: vec![] };
        assert!(machine_event(&e(first), false).ends_with("health_changed    -→ok"));
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
        let text = data_text(&log, false);
        assert!(text.starts_with("1 of 7 entries\n"), "{text}");
        assert!(
            text.contains("0042")
                && text.contains("critical")
                && text.contains("Temperature 0x30: Upper Critical going high (asserted)"),
            "{text}"
        );
        let sensors = ActionData::Sensors(vec![SensorReading {
            name: "Fan 1".into(),
            kind: SensorKind::Fan,
            value: Some(750.0),
            unit: Some("RPM".into()),
            thresholds: Thresholds::default(),
            health: Some(Health::Warning),
        }]);
        let text = data_text(&sensors, false);
        assert!(
            text.starts_with("1 sensors\n")
                && text.contains("Fan 1")
                && text.contains("fan")
                && text.contains("750 RPM")
                && text.ends_with("warning"),
            "{text}"
        );
    }

    #[test]
    fn machine_ls_wide_adds_the_last_error_and_who_observed_it() {
        let mut m = Machine::new("web-22", "10.0.0.2".parse().unwrap(), Default::default(), "rack12-bmc");
        m.labels = [("rack".to_owned(), "12".to_owned())].into();
        let now = 1_700_000_000_000;
        let mut down = state(Some(PowerState::Off), false, Some(now - 3 * 3_600_000));
        down.last_changed_ms = now - 120_000;
        down.consecutive_failures = 7;
        down.reason = Some("no reply\nwithin 900ms".into());
        down.firmware = Some("2.1".into());
        down.observed_ms = Some(now - 1_000);
        down.health = Some(bmcfleet_schema::health::HealthSummary {
            status: bmcfleet_schema::Health::Critical,
            reasons: vec!["sensor Fan 1 critical".into()],
            unread: vec![],
            checked_ms: now - 60_000,
        });
        (down.power_watts, down.clock_drift_ms) = (Some(212.4), Some(-1_200));
        let unpolled = Machine::new("web-4", "10.0.0.4".parse().unwrap(), Default::default(), "c");
        let text = machine_table(&[(&m, Some(&down)), (&unpolled, None)], now, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "NAME    ADDRESS   PROTOCOL  TENANT   POWER    CONTACTABLE   LAST SEEN  HEALTH   LAST CHANGED  FAILURES  PROVIDER  FIRMWARE  WATTS  CLOCK DRIFT  WORKER  CREDENTIALS  LABELS   LAST ERROR             HEALTH REASONS"
        );
        assert_eq!(
            lines[1],
            "web-22  10.0.0.2  auto      default  unknown  no (timeout)  3h ago     unknown  2m ago        7         sim       2.1       212    -1.2s        w0      rack12-bmc   rack=12  no reply within 900ms  sensor Fan 1 critical"
        );
        assert_eq!(
            lines[2],
            "web-4   10.0.0.4  auto      default  -        -             -          -        -             -         -         -         -      -            -       c                     -                      -"
        );
        // The table view of the same rows is the one of every day.
        assert!(machine_table(&[(&m, Some(&down))], now, false)
            .starts_with("NAME    ADDRESS   PROTOCOL  TENANT   POWER    CONTACTABLE   LAST SEEN  HEALTH   LABELS\n"));
    }

    #[test]
    fn a_wide_fleet_summary_names_each_batch_worker_and_times() {
        let id: ulid::Ulid = "01JD5Q8K3C2V7X9N4M6P1R0T8S".parse().unwrap();
        let r = BatchResult {
            id,
            bmc: "m".into(),
            state: BatchState::Succeeded,
            results: vec![ActionResult::ok(
                0,
                "power_status",
                Some("sim".into()),
                Some(ActionData::PowerState(PowerState::On)),
                3,
            )],
            worker: "w1".into(),
            deliveries: 1,
            admitted_at_ms: 1_764_756_902_123,
            finished_at_ms: 1_764_756_903_000,
        };
        let outcomes = [Outcome::finished("web-1", r, Duration::from_millis(900)), Outcome::not_started("web-3")];
        let schedule = Schedule { max_parallel: 16, canary: 0, stop_after_failures: None };
        let text = fleet_summary(&outcomes, None, schedule, false, true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "MACHINE  RESULT       TIME   FAILED ACTION  ERROR  BATCH                       WORKER  ADMITTED                  FINISHED                  DETAIL");
        assert_eq!(lines[1], "web-1    succeeded    900ms  -              -      01JD5Q8K3C2V7X9N4M6P1R0T8S  w1      2025-12-03T10:15:02.123Z  2025-12-03T10:15:03.000Z  power=on");
        assert_eq!(lines[2], "web-3    not started  -      -              -      -                           -       -                         -");
        assert_eq!(lines[3], "2 machines: 1 succeeded, 1 not started");
        let coloured = fleet_summary(&outcomes, None, schedule, true, true);
        assert!(coloured.contains("\x1b[32msucceeded") && coloured.contains("\x1b[33mnot started"), "{coloured:?}");
    }

    #[test]
    fn wide_results_say_when_and_a_running_batch_what_waits() {
        use bmcfleet_schema::BatchStatus;
        let id: ulid::Ulid = "01JD5Q8K3C2V7X9N4M6P1R0T8S".parse().unwrap();
        let done = ActionResult::ok(0, "boot_device", Some("ipmi".into()), None, 41);
        let r = BatchResult {
            id,
            bmc: "m-web-1".into(),
            state: BatchState::Succeeded,
            results: vec![done.clone()],
            worker: "w0".into(),
            deliveries: 1,
            admitted_at_ms: 1_764_756_902_000,
            finished_at_ms: 1_764_756_914_300,
        };
        let table = result_text(&r, false);
        assert_eq!(table, format!("batch {id} on web-1: Succeeded (worker w0, delivery 1)\n   0 boot_device            ok        41ms ipmi\n"));
        let wide = result_text(&r, true);
        assert!(wide.starts_with(&format!("batch {id} on web-1: Succeeded (worker w0, delivery 1, admitted 2025-12-03T10:15:02.000Z, finished 2025-12-03T10:15:14.300Z, 12.3s in all)\n")), "{wide}");
        let status: BatchStatus = serde_json::from_value(serde_json::json!({
            "id": id, "bmc": "m-web-1", "state": "running", "results": [done], "in_progress": 1,
            "actions": ["boot_device", "power_cycle", "power_status"], "worker": "w0", "deliveries": 1, "admitted_at_ms": 1_764_756_902_000u64, "updated_at_ms": 1_764_756_903_000u64,
            "tenant": "default", "cancel_requested": true
        }))
        .unwrap();
        let text = reply_text(&Reply::Status(status.clone()), true);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!("batch {id} on web-1: Running, 1 of 3 actions done (tenant default, worker w0, delivery 1, admitted 2025-12-03T10:15:02.000Z, cancel requested)"));
        assert_eq!(
            &lines[1..],
            [
                "   0 boot_device            ok",
                "   1 power_cycle            running",
                "   2 power_status           pending"
            ]
        );
        assert_eq!(reply_text(&Reply::Status(status), false).lines().count(), 1, "table: the one line");
    }

    #[test]
    fn wide_sensors_show_their_thresholds_and_wide_events_their_moment() {
        use bmcfleet_schema::{Health, SensorKind, SensorReading, Thresholds};
        let sensors = ActionData::Sensors(vec![SensorReading {
            name: "CPU Temp".into(),
            kind: SensorKind::Temperature,
            value: Some(71.0),
            unit: Some("C".into()),
            thresholds: Thresholds { upper_critical: Some(95.0), upper_warning: Some(85.0), ..Thresholds::default() },
            health: Some(Health::Ok),
        }]);
        let wide = data_text(&sensors, true);
        assert!(wide.ends_with("ok       lower -/- upper 95/85 (critical/warning)"), "{wide:?}");
        assert!(!data_text(&sensors, false).contains("upper"));
        let ev = Event {
            batch: ulid::Ulid::nil(),
            at_ms: 1_764_756_902_123,
            event: EventKind::ActionStarted { index: 0, action: "power_on".into() },
        };
        assert_eq!(event_text(&ev, false), format!("{} #0 power_on started\n", ulid::Ulid::nil()));
        assert_eq!(
            event_text(&ev, true),
            format!("2025-12-03T10:15:02.123Z  {} #0 power_on started\n", ulid::Ulid::nil())
        );
    }

    #[test]
    fn component_tables_show_every_section_and_firmware_versions() {
        use bmcfleet_schema::components::{Drive, Firmware, Fru, MemoryModule, Section};
        let inv = bmcfleet_schema::Inventory {
            manufacturer: Some("Contoso".into()),
            model: Some("3500".into()),
            firmware_version: Some("1.45".into()),
            memory: vec![MemoryModule {
                id: "DIMM1".into(),
                capacity_mib: Some(32768),
                memory_type: Some("DDR4".into()),
                ..Default::default()
            }],
            drives: vec![Drive {
                id: "Disk.Bay.0".into(),
                model: Some("PM883".into()),
                firmware_version: Some("HXT7".into()),
                ..Default::default()
            }],
            firmware: vec![Firmware {
                id: "BMC".into(),
                name: Some("BMC".into()),
                version: Some("1.45".into()),
                updateable: Some(true),
                ..Default::default()
            }],
            fru: Some(Fru { chassis_serial: Some("CH-0001".into()), ..Default::default() }),
            unread: vec![Section::Nics],
            ..Default::default()
        };
        let t = component_tables(&inv);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "Contoso 3500 (BMC firmware 1.45)");
        assert!(lines.contains(&"       DIMM1  32768  DDR4  -    -             -     -       -"), "{t}");
        assert!(lines.contains(&"       BMC  BMC   1.45     true"), "{t}");
        assert!(lines.contains(&"       chassis_serial  CH-0001"), "{t}");
        assert!(t.contains("HXT7") && t.ends_with("unread (the BMC answered an error): nics"), "{t}");
        assert!(!t.contains("processors"), "empty sections are left out: {t}");
        let plain = ActionData::Inventory(Box::new(bmcfleet_schema::Inventory {
            model: Some("x".into()),
            ..Default::default()
        }));
        assert!(data_text(&plain, false).starts_with('{'), "no components: the JSON as before");
    }
}
