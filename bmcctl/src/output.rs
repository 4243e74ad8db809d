//! How replies, results, events and fleet runs read on a terminal (`--json`
//! prints the wire types, and a fleet run's [`Outcome`] lines, instead).

use crate::cmd::fleet::{Outcome, Schedule, Stopped, Verdict};
use crate::progress::paint;
use bmcfleet_schema::{ActionData, BatchResult, Event, EventKind, Reply};

fn data_text(d: &ActionData) -> String {
    match d {
        ActionData::PowerState(s) => format!("power={}", serde_json::to_value(s).unwrap_or_default().as_str().unwrap_or("?")),
        other => serde_json::to_string(other).unwrap_or_default(),
    }
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
        EventKind::BatchFinished { result: r } => result(r),
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
}
