//! How replies, results and events read on a terminal (`--json` prints the
//! wire types instead).

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
