//! A producer's view: submit batches, read replies, and a fleet launcher.

use crate::{NatsServer, Process};
use async_nats::HeaderMap;
use bmcfleet_schema::subject::{CONTENT_TYPE, WAIT_HEADER};
use bmcfleet_schema::{Batch, BatchId, Encoding, IdRequest, Reply, Subjects};
use bmcfleet_testing::{SimConfig, SimServer};
use std::time::Duration;

/// Talks to the gateway like a producer would.
#[derive(Clone)]
pub struct Producer {
    pub client: async_nats::Client,
    pub prefix: String,
}

impl Producer {
    pub fn new(client: async_nats::Client) -> Self {
        Producer { client, prefix: "bmcfleet".into() }
    }

    /// Send raw bytes to an endpoint with headers; decode the reply.
    pub async fn raw(
        &self,
        endpoint: &str,
        headers: HeaderMap,
        body: Vec<u8>,
        timeout: Duration,
    ) -> (HeaderMap, Reply) {
        let subject = format!("{}.{endpoint}", self.prefix);
        let req = async_nats::Request::new().headers(headers.clone()).payload(body.into()).timeout(Some(timeout));
        let msg = self.client.send_request(subject, req).await.expect("gateway reply");
        let enc =
            Encoding::from_content_type(msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str()))
                .expect("reply content type");
        let reply = enc.decode::<Reply>(&msg.payload).expect("decodable reply");
        (msg.headers.unwrap_or_default(), reply)
    }

    pub async fn submit(&self, batch: &Batch, wait: bool) -> Reply {
        let mut h = HeaderMap::new();
        if wait {
            h.insert(WAIT_HEADER, "true");
        }
        let body = Encoding::MessagePack.encode(batch).unwrap();
        self.raw("submit", h, body, Duration::from_secs(120)).await.1
    }

    pub async fn submit_json(&self, json: &str, wait: bool) -> Reply {
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, "application/json");
        if wait {
            h.insert(WAIT_HEADER, "true");
        }
        self.raw("submit", h, json.as_bytes().to_vec(), Duration::from_secs(120)).await.1
    }

    pub async fn status(&self, id: BatchId) -> Reply {
        let body = Encoding::MessagePack.encode(&IdRequest { id }).unwrap();
        self.raw("status", HeaderMap::new(), body, Duration::from_secs(10)).await.1
    }

    pub async fn cancel(&self, id: BatchId) -> Reply {
        let body = Encoding::MessagePack.encode(&IdRequest { id }).unwrap();
        self.raw("cancel", HeaderMap::new(), body, Duration::from_secs(10)).await.1
    }
}

/// Ad hoc target ranges of test deployments: the simulated BMCs' made-up
/// 10/8 addresses and loopback (listed explicitly, as production must).
pub const TEST_AD_HOC_TARGETS: &str = "10.0.0.0/8,127.0.0.0/8,::1/128";

/// Drop the default `--ad-hoc-targets` when `extra` gives its own.
fn own_ad_hoc(mut args: Vec<String>, extra: &[&str]) -> Vec<String> {
    if extra.contains(&"--ad-hoc-targets") {
        if let Some(i) = args.iter().position(|a| a == "--ad-hoc-targets") {
            args.drain(i..i + 2);
        }
    }
    args
}

/// A workers' sealing key pair for one test stack: the seed in a 0600 file
/// (for workers), the public key (for the gateway and `bmcctl cred put`).
#[derive(Clone, Debug)]
pub struct SealingKey {
    pub public: String,
    pub seed_file: std::path::PathBuf,
    _dir: std::sync::Arc<tempfile::TempDir>,
}

impl SealingKey {
    pub fn generate() -> SealingKey {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let (seed, public) = bmcfleet_common::sealing::generate();
        let seed_file = dir.path().join("workers.xkey");
        std::fs::write(&seed_file, format!("{}\n", seed.expose())).expect("write seed");
        std::fs::set_permissions(&seed_file, std::fs::Permissions::from_mode(0o600)).expect("chmod seed");
        SealingKey { public, seed_file, _dir: std::sync::Arc::new(dir) }
    }

