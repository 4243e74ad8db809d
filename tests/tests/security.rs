//! Security against the real nats-server: the least-privilege accounts of
//! deploy/nats/bmcfleet.conf, and TLS between bmcfleet and NATS.

use async_nats::ConnectOptions;
use bmcfleet_schema::subject::WAIT_HEADER;
use bmcfleet_schema::*;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::producer::{
    job_of, lease_every_partition_to_nobody, queue_job, refusal, stream_last_sequence, stream_messages, wait_gateway,
    wait_partitions_owned, Topology,
};
use bmcfleet_tests::shipped::{connect, shipped, PASSWORDS};
use bmcfleet_tests::{NatsServer, Producer};
use std::sync::{Arc, Mutex};
use std::time::Duration;

async fn wait_error(errors: &Arc<Mutex<Vec<String>>>, needle: &str) -> String {
    bmcfleet_tests::eventually(Duration::from_secs(10), needle, || {
        let found = errors.lock().unwrap().iter().find(|e| e.contains(needle)).cloned();
        async move { found }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_cannot_bypass_the_gateway() {
    let stack = shipped(SimConfig::default()).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (producer, producer_errors) = stack.producer("producer", PASSWORDS[2].1).await;
    let producer_client = producer.client.clone();
    let (admin, admin_errors) = connect(nats, "gateway", PASSWORDS[0].1).await;
    stack.wait_partitions_owned().await;

    // The sanctioned path works end to end under these permissions.
    let Reply::Result(r) = producer.submit(&sim_batch("10.7.0.1", vec![Action::Power(PowerOp::On)]), true).await else {
        panic!("submit through the gateway")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    let jobs = topo.subjects().jobs_stream();
    // The stream's last sequence: an acknowledged job leaves the work queue,
    // a forged one would add a sequence.
    let before = stream_last_sequence(&admin, &jobs).await;

    // A producer publishing straight onto a job subject is refused by the server.
    let subject = topo.subjects().job("default", &"10.7.0.1".parse::<BmcAddress>().unwrap().key());
    producer_client.publish(subject.clone(), "forged".into()).await.unwrap();
    producer_client.flush().await.unwrap();
    let e = wait_error(&producer_errors, "Permissions Violation for Publish").await;
    assert!(e.contains("bmc.jobs"), "{e}");
    // ... and cannot read the job stream or the JetStream API either.
    producer_client.subscribe("bmc.jobs.>").await.unwrap();
    wait_error(&producer_errors, "Permissions Violation for Subscription").await;
    let js = async_nats::jetstream::new(producer_client.clone());
    assert!(tokio::time::timeout(Duration::from_secs(5), js.get_stream(&jobs))
        .await
        .map(|r| r.is_err())
        .unwrap_or(true));

    // Workers consume jobs but may not publish them either.
    let (worker_client, worker_errors) = connect(nats, "worker", PASSWORDS[1].1).await;
    worker_client.publish(subject, "forged".into()).await.unwrap();
    worker_client.flush().await.unwrap();
    wait_error(&worker_errors, "Permissions Violation for Publish").await;

    assert_eq!(stream_last_sequence(&admin, &jobs).await, before, "a forged job reached the stream");

    // The gateway's user sets streams up but cannot destroy queued work or
    // history: deleting or purging a stream, or one of its messages, is refused.
    let events = topo.subjects().events_stream();
    let events_before = stream_messages(&admin, &events).await;
    assert!(events_before > 0, "the batch above stored events");
    for (api, body) in [
        (format!("$JS.API.STREAM.PURGE.{events}"), "{}"),
        (format!("$JS.API.STREAM.MSG.DELETE.{events}"), r#"{"seq":1}"#),
        (format!("$JS.API.STREAM.DELETE.{events}"), ""),
        (format!("$JS.API.STREAM.DELETE.{jobs}"), ""),
    ] {
        let req =
            async_nats::Request::new().payload(body.as_bytes().to_vec().into()).timeout(Some(Duration::from_secs(2)));
        if let Ok(answer) = admin.send_request(api.clone(), req).await {
            assert!(
                String::from_utf8_lossy(&answer.payload).contains("error"),
                "{api} was allowed: {:?}",
                answer.payload
            );
        }
    }
    let e = wait_error(&admin_errors, "Permissions Violation for Publish").await;
    assert!(e.contains("$JS.API.STREAM."), "{e}");
    assert_eq!(stream_messages(&admin, &events).await, events_before, "events were deleted");
    assert!(async_nats::jetstream::new(admin.clone()).get_stream(&jobs).await.is_ok(), "the job stream is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_and_worker_speak_tls_to_nats() {
    let pki = bmcfleet_testing::redfish::TestPki::generate().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = pki.write_to(dir.path()).unwrap();
    let ca = dir.path().join("ca.pem");
    let (cert, key, ca) = (cert.display().to_string(), key.display().to_string(), ca.display().to_string());
    let nats = NatsServer::start_with(&["--tls", "--tlscert", &cert, "--tlskey", &key]);
    assert!(nats.log().contains("TLS required for client connections"), "{}", nats.log());
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let topo = Topology::default();
    let _gw = topo.gateway(&nats, &["--nats-tls-ca", &ca]);
    let _w = topo.worker(&nats, "w0", sim.addr(), &["--nats-tls-ca", &ca]);
    let client = ConnectOptions::new()
        .add_root_certificates(dir.path().join("ca.pem"))
        .require_tls(true)
        .connect(nats.url())
        .await
        .unwrap();
    let producer = Producer::new(client.clone());
    wait_gateway(&producer).await;
    wait_partitions_owned(&client, &topo.subjects()).await;
    let Reply::Result(r) = producer.submit(&sim_batch("10.7.1.1", vec![Action::Power(PowerOp::Status)]), true).await
    else {
        panic!("submit over TLS")
    };
    assert_eq!(r.state, BatchState::Succeeded);

    // A gateway that does not trust the server's CA refuses to start.
    let mut untrusting = topo.gateway(&nats, &["--nats-connect-timeout", "3s"]);
    let status = untrusting.wait();
    assert!(!status.success());
    let log = untrusting.log_text();
    assert!(log.contains("cannot connect to NATS") || log.contains("did not answer"), "{log}");
}

/// `bmcctl` as a NATS user, password on stdin.
fn bmcctl_as(nats: &NatsServer, user: &str, password: &str, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = std::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &nats.url(), "--nats-user", user, "--nats-password", password])
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_workers_read_the_credentials_bucket_and_only_admin_writes_it() {
    let stack = shipped(SimConfig { password: Some("bmc-pw-77".into()), ..SimConfig::default() }).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (producer, _) = stack.producer("producer", PASSWORDS[2].1).await;
    let producer_client = producer.client.clone();
    let (gateway_client, _) = connect(nats, "gateway", PASSWORDS[0].1).await;
    stack.wait_partitions_owned().await;
    let bucket = topo.subjects().credentials_bucket();
    let put = |user: &str, pw: &str| {
        bmcctl_as(
            nats,
            user,
            pw,
            &[
                "cred",
                "put",
                "rack7",
                "--username",
                "admin",
                "--password-stdin",
                "--workers-public-key",
                &topo.sealing.public,
            ],
            "bmc-pw-77\n",
        )
    };

    // Neither the gateway nor a worker may write credentials; the admin user may.
    assert!(!put("gateway", PASSWORDS[0].1).status.success());
    let out = put("admin", PASSWORDS[4].1);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (worker_client, _) = connect(nats, "worker", PASSWORDS[1].1).await;
    let worker_js = async_nats::jetstream::new(worker_client.clone());
    let kv = worker_js.get_key_value(&bucket).await.expect("workers read the bucket");
    assert!(kv.get("rack7").await.unwrap().is_some());
    assert!(tokio::time::timeout(Duration::from_secs(2), kv.put("rack7", "forged".into()))
        .await
        .map(|r| r.is_err())
        .unwrap_or(true));
    assert!(tokio::time::timeout(Duration::from_secs(2), kv.purge("rack7")).await.map(|r| r.is_err()).unwrap_or(true));
    assert!(
        kv.get("rack7").await.unwrap().is_some_and(|v| !v.is_empty() && &v[..] != b"forged"),
        "a worker changed a credential"
    );

    // Producers and the gateway cannot read it, by any JetStream path.
    for client in [&producer_client, &gateway_client] {
        let js = async_nats::jetstream::new(client.clone());
        let short = Duration::from_secs(2);
        assert!(
            tokio::time::timeout(short, js.get_key_value(&bucket)).await.map(|r| r.is_err()).unwrap_or(true),
            "bucket info readable"
        );
        let stream = format!("KV_{bucket}");
        assert!(
            tokio::time::timeout(short, js.get_stream(&stream)).await.map(|r| r.is_err()).unwrap_or(true),
            "stream info readable"
        );
        // Direct get and message get, as raw API requests: refused (no reply or an error, never the value).
        for subject in
            [format!("$JS.API.DIRECT.GET.{stream}.$KV.{bucket}.rack7"), format!("$JS.API.STREAM.MSG.GET.{stream}")]
        {
            let req = async_nats::Request::new()
                .payload(br#"{"last_by_subj":"$KV.BMCFLEET_CREDENTIALS.rack7"}"#.to_vec().into())
                .timeout(Some(short));
            if let Ok(msg) = client.send_request(subject.clone(), req).await {
                let status = msg.status.map(|s| s.as_u16()).unwrap_or(200);
                assert!(
                    status >= 400 || String::from_utf8_lossy(&msg.payload).contains("error"),
                    "{subject} answered {status}"
                );
            }
        }
        // A consumer on the bucket's stream cannot be created either.
        let req = async_nats::Request::new()
            .payload(
                br#"{"stream_name":"KV_BMCFLEET_CREDENTIALS","config":{"ack_policy":"none","deliver_policy":"all"}}"#
                    .to_vec()
                    .into(),
            )
            .timeout(Some(short));
        if let Ok(msg) = client.send_request(format!("$JS.API.CONSUMER.CREATE.{stream}"), req).await {
            assert!(String::from_utf8_lossy(&msg.payload).contains("error"), "consumer created: {:?}", msg.payload);
        }
    }
    // Producers cannot subscribe to the bucket's subjects.
    let (prod2, prod2_errors) = connect(nats, "producer", PASSWORDS[2].1).await;
    prod2.subscribe(format!("$KV.{bucket}.>")).await.unwrap();
    wait_error(&prod2_errors, "Permissions Violation for Subscription").await;

    // And the worker uses it, under these permissions, end to end.
    // Through a machine the operator registers: a named credential is usable only that way.
    let (admin, _) = connect(nats, "admin", PASSWORDS[4].1).await;
    let b = bmcfleet_tests::producer::ref_machine_batch(
        &admin,
        &topo.subjects(),
        "10.7.2.1",
        "rack7",
        vec![Action::Power(PowerOp::On)],
    )
    .await;
    let Reply::Result(r) = producer.submit(&b, true).await else { panic!("submit") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
}

/// A machine of `tenant` at `address` (sim), written by the operator.
async fn put_machine(
    admin: &async_nats::Client,
    topo: &Topology,
    name: &str,
    address: &str,
    tenant: &str,
    credential: &str,
) {
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let js = async_nats::jetstream::new(admin.clone());
    let kv = bucket(&js, machines_config(&topo.subjects(), 1), Mode::UseExisting).await.unwrap();
    let machine =
        Machine { tenant: tenant.into(), ..Machine::new(name, address.parse().unwrap(), Protocol::Sim, credential) };
    bmcfleet_common::registry::put(&kv, &machine).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_see_only_their_own_machines_batches_and_events() {
    let stack = shipped(SimConfig::default()).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (admin, _) = connect(nats, "admin", PASSWORDS[4].1).await;
    let (a, _) = stack.producer("producer-a", PASSWORDS[5].1).await;
    let (b, b_errors) = stack.producer("producer-b", PASSWORDS[6].1).await;
    let (a_client, b_client) = (a.client.clone(), b.client.clone());
    stack.wait_partitions_owned().await;
    let put = bmcctl_as(
        nats,
        "admin",
        PASSWORDS[4].1,
        &[
            "cred",
            "put",
            "rack-a",
            "--username",
            "admin",
            "--password-stdin",
            "--workers-public-key",
            &topo.sealing.public,
        ],
        "pw-a\n",
    );
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    put_machine(&admin, topo, "a-node1", "10.40.0.1", "tenant-a", "rack-a").await;

    // B listens to everything it may: its own events and every inbox of its account.
    let mut b_events = b_client.subscribe("bmc.events.tenant-b.>").await.unwrap();
    let mut b_inboxes = b_client.subscribe("_INBOX.>").await.unwrap();
    let mut a_events = a_client.subscribe("bmc.events.tenant-a.>").await.unwrap();
    let mut a_machine = a_client.subscribe("bmc.events.tenant-a.machine.a-node1").await.unwrap();
    b_client.flush().await.unwrap();
    a_client.flush().await.unwrap();

    // A runs a batch on its machine and sees its events.
    let batch = |machine: &str| Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: Some(machine.into()),
        bmc: None,
        actions: vec![Action::Power(PowerOp::On)],
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(60)),
    };
    let Reply::Result(r) = a.submit(&batch("a-node1"), true).await else { panic!("tenant A's batch") };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    let id = r.id;
    let first = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut a_events))
        .await
        .expect("A sees its events")
        .unwrap();
    assert!(first.subject.as_str().ends_with(&id.to_string()), "{}", first.subject);
    let Reply::Status(s) = a.status(id).await else { panic!("A reads its batch") };
    assert_eq!(s.tenant, "tenant-a");
    // The machine's observed state (issue 19) reaches its tenant through the same export.
    let state = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut a_machine))
        .await
        .expect("A sees its machine's state")
        .unwrap();
    let e: bmcfleet_schema::state::MachineEvent = Encoding::MessagePack.decode(&state.payload).unwrap();
    assert_eq!(
        (e.machine.as_str(), e.state.tenant.as_str(), e.state.power),
        ("a-node1", "tenant-a", Some(PowerState::On))
    );

    // B: another tenant's batch and machine answer exactly like missing ones.
    let unknown = ulid::Ulid::new();
    for (mine, theirs) in [(b.status(unknown).await, b.status(id).await), (b.cancel(unknown).await, b.cancel(id).await)]
    {
        let (mine, theirs) = (refusal(mine), refusal(theirs));
        assert_eq!(theirs.code, ErrorCode::NotFound, "{theirs:?}");
        assert_eq!(
            theirs.message.replace(&id.to_string(), "ID"),
            mine.message.replace(&unknown.to_string(), "ID"),
            "the answers differ"
        );
    }
    let theirs = refusal(b.submit(&batch("a-node1"), false).await);
    let missing = refusal(b.submit(&batch("nobody"), false).await);
    assert_eq!(theirs.code, ErrorCode::MachineNotFound);
    assert_eq!(theirs.message.replace("a-node1", "X"), missing.message.replace("nobody", "X"));
    // Reusing A's batch id gets nothing of A's batch.
    let mut replay = batch("nobody");
    replay.id = Some(id);
    assert_eq!(refusal(b.submit(&replay, true).await).code, ErrorCode::MachineNotFound);
    // A forged request-info header names tenant A: the server replaces it on the import.
    let mut h = async_nats::HeaderMap::new();
    h.insert(bmcfleet_schema::subject::REQUEST_INFO_HEADER, r#"{"acc":"tenant-a"}"#);
    let body = Encoding::MessagePack.encode(&IdRequest { id }).unwrap();
    let (_, forged) = b.raw("status", h, body, Duration::from_secs(10)).await;
    assert_eq!(refusal(forged).code, ErrorCode::NotFound, "a forged header was believed");
    // Subscribing to A's events is refused by the server.
    b_client.subscribe("bmc.events.tenant-a.>").await.unwrap();
    b_client.flush().await.unwrap();
    wait_error(&b_errors, "Permissions Violation for Subscription").await;

    // Nothing of A's batch reached any of B's subscriptions (B's own replies did).
    b_client.flush().await.unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), futures::StreamExt::next(&mut b_events)).await.is_err(),
        "B received an event"
    );
    while let Ok(Some(m)) =
        tokio::time::timeout(Duration::from_millis(300), futures::StreamExt::next(&mut b_inboxes)).await
    {
        let text = String::from_utf8_lossy(&m.payload);
        assert!(
            !text.contains("power_on") && !text.contains("a-node1\"") && !text.contains("Succeeded"),
            "B's inbox saw {text}"
        );
    }
    // Operators see every tenant's batch, and the audit log says who admitted it.
    let op = Producer::new(admin.clone());
    assert!(matches!(op.status(id).await, Reply::Status(_)));
    let audit = bmcfleet_tests::eventually(Duration::from_secs(10), "the audit record", || {
        let out = bmcctl_as(nats, "admin", PASSWORDS[4].1, &["--json", "audit"], "");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        async move { text.contains(&id.to_string()).then_some(text) }
    })
    .await;
    let line = audit.lines().find(|l| l.contains(&id.to_string())).unwrap();
    assert!(line.contains(r#""actor":"tenant:tenant-a""#) && line.contains(r#""tenant":"tenant-a""#), "{line}");
}

/// The shipped accounts with a gateway and no worker yet, tenant B's
/// producer, and a connection as the gateway's user (to queue jobs as a
/// gateway would, in states a gateway does not leave them in).
struct GatewayNoWorker {
    topo: Topology,
    nats: NatsServer,
    sim: SimServer,
    gateway: bmcfleet_tests::Process,
    b: Producer,
    gw: async_nats::Client,
}

impl GatewayNoWorker {
    async fn start() -> GatewayNoWorker {
        let topo = Topology::default();
        let nats = bmcfleet_tests::shipped::nats();
        let sim = SimServer::start(SimConfig::default()).await.expect("simulator");
        let gateway = topo.gateway(&nats, &bmcfleet_tests::shipped::gateway_user());
        let b = Producer::new(connect(&nats, "producer-b", PASSWORDS[6].1).await.0);
        wait_gateway(&b).await;
        let gw = connect(&nats, "gateway", PASSWORDS[0].1).await.0;
        GatewayNoWorker { topo, nats, sim, gateway, b, gw }
    }
}

/// A batch id that JetStream already holds for another tenant (its job is
/// queued, its status record not written yet: the instant between the
/// other gateway's publish and its record, or a record whose write failed)
/// gives a second tenant nothing: no status record of its own for that id,
/// so never the other batch's status or results.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_id_queued_for_another_tenant_gives_nothing() {
    let GatewayNoWorker { topo, nats, sim, gateway: _gateway, b, gw } = GatewayNoWorker::start().await;
    // Tenant A's job, as A's gateway queued it a moment ago (no worker yet, no record yet).
    let job = job_of(sim_batch("10.7.5.1", vec![Action::Power(PowerOp::On)]), "tenant-a");
    let id = job.id;
    queue_job(&gw, &topo.subjects(), &job).await;
    let js = async_nats::jetstream::new(gw.clone());

    // B reuses the id for a batch of its own. Whose the stored job is, only
    // its record will say: B is told to retry, not that its batch is queued.
    let mut replay = sim_batch("10.7.5.2", vec![Action::Power(PowerOp::Status)]);
    replay.id = Some(id);
    let err = refusal(b.submit(&replay, false).await);
    assert_eq!(err.code, ErrorCode::Unavailable, "B was told its batch is queued under A's id: {err:?}");
    assert!(err.message.contains("retry") && !err.message.contains("tenant-a"), "{err:?}");
    assert_eq!(refusal(b.status(id).await).code, ErrorCode::NotFound, "B owns a status record for A's batch");
    // A retrying in the same window is told the same, and nothing new is stored.
    let (a, _) = connect(&nats, "producer-a", PASSWORDS[5].1).await;
    let a = Producer::new(a);
    let mut a_again = sim_batch("10.7.5.1", vec![Action::Power(PowerOp::On)]);
    a_again.id = Some(id);
    assert_eq!(refusal(a.submit(&a_again, false).await).code, ErrorCode::Unavailable);

    // A's batch runs: B still sees nothing of it, A's record is A's.
    let _worker = topo.worker(&nats, "w0", sim.addr(), &bmcfleet_tests::shipped::worker_user());
    let batches = js.get_key_value(topo.subjects().batches_bucket()).await.unwrap();
    let record = bmcfleet_tests::eventually(Duration::from_secs(30), "A's batch finished", || {
        let batches = batches.clone();
        async move {
            let v = bmcfleet_common::status::load(&batches, &id).await.ok()??;
            v.status.state.is_final().then_some(v.status)
        }
    })
    .await;
    assert_eq!(record.tenant, "tenant-a", "{record:?}");
    assert_eq!(record.actions, ["power_on"], "{record:?}");
    assert_eq!(refusal(b.status(id).await).code, ErrorCode::NotFound);
    // With the record written, B's retry is refused as another's id, and A's is a duplicate.
    assert_eq!(refusal(b.submit(&replay, false).await).code, ErrorCode::InvalidField);
    assert!(matches!(a.submit(&a_again, false).await, Reply::Accepted(Accepted { duplicate: true, .. })));
}

/// A worker never runs a job into another tenant's status record. Should
/// a batch id come to be both tenant A's queued job and tenant B's status
/// record (A's record write at admission was lost, its job waited past the
/// dedupe window, and B then submitted A's id: the gateway found no record
/// and JetStream no duplicate), the worker used to claim B's record for A's
/// job, run A's actions and store A's results in it, where B reads them.
/// It now leaves both alone: nothing is sent, and B's record is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_never_runs_into_another_tenants_status_record() {
    let GatewayNoWorker { topo, nats, sim, gateway: _gateway, b, gw } = GatewayNoWorker::start().await;
    let js = async_nats::jetstream::new(gw.clone());
    // Tenant A's job, queued, whose own record was never written.
    let job = job_of(sim_batch("10.7.7.1", vec![Action::Power(PowerOp::On)]), "tenant-a");
    let id = job.id;
    queue_job(&gw, &topo.subjects(), &job).await;
    // Tenant B's record under the same id, as its admission wrote it.
    let b_job =
        job_of(Batch { id: Some(id), ..sim_batch("10.7.7.2", vec![Action::Power(PowerOp::Status)]) }, "tenant-b");
    let batches = js.get_key_value(topo.subjects().batches_bucket()).await.unwrap();
    bmcfleet_common::status::create(&batches, &BatchStatus::queued(&b_job, 99, 2)).await.unwrap();

    // A worker takes A's job.
    let _worker = topo.worker(&nats, "w0", sim.addr(), &bmcfleet_tests::shipped::worker_user());
    let jobs = topo.subjects().jobs_stream();
    let before = stream_last_sequence(&gw, &jobs).await;
    bmcfleet_tests::eventually(Duration::from_secs(30), "A's job taken off the queue", || {
        let gw = gw.clone();
        let jobs = jobs.clone();
        async move { (stream_messages(&gw, &jobs).await == 0).then_some(()) }
    })
    .await;
    assert_eq!(stream_last_sequence(&gw, &jobs).await, before);
    // B's record is B's as written (B reads nothing of A's batch), and nothing of A's batch ran.
    let Reply::Status(s) = b.status(id).await else { panic!("B's record") };
    assert_eq!(
        (s.tenant.as_str(), s.state, s.actions.as_slice(), s.results.len()),
        ("tenant-b", BatchState::Queued, &["power_status".to_owned()][..], 0),
        "{s:?}"
    );
    assert!(sim.log().iter().all(|e| e.action != "power_on"), "A's action was sent: {:?}", sim.log());
}

