//! Sessions and faults against real `ipmi_sim` instances: session reuse,
//! Close Session, wrong credentials, unreachable or silent BMCs, a BMC that
//! dies mid-session and comes back, several BMCs side by side.

mod common;

use bmcfleet_provider::{BmcSession, Connector, Ctx, Power, Raw, ResolvedCredentials};
use bmcfleet_schema::{BmcAddress, ErrorCode, Host, PowerOp, PowerState, RawIpmi, RawRequest, Secret};
use bmcfleet_testing::ipmi::{IpmiSim, IpmiSimOptions};
use common::{connector, ctx, open, open_powered_on, start_sim};
use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

/// Active sessions on the BMC, from Get Session Info (app 0x3D, current
/// session): response byte 3.
async fn active_sessions(session: &mut bmcfleet_ipmi::IpmiSession<bmcfleet_ipmi::RmcpTransport>) -> u8 {
    let info =
        Raw::raw(session, &ctx(), &RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x3D, data: vec![0] })).await.unwrap();
    assert_eq!(info.status, 0);
    info.data[2] & 0x3F
}

#[tokio::test]
async fn many_calls_cost_one_handshake() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open_powered_on(&sim).await;
    let started = Instant::now();
    for _ in 0..100 {
        assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));
    }
    let status_rate = 100.0 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let device_id = RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: vec![] });
    for _ in 0..500 {
        assert_eq!(Raw::raw(&mut s, &ctx, &device_id).await.unwrap().status, 0);
    }
    let raw_rate = 500.0 / started.elapsed().as_secs_f64();
    assert_eq!(s.transport().handshakes(), 1, "one RMCP+ handshake for the whole batch");
    // ipmi_sim forks the chassis-control shell script for every power status,
    // which dominates that rate; Get Device ID shows the session's own cost.
    println!("power status: {status_rate:.0}/s, get device id: {raw_rate:.0}/s on one session");
    assert!(raw_rate > 200.0, "{raw_rate:.0} requests/s");
}

#[tokio::test]
async fn close_sends_close_session() {
    let sim = start_sim();
    let mut watcher = open(&sim).await;
    let baseline = active_sessions(&mut watcher).await;
    let mut other = open(&sim).await;
    assert_eq!(active_sessions(&mut watcher).await, baseline + 1);
    BmcSession::close(&mut other).await;
    assert_eq!(active_sessions(&mut watcher).await, baseline, "the BMC freed the closed session");
    assert!(!BmcSession::is_healthy(&other));
    let e = Power::power(&mut other, &ctx(), PowerOp::Status).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Internal, "a closed session refuses calls: {e}");

    // Dropping a session closes it too (the session thread does it).
    let dropped = open(&sim).await;
    assert_eq!(active_sessions(&mut watcher).await, baseline + 1);
    drop(dropped);
    assert!(wait_for_sessions(&mut watcher, baseline).await, "dropping a session closes it on the BMC");
}

async fn wait_for_sessions(
    watcher: &mut bmcfleet_ipmi::IpmiSession<bmcfleet_ipmi::RmcpTransport>,
    expected: u8,
) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if active_sessions(watcher).await == expected {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test]
async fn wrong_password_and_unknown_user_are_auth_failed() {
    let sim = start_sim();
    let ctx = ctx();
    let wrong = ResolvedCredentials { username: "admin".into(), password: Secret::new("not-the-password") };
    let e = connector().connect(&ctx, &sim.target(), &wrong).await.err().expect("wrong password must fail");
    assert_eq!(e.code, ErrorCode::AuthFailed, "{e}");
    assert!(!e.retryable);
    assert!(!e.message.contains("not-the-password"), "the password never appears: {e}");

    let unknown = ResolvedCredentials { username: "nobody".into(), password: Secret::new("password") };
    let e = connector().connect(&ctx, &sim.target(), &unknown).await.err().expect("unknown user must fail");
    assert_eq!(e.code, ErrorCode::AuthFailed, "{e}");

    let too_long = ResolvedCredentials { username: "admin".into(), password: Secret::new("x".repeat(21)) };
    let e = connector().connect(&ctx, &sim.target(), &too_long).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::InvalidField);

    // The simulator is fine afterwards.
    let mut s = open(&sim).await;
    Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap();
}

fn loopback(port: u16) -> bmcfleet_schema::BmcTarget {
    bmcfleet_schema::BmcTarget {
        address: BmcAddress { host: Host::V4(Ipv4Addr::LOCALHOST), port: Some(port) },
        protocol: bmcfleet_schema::Protocol::Ipmi,
        credentials: bmcfleet_schema::Credentials::Ref("unused".into()),
        tls: Default::default(),
        system_id: None,
        options: Default::default(),
    }
}

