//! The batch status lifecycle, in one place: every change a gateway or a
//! worker makes to a [`BatchStatus`] is one of these transitions (pure
//! functions, time passed in); `bmcfleet_common::status` stores them with
//! compare-and-set.
//!
//! ```text
//! (none) ──queued──▶ Queued ──claim──▶ Running ──finish──▶ Succeeded | Failed | Cancelled
//!   │                  │                 │  ▲ claim (redelivery, another worker)
//!   └─────running──────┼────────────────▶┘  │
//!                      └──cancel──▶ Cancelled (queued: at once)
//!                         cancel on Running: cancel_requested, the worker finishes it
//! unreadable record ──interrupted──▶ Failed (every action `interrupted`, none run again)
//! Queued, unreadable job ──unread──▶ Failed (every action `internal`, none run)
//! ```
//!
//! An action that starts a long-running BMC task ([`crate::Action::watches_task`]:
//! a firmware update) records, inside `Running`, first that its request may
//! leave ([`BatchStatus::task_requested`], written before the request), then
//! the task the BMC named ([`BatchStatus::task_started`]). A worker taking
//! the batch over reads [`BatchStatus::task_resume`]: run it, find the task
//! on the BMC, or watch the recorded one, but never request it again.

use crate::action::Job;
use crate::error::{ErrorBody, ErrorCode};
use crate::result::{ActionResult, BatchResult, BatchState, BatchStatus, TaskRecord};

/// What the record says about the BMC task of the action at an index, for
/// the worker about to run it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskResume {
    /// Its request never left (nothing recorded): run the action.
    Fresh,
    /// Its request may have left but no task was recorded: look for the
    /// task on the BMC; never request again (`interrupted` if not found).
    Find,
    /// Watch this task (a path on the BMC); never request again.
    Watch(String),
}

/// What a cancel request did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancel {
    /// The batch was queued: it is now finished as `Cancelled`.
    Finished,
    /// The batch is running: its worker stops after the current action.
    Requested,
}

impl BatchStatus {
    fn new(job: &Job, state: BatchState, now_ms: u64) -> BatchStatus {
        let actions = job.batch.actions.iter().map(|a| a.kind().to_owned()).collect();
        let mut s = BatchStatus::blank(job.id, job.key().to_string(), job.tenant.clone(), actions, now_ms);
        s.state = state;
        s.admitted_at_ms = job.admitted_at_ms;
        s
    }

    /// A `Queued` record of batch `id` with nothing run, admitted at 0.
    fn blank(id: crate::BatchId, bmc: String, tenant: String, actions: Vec<String>, now_ms: u64) -> BatchStatus {
        BatchStatus {
            id,
            bmc,
            tenant,
            state: BatchState::Queued,
            results: vec![],
            in_progress: None,
            task: None,
            cancel_requested: false,
            actions,
            stream_sequence: None,
            worker: None,
            deliveries: 0,
            admitted_at_ms: 0,
            updated_at_ms: now_ms,
            result: None,
        }
    }

    /// The gateway queued `job` at `stream_sequence`.
    pub fn queued(job: &Job, stream_sequence: u64, now_ms: u64) -> BatchStatus {
        BatchStatus { stream_sequence: Some(stream_sequence), ..BatchStatus::new(job, BatchState::Queued, now_ms) }
    }

    /// A worker starts `job` and finds no record (the gateway's write was lost or is late).
    pub fn running(job: &Job, worker: &str, now_ms: u64) -> BatchStatus {
        let mut s = BatchStatus::new(job, BatchState::Queued, now_ms);
        s.claim(worker, now_ms);
        s
    }

