//! Rollouts: one request that runs the same actions on many registered
//! machines, in waves, driven server-side (see docs/ROLLOUTS.md).
//!
//! This module owns the wire types (request, record, parts, events,
//! replies) and the rollout's state machine, as pure functions with time
//! passed in, like [`crate::lifecycle`] for batches. Storing them (KV with
//! compare-and-set) is `bmcfleet_common::rollouts`'; driving them is the
//! gateway's `rollout_driver`.
//!
//! ```text
//! submit ──▶ Running ◀──resume── Paused
//!              │  └──pause──────────▲
//!              │ abort (any non-final state) ──▶ Aborting ──in flight done──▶ Aborted
//!              └─ every machine started and finished, or stopped (canary,
//!                 failures, deadline) and nothing in flight ──▶ Succeeded | Failed
//! ```
//!
//! Machine `i` (its index in the machine list fixed at submit) is started by
//! one compare-and-set of the record (`next` = i + 1, `i` in `in_flight`)
//! *before* its batch is submitted, with the id [`batch_id`] derives from the
//! rollout and the machine: a driver that dies between the two makes its
//! successor submit the same id again, which admission answers `duplicate`.
//! A machine leaves `in_flight` and is counted in the same write, so it is
//! counted once whoever records it.

use crate::action::{Action, BatchId, OnError};
use crate::error::ErrorBody;
use crate::result::BatchState;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use ulid::Ulid;

/// A rollout's id (a ULID, like a batch's).
pub type RolloutId = Ulid;

/// Most machines one rollout may name (the record holds counts, never the
/// list: see [`CHUNK`]).
pub const MAX_MACHINES: usize = 100_000;
/// Most batches of one rollout in flight at once.
pub const MAX_PARALLEL: u32 = 1_000;
/// `max_parallel` when the request gives none.
pub const DEFAULT_MAX_PARALLEL: u32 = 16;
/// Machine names per stored chunk of the machine list.
pub const CHUNK: u32 = 500;

/// What a producer submits to `<service-prefix>.rollout.submit`.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutRequest {
    /// Client-chosen id: submitting the same id again is a no-op answered
    /// with the existing rollout (`duplicate: true`).
    #[serde(default)]
    pub id: Option<RolloutId>,
    /// Every registered machine of the requesting tenant whose labels
    /// include all of these (`{}`: all of the tenant's machines), by name.
    /// Expanded once, at submit. Exactly one of `selector` and `machines`.
    #[serde(default)]
    pub selector: Option<BTreeMap<String, String>>,
    /// Machines by name, in run order (each once).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<String>,
    /// The actions each machine's batch runs.
    pub actions: Vec<Action>,
    #[serde(default)]
    pub on_error: OnError,
    /// Batches in flight at once (1..=1000, default 16).
    #[serde(default)]
    pub max_parallel: Option<u32>,
    /// The first `canary` machines run alone; the rest start only when at
    /// least `canary_successes` of them (default: all) succeeded.
    #[serde(default)]
    pub canary: Option<u32>,
    #[serde(default)]
    pub canary_successes: Option<u32>,
    /// Start no further machine once this many did not succeed.
    #[serde(default)]
    pub stop_after_failures: Option<u32>,
    /// No machine starts later than this after submit (running ones finish).
    #[serde(default, with = "crate::duration::option")]
    pub deadline: Option<Duration>,
    /// Each machine's batch deadline (from its admission).
    #[serde(default, with = "crate::duration::option")]
    pub batch_deadline: Option<Duration>,
    /// Every machine's batch runs in plan mode (`Batch.plan`): nothing
    /// state-changing is sent to any BMC; each finished machine records its
    /// plan in one line ([`PartView::plan`]). Canaries and
    /// `stop_after_failures` apply as in a run: a machine whose plan has an
    /// error (`unsupported`, unreachable) counts as failed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
}

/// A rollout's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutState {
    Running,
    /// No machine starts; those in flight finish and are recorded.
    Paused,
    /// Aborted by a producer: no machine starts, batches in flight are cancelled.
    Aborting,
    /// Every machine ran and succeeded.
    Succeeded,
    /// Finished with a machine that did not succeed, or stopped early.
    Failed,
    Aborted,
}

impl RolloutState {
    pub fn is_final(self) -> bool {
        matches!(self, RolloutState::Succeeded | RolloutState::Failed | RolloutState::Aborted)
    }
}

