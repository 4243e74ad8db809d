//! Honest fleet state and no silent waits (issue 34), through `bmcctl`
//! against real processes (nats-server, gateway, worker, `bmc-sim`):
//! - while the worker polls, `machine ls` shows LAST SEEN from the last
//!   poll (seconds ago), although the machine's own record is written only
//!   on change and heartbeat (15 min): the partition's record carries it;
//! - once the worker stops, `machine ls` shows the machine `stale` with
//!   POWER `unknown` within its poll interval plus the grace (waited for on
//!   a deadline loop, never a blind sleep), and `--json` says
//!   `"freshness": "stale"`;
//! - a waiting action (the default, for one machine as for many) for a
//!   partition no worker owns answers at once: exit 4, `queued <id>: no
//!   worker owns partition N since …`, the batch queued; `--no-wait` exits
//!   0; an unknown machine exits 2 whether named alone or with others.

use bmcfleet_schema::state::MachineState;
use bmcfleet_schema::{BmcKey, Reply};
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::producer::{wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::{NatsServer, Process, Producer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Polls every second; the partition record every second; a grace of 1s:
/// a record is stale 1s + 0.1s + 0.9s (poll timeout) + 1s + 1s = 4s after
/// its last observation.
const POLLS: [&str; 10] = [
    "--poll-interval",
    "1s",
    "--poll-timeout",
    "900ms",
    "--state-seen-interval",
    "1s",
    "--state-stale-grace",
    "1s",
    "--breaker-threshold",
    "0",
];
const STALE_AFTER: Duration = Duration::from_millis(4_000);

struct Env {
    nats: NatsServer,
    topology: Topology,
    producer: Producer,
    sim: SimServer,
    _gateway: Process,
    worker: Option<Process>,
    dir: tempfile::TempDir,
}

/// What `bmcctl` did: exit code, stdout, stderr, and how long it took.
type Run = bmcfleet_tests::process::Ran;

impl Env {
    async fn start() -> Env {
        let sim = SimServer::start(SimConfig::default()).await.unwrap();
        let nats = NatsServer::start();
        let topology = Topology::default();
        let gateway = topology.gateway(&nats, &[]);
        let producer = Producer::new(nats.client().await);
        wait_gateway(&producer).await;
        let env =
            Env { nats, topology, producer, sim, _gateway: gateway, worker: None, dir: tempfile::tempdir().unwrap() };
        let public = env.topology.sealing.public.clone();
        let put = env
            .bmcctl_stdin(
                &["cred", "put", "fleet", "--username", "admin", "--password-stdin", "--workers-public-key", &public],
                "pw\n",
            )
            .await;
        assert_eq!(put.code, Some(0), "{}{}", put.out, put.err);
        env
    }

    async fn start_worker(&mut self) {
        self.worker = Some(self.topology.worker(&self.nats, "w0", self.sim.addr(), &POLLS));
        wait_partitions_owned(&self.producer.client, &self.topology.subjects()).await;
    }

    async fn bmcctl(&self, args: &[&str]) -> Run {
        self.bmcctl_stdin(args, "").await
    }

    async fn bmcctl_stdin(&self, args: &[&str], stdin: &str) -> Run {
        let mut cmd = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"));
        cmd.args(["--nats-url", &self.nats.url()])
            .args(args)
            .env("USER", "stale-test")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1");
        bmcfleet_tests::process::run_piped(cmd, stdin).await
    }

    async fn register(&self, names: &[&str]) {
        let machines: Vec<(String, String)> =
            names.iter().enumerate().map(|(i, n)| (n.to_string(), format!("10.34.0.{}", i + 1))).collect();
        self.register_at(&machines).await;
    }

    /// Register machines (name, address) with `bmcctl machine apply` (the whole registry).
    async fn register_at(&self, machines: &[(String, String)]) {
        let mut yaml = String::from("machines:\n");
        for (name, address) in machines {
            yaml.push_str(&format!("  - {{name: {name}, address: '{address}', protocol: sim, credentials: fleet}}\n"));
        }
        let file = self.dir.path().join("machines.yaml");
        std::fs::write(&file, yaml).unwrap();
        let r = self.bmcctl(&["machine", "apply", "-f", file.to_str().unwrap()]).await;
        assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    }

    /// `bmcctl --json machine ls`, by machine name.
    async fn ls_json(&self) -> BTreeMap<String, Value> {
        let r = self.bmcctl(&["--json", "machine", "ls"]).await;
        assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
        bmcfleet_tests::checks::machines_by_name(&r.out)
    }

    /// The machine's own record in the state bucket.
    async fn stored_state(&self, machine: &str) -> Option<MachineState> {
        let js = async_nats::jetstream::new(self.producer.client.clone());
        let kv = js.get_key_value(self.topology.subjects().state_bucket()).await.ok()?;
        let bytes = kv.get(machine).await.ok()??;
        Some(serde_json::from_slice(&bytes).expect("a machine state record"))
    }
}

fn now_ms() -> u64 {
    bmcfleet_common::runtime::now_ms()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_worker_leaves_its_machines_stale_with_power_unknown() {
    let mut env = Env::start().await;
    env.register(&["st-1"]).await;
    env.start_worker().await;

    // A batch powers it on (waited for by default) and the polls follow.
    let on = env.bmcctl(&["power", "on", "--machine", "st-1"]).await;
    assert_eq!(on.code, Some(0), "{}{}", on.out, on.err);
    let current = bmcfleet_tests::poll_until(Duration::from_secs(15), Duration::from_millis(200), || async {
        let m = env.ls_json().await.remove("st-1")?;
        (m["freshness"] == "current" && m["state"]["power"] == "on").then_some(m)
    })
    .await
    .expect("st-1 current and on within 15s");
    assert_eq!(current["state"]["stale_after_ms"], 4_000, "{current}");
    assert_eq!(current["state"]["worker"], "w0", "{current}");

    // LAST SEEN follows the polls while the record itself is not rewritten
    // (no change; the heartbeat is 15 min away): the partition's record says it.
    let written = env.stored_state("st-1").await.expect("a record").updated_ms;
    let mark = now_ms();
    let followed = bmcfleet_tests::poll_until(Duration::from_secs(10), Duration::from_millis(200), || async {
        let m = env.ls_json().await.remove("st-1")?;
        (m["state"]["last_seen_ms"].as_u64()? > mark + 1_000).then_some(m)
    })
    .await
    .expect("LAST SEEN moves with the polls");
    assert_eq!(env.stored_state("st-1").await.unwrap().updated_ms, written, "no write per poll: {followed}");
    let table = env.bmcctl(&["machine", "ls"]).await;
    let row = table.out.lines().find(|l| l.starts_with("st-1")).unwrap_or_default().to_owned();
    assert!(row.contains(" on ") && row.contains(" yes ") && row.contains("s ago"), "{}", table.out);

    // --timeout bounds the wait: a slow BMC's batch is still running when
    // it runs out; bmcctl says so, prints the batch's status and exits 4.
    env.register_at(&[("st-1".into(), "10.34.0.1".into()), ("st-slow".into(), "slow-1.rack34".into())]).await;
    let r = env.bmcctl(&["power", "status", "--machine", "st-slow", "--timeout", "1s"]).await;
    assert_eq!(r.code, Some(4), "{}{}", r.out, r.err);
    assert!(r.err.contains("no result within 1s (--timeout)"), "{}", r.err);
    assert!(r.took < Duration::from_secs(8), "{:?}", r.took);

    // The worker stops: stale, power unknown, within interval + grace.
    let mut worker = env.worker.take().unwrap();
    worker.terminate(Duration::from_secs(10));
    let stopped = Instant::now();
    let stale =
        bmcfleet_tests::poll_until(STALE_AFTER + Duration::from_secs(10), Duration::from_millis(200), || async {
            let m = env.ls_json().await.remove("st-1")?;
            (m["freshness"] == "stale").then_some(m)
        })
        .await
        .expect("st-1 stale after the worker stopped");
    let observed = stale["state"]["observed_ms"].as_u64().expect("observed_ms");
    assert!(
        stopped.elapsed() <= STALE_AFTER + Duration::from_secs(3),
        "stale {:?} after the stop (limit {STALE_AFTER:?} after the last observation): {stale}",
        stopped.elapsed()
    );
    assert!(now_ms().saturating_sub(observed) > 4_000, "stale only past the limit: {stale}");
    let table = env.bmcctl(&["machine", "ls"]).await;
    let row = table.out.lines().find(|l| l.starts_with("st-1")).unwrap_or_default().to_owned();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.get(4..6), Some(&["unknown", "stale"][..]), "POWER unknown, CONTACTABLE stale: {}", table.out);

    // Its partition has no owner now: a waiting action says so at once.
    let r = env.bmcctl(&["power", "status", "--machine", "st-1"]).await;
    assert_eq!(r.code, Some(4), "{}{}", r.out, r.err);
    let p = BmcKey::machine("st-1").partition(env.topology.subjects().partitions);
    assert!(r.out.contains(&format!("no worker owns partition {p} since ")), "{}{}", r.out, r.err);
    assert!(r.took < Duration::from_secs(10), "answered at once, not at the deadline: {:?}", r.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_with_no_worker_answers_at_once_and_exit_codes_match_across_forms() {
    let env = Env::start().await;
    env.register(&["nw-1", "nw-2"]).await;
    let subjects = env.topology.subjects();

    // bmcctl, one machine: waits by default; no owner, so exit 4 at once with the reason.
    let r = env.bmcctl(&["power", "status", "--machine", "nw-1", "--deadline", "30s"]).await;
    assert_eq!(r.code, Some(4), "{}{}", r.out, r.err);
    let p = BmcKey::machine("nw-1").partition(subjects.partitions);
    assert!(
        r.out.starts_with("queued ") && r.out.contains(&format!("no worker owns partition {p} since ")),
        "{}",
        r.out
    );
    assert!(r.took < Duration::from_secs(10), "answered at once (deadline 30s): {:?}", r.took);
    // `--wait` says the same; `--no-wait` is accepted (exit 0).
    let r = env.bmcctl(&["power", "status", "--machine", "nw-1", "--wait", "--deadline", "30s"]).await;
    assert_eq!(r.code, Some(4), "{}{}", r.out, r.err);
    let r = env.bmcctl(&["power", "status", "--machine", "nw-1", "--no-wait"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.out.starts_with("accepted "), "{}", r.out);

    // The wire: a waiting submit is answered `accepted` with `unowned`, the batch queued.
    let batch = bmcfleet_tests::producer::machine_batch(
        "nw-2",
        vec![bmcfleet_schema::Action::Power(bmcfleet_schema::PowerOp::Status)],
    );
    let started = Instant::now();
    let reply = env.producer.submit(&batch, true).await;
    let Reply::Accepted(a) = &reply else { panic!("expected accepted, got {reply:?}") };
    let unowned = a.unowned.as_ref().expect("unowned");
    assert_eq!(unowned.partition, BmcKey::machine("nw-2").partition(subjects.partitions));
    assert!(unowned.since_ms.is_some() && unowned.message.contains("no worker owns partition"), "{unowned:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    match env.producer.status(a.id).await {
        Reply::Status(s) => assert_eq!(s.state, bmcfleet_schema::BatchState::Queued),
        other => panic!("expected the queued status, got {other:?}"),
    }

    // An unknown machine exits 2, named alone or with others.
    let alone = env.bmcctl(&["power", "status", "--machine", "nobody-here"]).await;
    assert_eq!(alone.code, Some(2), "{}{}", alone.out, alone.err);
    let many = env.bmcctl(&["power", "status", "--machine", "nobody-here", "--machine", "nw-1"]).await;
    assert_eq!(many.code, Some(2), "{}{}", many.out, many.err);
    assert!(alone.out.contains("nobody-here") || alone.err.contains("nobody-here"), "{}{}", alone.out, alone.err);
}

/// Under the shipped accounts config the gateway may read the workers'
/// leases: once the only worker stopped (handing its leases back), a
/// waiting submit is answered at once, with the time of the handback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_shipped_accounts_the_gateway_sees_a_partition_without_owner() {
    use bmcfleet_tests::shipped::{shipped, PASSWORDS};
    let mut s = shipped(SimConfig::default()).await;
    s.wait_partitions_owned().await;
    let (admin, _) = s.producer("admin", PASSWORDS[4].1).await;
    let target = bmcfleet_tests::checks::sim_batch("10.34.1.1", vec![]).bmc.unwrap();
    let name = s.topo.register_machine(&admin.client, &target).await;
    let batch = bmcfleet_tests::producer::machine_batch(
        &name,
        vec![bmcfleet_schema::Action::Power(bmcfleet_schema::PowerOp::Status)],
    );
    let before = admin.submit(&batch, true).await;
    assert!(matches!(before, Reply::Result(_)), "an owner runs it: {before:?}");

    let stopped_at = now_ms();
    s.worker.terminate(Duration::from_secs(10));
    let started = Instant::now();
    let reply = admin.submit(&batch_with_new_id(&batch), true).await;
    let Reply::Accepted(a) = &reply else { panic!("expected accepted at once, got {reply:?}") };
    let unowned = a.unowned.as_ref().expect("unowned");
    assert!(unowned.since_ms.is_some_and(|t| t + 1_000 >= stopped_at), "since the handback: {unowned:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}

fn batch_with_new_id(batch: &bmcfleet_schema::Batch) -> bmcfleet_schema::Batch {
    bmcfleet_schema::Batch { id: None, ..batch.clone() }
}
