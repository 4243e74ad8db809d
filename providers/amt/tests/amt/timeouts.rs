//! Slow and absent peers: typed errors within the action deadline.

use crate::common::{ctx, session};
use crate::fixture_server;
use bmcfleet_amt::AmtConnector;
use bmcfleet_provider::{BmcSession, BootControl, Ctx, Power, ProviderError, ResolvedCredentials};
use bmcfleet_schema::{BootDevice, BootDeviceRequest, ErrorCode, PowerOp, Secret};
use bmcfleet_testing::amt::{Class, Injection, Op};
use std::time::Duration;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_millis(400);
/// Scheduling slack allowed past the deadline.
const SLACK: Duration = Duration::from_millis(750);

/// `call`'s error, checked to be a `Timeout` within [`DEADLINE`] and
/// [`SLACK`], and how long the call took.
async fn timed_out<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = Result<T, ProviderError>>,
) -> (ProviderError, Duration) {
    let started = Instant::now();
    let e = call.await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(e.code, ErrorCode::Timeout, "{}", e.message);
    assert!(took < DEADLINE + SLACK, "took {took:?}");
    (e, took)
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_at_the_deadline() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::Pull(Class::AssociatedPowerManagementService), Injection::Stall);
    let (e, took) = timed_out(Power::power(&mut s, &Ctx::with_timeout(DEADLINE), PowerOp::Status)).await;
    assert!(e.retryable);
    assert!(took >= DEADLINE, "took {took:?}");
    assert!(!s.is_healthy(), "a timed-out session is not reused");
}

#[tokio::test]
async fn a_body_that_stops_half_way_times_out() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::Get(Class::BootSettingData), Injection::StallMidBody);
    let pxe = BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false };
    timed_out(s.set_boot_device(&Ctx::with_timeout(DEADLINE), &pxe)).await;
    assert!(!server.ops().contains(&Op::Put(Class::BootSettingData)));
}

#[tokio::test]
async fn a_passed_deadline_sends_nothing() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.clear_log();
    let e = Power::power(&mut s, &Ctx::new(Instant::now()), PowerOp::Status).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::DeadlineExceeded);
    assert!(server.requests().is_empty());
}

/// No fixtures needed: nothing listens on the port.
#[tokio::test]
async fn refused_connection_is_unreachable() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }; // closed again here
    let target = bmcfleet_schema::BmcTarget {
        address: format!("127.0.0.1:{port}").parse().unwrap(),
        protocol: bmcfleet_schema::Protocol::Amt,
        credentials: bmcfleet_schema::Credentials::Ref("x".into()),
        tls: bmcfleet_schema::TlsOptions { allow_plain_http: true, ..Default::default() },
        system_id: None,
        options: Default::default(),
    };
    let creds = ResolvedCredentials { username: "admin".into(), password: Secret::new("x") };
    let e = AmtConnector::default().open(&ctx(), &target, &creds).await.err().expect("nothing listens");
    assert_eq!(e.code, ErrorCode::Unreachable, "{}", e.message);
    assert!(e.retryable);
}