/// Why a rollout started no further machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Fewer canaries succeeded than `canary_successes`.
    Canary,
    /// `stop_after_failures` machines did not succeed.
    Failures,
    /// The rollout's deadline passed.
    Deadline,
    Aborted,
}

/// How one machine's part ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartOutcome {
    Succeeded,
    Failed,
    Cancelled,
    /// Admission refused the machine's batch: nothing was queued.
    Refused,
}

impl PartOutcome {
    /// The outcome of a finished batch.
    pub fn of(state: BatchState) -> PartOutcome {
        match state {
            BatchState::Succeeded => PartOutcome::Succeeded,
            BatchState::Cancelled => PartOutcome::Cancelled,
            BatchState::Failed | BatchState::Queued | BatchState::Running => PartOutcome::Failed,
        }
    }
}

/// Finished machines, by outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counts {
    pub succeeded: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub refused: u32,
}

impl Counts {
    pub fn finished(&self) -> u32 {
        self.succeeded + self.failed + self.cancelled + self.refused
    }

    pub fn not_succeeded(&self) -> u32 {
        self.finished() - self.succeeded
    }

    fn add(&mut self, o: PartOutcome) {
        match o {
            PartOutcome::Succeeded => self.succeeded += 1,
            PartOutcome::Failed => self.failed += 1,
            PartOutcome::Cancelled => self.cancelled += 1,
            PartOutcome::Refused => self.refused += 1,
        }
    }
}

/// What a rollout runs on each machine (stored once at submit, apart from
/// the record; it never changes).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutSpec {
    pub actions: Vec<Action>,
    #[serde(default)]
    pub on_error: OnError,
    #[serde(default, with = "crate::duration::option")]
    pub batch_deadline: Option<Duration>,
    /// Plan mode for every batch ([`RolloutRequest::plan`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
}

/// The rollout's record: settings, progress counters and the machines in
/// flight; small and of bounded size whatever the machine count (the machine
/// list and each machine's outcome are stored under keys of their own).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutRecord {
    pub id: RolloutId,
    pub tenant: String,
    /// Who submitted it: `tenant:<name>` or `operator`.
    pub requester: String,
    /// Action kinds (parameters stay in the spec).
    pub actions: Vec<String>,
    /// How many machines the rollout names.
    pub machines: u32,
    pub max_parallel: u32,
    pub canary: u32,
    pub canary_successes: u32,
    #[serde(default)]
    pub stop_after_failures: Option<u32>,
    #[serde(default)]
    pub deadline_at_ms: Option<u64>,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    #[serde(default)]
    pub finished_at_ms: Option<u64>,
    pub state: RolloutState,
    #[serde(default)]
    pub stop: Option<StopReason>,
    /// The canaries finished and enough succeeded.
    #[serde(default)]
    pub canary_passed: bool,
    /// Index of the next machine to start: machines `0..next` were started.
    pub next: u32,
    /// Machines started whose outcome is not recorded yet (at most `max_parallel`).
    #[serde(default)]
    pub in_flight: Vec<u32>,
    #[serde(default)]
    pub counts: Counts,
    /// A plan rollout ([`RolloutRequest::plan`]): nothing was changed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub plan: bool,
}

/// Why a rollout request is refused (before anything is stored).
pub fn check_request(req: &RolloutRequest) -> Result<(), String> {
    match (&req.selector, req.machines.is_empty()) {
        (Some(_), false) => return Err("give exactly one of `selector` and `machines`".into()),
        (None, true) => return Err("give `selector` (labels, `{}` for all machines) or `machines`".into()),
        _ => {}
    }
    if req.machines.len() > MAX_MACHINES {
        return Err(format!("a rollout names at most {MAX_MACHINES} machines"));
    }
    if let Some(bad) = req.machines.iter().find(|m| !crate::machine::valid_name(m)) {
        return Err(format!(
            "machines: `{}` is not a machine name ({})",
            bad.chars().take(64).collect::<String>(),
            crate::machine::NAME_RULE
        ));
    }
    for (k, v) in req.selector.iter().flatten() {
        if k.is_empty() || v.is_empty() || k.len() > 128 || v.len() > 256 {
            return Err("selector: labels are non-empty keys (at most 128 bytes) and values (at most 256)".into());
        }
    }
    if let Some(p) = req.max_parallel {
        if p == 0 || p > MAX_PARALLEL {
            return Err(format!("max_parallel must be between 1 and {MAX_PARALLEL}"));
        }
    }
    if let (Some(s), c) = (req.canary_successes, req.canary.unwrap_or(0)) {
        if s > c {
            return Err(format!("canary_successes ({s}) cannot exceed canary ({c})"));
        }
    }
    if req.stop_after_failures == Some(0) {
        return Err("stop_after_failures must be at least 1".into());
    }
    if req.deadline.is_some_and(|d| d.is_zero()) {
        return Err("deadline must be positive".into());
    }
    if let Some((i, _)) = req.actions.iter().enumerate().find(|(_, a)| a.secret_param().is_some()) {
        return Err(format!(
            "actions[{i}]: a rollout stores its actions until every machine ran them: \
             actions with secret parameters (passwords, credentialed URLs, raw data) go in batches of their own"
        ));
    }
    Ok(())
}