/// Issue 34: the audit log names who asked as nats-server authenticated
/// them (account and user, from the `Nats-Request-Info` the shared service
/// import adds), never a name the client claims. Tenant B's producer claims
/// to be the operator `admin` (`Bmcfleet-Operator`) on a submit, a cancel,
/// a rollout and its pause: every record names `producer-b@tenant-b`, and
/// the claim is kept only as `claimed_operator`, marked unverified in
/// `bmcctl audit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_names_the_nats_user_never_a_claimed_operator() {
    use bmcfleet_schema::audit::{AuditEvent, AuditRecord, NatsIdentity};
    use bmcfleet_schema::subject::OPERATOR_CLAIM_HEADER;
    let GatewayNoWorker { topo, nats, sim: _sim, gateway: _gateway, b, gw: _gw } = GatewayNoWorker::start().await;
    let claiming = || {
        let mut h = async_nats::HeaderMap::new();
        h.insert(OPERATOR_CLAIM_HEADER, "admin");
        h
    };
    // No worker: the batch stays queued, and the cancel applies at once.
    let batch = sim_batch("10.7.9.1", vec![Action::Power(PowerOp::On)]);
    let body = Encoding::MessagePack.encode(&batch).unwrap();
    let (_, reply) = b.raw("submit", claiming(), body, Duration::from_secs(10)).await;
    let Reply::Accepted(accepted) = reply else { panic!("B's batch: {reply:?}") };
    let id = accepted.id;
    let body = Encoding::MessagePack.encode(&IdRequest { id }).unwrap();
    let (_, reply) = b.raw("cancel", claiming(), body, Duration::from_secs(10)).await;
    assert!(matches!(reply, Reply::Cancelled { state: BatchState::Cancelled, .. }), "{reply:?}");
    // A rollout of B's machine, paused: audited the same way.
    let (admin, _) = connect(&nats, "admin", PASSWORDS[4].1).await;
    put_machine(&admin, &topo, "b-node9", "10.7.9.9", "tenant-b", "rack-b").await;
    let claiming_json = || {
        let mut h = claiming();
        h.insert(bmcfleet_schema::subject::CONTENT_TYPE, "application/json");
        h
    };
    let body = br#"{"machines": ["b-node9"], "actions": [{"power": "status"}], "max_parallel": 1}"#.to_vec();
    let (_, reply) = b.raw("rollout.submit", claiming_json(), body, Duration::from_secs(30)).await;
    let Reply::Rollout(view) = reply else { panic!("B's rollout: {reply:?}") };
    let rid = view.rollout.id;
    let body = serde_json::to_vec(&serde_json::json!({ "id": rid })).unwrap();
    let (_, reply) = b.raw("rollout.pause", claiming_json(), body, Duration::from_secs(10)).await;
    assert!(matches!(&reply, Reply::Rollout(v) if v.rollout.id == rid), "{reply:?}");

    let records = bmcfleet_tests::eventually(Duration::from_secs(10), "both audit records", || {
        let out = bmcctl_as(&nats, "admin", PASSWORDS[4].1, &["--json", "audit"], "");
        let records: Vec<AuditRecord> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<AuditRecord>(l).ok())
            .filter(|r| match &r.what {
                AuditEvent::BatchAdmitted { batch, .. } | AuditEvent::CancelRequested { batch, .. } => *batch == id,
                AuditEvent::RolloutAdmitted { rollout, .. } | AuditEvent::RolloutChanged { rollout, .. } => {
                    *rollout == rid
                }
                _ => false,
            })
            .collect();
        async move { (records.len() == 4).then_some(records) }
    })
    .await;
    let producer_b = NatsIdentity { account: "tenant-b".into(), user: Some("producer-b".into()) };
    for r in &records {
        assert_eq!(r.actor, "tenant:tenant-b", "{r:?}");
        assert_eq!(r.nats.as_ref(), Some(&producer_b), "the record names someone else than who asked: {r:?}");
        assert_eq!(r.claimed_operator.as_deref(), Some("admin"), "{r:?}");
    }
    let kinds: Vec<&str> = records
        .iter()
        .map(|r| match &r.what {
            AuditEvent::BatchAdmitted { .. } => "batch_admitted",
            AuditEvent::CancelRequested { state: BatchState::Cancelled, tenant, .. } if tenant == "tenant-b" => {
                "cancel_requested"
            }
            AuditEvent::RolloutAdmitted { tenant, .. } if tenant == "tenant-b" => "rollout_admitted",
            AuditEvent::RolloutChanged { change, tenant, .. } if tenant == "tenant-b" => change.as_str(),
            _ => "?",
        })
        .collect();
    assert_eq!(kinds, ["batch_admitted", "cancel_requested", "rollout_admitted", "pause"], "{records:?}");
    // The operator's view says whose word the claim is.
    let out = bmcctl_as(&nats, "admin", PASSWORDS[4].1, &["audit"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> =
        text.lines().filter(|l| l.contains(&id.to_string()) || l.contains(&rid.to_string())).collect();
    assert_eq!(lines.len(), 4, "{text}");
    for line in lines {
        assert!(line.contains("tenant:tenant-b (nats producer-b@tenant-b) (claims admin, unverified)"), "{line}");
    }
}

/// A job runs only into its own admission's status record. A batch id
/// resubmitted past the dedupe window is stored again before the gateway
/// finds the first admission's record (and answers `duplicate`); the copy
/// is taken off the queue and never runs, whatever it asks for, and the
/// record stays the first admission's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_admission_of_a_batch_id_never_runs() {
    let GatewayNoWorker { topo, nats, sim, gateway: _gateway, b: _b, gw } = GatewayNoWorker::start().await;
    let js = async_nats::jetstream::new(gw.clone());
    // The first admission's record (queued, not run yet), for one BMC.
    let first = job_of(sim_batch("10.7.8.1", vec![Action::Power(PowerOp::Status)]), "tenant-a");
    let id = first.id;
    let batches = js.get_key_value(topo.subjects().batches_bucket()).await.unwrap();
    bmcfleet_common::status::create(&batches, &BatchStatus::queued(&first, 99, 2)).await.unwrap();
    // The second admission's copy: same tenant and id, another BMC and action, admitted later.
    let mut copy =
        job_of(Batch { id: Some(id), ..sim_batch("10.7.8.2", vec![Action::Power(PowerOp::On)]) }, "tenant-a");
    copy.admitted_at_ms = first.admitted_at_ms + 60_000;
    queue_job(&gw, &topo.subjects(), &copy).await;

    let _worker = topo.worker(&nats, "w0", sim.addr(), &bmcfleet_tests::shipped::worker_user());
    let jobs = topo.subjects().jobs_stream();
    bmcfleet_tests::eventually(Duration::from_secs(30), "the copy taken off the queue", || {
        let gw = gw.clone();
        let jobs = jobs.clone();
        async move { (stream_messages(&gw, &jobs).await == 0).then_some(()) }
    })
    .await;
    let v = bmcfleet_common::status::load(&batches, &id).await.unwrap().expect("the first admission's record");
    assert_eq!(
        (v.status.state, v.status.admitted_at_ms, v.status.actions.as_slice(), v.status.worker.as_deref()),
        (BatchState::Queued, first.admitted_at_ms, &["power_status".to_owned()][..], None),
        "{:?}",
        v.status
    );
    assert!(sim.log().iter().all(|e| e.action != "power_on"), "the copy ran: {:?}", sim.log());
}

