//! Firmware update through the BMC's `UpdateService` (DSP0266 §"Software
//! update", DSP8010 `UpdateService.SimpleUpdate`), found from the service
//! root, never at a guessed path.
//!
//! - start: `POST` the `SimpleUpdate` action's `target` with `ImageURI`,
//!   `TransferProtocol`, `Targets` and `@Redfish.OperationApplyTime`; the
//!   task is the `Location` of the answer (a Task Monitor), else the body's
//!   `TaskMonitor`, else the `@odata.id` of a Task in the body. A task a
//!   BMC names off the BMC (another host, user info), longer than
//!   [`MAX_TASK_URI`] or with control characters is refused: it is what the
//!   worker records and polls. The worker's "requested" record is written
//!   right before the `POST` (after the reads), never before a read fails.
//! - watch: `GET` the task until its `TaskState` is final (`Completed`;
//!   `Exception`, `Killed`, `Cancelled`, `Interrupted` or a critical
//!   `TaskStatus`: `update_failed`) or a monitor answers without a Task
//!   (the operation's own result: done); `PercentComplete` and the state go
//!   to the worker as progress. A BMC that is busy or rebooting (timeouts,
//!   refused connections, 5xx) is polled again until the action's deadline:
//!   an update often restarts the BMC. A task the BMC no longer knows (404)
//!   is `interrupted`: whether the update completed is unknown.
//! - find (for a worker taking over): the `TaskService`'s tasks, newest
//!   first (at most [`MAX_TASKS`]), the first one not in a final state whose
//!   `Payload.TargetUri` names an update service (or, without a payload,
//!   whose name says "update").
//!
//! - push (`image_file`, DSP0266 "Multipart HTTP push updates"): the image
//!   is a file of the worker's image directory ([`bmcfleet_provider::image`]:
//!   opened, bounded and hashed, and compared with the action's `sha256`,
//!   before anything is sent; none configured: `firmware_update_disabled`).
//!   The UpdateService's `MultipartHttpPushUri` must be a path on the BMC
//!   (checked like a task URI: a BMC naming another host gets no
//!   connection); a BMC without one is `unsupported` (it takes SimpleUpdate
//!   only). One `multipart/form-data` POST: a part `UpdateParameters`
//!   (`application/json`: `Targets`, `@Redfish.OperationApplyTime`) and a
//!   part `UpdateFile` (`application/octet-stream`, streamed from the file
//!   with its length, hashed again while read: a file changed since its
//!   check cuts the upload short). The answer names the task as for
//!   SimpleUpdate. The worker never fetches an image from anywhere.

use crate::error::{err, invalid, protocol, status_error, unsupported};
use crate::json::{allowable, link, members, norm_path, str_of};
use crate::session::RedfishSession;
use crate::transport::{poll_wait, Reply};
use bmcfleet_provider::image::Image;
use bmcfleet_provider::{Ctx, FirmwareUpdate, ProviderError, Result, Started};
use bmcfleet_schema::{ErrorCode, FirmwareUpdate as Update, FirmwareUpdateResult, ImageSource};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use std::time::Duration;

const ROOT: &str = "/redfish/v1";
const SIMPLE_UPDATE: &str = "#UpdateService.SimpleUpdate";
/// Longest task URI accepted from a BMC (it is recorded in the batch's status).
pub(crate) const MAX_TASK_URI: usize = 512;
/// Most TaskService members looked at when looking for an update task.
pub(crate) const MAX_TASKS: usize = 64;
/// Most task messages kept, and the longest one.
const MAX_MESSAGES: usize = 16;
const MAX_MESSAGE: usize = 512;

/// How a task ended.
#[derive(Debug, PartialEq, Eq)]
enum TaskEnd {
    Completed,
    /// Ended otherwise: how (the state's name, or a completion with a
    /// critical status), for the `update_failed` message.
    Failed(String),
}

/// What one poll of a task said.
#[derive(Debug, PartialEq, Eq)]
struct TaskView {
    state: Option<String>,
    percent: Option<u8>,
    messages: Vec<String>,
    /// Set once the task is in a final state.
    done: Option<TaskEnd>,
}

