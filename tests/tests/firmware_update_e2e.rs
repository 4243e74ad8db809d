//! Firmware updates end to end: producer → gateway → JetStream → worker
//! processes → the spec-built Redfish mockup extended with an UpdateService
//! whose update task runs for a few seconds (`testing::redfish`, DSP0266 /
//! DSP8010 `UpdateService.SimpleUpdate`, TaskService).
//!
//! - success: `action_progress` events carry the task's growing
//!   percentage, the result its final state;
//! - the gate: off by default (refused at admission, nothing stored), per
//!   tenant at the gateway, checked again by the worker (nothing sent); a
//!   raw POST to the UpdateService stays denied by the default raw policy;
//! - the worker running the update is SIGKILLed mid-task: the next owner
//!   watches the same task and the BMC sees exactly one update request;
//! - the worker dies after the update request left but before the BMC
//!   named its task (the request hangs), and the BMC runs no update task:
//!   the next owner reports `interrupted` and never requests again.
//! - multipart HTTP push (`image_file`) from the workers'
//!   `--firmware-image-dir`: the BMC receives exactly the file (SHA-256
//!   equal) and the update completes; a worker without the directory
//!   refuses it (`firmware_update_disabled`, nothing sent); the gateway
//!   refuses a file name that is a path (`invalid_field`, nothing stored);
//!   a worker SIGKILLed during the push's task is followed by one that
//!   watches the same task, and the BMC saw exactly one multipart POST; one
//!   killed after its push left but before the BMC answered (which runs no
//!   task) is followed by one that reports `interrupted` and never pushes.

use bmcfleet_schema::subject::WORKER_HEADER;
use bmcfleet_schema::*;
use bmcfleet_testing::redfish::spec::spec_service;
use bmcfleet_testing::redfish::{Fault, MockupServer, UpdateBehaviour, MULTIPART_PUSH, SIMPLE_UPDATE};
use bmcfleet_tests::eventually;
use bmcfleet_tests::producer::{wait_final_statuses, Stack};
use futures::StreamExt;
use std::time::Duration;

const ALLOW: &str = "--allow-firmware-update";

fn update() -> Action {
    Action::FirmwareUpdate(FirmwareUpdate {
        image_uri: Some("https://repo.example/bmc-2.4.bin".into()),
        targets: vec!["/redfish/v1/UpdateService/FirmwareInventory/BMC".into()],
        transfer_protocol: Some(TransferProtocol::Https),
        ..FirmwareUpdate::default()
    })
}

async fn mockup(behaviour: UpdateBehaviour) -> MockupServer {
    spec_service().update_service(behaviour).start().await.unwrap()
}

/// A batch for the machine registered at `server`, with an id (to follow its events).
async fn batch(stack: &Stack, server: &MockupServer, actions: Vec<Action>) -> Batch {
    let machine = stack.topology.register_machine(&stack.producer.client, &server.target()).await;
    Batch {
        plan: false,
        events: Default::default(),
        id: Some(ulid::Ulid::new()),
        machine: Some(machine),
        bmc: None,
        actions,
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(120)),
    }
}

/// Every event of batch `id` (subscribed before it is submitted), with the worker that published it.
async fn events(stack: &Stack, id: BatchId) -> tokio::sync::mpsc::UnboundedReceiver<(Option<String>, EventKind)> {
    let mut sub = stack.producer.client.subscribe(format!("bmc.events.*.{id}")).await.unwrap();
    stack.producer.client.flush().await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let worker = m.headers.as_ref().and_then(|h| h.get(WORKER_HEADER)).map(|v| v.to_string());
            if let Ok(ev) = Encoding::MessagePack.decode::<Event>(&m.payload) {
                if tx.send((worker, ev.event)).is_err() {
                    return;
                }
            }
        }
    });
    rx
}

fn percents(seen: &[(Option<String>, EventKind)]) -> Vec<u8> {
    seen.iter()
        .filter_map(|(_, e)| if let EventKind::ActionProgress { percent, .. } = e { *percent } else { None })
        .collect()
}

fn update_result(r: &BatchResult) -> FirmwareUpdateResult {
    match &r.results[0].data {
        Some(ActionData::FirmwareUpdate(u)) => u.clone(),
        other => panic!("no firmware update data: {other:?} in {r:#?}"),
    }
}

