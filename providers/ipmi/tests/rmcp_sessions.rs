//! The RMCP+ session layer against `bmcfleet_testing::ipmi::LanFleet`, the
//! wire-level spec responder that ipmitool (`-C 17`, `-C 3`) and FreeIPMI
//! are tested against (testing/tests/ipmi_lan_responder.rs): cipher suite
//! 17 and the fallback to 3, privilege levels, wire faults (lost, late,
//! duplicated replies, a wrong session id, a BMC that forgets its
//! sessions), and many sessions over a few shared sockets.
//! `ipmi_sim` (suite 3 only) is covered by ipmi_sim_sessions.rs.

use bmcfleet_ipmi::{CipherSuite, IpmiConfig, IpmiConnector, IpmiSession, Privilege, RmcpConfig, RmcpTransport};
use bmcfleet_provider::{capabilities, BmcSession, Capability, Ctx, Power, ResolvedCredentials, Users};
use bmcfleet_schema::{
    BmcAddress, BmcTarget, Credentials, ErrorCode, Host, PowerOp, PowerState, Protocol, Secret, UserRole, UserSpec,
};
use bmcfleet_testing::ipmi::{LanBmc, LanConfig, LanFleet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const APP: u8 = 0x06;
const CHASSIS: u8 = 0x00;

fn connector_with(suites: Vec<CipherSuite>, privilege: Privilege, sockets: usize) -> IpmiConnector {
    IpmiConnector::new(IpmiConfig {
        rmcp: RmcpConfig {
            attempt_timeout: Duration::from_millis(300),
            retries: 2,
            cipher_suites: suites,
            privilege,
            ..Default::default()
        }
        .into(),
        sockets,
        ..Default::default()
    })
}

fn connector() -> IpmiConnector {
    connector_with(RmcpConfig::default().cipher_suites, Privilege::Administrator, 4)
}

fn target(bmc: &LanBmc) -> BmcTarget {
    BmcTarget {
        address: BmcAddress { host: Host::V4(Ipv4Addr::LOCALHOST), port: Some(bmc.port()) },
        protocol: Protocol::Ipmi,
        credentials: Credentials::Ref("unused".into()),
        tls: Default::default(),
        system_id: None,
        options: Default::default(),
    }
}

fn creds(user: &str, password: &str) -> ResolvedCredentials {
    ResolvedCredentials { username: user.into(), password: Secret::new(password) }
}

fn admin() -> ResolvedCredentials {
    creds("admin", "password")
}

fn ctx() -> Ctx {
    Ctx::with_timeout(Duration::from_secs(10))
}

fn fleet(config: LanConfig) -> LanFleet {
    LanFleet::start(config).expect("start the RMCP+ responder")
}

async fn open(c: &IpmiConnector, bmc: &LanBmc, who: &ResolvedCredentials) -> IpmiSession<RmcpTransport> {
    c.open(&ctx(), &target(bmc), who).await.expect("open an IPMI session")
}

#[tokio::test]
async fn suite_17_by_default_and_every_capability_works_over_it() {
    let f = fleet(LanConfig::default());
    let bmc = f.bmc(0);
    let mut s = open(&connector(), bmc, &admin()).await;
    assert_eq!(s.transport().cipher_suite(), Some(CipherSuite::S17));
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap(), Some(PowerState::On));
    assert!(bmc.handle().snapshot().power_on);
    let create =
        UserSpec { name: "ops".into(), password: "ops-pass-1".into(), role: UserRole::Operator, enabled: true };
    Users::create_user(&mut s, &ctx(), &create).await.unwrap();
    assert!(bmc.handle().snapshot().user("ops").is_some());
    assert_eq!(s.transport().handshakes(), 1);
    s.close().await;
    assert_eq!(bmc.active_sessions(), 0, "Close Session reached the BMC");
    assert_eq!(bmc.stats().closed_sessions, 1);
}

