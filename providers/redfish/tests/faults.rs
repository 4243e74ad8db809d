//! Faults, each a typed error carrying the BMC's own words, within the
//! action deadline, and never retried when the request may have been
//! processed. Runs against a service built from DSP0266 (no fixtures
//! needed), a silent TCP listener, a closed port and untrusted TLS.

mod common;

use bmcfleet_provider::Offer;
use bmcfleet_provider::{BmcSession, Ctx};
use bmcfleet_redfish::{RedfishConfig, RedfishConnector, RedfishSession};
use bmcfleet_schema::{
    BootDevice, BootDeviceRequest, ErrorCode, HttpMethod, PowerOp, RawRedfish, RawRequest, Secret, TlsOptions,
    UserRole, UserSpec, UserUpdate,
};
use bmcfleet_testing::redfish::{Fault, MockupServer, SilentServer, TestPki};
use common::{connector, ctx, spec_service, RESET, SYSTEM};
use serde_json::json;
use std::time::Duration;
use tokio::time::Instant;

async fn open(server: &MockupServer) -> RedfishSession {
    connector().open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect")
}

/// A spec-built BMC with `fault` injected, and a session open on it.
async fn faulty(fault: Fault) -> (MockupServer, RedfishSession) {
    let server = spec_service().start().await.unwrap();
    server.push_fault(fault);
    let s = open(&server).await;
    (server, s)
}

/// A power operation within 5 s, as most faults below are met.
async fn power(
    s: &mut RedfishSession,
    op: PowerOp,
) -> Result<Option<bmcfleet_schema::PowerState>, bmcfleet_provider::ProviderError> {
    s.power().unwrap().power(&ctx(5), op).await
}

/// The error of a power read that the BMC answers with `fault` (a fault
/// on the GET of the system).
async fn status_answered(
    server: &MockupServer,
    s: &mut RedfishSession,
    fault: Fault,
) -> bmcfleet_provider::ProviderError {
    server.push_fault(fault);
    power(s, PowerOp::Status).await.unwrap_err()
}

/// A one-time UEFI boot override, as most faults below are met.
async fn set_boot(s: &mut RedfishSession, device: BootDevice) -> Result<(), bmcfleet_provider::ProviderError> {
    let request = BootDeviceRequest { device, persistent: false, efi: true };
    s.boot().unwrap().set_boot_device(&ctx(5), &request).await.map(drop)
}

fn ctx_ms(ms: u64) -> Ctx {
    Ctx::with_timeout(Duration::from_millis(ms))
}

#[tokio::test]
async fn wrong_password_is_auth_failed_with_sessions_and_with_basic() {
    for sessions in [true, false] {
        let server = spec_service().sessions(sessions).start().await.unwrap();
        let e = common::open_with_password(&server.target(), server.credentials(), "wrong", 10).await;
        assert_eq!(e.code, ErrorCode::AuthFailed, "sessions={sessions}: {e}");
        assert!(!e.retryable);
        assert!(e.message.contains("There is no valid session"), "the BMC's words are missing: {e}");
        assert_eq!(server.active_sessions(), 0);
    }
}

#[tokio::test]
async fn forbidden_is_permission_denied() {
    let (_server, mut s) = faulty(Fault::status("PATCH", SYSTEM, 403)).await;
    let e = set_boot(&mut s, BootDevice::Pxe).await.unwrap_err();
    common::assert_error(&e, ErrorCode::PermissionDenied, "injected HTTP 403");
}

#[tokio::test]
async fn missing_resources_are_target_not_found() {
    let server = common::standard_accounts(spec_service()).start().await.unwrap();
    let mut s = open(&server).await;
    let e = common::raw_get(&mut s, "/redfish/v1/Chassis/9").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound, "{e}");
    assert!(e.message.contains("ResourceMissingAtURI") || e.message.contains("was not found"), "{e}");
    let upd = UserUpdate { name: "nobody".into(), password: Some("x-long-enough".into()), role: None, enabled: None };
    let e = s.users().unwrap().update_user(&ctx(5), &upd).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound, "{e}");
    assert!(server.writes().iter().all(|r| r.method != "PATCH"), "an update of a missing user wrote something");
}

#[tokio::test]
async fn conflict_is_a_bmc_error_sent_once() {
    let (server, mut s) = faulty(Fault::status("POST", RESET, 409).json(
        &json!({"error": {"code": "Base.1.8.ActionNotSupported", "message": "Reset is not possible while the host is in POST"}}),
    )).await;
    let e = power(&mut s, PowerOp::Reset).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("409") && e.message.contains("while the host is in POST"), "{e}");
    assert!(!e.retryable);
    assert_eq!(server.requests_to("POST", RESET).len(), 1);
}

#[tokio::test]
async fn persistent_etag_mismatch_fails_after_one_fresh_retry() {
    let server = spec_service().start().await.unwrap();
    server.merge_resource(SYSTEM, &json!({"@odata.etag": "W/\"v1\""}));
    server.push_fault(Fault::status("PATCH", SYSTEM, 412));
    let mut s = open(&server).await;
    let e = set_boot(&mut s, BootDevice::Pxe).await.unwrap_err();
    common::assert_error(&e, ErrorCode::BmcError, "412");
    let patches = server.requests_to("PATCH", SYSTEM);
    assert_eq!(patches.len(), 2, "one PATCH, one retry with a fresh ETag, no more");
    assert!(patches.iter().all(|p| p.header("if-match") == Some("W/\"v1\"")));
}

#[tokio::test]
async fn if_match_required_without_an_etag_is_explained() {
    let (_server, mut s) = faulty(Fault::status("PATCH", SYSTEM, 428)).await;
    let e = set_boot(&mut s, BootDevice::Disk).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("If-Match") && e.message.contains("no ETag"), "{e}");
}

#[tokio::test]
async fn server_errors_are_retryable_but_not_retried() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    server.push_fault(Fault::status("POST", RESET, 500));
    let e = status_answered(&server, &mut s, Fault::status("GET", SYSTEM, 503).times(1)).await;
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.retryable && e.message.contains("503"), "{e}");
    let e = power(&mut s, PowerOp::Reset).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.retryable && e.message.contains("500") && e.message.contains("injected"), "{e}");
    assert_eq!(server.requests_to("POST", RESET).len(), 1, "a non-idempotent POST was resent");
    assert!(s.is_healthy(), "an HTTP error is not a broken transport");
}

#[tokio::test]
async fn not_implemented_is_unsupported() {
    let (_server, mut s) = faulty(Fault::status("POST", RESET, 501)).await;
    let e = power(&mut s, PowerOp::Nmi).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
}

#[tokio::test]
async fn malformed_json_is_a_protocol_error() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    let e =
        status_answered(&server, &mut s, Fault::status("GET", SYSTEM, 200).raw(&b"{\"PowerState\": \"On\", oops"[..]))
            .await;
    common::assert_error(&e, ErrorCode::ProtocolError, "not valid JSON");

    let server = spec_service().start().await.unwrap();
    server.push_fault(Fault::status("GET", "/redfish/v1", 200).raw(&b"<html>login</html>"[..]));
    let e = connector().open(&ctx(5), &server.target(), &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");
}

