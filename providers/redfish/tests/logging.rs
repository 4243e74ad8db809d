//! What the provider logs on its own (before the worker scrubs the error it
//! returns) never carries a secret the BMC echoes back, nor what the
//! action's loggable form hides (a raw request's query).
//!
//! A test binary of its own: tracing caches callsite interest process-wide,
//! so a subscriber installed by one test among parallel others may miss
//! events. Here the subscriber is the global default, set (once, for every
//! test of this binary) before any call; each test looks for secrets of its own.

use bmcfleet_provider::{Offer, Started};
use bmcfleet_redfish::{RedfishConfig, RedfishConnector};
use bmcfleet_schema::{ErrorCode, FirmwareUpdate, HttpMethod, MediaKind, RawRedfish, RawRequest};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::spec::spec_service;
use bmcfleet_testing::redfish::{Fault, MockupServer, UpdateBehaviour};
use bmcfleet_testing::LogCapture;
use serde_json::json;
use std::time::Duration;

/// The one subscriber of this binary, writing into a shared capture.
fn capture() -> LogCapture {
    LogCapture::global()
}

fn connector() -> RedfishConnector {
    RedfishConnector::new(RedfishConfig { task_poll_interval: Duration::from_millis(20), ..RedfishConfig::default() })
}

#[tokio::test]
async fn a_refused_media_patch_echoing_the_image_url_is_not_logged_with_its_credentials() {
    let cap = capture();
    let dir = mockup_dir("lenovo");
    let server = MockupServer::builder().dir(dir.join("bmclib")).unwrap().start().await.unwrap();
    let ctx = || bmcfleet_provider::Ctx::with_timeout(std::time::Duration::from_secs(10));
    let mut s = RedfishConnector::new(RedfishConfig::default())
        .open(&ctx(), &server.target(), &server.credentials())
        .await
        .unwrap();
    let url = "https://media:S3cretMediaPw@192.0.2.10/isos/install.iso?sig=T0kenSig99";
    let cd = "/redfish/v1/Managers/1/VirtualMedia/CD";
    // The DSP0266 Base registry message for a refused value quotes the value.
    let echo = json!({"error": {"code": "Base.1.8.GeneralError", "message": "A general error has occurred.",
        "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueFormatError",
            "Message": format!("The value '{url}' for the property Image is of a different format than the property can accept."),
            "MessageArgs": [url, "Image"]}]}});
    server.push_fault(Fault::status("PATCH", cd, 400).json(&echo).times(1));
    s.virtual_media().unwrap().insert_media(&ctx(), url, MediaKind::Cd).await.unwrap();
    assert_eq!(server.requests_to("PATCH", cd).len(), 2, "refused once, then sent with Image alone");

    let out = cap.text();
    assert!(out.contains("once more with Image alone"), "the retry is logged:\n{out}");
    for secret in ["S3cretMediaPw", "T0kenSig99"] {
        assert!(!out.contains(secret), "`{secret}` leaked into the log:\n{out}");
    }
}

/// A raw Redfish request's query may carry a token (`loggable()` hides it):
/// neither the provider's log line, the `redfish.http` span nor the error
/// it returns (which the worker logs) carries it, whether the BMC answers,
/// refuses or does not answer in time.
#[tokio::test]
async fn a_raw_request_query_is_in_no_log_span_or_error() {
    let cap = capture();
    let server = spec_service().start().await.unwrap();
    let ctx = |ms| bmcfleet_provider::Ctx::with_timeout(Duration::from_millis(ms));
    let mut s = connector().open(&ctx(10_000), &server.target(), &server.credentials()).await.unwrap();
    let raw = |path: &str| RawRequest::Redfish(RawRedfish { method: HttpMethod::Get, path: path.into(), body: None });

    let answered =
        s.raw().unwrap().raw(&ctx(10_000), &raw("/redfish/v1/Systems?token=RawT0kenAnswered")).await.unwrap();
    assert_eq!(answered.status, 200);
    let got = server.requests_to("GET", "/redfish/v1/Systems");
    assert_eq!(
        got.last().and_then(|r| r.query.as_deref()),
        Some("token=RawT0kenAnswered"),
        "the query is sent as given"
    );

    server.push_fault(Fault::status("GET", "/redfish/v1/Managers", 500).times(1));
    let refused = s.raw().unwrap().raw(&ctx(10_000), &raw("/redfish/v1/Managers?sig=RawSigRefused")).await.unwrap_err();
    assert_eq!(refused.code, ErrorCode::BmcError, "{refused}");
    assert!(refused.message.contains("GET /redfish/v1/Managers"), "{refused}");

    server.push_fault(Fault::hang("GET", "/redfish/v1/SessionService"));
    let hung = s
        .raw()
        .unwrap()
        .raw(&ctx(800), &raw("/redfish/v1/SessionService?X-Amz-Signature=RawSigHung"))
        .await
        .unwrap_err();
    assert_eq!(hung.code, ErrorCode::Timeout, "{hung}");

    let out = cap.text();
    assert!(
        out.contains("Raw Redfish request.") && out.contains("/redfish/v1/Systems"),
        "the request is logged:\n{out}"
    );
    for secret in ["RawT0kenAnswered", "RawSigRefused", "RawSigHung"] {
        assert!(!out.contains(secret), "`{secret}` leaked into the log:\n{out}");
        for e in [&refused, &hung] {
            assert!(!e.message.contains(secret), "`{secret}` is in the error: {e}");
        }
    }
}