    /// Gateway flags: seal inline credentials to this key.
    pub fn gateway_args(&self) -> Vec<String> {
        vec!["--inline-credentials".into(), "sealed".into(), "--workers-public-key".into(), self.public.clone()]
    }

    /// Worker flags: open boxes sealed to this key.
    pub fn worker_args(&self) -> Vec<String> {
        vec!["--sealing-key-file".into(), self.seed_file.display().to_string()]
    }
}

/// Topology shared by the gateway and workers a test starts, with one
/// sealing key pair: gateways seal inline credentials to it (unless a test
/// passes its own `--inline-credentials`), workers hold its seed.
#[derive(Clone, Debug)]
pub struct Topology {
    pub partitions: u16,
    pub lease_ttl: &'static str,
    pub rebalance: &'static str,
    pub sealing: SealingKey,
}

impl Default for Topology {
    fn default() -> Self {
        Topology { partitions: 8, lease_ttl: "3s", rebalance: "1s", sealing: SealingKey::generate() }
    }
}

impl Topology {
    pub fn subjects(&self) -> Subjects {
        Subjects::new("bmc", "BMCFLEET", self.partitions)
    }

    pub fn common_args(&self, nats: &NatsServer) -> Vec<String> {
        self.common_args_at(&nats.url())
    }

    /// Flags every process of the topology shares, with NATS at `nats_url`.
    pub fn common_args_at(&self, nats_url: &str) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--nats-url".into(),
            nats_url.into(),
            "--partitions".into(),
            self.partitions.to_string(),
            "--log-format".into(),
            "json".into(),
        ];
        args.extend(["--ad-hoc-targets".into(), TEST_AD_HOC_TARGETS.into()]);
        args
    }

    /// Register `target` as a machine (operator writes: the test NATS has
    /// no accounts): its inline password sealed to the workers' key in the
    /// credentials bucket under `machine/<name>`, then the machine record.
    /// The name is derived from the whole target, so distinct targets at one
    /// host are distinct machines: the previous machine at that host is
    /// removed first (one BMC is one machine).
    pub async fn register_machine(&self, client: &async_nats::Client, target: &bmcfleet_schema::BmcTarget) -> String {
        register_machine(client, &self.subjects(), &self.sealing.public, target).await
    }
}

/// Register a `sim` machine at `address` bound to the named credential
/// `credential` (written with `client`, which needs the operator's rights),
/// and return a batch of `actions` for it.
pub async fn ref_machine_batch(
    client: &async_nats::Client,
    subjects: &Subjects,
    address: &str,
    credential: &str,
    actions: Vec<bmcfleet_schema::Action>,
) -> Batch {
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let address: bmcfleet_schema::BmcAddress = address.parse().expect("address");
    let name = format!("sim-{}", address.key().as_str().to_ascii_lowercase().replace('_', "-"));
    let machine = bmcfleet_schema::Machine::new(name.clone(), address, bmcfleet_schema::Protocol::Sim, credential);
    let js = async_nats::jetstream::new(client.clone());
    let machines = bucket(&js, machines_config(subjects, 1), Mode::UseExisting).await.expect("machines bucket");
    bmcfleet_common::registry::put(&machines, &machine).await.expect("put machine");
    Batch {
        on_error: bmcfleet_schema::OnError::Stop,
        deadline: Some(Duration::from_secs(600)),
        ..machine_batch(&name, actions)
    }
}

