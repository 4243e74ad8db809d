//! TLS (AMT port 16993 style) with a per-BMC CA, an untrusted certificate,
//! and the explicit insecure opt-in.

use crate::common::{ctx, open};
use crate::fixture_server;
use bmcfleet_amt::AmtConnector;
use bmcfleet_provider::Power;
use bmcfleet_schema::{ErrorCode, PowerOp, PowerState, TlsOptions};
use bmcfleet_testing::amt::{unrelated_ca_pem, ServerOptions};

fn tls() -> ServerOptions {
    ServerOptions { tls: true, ..ServerOptions::default() }
}

#[tokio::test]
async fn trusted_ca_works() {
    let server = fixture_server!(tls());
    assert!(server.target().tls.ca_pem.is_some());
    let mut s = open(&server).await.expect("TLS session with the server's CA");
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::On));
}

#[tokio::test]
async fn untrusted_certificate_is_refused_before_any_request() {
    let server = fixture_server!(tls());
    let mut target = server.target();
    target.tls = TlsOptions {
        insecure: false,
        ca_pem: Some(unrelated_ca_pem().unwrap()),
        pin_sha256: None,
        allow_plain_http: false,
    };
    let e = AmtConnector::default().open(&ctx(), &target, &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{}", e.message);
    assert!(!e.retryable);
    assert!(e.message.contains("TLS") && e.message.contains("tls.ca_pem"), "{}", e.message);
    assert!(server.requests().is_empty(), "no HTTP request crossed an untrusted channel");
}

#[tokio::test]
async fn insecure_opt_in_accepts_any_certificate() {
    let server = fixture_server!(tls());
    let mut target = server.target();
    target.tls = TlsOptions { insecure: true, ca_pem: None, pin_sha256: None, allow_plain_http: false };
    let mut s = AmtConnector::default().open(&ctx(), &target, &server.credentials()).await.unwrap();
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::On));
}

#[tokio::test]
async fn plain_http_to_a_tls_port_fails_cleanly() {
    let server = fixture_server!(tls());
    let mut target = server.target();
    // Without the machine's allowance plain HTTP is refused before connecting.
    target.tls = TlsOptions::default();
    let e = AmtConnector::default().open(&ctx(), &target, &server.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::InvalidField, "{e}");
    assert!(server.requests().is_empty(), "plain HTTP reached the BMC");
    // Allowed, it still fails cleanly against a TLS port.
    target.tls = TlsOptions { allow_plain_http: true, ..TlsOptions::default() };
    let e = AmtConnector::default().open(&ctx(), &target, &server.credentials()).await.err().expect("must fail");
    assert!(matches!(e.code, ErrorCode::Unreachable | ErrorCode::ProtocolError), "{e}");
}

/// The certificate the AMT presented on the session's handshake: its
/// fingerprint is the one that pins it (a pin to another does not connect);
/// replacing it is `unsupported` with nothing sent; plain HTTP has none.
#[tokio::test]
async fn the_served_certificate_is_read_and_pins_the_amt() {
    use bmcfleet_provider::BmcCertificates;
    let server = fixture_server!(tls());
    let mut s = open(&server).await.expect("TLS session with the server's CA");
    let c = s.bmc_certificate(&ctx()).await.unwrap();
    assert_eq!(c.source, "tls_handshake");
    assert!(c.not_after_unix > 0 && c.sha256.len() == 64, "{c:?}");
    let mut pinned = server.target();
    pinned.tls = TlsOptions { pin_sha256: Some(c.sha256.clone()), ..TlsOptions::default() };
    AmtConnector::default().open(&ctx(), &pinned, &server.credentials()).await.expect("the reported pin connects");
    pinned.tls.pin_sha256 = Some("00".repeat(32));
    let e = AmtConnector::default().open(&ctx(), &pinned, &server.credentials()).await.err().expect("another pin");
    assert_eq!(e.code, ErrorCode::ProtocolError, "{e}");

    let before = server.requests().len();
    let replace = bmcfleet_schema::BmcCertReplace {
        certificate_pem: "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n".into(),
        private_key_pem: bmcfleet_schema::Secret::new(
            "-----BEGIN PRIVATE KEY-----\nMAMCAQA=\n-----END PRIVATE KEY-----\n",
        ),
    };
    let e = s.replace_bmc_certificate(&ctx(), &replace).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert_eq!(server.requests().len(), before, "nothing sent");

    let plain = fixture_server!(ServerOptions::default());
    let mut s = open(&plain).await.expect("plain HTTP session");
    let e = s.bmc_certificate(&ctx()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
}