/// A tenant may manage its machine's BMC users and network settings, but
/// not the account the worker logs in with (the operator's credential), and
/// not by giving its BMC another registered machine's address (the worker
/// would then send that machine's credentials to it): refused at admission
/// and by the worker, nothing sent; the raw spellings are denied by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_take_the_login_account_or_another_machine_s_address() {
    let stack = shipped(SimConfig::default()).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (admin, _) = connect(nats, "admin", PASSWORDS[4].1).await;
    let (a, _) = stack.producer("producer-a", PASSWORDS[5].1).await;
    let (b, _) = stack.producer("producer-b", PASSWORDS[6].1).await;
    stack.wait_partitions_owned().await;
    for (cred, pw) in [("rack-a", "pw-a\n"), ("rack-b", "pw-b\n")] {
        let put = bmcctl_as(
            nats,
            "admin",
            PASSWORDS[4].1,
            &[
                "cred",
                "put",
                cred,
                "--username",
                "Admin",
                "--password-stdin",
                "--workers-public-key",
                &topo.sealing.public,
            ],
            pw,
        );
        assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    }
    put_machine(&admin, topo, "a-node2", "10.40.1.1", "tenant-a", "rack-a").await;
    put_machine(&admin, topo, "b-node2", "10.40.1.2", "tenant-b", "rack-b").await;
    let batch = |machine: &str, actions: Vec<Action>| Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: Some(machine.into()),
        bmc: None,
        actions,
        on_error: OnError::Continue,
        deadline: Some(Duration::from_secs(60)),
    };
    // B's machine runs a batch: gateway and worker know it.
    let Reply::Result(r) = b.submit(&batch("b-node2", vec![Action::Power(PowerOp::Status)]), true).await else {
        panic!("B's batch")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");

    // The login account ("Admin", any case) is off limits to A; another user is not.
    let disable = Action::User(UserOp::Update(UserUpdate {
        name: "admin".into(),
        password: None,
        role: None,
        enabled: Some(false),
    }));
    let delete = Action::User(UserOp::Delete { name: " ADMIN".into() });
    let create = |name: &str| {
        Action::User(UserOp::Create(UserSpec {
            name: name.into(),
            password: Secret::new("x-Pw-1234"),
            role: UserRole::Admin,
            enabled: true,
        }))
    };
    let Reply::Result(r) =
        a.submit(&batch("a-node2", vec![disable, delete, create("admin"), create("ops")]), true).await
    else {
        panic!("A's batch")
    };
    for (i, result) in r.results.iter().enumerate().take(3) {
        let e = result.error.as_ref().unwrap_or_else(|| panic!("action {i} on the login account ran: {r:?}"));
        assert_eq!(e.code, ErrorCode::TargetForbidden, "action {i}: {e:?}");
        assert!(e.message.contains("logs in"), "{e:?}");
    }
    assert!(r.results[3].error.is_none(), "another user: {r:?}");
    let user_calls: Vec<_> =
        stack.sim.log().into_iter().filter(|l| l.bmc == "v4-10-40-1-1" && l.action.starts_with("user")).collect();
    assert_eq!(user_calls.len(), 1, "only the other user's create reached the BMC: {user_calls:?}");
    // An ad hoc BMC's login is the producer's own credential: its to change
    // (a factory password, say).
    let own = Action::User(UserOp::Update(UserUpdate {
        name: "admin".into(),
        password: Some(Secret::new("new-Pw-5678")),
        role: None,
        enabled: None,
    }));
    let Reply::Result(r) = a.submit(&sim_batch("10.40.1.50", vec![own]), true).await else {
        panic!("A's ad hoc batch")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");

    // B's machine's address for A's BMC: refused at admission, B's machine not named.
    let readdress = |ip: [u8; 4]| {
        Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
            address: ip.into(),
            netmask: [255, 255, 255, 0].into(),
            gateway: None,
        }))
    };
    let e = refusal(a.submit(&batch("a-node2", vec![readdress([10, 40, 1, 2])]), true).await);
    assert_eq!(e.code, ErrorCode::TargetForbidden, "{e:?}");
    assert!(e.message.contains("actions[0]") && !e.message.contains("b-node2"), "{e:?}");
    // Its own address, or a free one, is A's to set.
    let Reply::Result(r) =
        a.submit(&batch("a-node2", vec![readdress([10, 40, 1, 1]), readdress([10, 40, 1, 9])]), true).await
    else {
        panic!("A's batch")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    // The raw spellings are denied by the default policy.
    let raw = |netfn: u8, cmd: u8| Action::Raw(RawRequest::Ipmi(RawIpmi { netfn, cmd, data: vec![2, 0] }));
    for (netfn, cmd) in [(0x06, 0x43), (0x06, 0x45), (0x06, 0x47), (0x0c, 0x01)] {
        let e = refusal(a.submit(&batch("a-node2", vec![raw(netfn, cmd)]), true).await);
        assert_eq!(e.code, ErrorCode::RawNotAllowed, "netfn {netfn:#04x} cmd {cmd:#04x}: {e:?}");
    }

    // The worker checks the address too: a job queued before B's machine
    // held that address (published here as the gateway would have).
    let (gw, _) = connect(nats, "gateway", PASSWORDS[0].1).await;
    let target = Machine {
        tenant: "tenant-a".into(),
        ..Machine::new("a-node2", "10.40.1.1".parse().unwrap(), Protocol::Sim, "rack-a")
    }
    .target();
    let job = job_of(Batch { bmc: Some(target), ..batch("a-node2", vec![readdress([10, 40, 1, 2])]) }, "tenant-a");
    let id = job.id;
    queue_job(&gw, &topo.subjects(), &job).await;
    let results =
        bmcfleet_tests::producer::wait_final_statuses(&gw, &topo.subjects(), &[id], Duration::from_secs(30)).await;
    let e = results[&id].results[0].error.as_ref().expect("refused by the worker");
    assert_eq!(e.code, ErrorCode::TargetForbidden, "{e:?}");
    assert!(!e.message.contains("b-node2"), "{e:?}");
    let set_calls =
        stack.sim.log().into_iter().filter(|l| l.bmc == "v4-10-40-1-1" && l.action == "network_source_set").count();
    assert_eq!(set_calls, 2, "only A's two allowed address changes reached the BMC");
}

