//! Fleet state as an operator sees it (issue 19), through `bmcctl` against
//! real processes (nats-server, gateway, a worker polling every second,
//! `bmc-sim`):
//! - `bmcctl machine ls` before any worker ran (no state bucket yet) lists
//!   every machine with `-` for POWER, CONTACTABLE and LAST SEEN, and
//!   `--json` says `state: null`; once polled it shows what the worker
//!   recorded: `off`, `yes`, `Ns ago` for a BMC that answers, `no
//!   (bmc_error)` and `never` for one that fails every call (`fail-*`),
//!   and `--json` carries exactly the record the bucket holds;
//! - `bmcctl machine watch --json --selector` prints a `power_changed`
//!   (off→on) line when a batch powers a matching machine on, and nothing
//!   of a machine the selector leaves out; `machine watch NAME` prints the
//!   text line (time, machine, event, detail); Ctrl-C ends both with 0; an
//!   unknown NAME exits 2;
//! - `bmcctl watch` beside those machine events prints batch events only;
//! - under the shipped NATS accounts config, the `admin` user may do all of
//!   that (`machine ls`, `machine watch --selector`);
//! - the Grafana dashboard charts the fleet-state metrics.
//!
//! The watches run as child processes; their `watching ...` line on stderr
//! says when they are subscribed, and every wait has a deadline.

use bmcfleet_schema::state::MachineState;
use bmcfleet_schema::Subjects;
use bmcfleet_testing::{SimConfig, SimServer};
use bmcfleet_tests::producer::{wait_gateway, wait_partitions_owned, Topology};
use bmcfleet_tests::{NatsServer, Process, Producer};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// The worker's flags: polls every second; no circuit breaker, so a failing
/// BMC keeps its own error code rather than `circuit_open`.
const POLLS: [&str; 6] = ["--poll-interval", "1s", "--poll-timeout", "900ms", "--breaker-threshold", "0"];

/// nats-server, a gateway, the simulator and (once started) one worker.
struct Env {
    nats: NatsServer,
    topology: Topology,
    /// A client of bmcctl's NATS user (reads the state bucket directly).
    producer: Producer,
    sim: SimServer,
    _gateway: Process,
    worker: Option<Process>,
    /// bmcctl's NATS user flags (none: no authentication).
    user: Vec<String>,
    dir: tempfile::TempDir,
}

/// A machine to register: name, address, labels.
type Registered<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// What `bmcctl` did: exit code, stdout, stderr.
type Run = bmcfleet_tests::process::Ran;

impl Env {
    /// Everything but the worker; the operator's credential `fleet` is stored.
    async fn start() -> Env {
        let sim = SimServer::start(SimConfig::default()).await.unwrap();
        let nats = NatsServer::start();
        let topology = Topology::default();
        let gateway = topology.gateway(&nats, &[]);
        let producer = Producer::new(nats.client().await);
        wait_gateway(&producer).await;
        let env = Env {
            nats,
            topology,
            producer,
            sim,
            _gateway: gateway,
            worker: None,
            user: vec![],
            dir: tempfile::tempdir().unwrap(),
        };
        env.put_credential().await;
        env
    }

    /// nats-server with the shipped accounts config, gateway and polling
    /// worker under their own users, and bmcctl as the `admin` user.
    async fn shipped() -> Env {
        use bmcfleet_tests::shipped::{connect, shipped_with, PASSWORDS};
        let s = shipped_with(Topology::default(), SimConfig::default(), &[], &POLLS).await;
        let (admin, _) = connect(&s.nats, "admin", PASSWORDS[4].1).await;
        let producer = Producer::new(admin);
        wait_gateway(&producer).await;
        wait_partitions_owned(&connect(&s.nats, "worker", PASSWORDS[1].1).await.0, &s.topo.subjects()).await;
        let user = ["--nats-user", "admin", "--nats-password", PASSWORDS[4].1].map(str::to_owned).to_vec();
        let env = Env {
            nats: s.nats,
            topology: s.topo,
            producer,
            sim: s.sim,
            _gateway: s.gateway,
            worker: Some(s.worker),
            user,
            dir: tempfile::tempdir().unwrap(),
        };
        env.put_credential().await;
        env
    }

