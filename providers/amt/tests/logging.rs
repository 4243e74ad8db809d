//! Spans name the BMC, the WS-Man action and the outcome; secrets and
//! Digest responses never reach the log.
//!
//! A test binary of its own: tracing caches callsite interest process-wide,
//! so a subscriber installed by one test among parallel others may miss
//! events. Here the subscriber is the global default, set before any call.

use bmcfleet_amt::AmtConnector;
use bmcfleet_provider::{Ctx, Power, ResolvedCredentials};
use bmcfleet_schema::{PowerOp, Secret};
use bmcfleet_testing::amt::{AmtFixtureServer, ServerOptions};
use bmcfleet_testing::LogCapture;

#[tokio::test]
async fn spans_carry_bmc_action_outcome_and_no_secrets() {
    let cap = LogCapture::global();
    let server = AmtFixtureServer::start_for_test(ServerOptions::default()).await;
    let ctx = || Ctx::with_timeout(std::time::Duration::from_secs(15));

    let mut s = AmtConnector::default().open(&ctx(), &server.target(), &server.credentials()).await.unwrap();
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
    let wrong = ResolvedCredentials { username: "admin".into(), password: Secret::new("not-the-Pa55word") };
    AmtConnector::default().open(&ctx(), &server.target(), &wrong).await.err().expect("wrong password");

    let out = cap.text();
    let bmc = format!("bmc=127.0.0.1:{}", server.addr().port());
    for needle in [
        bmc.as_str(),
        "action=Get AMT_GeneralSettings",
        "action=Enumerate CIM_AssociatedPowerManagementService",
        "action=Pull CIM_AssociatedPowerManagementService",
        "outcome=\"ok\"",
        "outcome=\"auth_failed\"",
    ] {
        assert!(out.contains(needle), "`{needle}` missing from the log:\n{out}");
    }
    let password = server.credentials().password;
    for secret in [password.expose(), "not-the-Pa55word", "response=", "cnonce"] {
        assert!(!out.contains(secret), "`{secret}` leaked into the log:\n{out}");
    }
}