impl RolloutRecord {
    /// The record of a rollout accepted at `now_ms` for `machines` machines.
    pub fn new(
        id: RolloutId,
        req: &RolloutRequest,
        tenant: &str,
        requester: &str,
        machines: u32,
        now_ms: u64,
    ) -> RolloutRecord {
        let canary = req.canary.unwrap_or(0).min(machines);
        RolloutRecord {
            id,
            tenant: tenant.to_owned(),
            requester: requester.to_owned(),
            actions: req.actions.iter().map(|a| a.kind().to_owned()).collect(),
            machines,
            max_parallel: req.max_parallel.unwrap_or(DEFAULT_MAX_PARALLEL).clamp(1, MAX_PARALLEL),
            canary,
            canary_successes: req.canary_successes.unwrap_or(canary).min(canary),
            stop_after_failures: req.stop_after_failures,
            deadline_at_ms: req.deadline.map(|d| now_ms + d.as_millis() as u64),
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            finished_at_ms: None,
            state: RolloutState::Running,
            stop: None,
            canary_passed: canary == 0,
            plan: req.plan,
            next: 0,
            in_flight: vec![],
            counts: Counts::default(),
        }
    }

    /// Machines never started (so far).
    pub fn not_started(&self) -> u32 {
        self.machines - self.next
    }

    /// Decide whether starting stops for good (canary verdict, failures,
    /// deadline); returns whether the record changed.
    pub fn review(&mut self, now_ms: u64) -> bool {
        if self.state.is_final() || self.stop.is_some() {
            return false;
        }
        let before = (self.stop, self.canary_passed);
        if self.state == RolloutState::Aborting {
            self.stop = Some(StopReason::Aborted);
        } else if !self.canary_passed && self.next >= self.canary && self.in_flight.is_empty() {
            // Only canaries have finished so far.
            if self.counts.succeeded >= self.canary_successes {
                self.canary_passed = true;
            } else {
                self.stop = Some(StopReason::Canary);
            }
        }
        if self.stop.is_none() {
            if self.stop_after_failures.is_some_and(|k| self.counts.not_succeeded() >= k) {
                self.stop = Some(StopReason::Failures);
            } else if self.deadline_at_ms.is_some_and(|d| now_ms >= d) && self.next < self.machines {
                self.stop = Some(StopReason::Deadline);
            }
        }
        let changed = before != (self.stop, self.canary_passed);
        if changed {
            self.updated_at_ms = now_ms;
        }
        changed
    }

    /// Whether another machine may start now (call [`Self::review`] first).
    pub fn may_start(&self) -> bool {
        self.state == RolloutState::Running
            && self.stop.is_none()
            && self.next < self.machines
            && (self.in_flight.len() as u32) < self.max_parallel
            && (self.canary_passed || self.next < self.canary)
    }

    /// Claim the next machine: its index (the caller stores the record
    /// with compare-and-set *before* submitting that machine's batch).
    pub fn start(&mut self, now_ms: u64) -> Option<u32> {
        if !self.may_start() {
            return None;
        }
        let i = self.next;
        self.next += 1;
        self.in_flight.push(i);
        self.updated_at_ms = now_ms;
        Some(i)
    }

    /// Record machine `index`'s outcome; `false` when it was not in flight
    /// (already recorded: nothing changes).
    pub fn finish(&mut self, index: u32, outcome: PartOutcome, now_ms: u64) -> bool {
        let Some(pos) = self.in_flight.iter().position(|i| *i == index) else { return false };
        self.in_flight.remove(pos);
        self.counts.add(outcome);
        self.updated_at_ms = now_ms;
        true
    }

