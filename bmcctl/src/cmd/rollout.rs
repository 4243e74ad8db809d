//! `bmcctl rollout submit|status|pause|resume|abort|list|watch`: rollouts
//! run by the gateways (see docs/ROLLOUTS.md); bmcctl only asks and follows.
//! Exit codes: 0 done (a finished rollout: every machine succeeded), 1 a
//! rollout that finished otherwise, 3 a refusal.

use crate::cli::RolloutOp;
use crate::client::Client;
use anyhow::Context;
use bmcfleet_schema::rollout::{
    PartView, RolloutEvent, RolloutEventKind, RolloutId, RolloutIdRequest, RolloutListRequest, RolloutRecord,
    RolloutState, RolloutStatusRequest, RolloutView, CHUNK,
};
use bmcfleet_schema::{Encoding, Reply, Subjects};
use futures::StreamExt;
use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

/// How long one request may take (a submit checks every machine).
const TIMEOUT: Duration = Duration::from_secs(60);

pub async fn run(client: &Client, subjects: &Subjects, op: &RolloutOp) -> anyhow::Result<ExitCode> {
    match op {
        RolloutOp::Submit { file, watch: follow } => {
            let mut text = String::new();
            if file == "-" {
                std::io::stdin().read_to_string(&mut text)?;
            } else {
                text = std::fs::read_to_string(file).with_context(|| format!("cannot read {file}"))?;
            }
            let reply = client.rollout("submit", text.into_bytes(), TIMEOUT).await?;
            match (&reply, follow) {
                (Reply::Rollout(v), true) => {
                    if !client.format.is_json() {
                        print!("{}", view_text(v, false));
                    }
                    watch(client, subjects, v.rollout.id).await
                }
                _ => Ok(client.print(&reply)),
            }
        }
        RolloutOp::Status { id, machines } => {
            let reply = status(client, *id, 0, 0).await?;
            let Reply::Rollout(mut v) = reply else { return Ok(client.print(&reply)) };
            // A plan rollout's machines are read to group their plans.
            if *machines || v.rollout.plan {
                v.parts = parts(client, *id, v.rollout.machines).await?;
            }
            let code = exit(&v.rollout);
            let groups = bmcfleet_schema::rollout::plan_groups(&v.parts);
            if !*machines && !client.format.is_json() {
                v.parts.clear();
            }
            client.print(&Reply::Rollout(v));
            if !groups.is_empty() && !client.format.is_json() {
                print!("{}", crate::output::plan_groups(&groups));
            }
            Ok(code)
        }
        RolloutOp::Pause { id } => change(client, "pause", *id).await,
        RolloutOp::Resume { id } => change(client, "resume", *id).await,
        RolloutOp::Abort { id } => change(client, "abort", *id).await,
        RolloutOp::List { all } => {
            let body = serde_json::to_vec(&RolloutListRequest { all: *all })?;
            Ok(client.print(&client.rollout("list", body, TIMEOUT).await?))
        }
        RolloutOp::Watch { id } => watch(client, subjects, *id).await,
    }
}

async fn status(client: &Client, id: RolloutId, from: u32, limit: u32) -> anyhow::Result<Reply> {
    let body = serde_json::to_vec(&RolloutStatusRequest { id, from, limit })?;
    client.rollout("status", body, TIMEOUT).await
}

/// Every machine of the rollout, a page at a time.
async fn parts(client: &Client, id: RolloutId, machines: u32) -> anyhow::Result<Vec<PartView>> {
    let mut out = Vec::with_capacity(machines as usize);
    while (out.len() as u32) < machines {
        match status(client, id, out.len() as u32, CHUNK).await? {
            Reply::Rollout(v) if !v.parts.is_empty() => out.extend(v.parts),
            Reply::Rollout(_) => break,
            Reply::Error(e) => anyhow::bail!("{}: {}", e.code, e.message),
            other => anyhow::bail!("unexpected reply {other:?}"),
        }
    }
    Ok(out)
}

async fn change(client: &Client, endpoint: &str, id: RolloutId) -> anyhow::Result<ExitCode> {
    let body = serde_json::to_vec(&RolloutIdRequest { id })?;
    Ok(client.print(&client.rollout(endpoint, body, TIMEOUT).await?))
}