fn messages(v: &Value) -> Vec<String> {
    v.get("Messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| str_of(m, "Message").or_else(|| str_of(m, "MessageId")))
        .map(|m| m.chars().filter(|c| !c.is_control()).take(MAX_MESSAGE).collect::<String>())
        .take(MAX_MESSAGES)
        .collect()
}

/// The DSP8010 `TaskState` values: the only states reported as they are.
/// A state goes to the worker's progress events and log, which are not
/// scrubbed; a BMC's own text there may quote what it was sent (the
/// ImageURI, credentials and all), so any other state is reported as
/// [`OTHER_STATE`].
const TASK_STATES: &[&str] = &[
    "New",
    "Starting",
    "Running",
    "Suspended",
    "Interrupted",
    "Pending",
    "Stopping",
    "Completed",
    "Killed",
    "Exception",
    "Service",
    "Cancelling",
    "Cancelled",
];
const OTHER_STATE: &str = "Other";

/// Read a Task (or a monitor's answer) polled with `status`.
fn view(status: StatusCode, v: &Value) -> TaskView {
    let state = str_of(v, "TaskState")
        .map(|s| TASK_STATES.iter().find(|&&k| k == s).copied().unwrap_or(OTHER_STATE).to_owned());
    let percent = v.get("PercentComplete").and_then(Value::as_u64).map(|p| p.min(100) as u8);
    let done = match state.as_deref() {
        // A monitor that stops answering 202 without a Task: the operation's result.
        None if status != StatusCode::ACCEPTED => Some(TaskEnd::Completed),
        Some("Completed") if str_of(v, "TaskStatus") == Some("Critical") => {
            Some(TaskEnd::Failed("Completed with a critical status".to_owned()))
        }
        Some("Completed") => Some(TaskEnd::Completed),
        Some(s @ ("Exception" | "Killed" | "Cancelled" | "Interrupted")) => Some(TaskEnd::Failed(s.to_owned())),
        _ => None,
    };
    TaskView { state, percent, messages: messages(v), done }
}

/// Whether a Task in the TaskService is a firmware update.
fn is_update_task(task: &Value) -> bool {
    if let Some(uri) = task.get("Payload").and_then(|p| str_of(p, "TargetUri")) {
        return uri.to_ascii_lowercase().contains("updateservice");
    }
    ["Name", "Description"].iter().any(|k| str_of(task, k).is_some_and(|s| s.to_ascii_lowercase().contains("update")))
}

impl RedfishSession {
    /// The UpdateService the service root links (`unsupported` without one).
    async fn update_service(&mut self, ctx: &Ctx) -> Result<Value> {
        let root = self.transport.get(ctx, ROOT).await?;
        let path = link(&root.body, "UpdateService").ok_or_else(|| {
            unsupported("the service root links no UpdateService: this BMC offers no firmware update over Redfish")
        })?;
        let service = self.transport.get_linked(ctx, &path, "an UpdateService").await?;
        if service.body.get("ServiceEnabled") == Some(&Value::Bool(false)) {
            return Err(err(
                ErrorCode::BmcError,
                format!("the BMC's UpdateService at {path} is disabled (ServiceEnabled: false)"),
            ));
        }
        Ok(service.body)
    }
}

impl RedfishSession {
    /// `SimpleUpdate`: the BMC fetches `image_uri`.
    async fn simple_update(&mut self, ctx: &Ctx, update: &Update, image_uri: &str) -> Result<Started> {
        let service = self.update_service(ctx).await?;
        let action = service
            .get("Actions")
            .and_then(|a| a.get(SIMPLE_UPDATE))
            .ok_or_else(|| unsupported("the BMC's UpdateService offers no SimpleUpdate action"))?;
        let target = str_of(action, "target")
            .map(norm_path)
            .ok_or_else(|| protocol("the UpdateService's SimpleUpdate action has no target"))?;
        let target = self.transport.on_bmc(&target)?;
        if let (Some(p), Some(allowed)) = (update.transfer_protocol, allowable(action, "TransferProtocol")) {
            if !allowed.iter().any(|a| a.eq_ignore_ascii_case(p.redfish())) {
                return Err(invalid(format!(
                    "the BMC's SimpleUpdate takes TransferProtocol {}; not {}",
                    allowed.join(", "),
                    p.redfish()
                )));
            }
        }
        let mut body = json!({"ImageURI": image_uri});
        if let Some(p) = update.transfer_protocol {
            body["TransferProtocol"] = json!(p.redfish());
        }
        if !update.targets.is_empty() {
            body["Targets"] = json!(update.targets);
        }
        if let Some(at) = update.apply_time {
            body["@Redfish.OperationApplyTime"] = json!(at.redfish());
        }
        if let Some(log) = ctx.tasks() {
            log.requesting().await?;
        }
        let reply = self.transport.exchange(ctx, Method::POST, &target, Some(&body), None).await?;
        self.started(&target, reply)
    }

    /// Multipart HTTP push of the worker's image file `name`.
    async fn push_update(&mut self, ctx: &Ctx, update: &Update, name: &str, sha256: Option<&str>) -> Result<Started> {
        let images = ctx.images().ok_or_else(|| {
            err(
                ErrorCode::FirmwareUpdateDisabled,
                "this worker has no firmware image directory (--firmware-image-dir): push updates (image_file) are off; nothing was sent",
            )
            .not_sent()
        })?;
        // The file is checked (and hashed) before the BMC hears anything of the update.
        let image = images.open(name, sha256).await?;
        let service = self.update_service(ctx).await?;
        let Some(uri) = str_of(&service, "MultipartHttpPushUri").map(norm_path) else {
            let only = if service.get("Actions").and_then(|a| a.get(SIMPLE_UPDATE)).is_some() {
                " (it offers SimpleUpdate only: give image_uri)"
            } else {
                ""
            };
            return Err(unsupported(format!(
                "the BMC's UpdateService has no MultipartHttpPushUri: it takes no multipart HTTP push{only}"
            )));
        };
        let uri = self.transport.on_bmc(&uri).map_err(|e| {
            ProviderError::new(e.code, format!("the BMC's MultipartHttpPushUri is refused: {}", e.message))
        })?;
        let mut params = json!({"Targets": update.targets});
        if let Some(at) = update.apply_time {
            params["@Redfish.OperationApplyTime"] = json!(at.redfish());
        }
        let params = serde_json::to_string(&params)
            .map_err(|e| err(ErrorCode::Internal, format!("encoding the update parameters: {e}")))?;
        if let Some(log) = ctx.tasks() {
            log.requesting().await?;
        }
        tracing::info!(bmc = %self.transport.bmc(), image = image.name(), bytes = image.len(), sha256 = image.sha256(), push_uri = %uri, "Pushing a firmware image.");
        // The stream records why it stopped, when it did: the file changed since its check.
        let cut: std::sync::Arc<std::sync::Mutex<Option<ProviderError>>> = Default::default();
        let form = || {
            let file = reqwest::multipart::Part::stream_with_length(
                reqwest::Body::wrap_stream(upload(&image, cut.clone())),
                image.len(),
            )
            .file_name(image.name().to_owned())
            .mime_str("application/octet-stream")
            .expect("a valid MIME type");
            let json =
                reqwest::multipart::Part::text(params.clone()).mime_str("application/json").expect("a valid MIME type");
            reqwest::multipart::Form::new().part("UpdateParameters", json).part("UpdateFile", file)
        };
        let reply = self.transport.post_multipart(ctx, &uri, form).await;
        if let Some(e) = cut.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Err(e);
        }
        self.started(&uri, reply?)
    }

    /// The task an update request's answer names (`Location`, the body's
    /// `TaskMonitor`, or a Task's `@odata.id`), checked to be on the BMC.
    fn started(&self, target: &str, reply: Reply) -> Result<Started> {
        if !reply.status.is_success() {
            return Err(status_error("POST", target, reply.status, &reply.body));
        }
        let v = reply.json(&Method::POST, target).unwrap_or(Value::Null);
        let named = reply
            .location()
            .or_else(|| str_of(&v, "TaskMonitor").map(norm_path))
            .or_else(|| v.get("TaskState").and(str_of(&v, "@odata.id")).map(norm_path));
        match named {
            Some(task) => {
                let task = self.transport.on_bmc(&task).map_err(|e| {
                    ProviderError::new(e.code, format!("the BMC accepted the update but named its task {}", e.message))
                })?;
                tracing::info!(bmc = %self.transport.bmc(), %task, "Firmware update started.");
                Ok(Started::Task(task))
            }
            None => Ok(Started::Done(FirmwareUpdateResult {
                task: None,
                state: "Accepted".into(),
                percent: None,
                messages: messages(&v),
                resumed: false,
            })),
        }
    }
}