/// Issue 32 item 4: a raw request cannot re-address a BMC around the
/// `network_source` guard. A vendor OEM write that changes the BMC's own
/// address (Dell iDRAC's attribute registry with an IPv4 attribute, in
/// several spellings), its host name, or its accounts is refused
/// `raw_not_allowed` at admission: nothing is stored and nothing reaches
/// the BMC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_oem_write_of_a_bmcs_address_is_refused_with_nothing_sent() {
    let stack = shipped(SimConfig::default()).await;
    let (a, _) = stack.producer("producer-a", PASSWORDS[5].1).await;
    let (gw, _) = connect(&stack.nats, "gateway", PASSWORDS[0].1).await;
    stack.wait_partitions_owned().await;
    let jobs = stack.topo.subjects().jobs_stream();
    let raw = |method: HttpMethod, path: &str, body: serde_json::Value| {
        Action::Raw(RawRequest::Redfish(RawRedfish { method, path: path.into(), body: Some(body) }))
    };
    let before = stream_messages(&gw, &jobs).await;
    let address =
        serde_json::json!({"Attributes": {"IPv4.1.Address": "10.40.1.2", "IPv4Static.1.Address": "10.40.1.2"}});
    for action in [
        raw(HttpMethod::Patch, "/redfish/v1/Managers/iDRAC.Embedded.1/Attributes", address.clone()),
        raw(HttpMethod::Patch, "/redfish/v1/managers/idrac.embedded.1/%41ttributes/", address.clone()),
        raw(
            HttpMethod::Patch,
            "/redfish/v1/Managers/iDRAC.Embedded.1/Oem/Dell/DellAttributes/iDRAC.Embedded.1",
            address,
        ),
        raw(
            HttpMethod::Patch,
            "//redfish/v1/Managers/iDRAC.Embedded.1/Attributes?$select=NIC.1.DNSRacName",
            serde_json::json!({"Attributes": {"NIC.1.DNSRacName": "b-node2"}}),
        ),
        raw(
            HttpMethod::Post,
            "/redfish/v1/Managers/iDRAC.Embedded.1/Actions/Oem/EID_674_Manager.ImportSystemConfiguration",
            serde_json::json!({"ImportBuffer": "<SystemConfiguration/>"}),
        ),
        raw(HttpMethod::Patch, "/redfish/v1/Managers/1/NetworkProtocol", serde_json::json!({"HostName": "b-node2"})),
        raw(
            HttpMethod::Post,
            "/redfish/v1/Managers/1/Actions/Oem/Hpe/HpeiLO.ResetToFactoryDefaults",
            serde_json::json!({"ResetType": "Default"}),
        ),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 0x24, data: vec![2] })),
    ] {
        let e = refusal(a.submit(&sim_batch("10.40.1.60", vec![action.clone()]), true).await);
        assert_eq!(e.code, ErrorCode::RawNotAllowed, "{action:?}: {e:?}");
    }
    assert_eq!(stream_messages(&gw, &jobs).await, before, "a refused batch was stored");
    // The pipeline runs: the next batch reaches the BMC, and nothing before it did.
    let Reply::Result(r) = a.submit(&sim_batch("10.40.1.60", vec![Action::Power(PowerOp::Status)]), true).await else {
        panic!("A's batch")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");
    let calls: Vec<_> = stack.sim.log().into_iter().filter(|l| l.bmc == "v4-10-40-1-60").collect();
    assert!(calls.iter().all(|l| !l.action.starts_with("raw")), "a refused raw request reached the BMC: {calls:?}");
}