#[tokio::test]
async fn a_bmc_without_suite_17_gets_suite_3_and_the_order_is_the_machines() {
    let f = fleet(LanConfig { cipher_suites: vec![3], ..LanConfig::default() });
    let bmc = f.bmc(0);
    let mut s = open(&connector(), bmc, &admin()).await;
    assert_eq!(s.transport().cipher_suite(), Some(CipherSuite::S3));
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
    let stats = bmc.stats();
    assert_eq!((stats.open_session_requests, stats.handshakes), (2, 1), "17 refused, then 3: {stats:?}");

    // The same BMC refusing 17 at run time (a fault), and an order that starts with 3.
    let f = fleet(LanConfig::default());
    let bmc = f.bmc(0);
    bmc.faults().refused_suites = vec![17];
    let s = open(&connector(), bmc, &admin()).await;
    assert_eq!(s.transport().cipher_suite(), Some(CipherSuite::S3));
    bmc.faults().refused_suites.clear();
    let s = open(&connector_with(vec![CipherSuite::S3, CipherSuite::S17], Privilege::Administrator, 1), bmc, &admin())
        .await;
    assert_eq!(s.transport().cipher_suite(), Some(CipherSuite::S3), "the configured order is followed");

    // Only 17 offered, only 3 asked for: a typed answer, not a timeout.
    let f = fleet(LanConfig { cipher_suites: vec![17], ..LanConfig::default() });
    let started = Instant::now();
    let e = connector_with(vec![CipherSuite::S3], Privilege::Administrator, 1)
        .open(&ctx(), &target(f.bmc(0)), &admin())
        .await
        .err()
        .unwrap();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("cipher suite 3") && e.message.contains("0x11"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

/// What pyghmi's BMC (and so VirtualBMC) does: every proposal answered
/// with status 0 and suite 3's algorithms. Accepted when the machine's
/// list allows suite 3 (the session runs suite 3 and says so), else that
/// proposal counts as refused and the next suite of the list is proposed;
/// a suite outside the list is never used.
#[tokio::test]
async fn a_bmc_answering_another_suite_is_used_only_within_the_machines_list() {
    let f = fleet(LanConfig::default());
    let bmc = f.bmc(0);
    bmc.faults().answer_with_suite = Some(3);
    let mut s = open(&connector(), bmc, &admin()).await;
    assert_eq!(s.transport().cipher_suite(), Some(CipherSuite::S3), "the suite the BMC answered with");
    assert_eq!(s.transport().answered_other_than(), Some(CipherSuite::S17), "17 was proposed");
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap(), Some(PowerState::On));
    let stats = bmc.stats();
    assert_eq!((stats.open_session_requests, stats.handshakes), (1, 1), "one handshake, no second proposal: {stats:?}");

    // A BMC that takes the proposal: nothing to report.
    bmc.faults().answer_with_suite = None;
    let s = open(&connector(), bmc, &admin()).await;
    assert_eq!((s.transport().cipher_suite(), s.transport().answered_other_than()), (Some(CipherSuite::S17), None));

    // Only 17 allowed: suite 3 is refused, whatever the BMC says.
    bmc.faults().answer_with_suite = Some(3);
    let e = connector_with(vec![CipherSuite::S17], Privilege::Administrator, 1)
        .open(&ctx(), &target(bmc), &admin())
        .await
        .err()
        .unwrap();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("cipher suite 3, which this machine's list does not allow"), "{e}");

    // A weaker answer (suite 2: no confidentiality) to a list of 17 and 3:
    // both proposals refused, never a session without encryption.
    bmc.faults().answer_with_suite = Some(2);
    let before = bmc.stats();
    let e = connector().open(&ctx(), &target(bmc), &admin()).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("cipher suite 17") && e.message.contains("cipher suite 3"), "{e}");
    let after = bmc.stats();
    assert_eq!(after.open_session_requests - before.open_session_requests, 2, "each suite of the list proposed once");
    assert_eq!(after.handshakes, before.handshakes, "no session was activated");

    // Suite 1 (no integrity) likewise.
    bmc.faults().answer_with_suite = Some(1);
    let e = connector().open(&ctx(), &target(bmc), &admin()).await.err().unwrap();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
}

#[tokio::test]
async fn wrong_password_and_unknown_user_under_suite_17_are_auth_failed() {
    let f = fleet(LanConfig { cipher_suites: vec![17], ..LanConfig::default() });
    let bmc = f.bmc(0);
    for who in [creds("admin", "wrong-password"), creds("nobody", "password")] {
        let e = connector().open(&ctx(), &target(bmc), &who).await.err().unwrap();
        assert_eq!(e.code, ErrorCode::AuthFailed, "{}: {e}", who.username);
        assert!(!e.retryable);
        assert!(!e.message.contains("wrong-password"), "the password never appears: {e}");
    }
    assert!(!bmc.handle().snapshot().power_on);
    assert_eq!(bmc.stats().handshakes, 0);
}

