//! Firmware update against the spec-built mockup extended from DSP0266 /
//! DSP8010 with an UpdateService (`SimpleUpdate`) and a TaskService whose
//! update task runs for a set time: success with growing percentages, a
//! task failing half-way (`update_failed` with its message), a task URI on
//! another host refused, no UpdateService (`unsupported`), a new owner
//! watching the recorded task or finding it without a second request.
//! (sushy-emulator 2.2 serves SimpleUpdate, but its fake driver cannot
//! report or set firmware versions: the request fails with a 500 there,
//! and its task is a fixed, already completed resource.)

mod common;

use bmcfleet_provider::{perform, Ctx};
use bmcfleet_schema::{
    Action, ActionData, ErrorCode, FirmwareUpdate, FirmwareUpdateResult, TaskResume, TransferProtocol, UpdateApplyTime,
};
use bmcfleet_testing::redfish::{Fault, MockupServer, UpdateBehaviour, SIMPLE_UPDATE};
use bmcfleet_testing::tasks::{TaskEntry, TaskRecorder};
use common::{connector, spec_service};
use std::sync::Arc;
use std::time::Duration;

fn update() -> Action {
    Action::FirmwareUpdate(FirmwareUpdate {
        image_uri: Some("https://repo.example/bios-2.1.bin".into()),
        targets: vec!["/redfish/v1/UpdateService/FirmwareInventory/BIOS".into()],
        transfer_protocol: Some(TransferProtocol::Https),
        apply_time: Some(UpdateApplyTime::Immediate),
        ..FirmwareUpdate::default()
    })
}

async fn server(behaviour: Option<UpdateBehaviour>) -> MockupServer {
    let b = spec_service();
    let b = match behaviour {
        Some(u) => b.update_service(u),
        None => b,
    };
    b.start().await.unwrap()
}

async fn run(
    server: &MockupServer,
    log: Arc<TaskRecorder>,
    secs: u64,
) -> Result<Option<ActionData>, bmcfleet_provider::ProviderError> {
    let ctx = Ctx::with_timeout(Duration::from_secs(secs)).with_tasks(log);
    let mut s = connector().open(&ctx, &server.target(), &server.credentials()).await.unwrap();
    perform(&mut s, &ctx.for_attempt(), &update()).await
}

