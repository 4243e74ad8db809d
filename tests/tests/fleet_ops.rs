//! Fleet operations (issue 19): `bmcctl` acting on many registered machines,
//! one batch per machine, against real processes (nats-server, gateway,
//! worker) and the simulated BMCs of `bmc-sim`:
//! - a selector (all labels, optionally one tenant) runs exactly one batch
//!   on every machine it matches and on no other; the summary and `--json`
//!   lines say what became of each; exit 0;
//! - a selector matching nothing, or an unknown `--machine`, exits 2 and
//!   submits nothing;
//! - `--canary N`: a failing canary (a BMC that fails every action, or a
//!   machine whose credential is missing) stops the run, nothing else is
//!   submitted, exit 1; a passing one lets the others run after it;
//! - `--stop-after-failures K`: no machine starts after the K-th failure,
//!   those already running finish;
//! - `--max-parallel 1`: batches never overlap (their admission and finish
//!   times, from the results), while a larger limit does overlap them;
//! - `--output wide` adds each machine's batch (the one the gateway and the
//!   BMC saw), worker and times to the summary; `--output json` (and
//!   `BMCCTL_OUTPUT=json`) prints what `--json` prints;
//! - on a terminal, a progress bar (on stderr) and colour, unless `NO_COLOR`.
//!
//! The simulator fails every action of a host named `fail-*` and answers a
//! `slow-*` host after its `slow_latency` (testing/src/sim.rs).

use bmcfleet_schema::{BatchState, BmcAddress, PowerState, Reply};
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::producer::{stream_last_sequence, Stack};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A stack whose worker speaks to one simulator, and the operator's credential `fleet`.
struct Fleet {
    stack: Stack,
    sim: SimServer,
    dir: tempfile::TempDir,
}

/// One machine of a machine file: name, address, labels; credential `fleet`, tenant `default`.
#[derive(Clone)]
struct M {
    name: String,
    address: String,
    labels: Vec<(String, String)>,
    credentials: &'static str,
    tenant: &'static str,
}

fn m(name: &str, address: &str, labels: &[(&str, &str)]) -> M {
    let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    M { name: name.into(), address: address.into(), labels, credentials: "fleet", tenant: "default" }
}

/// How a machine's simulated BMC answers, chosen by its address (bmc-sim).
#[derive(Clone, Copy)]
enum Bmc {
    Ok,
    Fail,
    Slow,
}

/// Machines `PREFIX-1`, `PREFIX-2`, ... labelled `rack=RACK`, one for each
/// of `bmcs`: machine i at `10.RACK.0.i` (`Ok`), `fail-i.rackRACK` or
/// `slow-i.rackRACK`.
fn rack(prefix: &str, rack: u8, bmcs: &[Bmc]) -> Vec<M> {
    let label = rack.to_string();
    let machine = |(i, bmc): (usize, &Bmc)| {
        let i = i + 1;
        let address = match bmc {
            Bmc::Ok => format!("10.{rack}.0.{i}"),
            Bmc::Fail => format!("fail-{i}.rack{rack}"),
            Bmc::Slow => format!("slow-{i}.rack{rack}"),
        };
        m(&format!("{prefix}-{i}"), &address, &[("rack", &label)])
    };
    bmcs.iter().enumerate().map(machine).collect()
}

/// What `bmcctl` did: exit code, stdout, stderr.
struct Run {
    code: Option<i32>,
    out: String,
    err: String,
}

impl Run {
    /// The `--json` lines, by machine.
    fn lines(&self) -> BTreeMap<String, serde_json::Value> {
        self.out
            .lines()
            .map(|l| {
                let v: serde_json::Value =
                    serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}\n{}", self.out));
                (v["machine"].as_str().expect("every line names its machine").to_owned(), v)
            })
            .collect()
    }

    /// The summary row of `machine` (its first words: machine, result).
    fn row(&self, machine: &str) -> &str {
        self.out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(machine))
            .unwrap_or_else(|| panic!("no row for {machine}:\n{}", self.out))
    }
}