    /// Reach the final state when nothing is in flight and nothing more
    /// will start; returns whether it did.
    pub fn settle(&mut self, now_ms: u64) -> bool {
        if self.state.is_final() || !self.in_flight.is_empty() {
            return false;
        }
        if self.state == RolloutState::Aborting {
            self.state = RolloutState::Aborted;
        } else if self.next == self.machines || self.stop.is_some() {
            self.state =
                if self.counts.succeeded == self.machines { RolloutState::Succeeded } else { RolloutState::Failed };
        } else {
            return false;
        }
        self.finished_at_ms = Some(now_ms);
        self.updated_at_ms = now_ms;
        true
    }

    /// A producer's pause: `Err` names the state that forbids it.
    pub fn pause(&mut self, now_ms: u64) -> Result<bool, RolloutState> {
        match self.state {
            RolloutState::Running => {
                self.state = RolloutState::Paused;
                self.updated_at_ms = now_ms;
                Ok(true)
            }
            RolloutState::Paused => Ok(false),
            s => Err(s),
        }
    }

    pub fn resume(&mut self, now_ms: u64) -> Result<bool, RolloutState> {
        match self.state {
            RolloutState::Paused => {
                self.state = RolloutState::Running;
                self.updated_at_ms = now_ms;
                Ok(true)
            }
            RolloutState::Running => Ok(false),
            s => Err(s),
        }
    }

    pub fn abort(&mut self, now_ms: u64) -> Result<bool, RolloutState> {
        match self.state {
            RolloutState::Running | RolloutState::Paused => {
                self.state = RolloutState::Aborting;
                self.stop = Some(StopReason::Aborted);
                self.updated_at_ms = now_ms;
                Ok(true)
            }
            RolloutState::Aborting => Ok(false),
            s => Err(s),
        }
    }
}

/// One machine's recorded outcome (stored under its own key when it finished).
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutPart {
    pub index: u32,
    pub machine: String,
    pub batch: BatchId,
    pub outcome: PartOutcome,
    /// The first failed action's error, or the refusal.
    #[serde(default)]
    pub error: Option<ErrorBody>,
    pub finished_at_ms: u64,
    /// A plan rollout: the machine's plan in one line
    /// ([`crate::plan::results_line`]).
    #[serde(default)]
    pub plan: Option<String>,
}

impl RolloutPart {
    /// Machine `index`'s outcome from its batch's final result: the
    /// batch's state, its first failed action's error, and for a plan
    /// rollout (`plan`) the machine's plan in one line (none when no action
    /// has a result: the batch failed as a whole, its state and error tell).
    /// The one derivation the driver (from a `batch_finished` or a status
    /// record) and `rollout.status` (from the status record) share: a
    /// machine whose batch has a status record has no part of its own.
    pub fn of_result(
        index: u32,
        machine: String,
        batch: BatchId,
        result: &crate::BatchResult,
        plan: bool,
    ) -> RolloutPart {
        RolloutPart {
            index,
            machine,
            batch,
            outcome: PartOutcome::of(result.state),
            error: result.results.iter().find(|a| !a.is_ok()).and_then(|a| a.error.clone()),
            finished_at_ms: result.finished_at_ms,
            plan: plan.then(|| crate::plan::results_line(&result.results)).filter(|line| !line.is_empty()),
        }
    }
}

impl RolloutPart {
    /// Machine `index`'s outcome from its batch's status record, once that
    /// is final (`None` before): [`RolloutPart::of_result`] of its result.
    pub fn of_status(
        index: u32,
        machine: String,
        batch: BatchId,
        status: &crate::BatchStatus,
        plan: bool,
    ) -> Option<RolloutPart> {
        if !status.state.is_final() {
            return None;
        }
        Some(match &status.result {
            Some(result) => RolloutPart::of_result(index, machine, batch, result, plan),
            None => RolloutPart {
                index,
                machine,
                batch,
                outcome: PartOutcome::of(status.state),
                error: None,
                finished_at_ms: status.updated_at_ms,
                plan: None,
            },
        })
    }
}

/// A machine's place in a rollout, as `rollout.status` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartState {
    /// Not started (yet, or ever: see the rollout's `stop`).
    Pending,
    /// Its batch is queued or running.
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Refused,
}