    /// The operator's credential `fleet`, for every machine here.
    async fn put_credential(&self) {
        let public = self.topology.sealing.public.clone();
        let put = self
            .bmcctl_stdin(
                &["cred", "put", "fleet", "--username", "admin", "--password-stdin", "--workers-public-key", &public],
                "pw\n",
            )
            .await;
        assert_eq!(put.code, Some(0), "{}{}", put.out, put.err);
    }

    async fn start_worker(&mut self) {
        let worker = self.topology.worker(&self.nats, "w0", self.sim.addr(), &POLLS);
        self.worker = Some(worker);
        wait_partitions_owned(&self.producer.client, &self.topology.subjects()).await;
    }

    fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"));
        cmd.args(["--nats-url", &self.nats.url()])
            .args(&self.user)
            .args(args)
            .env("USER", "watch-test")
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1");
        cmd
    }

    async fn bmcctl(&self, args: &[&str]) -> Run {
        self.bmcctl_stdin(args, "").await
    }

    async fn bmcctl_stdin(&self, args: &[&str], stdin: &str) -> Run {
        bmcfleet_tests::process::run_piped(self.command(args), stdin).await
    }

    /// Register simulated machines (credential `fleet`) with `bmcctl machine apply`.
    async fn register(&self, machines: &[Registered<'_>]) {
        let mut yaml = String::from("machines:\n");
        for (name, address, labels) in machines {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}: '{v}'")).collect();
            yaml.push_str(&format!(
                "  - {{name: {name}, address: '{address}', protocol: sim, credentials: fleet, labels: {{{}}}}}\n",
                labels.join(", ")
            ));
        }
        let file = self.dir.path().join(format!("machines-{}.yaml", ulid::Ulid::new()));
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

    /// The machine's record in the state bucket, as the worker wrote it.
    async fn stored_state(&self, machine: &str) -> Option<MachineState> {
        let js = async_nats::jetstream::new(self.producer.client.clone());
        let kv = js.get_key_value(self.subjects().state_bucket()).await.ok()?;
        let bytes = kv.get(machine).await.ok()??;
        Some(serde_json::from_slice(&bytes).expect("a machine state record"))
    }

    fn subjects(&self) -> Subjects {
        self.topology.subjects()
    }

    /// Start a long-running bmcctl (a watch) and wait until it says it is subscribed.
    async fn watch(&self, args: &[&str]) -> Watch {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn bmcctl");
        let (out_tx, out) = unbounded_channel();
        let (err_tx, err) = unbounded_channel();
        let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = stdout.next_line().await {
                let _ = out_tx.send(line);
            }
        });
        tokio::spawn(async move {
            while let Ok(Some(line)) = stderr.next_line().await {
                let _ = err_tx.send(line);
            }
        });
        let mut w = Watch { what: args.join(" "), child, out, err, printed: vec![], said: vec![] };
        w.ready().await;
        w
    }
}

/// A running `bmcctl ... watch`: what it printed, line by line.
struct Watch {
    what: String,
    child: tokio::process::Child,
    out: UnboundedReceiver<String>,
    err: UnboundedReceiver<String>,
    /// Stdout lines read so far.
    printed: Vec<String>,
    /// Stderr lines read so far.
    said: Vec<String>,
}

impl Watch {
    /// Until the `watching ...` line: from then on it is subscribed.
    async fn ready(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match tokio::time::timeout_at(deadline, self.err.recv()).await {
                Ok(Some(line)) => {
                    let ready = line.starts_with("watching ");
                    self.said.push(line);
                    if ready {
                        return;
                    }
                }
                Ok(None) => {
                    panic!("`{}` ended before subscribing ({:?}): {:?}", self.what, self.child.try_wait(), self.said)
                }
                Err(_) => panic!("`{}` did not subscribe within 20s: {:?}", self.what, self.said),
            }
        }
    }

    /// The next printed line for which `pred` holds (earlier ones are kept in `printed`).
    async fn line(&mut self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.out.recv()).await {
                Ok(Some(line)) => {
                    self.printed.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Ok(None) => panic!(
                    "`{}` ended ({:?}) before printing {what}: {:#?}\nstderr: {:?}",
                    self.what,
                    self.child.try_wait(),
                    self.printed,
                    self.said
                ),
                Err(_) => panic!(
                    "`{}` printed no {what} within {timeout:?}: {:#?}\nstderr: {:?}",
                    self.what, self.printed, self.said
                ),
            }
        }
    }

    /// Ctrl-C, and the exit code it leaves with.
    async fn interrupt(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id().expect("running") as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
        let status = tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("`{}` ignored Ctrl-C", self.what));
        status.unwrap().code()
    }
}

