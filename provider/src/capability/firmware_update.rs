//! Firmware update: start the BMC's update (one request, recorded durably
//! right before it leaves), record the task the BMC names, and watch that
//! task to its end with its progress. A worker that takes a batch over
//! watches the task its predecessor recorded, or looks for it on the BMC
//! when only the request was recorded, and never starts a second update:
//! what it cannot find is `interrupted`.

use crate::{Ctx, ProviderError, Result};
use async_trait::async_trait;
use bmcfleet_schema::{Action, ActionData, ErrorCode, FirmwareUpdate as Update, FirmwareUpdateResult, TaskResume};

/// What starting an update gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Started {
    /// The BMC runs it as this task (a path on the BMC, checked to be on it).
    Task(String),
    /// The BMC answered without a task: this is the outcome.
    Done(FirmwareUpdateResult),
}

#[async_trait]
pub trait FirmwareUpdate: Send {
    /// Start the update with one request. The provider calls
    /// [`Ctx::tasks`]`.requesting()` immediately before that request
    /// (after whatever it reads first) and sends nothing if it fails.
    async fn start_update(&mut self, ctx: &Ctx, update: &Update) -> Result<Started>;
    /// Watch a task to its end, reporting progress to [`Ctx::tasks`];
    /// a task that ends without completing is `update_failed`.
    async fn watch_update(&mut self, ctx: &Ctx, task: &str) -> Result<FirmwareUpdateResult>;
    /// An update task still in progress on the BMC, for a worker that took
    /// over a batch whose update request may have left before its task was
    /// recorded.
    async fn find_update_task(&mut self, ctx: &Ctx) -> Result<Option<String>>;
}

pub(super) fn handles(action: &Action) -> bool {
    matches!(action, Action::FirmwareUpdate(_))
}

pub(super) async fn perform(cap: &mut dyn FirmwareUpdate, ctx: &Ctx, action: &Action) -> Result<Option<ActionData>> {
    let Action::FirmwareUpdate(update) = action else { unreachable!("dispatched by `handles`") };
    let resume = ctx.tasks().map(|t| t.resume()).unwrap_or(TaskResume::Fresh);
    let (task, resumed) = match resume {
        TaskResume::Fresh => match cap.start_update(ctx, update).await? {
            Started::Done(result) => return Ok(Some(ActionData::FirmwareUpdate(result))),
            Started::Task(task) => (task, false),
        },
        TaskResume::Watch(task) => {
            tracing::info!(%task, "Resuming to watch the firmware update task an earlier worker started.");
            return watch(cap, ctx, &task, true).await;
        }
        TaskResume::Find => match cap.find_update_task(ctx).await? {
            Some(task) => {
                tracing::info!(%task, "Found the firmware update task an earlier worker started; watching it.");
                (task, true)
            }
            None => {
                return Err(ProviderError::new(
                    ErrorCode::Interrupted,
                    "a worker stopped after the firmware update request may have left and before the BMC named its task, \
                     and the BMC has no update task in progress: whether the update ran is unknown, so it was not requested again",
                ))
            }
        },
    };
    if let Some(log) = ctx.tasks() {
        log.started(&task).await?;
    }
    watch(cap, ctx, &task, resumed).await
}

async fn watch(cap: &mut dyn FirmwareUpdate, ctx: &Ctx, task: &str, resumed: bool) -> Result<Option<ActionData>> {
    let mut result = cap.watch_update(ctx, task).await?;
    result.resumed = resumed;
    Ok(Some(ActionData::FirmwareUpdate(result)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TaskLog;
    use std::sync::{Arc, Mutex};

    /// A provider whose every call is written down.
    #[derive(Default)]
    struct Bmc {
        calls: Vec<String>,
        running: Option<String>,
    }

    #[async_trait]
    impl FirmwareUpdate for Bmc {
        async fn start_update(&mut self, ctx: &Ctx, _update: &Update) -> Result<Started> {
            if let Some(log) = ctx.tasks() {
                log.requesting().await?;
            }
            self.calls.push("start".into());
            Ok(Started::Task("/redfish/v1/TaskService/Tasks/1".into()))
        }
        async fn watch_update(&mut self, _ctx: &Ctx, task: &str) -> Result<FirmwareUpdateResult> {
            self.calls.push(format!("watch {task}"));
            Ok(FirmwareUpdateResult {
                task: Some(task.into()),
                state: "Completed".into(),
                percent: Some(100),
                ..Default::default()
            })
        }
        async fn find_update_task(&mut self, _ctx: &Ctx) -> Result<Option<String>> {
            self.calls.push("find".into());
            Ok(self.running.clone())
        }
    }

    #[derive(Debug)]
    struct Log {
        resume: TaskResume,
        written: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl TaskLog for Log {
        fn resume(&self) -> TaskResume {
            self.resume.clone()
        }
        async fn requesting(&self) -> Result<()> {
            self.written.lock().unwrap().push("requested".into());
            Ok(())
        }
        async fn started(&self, task: &str) -> Result<()> {
            self.written.lock().unwrap().push(format!("task {task}"));
            Ok(())
        }
        fn progress(&self, _percent: Option<u8>, _state: Option<&str>) {}
    }

    fn update() -> Action {
        Action::FirmwareUpdate(Update { image_uri: Some("https://repo.example/x.bin".into()), ..Update::default() })
    }

    async fn run(resume: TaskResume, running: Option<&str>) -> (Result<Option<ActionData>>, Vec<String>, Vec<String>) {
        let log = Arc::new(Log { resume, written: Mutex::default() });
        let ctx = Ctx::with_timeout(std::time::Duration::from_secs(5)).with_tasks(log.clone());
        let mut bmc = Bmc { running: running.map(str::to_owned), ..Default::default() };
        let out = perform(&mut bmc, &ctx, &update()).await;
        let written = log.written.lock().unwrap().clone();
        (out, bmc.calls, written)
    }

    #[tokio::test]
    async fn a_started_update_is_recorded_then_watched() {
        let (out, calls, written) = run(TaskResume::Fresh, None).await;
        assert_eq!(calls, ["start", "watch /redfish/v1/TaskService/Tasks/1"]);
        assert_eq!(
            written,
            ["requested", "task /redfish/v1/TaskService/Tasks/1"],
            "the request, then the task, before watching"
        );
        let Some(ActionData::FirmwareUpdate(r)) = out.unwrap() else { panic!() };
        assert!(!r.resumed);
    }

    #[tokio::test]
    async fn a_new_owner_never_starts_a_second_update() {
        let (out, calls, written) = run(TaskResume::Watch("/t/9".into()), None).await;
        assert_eq!(calls, ["watch /t/9"]);
        assert!(written.is_empty());
        let Some(ActionData::FirmwareUpdate(r)) = out.unwrap() else { panic!() };
        assert!(r.resumed);

        let (out, calls, written) = run(TaskResume::Find, Some("/t/4")).await;
        assert_eq!((calls, written), (vec!["find".to_owned(), "watch /t/4".into()], vec!["task /t/4".to_owned()]));
        assert!(matches!(out.unwrap(), Some(ActionData::FirmwareUpdate(r)) if r.resumed));

        let (out, calls, _) = run(TaskResume::Find, None).await;
        assert_eq!(calls, ["find"], "nothing found: nothing started");
        assert_eq!(out.unwrap_err().code, ErrorCode::Interrupted);
    }
}
