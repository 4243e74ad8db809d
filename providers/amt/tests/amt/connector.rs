//! The Connector contract.

use crate::common::ctx;
use crate::fixture_server;
use bmcfleet_amt::{AmtConfig, AmtConnector};
use bmcfleet_provider::{capabilities, Connector};
use bmcfleet_schema::{ErrorCode, TlsOptions};

#[tokio::test]
async fn declared_capabilities_match_the_session() {
    let server = fixture_server!();
    let c = AmtConnector::default();
    assert_eq!(c.protocol(), "amt");
    let mut session = c.connect(&ctx(), &server.target(), &server.credentials()).await.unwrap();
    assert_eq!(session.provider(), "amt");
    assert_eq!(capabilities(session.as_mut()), c.declared_capabilities());
    session.close().await;
}

#[tokio::test]
async fn tls_port_without_trust_is_refused_without_network() {
    let target = bmcfleet_schema::BmcTarget {
        address: "127.0.0.1:16993".parse().unwrap(),
        protocol: bmcfleet_schema::Protocol::Amt,
        credentials: bmcfleet_schema::Credentials::Ref("x".into()),
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    };
    let creds = bmcfleet_provider::ResolvedCredentials { username: "admin".into(), password: "x".into() };
    let e = AmtConnector::default().connect(&ctx(), &target, &creds).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidField);
    let strict = AmtConnector::new(AmtConfig { require_tls: true, ..AmtConfig::default() });
    let mut plain = target.clone();
    plain.address = "127.0.0.1:16992".parse().unwrap();
    let e = strict.connect(&ctx(), &plain, &creds).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidField);
    assert!(e.message.contains("requires TLS"), "{}", e.message);
}
