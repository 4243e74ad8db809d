//! BMC discovery end to end (docs/BMCCTL.md "Discovery"): an operator's
//! request → gateway (`bmcfleet.discover`) → a worker with
//! `--discover-allow` → unauthenticated probes of real loopback responders:
//! OpenIPMI `ipmi_sim`, the spec RMCP+ responder, the Redfish mockup server
//! (Dell fixtures), sushy-emulator, the AMT fixture server, and a TCP port
//! that is no BMC. Everything is on 127.0.0.1, so the BMCs are told apart by
//! port: the request is addresses × per-protocol port lists.

use base64::Engine as _;
use bmcfleet_schema::discover::{DiscoverPorts, DiscoverReport, DiscoverRequest, Found};
use bmcfleet_schema::subject::{CONTENT_TYPE, REQUEST_INFO_HEADER};
use bmcfleet_schema::{ErrorCode, Protocol, Reply};
use bmcfleet_testing::amt::{AmtFixtureServer, ServerOptions};
use bmcfleet_testing::ipmi::lan::{LanConfig, LanFleet};
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{sha256_hex, MockupServer, SushyEmulator, TestPki};
use bmcfleet_tests::producer::Stack;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A TCP port that is no BMC: it accepts, says an SSH banner, and counts
/// the connections it got (each with when it was accepted).
struct NotABmc {
    port: u16,
    accepted: Arc<Mutex<Vec<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl NotABmc {
    async fn start(ip: &str) -> NotABmc {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(Mutex::new(Vec::new()));
        let seen = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                seen.lock().unwrap().push(Instant::now());
                tokio::spawn(async move {
                    let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n").await;
                    let mut buf = [0u8; 1024];
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), tokio::io::AsyncReadExt::read(&mut s, &mut buf))
                            .await;
                });
            }
        });
        NotABmc { port, accepted, task }
    }

    fn count(&self) -> usize {
        self.accepted.lock().unwrap().len()
    }

    fn first(&self) -> Option<Instant> {
        self.accepted.lock().unwrap().first().copied()
    }
}