#[tokio::test]
async fn privilege_levels_limit_what_a_session_offers_and_sends() {
    let f = fleet(LanConfig::default().with_user(3, "oper", "oper-pass", 3).with_user(4, "viewer", "view-pass", 2));
    let bmc = f.bmc(0);

    // An operator: power control yes, user changes no (refused before sending), no BMC reset.
    let mut s =
        open(&connector_with(vec![CipherSuite::S17], Privilege::Operator, 1), bmc, &creds("oper", "oper-pass")).await;
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap(), Some(PowerState::On));
    let offered = capabilities(&mut s);
    assert!(offered.contains(&Capability::BootDevice) && !offered.contains(&Capability::BmcReset), "{offered:?}");
    let before = bmc.stats().requests_for(APP, 0x45);
    let spec = UserSpec { name: "x".into(), password: "x-pass-123".into(), role: UserRole::User, enabled: true };
    let e = Users::create_user(&mut s, &ctx(), &spec).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    assert!(e.not_sent && e.message.contains("administrator"), "{e:?}");
    assert_eq!(bmc.stats().requests_for(APP, 0x45), before, "no Set User Name reached the BMC");

    // A user-level session: power status only.
    let mut s =
        open(&connector_with(vec![CipherSuite::S17], Privilege::User, 1), bmc, &creds("viewer", "view-pass")).await;
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::On));
    let e = Power::power(&mut s, &ctx(), PowerOp::Off).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
    assert!(bmc.handle().snapshot().power_on, "nothing switched the host off");
    let offered = capabilities(&mut s);
    assert_eq!(
        offered,
        vec![
            Capability::Power,
            Capability::Raw,
            Capability::Inventory,
            Capability::EventLog,
            Capability::Sensors,
            // Serial over LAN, DCMI power reading and Get SEL Time are user-level.
            Capability::Console,
            Capability::PowerCapping,
            Capability::BmcClock
        ],
        "{offered:?}"
    );

    // A user-level account cannot log in as operator.
    let e = connector_with(vec![CipherSuite::S17], Privilege::Operator, 1)
        .open(&ctx(), &target(bmc), &creds("viewer", "view-pass"))
        .await
        .err()
        .unwrap();
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e}");
}

#[tokio::test]
async fn lost_late_duplicated_and_misaddressed_replies() {
    let f = fleet(LanConfig::default());
    let bmc = f.bmc(0);
    let mut s = open(&connector(), bmc, &admin()).await;

    // Lost: an idempotent read is retransmitted on the same session.
    bmc.faults().drop_replies = 1;
    assert_eq!(status(&mut s).await.unwrap(), Some(PowerState::Off));
    // A reply carrying another session id is not ours: retransmitted.
    bmc.faults().wrong_session_id = 1;
    assert_eq!(status(&mut s).await.unwrap(), Some(PowerState::Off));
    // Duplicated: the copy of the old answer never passes for a later one.
    bmc.faults().duplicate_replies = 3;
    Power::power(&mut s, &ctx(), PowerOp::On).await.unwrap();
    assert_eq!(status(&mut s).await.unwrap(), Some(PowerState::On));
    // Late (after the retransmit went out): both answers arrive, one is used.
    bmc.faults().delay_next_reply = Some(Duration::from_millis(450));
    assert_eq!(status(&mut s).await.unwrap(), Some(PowerState::On));
    assert_eq!(s.transport().handshakes(), 1, "all of that on one session");

    // A power cycle whose reply is lost is sent once, never again.
    let cycles = bmc.handle().snapshot().power_cycles;
    bmc.faults().drop_replies = 1;
    let e = Power::power(&mut s, &ctx(), PowerOp::Cycle).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Timeout, "{e}");
    assert!(e.message.contains("sent once"), "{e}");
    assert_eq!(bmc.handle().snapshot().power_cycles, cycles + 1, "exactly one cycle");
    assert_eq!(bmc.stats().requests_for(CHASSIS, 0x02), 2, "on, then the one cycle");
}

async fn status(s: &mut IpmiSession<RmcpTransport>) -> bmcfleet_provider::Result<Option<PowerState>> {
    Power::power(s, &ctx(), PowerOp::Status).await
}

#[tokio::test]
async fn a_bmc_that_forgets_its_sessions_is_reconnected_transparently() {
    let f = fleet(LanConfig::default());
    let bmc = f.bmc(0);
    let mut s = open(&connector(), bmc, &admin()).await;
    Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap();
    bmc.forget_sessions(); // a BMC restart: the old session id means nothing now
    assert_eq!(Power::power(&mut s, &ctx(), PowerOp::Status).await.unwrap(), Some(PowerState::Off));
    assert_eq!(s.transport().handshakes(), 2);
    assert!(BmcSession::is_healthy(&s));
}

fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").map(|n| n.trim().parse().unwrap()))
        .unwrap()
}

