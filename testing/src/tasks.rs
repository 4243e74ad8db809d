//! [`TaskRecorder`]: a [`bmcfleet_provider::TaskLog`] that keeps in memory
//! what the worker would write to the status record and publish, for
//! provider tests of long-running actions (firmware updates).

use bmcfleet_provider::{Result, TaskLog};
use bmcfleet_schema::TaskResume;
use std::sync::Mutex;

/// One thing a provider told the task log, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TaskEntry {
    Requested,
    Started(String),
    Progress(Option<u8>, Option<String>),
}

/// Records every call; answers `resume` with what it was built with.
#[derive(Debug)]
pub struct TaskRecorder {
    resume: TaskResume,
    entries: Mutex<Vec<TaskEntry>>,
}

impl TaskRecorder {
    /// A log as a first run sees it (nothing recorded before).
    pub fn fresh() -> Self {
        TaskRecorder::resuming(TaskResume::Fresh)
    }

    /// A log as a worker taking the batch over sees it.
    pub fn resuming(resume: TaskResume) -> Self {
        TaskRecorder { resume, entries: Mutex::default() }
    }

    pub fn entries(&self) -> Vec<TaskEntry> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The percentages reported, in order.
    pub fn percents(&self) -> Vec<u8> {
        self.entries()
            .into_iter()
            .filter_map(|e| if let TaskEntry::Progress(Some(p), _) = e { Some(p) } else { None })
            .collect()
    }

    fn push(&self, e: TaskEntry) {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).push(e);
    }
}

#[async_trait::async_trait]
impl TaskLog for TaskRecorder {
    fn resume(&self) -> TaskResume {
        self.resume.clone()
    }

    async fn requesting(&self) -> Result<()> {
        self.push(TaskEntry::Requested);
        Ok(())
    }

    async fn started(&self, task: &str) -> Result<()> {
        self.push(TaskEntry::Started(task.to_owned()));
        Ok(())
    }

    fn progress(&self, percent: Option<u8>, state: Option<&str>) {
        self.push(TaskEntry::Progress(percent, state.map(str::to_owned)));
    }
}