/// [`Topology::register_machine`] for any deployment: `workers_key` is the
/// workers' public sealing key.
pub async fn register_machine(
    client: &async_nats::Client,
    subjects: &Subjects,
    workers_key: &str,
    target: &bmcfleet_schema::BmcTarget,
) -> String {
    {
        use bmcfleet_common::streams::{bucket, credentials_config, machines_config, Mode};
        let js = async_nats::jetstream::new(client.clone());
        let json = serde_json::to_vec(target).expect("encode target");
        let digest = json.iter().fold(0xcbf29ce484222325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100000001b3));
        let name = format!("t-{digest:016x}");
        let credential = format!("machine/{name}");
        let sealed = match &target.credentials {
            bmcfleet_schema::Credentials::Inline { username, password } => {
                bmcfleet_common::sealing::Sealer::new(workers_key)
                    .expect("key")
                    .seal(username, password, &bmcfleet_common::sealing::Binding::credential(&credential))
                    .expect("seal")
            }
            bmcfleet_schema::Credentials::Sealed(_) => {
                panic!("register_machine needs the password to seal it for the credential")
            }
            bmcfleet_schema::Credentials::Ref(r) => {
                panic!("register_machine needs the password, not the reference {r}")
            }
        };
        let creds = bucket(&js, credentials_config(subjects, 1), Mode::UseExisting).await.expect("credentials bucket");
        creds.put(&credential, serde_json::to_vec(&sealed).unwrap().into()).await.expect("put credential");
        let machines = bucket(&js, machines_config(subjects, 1), Mode::UseExisting).await.expect("machines bucket");
        let machine = bmcfleet_schema::Machine {
            tls: target.tls.clone(),
            system_id: target.system_id.clone(),
            protocols: target.options.protocols.clone(),
            redfish: target.options.redfish.clone(),
            ipmi: target.options.ipmi.clone(),
            ..bmcfleet_schema::Machine::new(name.clone(), target.address.clone(), target.protocol, credential)
        };
        {
            // An earlier test's record at this BMC endpoint goes (machines
            // at other ports or systems of the host stay).
            use futures::TryStreamExt;
            let keys: Vec<String> = machines.keys().await.expect("keys").try_collect().await.expect("keys");
            for k in keys.into_iter().filter(|k| *k != name) {
                let Ok(Some(v)) = machines.get(&k).await else { continue };
                if serde_json::from_slice::<bmcfleet_schema::Machine>(&v)
                    .is_ok_and(|m| m.conflict_with(&machine).is_some())
                {
                    machines.delete(&k).await.expect("delete machine");
                }
            }
        }
        bmcfleet_common::registry::put(&machines, &machine).await.expect("put machine");
        name
    }
}

impl Topology {
    /// Sealing flags for a gateway unless `extra` chooses its own inline mode.
    pub fn gateway_sealing_args(&self, extra: &[&str]) -> Vec<String> {
        if extra.contains(&"--inline-credentials") {
            vec![]
        } else {
            self.sealing.gateway_args()
        }
    }

