//! Firmware update by multipart HTTP push (DSP0266 "Multipart HTTP push
//! updates") against the spec-built mockup whose UpdateService advertises
//! `MultipartHttpPushUri` and reads the multipart body with its own parser:
//! the BMC receives exactly the file's bytes (SHA-256 equal) and the
//! parameters; an image that cannot be used (hash mismatch, missing, a
//! path, a link out of the directory, a directory, too large) or a worker
//! without an image directory sends nothing; a BMC without the push URI is
//! `unsupported`; a push URI on another host gets no connection; a task
//! failing half-way is `update_failed`; a new owner finds the push's task
//! instead of pushing again.

mod common;

use bmcfleet_provider::image::ImageDir;
use bmcfleet_provider::{perform, Ctx, ProviderError};
use bmcfleet_schema::{
    Action, ActionData, ErrorCode, FirmwareUpdate, FirmwareUpdateResult, TaskResume, UpdateApplyTime,
};
use bmcfleet_testing::redfish::{MockupServer, SilentServer, UpdateBehaviour, MULTIPART_PUSH};
use bmcfleet_testing::tasks::{TaskEntry, TaskRecorder};
use common::{connector, spec_service};
use std::sync::Arc;
use std::time::Duration;

const BIOS: &str = "/redfish/v1/UpdateService/FirmwareInventory/BIOS";

/// A directory of images: `bios-2.1.bin` (a little over 1 MiB of
/// non-repeating bytes, so chunk boundaries matter), a link to it, and
/// things that must never be sent.
struct Images {
    root: tempfile::TempDir,
    data: Vec<u8>,
}

impl Images {
    fn new() -> Images {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("images");
        std::fs::create_dir(&dir).unwrap();
        let data = bmcfleet_testing::redfish::image_bytes(0x1234_5678, (1 << 20) + 12_345);
        std::fs::write(dir.join("bios-2.1.bin"), &data).unwrap();
        std::os::unix::fs::symlink(dir.join("bios-2.1.bin"), dir.join("bios-latest.bin")).unwrap();
        std::fs::write(root.path().join("shadow"), b"root:$6$secret").unwrap();
        std::os::unix::fs::symlink(root.path().join("shadow"), dir.join("shadow.bin")).unwrap();
        std::fs::create_dir(dir.join("old")).unwrap();
        Images { root, data }
    }

    fn dir(&self) -> std::path::PathBuf {
        self.root.path().join("images")
    }

    fn sha256(&self) -> String {
        bmcfleet_testing::redfish::sha256_hex(&self.data)
    }

    fn image_dir(&self, max: u64) -> Arc<ImageDir> {
        Arc::new(ImageDir::new(&self.dir(), max).unwrap())
    }
}

fn push(file: &str, sha256: Option<&str>) -> Action {
    Action::FirmwareUpdate(FirmwareUpdate {
        image_file: Some(file.into()),
        sha256: sha256.map(str::to_owned),
        targets: vec![BIOS.into()],
        apply_time: Some(UpdateApplyTime::OnReset),
        ..FirmwareUpdate::default()
    })
}

async fn server(behaviour: UpdateBehaviour, push: bool) -> MockupServer {
    spec_service().update_service(behaviour).multipart_push(push).start().await.unwrap()
}

async fn run(
    server: &MockupServer,
    images: Option<Arc<ImageDir>>,
    log: Arc<TaskRecorder>,
    action: &Action,
    secs: u64,
) -> Result<Option<ActionData>, ProviderError> {
    let ctx = Ctx::with_timeout(Duration::from_secs(secs)).with_tasks(log).with_images(images);
    let mut s = connector().open(&ctx, &server.target(), &server.credentials()).await.unwrap();
    perform(&mut s, &ctx.for_attempt(), action).await
}

/// A push of `bios-2.1.bin` from the whole image directory, recorded in a
/// fresh task log, that fails: the error and the log.
async fn push_fails(server: &MockupServer, images: &Images, secs: u64) -> (ProviderError, Arc<TaskRecorder>) {
    let log = Arc::new(TaskRecorder::fresh());
    let e =
        run(server, Some(images.image_dir(1 << 30)), log.clone(), &push("bios-2.1.bin", None), secs).await.unwrap_err();
    (e, log)
}

