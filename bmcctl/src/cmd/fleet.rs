//! A fleet run: one action command on many registered machines, one batch
//! per machine, submitted as one rollout (docs/ROLLOUTS.md): the gateways
//! schedule it and it goes on if bmcctl goes away; bmcctl follows it.
//!
//! Owns: which machines (the registry, read once: the `--machine` names, or
//! every machine matching `--selector` and `--tenant`), the schedule
//! (`--max-parallel`, `--canary`, `--stop-after-failures`, Ctrl-C) and each
//! machine's [`Outcome`]. It never writes the registry. How a run reads is
//! [`crate::progress`] (the bar, on a terminal's stderr) and
//! [`crate::output`] (the summary, `--output table|wide`); `--output json`
//! prints one [`Outcome`] per line as each machine finishes.
//!
//! The rollout id is chosen here, so each machine's batch id
//! (`rollout::batch_id`) is known before anything is sent: a run left with
//! a second Ctrl-C can say which batches still run.

use crate::cli::{FleetArgs, Target};
use crate::client::Client;
use crate::Usage;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::rollout::{
    self, PartOutcome, PartState, RolloutEvent, RolloutEventKind, RolloutIdRequest, RolloutRecord, RolloutRequest,
    RolloutState, RolloutStatusRequest, StopReason,
};
use bmcfleet_schema::{
    Action, ActionResult, BatchResult, BatchState, Encoding, ErrorBody, ErrorCode, IdRequest, Machine, OnError, Reply,
    Subjects,
};
use futures::stream::{Stream, StreamExt};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;
use ulid::Ulid;

/// `--max-parallel` when not given.
pub const DEFAULT_MAX_PARALLEL: usize = 16;

/// How often the progress bar is redrawn while nothing happens (its clock moves).
const TICK: Duration = Duration::from_millis(250);

/// How a fleet run proceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Batches in flight at once (at least 1).
    pub max_parallel: usize,
    /// Machines run first; the others start only if all of these succeed (0: no canary).
    pub canary: usize,
    /// Start no further machine once this many have not succeeded.
    pub stop_after_failures: Option<usize>,
}

impl From<&FleetArgs> for Schedule {
    fn from(f: &FleetArgs) -> Schedule {
        Schedule {
            max_parallel: f.max_parallel.map_or(DEFAULT_MAX_PARALLEL, |n| n.max(1) as usize),
            canary: f.canary.unwrap_or(0) as usize,
            stop_after_failures: f.stop_after_failures.map(|k| k as usize),
        }
    }
}

/// Why a run started fewer machines than it chose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// `failed` of the first `canaries` machines did not succeed.
    Canary { failed: usize, canaries: usize },
    /// `--stop-after-failures K` was reached.
    Failures(usize),
    /// Ctrl-C.
    Interrupted,
}

/// What became of one machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Its batch finished and every action succeeded.
    Succeeded,
    /// Its batch finished with a failed action.
    Failed,
    /// Its batch was cancelled (`bmcctl cancel`).
    Cancelled,
    /// The gateway refused the batch (or none answered): nothing was queued.
    Refused,
    /// The batch was queued but bmcctl lost track of it before it finished:
    /// it may have run (`bmcctl status ID`).
    Unknown,
    /// Never submitted: the run stopped first.
    NotStarted,
    /// Still running when the run was left (Ctrl-C twice).
    Running,
}

impl Verdict {
    /// Every verdict, in the order the summary counts them.
    pub const ALL: [Verdict; 7] = [
        Verdict::Succeeded,
        Verdict::Failed,
        Verdict::Cancelled,
        Verdict::Refused,
        Verdict::Unknown,
        Verdict::NotStarted,
        Verdict::Running,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Succeeded => "succeeded",
            Verdict::Failed => "failed",
            Verdict::Cancelled => "cancelled",
            Verdict::Refused => "refused",
            Verdict::Unknown => "unknown",
            Verdict::NotStarted => "not started",
            Verdict::Running => "running",
        }
    }
}

/// The action that failed a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FailedAction {
    pub index: u32,
    /// [`Action::kind`].
    pub action: String,
}