/// The cell of `column` in `row`, by the header's column positions.
fn cell<'a>(header: &str, row: &'a str, column: &str) -> &'a str {
    const COLUMNS: [&str; 9] =
        ["NAME", "ADDRESS", "PROTOCOL", "TENANT", "POWER", "CONTACTABLE", "LAST SEEN", "HEALTH", "LABELS"];
    let start = header.find(column).unwrap_or_else(|| panic!("no {column} column: {header}"));
    let i = COLUMNS.iter().position(|c| *c == column).unwrap();
    let end = COLUMNS.get(i + 1).map(|next| header.find(next).unwrap()).unwrap_or(usize::MAX).min(row.len());
    row.get(start..end).unwrap_or("").trim()
}

/// The columns of `machine ls --output wide`.
const WIDE: [&str; 19] = [
    "NAME",
    "ADDRESS",
    "PROTOCOL",
    "TENANT",
    "POWER",
    "CONTACTABLE",
    "LAST SEEN",
    "HEALTH",
    "LAST CHANGED",
    "FAILURES",
    "PROVIDER",
    "FIRMWARE",
    "WATTS",
    "CLOCK DRIFT",
    "WORKER",
    "CREDENTIALS",
    "LABELS",
    "LAST ERROR",
    "HEALTH REASONS",
];

/// Every cell of `row` by column, from the header's column positions
/// (`columns` in their order; the last one runs to the end of the row).
fn cells<'a>(header: &str, row: &'a str, columns: &[&'a str]) -> BTreeMap<&'a str, &'a str> {
    let mut starts = vec![];
    for c in columns {
        let from = starts.last().copied().unwrap_or(0);
        starts
            .push(from + header[from..].find(c).unwrap_or_else(|| panic!("no {c} column after byte {from}: {header}")));
    }
    let mut out = BTreeMap::new();
    for (i, c) in columns.iter().enumerate() {
        let end = starts.get(i + 1).copied().unwrap_or(usize::MAX).min(row.len());
        out.insert(*c, row.get(starts[i]..end).unwrap_or("").trim());
    }
    out
}