fn result(out: Option<ActionData>) -> FirmwareUpdateResult {
    match out {
        Some(ActionData::FirmwareUpdate(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_update_is_requested_once_and_watched_to_completion_with_its_percentages() {
    let server = server(Some(UpdateBehaviour::completes_after(Duration::from_millis(1500)))).await;
    let log = Arc::new(TaskRecorder::fresh());
    let r = result(run(&server, log.clone(), 20).await.unwrap());
    assert_eq!((r.state.as_str(), r.percent, r.resumed), ("Completed", Some(100), false), "{r:?}");
    let task = r.task.clone().unwrap();
    assert!(task.starts_with("/redfish/v1/TaskService/TaskMonitors/u"), "the monitor from Location: {task}");
    assert_eq!(r.messages, ["The update completed successfully."]);
    let posts = server.requests_to("POST", SIMPLE_UPDATE);
    assert_eq!(posts.len(), 1);
    let body = posts[0].json().unwrap();
    assert_eq!(body["ImageURI"], "https://repo.example/bios-2.1.bin");
    assert_eq!(body["TransferProtocol"], "HTTPS");
    assert_eq!(body["Targets"][0], "/redfish/v1/UpdateService/FirmwareInventory/BIOS");
    assert_eq!(body["@Redfish.OperationApplyTime"], "Immediate");
    let entries = log.entries();
    assert_eq!(entries[..2], [TaskEntry::Requested, TaskEntry::Started(task)], "{entries:?}");
    let percents = log.percents();
    assert!(percents.windows(2).all(|w| w[0] < w[1]), "reported when they change, growing: {percents:?}");
    assert!(percents.len() >= 3 && percents.first() < Some(&100) && percents.last() == Some(&100), "{percents:?}");
}

#[tokio::test]
async fn a_task_failing_half_way_is_update_failed_with_its_message() {
    let server = server(Some(UpdateBehaviour::fails_at(Duration::from_millis(1000), 50))).await;
    let log = Arc::new(TaskRecorder::fresh());
    let e = run(&server, log.clone(), 20).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::UpdateFailed, "{e}");
    assert!(e.message.contains("ended Exception at 50%") && e.message.contains("image verification error"), "{e}");
    assert!(!e.retryable);
    assert_eq!(server.update_requests(), 1);
    assert_eq!(log.percents().last(), Some(&50));
}

#[tokio::test]
async fn a_task_named_on_another_host_is_refused_and_not_polled() {
    let server = server(Some(UpdateBehaviour::completes_after(Duration::from_secs(1)))).await;
    server.push_fault(
        Fault::status("POST", SIMPLE_UPDATE, 202)
            .header("location", "https://127.0.0.2:9/redfish/v1/TaskService/Tasks/1")
            .json(&serde_json::json!({})),
    );
    let log = Arc::new(TaskRecorder::fresh());
    let e = run(&server, log.clone(), 10).await.unwrap_err();
    common::assert_error(&e, ErrorCode::ProtocolError, "points away from the BMC");
    assert_eq!(log.entries(), [TaskEntry::Requested], "no task recorded");
    let long = "/redfish/v1/".to_owned() + &"x".repeat(600);
    server.clear_faults();
    server.push_fault(Fault::status("POST", SIMPLE_UPDATE, 202).header("location", &long).json(&serde_json::json!({})));
    assert_eq!(
        run(&server, Arc::new(TaskRecorder::fresh()), 10).await.unwrap_err().code,
        ErrorCode::ProtocolError,
        "an unbounded task URI"
    );
}

#[tokio::test]
async fn a_bmc_without_an_update_service_is_unsupported_and_nothing_is_recorded() {
    let server = server(None).await;
    let log = Arc::new(TaskRecorder::fresh());
    let e = run(&server, log.clone(), 10).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Unsupported, "links no UpdateService");
    assert!(
        log.entries().is_empty() && server.writes().iter().all(|w| w.path.starts_with("/redfish/v1/SessionService"))
    );
}

#[tokio::test]
async fn a_new_owner_watches_the_recorded_or_found_task_without_a_second_request() {
    let server = server(Some(UpdateBehaviour::completes_after(Duration::from_millis(1200)))).await;
    let first = Arc::new(TaskRecorder::fresh());
    // The first owner starts it; the deadline ends its watch early.
    let e = run(&server, first.clone(), 1).await.unwrap_err();
    assert!(matches!(e.code, ErrorCode::Timeout | ErrorCode::DeadlineExceeded), "{e}");
    let Some(TaskEntry::Started(task)) = first.entries().get(1).cloned() else { panic!("{:?}", first.entries()) };
    let watch = Arc::new(TaskRecorder::resuming(TaskResume::Watch(task.clone())));
    let r = result(run(&server, watch, 20).await.unwrap());
    assert_eq!((r.state.as_str(), r.resumed, r.task.as_deref()), ("Completed", true, Some(task.as_str())));
    assert_eq!(server.update_requests(), 1, "watched, not requested again");

    // Requested but no task recorded: found in the TaskService while it runs.
    let server = self::server(Some(UpdateBehaviour::completes_after(Duration::from_millis(1500)))).await;
    let first = Arc::new(TaskRecorder::fresh());
    run(&server, first.clone(), 1).await.unwrap_err();
    let Some(TaskEntry::Started(task)) = first.entries().get(1).cloned() else { panic!("{:?}", first.entries()) };
    let find = Arc::new(TaskRecorder::resuming(TaskResume::Find));
    let r = result(run(&server, find.clone(), 20).await.unwrap());
    assert!(r.resumed && r.state == "Completed", "{r:?}");
    assert_eq!(find.entries()[0], TaskEntry::Started(task), "the found task (its monitor) is recorded");
    // Once it ended, nothing is in progress: interrupted, never requested again.
    let e = run(&server, Arc::new(TaskRecorder::resuming(TaskResume::Find)), 10).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Interrupted, "{e}");
    assert_eq!(server.update_requests(), 1);
}

/// The task state a BMC reports goes to the worker's progress events and
/// log as is: only a DSP8010 `TaskState` is reported, never the BMC's free
/// text there (which may quote the ImageURI it fetches, credentials and all).
#[tokio::test]
async fn only_a_standard_task_state_is_reported_as_progress() {
    use bmcfleet_provider::{Offer as _, Started};
    let server = server(Some(UpdateBehaviour::completes_after(Duration::from_millis(600)))).await;
    let log = Arc::new(TaskRecorder::fresh());
    let ctx = Ctx::with_timeout(Duration::from_secs(20)).with_tasks(log.clone());
    let mut s = connector().open(&ctx, &server.target(), &server.credentials()).await.unwrap();
    let image = "https://fw:FwPassw0rdState@repo.example/bios.bin?sig=FwSigState";
    let update = FirmwareUpdate { image_uri: Some(image.into()), ..FirmwareUpdate::default() };
    let Started::Task(task) = s.firmware_update().unwrap().start_update(&ctx, &update).await.unwrap() else {
        panic!("no task")
    };
    let echo = serde_json::json!({"TaskState": format!("Fetching {image}"), "PercentComplete": 5});
    server.push_fault(Fault::status("GET", &task, 202).json(&echo).times(1));
    let r = s.firmware_update().unwrap().watch_update(&ctx, &task).await.unwrap();
    assert_eq!(r.state, "Completed");
    let states: Vec<String> =
        log.entries().into_iter().filter_map(|e| if let TaskEntry::Progress(_, s) = e { s } else { None }).collect();
    assert!(states.iter().any(|s| s == "Running"), "standard states are reported: {states:?}");
    for s in &states {
        assert!(
            !s.contains("FwPassw0rdState") && !s.contains("FwSigState") && !s.contains("Fetching"),
            "the BMC's text is reported: {states:?}"
        );
    }
}