/// The image's bytes for one upload, read on the blocking pool; the first
/// error (the file changed since it was checked) is kept in `cut` and ends
/// the stream, so the request fails before its last byte.
fn upload(
    image: &Image,
    cut: std::sync::Arc<std::sync::Mutex<Option<ProviderError>>>,
) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures::stream::try_unfold(image.reader(), move |mut reader| {
        let cut = cut.clone();
        async move {
            let (reader, chunk) = tokio::task::spawn_blocking(move || {
                let chunk = reader.next_chunk();
                (reader, chunk)
            })
            .await
            .map_err(std::io::Error::other)?;
            match chunk {
                Ok(Some(c)) => Ok(Some((bytes::Bytes::from(c), reader))),
                Ok(None) => Ok(None),
                Err(e) => {
                    let why = e.message.clone();
                    *cut.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    Err(std::io::Error::other(why))
                }
            }
        }
    })
}

#[async_trait::async_trait]
impl FirmwareUpdate for RedfishSession {
    async fn start_update(&mut self, ctx: &Ctx, update: &Update) -> Result<Started> {
        update.validate().map_err(invalid)?;
        match update.source() {
            ImageSource::Uri(uri) => self.simple_update(ctx, update, uri).await,
            ImageSource::File { name, sha256 } => self.push_update(ctx, update, name, sha256).await,
        }
    }