impl From<PartOutcome> for PartState {
    fn from(o: PartOutcome) -> Self {
        match o {
            PartOutcome::Succeeded => PartState::Succeeded,
            PartOutcome::Failed => PartState::Failed,
            PartOutcome::Cancelled => PartState::Cancelled,
            PartOutcome::Refused => PartState::Refused,
        }
    }
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartView {
    pub index: u32,
    pub machine: String,
    pub batch: BatchId,
    pub state: PartState,
    #[serde(default)]
    pub error: Option<ErrorBody>,
    /// A plan rollout: the machine's plan in one line (`POST …`, `no
    /// change`, or an error code; per action when several), the same for
    /// the same plan on any machine.
    #[serde(default)]
    pub plan: Option<String>,
}

/// A plan rollout's finished machines grouped by identical plans: the plan
/// line and the machines that have it, largest group first.
pub fn plan_groups(parts: &[PartView]) -> Vec<(String, Vec<String>)> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in parts {
        let line = match (&p.plan, p.state) {
            (Some(line), _) => line.clone(),
            (None, PartState::Pending | PartState::Running) => continue,
            (None, state) => {
                let s = format!("{state:?}").to_lowercase();
                match &p.error {
                    Some(e) => format!("{s}: {}", e.code),
                    None => s,
                }
            }
        };
        groups.entry(line).or_default().push(p.machine.clone());
    }
    let mut out: Vec<(String, Vec<String>)> = groups.into_iter().collect();
    out.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.cmp(&b.0)));
    out
}

/// Reply of `rollout.submit`, `.status`, `.pause`, `.resume`, `.abort`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutView {
    pub rollout: RolloutRecord,
    /// A page of machines (`rollout.status` with `limit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartView>,
    /// `rollout.submit`: this id was submitted before; nothing new was stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
}

/// Body of `rollout.status`: the rollout, and machines `from..from+limit`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutStatusRequest {
    pub id: RolloutId,
    #[serde(default)]
    pub from: u32,
    /// At most [`CHUNK`]; 0: no machines.
    #[serde(default)]
    pub limit: u32,
}

/// Body of `rollout.list`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutListRequest {
    /// Finished rollouts too (default: only those not final).
    #[serde(default)]
    pub all: bool,
}

/// An event of a rollout, on `<prefix>.events.<tenant>.rollout.<id>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RolloutEvent {
    pub rollout: RolloutId,
    pub at_ms: u64,
    pub event: RolloutEventKind,
}

#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RolloutEventKind {
    RolloutStarted {
        machines: u32,
        actions: Vec<String>,
    },
    /// One machine finished (`counts` as recorded with it).
    RolloutProgress {
        index: u32,
        machine: String,
        batch: BatchId,
        outcome: PartOutcome,
        counts: Counts,
        #[serde(default)]
        error: Option<ErrorBody>,
    },
    RolloutPaused,
    RolloutResumed,
    RolloutAborting,
    RolloutFinished {
        state: RolloutState,
        counts: Counts,
        not_started: u32,
        #[serde(default)]
        stop: Option<StopReason>,
    },
}

impl RolloutEventKind {
    pub fn name(&self) -> &'static str {
        match self {
            RolloutEventKind::RolloutStarted { .. } => "rollout_started",
            RolloutEventKind::RolloutProgress { .. } => "rollout_progress",
            RolloutEventKind::RolloutPaused => "rollout_paused",
            RolloutEventKind::RolloutResumed => "rollout_resumed",
            RolloutEventKind::RolloutAborting => "rollout_aborting",
            RolloutEventKind::RolloutFinished { .. } => "rollout_finished",
        }
    }
}

/// The batch id of machine `machine` (at `index`) of rollout `rollout`:
/// ULID-shaped, the rollout's timestamp, 80 bits derived from the rollout id,
/// the index and the name. The same inputs always give the same id, so a
/// resubmission after a crash is a duplicate, never a second run.
pub fn batch_id(rollout: RolloutId, index: u32, machine: &str) -> BatchId {
    // Two FNV-1a passes with different offsets over the same bytes: 128 bits
    // to take 80 from; uniqueness within a rollout is what matters, and the
    // rollout id's own 80 random bits go into both.
    let mut bytes = Vec::with_capacity(16 + 4 + machine.len());
    bytes.extend_from_slice(&rollout.to_bytes());
    bytes.extend_from_slice(&index.to_be_bytes());
    bytes.extend_from_slice(machine.as_bytes());
    let fnv = |seed: u64| bytes.iter().fold(seed, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3));
    let (a, b) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142));
    let random = ((u128::from(a) << 64) | u128::from(b)) & ((1u128 << 80) - 1);
    Ulid::from_parts(rollout.timestamp_ms(), random)
}

