//! HTTP Digest against the server's AMT-exact enforcement.

use crate::common::{ctx, open, session};
use crate::fixture_server;
use bmcfleet_amt::AmtConnector;
use bmcfleet_provider::{BmcSession, Power, ResolvedCredentials};
use bmcfleet_schema::{ErrorCode, PowerOp, Secret};
use bmcfleet_testing::amt::{DigestMode, ServerOptions};

#[tokio::test]
async fn md5_challenge_then_nonce_reuse_with_counting() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
    let reqs = server.requests();
    // Challenge once, then every request reuses the nonce with nc + 1.
    assert_eq!(reqs[0].status, 401);
    assert!(reqs[0].digest.is_none(), "first request carries no credentials");
    let authed: Vec<_> = reqs[1..].iter().map(|r| (r.status, r.digest.clone().unwrap())).collect();
    assert_eq!(authed.len(), 3, "probe, enumerate, pull");
    for (i, (status, d)) in authed.iter().enumerate() {
        assert_eq!(*status, 200);
        assert_eq!(d.username, "admin");
        assert_eq!(d.algorithm, None, "AMT offers MD5 without naming it; we echo that");
        assert_eq!(d.nc.as_deref(), Some(format!("{:08x}", i + 1).as_str()));
        assert_eq!(d.nonce, authed[0].1.nonce);
    }
}

#[tokio::test]
async fn sha256_and_preference_for_it() {
    for mode in [DigestMode::Sha256, DigestMode::Sha256AndMd5] {
        let server = fixture_server!(ServerOptions { digest: mode, ..ServerOptions::default() });
        let mut s = session(&server).await;
        Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
        let algs: Vec<_> = server.requests().iter().filter_map(|r| r.digest.as_ref()?.algorithm.clone()).collect();
        assert!(!algs.is_empty());
        assert!(algs.iter().all(|a| a == "SHA-256"), "{mode:?}: {algs:?}");
    }
}

#[tokio::test]
async fn stale_nonce_is_rechallenged_transparently() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    let old_nonce = server.requests().last().unwrap().digest.clone().unwrap().nonce;
    server.expire_nonces();
    server.clear_log();
    assert!(Power::power(&mut s, &ctx(), PowerOp::Status).await.is_ok());
    let reqs = server.requests();
    assert_eq!(reqs[0].status, 401, "old nonce refused as stale");
    assert_eq!(reqs[0].digest.as_ref().unwrap().nonce, old_nonce);
    assert_eq!(reqs[1].status, 200);
    let fresh = reqs[1].digest.as_ref().unwrap();
    assert_ne!(fresh.nonce, old_nonce);
    assert_eq!(fresh.nc.as_deref(), Some("00000001"), "the count restarts with a new nonce");
    assert!(s.is_healthy());
}

#[tokio::test]
async fn wrong_password_fails_after_exactly_one_retry() {
    let server = fixture_server!();
    let creds = ResolvedCredentials { username: "admin".into(), password: Secret::new("wrong") };
    let e = AmtConnector::default().open(&ctx(), &server.target(), &creds).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::AuthFailed);
    assert!(!e.retryable);
    assert!(!e.message.contains("wrong"), "the password never appears in errors: {}", e.message);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "one unauthenticated request, one answer to the challenge: {reqs:#?}");
    assert!(reqs.iter().all(|r| r.status == 401));
    assert!(reqs[1].digest.is_some());
}

#[tokio::test]
async fn wrong_user_fails_too() {
    let server = fixture_server!();
    let creds = ResolvedCredentials { username: "root".into(), password: server.credentials().password };
    let e = AmtConnector::default().open(&ctx(), &server.target(), &creds).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::AuthFailed);
    assert_eq!(server.requests().len(), 2);
}

/// A nonce the BMC forgot (firmware restart, no `stale` flag) costs one
/// fresh challenge, not an authentication failure.
#[tokio::test]
async fn forgotten_nonce_gets_one_fresh_challenge() {
    let server = fixture_server!();
    let mut s = open(&server).await.unwrap();
    server.forget_nonces();
    server.clear_log();
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
    let reqs = server.requests();
    assert_eq!(reqs[0].status, 401);
    assert!(reqs[0].digest.is_some(), "the cached nonce was tried first");
    assert!(reqs[1..].iter().all(|r| r.status == 200), "{reqs:#?}");
    assert_eq!(reqs[1].digest.as_ref().unwrap().nc.as_deref(), Some("00000001"));
    // Twice in a row is still fine: each exchange gets its own fresh round.
    server.forget_nonces();
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
}