/// 0 when every machine succeeded, 1 when the rollout finished otherwise (or still runs).
fn exit(r: &RolloutRecord) -> ExitCode {
    if r.state == RolloutState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Follow the rollout's events until `rollout_finished` (subscribed before
/// reading its status, so nothing is missed; a finished one is reported at once).
pub async fn watch(client: &Client, subjects: &Subjects, id: RolloutId) -> anyhow::Result<ExitCode> {
    let mut sub = client.nats.subscribe(subjects.rollout_events_any(&id)).await?;
    client.nats.flush().await?;
    match status(client, id, 0, 0).await? {
        Reply::Rollout(v) if v.rollout.state.is_final() => {
            let code = exit(&v.rollout);
            client.print(&Reply::Rollout(v));
            return Ok(code);
        }
        Reply::Rollout(_) => {}
        other => return Ok(client.print(&other)),
    }
    while let Some(msg) = sub.next().await {
        let Ok(ev) = Encoding::MessagePack.decode::<RolloutEvent>(&msg.payload) else { continue };
        if client.format.is_json() {
            println!("{}", serde_json::to_string(&ev).unwrap_or_default());
        } else {
            print!("{}", event_text(&ev));
        }
        if let RolloutEventKind::RolloutFinished { state, .. } = ev.event {
            return Ok(if state == RolloutState::Succeeded { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
    }
    anyhow::bail!("the event subscription ended before rollout {id} finished: bmcctl rollout status {id}")
}

fn state(s: RolloutState) -> String {
    serde_json::to_value(s).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

fn snake<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_else(|| "-".into())
}

/// One rollout event, as a line.
pub fn event_text(ev: &RolloutEvent) -> String {
    match &ev.event {
        RolloutEventKind::RolloutStarted { machines, actions } => {
            format!("rollout {} started: {} on {machines} machines\n", ev.rollout, actions.join(","))
        }
        RolloutEventKind::RolloutProgress { machine, batch, outcome, counts, error, .. } => format!(
            "{machine} {} (batch {batch}){}  [{} succeeded, {} not]\n",
            snake(outcome),
            error.as_ref().map(|e| format!(": {e}")).unwrap_or_default(),
            counts.succeeded,
            counts.not_succeeded()
        ),
        RolloutEventKind::RolloutPaused => format!("rollout {} paused\n", ev.rollout),
        RolloutEventKind::RolloutResumed => format!("rollout {} resumed\n", ev.rollout),
        RolloutEventKind::RolloutAborting => format!("rollout {} aborting\n", ev.rollout),
        RolloutEventKind::RolloutFinished { state: s, counts, not_started, stop } => format!(
            "rollout {} {}: {} succeeded, {} failed, {} cancelled, {} refused, {not_started} not started{}\n",
            ev.rollout,
            state(*s),
            counts.succeeded,
            counts.failed,
            counts.cancelled,
            counts.refused,
            stop.map(|s| format!(" (stopped: {})", snake(&s))).unwrap_or_default()
        ),
    }
}

/// A rollout (and its machines, when listed).
pub fn view_text(v: &RolloutView, wide: bool) -> String {
    let r = &v.rollout;
    let mut out = format!(
        "rollout {} {}{}: {} on {} machines (tenant {}), {} succeeded, {} failed, {} cancelled, {} refused, {} running, {} not started{}\n",
        r.id,
        state(r.state),
        if v.duplicate { " (already known: not submitted again)" } else { "" },
        if r.plan { format!("plan of {}", r.actions.join(",")) } else { r.actions.join(",") },
        r.machines,
        r.tenant,
        r.counts.succeeded,
        r.counts.failed,
        r.counts.cancelled,
        r.counts.refused,
        r.in_flight.len(),
        r.not_started(),
        r.stop.map(|s| format!(" (stopped: {})", snake(&s))).unwrap_or_default()
    );
    if wide {
        out.push_str(&format!(
            "  max parallel {}, canary {} (need {}), stop after failures {}, by {}\n",
            r.max_parallel,
            r.canary,
            r.canary_successes,
            r.stop_after_failures.map_or("-".into(), |k| k.to_string()),
            r.requester
        ));
    }
    for p in &v.parts {
        out.push_str(&format!(
            "  {:>5} {:<32} {:<10} {}{}{}\n",
            p.index,
            p.machine,
            snake(&p.state),
            p.batch,
            p.error.as_ref().map(|e| format!("  {e}")).unwrap_or_default(),
            p.plan.as_ref().map(|l| format!("  would send {l}")).unwrap_or_default()
        ));
    }
    out
}

/// Rollouts, one line each.
pub fn list_text(rollouts: &[RolloutRecord]) -> String {
    if rollouts.is_empty() {
        return "no rollouts\n".into();
    }
    let mut out = format!(
        "{:<26} {:<10} {:>8} {:>9} {:>6} {:>8} ACTIONS\n",
        "ID", "STATE", "MACHINES", "SUCCEEDED", "NOT", "RUNNING"
    );
    for r in rollouts {
        out.push_str(&format!(
            "{:<26} {:<10} {:>8} {:>9} {:>6} {:>8} {}\n",
            r.id.to_string(),
            state(r.state),
            r.machines,
            r.counts.succeeded,
            r.counts.not_succeeded(),
            r.in_flight.len(),
            r.actions.join(",")
        ));
    }
    out
}