/// One machine's row of the summary, and its `--output json` line.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    pub machine: String,
    pub result: Verdict,
    /// The batch id (none when nothing was queued).
    pub batch: Option<Ulid>,
    pub state: Option<BatchState>,
    /// From submit to final result, as bmcctl saw it.
    pub elapsed_ms: Option<u64>,
    pub failed_action: Option<FailedAction>,
    /// The failed action's error, the gateway's refusal, or why bmcctl lost track.
    pub error: Option<ErrorBody>,
    /// When the gateway admitted the batch and the worker finished it (Unix ms).
    pub admitted_at_ms: Option<u64>,
    pub finished_at_ms: Option<u64>,
    pub worker: Option<String>,
    /// Every action's result (data such as a power state or an inventory included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<ActionResult>,
}

impl Outcome {
    fn empty(machine: &str, result: Verdict) -> Outcome {
        Outcome {
            machine: machine.to_owned(),
            result,
            batch: None,
            state: None,
            elapsed_ms: None,
            failed_action: None,
            error: None,
            admitted_at_ms: None,
            finished_at_ms: None,
            worker: None,
            results: vec![],
        }
    }

    /// A batch that finished (whatever its state).
    pub fn finished(machine: &str, r: BatchResult, elapsed: Duration) -> Outcome {
        let result = match r.state {
            BatchState::Succeeded => Verdict::Succeeded,
            BatchState::Cancelled => Verdict::Cancelled,
            // Final results are never queued or running; count them as failed if one were.
            BatchState::Failed | BatchState::Queued | BatchState::Running => Verdict::Failed,
        };
        // The first action that did not succeed (later ones are `skipped` after it).
        let failed = r.results.iter().find(|a| !a.is_ok());
        Outcome {
            batch: Some(r.id),
            state: Some(r.state),
            elapsed_ms: Some(elapsed.as_millis() as u64),
            failed_action: failed.map(|a| FailedAction { index: a.index, action: a.action.clone() }),
            error: failed.and_then(|a| a.error.clone()),
            admitted_at_ms: Some(r.admitted_at_ms),
            finished_at_ms: Some(r.finished_at_ms),
            worker: Some(r.worker),
            results: r.results,
            ..Outcome::empty(machine, result)
        }
    }

    /// Nothing was queued: the gateway said why (or no gateway answered).
    pub fn refused(machine: &str, error: ErrorBody, elapsed: Duration) -> Outcome {
        Outcome {
            error: Some(error),
            elapsed_ms: Some(elapsed.as_millis() as u64),
            ..Outcome::empty(machine, Verdict::Refused)
        }
    }

    /// Queued, then lost track of.
    pub fn unknown(machine: &str, batch: Ulid, error: ErrorBody, elapsed: Duration) -> Outcome {
        Outcome {
            batch: Some(batch),
            error: Some(error),
            elapsed_ms: Some(elapsed.as_millis() as u64),
            ..Outcome::empty(machine, Verdict::Unknown)
        }
    }

    pub fn not_started(machine: &str) -> Outcome {
        Outcome::empty(machine, Verdict::NotStarted)
    }

    pub fn running(machine: &str, batch: Ulid) -> Outcome {
        Outcome { batch: Some(batch), ..Outcome::empty(machine, Verdict::Running) }
    }

    pub fn ok(&self) -> bool {
        self.result == Verdict::Succeeded
    }
}

/// One machine of a run, with the id its batch will have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub machine: String,
    pub batch: Ulid,
}