    /// A rollout's driver cancels its machine's batch `id` that no worker
    /// has claimed (a batch queued with [`Job::record_at_claim`] has no
    /// record until its claim): the record is created already `Cancelled`,
    /// every action `cancelled`, so the worker that pulls the job finds it
    /// and runs nothing. `admitted_at_ms` is 0 (the driver does not know
    /// the job's): a worker reads such a record as another admission's and
    /// acknowledges its copy unrun.
    pub fn cancelled_unclaimed(
        id: crate::BatchId,
        bmc: String,
        tenant: String,
        actions: Vec<String>,
        now_ms: u64,
    ) -> BatchStatus {
        let mut s = BatchStatus::blank(id, bmc, tenant, actions, now_ms);
        let _ = s.cancel(now_ms);
        s
    }

    /// A worker starts (or resumes) the batch: one more delivery.
    pub fn claim(&mut self, worker: &str, now_ms: u64) {
        self.state = BatchState::Running;
        self.worker = Some(worker.to_owned());
        self.deliveries += 1;
        self.updated_at_ms = now_ms;
    }

    /// The request that starts action `index`'s BMC task is about to leave
    /// (written, CAS, before it is sent).
    pub fn task_requested(&mut self, index: u32) {
        self.task = Some(Box::new(TaskRecord { index, requested: true, uri: None }));
    }

    /// The BMC named action `index`'s task.
    pub fn task_started(&mut self, index: u32, uri: &str) {
        self.task = Some(Box::new(TaskRecord { index, requested: true, uri: Some(uri.to_owned()) }));
    }

    /// What a worker about to run action `index` must do about its BMC task.
    pub fn task_resume(&self, index: u32) -> TaskResume {
        match self.task.as_deref() {
            Some(TaskRecord { index: i, uri: Some(uri), .. }) if *i == index => TaskResume::Watch(uri.clone()),
            Some(TaskRecord { index: i, requested: true, .. }) if *i == index => TaskResume::Find,
            _ => TaskResume::Fresh,
        }
    }

