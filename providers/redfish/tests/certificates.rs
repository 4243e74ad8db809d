//! The BMC's HTTPS certificate on the Redfish mockup (the DMTF
//! public-rackmount1 mockup with a CertificateService built after DSP0266
//! and bmcweb: `MockupBuilder::certificate_service`, whose
//! ReplaceCertificate swaps the certificate the TLS server presents) and on
//! sushy-emulator (no CertificateService).
//!
//! Read: the certificate the session's own handshake saw. Replace: only
//! where ReplaceCertificate is advertised, only on a machine whose pins
//! already accept the new certificate, read back on a fresh connection
//! pinned to it; afterwards the new pin reaches the BMC and a stale one
//! does not.

mod common;

use bmcfleet_provider::tls::{first_certificate, sha256};
use bmcfleet_provider::{perform, BmcCertificates, Plan, PlannedRequest, ProviderError};
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{hex, Action, BmcCertReplace, BmcTarget, ErrorCode, Secret, TlsOptions};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{FakeSystem, MockupServer, SushyEmulator, TestPki, REPLACE_CERTIFICATE};
use common::{connector, ctx};
use serde_json::json;

const HTTPS_CERT: &str = "/redfish/v1/Managers/BMC/NetworkProtocol/HTTPS/Certificates/1";

async fn start(replace: Option<bool>) -> MockupServer {
    let mut b = MockupServer::builder()
        .dir(mockup_dir("dmtf-public-rackmount1"))
        .unwrap()
        .resource("/redfish/v1/Managers", json!({"Members": [{"@odata.id": "/redfish/v1/Managers/BMC"}]}));
    if let Some(replace) = replace {
        b = b.certificate_service(replace);
    }
    b.start().await.unwrap()
}

fn pin_of(der: &[u8]) -> String {
    hex(&sha256(der))
}

/// The server's target trusting exactly `pins` (comma-separated).
fn pinned(server: &MockupServer, pins: &str) -> BmcTarget {
    let mut t = server.target();
    t.tls = TlsOptions { pin_sha256: Some(pins.into()), ..TlsOptions::default() };
    t
}

/// A session on `target`; the server's record of requests starts after its login.
async fn open(server: &MockupServer, target: &BmcTarget) -> Result<RedfishSession, ProviderError> {
    let s = connector().open(&ctx(10), target, &server.credentials()).await;
    server.clear_requests();
    s
}

fn new_certificate(name: &str) -> BmcCertReplace {
    let (cert, key) = TestPki::self_signed(name, 90).unwrap();
    BmcCertReplace { certificate_pem: cert, private_key_pem: Secret::new(key) }
}

/// The base64 lines of a PEM key: what must never show anywhere.
fn key_lines(r: &BmcCertReplace) -> Vec<String> {
    r.private_key_pem.expose().lines().filter(|l| !l.starts_with("-----") && l.len() > 16).map(str::to_owned).collect()
}

#[tokio::test]
async fn the_served_certificate_is_read_from_the_handshake_with_its_resource() {
    let server = start(Some(true)).await;
    let mut s = open(&server, &server.target()).await.unwrap();
    let c = s.bmc_certificate(&ctx(10)).await.unwrap();
    assert_eq!(c.sha256, pin_of(&server.served_certificate()));
    assert!(c.subject.contains("bmcfleet test BMC"), "{c:?}");
    assert!(c.issuer.contains("bmcfleet test CA"), "{c:?}");
    assert!(c.not_after_unix > time::OffsetDateTime::now_utc().unix_timestamp(), "{c:?}");
    assert_eq!((c.uri.as_deref(), c.source.as_str()), (Some(HTTPS_CERT), "tls_handshake"));
    assert!(server.writes().is_empty());

    // Without a CertificateService the handshake still says it all.
    let plain = start(None).await;
    let c = open(&plain, &plain.target()).await.unwrap().bmc_certificate(&ctx(10)).await.unwrap();
    assert_eq!((c.sha256, c.uri), (pin_of(&plain.served_certificate()), None));
}

#[tokio::test]
async fn replace_swaps_the_served_certificate_and_the_new_pin_reaches_the_bmc() {
    let server = start(Some(true)).await;
    let old = pin_of(&server.served_certificate());
    let replace = new_certificate("bmc-rotated");
    let new = pin_of(&first_certificate(&replace.certificate_pem).unwrap());
    // The registry holds both pins during the change.
    let mut s = open(&server, &pinned(&server, &format!("{old},{new}"))).await.unwrap();
    let c = s.replace_bmc_certificate(&ctx(20), &replace).await.unwrap();
    assert_eq!((c.sha256.as_str(), c.uri.as_deref()), (new.as_str(), Some(HTTPS_CERT)));
    assert!(c.subject.contains("bmc-rotated"), "{c:?}");
    assert_eq!(pin_of(&server.served_certificate()), new, "the server presents the new certificate");

    let posts = server.requests_to("POST", REPLACE_CERTIFICATE);
    assert_eq!(posts.len(), 1);
    let body = posts[0].json().unwrap();
    assert_eq!(body["CertificateType"], "PEM");
    assert_eq!(body["CertificateUri"]["@odata.id"], HTTPS_CERT);
    assert!(!bmcfleet_provider::BmcSession::is_healthy(&s), "the old session is spent");

    // The machine stays reachable with the new pin; a stale pin no longer reaches it.
    let fresh = open(&server, &pinned(&server, &new)).await.unwrap();
    drop(fresh);
    let stale = open(&server, &pinned(&server, &old)).await.err().expect("a stale pin must not connect");
    assert_eq!(stale.code, ErrorCode::ProtocolError, "{stale}");
    assert!(stale.message.contains("TLS"), "{stale}");
}