/// What a run tells its observer (progress bar, `--output json`), as it happens.
#[derive(Debug)]
pub enum Progress<'a> {
    Started(&'a Planned),
    Finished(&'a Outcome),
    /// No new machine starts from now on.
    Stopping(Stopped),
    /// Time passed.
    Tick,
}

/// The machines a fleet run acts on, in run order: the `--machine` names as
/// given (each once), or every machine matching `--selector` and `--tenant`,
/// by name. Unknown names, or a selection matching nothing, are a usage
/// error: nothing is submitted.
pub fn select(registry: &BTreeMap<String, Machine>, target: &Target) -> Result<Vec<String>, Usage> {
    if !target.machines.is_empty() {
        let mut seen = HashSet::new();
        let names: Vec<String> = target.machines.iter().filter(|n| seen.insert(n.as_str())).cloned().collect();
        let missing: Vec<String> =
            names.iter().filter(|n| !registry.contains_key(*n)).map(|n| format!("`{n}`")).collect();
        if !missing.is_empty() {
            return Err(Usage(format!(
                "machine_not_found: no machine named {} is registered (bmcctl machine ls); nothing was submitted",
                missing.join(", ")
            )));
        }
        return Ok(names);
    }
    let matched: Vec<String> = registry
        .iter()
        .filter(|(_, m)| {
            target.selector.as_ref().is_none_or(|s| s.matches(&m.labels))
                && target.tenant.as_ref().is_none_or(|t| m.tenant == *t)
        })
        .map(|(name, _)| name.clone())
        .collect();
    if matched.is_empty() {
        let mut what = vec![];
        if let Some(s) = &target.selector {
            what.push(format!("--selector {s}"));
        }
        if let Some(t) = &target.tenant {
            what.push(format!("--tenant {t}"));
        }
        return Err(Usage(format!(
            "no registered machine matches {} ({} machines registered); nothing was submitted",
            what.join(" "),
            registry.len()
        )));
    }
    Ok(matched)
}

/// Ctrl-C presses, as a stream.
fn interrupts() -> impl Stream<Item = ()> + Unpin {
    futures::stream::unfold((), |()| async { tokio::signal::ctrl_c().await.ok().map(|()| ((), ())) }).boxed()
}

/// How often the rollout's record is read while following it (starts, stops, the end).
const READ_EVERY: u32 = 2;

/// The rollout a fleet run submits: the chosen machines in run order, the
/// schedule, each batch's deadline.
pub fn request(
    id: Ulid,
    planned: &[Planned],
    schedule: Schedule,
    actions: &[Action],
    deadline: Duration,
    plan: bool,
) -> RolloutRequest {
    // A plan changes nothing: every machine is planned, whatever the others'
    // plans came to (no canary, no failure limit), so that the groups show
    // every machine's answer ("3 machines: unsupported").
    let (canary, stop_after_failures) = if plan { (0, None) } else { (schedule.canary, schedule.stop_after_failures) };
    RolloutRequest {
        id: Some(id),
        selector: None,
        machines: planned.iter().map(|p| p.machine.clone()).collect(),
        actions: actions.to_vec(),
        on_error: OnError::Stop,
        max_parallel: Some((schedule.max_parallel.max(1) as u32).min(rollout::MAX_PARALLEL)),
        canary: (canary > 0).then_some(canary as u32),
        canary_successes: None,
        stop_after_failures: stop_after_failures.map(|k| k as u32),
        deadline: None,
        batch_deadline: Some(deadline),
        plan,
    }
}

/// Why the gateways stopped starting machines, as a fleet run reports it.
fn stopped_by(record: &RolloutRecord, outcomes: &[Option<Outcome>]) -> Option<Stopped> {
    match record.stop? {
        StopReason::Canary => {
            let canaries = record.canary as usize;
            let failed =
                outcomes[..canaries.min(outcomes.len())].iter().filter(|o| o.as_ref().is_none_or(|o| !o.ok())).count();
            Some(Stopped::Canary { failed, canaries })
        }
        StopReason::Failures => Some(Stopped::Failures(record.stop_after_failures.unwrap_or(0) as usize)),
        StopReason::Aborted | StopReason::Deadline => Some(Stopped::Interrupted),
    }
}

/// A finished machine's outcome: its batch's result (read by status), or the refusal.
async fn outcome_of(client: &Client, p: &Planned, outcome: PartOutcome, error: Option<ErrorBody>) -> Outcome {
    if outcome == PartOutcome::Refused {
        let e = error.unwrap_or_else(|| ErrorBody::new(ErrorCode::Internal, "refused"));
        return Outcome::refused(&p.machine, e, Duration::ZERO);
    }
    let body = serde_json::to_vec(&IdRequest { id: p.batch }).expect("an id request serialises");
    match client.request("status", false, body, super::status::TIMEOUT).await {
        Ok(Reply::Status(s)) => match s.result {
            Some(r) => {
                let elapsed = Duration::from_millis(r.finished_at_ms.saturating_sub(r.admitted_at_ms));
                Outcome::finished(&p.machine, r, elapsed)
            }
            None => Outcome::unknown(
                &p.machine,
                p.batch,
                ErrorBody::new(
                    ErrorCode::Internal,
                    "the rollout recorded the batch finished; its status has no result",
                ),
                Duration::ZERO,
            ),
        },
        Ok(Reply::Error(e)) => Outcome::unknown(&p.machine, p.batch, e, Duration::ZERO),
        Ok(other) => Outcome::unknown(
            &p.machine,
            p.batch,
            ErrorBody::new(ErrorCode::Internal, format!("unexpected status reply {other:?}")),
            Duration::ZERO,
        ),
        Err(e) => Outcome::unknown(
            &p.machine,
            p.batch,
            ErrorBody::new(ErrorCode::Unavailable, format!("{e:#}")),
            Duration::ZERO,
        ),
    }
}

/// Submit the fleet run as rollout `id` and follow it to the end: the
/// gateways schedule it (canary, `--max-parallel`, `--stop-after-failures`)
/// and it goes on if bmcctl goes away. The first interrupt pauses the
/// rollout (no new start), lets the running batches finish, then aborts it;
/// the second leaves at once (the running batches go on; the rollout stays
/// paused, which the last line says).
pub async fn follow_rollout<I>(
    client: &Client,
    subjects: &Subjects,
    id: Ulid,
    planned: &[Planned],
    request: &RolloutRequest,
    interrupts: I,
    mut report: impl FnMut(Progress<'_>),
) -> anyhow::Result<(Vec<Outcome>, Option<Stopped>)>
where
    I: Stream<Item = ()> + Unpin,
{
    let n = planned.len();
    let mut events = client.nats.subscribe(subjects.rollout_events_any(&id)).await?;
    client.nats.flush().await?;
    let refused_all =
        |e: ErrorBody| planned.iter().map(|p| Outcome::refused(&p.machine, e.clone(), Duration::ZERO)).collect();
    match client.rollout("submit", serde_json::to_vec(request)?, ROLLOUT_TIMEOUT).await {
        Ok(Reply::Rollout(_)) => {}
        Ok(Reply::Error(e)) => return Ok((refused_all(e), None)),
        Ok(other) => {
            return Ok((refused_all(ErrorBody::new(ErrorCode::Internal, format!("unexpected reply {other:?}"))), None))
        }
        Err(e) => return Ok((refused_all(ErrorBody::new(ErrorCode::Unavailable, format!("{e:#}"))), None)),
    }
    let mut outcomes: Vec<Option<Outcome>> = vec![None; n];
    let mut started = vec![false; n];
    let mut stopped: Option<Stopped> = None;
    let mut interrupts = interrupts.fuse();
    let mut interrupted = 0;
    let mut left = false;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut ticks = 0u32;
    let mut last: Option<RolloutRecord> = None;
    let start = |i: usize, started: &mut Vec<bool>, report: &mut dyn FnMut(Progress<'_>)| {
        if i < n && !started[i] {
            started[i] = true;
            report(Progress::Started(&planned[i]));
        }
    };
    loop {
        tokio::select! {
            msg = events.next() => {
                let Some(msg) = msg else { break };
                let Ok(ev) = Encoding::MessagePack.decode::<RolloutEvent>(&msg.payload) else { continue };
                match ev.event {
                    RolloutEventKind::RolloutProgress { index, outcome, error, .. } => {
                        let i = index as usize;
                        if i < n && outcomes[i].is_none() {
                            start(i, &mut started, &mut report);
                            let o = outcome_of(client, &planned[i], outcome, error).await;
                            report(Progress::Finished(&o));
                            outcomes[i] = Some(o);
                        }
                    }
                    RolloutEventKind::RolloutFinished { .. } => {
                        last = None;
                        break;
                    }
                    _ => {}
                }
            }
            Some(()) = interrupts.next(), if interrupted < 2 => {
                interrupted += 1;
                if interrupted == 2 {
                    left = true;
                    break;
                }
                if stopped.is_none() {
                    stopped = Some(Stopped::Interrupted);
                    report(Progress::Stopping(Stopped::Interrupted));
                }
                let _ = client.rollout("pause", serde_json::to_vec(&RolloutIdRequest { id })?, ROLLOUT_TIMEOUT).await;
            }
            _ = tick.tick() => {
                report(Progress::Tick);
                ticks += 1;
                if !ticks.is_multiple_of(READ_EVERY) {
                    continue;
                }
                let body = serde_json::to_vec(&RolloutStatusRequest { id, from: 0, limit: 0 })?;
                let Ok(Reply::Rollout(v)) = client.rollout("status", body, ROLLOUT_TIMEOUT).await else { continue };
                let record = v.rollout;
                for i in &record.in_flight {
                    start(*i as usize, &mut started, &mut report);
                }
                if stopped.is_none() {
                    if let Some(why) = stopped_by(&record, &outcomes) {
                        stopped = Some(why);
                        report(Progress::Stopping(why));
                    }
                }
                // Interrupted: once the running batches finished, end the paused rollout.
                if interrupted == 1 && record.state == RolloutState::Paused && record.in_flight.is_empty() {
                    let _ = client.rollout("abort", serde_json::to_vec(&RolloutIdRequest { id })?, ROLLOUT_TIMEOUT).await;
                }
                let done = record.state.is_final();
                last = Some(record);
                if done {
                    break;
                }
            }
        }
    }
    if !left {
        // Outcomes whose events were missed, from the rollout's own record of them.
        let mut from = 0u32;
        while (from as usize) < n && outcomes.iter().any(Option::is_none) {
            let body = serde_json::to_vec(&RolloutStatusRequest { id, from, limit: rollout::CHUNK })?;
            let Reply::Rollout(v) = client.rollout("status", body, ROLLOUT_TIMEOUT).await? else { break };
            if v.parts.is_empty() {
                break;
            }
            from += v.parts.len() as u32;
            for part in v.parts {
                let i = part.index as usize;
                let outcome = match part.state {
                    PartState::Succeeded => PartOutcome::Succeeded,
                    PartState::Failed => PartOutcome::Failed,
                    PartState::Cancelled => PartOutcome::Cancelled,
                    PartState::Refused => PartOutcome::Refused,
                    PartState::Pending | PartState::Running => continue,
                };
                if i < n && outcomes[i].is_none() {
                    start(i, &mut started, &mut report);
                    let o = outcome_of(client, &planned[i], outcome, part.error).await;
                    report(Progress::Finished(&o));
                    outcomes[i] = Some(o);
                }
            }
            last = Some(v.rollout);
        }
        if stopped.is_none() {
            if last.is_none() {
                let body = serde_json::to_vec(&RolloutStatusRequest { id, from: 0, limit: 0 })?;
                if let Ok(Reply::Rollout(v)) = client.rollout("status", body, ROLLOUT_TIMEOUT).await {
                    last = Some(v.rollout);
                }
            }
            if let Some(why) = last.as_ref().and_then(|r| stopped_by(r, &outcomes)) {
                stopped = Some(why);
                report(Progress::Stopping(why));
            }
        }
    } else {
        eprintln!("left rollout {id} paused with its running batches going on: bmcctl rollout abort {id} (or resume)");
    }
    let outcomes = outcomes
        .into_iter()
        .zip(planned)
        .enumerate()
        .map(|(i, (o, p))| match o {
            Some(o) => o,
            None if left && started[i] => Outcome::running(&p.machine, p.batch),
            None => Outcome::not_started(&p.machine),
        })
        .collect();
    Ok((outcomes, stopped))
}

/// What one machine's plan batch came to, the same text for the same plan
/// on any machine: per action, its planned change (`POST …`), `no change`,
/// or its error code; a batch refused or not run, its verdict and code.
pub fn plan_key(o: &Outcome) -> String {
    if o.results.is_empty() {
        return match &o.error {
            Some(e) => format!("{}: {}", o.result.as_str(), e.code),
            None => o.result.as_str().to_owned(),
        };
    }
    bmcfleet_schema::plan::results_line(&o.results)
}

/// A fleet plan's machines grouped by identical plans ([`plan_key`]): the
/// plan, and the machines that have it (by name), largest group first.
pub fn plan_groups(outcomes: &[Outcome]) -> Vec<(String, Vec<String>)> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for o in outcomes {
        groups.entry(plan_key(o)).or_default().push(o.machine.clone());
    }
    let mut out: Vec<(String, Vec<String>)> = groups.into_iter().collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    out
}

/// How long one rollout request may take (a submit checks every machine).
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(60);

/// Run `actions` on the machines `target` chooses: a rollout of one batch
/// per machine, scheduled by the gateways, followed here.
pub async fn run(
    client: &Client,
    topology: &TopologyArgs,
    target: &Target,
    actions: Vec<Action>,
) -> anyhow::Result<ExitCode> {
    let registry = super::machine::registry(client.nats.clone(), topology).await?;
    let id = Ulid::new();
    let planned: Vec<Planned> = select(&registry, target)?
        .into_iter()
        .enumerate()
        .map(|(i, machine)| Planned { batch: rollout::batch_id(id, i as u32, &machine), machine })
        .collect();
    let schedule = Schedule::from(&target.fleet);
    if !target.waits() {
        // `--no-wait`: the rollout is the gateways' to drive; its id is printed.
        let request = request(id, &planned, schedule, &actions, target.deadline, target.plan);
        let reply = client.rollout("submit", serde_json::to_vec(&request)?, ROLLOUT_TIMEOUT).await?;
        return Ok(client.print(&reply));
    }
    let what: Vec<&str> = actions.iter().map(Action::kind).collect();
    let format = client.format;
    // The summary (stdout) and the bar (stderr) are coloured each by its own stream.
    let color = crate::progress::color(crate::progress::terminal());
    let on = crate::progress::stderr_terminal() && !format.is_json();
    let mut bar = crate::progress::Bar::new(&what.join(","), planned.len(), on, crate::progress::color(on));
    let report = |p: Progress<'_>| match p {
        Progress::Started(_) => bar.started(),
        Progress::Finished(o) => {
            bar.finished(o.ok());
            if format.is_json() {
                println!("{}", serde_json::to_string(o).unwrap_or_default());
            } else if !o.ok() && bar.is_on() {
                // Failures as they happen, above the bar (the summary repeats them).
                bar.above(&crate::output::fleet_row_line(o, bar.color()));
            }
        }
        Progress::Stopping(why) => bar.above(&crate::output::stopping(why, schedule)),
        Progress::Tick => bar.tick(),
    };
    // A plan too is a rollout (plan: true): durable, scheduled by the
    // gateways, its plans grouped here and by `bmcctl rollout status`.
    let request = request(id, &planned, schedule, &actions, target.deadline, target.plan);
    let subjects = topology.subjects();
    let follow = follow_rollout(client, &subjects, id, &planned, &request, interrupts(), report);
    let (outcomes, stopped) = match target.timeout {
        None => follow.await?,
        Some(limit) => match tokio::time::timeout(limit, follow).await {
            Ok(done) => done?,
            Err(_) => {
                bar.finish();
                eprintln!(
                    "no result within {} (--timeout): rollout {id} goes on; `bmcctl rollout status {id}`",
                    bmcfleet_schema::duration::format(limit)
                );
                return Ok(ExitCode::from(crate::exit::NOT_FINISHED));
            }
        },
    };
    bar.finish();
    if format.is_json() {
        for o in outcomes.iter().filter(|o| matches!(o.result, Verdict::NotStarted | Verdict::Running)) {
            println!("{}", serde_json::to_string(o)?);
        }
    } else {
        print!("{}", crate::output::fleet_summary(&outcomes, stopped, schedule, color, format.is_wide()));
        if target.plan {
            print!("{}", crate::output::plan_groups(&plan_groups(&outcomes)));
        }
    }
    Ok(if outcomes.iter().all(Outcome::ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(state: BatchState) -> BatchResult {
        let action = if state == BatchState::Succeeded {
            ActionResult::ok(0, "power_on", Some("sim".into()), None, 1)
        } else {
            ActionResult::err(
                0,
                "power_on",
                Some("sim".into()),
                ErrorBody::new(ErrorCode::BmcError, "completion code 0xff"),
                1,
            )
        };
        BatchResult {
            id: Ulid::new(),
            bmc: "m".into(),
            state,
            results: vec![action],
            worker: "w0".into(),
            deliveries: 1,
            admitted_at_ms: 1,
            finished_at_ms: 2,
        }
    }

    fn schedule(max_parallel: usize, canary: usize, stop_after_failures: Option<usize>) -> Schedule {
        Schedule { max_parallel, canary, stop_after_failures }
    }

    #[test]
    fn the_first_failed_action_is_the_one_reported() {
        let mut r = result(BatchState::Failed);
        r.results.insert(0, ActionResult::ok(0, "boot_device", None, None, 1));
        r.results[1].index = 1;
        r.results.push(ActionResult::err(2, "power_status", None, ErrorBody::new(ErrorCode::Skipped, "skipped"), 0));
        let o = Outcome::finished("m", r, Duration::from_millis(1500));
        assert_eq!(o.failed_action, Some(FailedAction { index: 1, action: "power_on".into() }));
        assert_eq!(o.error.as_ref().map(|e| e.code), Some(ErrorCode::BmcError));
        let line: serde_json::Value = serde_json::from_str(&serde_json::to_string(&o).unwrap()).unwrap();
        assert_eq!(
            (line["machine"].as_str(), line["result"].as_str(), line["error"]["code"].as_str()),
            (Some("m"), Some("failed"), Some("bmc_error"))
        );
        assert_eq!(line["elapsed_ms"], 1500);
        let line = serde_json::to_string(&Outcome::not_started("n")).unwrap();
        assert_eq!(line, r#"{"machine":"n","result":"not_started"}"#);
    }

    #[test]
    fn identical_plans_are_grouped_with_counts() {
        use bmcfleet_schema::plan::{ActionPlan, PlannedRequest};
        let clear = PlannedRequest::Redfish {
            method: "POST".into(),
            path: "/redfish/v1/Managers/1/LogServices/SEL/Actions/LogService.ClearLog".into(),
            body: Some(serde_json::json!({})),
        };
        let planned = |name: &str, path_reads: &str| {
            let mut r = result(BatchState::Succeeded);
            let plan = ActionPlan {
                // What was read differs from machine to machine; the change groups.
                reads: vec![PlannedRequest::Redfish { method: "GET".into(), path: path_reads.into(), body: None }],
                reads_omitted: 0,
                change: Some(clear.clone()),
            };
            r.results = vec![ActionResult::ok(0, "event_log_clear", None, None, 1).with_plan(Some(plan))];
            Outcome::finished(name, r, Duration::from_millis(1))
        };
        let unsupported = |name: &str| {
            let mut r = result(BatchState::Failed);
            r.results = vec![ActionResult::err(
                0,
                "event_log_clear",
                None,
                ErrorBody::new(ErrorCode::Unsupported, format!("{name} has no log service")),
                1,
            )
            .with_plan(Some(ActionPlan::default()))];
            Outcome::finished(name, r, Duration::from_millis(1))
        };
        let mut outcomes: Vec<Outcome> =
            (0..7).map(|i| planned(&format!("n{i}"), &format!("/redfish/v1/{i}"))).collect();
        outcomes.push(unsupported("old-1"));
        outcomes.push(unsupported("old-2"));
        outcomes.push(Outcome::refused("gone", ErrorBody::new(ErrorCode::MachineNotFound, "no such"), Duration::ZERO));
        let groups = plan_groups(&outcomes);
        let counts: Vec<(String, usize)> = groups.iter().map(|(k, m)| (k.clone(), m.len())).collect();
        assert_eq!(
            counts,
            [
                ("POST /redfish/v1/Managers/1/LogServices/SEL/Actions/LogService.ClearLog {}".to_owned(), 7),
                ("unsupported".to_owned(), 2),
                ("refused: machine_not_found".to_owned(), 1)
            ]
        );
        let text = crate::output::plan_groups(&groups);
        assert!(
            text.contains("  7 machines: POST /redfish/v1/Managers/1/LogServices/SEL/Actions/LogService.ClearLog {}\n"),
            "{text}"
        );
        assert!(text.contains("  2 machines (old-1, old-2): unsupported\n"), "{text}");
    }

    fn machine(name: &str, labels: &[(&str, &str)], tenant: &str) -> (String, Machine) {
        let mut m = Machine::new(name, "10.0.0.1".parse().unwrap(), bmcfleet_schema::Protocol::Sim, "c");
        m.labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        m.tenant = tenant.into();
        (name.to_owned(), m)
    }

    fn target(args: &[&str]) -> Target {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["bmcctl", "power", "on"].iter().chain(args)).unwrap();
        let crate::cli::Command::Power { target, .. } = cli.command else { unreachable!() };
        target
    }

    #[test]
    fn selection_is_all_labels_and_the_tenant_by_name_or_the_names_as_given() {
        let registry: BTreeMap<_, _> = [
            machine("b", &[("rack", "12"), ("role", "worker")], "default"),
            machine("a", &[("rack", "12"), ("role", "worker")], "tenant-a"),
            machine("c", &[("rack", "12")], "default"),
            machine("d", &[("rack", "13"), ("role", "worker")], "default"),
        ]
        .into_iter()
        .collect();
        assert_eq!(select(&registry, &target(&["--selector", "rack=12,role=worker"])).unwrap(), ["a", "b"]);
        assert_eq!(select(&registry, &target(&["--selector", "rack=12", "--tenant", "default"])).unwrap(), ["b", "c"]);
        assert_eq!(select(&registry, &target(&["--tenant", "tenant-a"])).unwrap(), ["a"]);
        assert_eq!(
            select(&registry, &target(&["--machine", "d", "--machine", "a", "--machine", "d"])).unwrap(),
            ["d", "a"]
        );
        let e = select(&registry, &target(&["--selector", "rack=99"])).unwrap_err().0;
        assert!(e.contains("--selector rack=99") && e.contains("nothing was submitted"), "{e}");
        let e = select(&registry, &target(&["--machine", "a", "--machine", "zz", "--machine", "yy"])).unwrap_err().0;
        assert!(e.contains("`zz`, `yy`") && e.starts_with("machine_not_found"), "{e}");
    }

    #[test]
    fn one_machine_is_a_single_batch_unless_a_fleet_flag_says_otherwise() {
        assert!(!target(&["--machine", "a"]).is_fleet());
        assert!(!target(&["--bmc", "10.0.0.1", "--user", "u", "--password-env", "PW"]).is_fleet());
        for args in [
            &["--machine", "a", "--machine", "b"][..],
            &["--machine", "a", "--canary", "1"],
            &["--machine", "a", "--max-parallel", "2"],
            &["--machine", "a", "--stop-after-failures", "1"],
            &["--selector", "rack=1"],
            &["--tenant", "t"],
        ] {
            assert!(target(args).is_fleet(), "{args:?}");
        }
        assert_eq!(Schedule::from(&target(&["--selector", "a=b"]).fleet), schedule(DEFAULT_MAX_PARALLEL, 0, None));
        assert_eq!(
            Schedule::from(
                &target(&["--selector", "a=b", "--max-parallel", "1", "--canary", "2", "--stop-after-failures", "3"])
                    .fleet
            ),
            schedule(1, 2, Some(3))
        );
    }

    #[test]
    fn a_fleet_run_is_a_rollout_of_the_chosen_machines_with_the_schedule() {
        let id = Ulid::new();
        let planned: Vec<Planned> = ["b", "a"]
            .iter()
            .enumerate()
            .map(|(i, m)| Planned { machine: (*m).to_owned(), batch: rollout::batch_id(id, i as u32, m) })
            .collect();
        let r = request(
            id,
            &planned,
            schedule(100_000, 1, Some(2)),
            &[Action::Power(bmcfleet_schema::PowerOp::On)],
            Duration::from_secs(60),
            false,
        );
        assert_eq!(r.machines, ["b", "a"], "run order kept");
        assert_eq!(
            (r.max_parallel, r.canary, r.canary_successes, r.stop_after_failures),
            (Some(rollout::MAX_PARALLEL), Some(1), None, Some(2))
        );
        assert_eq!((r.id, r.selector.as_ref(), r.batch_deadline), (Some(id), None, Some(Duration::from_secs(60))));
        assert_eq!(rollout::check_request(&r), Ok(()));
        let r = request(
            id,
            &planned,
            schedule(3, 0, None),
            &[Action::Power(bmcfleet_schema::PowerOp::On)],
            Duration::from_secs(60),
            false,
        );
        assert_eq!((r.max_parallel, r.canary, r.stop_after_failures), (Some(3), None, None));
        // A plan plans every machine: no canary, no failure limit.
        let r = request(
            id,
            &planned,
            schedule(3, 1, Some(2)),
            &[Action::Power(bmcfleet_schema::PowerOp::Off)],
            Duration::from_secs(60),
            true,
        );
        assert_eq!((r.plan, r.max_parallel, r.canary, r.stop_after_failures), (true, Some(3), None, None));
        assert_eq!(rollout::check_request(&r), Ok(()));

        // How the gateways' stop reads: the canaries that did not succeed, the failure limit.
        let req = request(
            id,
            &planned,
            schedule(3, 1, Some(2)),
            &[Action::Power(bmcfleet_schema::PowerOp::On)],
            Duration::from_secs(60),
            false,
        );
        let mut record = RolloutRecord::new(id, &req, "default", "operator", 2, 1);
        assert_eq!(stopped_by(&record, &[None, None]), None);
        record.stop = Some(StopReason::Canary);
        let failed = Outcome::finished("b", result(BatchState::Failed), Duration::ZERO);
        assert_eq!(stopped_by(&record, &[Some(failed), None]), Some(Stopped::Canary { failed: 1, canaries: 1 }));
        record.stop = Some(StopReason::Failures);
        assert_eq!(stopped_by(&record, &[None, None]), Some(Stopped::Failures(2)));
    }
}