fn result(out: Option<ActionData>) -> FirmwareUpdateResult {
    match out {
        Some(ActionData::FirmwareUpdate(r)) => r,
        other => panic!("{other:?}"),
    }
}

/// Nothing of an update reached the BMC: no push, no SimpleUpdate, no request recorded.
fn nothing_sent(server: &MockupServer, log: &TaskRecorder) {
    assert_eq!(server.push_requests(), 0, "no push");
    assert!(server.writes().iter().all(|w| w.path.starts_with("/redfish/v1/SessionService")), "{:?}", server.writes());
    assert!(log.entries().is_empty(), "nothing recorded: {:?}", log.entries());
}

#[tokio::test]
async fn a_pushed_image_arrives_whole_with_its_parameters_and_its_task_is_watched() {
    let images = Images::new();
    let server = server(UpdateBehaviour::completes_after(Duration::from_millis(1500)), true).await;
    let log = Arc::new(TaskRecorder::fresh());
    let sha = images.sha256();
    let r = result(
        run(
            &server,
            Some(images.image_dir(1 << 30)),
            log.clone(),
            &push("bios-2.1.bin", Some(&sha.to_uppercase())),
            20,
        )
        .await
        .unwrap(),
    );
    assert_eq!((r.state.as_str(), r.percent, r.resumed), ("Completed", Some(100), false), "{r:?}");
    let pushes = server.pushes();
    assert_eq!(pushes.len(), 1, "exactly one push");
    let p = &pushes[0];
    assert_eq!((p.bytes, p.sha256.as_str()), (images.data.len(), sha.as_str()), "the BMC received exactly the file");
    assert_eq!(p.filename.as_deref(), Some("bios-2.1.bin"));
    assert_eq!(
        (p.file_content_type.as_deref(), p.parameters_content_type.as_deref()),
        (Some("application/octet-stream"), Some("application/json"))
    );
    assert_eq!(p.parameters, serde_json::json!({"Targets": [BIOS], "@Redfish.OperationApplyTime": "OnReset"}));
    let post = &server.requests_to("POST", MULTIPART_PUSH)[0];
    assert!(
        post.header("content-type").is_some_and(|c| c.starts_with("multipart/form-data; boundary=")),
        "{:?}",
        post.headers
    );
    assert_eq!(
        post.header("content-length").map(|l| l.parse::<usize>().unwrap()),
        Some(post.body.len()),
        "a known length"
    );
    let task = r.task.clone().unwrap();
    let entries = log.entries();
    assert_eq!(
        entries[..2],
        [TaskEntry::Requested, TaskEntry::Started(task)],
        "requested before the push, the task after: {entries:?}"
    );
    assert_eq!(log.percents().last(), Some(&100));

    // A link inside the directory is followed; the same bytes arrive.
    let again = result(
        run(
            &server,
            Some(images.image_dir(1 << 30)),
            Arc::new(TaskRecorder::fresh()),
            &push("bios-latest.bin", None),
            20,
        )
        .await
        .unwrap(),
    );
    assert_eq!(again.state, "Completed");
    assert_eq!(server.pushes()[1].sha256, sha);
}

#[tokio::test]
async fn an_image_that_cannot_be_used_sends_nothing() {
    let images = Images::new();
    let server = server(UpdateBehaviour::completes_after(Duration::from_millis(500)), true).await;
    let full = images.image_dir(1 << 30);
    let cases: Vec<(Action, Arc<ImageDir>, ErrorCode, &str)> = vec![
        (push("bios-2.1.bin", Some(&"ab".repeat(32))), full.clone(), ErrorCode::FirmwareImageInvalid, "not the abab"),
        (push("missing.bin", None), full.clone(), ErrorCode::FirmwareImageInvalid, "no firmware image missing.bin"),
        (
            push("shadow.bin", None),
            full.clone(),
            ErrorCode::FirmwareImageInvalid,
            "leading out of the worker's image directory",
        ),
        (push("old", None), full.clone(), ErrorCode::FirmwareImageInvalid, "not a regular file"),
        (
            push("bios-2.1.bin", None),
            images.image_dir(1 << 20),
            ErrorCode::FirmwareImageInvalid,
            "--firmware-image-max-bytes 1048576",
        ),
        (push("../shadow", None), full.clone(), ErrorCode::InvalidField, "plain file name"),
    ];
    for (action, dir, code, says) in cases {
        let log = Arc::new(TaskRecorder::fresh());
        let e = run(&server, Some(dir), log.clone(), &action, 10).await.unwrap_err();
        assert_eq!(e.code, code, "{action:?}: {e}");
        assert!(e.message.contains(says) && !e.retryable, "{action:?}: {e}");
        assert!(!e.message.contains("secret"), "never file contents: {e}");
        nothing_sent(&server, &log);
    }
    // A worker without an image directory pushes nothing.
    let log = Arc::new(TaskRecorder::fresh());
    let e = run(&server, None, log.clone(), &push("bios-2.1.bin", None), 10).await.unwrap_err();
    common::assert_error(&e, ErrorCode::FirmwareUpdateDisabled, "--firmware-image-dir");
    nothing_sent(&server, &log);
}

