//! Credentials by reference and sealed inline credentials, and the raw
//! passthrough policy, through real processes: nats-server (JetStream file
//! store in a temp dir), bmc-gateway, bmc-worker, bmcctl and bmc-sim (which
//! checks the password it is given).
//!
//! The leak test reads every byte nats-server stored and every log line the
//! processes wrote, and looks for the password (and its base64).

use base64::Engine as _;
use bmcfleet_schema::*;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::producer::{
    stream_last_sequence, stream_messages, wait_gateway, wait_partitions_owned, SealingKey, Topology,
};
use bmcfleet_tests::{bin, NatsServer, Process, Producer};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `bmcctl` against `nats`, with `stdin` piped in; returns (success, stdout, stderr).
fn bmcctl(nats: &NatsServer, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(bin("bmcctl"))
        .args(["--nats-url", &nats.url()])
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bmcctl");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn with_creds(mut b: Batch, credentials: Credentials) -> Batch {
    b.bmc.as_mut().expect("an ad hoc batch").credentials = credentials;
    b
}

fn inline(password: &str) -> Credentials {
    Credentials::Inline { username: "admin".into(), password: Secret::new(password) }
}

async fn run(p: &Producer, b: &Batch) -> BatchResult {
    match p.submit(b, true).await {
        Reply::Result(r) => r,
        other => panic!("expected a result, got {other:?}"),
    }
}