/// What a submit whose id JetStream already holds waits on: the status
/// record, read when it is written during the wait, and nothing once the
/// wait is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_record_written_during_the_wait_is_read() {
    use bmcfleet_common::status;
    let nats = NatsServer::start();
    let js = async_nats::jetstream::new(nats.client().await);
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config { bucket: "WAIT".into(), ..Default::default() })
        .await
        .unwrap();
    let id = ulid::Ulid::new();
    let mut batch = sim_batch("10.7.6.1", vec![Action::Power(PowerOp::On)]);
    batch.id = Some(id);
    let target = batch.bmc.take().unwrap();
    let job = Job {
        batch,
        id,
        target,
        admitted_at_ms: 1,
        deadline_at_ms: u64::MAX / 2,
        tenant: "tenant-a".into(),
        sealed_params: vec![],
        by_operator: false,
        record_at_claim: false,
    };

    // Never written: nothing, after the wait.
    assert!(status::wait(&kv, &id, Duration::from_millis(300)).await.unwrap().is_none());
    // Written while a wait runs: its first poll sends the first read on
    // this connection, so the write, sent after it, is found by a later read.
    let waiting = status::wait(&kv, &id, Duration::from_secs(120));
    tokio::pin!(waiting);
    assert!(futures::poll!(&mut waiting).is_pending());
    let revision = status::create(&kv, &BatchStatus::queued(&job, 7, 1)).await.unwrap();
    let got = waiting.await.unwrap().expect("the record written during the wait");
    assert_eq!((got.status.tenant.as_str(), got.status.stream_sequence, got.revision), ("tenant-a", Some(7), revision));
}

/// One tenant cannot starve another of the gateway: with as many
/// connections as it likes, a tenant holds at most its share (by default
/// half) of the waiting submits; the rest is refused at once, and another
/// tenant's waiting submit is still admitted. (No worker runs, so every
/// admitted waiting submit stays open.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_flooding_the_gateway_leaves_the_other_tenants_their_share() {
    use bmcfleet_tests::metrics::{metrics_port, scrape, value};
    let topo = Topology::default();
    let nats = bmcfleet_tests::shipped::nats();
    let gateway = topo.gateway(
        &nats,
        &[
            &bmcfleet_tests::shipped::gateway_user()[..],
            &["--max-waiting-submits", "8", "--metrics-addr", "127.0.0.1:0"],
        ]
        .concat(),
    );
    // Every partition leased by a worker user that consumes nothing:
    // admitted waiting submits stay open.
    lease_every_partition_to_nobody(&connect(&nats, "worker", PASSWORDS[1].1).await.0, &topo.subjects()).await;
    let producer = |user: &'static str, password: &'static str| {
        let nats = &nats;
        async move {
            let p = Producer::new(connect(nats, user, password).await.0);
            wait_gateway(&p).await;
            p
        }
    };
    let a = [
        producer("producer-a", PASSWORDS[5].1).await,
        producer("producer-a", PASSWORDS[5].1).await,
        producer("producer-a", PASSWORDS[5].1).await,
    ];
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..10 {
        let a = a[i % 3].clone();
        waiters.spawn(async move {
            a.submit(&sim_batch(&format!("10.7.6.{}", i + 1), vec![Action::Power(PowerOp::On)]), true).await
        });
    }
    // Six are refused at once: A's share is 4 of the 8, whatever its connections.
    for _ in 0..6 {
        let r = tokio::time::timeout(Duration::from_secs(20), waiters.join_next())
            .await
            .expect("a refusal within 20 s")
            .unwrap()
            .unwrap();
        let e = refusal(r);
        assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
        assert!(e.message.contains("this tenant already has 4 waiting submits"), "{}", e.message);
    }
    // B's waiting submit is admitted (it waits; it is not refused).
    let b = producer("producer-b", PASSWORDS[6].1).await;
    let b_wait =
        tokio::spawn(async move { b.submit(&sim_batch("10.7.6.99", vec![Action::Power(PowerOp::On)]), true).await });
    let port = metrics_port(&gateway).await;
    bmcfleet_tests::eventually(Duration::from_secs(20), "B's waiting submit admitted", || async {
        (value(&scrape(port), "bmcfleet_batches_admitted_total", &[]) == 5.0).then_some(())
    })
    .await;
    assert!(!b_wait.is_finished(), "B's submit waits for its batch: {:?}", b_wait.await);
    waiters.abort_all();
}

/// The next of `waiters` to finish, within 20 s: an `unavailable` refusal's message.
async fn refused_now(waiters: &mut tokio::task::JoinSet<Reply>) -> String {
    let r =
        tokio::time::timeout(Duration::from_secs(20), waiters.join_next()).await.expect("a refusal").unwrap().unwrap();
    let e = refusal(r);
    assert_eq!(e.code, ErrorCode::Unavailable, "{e:?}");
    e.message
}

/// Issue 32 item 2: the waiting-submit budget is keyed by who asks, never by
/// reply subject. Through a service import every tenant's requests carry
/// one `_R_.<prefix>.*` reply prefix, so keyed by it tenant A holding its
/// connection's share refused every other tenant's waiting submit. Now A
/// holds its whole share (two connections at the per-connection limit) and
/// B's waiting submits are still admitted. (No worker: admitted waiting
/// submits stay open.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_holding_its_waiting_budget_leaves_other_tenants_theirs() {
    use bmcfleet_tests::metrics::{metrics_port, scrape, value};
    let topo = Topology::default();
    let nats = bmcfleet_tests::shipped::nats();
    let gateway = topo.gateway(
        &nats,
        &[
            &bmcfleet_tests::shipped::gateway_user()[..],
            &["--max-waiting-submits", "8", "--max-waiting-per-client", "2", "--metrics-addr", "127.0.0.1:0"],
        ]
        .concat(),
    );
    // Every partition leased by a worker user that consumes nothing:
    // admitted waiting submits stay open.
    lease_every_partition_to_nobody(&connect(&nats, "worker", PASSWORDS[1].1).await.0, &topo.subjects()).await;
    let port = metrics_port(&gateway).await;
    let producer = |user: &'static str, password: &'static str| {
        let nats = &nats;
        async move {
            let p = Producer::new(connect(nats, user, password).await.0);
            wait_gateway(&p).await;
            p
        }
    };
    let admitted = |n: f64| async move {
        bmcfleet_tests::eventually(Duration::from_secs(20), &format!("{n} waiting submits admitted"), || async {
            (value(&scrape(port), "bmcfleet_batches_admitted_total", &[]) == n).then_some(())
        })
        .await
    };
    let mut waiters = tokio::task::JoinSet::new();
    let mut address = 0;
    let mut flood = |p: &Producer, n: usize, waiters: &mut tokio::task::JoinSet<Reply>| {
        for _ in 0..n {
            address += 1;
            let p = p.clone();
            let batch = sim_batch(&format!("10.7.8.{address}"), vec![Action::Power(PowerOp::On)]);
            waiters.spawn(async move { p.submit(&batch, true).await });
        }
    };
    // A's first connection: 2 admitted, the third refused for the connection.
    let a1 = producer("producer-a", PASSWORDS[5].1).await;
    flood(&a1, 3, &mut waiters);
    assert!(refused_now(&mut waiters).await.contains("this connection already has 2 waiting submits"));
    admitted(2.0).await;
    // A's second connection: A now holds its whole share (4 of 8).
    let a2 = producer("producer-a", PASSWORDS[5].1).await;
    flood(&a2, 2, &mut waiters);
    admitted(4.0).await;
    let a3 = producer("producer-a", PASSWORDS[5].1).await;
    flood(&a3, 1, &mut waiters);
    assert!(refused_now(&mut waiters).await.contains("this tenant already has 4 waiting submits"));
    // B's waiting submits are admitted (they wait; they are not refused).
    let b = producer("producer-b", PASSWORDS[6].1).await;
    flood(&b, 2, &mut waiters);
    admitted(6.0).await;
    assert!(waiters.try_join_next().is_none(), "every admitted submit still waits");
    waiters.abort_all();
}