/// The row of `machine` in `machine ls` output.
fn row<'a>(out: &'a str, machine: &str) -> &'a str {
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(machine))
        .unwrap_or_else(|| panic!("no row for {machine}:\n{out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_ls_shows_power_contactable_and_last_seen_from_the_polls() {
    let mut env = Env::start().await;
    env.register(&[("ls-ok", "10.93.0.1", &[("rack", "93")]), ("ls-fail", "fail-1.rack93", &[("rack", "93")])]).await;

    // No worker has run: there is no state bucket, and ls says so with dashes.
    let js = async_nats::jetstream::new(env.producer.client.clone());
    assert!(
        js.get_key_value(env.subjects().state_bucket()).await.is_err(),
        "the state bucket exists before any worker ran"
    );
    let r = env.bmcctl(&["machine", "ls"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.err.is_empty(), "a missing state bucket is no warning: {}", r.err);
    let header = r.out.lines().next().unwrap();
    for name in ["ls-ok", "ls-fail"] {
        for column in ["POWER", "CONTACTABLE", "LAST SEEN"] {
            assert_eq!(cell(header, row(&r.out, name), column), "-", "{name} {column}:\n{}", r.out);
        }
    }
    let listed = env.ls_json().await;
    assert_eq!(listed.keys().map(String::as_str).collect::<Vec<_>>(), ["ls-fail", "ls-ok"]);
    for (name, line) in &listed {
        assert!(line.get("state").is_some_and(Value::is_null), "{name}: {line}");
        assert_eq!(line["labels"]["rack"], "93", "the record is in the line: {line}");
    }

    // The worker polls them: one answers (the simulator starts powered off), one fails every call.
    env.start_worker().await;
    let polled = bmcfleet_tests::poll_until(Duration::from_secs(15), Duration::from_millis(200), || async {
        let (ok, failed) = (env.stored_state("ls-ok").await?, env.stored_state("ls-fail").await?);
        (ok.contactable && !failed.contactable).then_some(())
    })
    .await;
    assert!(
        polled.is_some(),
        "not polled within 15s: {:?} {:?}",
        env.stored_state("ls-ok").await,
        env.stored_state("ls-fail").await
    );

    let r = env.bmcctl(&["machine", "ls"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    let header = r.out.lines().next().unwrap();
    assert!(header.contains("POWER") && header.contains("CONTACTABLE") && header.contains("LAST SEEN"), "{header}");
    let ok = row(&r.out, "ls-ok");
    assert_eq!((cell(header, ok, "POWER"), cell(header, ok, "CONTACTABLE")), ("off", "yes"), "\n{}", r.out);
    let seen = cell(header, ok, "LAST SEEN");
    let secs: u64 = seen
        .strip_suffix("s ago")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("LAST SEEN `{seen}` is not `Ns ago`:\n{}", r.out));
    assert!(secs < 30, "last seen {secs}s ago, polled every second:\n{}", r.out);
    let failed = row(&r.out, "ls-fail");
    assert_eq!(cell(header, failed, "POWER"), "unknown", "not contactable: never a power:\n{}", r.out);
    assert_eq!(cell(header, failed, "CONTACTABLE"), "no (bmc_error)", "\n{}", r.out);
    assert_eq!(cell(header, failed, "LAST SEEN"), "never", "\n{}", r.out);
    assert_eq!(cell(header, failed, "LABELS"), "rack=93");

    // --json: the record the bucket holds (written on change only, so stable
    // here), with the partition record's later observation and answer
    // (issue 34: written every --state-seen-interval), and its freshness.
    let listed = env.ls_json().await;
    for name in ["ls-ok", "ls-fail"] {
        let stored = serde_json::to_value(env.stored_state(name).await.unwrap()).unwrap();
        assert_eq!(moving(&listed[name]["state"]), moving(&stored), "{name}");
        let at = |v: &Value| v["observed_ms"].as_u64().unwrap_or(0);
        assert!(at(&listed[name]["state"]) >= at(&stored), "{name}: the later observation");
        assert_eq!(listed[name]["freshness"], "current", "{name}");
    }
    assert_eq!(
        (listed["ls-ok"]["state"]["power"].as_str(), listed["ls-ok"]["state"]["worker"].as_str()),
        (Some("off"), Some("w0"))
    );
    assert_eq!(listed["ls-fail"]["state"]["error_code"], "bmc_error");

    // --output json is --json; so is BMCCTL_OUTPUT=json, unless --output says otherwise.
    let json = env.bmcctl(&["machine", "ls", "--output", "json"]).await;
    assert_eq!(json.code, Some(0), "{}{}", json.out, json.err);
    let lines = |out: &str| {
        out.lines().map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect::<Vec<_>>()
    };
    let steady = |v: Vec<Value>| {
        v.into_iter()
            .map(|mut m| {
                m["state"] = moving(&m["state"]);
                m
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(steady(lines(&json.out)), steady(listed.values().cloned().collect()), "{}", json.out);
    let by_env = env.command(&["machine", "ls"]).env("BMCCTL_OUTPUT", "json").output().await.unwrap();
    assert_eq!(steady(lines(&String::from_utf8_lossy(&by_env.stdout))), steady(lines(&json.out)));
    let table =
        env.command(&["machine", "ls", "--output", "table"]).env("BMCCTL_OUTPUT", "json").output().await.unwrap();
    assert!(String::from_utf8_lossy(&table.stdout).starts_with("NAME "), "the flag wins over the environment");

    // --output wide: the same machines with more columns; the last error is the stored reason.
    let r = env.bmcctl(&["machine", "ls", "--output", "wide"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    let header = r.out.lines().next().unwrap();
    assert_eq!(header.split("  ").filter(|c| !c.is_empty()).map(str::trim).collect::<Vec<_>>(), WIDE, "{header}");
    assert_eq!(r.out.lines().count(), 3, "a header and a row per machine:\n{}", r.out);
    let failed = cells(header, row(&r.out, "ls-fail"), &WIDE);
    let stored = env.stored_state("ls-fail").await.unwrap();
    let reason = stored.reason.as_deref().expect("a failure's reason").replace(['\n', '\r'], " ");
    assert_eq!(failed["LAST ERROR"], reason, "\n{}", r.out);
    assert_eq!(
        (
            failed["NAME"],
            failed["ADDRESS"],
            failed["POWER"],
            failed["CONTACTABLE"],
            failed["LAST SEEN"],
            failed["WORKER"],
            failed["CREDENTIALS"],
            failed["LABELS"]
        ),
        ("ls-fail", "fail-1.rack93", "unknown", "no (bmc_error)", "never", "w0", "fleet", "rack=93"),
        "\n{}",
        r.out
    );
    assert!(failed["FAILURES"].parse::<u32>().is_ok_and(|n| n >= 1), "\n{}", r.out);
    let ok = cells(header, row(&r.out, "ls-ok"), &WIDE);
    assert_eq!(
        (ok["POWER"], ok["CONTACTABLE"], ok["PROVIDER"], ok["FAILURES"], ok["LAST ERROR"]),
        ("off", "yes", "sim", "0", "-"),
        "\n{}",
        r.out
    );
    assert!(ok["LAST CHANGED"].ends_with(" ago"), "\n{}", r.out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_watch_prints_power_changed_when_a_batch_powers_a_machine_on() {
    let mut env = Env::start().await;
    env.register(&[("wa-1", "10.94.0.1", &[("rack", "94")]), ("wa-2", "10.95.0.1", &[("rack", "95")])]).await;
    env.start_worker().await;
    // Both polled (their first power_changed, to off, is behind us).
    let polled = bmcfleet_tests::poll_until(Duration::from_secs(15), Duration::from_millis(100), || async {
        let (a, b) = (env.stored_state("wa-1").await?, env.stored_state("wa-2").await?);
        (a.power.is_some() && b.power.is_some()).then_some(())
    })
    .await;
    assert!(polled.is_some(), "not polled within 15s");

    let r = env.bmcctl(&["machine", "watch", "nobody-here"]).await;
    assert_eq!(r.code, Some(2), "{}{}", r.out, r.err);
    assert!(r.err.contains("machine_not_found") && r.err.contains("`nobody-here`"), "{}", r.err);

    let mut selected = env.watch(&["--json", "machine", "watch", "--selector", "rack=94"]).await;
    let mut named = env.watch(&["machine", "watch", "wa-2"]).await;
    let mut batches = env.watch(&["--json", "watch"]).await;

    // wa-2 first: the named watch prints it as text.
    let on = env.bmcctl(&["power", "on", "--machine", "wa-2", "--wait"]).await;
    assert_eq!(on.code, Some(0), "{}{}", on.out, on.err);
    let line = named.line("power_changed of wa-2", Duration::from_secs(10), |l| l.contains("power_changed")).await;
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[1..], ["wa-2", "power_changed", "off→on"], "{line}");
    assert!(words[0].contains('T') && words[0].ends_with('Z'), "an RFC 3339 time first: {line}");

    // Then wa-1: the selector's watch prints it, and never printed wa-2's (published before).
    let on = env.bmcctl(&["power", "on", "--machine", "wa-1", "--wait"]).await;
    assert_eq!(on.code, Some(0), "{}{}", on.out, on.err);
    let line = selected
        .line("power_changed to on", Duration::from_secs(10), |l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| v["event"]["power_changed"]["to"] == "on")
        })
        .await;
    let event: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(event["machine"], "wa-1", "{line}");
    assert_eq!(event["event"]["power_changed"]["from"], "off", "{line}");
    assert_eq!(
        (event["state"]["power"].as_str(), event["state"]["contactable"].as_bool()),
        (Some("on"), Some(true)),
        "{line}"
    );
    assert!(event["at_ms"].as_u64().is_some(), "{line}");
    for l in &selected.printed {
        let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("--json printed a non-JSON line ({e}): {l}"));
        assert_eq!(v["machine"], "wa-1", "--selector rack=94 printed another machine's event: {l}");
    }
    assert!(
        named.printed.iter().all(|l| l.contains(" wa-2 ")),
        "the named watch printed another machine: {:?}",
        named.printed
    );

    // A batch after both changes: `bmcctl watch` has seen the machine
    // events by the time it prints this batch's end, and printed batch events only.
    let status = env.bmcctl(&["power", "status", "--machine", "wa-1", "--wait"]).await;
    assert_eq!(status.code, Some(0), "{}{}", status.out, status.err);
    let mut finished = 0;
    while finished < 3 {
        batches.line("batch_finished", Duration::from_secs(10), |l| l.contains("\"batch_finished\"")).await;
        finished += 1;
    }
    for l in &batches.printed {
        let v: Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("`bmcctl watch --json` printed a non-JSON line ({e}): {l}"));
        assert!(v["batch"].as_str().is_some_and(|b| b.parse::<ulid::Ulid>().is_ok()), "not a batch event: {l}");
        assert!(v.get("machine").is_none() && v.get("state").is_none(), "a machine event in `bmcctl watch`: {l}");
    }

    // machine ls agrees.
    let listed = env.ls_json().await;
    assert_eq!(listed["wa-1"]["state"]["power"], "on", "{}", listed["wa-1"]);

    // Ctrl-C ends a watch, successfully.
    assert_eq!(selected.interrupt().await, Some(0));
    assert_eq!(named.interrupt().await, Some(0));
    drop(batches);
}

/// Under the shipped NATS accounts config, as its `admin` user: what it may
/// do is enough to read the state bucket, follow the registry (`--selector`)
/// and receive the machine events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_admin_user_lists_and_watches_machine_state() {
    let env = Env::shipped().await;
    env.register(&[("adm-1", "10.96.0.1", &[("rack", "96")])]).await;
    let polled = bmcfleet_tests::poll_until(Duration::from_secs(15), Duration::from_millis(100), || async {
        env.stored_state("adm-1").await.filter(|s| s.power.is_some())
    })
    .await;
    assert!(polled.is_some(), "not polled within 15s");

    let r = env.bmcctl(&["machine", "ls"]).await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    assert!(r.err.is_empty(), "no warning (a refused read would be one): {}", r.err);
    let header = r.out.lines().next().unwrap();
    let row = row(&r.out, "adm-1");
    assert_eq!((cell(header, row, "POWER"), cell(header, row, "CONTACTABLE")), ("off", "yes"), "\n{}", r.out);

    let mut watch = env.watch(&["--json", "machine", "watch", "--selector", "rack=96"]).await;
    let on = env.bmcctl(&["power", "on", "--machine", "adm-1", "--wait"]).await;
    assert_eq!(on.code, Some(0), "{}{}", on.out, on.err);
    let line = watch
        .line("power_changed to on", Duration::from_secs(10), |l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| v["event"]["power_changed"]["to"] == "on")
        })
        .await;
    assert!(line.contains("\"machine\":\"adm-1\""), "{line}");
    assert_eq!(watch.interrupt().await, Some(0));
}

#[test]
fn the_dashboard_charts_the_fleet_state() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/bmcfleet.json");
    let d: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).expect("valid JSON");
    let panels = d["panels"].as_array().unwrap();
    let panel = |title: &str| {
        panels
            .iter()
            .find(|p| p["title"].as_str().is_some_and(|t| t.starts_with(title)))
            .unwrap_or_else(|| panic!("no panel `{title}`"))
    };
    let exprs = |p: &Value| {
        p["targets"].as_array().unwrap().iter().map(|t| t["expr"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    for (title, metric, shape) in [
        ("Machines by power state and contactable", "bmcfleet_machines{", "sum by (power, contactable)"),
        ("Polls by outcome", "bmcfleet_polls_total{", "sum by (outcome) (rate("),
        ("Poll duration p50 / p99", "bmcfleet_poll_duration_seconds_bucket{", "histogram_quantile(0.99"),
        ("Polls behind schedule", "bmcfleet_polls_behind_seconds{", "max("),
        ("State events by kind", "bmcfleet_state_events_total{", "sum by (kind) (rate("),
    ] {
        let p = panel(title);
        let e = exprs(p);
        assert!(
            e.iter().any(|x| x.contains(metric) && x.contains(shape) && x.contains("job=~\"$job\"")),
            "{title}: {e:?}"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        assert!(p["targets"].as_array().unwrap().iter().all(|t| t["datasource"]["uid"] == "${datasource}"), "{title}");
    }
    let stacking = &panel("Machines by power state")["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"];
    assert_eq!(stacking, "normal", "machines are stacked");
    assert!(exprs(panel("Poll duration")).iter().any(|x| x.contains("histogram_quantile(0.5,")));
    let ids: Vec<u64> = panels.iter().map(|p| p["id"].as_u64().unwrap()).collect();
    assert_eq!(ids.len(), ids.iter().collect::<std::collections::BTreeSet<_>>().len(), "panel ids are unique: {ids:?}");
}

/// A state record without what moves with every poll (the observation
/// and answer times a partition record brings in between writes).
fn moving(state: &Value) -> Value {
    let mut v = state.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("observed_ms");
        o.remove("last_seen_ms");
    }
    v
}