    /// Flags of worker `id` in this topology: its id, lease timing, a 5 s
    /// ack wait and drain timeout, the sealing seed.
    pub fn worker_args(&self, id: &str) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--worker-id".into(),
            id.into(),
            "--lease-ttl".into(),
            self.lease_ttl.into(),
            "--rebalance-interval".into(),
            self.rebalance.into(),
            "--ack-wait".into(),
            "5s".into(),
            "--drain-timeout".into(),
            "5s".into(),
        ];
        args.extend(self.sealing.worker_args());
        args
    }

    pub fn gateway(&self, nats: &NatsServer, extra: &[&str]) -> Process {
        let mut args = self.common_args(nats);
        args.extend(["--allow-sim".into(), "true".into()]);
        args.extend(self.gateway_sealing_args(extra));
        args.extend(extra.iter().map(|s| s.to_string()));
        Process::spawn("bmc-gateway", &own_ad_hoc(args, extra), &[])
    }

    pub fn worker(&self, nats: &NatsServer, id: &str, sim: std::net::SocketAddr, extra: &[&str]) -> Process {
        let sim = sim.to_string();
        let mut all = vec!["--sim-endpoint", sim.as_str()];
        all.extend_from_slice(extra);
        self.worker_plain(nats, id, &all)
    }

    /// A worker with only the real providers (and whatever `extra` adds).
    pub fn worker_plain(&self, nats: &NatsServer, id: &str, extra: &[&str]) -> Process {
        self.worker_at(&nats.url(), id, extra)
    }

    /// As [`Topology::worker_plain`], reaching NATS at `nats_url` (e.g. through a relay).
    pub fn worker_at(&self, nats_url: &str, id: &str, extra: &[&str]) -> Process {
        let mut args = self.common_args_at(nats_url);
        args.extend(self.worker_args(id));
        // Machine polls (issue 19) would add BMC calls to tests that count
        // them: off unless the test turns them on.
        if !extra.iter().any(|a| a.starts_with("--poll-interval")) {
            args.extend(["--poll-interval".into(), "off".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let args = own_ad_hoc(args, extra);
        Process::spawn(&format!("bmc-worker:{id}"), &args, &[])
    }
}

/// Wait until the gateway answers on its service subjects.
pub async fn wait_gateway(p: &Producer) {
    crate::eventually(Duration::from_secs(20), "gateway service", || {
        let c = p.client.clone();
        let subject = format!("{}.status", p.prefix);
        async move {
            let req =
                async_nats::Request::new().payload(b"{}".to_vec().into()).timeout(Some(Duration::from_millis(500)));
            c.send_request(subject, req).await.ok().map(|_| ())
        }
    })
    .await
}

/// A lease on every partition with no worker behind it (in a lease bucket
/// without expiry): the gateway sees each partition owned, nothing
/// consumes, so waiting submits stay open. For tests of the waiting-submit
/// budgets, which need waits that do not end (a partition without a lease
/// is answered at once, issue 34).
pub async fn lease_every_partition_to_nobody(client: &async_nats::Client, subjects: &Subjects) {
    let js = async_nats::jetstream::new(client.clone());
    let config = async_nats::jetstream::kv::Config {
        bucket: subjects.leases_bucket(),
        description: "bmcfleet partition leases (a test's idle owner)".into(),
        history: 1,
        ..Default::default()
    };
    let kv = js.create_key_value(config).await.expect("the lease bucket");
    for p in 0..subjects.partitions {
        kv.put(subjects.lease_key(p), "idle-test-owner".into()).await.expect("a lease");
    }
}

/// Wait until every partition has a lease (i.e. workers are consuming).
pub async fn wait_partitions_owned(client: &async_nats::Client, subjects: &Subjects) {
    use futures::TryStreamExt;
    let js = async_nats::jetstream::new(client.clone());
    let total = subjects.partitions as usize;
    crate::eventually(Duration::from_secs(30), "all partitions leased", || {
        let js = js.clone();
        let bucket = subjects.leases_bucket();
        async move {
            let kv = js.get_key_value(bucket).await.ok()?;
            let keys: Vec<String> = kv.keys().await.ok()?.try_collect().await.ok()?;
            (keys.len() == total).then_some(())
        }
    })
    .await
}

/// Messages currently in a stream.
pub async fn stream_messages(client: &async_nats::Client, stream: &str) -> u64 {
    let js = async_nats::jetstream::new(client.clone());
    match js.get_stream(stream).await {
        Ok(mut s) => s.info().await.map(|i| i.state.messages).unwrap_or(0),
        Err(_) => 0,
    }
}

/// `batch` (its `bmc` the target, its id set) as the job a gateway queues
/// for `tenant`.
pub fn job_of(mut batch: Batch, tenant: &str) -> bmcfleet_schema::Job {
    let id = *batch.id.get_or_insert_with(ulid::Ulid::new);
    let target = batch.bmc.take().expect("a batch with its target");
    bmcfleet_schema::Job {
        batch,
        id,
        target,
        admitted_at_ms: 1,
        deadline_at_ms: u64::MAX / 2,
        tenant: tenant.into(),
        sealed_params: vec![],
        by_operator: tenant == bmcfleet_schema::machine::DEFAULT_TENANT,
        record_at_claim: false,
    }
}

/// Store `payload` on `job`'s subject of the jobs stream as a gateway does
/// (the job's id as the message id), without a gateway: for jobs in a
/// state a gateway does not leave them in (no status record, another
/// tenant's id, bytes that are no job). `client` must be allowed to.
pub async fn queue_job_bytes(
    client: &async_nats::Client,
    subjects: &Subjects,
    job: &bmcfleet_schema::Job,
    payload: Vec<u8>,
) {
    let mut h = HeaderMap::new();
    h.insert(async_nats::header::NATS_MESSAGE_ID, job.id.to_string().as_str());
    let js = async_nats::jetstream::new(client.clone());
    js.publish_with_headers(subjects.job(&job.tenant, &job.key()), h, payload.into())
        .await
        .expect("publish the job")
        .await
        .expect("the job stored");
}

/// [`queue_job_bytes`] with the job itself.
pub async fn queue_job(client: &async_nats::Client, subjects: &Subjects, job: &bmcfleet_schema::Job) {
    queue_job_bytes(client, subjects, job, Encoding::MessagePack.encode(job).expect("encode the job")).await
}

/// A stream's last sequence: grows by one per message stored, and does not
/// fall when a work queue drops an acknowledged job (a message count would,
/// racing the acknowledgement of a batch that just finished).
pub async fn stream_last_sequence(client: &async_nats::Client, stream: &str) -> u64 {
    let js = async_nats::jetstream::new(client.clone());
    let mut s = js.get_stream(stream).await.unwrap_or_else(|e| panic!("stream {stream}: {e}"));
    s.info().await.unwrap_or_else(|e| panic!("stream {stream}: {e}")).state.last_sequence
}

/// Collects final results from the events subjects.
pub struct ResultCollector {
    sub: async_nats::Subscriber,
    pub results: std::collections::HashMap<BatchId, bmcfleet_schema::BatchResult>,
}

impl ResultCollector {
    /// Subscribe before submitting so no result is missed.
    pub async fn start(client: &async_nats::Client, subjects: &Subjects) -> Self {
        let sub = client.subscribe(subjects.events_all()).await.expect("subscribe events");
        client.flush().await.expect("flush");
        ResultCollector { sub, results: Default::default() }
    }

    /// Wait until results for all `ids` arrived, or panic after `timeout`.
    pub async fn wait_all(&mut self, ids: &[BatchId], timeout: Duration) {
        use futures::StreamExt;
        let end = tokio::time::Instant::now() + timeout;
        while ids.iter().any(|id| !self.results.contains_key(id)) {
            let msg = match tokio::time::timeout_at(end, self.sub.next()).await {
                Ok(Some(m)) => m,
                Ok(None) => panic!("event subscription closed"),
                Err(_) => {
                    let missing = ids.iter().filter(|id| !self.results.contains_key(id)).count();
                    panic!("timed out: {missing} of {} batches have no final result", ids.len());
                }
            };
            if let Ok(ev) = Encoding::MessagePack.decode::<bmcfleet_schema::Event>(&msg.payload) {
                if let bmcfleet_schema::EventKind::BatchFinished { result } = ev.event {
                    self.results.insert(result.id, result);
                }
            }
        }
    }
}

/// NATS + gateway + workers with the real providers: the usual stack of a
/// provider end-to-end test.
pub struct Stack {
    pub producer: Producer,
    pub topology: Topology,
    pub workers: Vec<Process>,
    pub gateway: Process,
    pub nats: NatsServer,
}

impl Stack {
    pub async fn start(workers: usize, worker_args: &[&str]) -> Stack {
        Stack::start_with(&[], workers, worker_args).await
    }

    /// Like [`Stack::start`], with extra gateway arguments.
    pub async fn start_with(gateway_args: &[&str], workers: usize, worker_args: &[&str]) -> Stack {
        let GatewayStack { producer, gateway, topology, nats } = GatewayStack::start(gateway_args).await;
        let workers = (0..workers).map(|i| topology.worker_plain(&nats, &format!("w{i}"), worker_args)).collect();
        wait_partitions_owned(&producer.client, &topology.subjects()).await;
        Stack { producer, topology, workers, gateway, nats }
    }

    /// Submit, wait, and return the final result (panics on any other
    /// reply). A batch with an ad hoc target runs on a machine registered
    /// for that target: real BMCs are reached through the registry.
    pub async fn run(&self, batch: &Batch) -> bmcfleet_schema::BatchResult {
        let mut batch = batch.clone();
        if let Some(target) = batch.bmc.take() {
            batch.machine = Some(self.topology.register_machine(&self.producer.client, &target).await);
        }
        match self.producer.submit(&batch, true).await {
            Reply::Result(r) => r,
            other => panic!("expected a final result, got {other:?}"),
        }
    }
}

/// NATS and a gateway with a producer it answers, no worker: what
/// admission does, with nothing run. Fields drop producer first, NATS last.
pub struct GatewayStack {
    pub producer: Producer,
    pub gateway: Process,
    pub topology: Topology,
    pub nats: NatsServer,
}

impl GatewayStack {
    pub async fn start(gateway_args: &[&str]) -> GatewayStack {
        let nats = NatsServer::start();
        let topology = Topology::default();
        let gateway = topology.gateway(&nats, gateway_args);
        let producer = Producer::new(nats.client().await);
        wait_gateway(&producer).await;
        GatewayStack { producer, gateway, topology, nats }
    }
}

/// NATS, the simulated BMC fleet (`bmc-sim`, in process) and a gateway, with
/// a producer the gateway answers: the stack of a pipeline test. Workers on
/// the simulated BMCs come from [`SimStack::with_workers`] (kept here) or
/// [`SimStack::worker`] (kept by the test).
pub struct SimStack {
    pub producer: Producer,
    pub topology: Topology,
    /// The workers [`SimStack::with_workers`] started, stopped first on drop.
    pub workers: Vec<Process>,
    pub gateway: Process,
    pub sim: SimServer,
    pub nats: NatsServer,
}

impl SimStack {
    /// The default topology and gateway flags, no worker yet.
    pub async fn start(sim: SimConfig) -> SimStack {
        SimStack::start_with(sim, Topology::default(), &[]).await
    }

    /// With `topology` and extra gateway arguments, no worker yet.
    pub async fn start_with(sim: SimConfig, topology: Topology, gateway_args: &[&str]) -> SimStack {
        let nats = NatsServer::start();
        let sim = SimServer::start(sim).await.expect("bmc-sim");
        let gateway = topology.gateway(&nats, gateway_args);
        let producer = Producer::new(nats.client().await);
        wait_gateway(&producer).await;
        SimStack { producer, topology, workers: vec![], gateway, sim, nats }
    }

    /// `count` more workers (`w0`, `w1`, ... numbered on from those already
    /// here) with `extra` flags, once every partition is leased.
    pub async fn with_workers(mut self, count: usize, extra: &[&str]) -> SimStack {
        let first = self.workers.len();
        for i in first..first + count {
            let worker = self.worker(&format!("w{i}"), extra);
            self.workers.push(worker);
        }
        self.wait_partitions_owned().await;
        self
    }

    /// A worker `id` (with `extra` flags) on the simulated BMCs, for the test
    /// to keep; it may not own partitions yet.
    pub fn worker(&self, id: &str, extra: &[&str]) -> Process {
        self.topology.worker(&self.nats, id, self.sim.addr(), extra)
    }

    /// Wait until every partition has a lease.
    pub async fn wait_partitions_owned(&self) {
        wait_partitions_owned(&self.producer.client, &self.topology.subjects()).await
    }

    /// Submit, wait, and return the final result (panics on any other reply).
    pub async fn run(&self, batch: &Batch) -> bmcfleet_schema::BatchResult {
        match self.producer.submit(batch, true).await {
            Reply::Result(r) => r,
            other => panic!("expected a final result, got {other:?}"),
        }
    }
}

/// The error body of a refused request (panics on any other reply).
pub fn refusal(reply: Reply) -> bmcfleet_schema::ErrorBody {
    match reply {
        Reply::Error(e) => e,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// A batch for `target` (on_error: continue, 60 s deadline).
pub fn batch_for(target: bmcfleet_schema::BmcTarget, actions: Vec<bmcfleet_schema::Action>) -> Batch {
    Batch { bmc: Some(target), ..untargeted(actions) }
}

/// A batch for the registered machine `name` (on_error: continue, 60 s deadline).
pub fn machine_batch(name: &str, actions: Vec<bmcfleet_schema::Action>) -> Batch {
    Batch { machine: Some(name.to_owned()), ..untargeted(actions) }
}

/// `actions` with neither a machine nor a target yet (on_error: continue,
/// 60 s deadline).
fn untargeted(actions: Vec<bmcfleet_schema::Action>) -> Batch {
    Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: None,
        bmc: None,
        actions,
        on_error: bmcfleet_schema::OnError::Continue,
        deadline: Some(Duration::from_secs(60)),
    }
}

/// Final results read from the status records (robust across NATS restarts,
/// where a live subscription may miss events). Polls until every id is final.
pub async fn wait_final_statuses(
    client: &async_nats::Client,
    subjects: &Subjects,
    ids: &[BatchId],
    timeout: Duration,
) -> std::collections::HashMap<BatchId, bmcfleet_schema::BatchResult> {
    let js = async_nats::jetstream::new(client.clone());
    let end = tokio::time::Instant::now() + timeout;
    let mut done = std::collections::HashMap::new();
    loop {
        if let Ok(kv) = js.get_key_value(subjects.batches_bucket()).await {
            for id in ids {
                if done.contains_key(id) {
                    continue;
                }
                if let Ok(Some(v)) = bmcfleet_common::status::load(&kv, id).await {
                    if let (true, Some(r)) = (v.status.state.is_final(), v.status.result) {
                        done.insert(*id, r);
                    }
                }
            }
        }
        if done.len() == ids.len() {
            return done;
        }
        if tokio::time::Instant::now() > end {
            panic!("timed out: {} of {} batches have no final status", ids.len() - done.len(), ids.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The kinds of batch `id`'s events stored in the events stream, in stream order.
pub async fn stored_event_kinds(client: &async_nats::Client, subjects: &Subjects, id: &BatchId) -> Vec<String> {
    let js = async_nats::jetstream::new(client.clone());
    let stream = js.get_stream(subjects.events_stream()).await.expect("events stream");
    let mut counts = stream.info_with_subjects(subjects.events_of_batch(id)).await.expect("stream info");
    let mut n = 0;
    while let Some(entry) = futures::StreamExt::next(&mut counts).await {
        n += entry.expect("subject count").1;
    }
    if n == 0 {
        return vec![];
    }
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
            filter_subject: subjects.events_of_batch(id),
            ..Default::default()
        })
        .await
        .expect("ordered consumer");
    let mut messages = consumer.messages().await.expect("messages");
    let mut kinds = vec![];
    while kinds.len() < n {
        let msg = tokio::time::timeout(Duration::from_secs(10), futures::StreamExt::next(&mut messages))
            .await
            .expect("stored event")
            .unwrap();
        let ev: bmcfleet_schema::Event = Encoding::MessagePack.decode(&msg.unwrap().payload).expect("an event");
        kinds.push(
            match ev.event {
                bmcfleet_schema::EventKind::ActionStarted { .. } => "action_started",
                bmcfleet_schema::EventKind::ActionFinished { .. } => "action_finished",
                bmcfleet_schema::EventKind::BatchFinished { .. } => "batch_finished",
                _ => "other",
            }
            .to_owned(),
        );
    }
    kinds
}