impl Fleet {
    async fn start(sim: SimConfig) -> Fleet {
        let sim = SimServer::start(sim).await.unwrap();
        let endpoint = sim.addr().to_string();
        let stack = Stack::start(1, &["--sim-endpoint", &endpoint]).await;
        let fleet = Fleet { stack, sim, dir: tempfile::tempdir().unwrap() };
        let put = fleet
            .bmcctl_stdin(
                &[
                    "cred",
                    "put",
                    "fleet",
                    "--username",
                    "admin",
                    "--password-stdin",
                    "--workers-public-key",
                    &fleet.stack.topology.sealing.public,
                ],
                "pw\n",
            )
            .await;
        assert_eq!(put.code, Some(0), "{}{}", put.out, put.err);
        fleet
    }

    async fn bmcctl(&self, args: &[&str]) -> Run {
        self.bmcctl_stdin(args, "").await
    }

    async fn bmcctl_stdin(&self, args: &[&str], stdin: &str) -> Run {
        self.bmcctl_with(args, stdin, &[]).await
    }

    /// bmcctl with `env` set (and `BMCCTL_OUTPUT` unset unless given).
    async fn bmcctl_with(&self, args: &[&str], stdin: &str, env: &[(&str, &str)]) -> Run {
        use tokio::io::AsyncWriteExt;
        let mut child = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"))
            .args(["--nats-url", &self.stack.nats.url()])
            .args(args)
            .env("USER", "fleet-test")
            .env_remove("RUST_LOG")
            .env_remove("NO_COLOR")
            .env_remove("BMCCTL_OUTPUT")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn bmcctl");
        child.stdin.take().unwrap().write_all(stdin.as_bytes()).await.unwrap();
        let out = child.wait_with_output().await.unwrap();
        Run {
            code: out.status.code(),
            out: String::from_utf8_lossy(&out.stdout).into_owned(),
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Register machines with `bmcctl machine apply`.
    async fn register(&self, machines: &[M]) {
        let mut yaml = String::from("machines:\n");
        for m in machines {
            let labels: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
            yaml.push_str(&format!(
                "  - {{name: {}, address: '{}', protocol: sim, credentials: {}, tenant: {}, labels: {{{}}}}}\n",
                m.name,
                m.address,
                m.credentials,
                m.tenant,
                labels.join(", ")
            ));
        }
        let file = self.dir.path().join(format!("machines-{}.yaml", ulid::Ulid::new()));
        std::fs::write(&file, yaml).unwrap();
        // Some name credentials nobody stored, on purpose (their batches fail unknown_credential).
        let r = self.bmcctl(&["machine", "apply", "--allow-missing-credentials", "-f", file.to_str().unwrap()]).await;
        assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    }

    /// The jobs stream's last sequence: grows by one per batch queued.
    async fn queued(&self) -> u64 {
        stream_last_sequence(&self.stack.producer.client, &self.stack.topology.subjects().jobs_stream()).await
    }

    /// The distinct batches that reached the simulated BMC at `address`, with the actions each ran.
    fn batches_at(&self, address: &str) -> BTreeMap<String, Vec<String>> {
        let key = key(address);
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for e in self.sim.log().into_iter().filter(|e| e.bmc == key) {
            let batch = e.call.as_ref().map(|c| c.batch.to_string()).unwrap_or_default();
            out.entry(batch).or_default().push(e.action);
        }
        out
    }
}

/// The simulator's key of a BMC address.
fn key(address: &str) -> String {
    address.parse::<BmcAddress>().unwrap().key().to_string()
}

/// (admitted, finished) of each machine's batch, from its `--json` line.
fn windows(lines: &BTreeMap<String, serde_json::Value>) -> Vec<(u64, u64, String)> {
    let mut w: Vec<(u64, u64, String)> = lines
        .iter()
        .map(|(name, l)| {
            (
                l["admitted_at_ms"].as_u64().expect("admitted_at_ms"),
                l["finished_at_ms"].as_u64().expect("finished_at_ms"),
                name.clone(),
            )
        })
        .collect();
    w.sort();
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_runs_one_batch_on_every_machine_it_matches_and_no_other() {
    let f = Fleet::start(SimConfig::default()).await;
    let worker = [("rack", "70"), ("role", "worker")];
    f.register(&[
        m("r70-a", "10.70.0.1", &worker),
        m("r70-b", "10.70.0.2", &worker),
        m("r70-c", "10.70.0.3", &worker),
        m("r70-d", "10.70.0.4", &worker),
        m("r70-storage", "10.70.0.5", &[("rack", "70"), ("role", "storage")]),
        m("r71-a", "10.71.0.1", &[("rack", "71"), ("role", "worker")]),
        M { tenant: "tenant-a", ..m("t70-a", "10.70.0.9", &worker) },
    ])
    .await;
    let chosen = ["r70-a", "r70-b", "r70-c", "r70-d"];
    let address = |name: &str| match name {
        "r70-a" => "10.70.0.1",
        "r70-b" => "10.70.0.2",
        "r70-c" => "10.70.0.3",
        "r70-d" => "10.70.0.4",
        "r70-storage" => "10.70.0.5",
        "r71-a" => "10.71.0.1",
        "t70-a" => "10.70.0.9",
        other => panic!("{other}"),
    };

    let before = f.queued().await;
    let r = f.bmcctl(&["power", "on", "--selector", "rack=70,role=worker", "--tenant", "default"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    for name in chosen {
        assert!(r.row(name).contains("succeeded"), "{}", r.out);
        let batches = f.batches_at(address(name));
        assert_eq!(batches.len(), 1, "{name}: exactly one batch: {batches:?}");
        assert_eq!(batches.values().next().unwrap(), &["power_on"], "{name}");
        assert_eq!(f.sim.power(&key(address(name))), Some(PowerState::On), "{name}");
    }
    for name in ["r70-storage", "r71-a", "t70-a"] {
        assert!(f.batches_at(address(name)).is_empty(), "{name} does not match and was acted on");
        assert!(!r.out.contains(name), "{name} is in the summary:\n{}", r.out);
    }
    assert!(r.out.contains("4 machines: 4 succeeded"), "{}", r.out);
    assert!(!r.out.contains('\x1b'), "no progress line or colour when stdout is not a terminal: {:?}", r.out);
    assert_eq!(f.queued().await, before + 4, "one batch per machine");

    // --json: one line per machine, with its batch and what the BMC said.
    let r = f.bmcctl(&["--json", "power", "status", "--selector", "rack=70,role=worker"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    let lines = r.lines();
    assert_eq!(
        lines.keys().map(String::as_str).collect::<Vec<_>>(),
        ["r70-a", "r70-b", "r70-c", "r70-d", "t70-a"],
        "no tenant: both tenants"
    );
    assert_eq!(r.out.lines().count(), 5, "one line per machine:\n{}", r.out);
    for (name, line) in &lines {
        assert_eq!(line["result"], "succeeded", "{line}");
        assert_eq!(line["state"], "succeeded", "{line}");
        let want = if name.starts_with("r70") { "on" } else { "off" };
        assert_eq!(line["results"][0]["data"]["power_state"], want, "{name}: {line}");
        // The batch it names is the one the gateway knows.
        let id: ulid::Ulid = line["batch"].as_str().unwrap().parse().unwrap();
        let Reply::Status(s) = f.stack.producer.status(id).await else { panic!("status of {id}") };
        assert_eq!(s.state, BatchState::Succeeded, "{s:?}");
        assert!(f.batches_at(address(name)).contains_key(&id.to_string()), "{name}: batch {id} did not reach its BMC");
    }

    // --tenant alone: every machine of that tenant.
    let r = f.bmcctl(&["power", "on", "--tenant", "tenant-a"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.row("t70-a").contains("succeeded") && r.out.contains("1 machine: 1 succeeded"), "{}", r.out);
    assert_eq!(f.sim.power(&key("10.70.0.9")), Some(PowerState::On));

    // Nothing matches, or a name is unknown: exit 2, nothing submitted.
    let (before, log) = (f.queued().await, f.sim.log().len());
    let r = f.bmcctl(&["power", "off", "--selector", "rack=99"]).await;
    assert_eq!(r.code, Some(2), "{}{}", r.out, r.err);
    assert!(r.err.contains("no registered machine matches --selector rack=99"), "{}", r.err);
    let r = f.bmcctl(&["power", "off", "--selector", "rack=70,role=worker", "--tenant", "tenant-b"]).await;
    assert_eq!(r.code, Some(2), "{}{}", r.out, r.err);
    let r = f.bmcctl(&["power", "off", "--machine", "r70-a", "--machine", "r70-nope"]).await;
    assert_eq!(r.code, Some(2), "{}{}", r.out, r.err);
    assert!(r.err.contains("machine_not_found") && r.err.contains("`r70-nope`"), "{}", r.err);
    assert_eq!((f.queued().await, f.sim.log().len()), (before, log), "a refused fleet run submitted something");
    assert_eq!(f.sim.power(&key("10.70.0.1")), Some(PowerState::On), "r70-a was powered off");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_canary_stops_the_run_and_a_passing_one_goes_first() {
    let f = Fleet::start(SimConfig::default()).await;
    // Sorted by name, the failing BMC comes first: the canary.
    let canary = rack("c", 80, &[Bmc::Fail, Bmc::Ok, Bmc::Ok, Bmc::Ok]);
    let mut unreachable = rack("k", 81, &[Bmc::Ok; 4]);
    unreachable[1].credentials = "nobody-put-this";
    f.register(&[canary, unreachable, rack("p", 82, &[Bmc::Ok; 4])].concat()).await;

    // The canary's BMC fails the action: nothing else is submitted.
    let before = f.queued().await;
    let r = f.bmcctl(&["power", "on", "--selector", "rack=80", "--canary", "1"]).await;
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    let row = r.row("c-1");
    assert!(row.contains("failed") && row.contains("#0 power_on") && row.contains("bmc_error"), "{}", r.out);
    for (name, address) in [("c-2", "10.80.0.2"), ("c-3", "10.80.0.3"), ("c-4", "10.80.0.4")] {
        assert!(r.row(name).contains("not started"), "{}", r.out);
        assert!(f.batches_at(address).is_empty(), "{name} ran after the canary failed");
    }
    assert!(r.out.contains("Stopped: 1 of 1 canary machine did not succeed (--canary 1)"), "{}", r.out);
    assert!(r.err.contains("stopping:"), "{}", r.err);
    assert_eq!(f.queued().await, before + 1, "only the canary was submitted");

    // Two canaries, one of them without its credential (so never reaching its BMC).
    let before = f.queued().await;
    let r = f.bmcctl(&["--json", "power", "on", "--selector", "rack=81", "--canary", "2"]).await;
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    let lines = r.lines();
    assert_eq!(lines.len(), 4, "one line per machine, not started ones too:\n{}", r.out);
    assert_eq!(lines["k-1"]["result"], "succeeded");
    assert_eq!(lines["k-2"]["result"], "failed", "{}", lines["k-2"]);
    assert_eq!(lines["k-2"]["error"]["code"], "unknown_credential", "{}", lines["k-2"]);
    assert_eq!(lines["k-2"]["failed_action"]["action"], "power_on");
    for name in ["k-3", "k-4"] {
        assert_eq!(lines[name]["result"], "not_started", "{}", lines[name]);
        assert!(lines[name].get("batch").is_none(), "{}", lines[name]);
    }
    assert!(
        f.batches_at("10.81.0.2").is_empty()
            && f.batches_at("10.81.0.3").is_empty()
            && f.batches_at("10.81.0.4").is_empty()
    );
    assert_eq!(f.queued().await, before + 2);

    // Canaries that pass: they run first, then the others.
    let r = f.bmcctl(&["--json", "power", "on", "--selector", "rack=82", "--canary", "2"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    let lines = r.lines();
    assert!(lines.values().all(|l| l["result"] == "succeeded"), "{}", r.out);
    let w = windows(&lines);
    let canaries_done = w.iter().filter(|(_, _, n)| n == "p-1" || n == "p-2").map(|(_, end, _)| *end).max().unwrap();
    for (admitted, _, name) in w.iter().filter(|(_, _, n)| n == "p-3" || n == "p-4") {
        assert!(*admitted >= canaries_done, "{name} was admitted before the canaries finished: {w:?}");
    }
    for address in ["10.82.0.1", "10.82.0.2", "10.82.0.3", "10.82.0.4"] {
        assert_eq!(f.batches_at(address).len(), 1, "{address}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_k_failures_no_machine_starts_and_running_ones_finish() {
    let f = Fleet::start(SimConfig { slow_latency: Duration::from_millis(1500), ..SimConfig::default() }).await;
    let serial = rack("s", 83, &[Bmc::Ok, Bmc::Fail, Bmc::Fail, Bmc::Ok, Bmc::Ok]);
    let parallel = rack("f", 84, &[Bmc::Fail, Bmc::Slow, Bmc::Slow, Bmc::Ok, Bmc::Ok]);
    f.register(&[serial, parallel].concat()).await;

    // One at a time: the second failure stops the run.
    let r =
        f.bmcctl(&["power", "on", "--selector", "rack=83", "--max-parallel", "1", "--stop-after-failures", "2"]).await;
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    assert!(r.row("s-1").contains("succeeded"), "{}", r.out);
    assert!(r.row("s-2").contains("failed") && r.row("s-3").contains("failed"), "{}", r.out);
    assert!(r.row("s-4").contains("not started") && r.row("s-5").contains("not started"), "{}", r.out);
    assert!(
        f.batches_at("10.83.0.4").is_empty() && f.batches_at("10.83.0.5").is_empty(),
        "a machine ran after the second failure"
    );
    assert!(r.out.contains("5 machines: 1 succeeded, 2 failed, 2 not started"), "{}", r.out);
    assert!(r.out.contains("Stopped after 2 failures (--stop-after-failures 2)"), "{}", r.out);

    // Three at once: f-1 fails at once while f-2 and f-3 (slow BMCs) run;
    // they finish, and nothing starts after the failure.
    let r = f
        .bmcctl(&[
            "--json",
            "power",
            "on",
            "--selector",
            "rack=84",
            "--max-parallel",
            "3",
            "--stop-after-failures",
            "1",
        ])
        .await;
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    let lines = r.lines();
    assert_eq!(lines["f-1"]["result"], "failed", "{}", r.out);
    for (name, want) in [("f-2", "succeeded"), ("f-3", "succeeded"), ("f-4", "not_started"), ("f-5", "not_started")] {
        assert_eq!(lines[name]["result"], want, "{name}: {}", r.out);
    }
    // f-2 and f-3 went out in f-1's wave (the driver submits a wave's
    // batches one after another, so one may be admitted a few ms after f-1
    // failed, before the driver can know): both were admitted before either
    // slow BMC answered, i.e. they ran together, and finished.
    let first_done = ["f-2", "f-3"].map(|n| lines[n]["finished_at_ms"].as_u64().unwrap()).into_iter().min().unwrap();
    for name in ["f-2", "f-3"] {
        assert!(
            lines[name]["admitted_at_ms"].as_u64().unwrap() < first_done,
            "{name} did not run in f-1's wave: {}",
            r.out
        );
    }
    assert!(
        f.batches_at("10.84.0.4").is_empty() && f.batches_at("10.84.0.5").is_empty(),
        "a machine started after the failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_parallel_one_runs_one_batch_at_a_time() {
    // Every action takes 300 ms, so batches running together overlap.
    let f = Fleet::start(SimConfig { latency: Duration::from_millis(300), ..SimConfig::default() }).await;
    f.register(&rack("m", 85, &[Bmc::Ok; 5])).await;
    let overlaps = |w: &[(u64, u64, String)]| w.windows(2).filter(|p| p[1].0 < p[0].1).count();

    let r = f.bmcctl(&["--json", "power", "status", "--selector", "rack=85", "--max-parallel", "1"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    let w = windows(&r.lines());
    assert_eq!(w.len(), 5);
    assert_eq!(overlaps(&w), 0, "batches overlapped with --max-parallel 1: {w:?}");
    assert_eq!(
        w.iter().map(|(_, _, n)| n.as_str()).collect::<Vec<_>>(),
        ["m-1", "m-2", "m-3", "m-4", "m-5"],
        "in name order"
    );

    // The same check sees overlap when more may run at once.
    let r = f.bmcctl(&["--json", "power", "status", "--selector", "rack=85", "--max-parallel", "5"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    let w = windows(&r.lines());
    assert!(overlaps(&w) > 0, "no two batches overlapped with --max-parallel 5: {w:?}");
    let names: BTreeSet<&str> = w.iter().map(|(_, _, n)| n.as_str()).collect();
    assert_eq!(names.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_wide_names_each_batch_and_output_json_is_json() {
    let f = Fleet::start(SimConfig::default()).await;
    f.register(&rack("o", 87, &[Bmc::Ok, Bmc::Fail, Bmc::Ok])).await;
    const WIDE: [&str; 10] =
        ["MACHINE", "RESULT", "TIME", "FAILED ACTION", "ERROR", "BATCH", "WORKER", "ADMITTED", "FINISHED", "DETAIL"];

    let r = f.bmcctl(&["--output", "wide", "power", "on", "--selector", "rack=87"]).await;
    assert_eq!(r.code, Some(1), "{}{}", r.out, r.err);
    let header = r.out.lines().next().unwrap();
    assert_eq!(header.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect::<Vec<_>>(), WIDE, "{header}");
    assert!(r.out.contains("3 machines: 2 succeeded, 1 failed"), "{}", r.out);
    assert!(
        !r.out.contains('\x1b') && !r.err.contains('\x1b'),
        "no bar or colour off a terminal: {:?} {:?}",
        r.out,
        r.err
    );
    for (name, address, want) in
        [("o-1", "10.87.0.1", "succeeded"), ("o-2", "fail-2.rack87", "failed"), ("o-3", "10.87.0.3", "succeeded")]
    {
        // machine, result, time, failed action (two words when there is one), error, batch, worker, admitted, finished.
        let words: Vec<&str> = r.row(name).split_whitespace().collect();
        let skip = usize::from(want == "failed");
        assert_eq!(words[1], want, "{}", r.out);
        let id: ulid::Ulid =
            words[5 + skip].parse().unwrap_or_else(|e| panic!("{name}: batch `{}`: {e}\n{}", words[5 + skip], r.out));
        assert!(f.batches_at(address).contains_key(&id.to_string()), "{name}: batch {id} did not reach its BMC");
        let Reply::Status(s) = f.stack.producer.status(id).await else { panic!("status of {id}") };
        let result = s.result.as_ref().expect("a final result");
        assert_eq!(words[6 + skip], result.worker, "{}", r.out);
        // Fixed-width UTC with milliseconds (docs/BMCCTL.md, "Output").
        let at = |ms: u64| {
            let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap();
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.millisecond()
            )
        };
        assert_eq!(
            (words[7 + skip], words[8 + skip]),
            (at(result.admitted_at_ms).as_str(), at(result.finished_at_ms).as_str()),
            "{}",
            r.out
        );
    }
    assert!(r.row("o-2").contains("#0 power_on") && r.row("o-2").contains("bmc_error"), "{}", r.out);

    // json: one line per machine, as --json prints them; from the environment too.
    for (args, env) in [
        (&["--output", "json"][..], &[][..]),
        (&[][..], &[("BMCCTL_OUTPUT", "json")][..]),
        (&["--json", "--output", "wide"][..], &[][..]),
    ] {
        let argv = [args, &["power", "status", "--selector", "rack=87"]].concat();
        let r = f.bmcctl_with(&argv, "", env).await;
        assert_eq!(r.code, Some(1), "{args:?} {env:?}: {}{}", r.out, r.err);
        let lines = r.lines();
        assert_eq!(lines.len(), 3, "{args:?} {env:?}: {}", r.out);
        assert_eq!(
            (lines["o-1"]["result"].as_str(), lines["o-2"]["result"].as_str()),
            (Some("succeeded"), Some("failed")),
            "{}",
            r.out
        );
        assert_eq!(lines["o-3"]["results"][0]["data"]["power_state"], "on", "{}", r.out);
    }
    // The flag wins over the environment.
    let r = f
        .bmcctl_with(
            &["--output", "table", "power", "status", "--selector", "rack=87"],
            "",
            &[("BMCCTL_OUTPUT", "json")],
        )
        .await;
    assert!(r.out.starts_with("MACHINE  ") && r.row("o-1").contains("power=on"), "{}", r.out);
}

/// `script` (util-linux) runs a command on a pseudo-terminal; `None` (test
/// skipped) when it is not installed, unless `BMCFLEET_REQUIRE_PEERS=1`.
fn script() -> Option<std::path::PathBuf> {
    let found = ["/usr/bin/script", "/bin/script"].map(std::path::PathBuf::from).into_iter().find(|p| p.is_file());
    bmcfleet_testing::peers::or_skip(found, "script (util-linux) is not installed", "apt-get install util-linux")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_a_progress_line_in_colour_unless_no_color() {
    let Some(script) = script() else { return };
    let f = Fleet::start(SimConfig::default()).await;
    f.register(&rack("t", 86, &[Bmc::Ok, Bmc::Fail])).await;
    let on_tty = |no_color: Option<&str>| {
        let command = format!(
            "'{}' --nats-url '{}' power on --selector rack=86",
            bmcfleet_tests::bin("bmcctl").display(),
            f.stack.nats.url()
        );
        let mut cmd = tokio::process::Command::new(&script);
        cmd.args(["-q", "-e", "-c", &command, "/dev/null"])
            .env("TERM", "xterm")
            .env_remove("NO_COLOR")
            .env_remove("RUST_LOG");
        if let Some(v) = no_color {
            cmd.env("NO_COLOR", v);
        }
        async move {
            let out = cmd.output().await.unwrap();
            (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
        }
    };
    let (code, out) = on_tty(None).await;
    assert_eq!(code, Some(1), "{out:?}");
    assert!(out.contains("\r\x1b[2Kpower_on [") && out.contains("2/2 done"), "no progress line on a terminal: {out:?}");
    assert!(out.contains("\x1b[32m") && out.contains("\x1b[31m"), "no colour on a terminal: {out:?}");
    assert!(out.contains("t-2: ") && out.contains("bmc_error"), "a failure is shown as it happens: {out:?}");
    for no_color in ["1", ""] {
        let (code, out) = on_tty(Some(no_color)).await;
        assert_eq!(code, Some(1), "{out:?}");
        assert!(out.contains("\r\x1b[2Kpower_on ["), "NO_COLOR={no_color:?}: still a progress line: {out:?}");
        let coloured = out.contains("\x1b[3");
        assert_eq!(coloured, no_color.is_empty(), "NO_COLOR={no_color:?} (an empty value is unset): {out:?}");
    }

    // The bar is stderr's: with stdout redirected to a file it still shows on
    // the terminal, while the file gets the summary alone, uncoloured.
    let file = f.dir.path().join("summary.txt");
    let command = format!(
        "'{}' --nats-url '{}' power on --selector rack=86 > '{}'",
        bmcfleet_tests::bin("bmcctl").display(),
        f.stack.nats.url(),
        file.display()
    );
    let out = tokio::process::Command::new(&script)
        .args(["-q", "-e", "-c", &command, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .await
        .unwrap();
    let (tty, summary) = (String::from_utf8_lossy(&out.stdout).into_owned(), std::fs::read_to_string(&file).unwrap());
    assert_eq!(out.status.code(), Some(1), "{tty:?}");
    assert!(tty.contains("power_on [") && tty.contains("2/2 done"), "no bar on the terminal's stderr: {tty:?}");
    assert!(!tty.contains("MACHINE "), "the summary went to the terminal: {tty:?}");
    assert!(summary.starts_with("MACHINE ") && summary.contains("2 machines: 1 succeeded, 1 failed"), "{summary:?}");
    assert!(
        !summary.contains('\x1b') && !summary.contains("power_on ["),
        "a file gets no bar and no colour: {summary:?}"
    );
}

/// Plan mode (issue 30) on a fleet: `--plan` with a selector runs one plan
/// batch per machine, changes nothing on any simulated BMC, groups the
/// machines by identical plans with counts, and the audit log records the
/// batches as plans. Then the same command without `--plan` does it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_plan_changes_nothing_groups_identical_plans_and_is_audited() {
    let f = Fleet::start(SimConfig { record_calls: true, ..SimConfig::default() }).await;
    let label = [("rack", "80")];
    f.register(&[
        m("p80-a", "10.80.0.1", &label),
        m("p80-b", "10.80.0.2", &label),
        m("p80-c", "10.80.0.3", &label),
        // Its credential does not exist: its plan is that error, a group of its own.
        M { credentials: "missing", ..m("p80-d", "10.80.0.4", &label) },
    ])
    .await;
    let ok = ["10.80.0.1", "10.80.0.2", "10.80.0.3"];

    let r = f.bmcctl(&["power", "cycle", "--selector", "rack=80", "--plan"]).await;
    let text = format!("{}{}", r.out, r.err);
    for address in ok {
        assert!(f.sim.log().iter().all(|e| e.bmc != key(address)), "{address}: an action ran in plan mode: {text}");
        assert!(
            f.sim.calls(&key(address)).iter().all(|c| c.action.is_none()),
            "{address}: the simulator saw an action in plan mode"
        );
        assert_ne!(f.sim.power(&key(address)), Some(PowerState::On), "{address}");
    }
    assert!(text.contains("plans:\n"), "{text}");
    assert!(text.contains("  3 machines (p80-a, p80-b, p80-c): sim power_cycle Cycle\n"), "{text}");
    let lone = text.lines().find(|l| l.starts_with("  1 machine (p80-d): ")).unwrap_or_else(|| panic!("{text}"));
    assert!(!lone.contains("power_cycle"), "{lone}");
    assert_eq!(r.code, Some(1), "a machine without its plan fails the run: {text}");
    // The plan ran as a rollout with plan: true (durable, scheduled by the gateways).
    let list = f.bmcctl(&["--json", "rollout", "list", "--all"]).await;
    assert!(list.out.replace([' ', '\n'], "").contains("\"plan\":true"), "{}{}", list.out, list.err);

    // Plans are audited like batches, and say they are plans.
    let audit = f.bmcctl(&["--json", "audit", "--since", "1h"]).await;
    let plans: Vec<serde_json::Value> = audit
        .out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["what"]["batch_admitted"]["actions"][0] == "power_cycle")
        .collect();
    assert!(plans.len() >= 3 && plans.iter().all(|v| v["what"]["batch_admitted"]["plan"] == true), "{}", audit.out);

    // The same run without --plan cycles them.
    let r = f.bmcctl(&["power", "cycle", "--selector", "rack=80", "--max-parallel", "4"]).await;
    for address in ok {
        let batches = f.batches_at(address);
        assert_eq!(batches.values().flatten().collect::<Vec<_>>(), ["power_cycle"], "{address}: {}{}", r.out, r.err);
    }
    assert!(!r.out.contains("plans:"), "{}", r.out);
}
