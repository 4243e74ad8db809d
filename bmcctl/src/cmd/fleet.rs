//! A fleet run: one action command on many registered machines, one batch
//! per machine, each through the gateway's `submit` like any other batch.
//!
//! Owns: which machines (the registry, read once: the `--machine` names, or
//! every machine matching `--selector` and `--tenant`), the schedule
//! (`--max-parallel`, `--canary`, `--stop-after-failures`, Ctrl-C) and each
//! machine's [`Outcome`]. It never writes the registry. How a run reads is
//! [`crate::progress`] (the bar, on a terminal's stderr) and
//! [`crate::output`] (the summary, `--output table|wide`); `--output json`
//! prints one [`Outcome`] per line as each machine finishes.
//!
//! Every batch gets its id here, before it is sent: a machine whose waiting
//! submit times out or loses its gateway is followed by status rather than
//! guessed at, and a run left with a second Ctrl-C can say which batches
//! still run.

use crate::cli::{FleetArgs, Target};
use crate::client::Client;
use crate::Usage;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::{
    Action, ActionResult, Batch, BatchResult, BatchState, Encoding, ErrorBody, ErrorCode, IdRequest, Machine, OnError,
    Reply,
};
use futures::stream::{FuturesUnordered, Stream, StreamExt};
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use ulid::Ulid;

/// `--max-parallel` when not given.
pub const DEFAULT_MAX_PARALLEL: usize = 16;

/// How often the progress bar is redrawn while nothing happens (its clock moves).
const TICK: Duration = Duration::from_millis(250);

/// How often a batch that bmcctl lost track of is looked up by status.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

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