impl Drop for NotABmc {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn discover(stack: &Stack, request: &DiscoverRequest, tenant: Option<&str>) -> Reply {
    let mut h = async_nats::HeaderMap::new();
    h.insert(CONTENT_TYPE, "application/json");
    if let Some(t) = tenant {
        // What nats-server sets on a request crossing a tenant account's import.
        h.insert(REQUEST_INFO_HEADER, format!(r#"{{"acc":"{t}"}}"#).as_str());
    }
    let body = serde_json::to_vec(request).unwrap();
    stack.producer.raw("discover", h, body, Duration::from_secs(120)).await.1
}

fn report(reply: Reply) -> DiscoverReport {
    match reply {
        Reply::Discovery(r) => r,
        other => panic!("expected a discovery report, got {other:?}"),
    }
}

fn refusal(reply: Reply) -> bmcfleet_schema::ErrorBody {
    match reply {
        Reply::Error(e) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The SHA-256 of the first certificate of a PEM bundle (the leaf).
fn pem_sha256(pem: &str) -> String {
    let b64: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    sha256_hex(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap())
}

fn bmcctl(stack: &Stack, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &stack.nats.url(), "--partitions", &stack.topology.partitions.to_string()])
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_loopback_responders_are_found_and_nothing_else_is_touched() {
    let ipmi_sim = IpmiSim::start().expect("ipmi_sim (Debian package openipmi) must be installed");
    let lan = LanFleet::start(LanConfig::default()).expect("the spec RMCP+ responder");
    let pki = TestPki::generate().unwrap();
    let mockup =
        MockupServer::builder().dir(mockup_dir("dell").join("bmclib")).unwrap().pki(pki.clone()).start().await.unwrap();
    let Some(sushy) = SushyEmulator::start_or_skip(SushyEmulator::builder(), "discover_e2e").await else { return };
    let amt = AmtFixtureServer::start_for_test(ServerOptions::default()).await;
    let not_bmc = NotABmc::start("127.0.0.1").await;
    // Another loopback address the worker may not probe: nothing may arrive there.
    let outside = NotABmc::start("127.0.0.2").await;
    let stack = Stack::start(1, &["--discover-allow", "127.0.0.1/32", "--discover-rate", "200"]).await;

    let ports = DiscoverPorts {
        ipmi: vec![ipmi_sim.port(), lan.bmc(0).port(), not_bmc.port],
        redfish: vec![mockup.addr().port(), sushy.addr().port(), not_bmc.port],
        amt: vec![amt.addr().port(), not_bmc.port],
    };
    let request =
        DiscoverRequest { targets: vec!["127.0.0.1".into()], ports: ports.clone(), rate: None, timeout_ms: Some(2000) };
    let r = report(discover(&stack, &request, None).await);
    assert_eq!((r.addresses, r.probes), (1, 8), "{r:?}");
    let found: Vec<(u16, Protocol)> = r.found.iter().map(|f| (f.port, f.protocol)).collect();
    let mut want = vec![
        (ipmi_sim.port(), Protocol::Ipmi),
        (lan.bmc(0).port(), Protocol::Ipmi),
        (mockup.addr().port(), Protocol::Redfish),
        (sushy.addr().port(), Protocol::Redfish),
        (amt.addr().port(), Protocol::Amt),
    ];
    want.sort_by_key(|(p, _)| *p);
    assert_eq!(found, want, "{r:#?}");
    let at = |port: u16| -> &Found { r.found.iter().find(|f| f.port == port).unwrap() };
    // The non-BMC port was probed (it saw connections) and is reported as nothing.
    assert!(not_bmc.count() >= 2, "the non-BMC port was not probed");
    assert!(r.found.iter().all(|f| f.port != not_bmc.port));
    // What the unauthenticated answers say.
    let dell = at(mockup.addr().port());
    assert_eq!(dell.vendor.as_deref(), Some("Dell"));
    assert_eq!(dell.product.as_deref(), Some("Integrated Dell Remote Access Controller"));
    assert_eq!(dell.pin_sha256.as_deref(), Some(pem_sha256(&pki.cert_pem).as_str()), "the mockup's certificate");
    let s = at(sushy.addr().port());
    assert!(s.version.is_some() && s.pin_sha256.as_ref().is_some_and(|p| p.len() == 64), "{s:?}");
    assert_eq!(at(ipmi_sim.port()).version.as_deref(), Some("2.0"));
    let spec = at(lan.bmc(0).port());
    assert_eq!((spec.version.as_deref(), spec.asf), (Some("2.0"), Some(true)), "the spec responder answers ASF ping");
    let a = at(amt.addr().port());
    assert_eq!(a.version.as_deref(), Some("15.0.23.1706"), "{a:?}");

    // No credential ever reached an unregistered host.
    let asked = mockup.requests();
    assert!(asked.iter().any(|q| q.is("GET", "/redfish/v1")), "{asked:?}");
    for q in &asked {
        assert!(
            q.header("authorization").is_none() && q.header("x-auth-token").is_none(),
            "a credential was sent: {} {}",
            q.method,
            q.path
        );
        assert_eq!(q.method, "GET", "discovery only reads");
    }
    assert!(amt.requests().iter().all(|q| q.digest.is_none()), "Digest credentials sent to AMT");
    assert_eq!(lan.bmc(0).stats().open_session_requests, 0, "no IPMI session was opened");

    // An address outside --discover-allow: the whole request is refused
    // before any packet (the allowed address's port sees nothing either).
    let before = (not_bmc.count(), mockup.requests().len());
    let wider = DiscoverRequest {
        targets: vec!["127.0.0.1/32".into(), "127.0.0.2/32".into()],
        ports: DiscoverPorts {
            ipmi: vec![],
            redfish: vec![not_bmc.port, outside.port],
            amt: vec![mockup.addr().port()],
        },
        rate: None,
        timeout_ms: None,
    };
    let e = refusal(discover(&stack, &wider, None).await);
    assert_eq!(e.code, ErrorCode::TargetForbidden, "{e:?}");
    assert!(e.message.contains("127.0.0.2") && e.message.contains("127.0.0.1/32"), "{}", e.message);
    // A tenant may not discover at all.
    let e = refusal(discover(&stack, &request, Some("tenant-a")).await);
    assert_eq!(e.code, ErrorCode::PermissionDenied, "{e:?}");
    // A request larger than the worker allows (--discover-max-addresses,
    // 1024; the gateway's own bound is 65,536): refused by its size first.
    let huge = DiscoverRequest { targets: vec!["127.0.0.0/21".into()], ..request.clone() };
    let e = refusal(discover(&stack, &huge, None).await);
    assert_eq!(e.code, ErrorCode::InvalidField, "{e:?}");
    assert!(e.message.contains("--discover-max-addresses"), "{}", e.message);
    // The refusals are answered after the checks, and the checks come before
    // any probe: had one run, the allowed ports would have seen it by now.
    assert_eq!((not_bmc.count(), mockup.requests().len()), before);
    assert_eq!(outside.count(), 0, "a packet reached an address outside --discover-allow");

    // bmcctl prints the proposals in the `machine apply` file format, and
    // nothing is registered until the operator applies them.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proposed.yaml");
    let list = |v: &[u16]| v.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",");
    let out = bmcctl(
        &stack,
        &[
            "discover",
            "127.0.0.1",
            "--ipmi-ports",
            &list(&ports.ipmi),
            "--redfish-ports",
            &list(&ports.redfish),
            "--amt-ports",
            &list(&ports.amt),
            "--probe-timeout",
            "2s",
            "--credentials",
            "rack12-bmc",
            "--out",
            file.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("5 proposed machines"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mockup_name = format!("bmc-127-0-0-1-{}", mockup.addr().port());
    assert!(text.contains(&format!("name: {mockup_name}")), "{text}");
    assert!(text.contains(&pem_sha256(&pki.cert_pem)), "the pin is proposed: {text}");
    assert!(text.contains("credentials: rack12-bmc"), "{text}");
    let js = async_nats::jetstream::new(stack.producer.client.clone());
    let machines = js.get_key_value(stack.topology.subjects().machines_bucket()).await.unwrap();
    let mut keys = machines.keys().await.unwrap();
    assert!(futures::StreamExt::next(&mut keys).await.is_none(), "discovery registered a machine");
    // The file is what `machine apply` reads: a dry run accepts every entry.
    let out =
        bmcctl(&stack, &["machine", "apply", "-f", file.to_str().unwrap(), "--dry-run", "--allow-missing-credentials"]);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}\n{text}");
    for (port, _) in &want {
        assert!(said.contains(&format!("bmc-127-0-0-1-{port}")), "{said}");
    }

    // Each operator discovery is audited before it is handed to a worker,
    // refused ones by a worker included; a tenant's, refused by the
    // gateway, is not a discovery and leaves no record.
    let out = bmcctl(&stack, &["--json", "audit"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let asked: Vec<(Vec<String>, u64)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<bmcfleet_schema::audit::AuditRecord>(l).ok())
        .filter_map(|r| match r.what {
            bmcfleet_schema::audit::AuditEvent::DiscoveryRequested { targets, addresses, .. } => {
                assert_eq!(r.actor, "operator");
                Some((targets, addresses))
            }
            _ => None,
        })
        .collect();
    let one = || vec!["127.0.0.1".to_owned()];
    assert_eq!(
        asked,
        [
            (one(), 1),
            (vec!["127.0.0.1/32".into(), "127.0.0.2/32".into()], 2),
            (vec!["127.0.0.0/21".into()], 2048),
            (one(), 1)
        ],
        "one record per operator discovery, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_paced_at_the_workers_rate() {
    const RATE: u32 = 20;
    const PORTS: usize = 32;
    let mut listeners = Vec::new();
    for _ in 0..PORTS {
        listeners.push(NotABmc::start("127.0.0.1").await);
    }
    let stack = Stack::start(1, &["--discover-allow", "127.0.0.1/32", "--discover-rate", &RATE.to_string()]).await;
    // The request asks for far more; the worker's --discover-rate caps it.
    let request = DiscoverRequest {
        targets: vec!["127.0.0.1".into()],
        ports: DiscoverPorts { ipmi: vec![], redfish: listeners.iter().map(|l| l.port).collect(), amt: vec![] },
        rate: Some(10_000),
        timeout_ms: Some(500),
    };
    let sent = Instant::now();
    let r = report(discover(&stack, &request, None).await);
    assert_eq!((r.probes, r.rate), (PORTS as u64, RATE), "{r:?}");
    assert!(r.found.is_empty(), "{r:?}");
    // Every port was probed once (the accepts may lag the report a little).
    let firsts = bmcfleet_tests::eventually(Duration::from_secs(10), "every port probed", || async {
        let firsts: Option<Vec<Instant>> = listeners.iter().map(|l| l.first()).collect();
        firsts
    })
    .await;
    let mut firsts = firsts;
    firsts.sort();
    // The lower bound the pacer guarantees: probe k starts no earlier than
    // k / RATE after the first, which starts after the request was sent.
    let span = *firsts.last().unwrap() - sent;
    let least = Duration::from_secs_f64((PORTS - 1) as f64 / f64::from(RATE));
    assert!(span >= least, "{PORTS} probes within {span:?}; at {RATE}/s they take at least {least:?}");
    // And no second holds many more than RATE probes (a little slack for
    // probes whose connection the scheduler delayed into a later one's).
    for (i, t) in firsts.iter().enumerate() {
        let within = firsts[i..].iter().take_while(|u| **u - *t < Duration::from_secs(1)).count();
        assert!(within <= RATE as usize * 5 / 4, "{within} probes within 1 s of probe {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_worker_allowing_discovery_nothing_is_probed() {
    let target = NotABmc::start("127.0.0.1").await;
    let stack = Stack::start(1, &[]).await;
    let request = DiscoverRequest {
        targets: vec!["127.0.0.1".into()],
        ports: DiscoverPorts { ipmi: vec![], redfish: vec![target.port], amt: vec![] },
        rate: None,
        timeout_ms: None,
    };
    let e = refusal(discover(&stack, &request, None).await);
    assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
    assert!(e.message.contains("--discover-allow"), "{}", e.message);
    assert_eq!(target.count(), 0);
}

/// With the shipped NATS accounts (deploy/nats/bmcfleet.conf): the admin
/// user's discovery goes gateway → worker → back under the least-privilege
/// permissions, while tenant accounts cannot even reach the endpoint (it is
/// not exported to them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_shipped_accounts_only_operators_reach_discovery() {
    use bmcfleet_tests::shipped::{connect, shipped_with, PASSWORDS};
    let target = NotABmc::start("127.0.0.1").await;
    let stack = shipped_with(
        bmcfleet_tests::producer::Topology::default(),
        bmcfleet_testing::SimConfig::default(),
        &[],
        &["--discover-allow", "127.0.0.1/32"],
    )
    .await;
    let request = DiscoverRequest {
        targets: vec!["127.0.0.1".into()],
        ports: DiscoverPorts { ipmi: vec![], redfish: vec![target.port], amt: vec![] },
        rate: None,
        timeout_ms: Some(500),
    };
    let body = serde_json::to_vec(&request).unwrap();
    // The worker subscribes to discovery before it takes partitions.
    stack.wait_partitions_owned().await;
    // The operator first: gateway and worker are up and the path works.
    let (admin, _) = stack.producer("admin", PASSWORDS[4].1).await;
    let mut h = async_nats::HeaderMap::new();
    h.insert(CONTENT_TYPE, "application/json");
    let r = report(admin.raw("discover", h, body.clone(), Duration::from_secs(60)).await.1);
    assert_eq!((r.addresses, r.probes, r.found.len()), (1, 1, 0), "{r:?}");
    let probed = target.count();
    assert!(probed >= 1, "the operator's discovery did not probe");
    // Then the tenants, with the gateway serving: the endpoint is out of their reach.
    for (user, password) in [("producer", PASSWORDS[2].1), ("producer-a", PASSWORDS[5].1)] {
        let (client, _) = connect(&stack.nats, user, password).await;
        let mut h = async_nats::HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/json");
        let ask =
            async_nats::Request::new().headers(h).payload(body.clone().into()).timeout(Some(Duration::from_secs(3)));
        let answer = client.send_request("bmcfleet.discover", ask).await;
        assert!(answer.is_err(), "tenant {user} reached the discovery endpoint: {answer:?}");
    }
    assert_eq!(target.count(), probed, "a tenant's request probed");
}