#[tokio::test]
async fn a_bmc_without_multipart_push_is_unsupported() {
    let images = Images::new();
    let server = server(UpdateBehaviour::completes_after(Duration::from_millis(500)), false).await;
    let (e, log) = push_fails(&server, &images, 10).await;
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("no MultipartHttpPushUri") && e.message.contains("SimpleUpdate only"), "{e}");
    nothing_sent(&server, &log);
    assert_eq!(server.update_requests(), 0, "no fallback to SimpleUpdate");
}

#[tokio::test]
async fn a_push_uri_off_the_bmc_is_refused_without_a_connection_to_it() {
    let images = Images::new();
    let server = server(UpdateBehaviour::completes_after(Duration::from_millis(500)), true).await;
    let elsewhere = SilentServer::start().await.unwrap();
    let port = elsewhere.addr().port();
    for uri in [
        format!("https://127.0.0.1:{port}/upload"),
        format!("//127.0.0.1:{port}/upload"),
        format!("https://admin:password@127.0.0.1:{}/upload", server.addr().port()),
    ] {
        server.merge_resource("/redfish/v1/UpdateService", &serde_json::json!({"MultipartHttpPushUri": uri}));
        let (e, log) = push_fails(&server, &images, 10).await;
        assert_eq!(e.code, ErrorCode::ProtocolError, "{uri}: {e}");
        assert!(
            e.message.contains("MultipartHttpPushUri") && e.message.contains("points away from the BMC"),
            "{uri}: {e}"
        );
        nothing_sent(&server, &log);
    }
    assert_eq!(elsewhere.accepted(), 0, "the other host never saw a connection");
    assert!(server.pushes().is_empty());
}

#[tokio::test]
async fn a_push_task_failing_half_way_is_update_failed() {
    let images = Images::new();
    let server = server(UpdateBehaviour::fails_at(Duration::from_millis(1000), 50), true).await;
    let (e, _) = push_fails(&server, &images, 20).await;
    assert_eq!(e.code, ErrorCode::UpdateFailed, "{e}");
    assert!(e.message.contains("ended Exception at 50%") && e.message.contains("Flashing bios-2.1.bin failed"), "{e}");
    assert_eq!(server.push_requests(), 1);
    assert_eq!(server.pushes()[0].sha256, images.sha256(), "the whole image had arrived");
}

#[tokio::test]
async fn a_new_owner_finds_the_pushed_update_and_never_pushes_again() {
    let images = Images::new();
    let server = server(UpdateBehaviour::completes_after(Duration::from_millis(2500)), true).await;
    // The first owner pushes; its deadline ends the watch early (before the task ends).
    let (e, first) = push_fails(&server, &images, 1).await;
    assert!(matches!(e.code, ErrorCode::Timeout | ErrorCode::DeadlineExceeded), "{e}");
    let Some(TaskEntry::Started(task)) = first.entries().get(1).cloned() else { panic!("{:?}", first.entries()) };
    // Only the request was recorded: the next owner finds the task on the BMC.
    let find = Arc::new(TaskRecorder::resuming(TaskResume::Find));
    let r = result(
        run(&server, Some(images.image_dir(1 << 30)), find.clone(), &push("bios-2.1.bin", None), 20).await.unwrap(),
    );
    assert!(r.resumed && r.state == "Completed", "{r:?}");
    assert_eq!(find.entries()[0], TaskEntry::Started(task));
    assert_eq!(server.push_requests(), 1, "found and watched, never pushed again");
}