fn creds() -> ResolvedCredentials {
    ResolvedCredentials { username: "admin".into(), password: Secret::new("password") }
}

#[tokio::test]
async fn closed_port_is_unreachable_at_once() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    drop(socket);
    let ctx = Ctx::with_timeout(Duration::from_secs(5));
    let started = Instant::now();
    let e = connector().connect(&ctx, &loopback(port), &creds()).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
    assert!(e.retryable);
    assert!(started.elapsed() < Duration::from_secs(1), "refused at once, took {:?}", started.elapsed());
}

#[tokio::test]
async fn silent_bmc_fails_within_the_deadline() {
    // Bound but never answering: every request is lost.
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let deadline = Duration::from_millis(1500);
    let ctx = Ctx::with_timeout(deadline);
    let started = Instant::now();
    let e = connector().connect(&ctx, &loopback(port), &creds()).await.err().unwrap();
    let took = started.elapsed();
    assert!(matches!(e.code, ErrorCode::Unreachable | ErrorCode::Timeout), "{e}");
    assert!(took <= deadline + Duration::from_millis(100), "took {took:?}");
    // It retransmitted rather than waiting once.
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 256];
    let mut sent = 0;
    while socket.recv(&mut buf).is_ok() {
        sent += 1;
    }
    assert!(sent >= 4, "{sent} datagrams");
}

#[tokio::test]
async fn deadline_already_passed_is_deadline_exceeded() {
    let sim = start_sim();
    let mut s = open(&sim).await;
    let past = Ctx::new(tokio::time::Instant::now() - Duration::from_millis(1));
    let e = Power::power(&mut s, &past, PowerOp::Status).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::DeadlineExceeded);
    assert!(BmcSession::is_healthy(&s));
}

#[tokio::test]
async fn bmc_killed_mid_session_then_back() {
    let mut sim = start_sim();
    let ctx = ctx();
    let mut s = open_powered_on(&sim).await;
    // One action of several requests: its first went out before the BMC died.
    let several = Ctx::with_timeout(Duration::from_secs(10));
    Power::power(&mut s, &several, PowerOp::Status).await.unwrap();

    sim.kill();
    let started = Instant::now();
    let short = Ctx::with_timeout(Duration::from_secs(3));
    let e = Power::power(&mut s, &short, PowerOp::Status).await.unwrap_err();
    assert!(matches!(e.code, ErrorCode::Unreachable | ErrorCode::Timeout), "{e}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(!BmcSession::is_healthy(&s), "a dead BMC makes the session unhealthy");
    assert!(!e.not_sent, "the read went out on the established session: {e:?}");
    // No session now: the next request needs a handshake first, which fails,
    // so it never left and even a non-idempotent one may be resent.
    let e = Power::power(&mut s, &Ctx::with_timeout(Duration::from_secs(3)), PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
    assert!(e.not_sent && e.retryable, "no session, so nothing was sent: {e:?}");
    // The same failure inside the action that already sent a request: the
    // action may have taken partial effect, so not "not sent".
    let e = Power::power(&mut s, &several, PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unreachable, "{e}");
    assert!(!e.not_sent, "an earlier request of this action was sent: {e:?}");

    // Same port, same state: the session re-establishes by itself.
    sim.restart().unwrap();
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));
    assert!(BmcSession::is_healthy(&s));
    assert_eq!(s.transport().handshakes(), 2);

    // And a fresh connection works as well.
    let mut fresh = open(&sim).await;
    assert_eq!(Power::power(&mut fresh, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::On));
}