/// A thousand sessions opened at once share the connector's sockets: no
/// thread and no socket per session, and no BMC waits behind another — a
/// BMC that answers after two seconds does not hold up the others on the
/// same socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_sessions_at_once_share_two_sockets_without_head_of_line_blocking() {
    const N: usize = 1000;
    let f = fleet(LanConfig { count: N, ..LanConfig::default() });
    // Patient retransmit timers: the slow BMC below answers within one attempt.
    let c = IpmiConnector::new(IpmiConfig {
        rmcp: RmcpConfig { attempt_timeout: Duration::from_secs(3), ..Default::default() }.into(),
        sockets: 2,
        ..Default::default()
    });
    // Warm up the runtime's threads, then count.
    let _warm = open(&c, f.bmc(0), &admin()).await;
    let threads_before = threads();
    let started = Instant::now();
    let opened = futures::future::join_all((1..N).map(|i| {
        let (c, bmc) = (c.clone(), f.bmc(i));
        async move { c.open(&Ctx::with_timeout(Duration::from_secs(60)), &target(bmc), &admin()).await }
    }))
    .await;
    let mut sessions: Vec<_> = opened.into_iter().map(|r| r.expect("every session opens")).collect();
    let took = started.elapsed();
    assert_eq!(c.sockets().open_sockets(), 2, "sessions share the sockets");
    assert_eq!(c.sockets().routes(), N, "one route per live session");
    // The count is the whole test process's: tests running beside this one
    // start and stop runtimes of their own (a few threads each). A thread
    // per session would add 999; the margin only absorbs the neighbours.
    assert!(threads() <= threads_before + 32, "no thread per session: {} → {}", threads_before, threads());
    eprintln!("{N} sessions opened in {took:?}");

    // One slow BMC among them: the others answer while it is pending.
    f.bmc(1).set_latency(Duration::from_secs(2));
    let mut slow = sessions.remove(0);
    let slow_call = tokio::spawn(async move {
        Power::power(&mut slow, &Ctx::with_timeout(Duration::from_secs(10)), PowerOp::Status).await
    });
    let started = Instant::now();
    for s in sessions.iter_mut().take(50) {
        Power::power(s, &ctx(), PowerOp::Status).await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(2), "50 calls waited behind the slow BMC: {:?}", started.elapsed());
    assert!(!slow_call.is_finished());
    assert_eq!(slow_call.await.unwrap().unwrap(), Some(PowerState::Off));
    drop(sessions);
}

#[tokio::test]
async fn a_rakp_2_superseded_by_a_crossed_retransmit_is_handshaken_again_once() {
    let f = fleet(LanConfig::default());
    let bmc = f.bmc(0);
    // The BMC replaces the random of the RAKP 2 we use (as when our
    // retransmitted RAKP 1 crossed its first reply): RAKP 3 is refused
    // with 0x0F though the password is right. One fresh handshake heals it.
    bmc.faults().superseded_rakp2 = 1;
    let mut s = open(&connector(), bmc, &admin()).await;
    assert_eq!(status(&mut s).await.unwrap(), Some(PowerState::Off));
    assert_eq!(bmc.stats().open_session_requests, 2, "the whole handshake again");
    assert_eq!(bmc.stats().handshakes, 1);

    // Twice in a row is a failure (no loop against a BMC that always refuses).
    let g = fleet(LanConfig::default());
    let bmc = g.bmc(0);
    bmc.faults().superseded_rakp2 = 2;
    let c = connector();
    let e = match c.open(&ctx(), &target(bmc), &admin()).await {
        Ok(mut s) => status(&mut s).await.unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(e.code, ErrorCode::AuthFailed, "{e}");
    assert!(e.message.contains("RAKP 3"), "{e}");
    assert_eq!(bmc.stats().open_session_requests, 2);
}

/// Silent BMCs (powered-off racks, or hostile ones) take every probe slot
/// of the connector, each until its deadline if it could: an answering
/// BMC still gets its probe within a round of attempts (a silent probe
/// goes back in line after one), not after the silent ones' deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_bmcs_holding_every_probe_slot_do_not_keep_an_answering_one_waiting() {
    let fleet = LanFleet::start(LanConfig::default()).unwrap();
    let connector = std::sync::Arc::new(connector());
    let mut silent = Vec::new();
    for _ in 0..bmcfleet_ipmi::MAX_CONCURRENT_PROBES {
        silent.push(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    let mut probing = tokio::task::JoinSet::new();
    for s in &silent {
        let mut target = target(fleet.bmc(0));
        target.address.port = Some(s.local_addr().unwrap().port());
        let connector = connector.clone();
        probing.spawn(async move {
            let _ = connector.open(&Ctx::with_timeout(Duration::from_secs(300)), &target, &admin()).await;
        });
    }
    // Every silent BMC has been sent a probe: every slot is taken.
    for s in &silent {
        let mut buf = [0u8; 64];
        tokio::time::timeout(Duration::from_secs(60), s.recv(&mut buf))
            .await
            .expect("a probe reaches every silent BMC")
            .unwrap();
    }
    let (long, answering, admin) = (Ctx::with_timeout(Duration::from_secs(300)), target(fleet.bmc(0)), admin());
    let open = connector.open(&long, &answering, &admin);
    let mut session = tokio::time::timeout(Duration::from_secs(60), open)
        .await
        .expect("the answering BMC waited for the silent ones' deadlines")
        .expect("open");
    Power::power(&mut session, &ctx(), PowerOp::Status).await.expect("power status");
    probing.abort_all();
}
