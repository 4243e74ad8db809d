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