/// A refusal whose message quotes what a producer sent (an unknown field,
/// a duration, an address) is answered like any other even when that
/// holds a line break: the gateway never panics building the
/// `Nats-Service-Error` header (a header value cannot hold one), and it goes
/// on answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_quoting_a_line_break_is_still_answered() {
    let topo = Topology::default();
    let nats = NatsServer::start();
    let _gateway = topo.gateway(&nats, &[]);
    let producer = Producer::new(nats.client().await);
    wait_gateway(&producer).await;
    let json = |body: &str| {
        let mut h = async_nats::HeaderMap::new();
        h.insert(bmcfleet_schema::subject::CONTENT_TYPE, "application/json");
        (h, body.as_bytes().to_vec())
    };
    for (body, code) in [
        (r#"{"machine":"m1","actions":["inventory"],"x\nInjected: 1":1}"#, ErrorCode::Malformed),
        (r#"{"machine":"m1","actions":["inventory"],"deadline":"5m\r\nx"}"#, ErrorCode::Malformed),
        (
            r#"{"bmc":{"address":"10.0.0.1\nx","credentials":{"inline":{"username":"a","password":"p"}}},"actions":["inventory"]}"#,
            ErrorCode::InvalidAddress,
        ),
        (r#"{"machine":"m1","actions":[{"power":"on\nx"}]}"#, ErrorCode::Malformed),
    ] {
        let (h, b) = json(body);
        let req = async_nats::Request::new().headers(h).payload(b.into()).timeout(Some(Duration::from_secs(10)));
        let answer = producer
            .client
            .send_request("bmcfleet.submit", req)
            .await
            .unwrap_or_else(|e| panic!("no answer to {body:?}: {e}"));
        let reply: Reply = Encoding::Json.decode(&answer.payload).unwrap();
        let e = refusal(reply);
        assert_eq!(e.code, code, "{body:?}: {e:?}");
        let header = answer
            .headers
            .as_ref()
            .and_then(|h| h.get(async_nats::service::NATS_SERVICE_ERROR))
            .map(|v| v.as_str().to_owned())
            .unwrap_or_default();
        assert!(!header.is_empty() && !header.contains(['\r', '\n']), "{header:?}");
    }
    // Still serving.
    assert_eq!(refusal(producer.status(ulid::Ulid::new()).await).code, ErrorCode::NotFound);
}

/// The trace context a producer sends is passed on (to the job and every
/// event of its batch) only in its W3C shape and size: a `traceparent` that
/// is not one (and its `tracestate` with it), or a `tracestate` longer than
/// 512 bytes, is dropped. Before, a producer could attach up to the
/// server's 64 KiB header limit of its own in these headers (they do not
/// count against --max-message-bytes), stored with its job and again with
/// each of its batch's events; a final event pushed over that limit was
/// retried for ever, holding its lane and worker slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producers_trace_headers_are_passed_on_only_in_their_w3c_size() {
    let topo = Topology::default();
    let nats = NatsServer::start();
    let sim = SimServer::start(SimConfig::default()).await.expect("simulator");
    let _gateway = topo.gateway(&nats, &[]);
    let _worker = topo.worker(&nats, "w0", sim.addr(), &[]);
    let client = nats.client().await;
    let producer = Producer::new(client.clone());
    wait_gateway(&producer).await;
    wait_partitions_owned(&client, &topo.subjects()).await;
    let events = async_nats::jetstream::new(client.clone()).get_stream(topo.subjects().events_stream()).await.unwrap();
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let huge_state = format!("vendor={}", "x".repeat(60_000));
    let huge_parent = format!("00-{}-b7ad6b7169203331-01", "0af7651916cd43dd".repeat(3_750));
    for (i, (traceparent, tracestate, kept_parent, kept_state)) in [
        (parent, huge_state.as_str(), Some(parent), None),
        (huge_parent.as_str(), "vendor=abc", None, None),
        (parent, "vendor=abc", Some(parent), Some("vendor=abc")),
    ]
    .into_iter()
    .enumerate()
    {
        let mut h = async_nats::HeaderMap::new();
        h.insert(WAIT_HEADER, "true");
        h.insert("traceparent", traceparent);
        h.insert("tracestate", tracestate);
        let batch = sim_batch(&format!("10.7.9.{}", i + 1), vec![Action::Power(PowerOp::Status)]);
        let (_, reply) =
            producer.raw("submit", h, Encoding::MessagePack.encode(&batch).unwrap(), Duration::from_secs(60)).await;
        let Reply::Result(r) = reply else { panic!("case {i}: {reply:?}") };
        assert_eq!(r.state, BatchState::Succeeded, "case {i}: {r:?}");
        // The batch's last event, as stored.
        let last = events.get_last_raw_message_by_subject(&topo.subjects().events("default", &r.id)).await.unwrap();
        let header = |name: &str| last.headers.get(name).map(|v| v.as_str().to_owned());
        assert_eq!(header("traceparent").as_deref(), kept_parent, "case {i}");
        assert_eq!(header("tracestate").as_deref(), kept_state, "case {i}");
        assert!(
            last.headers
                .iter()
                .map(|(k, v)| k.to_string().len() + v.iter().map(|v| v.as_str().len()).sum::<usize>())
                .sum::<usize>()
                < 4096,
            "case {i}: the event's headers are large"
        );
    }
}

/// One tenant cannot starve another of a worker's batch slots: with more
/// slow batches than the worker has slots, a tenant holds at most its share
/// of them (by default half of --max-concurrent-batches), and another
/// tenant's batch runs at once instead of waiting behind them past its
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_slow_batches_leaves_the_other_tenants_worker_slots() {
    slow_batches_leave_tenant_b_worker_slots(("producer-a", PASSWORDS[5].1), "tenant-a").await;
}

/// Issue 32 item 3: the `default` account's producers are a tenant like any
/// other. Before, their batches counted as the operator's own (no share) and
/// two slow ones took both of the worker's slots: tenant B's batch waited
/// behind them past its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_account_producer_cannot_take_every_worker_slot() {
    slow_batches_leave_tenant_b_worker_slots(("producer", PASSWORDS[2].1), "default").await;
}

/// `slow`'s producer (of `tenant`) queues two slow batches on a worker with
/// two slots; tenant B's batch runs at once all the same.
async fn slow_batches_leave_tenant_b_worker_slots(slow: (&str, &str), tenant: &str) {
    use bmcfleet_tests::shipped::shipped_with;
    // `slow-*` BMCs take two minutes per action; the worker runs two batches at once.
    let sim = SimConfig { slow_latency: Duration::from_secs(120), ..SimConfig::default() };
    let stack =
        shipped_with(Topology::default(), sim, &[], &["--max-concurrent-batches", "2", "--poll-interval", "off"]).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (admin, _) = connect(nats, "admin", PASSWORDS[4].1).await;
    let (a, _) = stack.producer(slow.0, slow.1).await;
    let (b, _) = stack.producer("producer-b", PASSWORDS[6].1).await;
    stack.wait_partitions_owned().await;
    let put = bmcctl_as(
        nats,
        "admin",
        PASSWORDS[4].1,
        &[
            "cred",
            "put",
            "rack",
            "--username",
            "admin",
            "--password-stdin",
            "--workers-public-key",
            &topo.sealing.public,
        ],
        "pw\n",
    );
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    put_machine(&admin, topo, "a-slow1", "slow-a1", tenant, "rack").await;
    put_machine(&admin, topo, "a-slow2", "slow-a2", tenant, "rack").await;
    put_machine(&admin, topo, "b-node1", "10.41.0.1", "tenant-b", "rack").await;
    let batch = |machine: &str, deadline: u64| Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: Some(machine.into()),
        bmc: None,
        actions: vec![Action::Power(PowerOp::Status)],
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(deadline)),
    };
    let queued = |r: Reply| match r {
        Reply::Accepted(a) => a.id,
        other => panic!("not queued: {other:?}"),
    };
    let state = |p: &Producer, id: BatchId| {
        let p = p.clone();
        async move {
            match p.status(id).await {
                Reply::Status(s) => Some(s.state),
                _ => None,
            }
        }
    };
    // Tenant A: two slow batches, as many as the worker has slots.
    let a1 = queued(a.submit(&batch("a-slow1", 600), false).await);
    let a2 = queued(a.submit(&batch("a-slow2", 600), false).await);
    bmcfleet_tests::eventually(Duration::from_secs(30), "A's first batch running", || {
        let s = state(&a, a1);
        async move { (s.await == Some(BatchState::Running)).then_some(()) }
    })
    .await;
    // A's second batch takes the worker's last slot, or waits for A's share.
    bmcfleet_tests::eventually(Duration::from_secs(30), "A's second batch running or waiting for A's share", || {
        let s = state(&a, a2);
        let log = stack.worker.log_text();
        async move { (s.await == Some(BatchState::Running) || log.contains("this tenant's share")).then_some(()) }
    })
    .await;

    // Tenant B's batch runs now, not after A's (two minutes, past its deadline).
    let started = std::time::Instant::now();
    let r = match b.submit(&batch("b-node1", 20), true).await {
        Reply::Result(r) => r,
        other => panic!("B's batch waited behind tenant A's: {other:?}"),
    };
    assert_eq!(r.state, BatchState::Succeeded, "B's batch waited behind tenant A's: {r:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    // A holds its share only: its second batch still waits.
    assert_eq!(state(&a, a2).await, Some(BatchState::Queued));
}