#[tokio::test]
async fn hung_bmc_is_a_timeout_within_the_deadline() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    server.push_fault(Fault::hang("GET", SYSTEM));
    let started = Instant::now();
    let e = s.power().unwrap().power(&ctx_ms(1500), PowerOp::Status).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    assert!(e.retryable);
    assert!(took >= Duration::from_millis(1400) && took < Duration::from_millis(2500), "took {took:?}");
    assert!(!s.is_healthy(), "a session on a hung BMC must be replaced");
}

#[tokio::test]
async fn silent_listener_is_a_timeout_within_the_deadline() {
    let silent = SilentServer::start().await.unwrap();
    let mut target = spec_service().start().await.unwrap().target();
    target.address = format!("127.0.0.1:{}", silent.addr().port()).parse().unwrap();
    let started = Instant::now();
    let e = connector().open(&ctx_ms(1000), &target, &common_creds()).await.err().expect("must fail");
    let took = started.elapsed();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    assert!(took < Duration::from_millis(2000), "took {took:?}");
    assert!(silent.accepted() >= 1);
}

fn common_creds() -> bmcfleet_provider::ResolvedCredentials {
    bmcfleet_testing::redfish::credentials("admin", "password")
}

#[tokio::test]
async fn closed_port_is_unreachable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut target = spec_service().start().await.unwrap().target();
    target.address = format!("127.0.0.1:{port}").parse().unwrap();
    let e = connector().open(&ctx(5), &target, &common_creds()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
    assert!(e.retryable);
}