    async fn watch_update(&mut self, ctx: &Ctx, task: &str) -> Result<FirmwareUpdateResult> {
        let task = self.transport.on_bmc(task)?;
        let mut last: Option<TaskView> = None;
        let mut reported: Option<(Option<u8>, Option<String>)> = None;
        let still_running = |last: &Option<TaskView>| {
            let (state, percent) = last.as_ref().map(|l| (l.state.clone(), l.percent)).unwrap_or_default();
            err(
                ErrorCode::Timeout,
                format!(
                    "the BMC's update task {task} was still running at the action deadline (state {}, {}% done); the update goes on on the BMC",
                    state.as_deref().unwrap_or("unknown"),
                    percent.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
                ),
            )
        };
        loop {
            let mut wait = self.transport.config().task_poll_interval;
            match self.transport.exchange(ctx, Method::GET, &task, None, None).await {
                Err(e) if e.code == ErrorCode::DeadlineExceeded => return Err(still_running(&last)),
                // A BMC applying an update is often busy or restarting: ask again.
                // Not the error's words: they may be the BMC's (a refused new
                // session), quoting what it was sent (the login, the image URL).
                Err(e) if e.retryable => tracing::info!(
                    bmc = %self.transport.bmc(), %task, code = %e.code, status = e.status,
                    "The BMC did not answer a task poll; polling again."
                ),
                Err(e) => return Err(e),
                Ok(reply) if reply.status == StatusCode::NOT_FOUND => {
                    return Err(err(
                        ErrorCode::Interrupted,
                        format!(
                            "the BMC no longer knows the update task {task}: whether the update completed is unknown"
                        ),
                    ))
                }
                Ok(reply) if reply.status.is_server_error() || reply.status == StatusCode::TOO_MANY_REQUESTS => {
                    wait = poll_wait(&reply, wait);
                    tracing::info!(bmc = %self.transport.bmc(), %task, status = reply.status.as_u16(), "The BMC is busy; polling the task again.");
                }
                Ok(reply) if reply.status.is_success() => {
                    wait = poll_wait(&reply, wait);
                    let v = reply.json(&Method::GET, &task)?;
                    let mut now = view(reply.status, &v);
                    if now.percent.is_none() {
                        now.percent = last.as_ref().and_then(|l| l.percent);
                    }
                    let seen = (now.percent, now.state.clone());
                    if reported.as_ref() != Some(&seen) {
                        if let Some(log) = ctx.tasks() {
                            log.progress(now.percent, now.state.as_deref());
                        }
                        reported = Some(seen);
                    }
                    match now.done.take() {
                        Some(TaskEnd::Completed) => {
                            return Ok(FirmwareUpdateResult {
                                task: Some(task.clone()),
                                state: now.state.clone().unwrap_or_else(|| "Completed".into()),
                                percent: now.percent,
                                messages: now.messages,
                                resumed: false,
                            })
                        }
                        Some(TaskEnd::Failed(state)) => {
                            let detail = if now.messages.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", now.messages.join("; "))
                            };
                            return Err(err(
                                ErrorCode::UpdateFailed,
                                format!(
                                    "the BMC's update task {task} ended {state} at {}%{detail}",
                                    now.percent.map(|p| p.to_string()).unwrap_or_else(|| "?".into())
                                ),
                            ));
                        }
                        None => last = Some(now),
                    }
                }
                Ok(reply) => return Err(status_error("GET", &task, reply.status, &reply.body)),
            }
            let wait = wait.clamp(Duration::from_millis(10), Duration::from_secs(30));
            let remaining = ctx.remaining().map_err(|_| still_running(&last))?;
            if wait >= remaining {
                tokio::time::sleep(remaining).await;
                return Err(still_running(&last));
            }
            tokio::time::sleep(wait).await;
        }
    }

    async fn find_update_task(&mut self, ctx: &Ctx) -> Result<Option<String>> {
        let root = self.transport.get(ctx, ROOT).await?;
        let Some(service) = link(&root.body, "Tasks") else { return Ok(None) };
        let service = self.transport.get(ctx, &service).await?;
        let Some(collection) = link(&service.body, "Tasks") else { return Ok(None) };
        let list = self.transport.get(ctx, &collection).await?;
        let paths = members(&list.body);
        for path in paths.iter().rev().take(MAX_TASKS) {
            let Ok(path) = self.transport.on_bmc(path) else { continue };
            let t = match self.transport.get(ctx, &path).await {
                Ok(t) => t,
                Err(e) if e.code == ErrorCode::DeadlineExceeded => return Err(e),
                Err(e) => {
                    tracing::debug!(bmc = %self.transport.bmc(), task = %path, error = %e, "Task unreadable; skipped.");
                    continue;
                }
            };
            if view(StatusCode::ACCEPTED, &t.body).done.is_none() && is_update_task(&t.body) {
                let monitor =
                    str_of(&t.body, "TaskMonitor").map(norm_path).and_then(|m| self.transport.on_bmc(&m).ok());
                return Ok(Some(monitor.unwrap_or(path)));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn an_upload_streams_the_checked_bytes_and_stops_short_when_the_file_changed() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..bmcfleet_provider::image::CHUNK * 3 + 7).map(|i| (i % 253) as u8).collect();
        std::fs::write(dir.path().join("a.bin"), &data).unwrap();
        let images = bmcfleet_provider::image::ImageDir::new(dir.path(), 1 << 30).unwrap();
        let image = images.open("a.bin", None).await.unwrap();
        let cut = std::sync::Arc::default();
        let sent: Vec<u8> = upload(&image, std::sync::Arc::clone(&cut)).map(|c| c.unwrap().to_vec()).concat().await;
        assert!(sent == data && cut.lock().unwrap().is_none());

        let mut changed = data.clone();
        changed[5] ^= 0xff;
        std::fs::write(dir.path().join("a.bin"), &changed).unwrap();
        let cut: std::sync::Arc<std::sync::Mutex<Option<ProviderError>>> = std::sync::Arc::default();
        let chunks: Vec<std::io::Result<bytes::Bytes>> = upload(&image, cut.clone()).collect().await;
        let whole: usize = chunks.iter().filter_map(|c| c.as_ref().ok()).map(|c| c.len()).sum();
        assert!(chunks.last().unwrap().is_err() && whole < data.len(), "the last chunk is never handed out");
        let e = cut.lock().unwrap().take().expect("why it stopped");
        assert_eq!(e.code, ErrorCode::FirmwareImageInvalid, "{e}");
    }

    #[test]
    fn task_states() {
        let ok = view(StatusCode::OK, &json!({"TaskState": "Completed", "TaskStatus": "OK", "PercentComplete": 100}));
        assert_eq!((ok.done, ok.percent), (Some(TaskEnd::Completed), Some(100)));
        let running = view(StatusCode::ACCEPTED, &json!({"TaskState": "Running", "PercentComplete": 250}));
        assert_eq!((running.done, running.percent), (None, Some(100)), "clamped");
        assert_eq!(view(StatusCode::ACCEPTED, &json!({})).done, None, "a 202 without a task is still running");
        assert_eq!(
            view(StatusCode::OK, &json!({})).done,
            Some(TaskEnd::Completed),
            "a monitor's final answer without a Task"
        );
        let failed = view(
            StatusCode::OK,
            &json!({"TaskState": "Exception", "Messages": [{"Message": "flash\u{7} failed"}, {"MessageId": "X.1"}]}),
        );
        assert_eq!(failed.done, Some(TaskEnd::Failed("Exception".into())));
        assert_eq!(failed.messages, ["flash failed", "X.1"]);
        let critical = view(StatusCode::OK, &json!({"TaskState": "Completed", "TaskStatus": "Critical"}));
        assert_eq!(critical.done, Some(TaskEnd::Failed("Completed with a critical status".into())));
        assert!(is_update_task(
            &json!({"Payload": {"TargetUri": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"}})
        ));
        assert!(!is_update_task(
            &json!({"Payload": {"TargetUri": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"}, "Name": "update"})
        ));
        assert!(is_update_task(&json!({"Name": "Firmware Update"})));
        let vendor = view(StatusCode::OK, &json!({"TaskState": "Fetching https://u:pw@h/x"}));
        assert_eq!(
            (vendor.state.as_deref(), vendor.done),
            (Some(OTHER_STATE), None),
            "still running, under no text of the BMC's"
        );
        assert!(!is_update_task(&json!({"Name": "Export logs"})));
    }
}