/// Issue 32 item 1: a partition's window of delivered jobs is shared
/// between tenants. Tenant A fills its whole window (4 hung BMCs with 4
/// queued batches each: 16, the window, each BMC a quarter of it) and has
/// more queued behind it, all in the only partition; tenant B's batches on a
/// healthy machine of that partition still finish within 2× their latency
/// alone. With one consumer per partition A's held jobs were the whole
/// window: no other job of the partition was pulled, and B's batch waited
/// past its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_hung_bmcs_fills_only_its_own_window() {
    use bmcfleet_tests::shipped::shipped_with;
    use futures::TryStreamExt;
    let topo = Topology { partitions: 1, ..Topology::default() };
    let worker_flags = ["--max-inflight-per-partition", "16", "--poll-interval", "off"];
    let stack = shipped_with(topo, SimConfig::default(), &["--max-queued-per-bmc", "4"], &worker_flags).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (admin, _) = connect(nats, "admin", PASSWORDS[4].1).await;
    let (worker, _) = connect(nats, "worker", PASSWORDS[1].1).await;
    let (a, _) = stack.producer("producer-a", PASSWORDS[5].1).await;
    let (b, _) = stack.producer("producer-b", PASSWORDS[6].1).await;
    stack.wait_partitions_owned().await;
    let put = bmcctl_as(
        nats,
        "admin",
        PASSWORDS[4].1,
        &[
            "cred",
            "put",
            "rack",
            "--username",
            "admin",
            "--password-stdin",
            "--workers-public-key",
            &topo.sealing.public,
        ],
        "pw\n",
    );
    assert!(put.status.success(), "{}", String::from_utf8_lossy(&put.stderr));
    for i in 1..=5 {
        put_machine(&admin, topo, &format!("a-hung{i}"), &format!("hang-a{i}"), "tenant-a", "rack").await;
    }
    put_machine(&admin, topo, "b-node1", "10.42.0.1", "tenant-b", "rack").await;
    let batch = |machine: &str, deadline: u64| Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: Some(machine.into()),
        bmc: None,
        actions: vec![Action::Power(PowerOp::Status)],
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(deadline)),
    };
    let b_batch = || async {
        let started = std::time::Instant::now();
        match b.submit(&batch("b-node1", 20), true).await {
            Reply::Result(r) if r.state == BatchState::Succeeded => started.elapsed(),
            other => panic!("B's batch waited behind tenant A's hung BMCs: {other:?}"),
        }
    };
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut alone = vec![];
    for _ in 0..5 {
        alone.push(b_batch().await);
    }
    // A: 4 hung BMCs, 4 batches each (the per-BMC cap), and one more behind them.
    for i in 1..=4 {
        for _ in 0..4 {
            assert!(matches!(a.submit(&batch(&format!("a-hung{i}"), 600), false).await, Reply::Accepted(_)));
        }
    }
    assert!(matches!(a.submit(&batch("a-hung5", 600), false).await, Reply::Accepted(_)));
    // Wait until the partition holds 16 of A's jobs delivered and unacknowledged (A's
    // whole window), with A's last still pending (read as the worker user).
    let jobs = topo.subjects().jobs_stream();
    bmcfleet_tests::eventually(Duration::from_secs(60), "A's window full of hung jobs", || {
        let (worker, jobs) = (worker.clone(), jobs.clone());
        async move {
            let stream = async_nats::jetstream::new(worker).get_stream(&jobs).await.ok()?;
            let names: Vec<String> = stream.consumer_names().try_collect().await.ok()?;
            let (mut held, mut pending) = (0, 0);
            for name in names {
                let info = stream.consumer_info(&name).await.ok()?;
                held += info.num_ack_pending;
                pending += info.num_pending;
            }
            (held == 16 && pending >= 1).then_some(())
        }
    })
    .await;
    let mut loaded = vec![];
    for _ in 0..5 {
        loaded.push(b_batch().await);
    }
    let (alone, loaded) = (median(alone), median(loaded));
    // (2× B's latency alone; sub-100 ms medians are compared as 100 ms: scheduler noise.)
    assert!(
        loaded <= 2 * alone.max(Duration::from_millis(100)),
        "B's median latency {loaded:?} next to A's full window, {alone:?} alone"
    );
}

/// Issue 16 item 8: the gateway, the workers and the admin user hold only the
/// JetStream API subjects of their own streams, consumers and buckets, by
/// name. Everything else (another stream, listing the account, changing or
/// destroying a stream they merely use, reading jobs, leases, audit or
/// credentials outside their role) is refused by the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_role_holds_only_its_own_jetstream_api() {
    let stack = shipped(SimConfig::default()).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let (producer, _) = stack.producer("producer", PASSWORDS[2].1).await;
    stack.wait_partitions_owned().await;
    // Under these permissions the whole pipeline still works.
    let Reply::Result(r) = producer.submit(&sim_batch("10.7.9.1", vec![Action::Power(PowerOp::On)]), true).await else {
        panic!("submit")
    };
    assert_eq!(r.state, BatchState::Succeeded, "{r:?}");

    let s = topo.subjects();
    let (jobs, events, audit) = (s.jobs_stream(), s.events_stream(), s.audit_stream());
    let kv = |b: String| format!("KV_{b}");
    let (batches, leases, machines, creds) =
        (kv(s.batches_bucket()), kv(s.leases_bucket()), kv(s.machines_bucket()), kv(s.credentials_bucket()));
    let refused: [(&str, &str, Vec<String>); 3] = [
        (
            "gateway",
            PASSWORDS[0].1,
            vec![
                "$JS.API.STREAM.CREATE.ELSEWHERE".into(),
                "$JS.API.STREAM.NAMES".into(),
                "$JS.API.STREAM.LIST".into(),
                format!("$JS.API.STREAM.DELETE.{events}"),
                format!("$JS.API.STREAM.PURGE.{jobs}"),
                format!("$JS.API.STREAM.MSG.DELETE.{audit}"),
                format!("$JS.API.CONSUMER.CREATE.{jobs}"),
                format!("$JS.API.CONSUMER.DURABLE.CREATE.{jobs}.steal"),
                format!("$JS.API.STREAM.MSG.GET.{jobs}"),
                format!("$JS.API.STREAM.UPDATE.{machines}"),
                // The gateway reads the workers' leases (no owner: a waiting
                // submit answers at once), never writes or purges them.
                format!("$KV.{}.0", s.leases_bucket()),
                format!("$JS.API.STREAM.PURGE.{leases}"),
                format!("$JS.API.STREAM.INFO.{creds}"),
                format!("$JS.API.DIRECT.GET.{creds}"),
                "$JS.API.META.LEADER.STEPDOWN".into(),
            ],
        ),
        (
            "worker",
            PASSWORDS[1].1,
            vec![
                format!("$JS.API.STREAM.UPDATE.{jobs}"),
                "$JS.API.STREAM.CREATE.ELSEWHERE".into(),
                "$JS.API.STREAM.NAMES".into(),
                format!("$JS.API.STREAM.CREATE.{jobs}"),
                format!("$JS.API.STREAM.DELETE.{jobs}"),
                format!("$JS.API.STREAM.PURGE.{jobs}"),
                format!("$JS.API.STREAM.MSG.DELETE.{events}"),
                format!("$JS.API.STREAM.UPDATE.{events}"),
                format!("$JS.API.STREAM.UPDATE.{batches}"),
                format!("$JS.API.STREAM.PURGE.{batches}"),
                format!("$JS.API.CONSUMER.CREATE.{events}"),
                format!("$JS.API.CONSUMER.CREATE.{audit}"),
                format!("$JS.API.STREAM.MSG.GET.{audit}"),
                format!("$JS.API.STREAM.UPDATE.{creds}"),
                format!("$JS.API.STREAM.UPDATE.{machines}"),
                format!("$JS.API.STREAM.UPDATE.{leases}"),
            ],
        ),
        (
            "admin",
            PASSWORDS[4].1,
            vec![
                format!("$JS.API.STREAM.UPDATE.{jobs}"),
                format!("$JS.API.STREAM.DELETE.{jobs}"),
                format!("$JS.API.CONSUMER.CREATE.{jobs}"),
                format!("$JS.API.STREAM.PURGE.{events}"),
                format!("$JS.API.STREAM.INFO.{leases}"),
                "$JS.API.STREAM.CREATE.ELSEWHERE".into(),
            ],
        ),
    ];
    for (user, password, subjects) in refused {
        let (client, errors) = connect(nats, user, password).await;
        for subject in &subjects {
            client.publish(subject.clone(), "{}".into()).await.unwrap();
        }
        client.flush().await.unwrap();
        for subject in &subjects {
            wait_error(&errors, &format!("Permissions Violation for Publish to \"{subject}\"")).await;
        }
    }
    // The streams a worker merely uses are as the gateway made them.
    let (gateway_client, _) = connect(nats, "gateway", PASSWORDS[0].1).await;
    let mut js_jobs = async_nats::jetstream::new(gateway_client).get_stream(&jobs).await.unwrap();
    assert_eq!(js_jobs.info().await.unwrap().config.subjects, vec![s.jobs_all()]);
}