/// A BMC polled for a firmware update task that wants a new session and
/// then fails to create one (a 503 whose text quotes the login it was sent
/// and the image it is fetching): the poll goes on, and what the provider
/// logs about the failed poll is the error's code, not the BMC's words.
#[tokio::test]
async fn a_failed_task_poll_is_not_logged_with_the_bmcs_words() {
    let cap = capture();
    let server = spec_service()
        .credentials("admin", "L0ginPassw0rdPoll")
        .update_service(UpdateBehaviour::completes_after(Duration::from_millis(300)))
        .start()
        .await
        .unwrap();
    let mut target = server.target();
    target.options.redfish.auth = bmcfleet_schema::RedfishAuth::Session;
    let ctx = bmcfleet_provider::Ctx::with_timeout(Duration::from_secs(10));
    let mut s = connector().open(&ctx, &target, &server.credentials()).await.unwrap();
    let image = "https://fw:FwPassw0rdPoll@repo.example/bios.bin?sig=FwSigPoll";
    let update = FirmwareUpdate { image_uri: Some(image.into()), ..FirmwareUpdate::default() };
    let Started::Task(task) = s.firmware_update().unwrap().start_update(&ctx, &update).await.unwrap() else {
        panic!("no task")
    };
    // The session expires; the new one is refused with the BMC's words.
    server.expire_sessions();
    let echo = json!({"error": {"code": "Base.1.8.ServiceTemporarilyUnavailable",
        "message": format!("Busy fetching {image}; login admin/L0ginPassw0rdPoll deferred.")}});
    server.push_fault(Fault::status("POST", "/redfish/v1/SessionService/Sessions", 503).json(&echo).times(1));
    let _ = s.firmware_update().unwrap().watch_update(&ctx, &task).await;

    let out = cap.text();
    assert!(out.contains("polling again"), "the failed poll is logged:\n{out}");
    for secret in ["L0ginPassw0rdPoll", "FwPassw0rdPoll", "FwSigPoll"] {
        assert!(!out.contains(secret), "`{secret}` leaked into the log:\n{out}");
    }
}

/// A session refused with a message quoting the password it was sent: the
/// error (which the provider logs when a read fails, before any scrubbing
/// by the worker) does not carry the password.
#[tokio::test]
async fn a_refused_session_echoing_the_login_password_does_not_carry_it() {
    let _ = capture();
    let server = spec_service().credentials("admin", "L0ginPassw0rdEcho/%").start().await.unwrap();
    let mut target = server.target();
    target.options.redfish.auth = bmcfleet_schema::RedfishAuth::Session;
    let echo = json!({"error": {"code": "Base.1.8.GeneralError",
        "message": "Cannot log in admin with password L0ginPassw0rdEcho/% (also L0ginPassw0rdEcho%2F%25) now."}});
    server.push_fault(Fault::status("POST", "/redfish/v1/SessionService/Sessions", 503).json(&echo).times(1));
    let ctx = bmcfleet_provider::Ctx::with_timeout(Duration::from_secs(10));
    let e = connector().open(&ctx, &target, &server.credentials()).await.err().expect("no session");
    assert!(e.message.contains("Cannot log in admin"), "the BMC's words are kept: {e}");
    assert!(!e.message.contains("L0ginPassw0rdEcho"), "the password is in the error: {e}");
}

/// A certificate replacement the BMC refuses, its message quoting the
/// CertificateString (key and certificate): the provider's own log lines
/// carry nothing of the private key (the error it returns is scrubbed by
/// the worker with the action's secret values).
#[tokio::test]
async fn a_refused_certificate_replacement_logs_nothing_of_the_key() {
    use bmcfleet_provider::BmcCertificates;
    use bmcfleet_testing::redfish::{TestPki, REPLACE_CERTIFICATE};
    let cap = capture();
    let server = MockupServer::with_certificate_service().await.unwrap();
    let (cert, key) = TestPki::self_signed("logged", 30).unwrap();
    let lines: Vec<String> =
        key.lines().filter(|l| !l.starts_with("-----") && l.len() > 16).map(str::to_owned).collect();
    assert!(!lines.is_empty());
    let echo = json!({"error": {"code": "Base.1.8.GeneralError", "message": "A general error has occurred.",
        "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.ActionParameterValueFormatError",
            "Message": format!("The value '{key}{cert}' for the parameter CertificateString is of a different format."),
            "MessageArgs": [format!("{key}{cert}"), "CertificateString"]}]}});
    server.push_fault(Fault::status("POST", REPLACE_CERTIFICATE, 400).json(&echo).times(1));
    let ctx = || bmcfleet_provider::Ctx::with_timeout(Duration::from_secs(10));
    let mut s = connector().open(&ctx(), &server.target(), &server.credentials()).await.unwrap();
    let replace =
        bmcfleet_schema::BmcCertReplace { certificate_pem: cert, private_key_pem: bmcfleet_schema::Secret::new(key) };
    let e = s.replace_bmc_certificate(&ctx(), &replace).await.unwrap_err();
    assert_ne!(e.code, ErrorCode::Unsupported, "the POST was sent and refused: {e}");
    assert_eq!(server.requests_to("POST", REPLACE_CERTIFICATE).len(), 1);
    let out = cap.text();
    assert!(out.contains("CertificateService.ReplaceCertificate"), "the refused POST is logged:\n{out}");
    for line in lines {
        assert!(!out.contains(&line), "a line of the private key leaked into the log:\n{out}");
    }
}