/// Request body of `rollout.pause`, `.resume`, `.abort`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RolloutIdRequest {
    pub id: RolloutId,
}

/// `machines` in chunks of [`CHUNK`] (the stored machine list).
pub fn chunks(machines: &[String]) -> impl Iterator<Item = (u32, &[String])> {
    machines.chunks(CHUNK as usize).enumerate().map(|(i, c)| (i as u32, c))
}

/// Which chunk holds machine `index`, and where in it.
pub fn chunk_of(index: u32) -> (u32, usize) {
    (index / CHUNK, (index % CHUNK) as usize)
}

/// Selector matching: every label of `selector` with its value.
pub fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::PowerOp;

    fn request(canary: u32, max_parallel: u32, stop: Option<u32>) -> RolloutRequest {
        RolloutRequest {
            id: None,
            selector: None,
            machines: vec!["a".into()],
            actions: vec![Action::Power(PowerOp::On)],
            on_error: OnError::Stop,
            max_parallel: Some(max_parallel),
            canary: Some(canary),
            canary_successes: None,
            stop_after_failures: stop,
            deadline: None,
            batch_deadline: None,
            plan: false,
        }
    }

    fn record(machines: u32, canary: u32, max_parallel: u32, stop: Option<u32>) -> RolloutRecord {
        RolloutRecord::new(Ulid::new(), &request(canary, max_parallel, stop), "t", "operator", machines, 1)
    }

    /// Start what may start (reviewing first, as the driver does).
    fn starts(r: &mut RolloutRecord) -> Vec<u32> {
        r.review(2);
        std::iter::from_fn(|| r.start(2)).collect()
    }

    #[test]
    fn canaries_run_alone_then_waves_of_max_parallel() {
        let mut r = record(7, 2, 3, None);
        assert_eq!(starts(&mut r), [0, 1], "the canaries alone, although 3 may run");
        assert!(r.finish(0, PartOutcome::Succeeded, 3));
        assert_eq!(starts(&mut r), [] as [u32; 0], "one canary still runs");
        assert!(r.finish(1, PartOutcome::Succeeded, 3));
        assert_eq!(starts(&mut r), [2, 3, 4]);
        assert!(r.canary_passed);
        assert!(!r.finish(1, PartOutcome::Succeeded, 3), "recorded once");
        assert!(r.finish(3, PartOutcome::Succeeded, 3));
        assert_eq!(starts(&mut r), [5]);
        for i in [2, 4, 5] {
            r.finish(i, PartOutcome::Succeeded, 4);
        }
        assert!(!r.settle(5), "machine 6 has not started");
        assert_eq!(starts(&mut r), [6]);
        r.finish(6, PartOutcome::Succeeded, 6);
        assert!(r.settle(7));
        assert_eq!((r.state, r.counts.succeeded, r.finished_at_ms), (RolloutState::Succeeded, 7, Some(7)));
    }

    #[test]
    fn a_failed_canary_stops_the_rollout_unless_the_criterion_allows_it() {
        let mut r = record(5, 2, 4, None);
        starts(&mut r);
        r.finish(0, PartOutcome::Failed, 3);
        r.finish(1, PartOutcome::Succeeded, 3);
        assert_eq!(starts(&mut r), [] as [u32; 0]);
        assert_eq!(r.stop, Some(StopReason::Canary));
        assert!(r.settle(4));
        assert_eq!((r.state, r.not_started()), (RolloutState::Failed, 3));

        let mut req = request(2, 4, None);
        req.canary_successes = Some(1);
        let mut r = RolloutRecord::new(Ulid::new(), &req, "t", "operator", 5, 1);
        starts(&mut r);
        r.finish(0, PartOutcome::Failed, 3);
        r.finish(1, PartOutcome::Succeeded, 3);
        assert_eq!(starts(&mut r), [2, 3, 4], "one success of two canaries is enough");
    }

    #[test]
    fn failures_and_deadline_stop_new_starts_and_running_ones_finish() {
        let mut r = record(6, 0, 2, Some(2));
        assert_eq!(starts(&mut r), [0, 1]);
        r.finish(0, PartOutcome::Failed, 3);
        assert_eq!(starts(&mut r), [2]);
        r.finish(2, PartOutcome::Refused, 3);
        assert_eq!(starts(&mut r), [] as [u32; 0]);
        assert_eq!(r.stop, Some(StopReason::Failures));
        assert!(!r.settle(4), "machine 1 still runs");
        r.finish(1, PartOutcome::Succeeded, 5);
        assert!(r.settle(5));
        assert_eq!((r.state, r.not_started()), (RolloutState::Failed, 3));

        let mut req = request(0, 1, None);
        req.deadline = Some(Duration::from_millis(10));
        let mut r = RolloutRecord::new(Ulid::new(), &req, "t", "operator", 3, 100);
        assert_eq!(starts(&mut r), [0]);
        r.finish(0, PartOutcome::Succeeded, 105);
        r.review(110);
        assert_eq!((r.start(110), r.stop), (None, Some(StopReason::Deadline)));
    }

    #[test]
    fn pause_resume_and_abort() {
        let mut r = record(4, 0, 1, None);
        assert_eq!(starts(&mut r), [0]);
        assert_eq!(r.pause(3), Ok(true));
        assert_eq!(r.pause(3), Ok(false));
        r.finish(0, PartOutcome::Succeeded, 4);
        assert_eq!(starts(&mut r), [] as [u32; 0], "paused");
        assert!(!r.settle(4), "a paused rollout is not finished");
        assert_eq!(r.resume(5), Ok(true));
        assert_eq!(starts(&mut r), [1]);
        assert_eq!(r.abort(6), Ok(true));
        assert_eq!(starts(&mut r), [] as [u32; 0]);
        assert!(!r.settle(6), "machine 1 in flight");
        r.finish(1, PartOutcome::Cancelled, 7);
        assert!(r.settle(7));
        assert_eq!((r.state, r.stop, r.not_started()), (RolloutState::Aborted, Some(StopReason::Aborted), 2));
        assert_eq!(r.resume(8), Err(RolloutState::Aborted));
        assert_eq!(r.abort(8), Err(RolloutState::Aborted));
    }

    #[test]
    fn batch_ids_are_stable_distinct_and_ulid_shaped() {
        let r = Ulid::new();
        let a = batch_id(r, 0, "node-a");
        assert_eq!(a, batch_id(r, 0, "node-a"));
        assert_eq!(a.timestamp_ms(), r.timestamp_ms());
        let mut seen = std::collections::HashSet::new();
        for i in 0..20_000u32 {
            assert!(seen.insert(batch_id(r, i, &format!("node-{i}"))));
        }
        assert_ne!(a, batch_id(Ulid::new(), 0, "node-a"));
        assert_ne!(a, batch_id(r, 1, "node-a"));
    }

    #[test]
    fn requests_are_checked() {
        let ok = request(0, 1, None);
        assert_eq!(check_request(&ok), Ok(()));
        let bad = |f: fn(&mut RolloutRequest)| {
            let mut r = request(0, 1, None);
            f(&mut r);
            check_request(&r).unwrap_err()
        };
        assert!(bad(|r| r.selector = Some(Default::default())).contains("exactly one"));
        assert!(bad(|r| r.machines.clear()).contains("selector"));
        assert!(bad(|r| r.max_parallel = Some(0)).contains("max_parallel"));
        assert!(bad(|r| r.max_parallel = Some(MAX_PARALLEL + 1)).contains("max_parallel"));
        assert!(bad(|r| r.canary_successes = Some(1)).contains("canary_successes"));
        assert!(bad(|r| r.stop_after_failures = Some(0)).contains("stop_after_failures"));
        assert!(bad(|r| r.machines = vec!["Bad_Name".into()]).contains("machine name"));
        let mut sel = request(0, 1, None);
        sel.machines.clear();
        sel.selector = Some(Default::default());
        assert_eq!(check_request(&sel), Ok(()), "`{{}}` selects every machine of the tenant");
    }

    #[test]
    fn machine_lists_are_chunked() {
        let names: Vec<String> = (0..1201).map(|i| format!("m{i}")).collect();
        let c: Vec<(u32, usize)> = chunks(&names).map(|(i, c)| (i, c.len())).collect();
        assert_eq!(c, [(0, 500), (1, 500), (2, 201)]);
        assert_eq!(chunk_of(1000), (2, 0));
        assert_eq!(chunk_of(499), (0, 499));
    }
}