/// Serial consoles with the shipped accounts (docs/CONSOLE.md): tenant A
/// watches, reads and types on its machine's console through the imports;
/// tenant B can neither read A's console output, nor type on it, nor hold
/// it open, whether it names A's subjects (refused by its permissions) or
/// its own with A's machine name (the worker acts only for the machine's
/// own tenant).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reaches_only_its_own_consoles() {
    use bmcfleet_schema::subject::{CONSOLE_EVENT_HEADER, CONSOLE_VIEWER_HEADER};
    use bmcfleet_testing::ipmi::{IpmiSim, IpmiSimOptions, SerialHost};
    use futures::StreamExt;
    let host = SerialHost::start().expect("serial host");
    let sim =
        IpmiSim::start_with(IpmiSimOptions { sol_port: Some(host.port()), ..Default::default() }).expect("ipmi_sim");
    assert!(host.wait_connected(Duration::from_secs(20)), "{}", sim.log());
    let stack = shipped(SimConfig::default()).await;
    let (nats, topo) = (&stack.nats, &stack.topo);
    let subjects = topo.subjects();
    let (admin, _) = connect(nats, "admin", PASSWORDS[4].1).await;
    let (a, a_errors) = connect(nats, "producer-a", PASSWORDS[5].1).await;
    let (b, b_errors) = connect(nats, "producer-b", PASSWORDS[6].1).await;
    stack.wait_partitions_owned().await;
    let name = topo.register_machine(&admin, &sim.target()).await;
    {
        use bmcfleet_common::streams::{bucket, machines_config, Mode};
        let js = async_nats::jetstream::new(admin.clone());
        let kv = bucket(&js, machines_config(&subjects, 1), Mode::UseExisting).await.unwrap();
        let mut m: Machine = serde_json::from_slice(&kv.get(&name).await.unwrap().unwrap()).unwrap();
        m.tenant = "tenant-a".into();
        bmcfleet_common::registry::put(&kv, &m).await.unwrap();
    }
    let heartbeat = |client: async_nats::Client, subject: String| {
        tokio::spawn(async move {
            loop {
                let mut h = async_nats::HeaderMap::new();
                h.insert(CONSOLE_VIEWER_HEADER, "v");
                let _ = client.publish_with_headers(subject.clone(), h, Default::default()).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // B first, alone: with its own tenant's subjects for A's machine nothing opens.
    let mut operator_view = admin.subscribe(subjects.console_out("tenant-a", &name)).await.unwrap();
    admin.flush().await.unwrap();
    let mut b_own = b.subscribe(subjects.console_out("tenant-b", &name)).await.unwrap();
    let b_beat = heartbeat(b.clone(), subjects.console_watch("tenant-b", &name));
    b.publish(subjects.console_in("tenant-b", &name), "b-own-subject\r".into()).await.unwrap();
    b.flush().await.unwrap();
    // A's subjects: refused by B's permissions.
    let mut b_spy = b.subscribe(subjects.console_out("tenant-a", &name)).await.unwrap();
    wait_error(&b_errors, "Permissions Violation for Subscription to \"bmc.console.out.tenant-a").await;
    b.publish(subjects.console_watch("tenant-a", &name), "".into()).await.unwrap();
    wait_error(&b_errors, "Permissions Violation for Publish to \"bmc.console.watch.tenant-a").await;

    // B's heartbeats for A's machine under B's own subjects (several
    // worker ticks and a session's opening time) opened nothing.
    let opened = tokio::time::timeout(Duration::from_secs(4), operator_view.next()).await;
    assert!(opened.is_err(), "B's heartbeats opened A's console: {opened:?}");

    // A watches: its console opens and B still sees nothing of it.
    let mut a_out = a.subscribe(subjects.console_out("tenant-a", &name)).await.unwrap();
    a.flush().await.unwrap();
    let a_beat = heartbeat(a.clone(), subjects.console_watch("tenant-a", &name));
    let started = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(m) = a_out.next().await {
            if m.headers.as_ref().and_then(|h| h.get(CONSOLE_EVENT_HEADER)).is_some_and(|v| v.as_str() == "started") {
                return;
            }
        }
    })
    .await;
    assert!(started.is_ok(), "tenant A's console never started; A's errors: {:?}", a_errors.lock().unwrap());
    a.publish(subjects.console_in("tenant-a", &name), "a-typed\r".into()).await.unwrap();
    assert!(host.wait_for(b"a-typed\r", Duration::from_secs(20)), "{:?}", host.received());
    // B types on A's console: refused; nothing reaches the host.
    b.publish(subjects.console_in("tenant-a", &name), "b-typed\r".into()).await.unwrap();
    wait_error(&b_errors, "Permissions Violation for Publish to \"bmc.console.in.tenant-a").await;
    host.write(b"secret host output\r\n");
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(m) = a_out.next().await {
            got.extend_from_slice(&m.payload);
            if got.windows(18).any(|w| w == b"secret host output") {
                return;
            }
        }
    })
    .await;
    assert!(String::from_utf8_lossy(&got).contains("secret host output"), "A reads its console");
    a.publish(subjects.console_in("tenant-a", &name), "a-again\r".into()).await.unwrap();
    assert!(host.wait_for(b"a-again\r", Duration::from_secs(20)));
    let received = String::from_utf8_lossy(&host.received()).into_owned();
    assert!(!received.contains("b-typed") && !received.contains("b-own-subject"), "B reached the host: {received:?}");
    for sub in [&mut b_spy, &mut b_own] {
        let leaked = tokio::time::timeout(Duration::from_millis(300), sub.next()).await;
        assert!(!matches!(leaked, Ok(Some(_))), "B received console output: {leaked:?}");
    }
    b_beat.abort();
    a_beat.abort();

    // The stored log through the gateway's console.log (tenants have no
    // JetStream access): A pages through its machine's log, small pages.
    let log_subject = bmcfleet_schema::subject::console_endpoint_subject("bmcfleet", "log");
    let ask = |client: async_nats::Client, body: serde_json::Value| {
        let subject = log_subject.clone();
        async move {
            let mut h = async_nats::HeaderMap::new();
            h.insert(bmcfleet_schema::subject::CONTENT_TYPE, "application/json");
            let msg = client
                .request_with_headers(subject, h, serde_json::to_vec(&body).unwrap().into())
                .await
                .expect("a reply");
            serde_json::from_slice::<Reply>(&msg.payload).expect("a reply body")
        }
    };
    let mut logged = Vec::new();
    let mut after: Option<u64> = None;
    let mut pages = 0;
    loop {
        let mut body = serde_json::json!({"machine": name, "max_bytes": 16});
        if let Some(a) = after {
            body["after"] = a.into();
        }
        let Reply::ConsoleLog(page) = ask(a.clone(), body).await else { panic!("A reads its console log") };
        pages += 1;
        assert!(page.entries.len() <= 16, "a bounded page");
        for e in &page.entries {
            use base64::Engine as _;
            logged.extend(base64::engine::general_purpose::STANDARD.decode(&e.data).unwrap());
        }
        if !page.more {
            break;
        }
        assert!(page.next > after, "pages advance");
        after = page.next;
        assert!(pages < 1000, "pagination ends");
    }
    assert!(pages > 1, "16-byte pages: more than one");
    assert!(String::from_utf8_lossy(&logged).contains("secret host output"), "A replays its log");
    // B, by every spelling of A's machine or its subject: exactly what an unknown machine answers.
    let unknown = match ask(b.clone(), serde_json::json!({"machine": "no-such-machine"})).await {
        Reply::Error(e) => e.code,
        other => panic!("an unknown machine: {other:?}"),
    };
    assert_eq!(unknown, ErrorCode::MachineNotFound);
    let out = subjects.console_out("tenant-a", &name);
    for spelling in [
        name.clone(),
        name.to_uppercase(),
        format!(" {name}"),
        format!("{name} "),
        format!("tenant-a.{name}"),
        format!("tenant-a/{name}"),
        out.clone(),
        "*".into(),
        ">".into(),
        format!("{name}.>"),
        "tenant-a.*".into(),
    ] {
        for body in [
            serde_json::json!({"machine": spelling}),
            serde_json::json!({"machine": spelling, "since": "1h"}),
            serde_json::json!({"machine": spelling, "after": 0}),
        ] {
            match ask(b.clone(), body.clone()).await {
                Reply::Error(e) => assert_eq!(e.code, ErrorCode::MachineNotFound, "{body}: {e:?}"),
                other => panic!("B read A's console log with {body}: {other:?}"),
            }
        }
    }
    // A field naming the tenant or the subject is refused, not obeyed.
    for body in [
        serde_json::json!({"machine": name, "tenant": "tenant-a"}),
        serde_json::json!({"machine": name, "subject": out}),
    ] {
        match ask(b.clone(), body.clone()).await {
            Reply::Error(e) => assert_eq!(e.code, ErrorCode::Malformed, "{body}: {e:?}"),
            other => panic!("B read A's console log with {body}: {other:?}"),
        }
    }
    // And B cannot read the stream itself.
    let js = async_nats::jetstream::new(b.clone());
    assert!(js.get_stream(subjects.console_stream()).await.is_err(), "B reached the console stream");
}

/// Operators in the `operators` account (the gateway runs with
/// `--operator-accounts operators`) act for any tenant, and the audit names
/// the user nats-server authenticated, not a name the client claims.
/// Without the flag the same account is a tenant and reaches no other
/// tenant's machine: the list never widens what an account may do by
/// itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_account_acts_as_an_operator_and_is_audited_by_user() {
    use bmcfleet_schema::audit::{AuditEvent, AuditRecord, NatsIdentity};
    use bmcfleet_schema::subject::OPERATOR_CLAIM_HEADER;
    let topo = Topology::default();
    let nats = bmcfleet_tests::shipped::nats();
    let (admin, _) = connect(&nats, "admin", PASSWORDS[4].1).await;
    let batch = Batch {
        events: Default::default(),
        plan: false,
        id: None,
        machine: Some("b-node7".into()),
        bmc: None,
        actions: vec![Action::Power(PowerOp::Status)],
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(60)),
    };
    let claiming = || {
        let mut h = async_nats::HeaderMap::new();
        h.insert(OPERATOR_CLAIM_HEADER, "mallory");
        h
    };
    let body = Encoding::MessagePack.encode(&batch).unwrap();

    // Not listed: `operators` is a tenant, and tenant-b's machine is not its.
    {
        let _gateway = topo.gateway(&nats, &bmcfleet_tests::shipped::gateway_user());
        let operator = Producer::new(admin.clone());
        wait_gateway(&operator).await;
        put_machine(&admin, &topo, "b-node7", "10.7.7.7", "tenant-b", "rack-b").await;
        // The gateway knows the machine once the gateway's own account may queue a batch for it.
        bmcfleet_tests::eventually(Duration::from_secs(10), "the registry reaches the gateway", || {
            let (operator, batch) = (&operator, &batch);
            async move { matches!(operator.submit(batch, false).await, Reply::Accepted(_)).then_some(()) }
        })
        .await;
        let ops = Producer::new(connect(&nats, "ops", PASSWORDS[7].1).await.0);
        let (_, reply) = ops.raw("submit", claiming(), body.clone(), Duration::from_secs(10)).await;
        assert_eq!(refusal(reply).code, ErrorCode::MachineNotFound, "an unlisted account reached tenant-b's machine");
    }

    let _gateway = topo.gateway(
        &nats,
        &["--nats-user", "gateway", "--nats-password", PASSWORDS[0].1, "--operator-accounts", "operators"],
    );
    let ops = Producer::new(connect(&nats, "ops", PASSWORDS[7].1).await.0);
    wait_gateway(&ops).await;
    let id = bmcfleet_tests::eventually(Duration::from_secs(15), "the operator's batch is queued", || {
        let ops = &ops;
        let body = body.clone();
        async move {
            let (_, reply) = ops.raw("submit", claiming(), body, Duration::from_secs(10)).await;
            match reply {
                Reply::Accepted(a) => Some(a.id),
                _ => None,
            }
        }
    })
    .await;
    let Reply::Status(s) = ops.status(id).await else { panic!("the operator reads tenant-b's batch") };
    assert_eq!(s.tenant, "tenant-b");

    let record = bmcfleet_tests::eventually(Duration::from_secs(10), "the admission's audit record", || {
        let out = bmcctl_as(&nats, "admin", PASSWORDS[4].1, &["--json", "audit"], "");
        let record = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str::<AuditRecord>(l).ok())
            .find(|r| matches!(&r.what, AuditEvent::BatchAdmitted { batch, .. } if *batch == id));
        async move { record }
    })
    .await;
    assert_eq!(record.actor, "operator", "{record:?}");
    assert_eq!(record.nats, Some(NatsIdentity { account: "operators".into(), user: Some("ops".into()) }), "{record:?}");
    assert_eq!(record.claimed_operator.as_deref(), Some("mallory"), "{record:?}");
}
