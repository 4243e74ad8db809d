//! The `sim` provider against the simulator it was built for.

use bmcfleet_provider::capabilities;
use bmcfleet_provider::{perform, Connector, Ctx, ResolvedCredentials};
use bmcfleet_schema::{Action, ActionData, BmcTarget, ErrorCode, PowerOp, PowerState, UserOp, UserUpdate};
use bmcfleet_schema::{Credentials, Protocol, TlsOptions};
use bmcfleet_sim::SimConnector;
use bmcfleet_testing::{SimConfig, SimServer};
use std::time::Duration;

fn target(host: &str) -> BmcTarget {
    BmcTarget {
        address: host.parse().unwrap(),
        protocol: Protocol::Sim,
        credentials: Credentials::Ref("x".into()),
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    }
}

fn creds(pw: &str) -> ResolvedCredentials {
    ResolvedCredentials { username: "admin".into(), password: pw.into() }
}

#[tokio::test]
async fn declared_capabilities_match_the_session() {
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let c = SimConnector::new(sim.addr());
    let mut s = c.connect(&Ctx::with_timeout(Duration::from_secs(5)), &target("10.0.0.1"), &creds("pw")).await.unwrap();
    assert_eq!(capabilities(s.as_mut()), c.declared_capabilities());
}

#[tokio::test]
async fn power_state_is_kept_and_faults_are_typed() {
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let c = SimConnector::new(sim.addr());
    let ctx = Ctx::with_timeout(Duration::from_secs(5));
    let mut s = c.connect(&ctx, &target("10.0.0.1"), &creds("pw")).await.unwrap();
    perform(s.as_mut(), &ctx, &Action::Power(PowerOp::On)).await.unwrap();
    let status = perform(s.as_mut(), &ctx, &Action::Power(PowerOp::Status)).await.unwrap();
    assert_eq!(status, Some(ActionData::PowerState(PowerState::On)));
    assert_eq!(sim.power("v4-10-0-0-1"), Some(PowerState::On));
    let missing = UserUpdate { name: "ghost".into(), password: None, role: None, enabled: Some(true) };
    let e = perform(s.as_mut(), &ctx, &Action::User(UserOp::Update(missing))).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound);

    let err = c.connect(&ctx, &target("10.0.0.2"), &creds("wrong")).await.err().unwrap();
    assert_eq!(err.code, ErrorCode::AuthFailed);

    let short = Ctx::with_timeout(Duration::from_millis(200));
    let hung = c.connect(&short, &target("hang-2.example"), &creds("pw")).await;
    assert_eq!(hung.err().unwrap().code, ErrorCode::Timeout);
}