/// Submits `b` and waits for its result: the update ran to `Completed`
/// (100 %) on the worker that started it.
async fn completes(stack: &Stack, b: &Batch) {
    let r = match stack.producer.submit(b, true).await {
        Reply::Result(r) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let u = update_result(&r);
    assert_eq!((u.state.as_str(), u.percent, u.resumed), ("Completed", Some(100), false), "{u:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_reports_its_percentage_and_completes() {
    let server = mockup(UpdateBehaviour::completes_after(Duration::from_secs(4))).await;
    let stack = Stack::start_with(&[ALLOW], 1, &[ALLOW]).await;
    let b = batch(&stack, &server, vec![update()]).await;
    let mut rx = events(&stack, b.id.unwrap()).await;
    completes(&stack, &b).await;
    assert_eq!(server.update_requests(), 1);
    // The final event came after the progress events; collect what arrived.
    let mut seen = vec![];
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(2), rx.recv()).await {
        let last = matches!(e.1, EventKind::BatchFinished { .. });
        seen.push(e);
        if last {
            break;
        }
    }
    let p = percents(&seen);
    assert!(
        p.len() >= 2 && p.windows(2).all(|w| w[0] < w[1]) && p[0] < 100 && p.last() == Some(&100),
        "progress events: {p:?}"
    );
    assert!(seen.iter().any(|(_, e)| matches!(e, EventKind::ActionProgress { action, state: Some(s), .. } if action == "firmware_update" && s == "Running")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn firmware_updates_are_refused_unless_the_operator_allows_them_for_the_tenant() {
    let server = mockup(UpdateBehaviour::completes_after(Duration::from_secs(1))).await;
    // The gateway allows tenant `default` only; the worker allows nothing.
    let stack = Stack::start_with(&["--allow-firmware-update=default"], 1, &[]).await;

    // Admitted (tenant default), refused by the worker: nothing sent.
    let b = batch(&stack, &server, vec![update()]).await;
    let r = match stack.producer.submit(&b, true).await {
        Reply::Result(r) => r,
        other => panic!("{other:?}"),
    };
    let e = r.results[0].error.as_ref().expect("refused by the worker");
    assert_eq!(e.code, ErrorCode::FirmwareUpdateDisabled, "{e:?}");
    assert!(e.message.contains("nothing was sent"), "{e:?}");
    assert_eq!(server.update_requests(), 0);

    // A machine of another tenant: refused at admission, nothing stored.
    let js = async_nats::jetstream::new(stack.producer.client.clone());
    let kv = js.get_key_value(stack.topology.subjects().machines_bucket()).await.unwrap();
    let name = b.machine.clone().unwrap();
    let mut m: Machine = serde_json::from_slice(&kv.get(&name).await.unwrap().unwrap()).unwrap();
    m.tenant = "t2".into();
    bmcfleet_common::registry::put(&kv, &m).await.unwrap();
    let other = Batch { id: Some(ulid::Ulid::new()), ..b.clone() };
    let refused = eventually(Duration::from_secs(10), "the gateway to see the new tenant", || {
        let (p, other) = (stack.producer.clone(), other.clone());
        async move {
            match p.submit(&other, false).await {
                Reply::Error(e) if e.message.contains("tenant `t2`") => Some(e),
                _ => None,
            }
        }
    })
    .await;
    assert_eq!(refused.code, ErrorCode::FirmwareUpdateDisabled, "{refused:?}");
    assert!(
        matches!(
            stack.producer.status(other.id.unwrap()).await,
            Reply::Error(ErrorBody { code: ErrorCode::NotFound, .. })
        ),
        "nothing stored"
    );

    // The typed action is the sanctioned path: a raw POST to the update service stays denied.
    let raw = RawRequest::Redfish(RawRedfish {
        method: HttpMethod::Post,
        path: SIMPLE_UPDATE.into(),
        body: Some(serde_json::json!({"ImageURI": "https://repo.example/x.bin"})),
    });
    let b = Batch { id: None, actions: vec![Action::Raw(raw)], ..b };
    match stack.producer.submit(&b, false).await {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::RawNotAllowed, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.update_requests(), 0);
}

/// SIGKILL the stack's worker named `worker` (`w<i>`); returns `i`.
fn kill(stack: &mut Stack, worker: &str) -> usize {
    let i =
        (0..stack.workers.len()).find(|i| format!("w{i}") == worker).unwrap_or_else(|| panic!("no worker {worker}"));
    stack.workers[i].kill();
    i
}

/// Submits `b`, SIGKILLs the worker that reports the first progress of
/// the BMC's task (before 100 %), and returns the final result, which the
/// next owner must have reached by watching the same task to its end.
async fn kill_mid_task(stack: &mut Stack, b: &Batch, requests: impl Fn() -> usize) -> BatchResult {
    let id = b.id.unwrap();
    let mut rx = events(stack, id).await;
    let Reply::Accepted(_) = stack.producer.submit(b, false).await else { panic!("admission") };
    let first = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match rx.recv().await {
                Some((Some(w), EventKind::ActionProgress { percent, .. })) => return (w, percent),
                Some(_) => continue,
                None => panic!("event subscription ended"),
            }
        }
    })
    .await
    .expect("a progress event");
    assert!(first.1.is_some_and(|p| p < 100), "killed mid-update: {first:?}");
    assert_eq!(requests(), 1);
    let killed = kill(stack, &first.0);
    let mut results =
        wait_final_statuses(&stack.producer.client, &stack.topology.subjects(), &[id], Duration::from_secs(90)).await;
    let r = results.remove(&id).unwrap();
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    assert_ne!(r.worker, format!("w{killed}"), "finished by the next owner");
    let u = update_result(&r);
    assert!(u.resumed && u.state == "Completed" && u.percent == Some(100), "{u:?}");
    assert_eq!(requests(), 1, "the BMC saw exactly one update request");
    r
}

/// Submits `b` against a BMC that takes the update request and never
/// answers, SIGKILLs the worker that sent it (recorded as requested before
/// it left), and checks that the next owner reports `interrupted` without
/// requesting again.
async fn kill_before_task(stack: &mut Stack, b: &Batch, requests: impl Fn() -> usize) {
    let id = b.id.unwrap();
    let Reply::Accepted(_) = stack.producer.submit(b, false).await else { panic!("admission") };
    eventually(Duration::from_secs(30), "the update request at the BMC", || {
        let n = requests();
        async move { (n == 1).then_some(()) }
    })
    .await;
    // Whose request it is: the status record says (and that the request was recorded first).
    let js = async_nats::jetstream::new(stack.producer.client.clone());
    let kv = js.get_key_value(stack.topology.subjects().batches_bucket()).await.unwrap();
    let s = bmcfleet_common::status::load(&kv, &id).await.unwrap().unwrap().status;
    assert_eq!(s.task.as_deref(), Some(&TaskRecord { index: 0, requested: true, uri: None }), "{s:#?}");
    let killed = kill(stack, s.worker.as_deref().unwrap());
    let results =
        wait_final_statuses(&stack.producer.client, &stack.topology.subjects(), &[id], Duration::from_secs(90)).await;
    let r = &results[&id];
    let e = r.results[0].error.as_ref().expect("interrupted");
    assert_eq!(e.code, ErrorCode::Interrupted, "{r:#?}");
    assert_ne!(r.worker, format!("w{killed}"));
    assert_eq!(requests(), 1, "never requested again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_update_is_followed_by_one_that_watches_the_same_task() {
    let server = mockup(UpdateBehaviour::completes_after(Duration::from_secs(10))).await;
    let mut stack = Stack::start_with(&[ALLOW], 2, &[ALLOW]).await;
    let b = batch(&stack, &server, vec![update()]).await;
    let r = kill_mid_task(&mut stack, &b, || server.update_requests()).await;
    assert_eq!(r.deliveries, 2, "{r:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_whose_task_cannot_be_found_is_interrupted_never_requested_again() {
    let server = mockup(UpdateBehaviour::completes_after(Duration::from_secs(2))).await;
    // The request reaches the BMC, which never answers and starts nothing.
    server.push_fault(Fault::hang("POST", SIMPLE_UPDATE));
    let mut stack = Stack::start_with(&[ALLOW], 2, &[ALLOW]).await;
    let b = batch(&stack, &server, vec![update()]).await;
    kill_before_task(&mut stack, &b, || server.update_requests()).await;
}

/// A firmware image directory for the workers: `bmc-2.5.bin`, a little
/// over 1 MiB of non-repeating bytes, and its SHA-256.
fn image_dir() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = bmcfleet_testing::redfish::image_bytes(0x0bad_cafe, (1 << 20) + 4321);
    std::fs::write(dir.path().join("bmc-2.5.bin"), &data).unwrap();
    let sha = bmcfleet_testing::redfish::sha256_hex(&data);
    (dir, sha)
}

fn push(file: &str, sha256: Option<&str>) -> Action {
    Action::FirmwareUpdate(FirmwareUpdate {
        image_file: Some(file.into()),
        sha256: sha256.map(str::to_owned),
        targets: vec!["/redfish/v1/UpdateService/FirmwareInventory/BMC".into()],
        ..FirmwareUpdate::default()
    })
}

async fn push_mockup(behaviour: UpdateBehaviour) -> MockupServer {
    spec_service().update_service(behaviour).multipart_push(true).start().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_image_reaches_the_bmc_whole_and_the_update_completes() {
    let (dir, sha) = image_dir();
    let server = push_mockup(UpdateBehaviour::completes_after(Duration::from_secs(2))).await;
    let images = format!("--firmware-image-dir={}", dir.path().display());
    let stack = Stack::start_with(&[ALLOW], 1, &[ALLOW, &images]).await;
    let b = batch(&stack, &server, vec![push("bmc-2.5.bin", Some(&sha))]).await;
    completes(&stack, &b).await;
    let pushes = server.pushes();
    assert_eq!(pushes.len(), 1, "one multipart POST");
    assert_eq!(
        (pushes[0].sha256.as_str(), pushes[0].filename.as_deref()),
        (sha.as_str(), Some("bmc-2.5.bin")),
        "the BMC received exactly the file"
    );
    assert_eq!(pushes[0].parameters["Targets"][0], "/redfish/v1/UpdateService/FirmwareInventory/BMC");
    assert_eq!(server.update_requests(), 0, "no SimpleUpdate");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_needs_the_workers_image_dir_and_a_plain_file_name() {
    let server = push_mockup(UpdateBehaviour::completes_after(Duration::from_secs(1))).await;
    // Firmware updates allowed, but the worker has no --firmware-image-dir.
    let stack = Stack::start_with(&[ALLOW], 1, &[ALLOW]).await;
    let b = batch(&stack, &server, vec![push("bmc-2.5.bin", None)]).await;
    let r = match stack.producer.submit(&b, true).await {
        Reply::Result(r) => r,
        other => panic!("{other:?}"),
    };
    let e = r.results[0].error.as_ref().expect("refused by the worker");
    assert_eq!(e.code, ErrorCode::FirmwareUpdateDisabled, "{e:?}");
    assert!(e.message.contains("--firmware-image-dir") && e.message.contains("nothing was sent"), "{e:?}");
    assert_eq!(server.push_requests(), 0);

    // A path instead of a file name: refused at admission, nothing stored.
    for name in ["../etc/passwd", "/etc/passwd", "images/x.bin", ".hidden"] {
        let bad = Batch { id: Some(ulid::Ulid::new()), actions: vec![push(name, None)], ..b.clone() };
        match stack.producer.submit(&bad, false).await {
            Reply::Error(e) => {
                assert!(e.code == ErrorCode::InvalidField && e.message.contains("image_file"), "{name}: {e:?}")
            }
            other => panic!("{name}: {other:?}"),
        }
        assert!(
            matches!(
                stack.producer.status(bad.id.unwrap()).await,
                Reply::Error(ErrorBody { code: ErrorCode::NotFound, .. })
            ),
            "{name}: nothing stored"
        );
    }
    // The typed action is the sanctioned path: a raw POST to the push URI stays denied.
    let raw = RawRequest::Redfish(RawRedfish {
        method: HttpMethod::Post,
        path: MULTIPART_PUSH.into(),
        body: Some(serde_json::json!({})),
    });
    match stack.producer.submit(&Batch { id: None, actions: vec![Action::Raw(raw)], ..b }, false).await {
        Reply::Error(e) => assert_eq!(e.code, ErrorCode::RawNotAllowed, "{e:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.push_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_during_a_push_task_is_followed_by_one_that_watches_it_without_pushing_again() {
    let (dir, sha) = image_dir();
    let server = push_mockup(UpdateBehaviour::completes_after(Duration::from_secs(10))).await;
    let images = format!("--firmware-image-dir={}", dir.path().display());
    let mut stack = Stack::start_with(&[ALLOW], 2, &[ALLOW, &images]).await;
    let b = batch(&stack, &server, vec![push("bmc-2.5.bin", Some(&sha))]).await;
    kill_mid_task(&mut stack, &b, || server.push_requests()).await;
    assert_eq!(server.pushes()[0].sha256, sha, "the one multipart POST carried the whole image");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_task_cannot_be_found_is_interrupted_never_pushed_again() {
    let (dir, _) = image_dir();
    let server = push_mockup(UpdateBehaviour::completes_after(Duration::from_secs(2))).await;
    // The whole image reaches the BMC, which never answers and starts nothing.
    server.push_fault(Fault::hang("POST", MULTIPART_PUSH));
    let images = format!("--firmware-image-dir={}", dir.path().display());
    let mut stack = Stack::start_with(&[ALLOW], 2, &[ALLOW, &images]).await;
    let b = batch(&stack, &server, vec![push("bmc-2.5.bin", None)]).await;
    kill_before_task(&mut stack, &b, || server.push_requests()).await;
}