    /// A producer asks to cancel. `Err` with the final state when the batch
    /// already finished.
    pub fn cancel(&mut self, now_ms: u64) -> Result<Cancel, BatchState> {
        if self.state.is_final() {
            return Err(self.state);
        }
        self.updated_at_ms = now_ms;
        self.cancel_requested = true;
        if self.state != BatchState::Queued {
            return Ok(Cancel::Requested);
        }
        let results = self
            .actions
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                ActionResult::err(
                    i as u32,
                    kind,
                    None,
                    ErrorBody::new(ErrorCode::Cancelled, "cancelled before it ran"),
                    0,
                )
            })
            .collect();
        self.close(results, "gateway", now_ms);
        Ok(Cancel::Finished)
    }

    /// The worker has a result for every action: the batch's final state
    /// follows from them (any `cancelled` → Cancelled, any failure → Failed).
    pub fn finish(&mut self, worker: &str, now_ms: u64) -> &BatchResult {
        assert_eq!(self.results.len(), self.actions.len(), "a batch finishes with one result per action");
        let results = std::mem::take(&mut self.results);
        self.close(results, worker, now_ms)
    }

    /// The stored record cannot be read: whether and how far the batch ran
    /// is unknown, so no action of it runs again. It finishes as Failed with
    /// every action `interrupted`.
    pub fn unreadable(job: &Job, worker: &str, now_ms: u64) -> BatchStatus {
        let mut s = BatchStatus::running(job, worker, now_ms);
        let results = s
            .actions
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let why = "the batch's status record was unreadable: whether this action ran is unknown, so it was not run (again)";
                ActionResult::err(i as u32, kind, None, ErrorBody::new(ErrorCode::Interrupted, why), 0)
            })
            .collect();
        s.close(results, worker, now_ms);
        s
    }

    /// The job of this queued batch cannot be read by the worker that
    /// pulled it (`why`: a release that seals a field it does not know, a
    /// corrupt message): nothing of it runs, and it finishes as Failed with
    /// every action `internal`, saying why, instead of staying queued with
    /// no result. `None` when the record is not `Queued` (it ran, or is
    /// running, elsewhere: not this worker's to finish).
    pub fn unread(mut self, worker: &str, now_ms: u64, why: &str) -> Option<BatchStatus> {
        if self.state != BatchState::Queued {
            return None;
        }
        let message = format!("worker {worker} could not read this batch's job ({why}); nothing of it was run (is the worker older than the gateway?)");
        let results = self
            .actions
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                ActionResult::err(i as u32, kind, None, ErrorBody::new(ErrorCode::Internal, message.clone()), 0)
            })
            .collect();
        self.close(results, worker, now_ms);
        Some(self)
    }

    fn close(&mut self, results: Vec<ActionResult>, worker: &str, now_ms: u64) -> &BatchResult {
        let code = |r: &ActionResult| r.error.as_ref().map(|e| e.code);
        let state = if results.iter().any(|r| code(r) == Some(ErrorCode::Cancelled)) {
            BatchState::Cancelled
        } else if results.iter().any(|r| !r.is_ok()) {
            BatchState::Failed
        } else {
            BatchState::Succeeded
        };
        self.state = state;
        self.in_progress = None;
        self.task = None;
        self.updated_at_ms = now_ms;
        self.result = Some(BatchResult {
            id: self.id,
            bmc: self.bmc.clone(),
            state,
            results: results.clone(),
            worker: worker.to_owned(),
            deliveries: self.deliveries,
            admitted_at_ms: self.admitted_at_ms,
            finished_at_ms: now_ms,
        });
        self.results = results;
        self.result.as_ref().expect("set above")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Action, Batch, BmcTarget, Credentials, OnError, PowerOp, Protocol, TlsOptions};

    fn job() -> Job {
        let batch = Batch {
            plan: false,
            events: Default::default(),
            id: Some(ulid::Ulid::new()),
            machine: Some("m1".into()),
            bmc: None,
            actions: vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Cycle)],
            on_error: OnError::Stop,
            deadline: None,
        };
        let target = BmcTarget {
            address: "10.0.0.1".parse().unwrap(),
            protocol: Protocol::Ipmi,
            credentials: Credentials::Ref("r".into()),
            tls: TlsOptions::default(),
            system_id: None,
            options: Default::default(),
        };
        Job {
            id: batch.id.unwrap(),
            admitted_at_ms: 1,
            deadline_at_ms: 1_000,
            batch,
            target,
            tenant: "t1".into(),
            sealed_params: vec![],
            by_operator: false,
            record_at_claim: false,
        }
    }

    #[test]
    fn a_rollout_batch_cancelled_before_its_claim_is_final_and_runs_nothing() {
        let j = job();
        let actions = j.batch.actions.iter().map(|a| a.kind().to_owned()).collect();
        let s = BatchStatus::cancelled_unclaimed(j.id, j.key().to_string(), "t1".into(), actions, 9);
        assert_eq!((s.state, s.deliveries, s.admitted_at_ms), (BatchState::Cancelled, 0, 0));
        assert_eq!(s.results.len(), 2);
        assert!(s.results.iter().all(|r| r.error.as_ref().is_some_and(|e| e.code == ErrorCode::Cancelled)));
        let r = s.result.as_ref().expect("a final record has its result");
        assert_eq!((r.state, r.finished_at_ms), (BatchState::Cancelled, 9));
        // The job it stands for was admitted at another time: a worker
        // reads the record as another admission's and runs nothing.
        assert_ne!(s.admitted_at_ms, j.admitted_at_ms);
    }

    #[test]
    fn queued_claimed_finished() {
        let j = job();
        let mut s = BatchStatus::queued(&j, 7, 2);
        assert_eq!((s.state, s.stream_sequence, s.deliveries), (BatchState::Queued, Some(7), 0));
        assert_eq!(s.actions, ["power_on", "power_cycle"]);
        s.claim("w1", 3);
        s.claim("w2", 4);
        assert_eq!((s.state, s.worker.as_deref(), s.deliveries), (BatchState::Running, Some("w2"), 2));
        s.results = vec![
            ActionResult::ok(0, "power_on", None, None, 1),
            ActionResult::err(1, "power_cycle", None, ErrorBody::new(ErrorCode::BmcError, "no"), 1),
        ];
        let r = s.finish("w2", 5).clone();
        assert_eq!((r.state, r.worker.as_str(), r.deliveries, r.finished_at_ms), (BatchState::Failed, "w2", 2, 5));
        assert_eq!(s.state, BatchState::Failed);
        assert_eq!(s.cancel(6), Err(BatchState::Failed), "a finished batch cannot be cancelled");
    }

    #[test]
    fn cancel_finishes_a_queued_batch_and_flags_a_running_one() {
        let j = job();
        let mut queued = BatchStatus::queued(&j, 1, 2);
        assert_eq!(queued.cancel(3), Ok(Cancel::Finished));
        let r = queued.result.as_ref().unwrap();
        assert_eq!((r.state, r.worker.as_str(), r.results.len()), (BatchState::Cancelled, "gateway", 2));
        assert!(r.results.iter().all(|a| a.error.as_ref().unwrap().code == ErrorCode::Cancelled));
        let mut running = BatchStatus::running(&j, "w1", 2);
        assert_eq!((running.state, running.deliveries), (BatchState::Running, 1));
        assert_eq!(running.cancel(3), Ok(Cancel::Requested));
        assert!(running.cancel_requested && running.result.is_none() && running.state == BatchState::Running);
    }

    #[test]
    fn a_started_task_is_watched_never_requested_again() {
        let mut s = BatchStatus::running(&job(), "w1", 1);
        assert_eq!(s.task_resume(1), TaskResume::Fresh, "nothing recorded: run it");
        s.task_requested(1);
        assert_eq!(
            (s.task_resume(1), s.task_resume(0)),
            (TaskResume::Find, TaskResume::Fresh),
            "another index is not this task"
        );
        s.task_started(1, "/redfish/v1/TaskService/TaskMonitors/7");
        assert_eq!(s.task_resume(1), TaskResume::Watch("/redfish/v1/TaskService/TaskMonitors/7".into()));
        s.claim("w2", 2);
        assert_eq!(
            s.task_resume(1),
            TaskResume::Watch("/redfish/v1/TaskService/TaskMonitors/7".into()),
            "a new owner sees it"
        );
        s.results =
            vec![ActionResult::ok(0, "power_on", None, None, 1), ActionResult::ok(1, "power_cycle", None, None, 1)];
        s.finish("w2", 3);
        assert!(s.task.is_none() && s.in_progress.is_none());
    }

    #[test]
    fn an_unreadable_record_runs_nothing_again() {
        let s = BatchStatus::unreadable(&job(), "w1", 9);
        let r = s.result.as_ref().unwrap();
        assert_eq!((s.state, r.state), (BatchState::Failed, BatchState::Failed));
        assert!(r.results.iter().all(|a| a.error.as_ref().unwrap().code == ErrorCode::Interrupted), "{r:?}");
    }

    #[test]
    fn an_unread_job_finishes_its_queued_batch_and_nothing_else() {
        let s = BatchStatus::queued(&job(), 1, 0).unread("w1", 9, "unknown variant `x`").unwrap();
        let r = s.result.as_ref().unwrap();
        assert_eq!((s.state, r.state, r.results.len()), (BatchState::Failed, BatchState::Failed, 2));
        assert!(
            r.results.iter().all(|a| a.error.as_ref().unwrap().code == ErrorCode::Internal
                && a.error.as_ref().unwrap().message.contains("unknown variant `x`")),
            "{r:?}"
        );
        // Running or finished elsewhere: not this worker's to finish.
        let mut running = BatchStatus::queued(&job(), 1, 0);
        running.claim("w2", 1);
        assert!(running.unread("w1", 9, "x").is_none());
        assert!(s.unread("w1", 10, "x").is_none());
    }
}