#[tokio::test]
async fn untrusted_certificate_is_a_tls_error_unless_insecure() {
    let server = spec_service().start().await.unwrap();
    // No CA given: the system trust store does not know the test CA.
    let mut target = server.target();
    target.tls = TlsOptions::default();
    let e = connector().open(&ctx(5), &target, &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");
    assert!(e.message.contains("TLS") && e.message.contains("ca_pem"), "{e}");
    assert!(!e.retryable);

    // Another CA: still refused.
    target.tls = TlsOptions {
        insecure: false,
        ca_pem: Some(TestPki::generate().unwrap().ca_pem),
        pin_sha256: None,
        allow_plain_http: false,
    };
    let e = connector().open(&ctx(5), &target, &server.credentials()).await.err().expect("must fail");
    common::assert_error(&e, ErrorCode::ProtocolError, "TLS");
    assert!(server.requests().is_empty(), "a request went over an unverified connection");

    // Garbage CA bundle: refused before connecting.
    target.tls =
        TlsOptions { insecure: false, ca_pem: Some("not a pem".into()), pin_sha256: None, allow_plain_http: false };
    let e = connector().open(&ctx(5), &target, &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");

    // Explicit opt-in.
    target.tls = TlsOptions { insecure: true, ca_pem: None, pin_sha256: None, allow_plain_http: false };
    connector().open(&ctx(5), &target, &server.credentials()).await.expect("insecure connects");
}

#[tokio::test]
async fn oversized_answer_is_refused() {
    let server = spec_service().start().await.unwrap();
    let c = RedfishConnector::new(RedfishConfig { max_response_bytes: 4096, ..RedfishConfig::default() });
    let mut s = c.open(&ctx(5), &server.target(), &server.credentials()).await.expect("connect");
    let e = status_answered(&server, &mut s, Fault::status("GET", SYSTEM, 200).raw(vec![b' '; 64 * 1024])).await;
    common::assert_error(&e, ErrorCode::ProtocolError, "larger than 4096");
}

/// An answer within the size limit that would grow many times larger
/// parsed (a million tiny values: 2 bytes of JSON, 32 of memory each) is
/// refused before it is parsed; the BMC's other answers still are read.
#[tokio::test]
async fn an_answer_of_a_million_tiny_values_is_refused_unparsed() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    let body = format!("{{\"PowerState\": \"On\", \"Padding\": [{}0]}}", "0,".repeat(1_000_000));
    let e = status_answered(&server, &mut s, Fault::status("GET", SYSTEM, 200).raw(body.into_bytes()).times(1)).await;
    common::assert_error(&e, ErrorCode::ProtocolError, "more than 500000: refused unparsed");
    assert!(e.message.len() < 2048, "{} bytes", e.message.len());
    assert_eq!(power(&mut s, PowerOp::Status).await.unwrap(), Some(bmcfleet_schema::PowerState::On));
}

/// A connector whose sessions may hold at most `bytes` of BMC answers at once.
fn connector_holding(bytes: usize) -> RedfishConnector {
    RedfishConnector::new(RedfishConfig {
        max_buffered_bytes: bytes,
        request_timeout: Duration::from_secs(60),
        ..RedfishConfig::default()
    })
}

/// Answers are charged against the worker's answer memory, body and
/// parsed values: one that does not fit fails `worker_exhausted`
/// (retryable, the worker's limit, not the BMC's fault), and every answer
/// gives its share back once dropped.
#[tokio::test]
async fn an_answer_past_the_worker_s_answer_memory_is_refused_and_memory_is_given_back() {
    let server = spec_service().start().await.unwrap();
    let connector = connector_holding(1 << 20);
    let mut s = connector.open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect");
    assert_eq!(connector.answer_bytes_held(), 0);
    // 2 MiB of body (well within the 8 MiB size limit), few values.
    let big = format!("{{\"PowerState\": \"On\", \"Padding\": \"{}\"}}", "x".repeat(2 << 20));
    let e = status_answered(&server, &mut s, Fault::status("GET", SYSTEM, 200).raw(big.into_bytes()).times(1)).await;
    common::assert_error(&e, ErrorCode::WorkerExhausted, "max_buffered_bytes");
    assert!(e.retryable && !e.not_sent, "{e:?}");
    assert_eq!(connector.answer_bytes_held(), 0, "a refused answer kept its share");
    // 200 KB of body, but 100,000 values: parsed, several MiB.
    let many = format!("{{\"PowerState\": \"On\", \"Padding\": [{}0]}}", "0,".repeat(100_000));
    let e = status_answered(&server, &mut s, Fault::status("GET", SYSTEM, 200).raw(many.into_bytes()).times(1)).await;
    common::assert_error(&e, ErrorCode::WorkerExhausted, "max_buffered_bytes");
    // More values than any answer that is parsed may hold: charged as that
    // many at most, and refused as the BMC's fault, not the worker's.
    let nested = "[".repeat(4 << 20);
    let roomy = connector_holding(64 << 20);
    let mut t = roomy.open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect");
    let e = status_answered(&server, &mut t, Fault::status("GET", SYSTEM, 200).raw(nested.into_bytes()).times(1)).await;
    common::assert_error(&e, ErrorCode::ProtocolError, "refused unparsed");
    // Ordinary answers fit, and give their share back.
    assert_eq!(power(&mut s, PowerOp::Status).await.unwrap(), Some(bmcfleet_schema::PowerState::On));
    assert_eq!(connector.answer_bytes_held(), 0);
}

/// The answer memory is the connector's, shared by all its sessions: an
/// answer one BMC is still sending holds what it sent so far (not the
/// length it announced), and another BMC's answer that does not fit beside
/// it is refused, until it is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_of_one_connector_share_its_answer_memory() {
    let (slow, other) = (spec_service().start().await.unwrap(), spec_service().start().await.unwrap());
    let connector = std::sync::Arc::new(connector_holding(10 << 20));
    let held_reaches = |pred: fn(usize) -> bool| {
        let connector = connector.clone();
        async move {
            let until = Instant::now() + Duration::from_secs(30);
            while !pred(connector.answer_bytes_held()) {
                assert!(Instant::now() < until, "answer memory stayed at {} bytes", connector.answer_bytes_held());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let mut a = connector.open(&ctx(10), &slow.target(), &slow.credentials()).await.expect("connect");
    let mut b = connector.open(&ctx(10), &other.target(), &other.credentials()).await.expect("connect");
    // A's BMC announces 8 MiB, sends 7 MiB of it and stalls: A holds those 7 MiB.
    slow.push_fault(Fault::stall("GET", SYSTEM, 7 << 20).times(1));
    let stalled = tokio::spawn(async move { a.power().unwrap().power(&ctx(60), PowerOp::Status).await.map(drop) });
    held_reaches(|n| n >= 7 << 20).await;
    assert!(
        connector.answer_bytes_held() < 8 << 20,
        "the announced length is held, not what was sent: {}",
        connector.answer_bytes_held()
    );
    // B's answer: 200 KB holding 100,000 values, charged about 5 MiB: more than is left.
    let padded = format!("{{\"PowerState\": \"On\", \"Padding\": [{}0]}}", "0,".repeat(100_000));
    let e =
        status_answered(&other, &mut b, Fault::status("GET", SYSTEM, 200).raw(padded.clone().into_bytes()).times(1))
            .await;
    common::assert_error(&e, ErrorCode::WorkerExhausted, "max_buffered_bytes");
    // A's action ends: its share comes back, and B's same answer fits.
    stalled.abort();
    assert!(stalled.await.unwrap_err().is_cancelled());
    held_reaches(|n| n == 0).await;
    other.push_fault(Fault::status("GET", SYSTEM, 200).raw(padded.into_bytes()).times(1));
    assert_eq!(power(&mut b, PowerOp::Status).await.unwrap(), Some(bmcfleet_schema::PowerState::On));
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    let e = status_answered(
        &server,
        &mut s,
        Fault::status("GET", SYSTEM, 307).header("location", "https://198.51.100.1/redfish/v1/Systems/1"),
    )
    .await;
    common::assert_error(&e, ErrorCode::ProtocolError, "307");
}

#[tokio::test]
async fn raw_request_bounds_are_checked_before_sending() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    server.clear_requests();
    let big = json!({"Oem": "x".repeat(70 * 1024)});
    let e = s
        .raw()
        .unwrap()
        .raw(
            &ctx(5),
            &RawRequest::Redfish(RawRedfish { method: HttpMethod::Patch, path: SYSTEM.into(), body: Some(big) }),
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    let e = common::raw_get(&mut s, "/redfish/v1/../../etc").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(server.requests().is_empty(), "a refused raw request was sent");
}

#[tokio::test]
async fn expired_deadline_sends_nothing() {
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    server.clear_requests();
    let past = Ctx::new(Instant::now() - Duration::from_millis(1));
    let e = s.power().unwrap().power(&past, PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::DeadlineExceeded, "{e}");
    assert!(server.requests().is_empty());
}

/// A service without `PowerCycle`: the provider cycles as ForceOff, wait
/// for Off, On. This BMC accepts ForceOff but keeps reporting On (as a
/// wedged host does), so the deadline fires while waiting: `not_reached`
/// (it was read, and it was not off) that says ForceOff was sent, and On is
/// never sent.
#[tokio::test]
async fn power_cycle_deadline_is_not_reached_and_on_is_not_sent() {
    let mut system = spec_service().start().await.unwrap().resource(SYSTEM).unwrap();
    system["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"] =
        json!(["On", "ForceOff", "GracefulShutdown", "ForceRestart"]);
    let server = spec_service().resource(SYSTEM, system.clone()).start().await.unwrap();
    let mut s = open(&server).await;
    // Every read of the system says On, whatever the reset did.
    server.push_fault(Fault::status("GET", SYSTEM, 200).json(&system));
    let started = Instant::now();
    let e = s.power().unwrap().power(&ctx_ms(1200), PowerOp::Cycle).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.code, ErrorCode::NotReached, "{e}");
    assert!(e.message.contains("ForceOff was accepted") && e.message.contains("still reported On"), "{e}");
    assert!(took < Duration::from_millis(2200), "took {took:?}");
    let resets: Vec<String> =
        server.requests_to("POST", RESET).iter().filter_map(|r| r.json()).map(|b| b["ResetType"].to_string()).collect();
    assert_eq!(resets, vec!["\"ForceOff\"".to_owned()], "only ForceOff may be sent");
}

/// The same with the read-back itself hanging past the deadline.
#[tokio::test]
async fn power_cycle_with_a_hung_read_back_is_a_timeout_naming_force_off() {
    let mut system = spec_service().start().await.unwrap().resource(SYSTEM).unwrap();
    system["Actions"]["#ComputerSystem.Reset"]["ResetType@Redfish.AllowableValues"] = json!(["On", "ForceOff"]);
    let server = spec_service().resource(SYSTEM, system).start().await.unwrap();
    let mut s = open(&server).await;
    // The first read (state before the cycle) answers; the next ones hang.
    server.push_fault(Fault::hang("GET", SYSTEM).after(1));
    let e = s.power().unwrap().power(&ctx_ms(1200), PowerOp::Cycle).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Timeout, "ForceOff was accepted");
    let resets: Vec<String> =
        server.requests_to("POST", RESET).iter().filter_map(|r| r.json()).map(|b| b["ResetType"].to_string()).collect();
    assert_eq!(resets, vec!["\"ForceOff\"".to_owned()], "only ForceOff may be sent");
}

/// A service root whose session link points at another host (spelled as a
/// URL parser would read it): the credentials never reach that host, the
/// link is read as a path on the BMC, and a link that leaves the BMC fails
/// with `protocol_error` and sends nothing there.
#[tokio::test]
async fn links_supplied_by_the_bmc_never_lead_to_another_host() {
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let other = elsewhere.local_addr().unwrap();
    for link in [format!("@{other}/x"), format!("//{other}/x"), format!("https://{other}/x"), format!("\\\\{other}\\x")]
    {
        let root = json!({"@odata.id": "/redfish/v1/", "RedfishVersion": "1.15.0",
                          "Systems": {"@odata.id": "/redfish/v1/Systems"},
                          "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
                          "Links": {"Sessions": {"@odata.id": link}}});
        let server = spec_service().resource("/redfish/v1", root).start().await.unwrap();
        let _ = connector().open(&ctx(5), &server.target(), &server.credentials()).await;
        assert!(elsewhere.accept().is_err(), "{link}: the worker connected to {other}");
    }
}

#[tokio::test]
async fn a_collection_member_on_another_host_fails_and_nothing_is_sent_there() {
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    elsewhere.set_nonblocking(true).unwrap();
    let other = elsewhere.local_addr().unwrap();
    for member in [format!("https://{other}/redfish/v1/Systems/1"), format!("//{other}/redfish/v1/Systems/1")] {
        let systems = json!({"Members": [{"@odata.id": member}], "Members@odata.count": 1});
        let server = spec_service().resource("/redfish/v1/Systems", systems).start().await.unwrap();
        let e = connector().open(&ctx(5), &server.target(), &server.credentials()).await.err().expect("must fail");
        assert_eq!(e.code, ErrorCode::ProtocolError, "{member}: {e}");
        assert!(e.message.contains("points away from the BMC"), "{member}: {e}");
        assert!(elsewhere.accept().is_err(), "{member}: the worker connected to {other}");
    }
}

#[tokio::test]
async fn a_pinned_certificate_is_the_only_one_trusted() {
    use rustls::pki_types::pem::PemObject;
    use sha2::Digest;
    let pki = TestPki::generate().unwrap();
    let server = spec_service().pki(pki.clone()).start().await.unwrap();
    let leaf = rustls::pki_types::CertificateDer::from_pem_slice(pki.cert_pem.as_bytes()).unwrap();
    let digest = sha2::Sha256::digest(leaf.as_ref());
    let hex: Vec<String> = digest.iter().map(|b| format!("{b:02X}")).collect();
    let mut target = server.target();
    // The pin alone (no CA): the self-signed-style case it exists for.
    target.tls = TlsOptions { insecure: false, ca_pem: None, pin_sha256: Some(hex.join(":")), allow_plain_http: false };
    connector().open(&ctx(5), &target, &server.credentials()).await.expect("the pinned certificate connects");
    // Another fingerprint, even with the right CA: refused before any request.
    server.clear_requests();
    let mut other = digest.to_vec();
    other[0] ^= 1;
    let other: String = other.iter().map(|b| format!("{b:02x}")).collect();
    target.tls = TlsOptions {
        insecure: true,
        ca_pem: Some(pki.ca_pem.clone()),
        pin_sha256: Some(other),
        allow_plain_http: false,
    };
    let e = connector().open(&ctx(5), &target, &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");
    assert!(server.requests().is_empty(), "a request went to a BMC whose certificate is not the pinned one");
    // A malformed pin is a configuration error.
    target.tls = TlsOptions { insecure: false, ca_pem: None, pin_sha256: Some("abc".into()), allow_plain_http: false };
    let e = connector().open(&ctx(5), &target, &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
}

/// Accounts without an `Enabled` property (Nokia's BMC): every account is
/// enabled, including the one logged in; the property is never sent, and a
/// disabled account is `unsupported` with nothing sent.
#[tokio::test]
async fn accounts_without_enabled_are_enabled_and_never_sent_it() {
    let server = spec_service()
        .resource(
            "/redfish/v1/AccountService",
            json!({"Id": "AccountService", "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}}),
        )
        .resource(
            "/redfish/v1/AccountService/Accounts",
            json!({"Members": [{"@odata.id": "/redfish/v1/AccountService/Accounts/1"}], "Members@odata.count": 1}),
        )
        .resource(
            "/redfish/v1/AccountService/Accounts/1",
            json!({"Id": "1", "UserName": "admin", "RoleId": "Administrator", "Password": null}),
        )
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    let users = s.users().unwrap().list_users(&ctx(5)).await.unwrap();
    assert!(users.iter().all(|u| u.enabled), "{users:?}");

    let spec = |enabled| UserSpec {
        name: "ops".into(),
        password: Secret::new("an-ops-password-1"),
        role: UserRole::Operator,
        enabled,
    };
    server.clear_requests();
    let e = s.users().unwrap().create_user(&ctx(5), &spec(false)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(server.writes().is_empty(), "a disabled account was asked for anyway");

    s.users().unwrap().create_user(&ctx(5), &spec(true)).await.unwrap();
    let post = server.requests_to("POST", "/redfish/v1/AccountService/Accounts");
    let body = post[0].json().unwrap();
    assert_eq!(body["UserName"], json!("ops"));
    assert!(body.get("Enabled").is_none(), "Enabled sent: {body}");

    let disable = UserUpdate { name: "ops".into(), password: None, role: None, enabled: Some(false) };
    assert_eq!(s.users().unwrap().update_user(&ctx(5), &disable).await.unwrap_err().code, ErrorCode::Unsupported);
    let enable = UserUpdate { enabled: Some(true), ..disable };
    assert!(
        s.users().unwrap().update_user(&ctx(5), &enable).await.unwrap().enabled,
        "already enabled: nothing to send"
    );
    assert!(server.requests().iter().all(|r| r.method != "PATCH"), "nothing to PATCH");
}

/// A spec service whose manager has one CD device shaped like HPE iLO 5's:
/// no standard InsertMedia/EjectMedia, OEM actions under `Oem.Hpe.Actions`.
fn ilo_media(device: serde_json::Value) -> bmcfleet_testing::redfish::MockupBuilder {
    let manager = common::MANAGER;
    spec_service()
        .resource(
            manager,
            json!({"@odata.type": "#Manager.v1_17_0.Manager", "Id": "BMC", "ManagerType": "BMC", "FirmwareVersion": "2.78",
                   "VirtualMedia": {"@odata.id": format!("{manager}/VirtualMedia")}}),
        )
        .resource(
            &format!("{manager}/VirtualMedia"),
            json!({"Members": [{"@odata.id": format!("{manager}/VirtualMedia/2")}], "Members@odata.count": 1}),
        )
        .resource(&format!("{manager}/VirtualMedia/2"), device)
}

#[tokio::test]
async fn hpe_oem_virtual_media_actions_are_used_before_any_patch() {
    let vm = format!("{}/VirtualMedia/2", common::MANAGER);
    let insert = format!("{vm}/Actions/Oem/Hpe/HpeiLOVirtualMedia.InsertVirtualMedia");
    let eject = format!("{vm}/Actions/Oem/Hpe/HpeiLOVirtualMedia.EjectVirtualMedia");
    let server =
        ilo_media(json!({"@odata.id": vm, "Id": "2", "MediaTypes": ["CD", "DVD"], "Image": null, "Inserted": false,
        "WriteProtected": true,
        "Oem": {"Hpe": {"@odata.type": "#HpeiLOVirtualMedia.v2_2_0.HpeiLOVirtualMedia", "BootOnNextServerReset": false,
            "Actions": {"#HpeiLOVirtualMedia.InsertVirtualMedia": {"target": format!("{insert}/")},
                        "#HpeiLOVirtualMedia.EjectVirtualMedia": {"target": format!("{eject}/")}}}}}))
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    let url = "http://192.0.2.10/boot.iso";
    s.virtual_media().unwrap().insert_media(&ctx(5), url, bmcfleet_schema::MediaKind::Cd).await.unwrap();
    let posts = server.requests_to("POST", &insert);
    assert_eq!(
        posts.len(),
        1,
        "{:?}",
        server.writes().iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>()
    );
    assert_eq!(posts[0].json().unwrap(), json!({"Image": url}));
    assert!(server.requests_to("PATCH", &vm).is_empty(), "PATCH used although an OEM action exists");
    s.virtual_media().unwrap().eject_media(&ctx(5), bmcfleet_schema::MediaKind::Cd).await.unwrap();
    assert_eq!(server.requests_to("POST", &eject).len(), 1);
    assert_eq!(server.resource(&vm).unwrap()["Inserted"], json!(false));
}

/// A BMC that acknowledges InsertMedia or EjectMedia (`204`) and does
/// nothing: the device does not read back inserted (or ejected), so the
/// action is not reported done; it is once the BMC does it.
#[tokio::test]
async fn media_actions_acknowledged_but_not_done_are_not_reported_done() {
    let vm = format!("{}/VirtualMedia/2", common::MANAGER);
    let insert = format!("{vm}/Actions/VirtualMedia.InsertMedia");
    let eject = format!("{vm}/Actions/VirtualMedia.EjectMedia");
    let server = ilo_media(json!({"@odata.id": vm, "Id": "2", "MediaTypes": ["CD"], "Image": null, "Inserted": false,
        "Actions": {"#VirtualMedia.InsertMedia": {"target": insert}, "#VirtualMedia.EjectMedia": {"target": eject}}}))
    .start()
    .await
    .unwrap();
    let mut s = open(&server).await;
    let url = "http://192.0.2.10/boot.iso";
    let cd = bmcfleet_schema::MediaKind::Cd;

    server.push_fault(Fault::status("POST", &insert, 204).raw("").times(1));
    let e = s.virtual_media().unwrap().insert_media(&ctx(5), url, cd).await.expect_err("nothing was inserted");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert_eq!(server.resource(&vm).unwrap()["Inserted"], json!(false));
    s.virtual_media().unwrap().insert_media(&ctx(5), url, cd).await.expect("inserted");
    assert_eq!(server.resource(&vm).unwrap()["Inserted"], json!(true));

    server.push_fault(Fault::status("POST", &eject, 204).raw("").times(1));
    let e = s.virtual_media().unwrap().eject_media(&ctx(5), cd).await.expect_err("nothing was ejected");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert_eq!(server.resource(&vm).unwrap()["Image"], json!(url));
    s.virtual_media().unwrap().eject_media(&ctx(5), cd).await.expect("ejected");
    assert_eq!(server.resource(&vm).unwrap()["Inserted"], json!(false));
}

#[tokio::test]
async fn media_patch_sends_only_what_the_device_has_and_falls_back_on_a_400() {
    let vm = format!("{}/VirtualMedia/2", common::MANAGER);
    // No actions at all, and no WriteProtected property.
    let server = ilo_media(json!({"@odata.id": vm, "Id": "2", "MediaTypes": ["CD"], "Image": null, "Inserted": false}))
        .start()
        .await
        .unwrap();
    server.push_fault(Fault::status("PATCH", &vm, 400).times(1));
    let mut s = open(&server).await;
    let url = "http://192.0.2.10/boot.iso";
    s.virtual_media().unwrap().insert_media(&ctx(5), url, bmcfleet_schema::MediaKind::Cd).await.unwrap();
    let patches = server.requests_to("PATCH", &vm);
    assert_eq!(patches.len(), 2);
    assert_eq!(
        patches[0].json().unwrap(),
        json!({"Image": url, "Inserted": true}),
        "WriteProtected is not in this device's schema"
    );
    assert_eq!(patches[1].json().unwrap(), json!({"Image": url}));
}

/// A system whose live `Boot` is read-only and whose changes go to a
/// settings object (`@Redfish.Settings`, as Nokia and Dell iDRAC 10 do): the
/// override is written there with its own ETag and apply time, read back
/// from there, and reported as applying at the next reset; the live
/// resource is never PATCHed (it would answer 405).
#[tokio::test]
async fn boot_changes_go_to_the_settings_object_and_apply_on_reset() {
    let sd = format!("{SYSTEM}/SD");
    let server = spec_service()
        .resource(
            SYSTEM,
            json!({"@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1", "PowerState": "On",
                   "@Redfish.Settings": {"@odata.type": "#Settings.v1_3_5.Settings", "SettingsObject": {"@odata.id": sd},
                                         "SupportedApplyTimes": ["OnReset"]},
                   "Boot": {"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None", "BootSourceOverrideMode": "UEFI",
                            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd"]},
                   "Actions": {"#ComputerSystem.Reset": {"target": RESET, "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "ForceRestart"]}}}),
        )
        .resource(
            &sd,
            json!({"@odata.id": sd, "@odata.etag": "W/\"sd-1\"",
                   "Boot": {"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
                            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "Cd"]}}),
        )
        .deny("PATCH", SYSTEM)
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    // Cd is allowed by the settings object only: the lists are merged.
    let req = BootDeviceRequest { device: BootDevice::Cdrom, persistent: false, efi: true };
    let applies = s.boot().unwrap().set_boot_device(&ctx(5), &req).await.unwrap();
    assert_eq!(applies, bmcfleet_provider::Applies::OnReset);
    assert!(server.requests_to("PATCH", SYSTEM).is_empty(), "the read-only live resource was PATCHed");
    let patches = server.requests_to("PATCH", &sd);
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0].header("if-match"), Some("W/\"sd-1\""));
    assert_eq!(
        patches[0].json().unwrap(),
        json!({"Boot": {"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"},
               "@Redfish.SettingsApplyTime": {"ApplyTime": "OnReset"}}),
        "the mode (UEFI already) is not sent"
    );
    assert_eq!(server.resource(&sd).unwrap()["Boot"]["BootSourceOverrideTarget"], json!("Cd"));
    // Pending until the system resets; then it is the override. `boot get`
    // (next_boot) shows the pending change as pending, not the live value.
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap().device, BootDevice::None);
    let (next, when) = s.boot().unwrap().next_boot(&ctx(5)).await.unwrap();
    assert_eq!((next.device, next.persistent, when), (BootDevice::Cdrom, false, bmcfleet_provider::Applies::OnReset));
    let got = bmcfleet_provider::perform(&mut s, &ctx(5), &bmcfleet_schema::Action::GetBootDevice).await.unwrap();
    assert!(
        matches!(got, Some(bmcfleet_schema::ActionData::BootDevicePending(ref r)) if r.device == BootDevice::Cdrom),
        "{got:?}"
    );
    power(&mut s, PowerOp::Reset).await.unwrap();
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap().device, BootDevice::Cdrom);
    assert_eq!(s.boot().unwrap().next_boot(&ctx(5)).await.unwrap().1, bmcfleet_provider::Applies::Now);
}

/// One rule for a missing linked resource: a service or collection the BMC
/// links that answers 404 is `unsupported` (not implemented), wherever it
/// is met; `target_not_found` is for what a batch names.
#[tokio::test]
async fn a_linked_resource_that_is_missing_is_unsupported_everywhere() {
    let manager = common::MANAGER;
    // The root links AccountService, which does not exist.
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    let e = s.users().unwrap().list_users(&ctx(5)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    // AccountService links an Accounts collection that does not exist; the
    // manager links EthernetInterfaces that do not exist.
    let server = spec_service()
        .resource("/redfish/v1/AccountService", json!({"Id": "AccountService", "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}}))
        .resource(
            manager,
            json!({"Id": "BMC", "ManagerType": "BMC", "EthernetInterfaces": {"@odata.id": format!("{manager}/EthernetInterfaces")}}),
        )
        .start()
        .await
        .unwrap();
    let mut s = open(&server).await;
    let e = s.users().unwrap().list_users(&ctx(5)).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Unsupported, "Accounts collection");
    let e = s.network_source().unwrap().network_source(&ctx(5)).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Unsupported, "EthernetInterfaces");
    // A user the batch names that is not there stays target_not_found.
    let upd = UserUpdate { name: "nobody".into(), password: Some("x-long-enough".into()), role: None, enabled: None };
    let server = common::standard_accounts(spec_service()).start().await.unwrap();
    let mut s = open(&server).await;
    assert_eq!(s.users().unwrap().update_user(&ctx(5), &upd).await.unwrap_err().code, ErrorCode::TargetNotFound);
}

/// UEFI HTTP boot is a settable target where the BMC allows `UefiHttp`; a
/// current override bmcfleet has no name for (`Usb`, `UefiTarget`, …) reads
/// back as `other` instead of failing the read.
#[tokio::test]
async fn uefi_http_is_settable_and_unknown_targets_read_as_other() {
    let server = spec_service().start().await.unwrap();
    server.merge_resource(SYSTEM, &json!({"Boot": {"BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Cd", "Hdd", "BiosSetup", "UefiHttp"]}}));
    let mut s = open(&server).await;
    let http = BootDeviceRequest { device: BootDevice::Http, persistent: false, efi: true };
    s.boot().unwrap().set_boot_device(&ctx(5), &http).await.unwrap();
    assert_eq!(server.resource(SYSTEM).unwrap()["Boot"]["BootSourceOverrideTarget"], json!("UefiHttp"));
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap(), http);
    server.merge_resource(
        SYSTEM,
        &json!({"Boot": {"BootSourceOverrideTarget": "Usb", "BootSourceOverrideEnabled": "Once"}}),
    );
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap().device, BootDevice::Other);
    // Where the BMC does not list UefiHttp: refused before sending.
    server.merge_resource(
        SYSTEM,
        &json!({"Boot": {"BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe"]}}),
    );
    server.clear_requests();
    assert_eq!(s.boot().unwrap().set_boot_device(&ctx(5), &http).await.unwrap_err().code, ErrorCode::Unsupported);
    assert!(server.requests().iter().all(|r| r.method != "PATCH"));
}

/// A host name the worker already resolved and checked is not looked up
/// again: the provider connects to the addresses the target carries
/// (`options.resolved`), so a DNS answer that changes in between cannot
/// redirect it. `bmc.invalid` never resolves: only the pinned address
/// can reach the BMC.
#[tokio::test]
async fn a_resolved_host_name_is_not_looked_up_again() {
    let server = spec_service().start().await.unwrap();
    let mut target = server.target();
    target.address = format!("bmc.invalid:{}", server.addr().port()).parse().unwrap();
    // The test CA names 127.0.0.1, not this name: verification is off for this test target.
    target.tls = TlsOptions { insecure: true, ..TlsOptions::default() };
    let e = connector().open(&ctx(5), &target, &server.credentials()).await.err().expect("the name does not resolve");
    assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
    target.options.resolved = vec!["127.0.0.1".parse().unwrap()];
    let mut s =
        connector().open(&ctx(5), &target, &server.credentials()).await.expect("connects to the pinned address");
    assert_eq!(power(&mut s, PowerOp::Status).await.unwrap(), Some(bmcfleet_schema::PowerState::On));
}

/// Verified effects with the generic power layer (issue 17): a graceful
/// shutdown the BMC accepts (204) but the host ignores is escalated to a
/// hard off when the action asks for it, and reported `not_reached` when it
/// does not; the settle timeout bounds the wait.
#[tokio::test]
async fn an_ignored_graceful_shutdown_escalates_to_force_off_only_when_asked() {
    use bmcfleet_schema::{Action, ActionData, PowerSettle, PowerState};
    let server = spec_service().start().await.unwrap();
    let mut s = open(&server).await;
    let on = bmcfleet_provider::perform(&mut s, &ctx_ms(10_000), &Action::Power(PowerOp::On)).await.unwrap();
    assert_eq!(on, Some(ActionData::PowerState(PowerState::On)), "verified on");

    // The host ignores the ACPI request: the POST is accepted, nothing changes.
    server.push_fault(Fault::status("POST", RESET, 204).times(1));
    let escalate = Action::PowerSettle(PowerSettle {
        op: PowerOp::SoftOff,
        settle: None,
        escalate_after: Some(Duration::from_millis(800)),
    });
    let r = bmcfleet_provider::perform(&mut s, &ctx_ms(10_000), &escalate).await.unwrap();
    assert_eq!(r, Some(ActionData::PowerState(PowerState::Off)));
    let resets: Vec<String> = server
        .requests_to("POST", RESET)
        .iter()
        .filter_map(|r| r.json())
        .map(|b| b["ResetType"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(&resets[resets.len() - 2..], ["GracefulShutdown", "ForceOff"], "{resets:?}");

    // Without escalation, the same ignored request is not_reached at the settle time.
    bmcfleet_provider::perform(&mut s, &ctx_ms(10_000), &Action::Power(PowerOp::On)).await.unwrap();
    server.push_fault(Fault::status("POST", RESET, 204).times(1));
    let started = Instant::now();
    let soft = Action::PowerSettle(PowerSettle {
        op: PowerOp::SoftOff,
        settle: Some(Duration::from_millis(800)),
        escalate_after: None,
    });
    let e = bmcfleet_provider::perform(&mut s, &ctx_ms(10_000), &soft).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotReached, "{e}");
    assert!(started.elapsed() < Duration::from_secs(2), "bounded by the settle time: {:?}", started.elapsed());
    let last = server.requests_to("POST", RESET).last().and_then(|r| r.json()).unwrap();
    assert_eq!(last["ResetType"], "GracefulShutdown", "never switched off hard unasked");
}

/// An `@odata.etag` that is no valid HTTP header value (a line break, a
/// control character): the PATCH cannot carry it as `If-Match`, so it is not sent.
/// A non-retryable protocol error marked not sent, and the session is fine
/// (nothing went wrong on the wire).
#[tokio::test]
async fn an_etag_that_is_no_header_value_fails_the_patch_before_sending() {
    for etag in ["W/\"1\"\r\nX-Injected: 1", "W/\"1\u{0}\"", "W/\"1\u{7f}\""] {
        let server = spec_service().start().await.unwrap();
        let mut s = open(&server).await;
        let mut system = server.resource(SYSTEM).unwrap();
        system["@odata.etag"] = json!(etag);
        // Served once as the BMC wrote it (in the body only: no ETag header).
        server.push_fault(Fault::status("GET", SYSTEM, 200).json(&system).times(1));
        let e = set_boot(&mut s, BootDevice::Pxe).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::ProtocolError, "{etag:?}: {e}");
        assert!(e.message.contains("ETag") && e.message.contains("nothing was sent"), "{e}");
        assert!(!e.retryable && e.not_sent, "{etag:?}: {e:?}");
        assert!(server.requests_to("PATCH", SYSTEM).is_empty(), "a PATCH was sent");
        assert!(s.is_healthy(), "nothing went wrong on the wire");
    }
}

/// A BMC whose collection members are fat: 12 members of 1 MiB each
/// (each one a legal answer). A walk that keeps the members it reads
/// (accounts, the manager's interfaces, media devices, an inventory
/// collection) stops once they pass one answer's worth
/// (`max_response_bytes`, 8 MiB) instead of holding them all: what a BMC
/// lists is otherwise bounded only by the deadline (thousands of such
/// members in a minute over a LAN, gigabytes held at once).
#[tokio::test]
async fn walks_that_keep_members_hold_at_most_one_answers_worth() {
    const FAT: usize = 12;
    let pad = "x".repeat(1 << 20);
    let fat = |path: &str, body: serde_json::Value| {
        let mut body = body;
        body["@odata.id"] = json!(path);
        body["Description"] = json!(pad);
        body
    };
    let collection = |base: &str| json!({"Members": (0..FAT).map(|i| json!({"@odata.id": format!("{base}/{i}")})).collect::<Vec<_>>(), "Members@odata.count": FAT});
    let accounts = "/redfish/v1/AccountService/Accounts";
    let nics = format!("{}/EthernetInterfaces", common::MANAGER);
    let media = format!("{}/VirtualMedia", common::MANAGER);
    let cpus = format!("{SYSTEM}/Processors");
    let mut builder = common::standard_accounts(spec_service())
        .resource(
            common::MANAGER,
            json!({"@odata.type": "#Manager.v1_17_0.Manager", "Id": "BMC", "ManagerType": "BMC", "FirmwareVersion": "1.0.0",
                   "EthernetInterfaces": {"@odata.id": nics}, "VirtualMedia": {"@odata.id": media}}),
        )
        .resource(accounts, collection(accounts))
        .resource(&nics, collection(&nics))
        .resource(&media, collection(&media))
        .resource(&cpus, collection(&cpus));
    for i in 0..FAT {
        let p = |base: &str| format!("{base}/{i}");
        builder = builder
            .resource(
                &p(accounts),
                fat(
                    &p(accounts),
                    json!({"Id": i.to_string(), "UserName": format!("u{i}"), "RoleId": "ReadOnly", "Enabled": true}),
                ),
            )
            .resource(
                &p(&nics),
                fat(&p(&nics), json!({"Id": i.to_string(), "InterfaceEnabled": true, "IPv4Addresses": []})),
            )
            .resource(
                &p(&media),
                fat(&p(&media), json!({"Id": i.to_string(), "MediaTypes": ["Floppy"], "Inserted": false})),
            )
            .resource(&p(&cpus), fat(&p(&cpus), json!({"Id": i.to_string(), "Model": "spec cpu", "TotalCores": 8})));
    }
    let server = builder.start().await.unwrap();
    server.merge_resource(SYSTEM, &json!({"Processors": {"@odata.id": cpus}}));
    let mut s = open(&server).await;
    let read = |base: &str| {
        server.requests().iter().filter(|r| r.method == "GET" && r.path.starts_with(&format!("{base}/"))).count()
    };

    let e = s.users().unwrap().list_users(&ctx(20)).await.expect_err("12 MiB of accounts held");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");
    assert!(read(accounts) < FAT, "{} accounts read", read(accounts));

    let e = s.network_source().unwrap().network_source(&ctx(20)).await.expect_err("12 MiB of interfaces held");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");
    assert!(read(&nics) < FAT, "{} interfaces read", read(&nics));

    let e = s
        .virtual_media()
        .unwrap()
        .insert_media(&ctx(20), "http://192.0.2.10/boot.iso", bmcfleet_schema::MediaKind::Cd)
        .await
        .expect_err("12 MiB of devices held");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");
    assert!(read(&media) < FAT, "{} media devices read", read(&media));

    let inv = s.inventory().unwrap().inventory(&ctx(20)).await.expect("the other sections");
    assert!(inv.unread.contains(&bmcfleet_schema::components::Section::Processors), "{:?}", inv.unread);
    assert!(read(&cpus) < FAT, "{} processors read", read(&cpus));
}

/// `Retry-After` says how long to wait at least: a BMC answering every
/// poll of a task with `Retry-After: 0` does not make the worker poll it
/// faster than its own interval (it asked for 10 ms polls, a hundred
/// HTTPS exchanges a second for as long as the action lasts). Both task
/// loops: a `202` followed to completion, and a firmware update's task.
#[tokio::test]
async fn retry_after_never_makes_the_worker_poll_faster_than_its_interval() {
    let monitor = "/redfish/v1/TaskService/Tasks/9";
    let server = spec_service().start().await.unwrap();
    let connector = RedfishConnector::new(RedfishConfig {
        task_poll_interval: Duration::from_millis(250),
        ..RedfishConfig::default()
    });
    let mut s = connector.open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect");
    server.push_fault(Fault::status("POST", RESET, 202).json(&json!({})).header("Location", monitor).times(1));
    server.push_fault(
        Fault::status("GET", monitor, 202).json(&json!({"TaskState": "Running"})).header("Retry-After", "0"),
    );
    let e = s.power().unwrap().power(&ctx_ms(1_000), PowerOp::Reset).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    let polls = server.requests_to("GET", monitor).len();
    assert!(polls <= 5, "{polls} polls in a second at a 250 ms interval");

    server.clear_faults();
    server.clear_requests();
    server.push_fault(Fault::status("GET", monitor, 503).header("Retry-After", "0"));
    let e = s.firmware_update().unwrap().watch_update(&ctx_ms(1_000), monitor).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    let polls = server.requests_to("GET", monitor).len();
    assert!(polls <= 5, "{polls} polls of a busy update task in a second at a 250 ms interval");
}

/// A BMC that acknowledges an account change without making it (a `204`
/// to the PATCH, a `201` naming an account that already existed): the
/// user action fails, since the account does not read back as asked,
/// instead of reporting whatever account the BMC shows as done.
#[tokio::test]
async fn user_changes_acknowledged_but_not_made_are_not_reported_done() {
    let accounts = "/redfish/v1/AccountService/Accounts";
    let viewer = format!("{accounts}/2");
    let server = common::standard_accounts(spec_service()).start().await.unwrap();
    let mut s = open(&server).await;

    let promote = UserUpdate { name: "viewer".into(), password: None, role: Some(UserRole::Admin), enabled: None };
    server.push_fault(Fault::status("PATCH", &viewer, 204).raw("").times(1));
    let e = s.users().unwrap().update_user(&ctx(5), &promote).await.expect_err("the role did not change");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert_eq!(server.resource(&viewer).unwrap()["RoleId"], json!("ReadOnly"));
    assert_eq!(s.users().unwrap().update_user(&ctx(5), &promote).await.expect("promoted").role, Some(UserRole::Admin));

    let disable = UserUpdate { name: "viewer".into(), password: None, role: None, enabled: Some(false) };
    server.push_fault(Fault::status("PATCH", &viewer, 204).raw("").times(1));
    let e = s.users().unwrap().update_user(&ctx(5), &disable).await.expect_err("still enabled");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");

    let spec = UserSpec {
        name: "ops".into(),
        password: Secret::new("an-ops-password-1"),
        role: UserRole::Operator,
        enabled: true,
    };
    server
        .push_fault(Fault::status("POST", accounts, 201).raw("").header("Location", &format!("{accounts}/1")).times(1));
    let e = s.users().unwrap().create_user(&ctx(5), &spec).await.expect_err("no account was created");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    let created = s.users().unwrap().create_user(&ctx(5), &spec).await.expect("created");
    assert_eq!((created.name.as_str(), created.role, created.enabled), ("ops", Some(UserRole::Operator), true));
}

/// A BMC that acknowledges deleting an account (`204` to the DELETE, or to
/// the PATCH emptying a slot) and keeps it: the delete fails, since the
/// user still reads back, instead of being reported done.
#[tokio::test]
async fn a_user_delete_acknowledged_but_not_made_is_not_reported_done() {
    let viewer = "/redfish/v1/AccountService/Accounts/2";
    let server = common::standard_accounts(spec_service()).start().await.unwrap();
    let mut s = open(&server).await;
    server.push_fault(Fault::status("DELETE", viewer, 204).raw("").times(1));
    let e = s.users().unwrap().delete_user(&ctx(5), "viewer").await.expect_err("the user is still there");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(server.resource(viewer).is_some());
    s.users().unwrap().delete_user(&ctx(5), "viewer").await.expect("deleted");
    assert!(server.resource(viewer).is_none());

    let server = common::slot_accounts(spec_service(), 4).start().await.unwrap();
    let mut s = open(&server).await;
    let spec = UserSpec {
        name: "ops".into(),
        password: Secret::new("an-ops-password-1"),
        role: UserRole::Operator,
        enabled: true,
    };
    let created = s.users().unwrap().create_user(&ctx(5), &spec).await.expect("created");
    let slot = format!("/redfish/v1/AccountService/Accounts/{}", created.id);
    server.push_fault(Fault::status("PATCH", &slot, 204).raw("").times(1));
    let e = s.users().unwrap().delete_user(&ctx(5), "ops").await.expect_err("the slot still holds the user");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    s.users().unwrap().delete_user(&ctx(5), "ops").await.expect("deleted");
    assert_eq!(server.resource(&slot).unwrap()["UserName"], json!(""));
}

/// A BMC that acknowledges enabling UEFI Secure Boot (`204`) and leaves it
/// off: the action fails instead of succeeding with a result that reads
/// `enabled: false`.
#[tokio::test]
async fn secure_boot_acknowledged_but_not_set_is_not_reported_done() {
    let sb = format!("{SYSTEM}/SecureBoot");
    let server = spec_service()
        .resource(&sb, json!({"Id": "SecureBoot", "SecureBootEnable": false, "SecureBootCurrentBoot": "Disabled", "SecureBootMode": "UserMode"}))
        .start()
        .await
        .unwrap();
    server.merge_resource(SYSTEM, &json!({"SecureBoot": {"@odata.id": sb}}));
    let mut s = open(&server).await;
    server.push_fault(Fault::status("PATCH", &sb, 204).raw("").times(1));
    let e = s.secure_boot().unwrap().set_secure_boot(&ctx(5), true).await.expect_err("secure boot is still off");
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(s.secure_boot().unwrap().set_secure_boot(&ctx(5), true).await.expect("enabled").enabled);
}

/// A BMC that applies an accepted change a moment later (its first read
/// back still shows the old value) is read again before the change counts
/// as not made.
#[tokio::test]
async fn a_change_the_bmc_shows_a_moment_later_is_done() {
    let sb = format!("{SYSTEM}/SecureBoot");
    let off = json!({"Id": "SecureBoot", "SecureBootEnable": false, "SecureBootCurrentBoot": "Disabled", "SecureBootMode": "UserMode"});
    let server = spec_service().resource(&sb, off.clone()).start().await.unwrap();
    server.merge_resource(SYSTEM, &json!({"SecureBoot": {"@odata.id": sb}}));
    let mut s = open(&server).await;
    // The read before the change is served; the first read after it is stale.
    server.push_fault(Fault::status("GET", &sb, 200).json(&off).after(1).times(1));
    assert!(
        s.secure_boot().unwrap().set_secure_boot(&ctx(5), true).await.expect("enabled once the BMC shows it").enabled
    );
    let stale = server.requests_to("GET", &sb).len();
    assert_eq!(stale, 3, "read before, stale read back, read again");
}

/// A system in Legacy mode lists no UEFI target (as sushy-emulator's and
/// other BMCs' lists follow the mode): `boot http --efi` is judged for UEFI
/// mode, sent as target and mode in one PATCH, and both read back. Asked
/// for Legacy mode, UefiHttp is refused before anything is sent.
#[tokio::test]
async fn uefi_http_from_legacy_mode_goes_in_one_patch_with_the_mode() {
    let legacy: &[&str] = &["None", "Pxe", "Cd", "Hdd"];
    let uefi: &[&str] = &["None", "Pxe", "Cd", "Hdd", "UefiHttp"];
    let server =
        spec_service().boot_targets_per_mode(SYSTEM, &[("Legacy", legacy), ("UEFI", uefi)]).start().await.unwrap();
    server.merge_resource(
        SYSTEM,
        &json!({"Boot": {"BootSourceOverrideMode": "Legacy", "BootSourceOverrideTarget@Redfish.AllowableValues": legacy}}),
    );
    let mut s = open(&server).await;
    let http = BootDeviceRequest { device: BootDevice::Http, persistent: false, efi: true };
    let e = s.boot().unwrap().set_boot_device(&ctx(5), &BootDeviceRequest { efi: false, ..http }).await.unwrap_err();
    common::assert_error(&e, ErrorCode::Unsupported, "UEFI mode only");
    assert!(server.requests().iter().all(|r| r.method != "PATCH"), "a refused override was sent");
    // The mockup itself refuses UefiHttp while Legacy stays: the mode must travel with it.
    s.boot().unwrap().set_boot_device(&ctx(5), &http).await.expect("http --efi from Legacy mode");
    let patches = server.requests_to("PATCH", SYSTEM);
    assert_eq!(patches.len(), 1, "one PATCH: {patches:?}");
    let boot = &server.resource(SYSTEM).unwrap()["Boot"];
    assert_eq!(
        (&boot["BootSourceOverrideTarget"], &boot["BootSourceOverrideMode"]),
        (&json!("UefiHttp"), &json!("UEFI"))
    );
    assert_eq!(s.boot().unwrap().boot_device(&ctx(5)).await.unwrap(), http);
}