/// A machine pinned to its old certificate only would be unreachable after
/// the change: nothing is sent.
#[tokio::test]
async fn a_pinned_machine_whose_record_does_not_accept_the_new_certificate_gets_nothing() {
    let server = start(Some(true)).await;
    let old = pin_of(&server.served_certificate());
    let mut s = open(&server, &pinned(&server, &old)).await.unwrap();
    server.clear_requests();
    let e = s.replace_bmc_certificate(&ctx(10), &new_certificate("x")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(e.not_sent && e.message.contains("tls.pin_sha256"), "{e}");
    assert!(server.requests().is_empty(), "nothing sent: {:?}", server.requests());
    assert_eq!(pin_of(&server.served_certificate()), old);
}

#[tokio::test]
async fn no_replace_certificate_advertised_means_nothing_is_posted() {
    for replace in [Some(false), None] {
        let server = start(replace).await;
        let mut s = open(&server, &server.target()).await.unwrap();
        let e = s.replace_bmc_certificate(&ctx(10), &new_certificate("x")).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
        assert!(server.writes().is_empty(), "{replace:?}: {:?}", server.writes());
    }
}

/// A key that is not the certificate's: the BMC refuses, the certificate
/// served does not change, and the refusal quotes nothing of the key.
#[tokio::test]
async fn a_refused_replacement_changes_nothing_and_shows_no_key() {
    let server = start(Some(true)).await;
    let before = server.served_certificate();
    let mut mismatched = new_certificate("a");
    mismatched.private_key_pem = new_certificate("b").private_key_pem;
    let mut s = open(&server, &server.target()).await.unwrap();
    let e = s.replace_bmc_certificate(&ctx(10), &mismatched).await.unwrap_err();
    assert_ne!(e.code, ErrorCode::Unsupported, "{e}");
    assert_eq!(server.served_certificate(), before);
    for line in key_lines(&mismatched) {
        assert!(!e.message.contains(&line), "{e}");
    }
}

/// Plan mode records the POST (the key redacted) and sends no write.
#[tokio::test]
async fn a_planned_replacement_records_the_post_without_the_key() {
    let server = start(Some(true)).await;
    let before = server.served_certificate();
    let replace = new_certificate("planned");
    let mut s = open(&server, &server.target()).await.unwrap();
    server.clear_requests();
    let plan = Plan::new();
    let e = perform(&mut s, &ctx(20).with_plan(plan.clone()).for_attempt(), &Action::BmcCertReplace(replace.clone()))
        .await
        .unwrap_err();
    assert_eq!(e, ProviderError::planned());
    assert!(server.writes().is_empty(), "{:?}", server.writes());
    assert_eq!(server.served_certificate(), before);
    let snapshot = plan.snapshot();
    let Some(PlannedRequest::Redfish { method, path, body: Some(body) }) = snapshot.change.clone() else {
        panic!("a POST planned: {snapshot:?}")
    };
    assert_eq!((method.as_str(), path.as_str()), ("POST", REPLACE_CERTIFICATE));
    assert_eq!(body["CertificateString"], "[redacted]", "{body}");
    assert_eq!(body["CertificateUri"]["@odata.id"], HTTPS_CERT);
    let shown = serde_json::to_string(&snapshot).unwrap();
    for line in key_lines(&replace) {
        assert!(!shown.contains(&line), "the plan shows the key: {shown}");
    }

    // Executed, the first write is the planned one.
    server.clear_requests();
    perform(&mut s, &ctx(20).for_attempt(), &Action::BmcCertReplace(replace)).await.unwrap();
    let write = server.writes().into_iter().next().expect("a write");
    assert_eq!((write.method.as_str(), write.path.as_str()), ("POST", REPLACE_CERTIFICATE));
}

#[tokio::test]
async fn sushy_emulator_serves_a_certificate_and_offers_no_replacement() {
    let builder =
        SushyEmulator::builder().systems(vec![FakeSystem::new("9a1d0c6e-1111-4c3a-9d55-000000000031", "node31", "On")]);
    let Some(emu) = SushyEmulator::start_or_skip(builder, "sushy_certificates").await else { return };
    let mut s = connector().open(&ctx(20), &emu.target(), &emu.credentials()).await.unwrap();
    let c = s.bmc_certificate(&ctx(10)).await.unwrap();
    assert_eq!(c.sha256, pin_of(&first_certificate(emu.cert_pem()).unwrap()));
    let e = s.replace_bmc_certificate(&ctx(10), &new_certificate("x")).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("nothing was sent"), "{e}");
    // Still served as before.
    let again = s.bmc_certificate(&ctx(10)).await.unwrap();
    assert_eq!(again.sha256, c.sha256);
}