fn refused(reply: Reply) -> ErrorBody {
    match reply {
        Reply::Error(e) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A gateway (default flags plus `gateway_args`), one worker, a sim BMC fleet accepting `password`.
struct Env {
    sim: SimServer,
    producer: Producer,
    topo: Topology,
    _gateway: Process,
    worker: Process,
    nats: NatsServer,
}

async fn env(password: Option<&str>, nats_args: &[&str], gateway_args: &[&str], worker_args: &[&str]) -> Env {
    let nats = NatsServer::start_with(nats_args);
    let sim =
        SimServer::start(SimConfig { password: password.map(str::to_owned), ..SimConfig::default() }).await.unwrap();
    let topo = Topology::default();
    let gateway = topo.gateway(&nats, gateway_args);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let worker = topo.worker(&nats, "w0", sim.addr(), worker_args);
    wait_partitions_owned(&producer.client, &topo.subjects()).await;
    Env { sim, producer, topo, _gateway: gateway, worker, nats }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_credentials_are_refused_by_default_and_nothing_is_stored() {
    // `--inline-credentials` not given: the default is off.
    let nats = NatsServer::start();
    let topo = Topology::default();
    let args = topo.common_args(&nats).into_iter().chain(["--allow-sim".into(), "true".into()]).collect::<Vec<_>>();
    let _gateway = Process::spawn("bmc-gateway", &args, &[]);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let jobs = topo.subjects().jobs_stream();
    let password = format!("pw-off-{}", ulid::Ulid::new());
    let b = sim_batch("10.9.0.1", vec![Action::Power(PowerOp::On)]);
    let e = refused(producer.submit(&with_creds(b.clone(), inline(&password)), false).await);
    assert_eq!(e.code, ErrorCode::InlineCredentialsDisabled, "{e:?}");
    // A pre-sealed box is refused too when inline credentials are off.
    let binding = bmcfleet_common::sealing::Binding::target(&"10.9.0.1".parse::<BmcAddress>().unwrap().key(), u64::MAX);
    let sealed = bmcfleet_common::sealing::seal(
        "admin",
        &Secret::new(&password),
        &bmcfleet_common::sealing::public_key(&topo.sealing.public).unwrap(),
        &binding,
    )
    .unwrap();
    let e = refused(producer.submit(&with_creds(b.clone(), Credentials::Sealed(sealed)), false).await);
    assert_eq!(e.code, ErrorCode::InlineCredentialsDisabled, "{e:?}");
    assert_eq!(stream_messages(&producer.client, &jobs).await, 0, "a refused batch reached the jobs stream");
    // References are what such a deployment takes.
    let b = bmcfleet_tests::producer::ref_machine_batch(
        &producer.client,
        &topo.subjects(),
        "10.9.0.1",
        "rack12",
        b.actions,
    )
    .await;
    let Reply::Accepted(a) = producer.submit(&b, false).await else { panic!("a ref batch") };
    assert!(!a.duplicate);
    assert_eq!(stream_messages(&producer.client, &jobs).await, 1);
}

/// The password or its base64 forms anywhere in `files`: the path, else `None`.
fn leaked(files: &[(std::path::PathBuf, Vec<u8>)], needles: &[Vec<u8>]) -> Option<std::path::PathBuf> {
    files.iter().find(|(_, bytes)| needles.iter().any(|n| find(bytes, n))).map(|(p, _)| p.clone())
}

/// Fail, quoting the line, if `what` (any of `needles`) is in any of the named logs.
fn assert_not_in_logs(logs: &[(&str, String)], needles: &[Vec<u8>], what: &str) {
    for (name, text) in logs {
        for n in needles {
            if let Some(line) = text.lines().find(|l| find(l.as_bytes(), n)) {
                panic!("{what} is in the {name} log: {}", &line[..line.len().min(1500)]);
            }
        }
    }
}

/// After execution: wait until every job is acknowledged, stop the worker,
/// the gateway and nats-server, fail if `what` (any of `needles`) is in any
/// store file, and return the three processes' logs for the log scan.
async fn drain_stop_and_scan(
    client: async_nats::Client,
    topo: &Topology,
    worker: &mut Process,
    gateway: &mut Process,
    nats: &mut NatsServer,
    needles: &[Vec<u8>],
    what: &str,
) -> [(&'static str, String); 3] {
    bmcfleet_tests::eventually(Duration::from_secs(20), "jobs acknowledged", || {
        let (c, jobs) = (client.clone(), topo.subjects().jobs_stream());
        async move { (stream_messages(&c, &jobs).await == 0).then_some(()) }
    })
    .await;
    worker.terminate(Duration::from_secs(15));
    gateway.terminate(Duration::from_secs(15));
    drop(client);
    nats.stop();
    if let Some(path) = leaked(&nats.store_files(), needles) {
        panic!("{what} is stored in plain text in {}", path.display());
    }
    [("gateway", gateway.log_text()), ("worker", worker.log_text()), ("nats", nats.log())]
}

/// With the jobs still queued (no worker ran them): stop the gateway and
/// nats-server cleanly so everything is on disk, check the scan sees each of
/// `present` (so it reads the right place), fail if `what` (any of
/// `needles`) is there, and return the gateway's log.
fn stop_and_scan_queued(
    gateway: &mut Process,
    nats: &mut NatsServer,
    present: &[&[u8]],
    needles: &[Vec<u8>],
    what: &str,
) -> String {
    gateway.terminate(Duration::from_secs(15));
    let log = gateway.log_text();
    nats.stop();
    let files = nats.store_files();
    let all: Vec<u8> = files.iter().flat_map(|(_, b)| b.iter().copied()).collect();
    for p in present {
        assert!(find(&all, p), "{} not found in the store: the scan reads the wrong place", String::from_utf8_lossy(p));
    }
    if let Some(path) = leaked(&files, needles) {
        panic!("{what} is stored in plain text in {}", path.display());
    }
    log
}

/// Restart nats-server with a gateway and a worker, and wait for `ids` to finish.
async fn run_queued(
    topo: &Topology,
    nats: &mut NatsServer,
    sim: &SimServer,
    args: &[&str],
    ids: &[BatchId],
) -> (Process, Process, async_nats::Client, std::collections::HashMap<BatchId, BatchResult>) {
    nats.restart();
    let gateway = topo.gateway(nats, args);
    let worker = topo.worker(nats, "w0", sim.addr(), args);
    let client = nats.client().await;
    let results =
        bmcfleet_tests::producer::wait_final_statuses(&client, &topo.subjects(), ids, Duration::from_secs(60)).await;
    (gateway, worker, client, results)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_never_reach_nats_storage_or_logs() {
    // A unique password: nothing else can contain it by chance.
    let password = format!("pw-{}-leak", ulid::Ulid::new());
    let b64 = base64::engine::general_purpose::STANDARD.encode(password.as_bytes());
    let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(password.as_bytes());
    let needles = [password.as_bytes().to_vec(), b64.as_bytes().to_vec(), b64url.as_bytes().to_vec()];
    let trace = ["--log", "trace"];
    let mut nats = NatsServer::start_with(&["-D"]);
    // The sim checks the password: success below means the worker opened the box and sent the right one.
    let sim = SimServer::start(SimConfig { password: Some(password.clone()), ..SimConfig::default() }).await.unwrap();
    let topo = Topology::default();
    let mut logs = vec![];

    // Phase 1: no worker yet, so every job stays in the jobs stream.
    let mut gateway = topo.gateway(&nats, &trace);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let accept = |reply: Reply| match reply {
        Reply::Accepted(a) => a.id,
        other => panic!("expected Accepted, got {other:?}"),
    };
    let mut ids = vec![];
    // 1. Inline credentials, sealed by the gateway.
    for i in 0..4 {
        let b = with_creds(
            sim_batch(&format!("10.9.1.{i}"), vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]),
            inline(&password),
        );
        ids.push(accept(producer.submit(&b, false).await));
    }
    // 2. Sealed by the producer itself (the gateway never sees the password).
    let key = bmcfleet_common::sealing::public_key(&topo.sealing.public).unwrap();
    let binding = bmcfleet_common::sealing::Binding::target(
        &"10.9.1.5".parse::<BmcAddress>().unwrap().key(),
        bmcfleet_common::runtime::now_ms() + 600_000,
    );
    let sealed = bmcfleet_common::sealing::seal("admin", &Secret::new(&password), &key, &binding).unwrap();
    ids.push(accept(
        producer
            .submit(
                &with_creds(sim_batch("10.9.1.5", vec![Action::Power(PowerOp::On)]), Credentials::Sealed(sealed)),
                false,
            )
            .await,
    ));
    // 3. A named credential in the KV bucket, written by bmcctl.
    let (ok, out, err) = bmcctl(
        &nats,
        &[
            "cred",
            "put",
            "rack9",
            "--username",
            "admin",
            "--password-stdin",
            "--workers-public-key",
            &topo.sealing.public,
        ],
        &format!("{password}\n"),
    );
    assert!(ok, "{out}{err}");
    let b = bmcfleet_tests::producer::ref_machine_batch(
        &producer.client,
        &topo.subjects(),
        "10.9.1.6",
        "rack9",
        vec![Action::Power(PowerOp::On), Action::Inventory],
    )
    .await;
    ids.push(accept(producer.submit(&b, false).await));
    // 4. A wrong password, to show the sim does check.
    let wrong = accept(
        producer
            .submit(&with_creds(sim_batch("10.9.1.9", vec![Action::Power(PowerOp::On)]), inline("not-it")), false)
            .await,
    );
    assert_eq!(stream_messages(&producer.client, &topo.subjects().jobs_stream()).await, 7);

    // (a) what JetStream stored, with the jobs still queued: the jobs (their
    // addresses), the sealed boxes (base64 of the `xkv1` header) and the credential's name.
    drop(producer);
    let addresses: Vec<String> = [0, 1, 2, 3, 5, 6, 9].iter().map(|i| format!("10.9.1.{i}")).collect();
    let mut present: Vec<&[u8]> = addresses.iter().map(|a| a.as_bytes()).collect();
    present.extend([&b"rack9"[..], &b"eGt2M"[..]]);
    logs.push(("gateway", stop_and_scan_queued(&mut gateway, &mut nats, &present, &needles, "the password")));

    // Phase 2: run them; the worker opens the boxes and the sim accepts the password.
    let (mut gateway, mut worker, client, results) =
        run_queued(&topo, &mut nats, &sim, &trace, &[ids.clone(), vec![wrong]].concat()).await;
    for id in &ids {
        assert_eq!(results[id].state, BatchState::Succeeded, "{:?}", results[id]);
    }
    assert_eq!(
        results[&wrong].results[0].error.as_ref().map(|e| e.code),
        Some(ErrorCode::AuthFailed),
        "{:?}",
        results[&wrong]
    );
    assert_eq!(
        sim.log().iter().filter(|l| l.ok).count(),
        4 * 2 + 1 + 2,
        "every action reached the sim with the right password"
    );

    // (a) again after execution, (b) every log: trace level for gateway and worker, debug for NATS.
    logs.extend(
        drain_stop_and_scan(client, &topo, &mut worker, &mut gateway, &mut nats, &needles, "the password").await,
    );
    assert!(
        logs[2].1.contains("Action finished.") && logs[0].1.contains("Batch admitted."),
        "logs are not at the expected level"
    );
    // (`--log trace`; async-nats's trace events are dropped because they hold payloads.)
    assert!(logs[2].1.contains("\"level\":\"DEBUG\""), "the worker log is not verbose");
    assert!(
        logs[3].1.contains("[DBG]"),
        "the NATS log is not at debug level: {}",
        &logs[3].1[..logs[3].1.len().min(2000)]
    );
    assert_not_in_logs(&logs, &needles, "the password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_parameters_never_reach_nats_storage_or_logs() {
    // A new user's password (create, then update), a media URL's password
    // and signature, and a raw request's data.
    let tag = ulid::Ulid::new().to_string();
    let secrets: Vec<String> =
        ["create", "update", "urlpw", "urlsig", "rawdata"].iter().map(|k| format!("{k}-{tag}")).collect();
    let url = format!("https://media:{}@img.example/boot.iso?X-Amz-Signature={}", secrets[2], secrets[3]);
    let needles: Vec<Vec<u8>> = secrets.iter().map(|s| s.as_bytes().to_vec()).collect();
    let trace = ["--log", "trace"];
    let mut nats = NatsServer::start_with(&["-D"]);
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();

    // Queued, with no worker yet: what JetStream holds.
    let mut gateway = topo.gateway(&nats, &trace);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let actions = vec![
        Action::User(UserOp::Create(UserSpec {
            name: "ops".into(),
            password: secrets[0].clone().into(),
            role: UserRole::Operator,
            enabled: true,
        })),
        Action::VirtualMedia(VirtualMediaOp::Insert { url: url.clone(), media: MediaKind::Cd }),
        Action::User(UserOp::Update(UserUpdate {
            name: "ops".into(),
            password: Some(secrets[1].clone().into()),
            role: None,
            enabled: None,
        })),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: secrets[4].as_bytes().to_vec() })),
    ];
    let Reply::Accepted(a) = producer.submit(&with_creds(sim_batch("10.9.5.1", actions), inline("pw")), false).await
    else {
        panic!("accepted")
    };
    drop(producer);
    let gateway_log =
        stop_and_scan_queued(&mut gateway, &mut nats, &[b"10.9.5.1", b"img.example"], &needles, "a secret parameter");
    let mut logs = vec![("gateway", gateway_log)];

    // Run it: the worker opens the parameters and the BMC gets them whole.
    let (mut gateway, mut worker, client, results) = run_queued(&topo, &mut nats, &sim, &trace, &[a.id]).await;
    assert_eq!(results[&a.id].state, BatchState::Succeeded, "{:?}", results[&a.id]);
    assert_eq!(sim.media("v4-10-9-5-1").as_deref(), Some(url.as_str()), "the media URL arrived whole");
    assert_eq!(
        sim.user_password("v4-10-9-5-1", "ops").as_deref(),
        Some(secrets[1].as_str()),
        "the updated password arrived"
    );
    assert_eq!(sim.raw_data("v4-10-9-5-1").as_deref(), Some(secrets[4].as_bytes()), "the raw data arrived whole");
    logs.extend(
        drain_stop_and_scan(client, &topo, &mut worker, &mut gateway, &mut nats, &needles, "a secret parameter").await,
    );
    assert!(
        logs[2].1.contains("Action finished.") && logs[2].1.contains("img.example"),
        "the worker log does not show the actions"
    );
    assert_not_in_logs(&logs, &needles, "a secret parameter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_from_the_bucket_rotate_without_restart() {
    let e = env(Some("right-pw"), &[], &[], &["--credentials-cache-ttl", "0s"]).await;
    let p = &e.producer;
    let put = |name: &str, pw: &str| {
        bmcctl(
            &e.nats,
            &[
                "cred",
                "put",
                name,
                "--username",
                "admin",
                "--password-stdin",
                "--workers-public-key",
                &e.topo.sealing.public,
            ],
            &format!("{pw}\n"),
        )
    };
    let subjects = e.topo.subjects();
    let (client, subjects) = (&p.client, &subjects);
    let batch = |addr: &str, name: &str| {
        let (addr, name) = (addr.to_owned(), name.to_owned());
        async move {
            bmcfleet_tests::producer::ref_machine_batch(
                client,
                subjects,
                &addr,
                &name,
                vec![Action::Power(PowerOp::On)],
            )
            .await
        }
    };
    let code = |r: &BatchResult| r.results[0].error.as_ref().map(|e| e.code);

    // No bucket yet: unknown.
    let r = run(p, &batch("10.9.2.1", "rack1").await).await;
    assert_eq!(code(&r), Some(ErrorCode::UnknownCredential), "{r:?}");
    assert!(put("rack1", "right-pw").0);
    let r = run(p, &batch("10.9.2.1", "rack1").await).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    // Rotated (here: to a password the BMC refuses): the next batch uses it, no restart.
    assert!(put("rack1", "old-pw").0);
    let r = run(p, &batch("10.9.2.1", "rack1").await).await;
    assert_eq!(code(&r), Some(ErrorCode::AuthFailed), "{r:?}");
    // Sealed to a key the workers do not hold: typed error, the worker carries on.
    let other = SealingKey::generate();
    assert!(
        bmcctl(
            &e.nats,
            &["cred", "put", "rack2", "--username", "admin", "--password-stdin", "--workers-public-key", &other.public],
            "right-pw\n"
        )
        .0
    );
    let r = run(p, &batch("10.9.2.2", "rack2").await).await;
    assert_eq!(code(&r), Some(ErrorCode::CredentialUnavailable), "{r:?}");
    // Listing shows names only; deleting makes a name unknown.
    let (ok, out, _) = bmcctl(&e.nats, &["cred", "list"], "");
    assert!(ok && out.lines().collect::<Vec<_>>() == ["rack1", "rack2"], "{out}");
    assert!(!out.contains("pw"));
    assert!(bmcctl(&e.nats, &["cred", "delete", "rack1"], "").0);
    let r = run(p, &batch("10.9.2.1", "rack1").await).await;
    assert_eq!(code(&r), Some(ErrorCode::UnknownCredential), "{r:?}");
    // bmcctl refuses bad input before writing anything.
    assert!(!put("bad name", "x").0);
    assert!(
        !bmcctl(
            &e.nats,
            &["cred", "put", "rack3", "--username", "admin", "--password-stdin", "--workers-public-key", "Xnope"],
            "x\n"
        )
        .0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_box_sealed_to_another_key_fails_the_batch_not_the_worker() {
    // The gateway seals to a key the worker does not hold (a botched rotation).
    let other = SealingKey::generate();
    let mut e = env(None, &[], &["--inline-credentials", "sealed", "--workers-public-key", &other.public], &[]).await;
    let r = run(
        &e.producer,
        &with_creds(
            sim_batch("10.9.3.1", vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Status)]),
            inline("pw"),
        ),
    )
    .await;
    assert_eq!(r.state, BatchState::Failed);
    let err = r.results[0].error.as_ref().unwrap();
    assert_eq!(err.code, ErrorCode::CredentialUnavailable, "{r:?}");
    assert!(err.message.contains(&other.public), "{err:?}");
    assert!(e.sim.log().is_empty(), "nothing reached the BMC");
    assert!(e.worker.try_wait().is_none(), "the worker is still running");
    // Holding both seeds (rotation), the worker opens it.
    let both =
        e.topo.worker(&e.nats, "w1", e.sim.addr(), &["--sealing-key-file", &other.seed_file.display().to_string()]);
    e.worker.terminate(Duration::from_secs(15));
    wait_partitions_owned(&e.producer.client, &e.topo.subjects()).await;
    let r = run(&e.producer, &with_creds(sim_batch("10.9.3.2", vec![Action::Power(PowerOp::On)]), inline("pw"))).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.worker, "w1");
    drop(both);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_policy_refuses_at_admission_and_in_the_worker() {
    // The gateway allows every IPMI raw request but one netfn; the worker keeps the default policy.
    let e = env(None, &[], &["--raw-policy", "deny ipmi:netfn=0x30; allow ipmi:*; allow redfish:*:*"], &[]).await;
    let p = &e.producer;
    let jobs = e.topo.subjects().jobs_stream();
    let raw = |netfn: u8| Action::Raw(RawRequest::Ipmi(RawIpmi { netfn, cmd: 0x01, data: vec![] }));

    let r = run(p, &sim_batch("10.9.4.1", vec![raw(0x06)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    // The last sequence, not a count: the batch above leaves the work queue when acknowledged.
    let before = stream_last_sequence(&p.client, &jobs).await;
    let Reply::Error(err) =
        p.submit(&sim_batch("10.9.4.1", vec![Action::Power(PowerOp::Status), raw(0x30)]), true).await
    else {
        panic!("expected a refusal")
    };
    assert_eq!(err.code, ErrorCode::RawNotAllowed);
    assert!(err.message.contains("actions[1]") && err.message.contains("deny ipmi:netfn=0x30"), "{err:?}");
    assert_eq!(stream_last_sequence(&p.client, &jobs).await, before, "a refused batch was stored");

    // Firmware netfn: the gateway's policy lets it through, the worker's default refuses it.
    let r = run(p, &sim_batch("10.9.4.2", vec![raw(0x08)])).await;
    let err = r.results[0].error.as_ref().expect("refused by the worker");
    assert_eq!(err.code, ErrorCode::RawNotAllowed, "{r:?}");
    assert!(err.message.contains("deny ipmi:netfn=0x08-0x09"), "{err:?}");
    assert!(!e.sim.log().iter().any(|l| l.bmc == "v4-10-9-4-2"), "the refused raw request reached the BMC");
}

#[test]
fn keygen_writes_a_private_seed_and_prints_the_public_key() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workers.xkey");
    let keygen =
        || Command::new(bin("bmcctl")).args(["keygen", "--out"]).arg(&path).env_remove("RUST_LOG").output().unwrap();
    let out = keygen();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let public = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    assert!(bmcfleet_common::sealing::public_key(&public).is_ok(), "{public}");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    let seed = std::fs::read_to_string(&path).unwrap();
    assert!(seed.starts_with("SX") && !String::from_utf8_lossy(&out.stderr).contains(seed.trim()));
    let mut keys = bmcfleet_common::sealing::SealingKeys::default();
    assert_eq!(keys.add_file(&path).unwrap(), public, "the seed and the printed key are one pair");
    // Never overwrites an existing seed.
    assert!(!keygen().status.success());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), seed);
}

/// The same leak check against a real BMC: OpenIPMI `ipmi_sim` only
/// completes the RMCP+ handshake with the right password, so a successful
/// action shows the worker opened the box.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_password_is_sealed_end_to_end_against_ipmi_sim() {
    use bmcfleet_testing::ipmi::{IpmiSim, IpmiSimOptions};
    // IPMI passwords are at most 16 bytes: a ULID's random tail makes it unique.
    let ulid = ulid::Ulid::new().to_string();
    let password = format!("q{}", &ulid[ulid.len() - 15..]);
    let b64 = base64::engine::general_purpose::STANDARD.encode(password.as_bytes());
    let needles = [password.as_bytes().to_vec(), b64.trim_end_matches('=').as_bytes().to_vec()];
    let bmc = IpmiSim::start_with(IpmiSimOptions { password: Secret::new(&password), ..IpmiSimOptions::default() })
        .expect("ipmi_sim (Debian package openipmi) must be installed");
    let trace = ["--log", "trace"];
    let mut nats = NatsServer::start_with(&["-D"]);
    let topo = Topology::default();

    // Queued with no worker: the job sits in the stream, sealed.
    let mut gateway = topo.gateway(&nats, &trace);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let batch =
        bmcfleet_tests::producer::batch_for(bmc.target(), vec![Action::Power(PowerOp::Status), Action::Inventory]);
    let Reply::Accepted(a) = producer.submit(&batch, false).await else { panic!("not accepted") };
    gateway.terminate(Duration::from_secs(15));
    let mut logs = vec![("gateway", gateway.log_text())];
    drop(producer);
    nats.stop();
    let files = nats.store_files();
    let all: Vec<u8> = files.iter().flat_map(|(_, b)| b.iter().copied()).collect();
    assert!(
        find(&all, a.id.to_string().as_bytes()) && find(&all, b"eGt2M"),
        "the queued, sealed job is not in the store"
    );
    if let Some(path) = leaked(&files, &needles) {
        panic!("the IPMI password is stored in plain text in {}", path.display());
    }

    // Run it against ipmi_sim.
    nats.restart();
    let mut gateway = topo.gateway(&nats, &trace);
    let mut worker = topo.worker_plain(&nats, "w0", &trace);
    let client = nats.client().await;
    let results =
        bmcfleet_tests::producer::wait_final_statuses(&client, &topo.subjects(), &[a.id], Duration::from_secs(60))
            .await;
    let r = &results[&a.id];
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    assert_eq!(r.results[0].provider.as_deref(), Some("ipmi"));
    logs.extend(
        drain_stop_and_scan(client, &topo, &mut worker, &mut gateway, &mut nats, &needles, "the IPMI password").await,
    );
    assert!(logs[2].1.contains("BMC session opened."), "no IPMI session in the worker log");
    assert_not_in_logs(&logs, &needles, "the IPMI password");
}