#[tokio::test]
async fn bmc_restarted_while_idle_is_reestablished_transparently() {
    // The old session id means nothing to the restarted BMC; an idempotent
    // request retransmits, re-establishes and succeeds within one call.
    let mut sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;
    Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap();
    sim.restart().unwrap();
    assert_eq!(Power::power(&mut s, &ctx, PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    assert_eq!(s.transport().handshakes(), 2);
}

#[tokio::test]
async fn several_simulators_side_by_side() {
    let sims: Vec<IpmiSim> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                scope.spawn(move || {
                    IpmiSim::start_with(IpmiSimOptions {
                        username: format!("admin{i}"),
                        password: Secret::new(format!("password{i}")),
                        ..Default::default()
                    })
                    .unwrap()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ports: Vec<u16> = sims.iter().map(IpmiSim::port).collect();
    ports.sort_unstable();
    ports.dedup();
    assert_eq!(ports.len(), 4);

    let ctx = ctx();
    let mut sessions = Vec::new();
    for sim in &sims {
        sessions.push(connector().connect(&ctx, &sim.target(), &sim.credentials()).await.unwrap());
    }
    sessions[2].power().unwrap().power(&ctx, PowerOp::On).await.unwrap();
    for (i, (sim, session)) in sims.iter().zip(sessions.iter_mut()).enumerate() {
        let expected = if i == 2 { PowerState::On } else { PowerState::Off };
        assert_eq!(session.power().unwrap().power(&ctx, PowerOp::Status).await.unwrap(), Some(expected));
        assert_eq!(sim.power_on(), i == 2);
    }
    // Credentials are per instance.
    let e = connector().connect(&ctx, &sims[0].target(), &sims[1].credentials()).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::AuthFailed);
    for mut s in sessions {
        s.close().await;
    }
}

#[tokio::test]
async fn idle_session_sends_keepalives() {
    let sim = start_sim();
    let fast = common::connector_with_keepalive(Duration::from_millis(50));
    let mut s = fast.open(&ctx(), &sim.target(), &sim.credentials()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while s.transport().keepalives() < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = s.transport().keepalives();
    assert!(sent >= 3, "{sent} keep-alives in 5 s with a 50 ms interval");
    assert!(sent < 100, "keep-alives are paced, not a busy loop: {sent}");
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
    assert_eq!(s.transport().handshakes(), 1);
}

/// A UDP relay between the provider and a real `ipmi_sim` that rewrites the
/// RMCP+ status code of the Open Session Response (IPMI 2.0 §13.18, payload
/// type 0x11) to `status`: how a BMC that offers none of our cipher suites
/// answers. Everything else passes through unchanged. Returns the relay's port
/// and a counter of the responses it rewrote.
fn open_session_rewriter(
    bmc: std::net::SocketAddr,
    status: Option<u8>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let front = UdpSocket::bind("127.0.0.1:0").unwrap();
    let back = UdpSocket::bind("127.0.0.1:0").unwrap();
    back.connect(bmc).unwrap();
    let port = front.local_addr().unwrap().port();
    let rewritten = std::sync::Arc::new(AtomicUsize::new(0));
    let client = std::sync::Arc::new(std::sync::Mutex::new(None::<std::net::SocketAddr>));
    {
        let (front, back, client) = (front.try_clone().unwrap(), back.try_clone().unwrap(), client.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok((n, from)) = front.recv_from(&mut buf) {
                *client.lock().unwrap() = Some(from);
                let _ = back.send(&buf[..n]);
            }
        });
    }
    {
        let rewritten = rewritten.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = back.recv(&mut buf) {
                // RMCP header (4) | auth type 0x06 | payload type | session id (4)
                // | sequence (4) | payload length (2) | tag | status code ...
                if let Some(status) = status.filter(|_| n > 17 && buf[4] == 0x06 && buf[5] & 0x3F == 0x11) {
                    buf[17] = status;
                    rewritten.fetch_add(1, Ordering::SeqCst);
                }
                if let Some(to) = *client.lock().unwrap() {
                    let _ = front.send_to(&buf[..n], to);
                }
            }
        });
    }
    (port, rewritten)
}

#[tokio::test]
async fn unsupported_cipher_suite_is_a_typed_unsupported_error() {
    let sim = start_sim();
    // 0x11 (IPMI 2.0 table 13-15): "no Cipher Suite match with proposed security algorithms".
    let (port, rewritten) = open_session_rewriter(sim.socket_addr(), Some(0x11));
    let started = Instant::now();
    let e = connector().connect(&ctx(), &loopback(port), &sim.credentials()).await.err().expect("must fail");
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(!e.retryable, "a cipher suite mismatch is an answer, not a transient fault: {e}");
    assert!(
        e.message.contains("cipher suite 17") && e.message.contains("cipher suite 3"),
        "the message names every suite tried: {e}"
    );
    assert!(
        rewritten.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "one refused Open Session per suite went through the relay"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "answered, not timed out: {:?}", started.elapsed());
    // The same relay without rewriting works: the fault is the status code alone.
    let (port, _) = open_session_rewriter(sim.socket_addr(), None);
    let mut s = connector().connect(&ctx(), &loopback(port), &sim.credentials()).await.expect("through the relay");
    s.power().unwrap().power(&ctx(), PowerOp::Status).await.unwrap();
}

/// A worker's fence as a switch: open, or closed (the lease is gone).
#[derive(Debug)]
struct SwitchGate(std::sync::atomic::AtomicBool);

#[async_trait::async_trait]
impl bmcfleet_provider::SendGate for SwitchGate {
    async fn admit(&self, _for_action: bool) -> bmcfleet_provider::Result<()> {
        if self.holds() {
            Ok(())
        } else {
            Err(bmcfleet_provider::ProviderError::new(ErrorCode::Interrupted, "fenced").not_sent())
        }
    }

    fn holds(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn for_session(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn bmcfleet_provider::SendGate> {
        self
    }
}

/// A UDP relay in front of ipmi_sim counting the datagrams the client sends.
async fn counting_relay(bmc: std::net::SocketAddr) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let front = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let back = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    back.connect(bmc).await.unwrap();
    let port = front.local_addr().unwrap().port();
    let sent = std::sync::Arc::new(AtomicUsize::new(0));
    let count = sent.clone();
    tokio::spawn(async move {
        let (mut a, mut b) = ([0u8; 2048], [0u8; 2048]);
        let mut client = None;
        loop {
            tokio::select! {
                Ok((n, from)) = front.recv_from(&mut a) => {
                    client = Some(from);
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = back.send(&a[..n]).await;
                }
                Ok(n) = back.recv(&mut b) => {
                    if let Some(c) = client {
                        let _ = front.send_to(&b[..n], c).await;
                    }
                }
            }
        }
    });
    (port, sent)
}

/// A worker that lost its lease sends nothing more through an open IPMI
/// session: no command, no retransmit, no re-established session and no
/// Close Session. With the gate open, the same close does reach the BMC.
#[tokio::test]
async fn a_closed_send_gate_silences_the_session() {
    use std::sync::atomic::Ordering;
    let sim = start_sim();
    let (port, sent) = counting_relay(std::net::SocketAddr::from(([127, 0, 0, 1], sim.port()))).await;
    let creds = sim.credentials();
    let open_session = |gate: std::sync::Arc<SwitchGate>| {
        let creds = creds.clone();
        async move {
            let ctx = Ctx::with_timeout(Duration::from_secs(10)).with_gate(gate);
            connector().connect(&ctx, &loopback(port), &creds).await.expect("session")
        }
    };

    // Control: with the gate open, commands and the logout reach the BMC.
    let gate = std::sync::Arc::new(SwitchGate(true.into()));
    let mut s = open_session(gate.clone()).await;
    let attempt = Ctx::with_timeout(Duration::from_secs(10)).with_gate(gate.clone()).for_attempt();
    s.power().unwrap().power(&attempt, PowerOp::Status).await.unwrap();
    let before_close = sent.load(Ordering::SeqCst);
    s.close().await;
    assert!(sent.load(Ordering::SeqCst) > before_close, "Close Session went out");

    // Fenced: nothing leaves, and the action is told it was not sent.
    let gate = std::sync::Arc::new(SwitchGate(true.into()));
    let mut s = open_session(gate.clone()).await;
    let attempt = Ctx::with_timeout(Duration::from_secs(10)).with_gate(gate.clone()).for_attempt();
    s.power().unwrap().power(&attempt, PowerOp::Status).await.unwrap();
    gate.0.store(false, Ordering::SeqCst);
    let quiet = sent.load(Ordering::SeqCst);
    let e = s.power().unwrap().power(&attempt, PowerOp::On).await.unwrap_err();
    assert_eq!((e.code, e.not_sent), (ErrorCode::Interrupted, true), "{e}");
    s.close().await;
    drop(s);
    assert_eq!(sent.load(Ordering::SeqCst), quiet, "a fenced-off session sent a datagram");
}

/// A host name the worker already resolved and checked is not looked up
/// again: the session goes to the address the target carries.
/// `bmc.invalid` never resolves, so only the pinned address reaches ipmi_sim.
#[tokio::test]
async fn a_resolved_host_name_is_not_looked_up_again() {
    let sim = start_sim();
    let mut target = sim.target();
    target.address = format!("bmc.invalid:{}", sim.port()).parse().unwrap();
    let e = connector().open(&ctx(), &target, &sim.credentials()).await.err().expect("the name does not resolve");
    assert_eq!(e.code, bmcfleet_schema::ErrorCode::Unreachable, "{e}");
    target.options.resolved = vec!["127.0.0.1".parse().unwrap()];
    let mut s = connector().open(&ctx(), &target, &sim.credentials()).await.expect("connects to the pinned address");
    assert!(Power::power(&mut s, &ctx(), PowerOp::Status).await.is_ok());
}