/// Run `run_one` for every planned machine under `schedule`; returns every
/// machine's outcome (in plan order) and why the run stopped early, if it did.
///
/// Machines start in order, at most `max_parallel` at once. With a canary,
/// the first `canary` machines run alone and the others start only if all
/// of them succeeded. Once `stop_after_failures` machines have not
/// succeeded, or on the first interrupt, no further machine starts and those
/// running finish; on the second interrupt the run returns at once and
/// reports the running ones as [`Verdict::Running`] (their batches go on).
pub async fn run_all<F, Fut, I>(
    planned: &[Planned],
    schedule: Schedule,
    mut run_one: F,
    interrupts: I,
    mut report: impl FnMut(Progress<'_>),
) -> (Vec<Outcome>, Option<Stopped>)
where
    F: FnMut(Planned) -> Fut,
    Fut: Future<Output = Outcome>,
    I: Stream<Item = ()> + Unpin,
{
    let n = planned.len();
    let max_parallel = schedule.max_parallel.max(1);
    let canaries = schedule.canary.min(n);
    let mut outcomes: Vec<Option<Outcome>> = vec![None; n];
    let mut running = FuturesUnordered::new();
    let mut next = 0;
    // Machines allowed to start so far: the canaries, then all.
    let mut gate = if canaries == 0 { n } else { canaries };
    let mut failures = 0;
    let mut stopped = None;
    let mut interrupts = interrupts.fuse();
    let mut interrupted = 0;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut left = false;
    loop {
        while stopped.is_none() && next < gate && running.len() < max_parallel {
            let i = next;
            next += 1;
            report(Progress::Started(&planned[i]));
            let run = run_one(planned[i].clone());
            running.push(async move { (i, run.await) });
        }
        if running.is_empty() {
            if stopped.is_none() && next == gate && gate < n {
                let failed = outcomes[..canaries].iter().flatten().filter(|o| !o.ok()).count();
                if failed == 0 {
                    gate = n;
                    continue;
                }
                let why = Stopped::Canary { failed, canaries };
                stopped = Some(why);
                report(Progress::Stopping(why));
            }
            break;
        }
        tokio::select! {
            Some((i, outcome)) = running.next() => {
                report(Progress::Finished(&outcome));
                if !outcome.ok() {
                    failures += 1;
                    if let (Some(k), None) = (schedule.stop_after_failures, stopped) {
                        if failures >= k {
                            stopped = Some(Stopped::Failures(k));
                            report(Progress::Stopping(Stopped::Failures(k)));
                        }
                    }
                }
                outcomes[i] = Some(outcome);
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
            }
            _ = tick.tick() => report(Progress::Tick),
        }
    }
    drop(running);
    let outcomes = outcomes
        .into_iter()
        .zip(planned)
        .enumerate()
        .map(|(i, (o, p))| match o {
            Some(o) => o,
            None if left && i < next => Outcome::running(&p.machine, p.batch),
            None => Outcome::not_started(&p.machine),
        })
        .collect();
    (outcomes, stopped)
}

/// Submit one machine's batch and wait for its final result.
async fn submit_one(client: &Client, planned: Planned, actions: &[Action], deadline: Duration) -> Outcome {
    let started = Instant::now();
    let machine = planned.machine.as_str();
    let batch = Batch {
        id: Some(planned.batch),
        machine: Some(machine.to_owned()),
        bmc: None,
        actions: actions.to_vec(),
        on_error: OnError::Stop,
        deadline: Some(deadline),
    };
    let body = match Encoding::Json.encode(&batch) {
        Ok(b) => b,
        Err(e) => {
            return Outcome::refused(
                machine,
                ErrorBody::new(ErrorCode::Internal, format!("cannot encode the batch: {e}")),
                started.elapsed(),
            )
        }
    };
    let lost = match client.request("submit", true, body, deadline + Duration::from_secs(10)).await {
        Ok(Reply::Result(r)) => return Outcome::finished(machine, r, started.elapsed()),
        // The gateway stopped, lost its subscription or held the request
        // longer than it may: the batch may be queued. Its status says.
        Ok(Reply::Error(e)) if matches!(e.code, ErrorCode::Timeout | ErrorCode::Unavailable) => e,
        Ok(Reply::Error(e)) => return Outcome::refused(machine, e, started.elapsed()),
        Ok(other) => {
            ErrorBody::new(ErrorCode::Internal, format!("the gateway answered a waiting submit with {other:?}"))
        }
        Err(e) => {
            let no_gateway = e
                .downcast_ref::<async_nats::RequestError>()
                .is_some_and(|r| r.kind() == async_nats::RequestErrorKind::NoResponders);
            let body = ErrorBody::new(ErrorCode::Unavailable, format!("{e:#}"));
            if no_gateway {
                return Outcome::refused(machine, body, started.elapsed());
            }
            body
        }
    };
    follow(client, machine, planned.batch, lost, started, deadline).await
}

/// Look a batch up by status until it is final, or until its deadline (and
/// a margin) has passed.
async fn follow(
    client: &Client,
    machine: &str,
    id: Ulid,
    lost: ErrorBody,
    started: Instant,
    deadline: Duration,
) -> Outcome {
    let give_up = started + deadline + Duration::from_secs(30);
    let body = serde_json::to_vec(&IdRequest { id }).expect("an id request serialises");
    loop {
        match client.request("status", false, body.clone(), super::status::TIMEOUT).await {
            Ok(Reply::Status(s)) => {
                if let (true, Some(r)) = (s.state.is_final(), s.result) {
                    return Outcome::finished(machine, r, started.elapsed());
                }
            }
            // Never admitted: the first answer was a refusal after all.
            Ok(Reply::Error(e)) if e.code == ErrorCode::NotFound => {
                return Outcome::refused(machine, lost, started.elapsed())
            }
            _ => {}
        }
        if Instant::now() >= give_up {
            return Outcome::unknown(machine, id, lost, started.elapsed());
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// Ctrl-C presses, as a stream.
fn interrupts() -> impl Stream<Item = ()> + Unpin {
    futures::stream::unfold((), |()| async { tokio::signal::ctrl_c().await.ok().map(|()| ((), ())) }).boxed()
}

/// Run `actions` on the machines `target` chooses: one batch per machine.
pub async fn run(
    client: &Client,
    topology: &TopologyArgs,
    target: &Target,
    actions: Vec<Action>,
) -> anyhow::Result<ExitCode> {
    let registry = super::machine::registry(client.nats.clone(), topology).await?;
    let planned: Vec<Planned> =
        select(&registry, target)?.into_iter().map(|machine| Planned { machine, batch: Ulid::new() }).collect();
    let schedule = Schedule::from(&target.fleet);
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
    let run_one = |p: Planned| submit_one(client, p, &actions, target.deadline);
    let (outcomes, stopped) = run_all(&planned, schedule, run_one, interrupts(), report).await;
    bar.finish();
    if format.is_json() {
        for o in outcomes.iter().filter(|o| matches!(o.result, Verdict::NotStarted | Verdict::Running)) {
            println!("{}", serde_json::to_string(o)?);
        }
    } else {
        print!("{}", crate::output::fleet_summary(&outcomes, stopped, schedule, color, format.is_wide()));
    }
    Ok(if outcomes.iter().all(Outcome::ok) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn plan(names: &[&str]) -> Vec<Planned> {
        names.iter().map(|n| Planned { machine: (*n).to_owned(), batch: Ulid::new() }).collect()
    }

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

    /// Machines whose name starts with `bad` fail; the others succeed.
    async fn by_name(p: Planned) -> Outcome {
        tokio::task::yield_now().await;
        let state = if p.machine.starts_with("bad") { BatchState::Failed } else { BatchState::Succeeded };
        Outcome::finished(&p.machine, result(state), Duration::from_millis(5))
    }

    fn never() -> futures::stream::Pending<()> {
        futures::stream::pending()
    }

    fn schedule(max_parallel: usize, canary: usize, stop_after_failures: Option<usize>) -> Schedule {
        Schedule { max_parallel, canary, stop_after_failures }
    }

    fn verdicts(outcomes: &[Outcome]) -> Vec<Verdict> {
        outcomes.iter().map(|o| o.result).collect()
    }

    #[tokio::test]
    async fn at_most_max_parallel_run_at_once_and_all_of_them_do() {
        for limit in [1, 3, 16] {
            let (now, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
            let run_one = |p: Planned| {
                let (now, peak) = (&now, &peak);
                async move {
                    peak.fetch_max(now.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    for _ in 0..3 {
                        tokio::task::yield_now().await;
                    }
                    now.fetch_sub(1, Ordering::SeqCst);
                    by_name(p).await
                }
            };
            let planned = plan(&["a", "b", "c", "d", "e", "f", "g", "h"]);
            let (outcomes, stopped) = run_all(&planned, schedule(limit, 0, None), run_one, never(), |_| {}).await;
            assert_eq!((verdicts(&outcomes), stopped), (vec![Verdict::Succeeded; 8], None));
            assert_eq!(peak.load(Ordering::SeqCst), limit.min(8), "limit {limit}");
        }
    }

    #[tokio::test]
    async fn a_failing_canary_stops_the_run_and_a_passing_one_lets_it_go_on() {
        let started = std::cell::RefCell::new(vec![]);
        let note = |p: Progress<'_>| {
            if let Progress::Started(p) = p {
                started.borrow_mut().push(p.machine.clone());
            }
        };
        let planned = plan(&["bad-1", "ok-2", "ok-3", "ok-4"]);
        let (outcomes, stopped) = run_all(&planned, schedule(16, 1, None), by_name, never(), note).await;
        assert_eq!(stopped, Some(Stopped::Canary { failed: 1, canaries: 1 }));
        assert_eq!(
            verdicts(&outcomes),
            [Verdict::Failed, Verdict::NotStarted, Verdict::NotStarted, Verdict::NotStarted]
        );
        assert_eq!(*started.borrow(), ["bad-1"], "only the canary was submitted");

        // Canaries run alone, even when more could run at once; then the rest.
        let planned = plan(&["ok-1", "ok-2", "bad-3", "ok-4"]);
        let order = std::cell::RefCell::new(vec![]);
        let note = |p: Progress<'_>| match p {
            Progress::Started(p) => order.borrow_mut().push(format!("start {}", p.machine)),
            Progress::Finished(o) => order.borrow_mut().push(format!("end {}", o.machine)),
            _ => {}
        };
        let (outcomes, stopped) = run_all(&planned, schedule(16, 2, None), by_name, never(), note).await;
        assert_eq!(
            (verdicts(&outcomes), stopped),
            (vec![Verdict::Succeeded, Verdict::Succeeded, Verdict::Failed, Verdict::Succeeded], None)
        );
        let order = order.borrow();
        let first_after = order.iter().position(|e| e == "start bad-3").unwrap();
        assert!(
            order[..first_after].contains(&"end ok-1".to_owned())
                && order[..first_after].contains(&"end ok-2".to_owned()),
            "{order:?}"
        );
    }

    #[tokio::test]
    async fn after_k_failures_nothing_new_starts_and_running_machines_finish() {
        // One at a time: the second failure stops the run.
        let planned = plan(&["ok-1", "bad-2", "bad-3", "ok-4", "ok-5"]);
        let (outcomes, stopped) = run_all(&planned, schedule(1, 0, Some(2)), by_name, never(), |_| {}).await;
        assert_eq!(stopped, Some(Stopped::Failures(2)));
        assert_eq!(
            verdicts(&outcomes),
            [Verdict::Succeeded, Verdict::Failed, Verdict::Failed, Verdict::NotStarted, Verdict::NotStarted]
        );
        // Three at once: the first failure (the quickest here) stops new
        // starts; the two already running finish.
        let quick_failure = |p: Planned| async move {
            if !p.machine.starts_with("bad") {
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
            }
            by_name(p).await
        };
        let planned = plan(&["bad-1", "ok-2", "ok-3", "ok-4"]);
        let (outcomes, stopped) = run_all(&planned, schedule(3, 0, Some(1)), quick_failure, never(), |_| {}).await;
        assert_eq!(stopped, Some(Stopped::Failures(1)));
        assert_eq!(verdicts(&outcomes), [Verdict::Failed, Verdict::Succeeded, Verdict::Succeeded, Verdict::NotStarted]);
    }

    #[tokio::test(start_paused = true)]
    async fn one_interrupt_lets_running_machines_finish_two_leave_them_running() {
        let slow = |p: Planned| async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            by_name(p).await
        };
        let planned = plan(&["a", "b", "c", "d"]);
        let once = futures::stream::once(async {}).chain(futures::stream::pending());
        let (outcomes, stopped) = run_all(&planned, schedule(2, 0, None), slow, Box::pin(once), |_| {}).await;
        assert_eq!(stopped, Some(Stopped::Interrupted));
        assert_eq!(
            verdicts(&outcomes),
            [Verdict::Succeeded, Verdict::Succeeded, Verdict::NotStarted, Verdict::NotStarted]
        );

        let twice = futures::stream::iter([(), ()]).chain(futures::stream::pending());
        let (outcomes, _) = run_all(&planned, schedule(2, 0, None), slow, Box::pin(twice), |_| {}).await;
        assert_eq!(verdicts(&outcomes), [Verdict::Running, Verdict::Running, Verdict::NotStarted, Verdict::NotStarted]);
        assert_eq!(outcomes[0].batch, Some(planned[0].batch), "a running machine names its batch");
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
}
