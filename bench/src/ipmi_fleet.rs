//! `ipmi-fleet`: issue 17's fleet measurements. One `bmc-ipmi-fleet`
//! process serves N RMCP+ BMCs (a fixed delay before every reply); bmcfleet
//! (nats-server, gateway and one worker, as processes), FreeIPMI and
//! ipmitool each read the power state of every BMC (workload a), then set
//! PXE boot, power-cycle and read the power state of every BMC (workload
//! b), side by side in one run; and the worker's threads, memory and
//! descriptors are read while every BMC's session is live.
//!
//! Everything talks to 127.0.0.1 only: the responder listens there, the
//! batches name `127.0.0.1:PORT`, the tools get `-h 127.0.0.1:...`/`-H
//! 127.0.0.1`, and the worker may reach no ad hoc range but loopback and
//! the (unused) simulated 10/8.

use crate::fleet::{target_batch, Collector, Fleet, FleetOptions};
use crate::harness::{self, Bench as _, Child};
use crate::proc::{CpuMeter, CpuUsage, Meter};
use crate::report::{Section, Table};
use crate::stats::{kib_each, median, mib, num, ops, ratio};
use anyhow::{bail, Context as _};
use bmcfleet_schema::{Action, BatchId, BatchState, BootDevice, BootDeviceRequest, Encoding, PowerOp, Protocol};
use nix::sys::signal::Signal;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod rollout;

/// The responder's account (its defaults), used by every client.
pub(crate) const USER: &str = "admin";
pub(crate) const PASSWORD: &str = "password";

#[derive(Clone, Debug)]
pub struct Options {
    /// Fleet sizes (one responder and one deployment per size).
    pub sizes: Vec<usize>,
    /// The responder's delay before every reply.
    pub latency: Duration,
    pub reps: usize,
    /// Submit requests in flight (bmcfleet).
    pub submit_concurrency: usize,
    /// Partitions of the deployment.
    pub partitions: u16,
    /// ipmitool processes in parallel.
    pub ipmitool_parallel: usize,
    /// ipmitool runs over the whole fleet only if (a) + (b) over all
    /// repetitions is expected to take at most this long...
    pub ipmitool_budget: Duration,
    /// ...else over the first this many BMCs (labelled so).
    pub ipmitool_cap: usize,
    /// Hosts per `ipmipower` invocation (more are split into several
    /// invocations; see the section's method text for why)...
    pub ipmipower_chunk: usize,
    /// ...of which this many run at a time.
    pub ipmipower_parallel: usize,
    /// `ipmi-config -F` (its maximum is 1024).
    pub config_fanout: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sizes: vec![1000, 10_000],
            latency: Duration::from_millis(20),
            reps: 3,
            submit_concurrency: 256,
            partitions: 16,
            ipmitool_parallel: 16,
            ipmitool_budget: Duration::from_secs(180),
            ipmitool_cap: 1000,
            ipmipower_chunk: 2000,
            ipmipower_parallel: 2,
            config_fanout: 1024,
        }
    }
}

fn dur(d: Duration) -> String {
    bmcfleet_schema::duration::format(d)
}

/// One `bmc-ipmi-fleet` process: BMC `i` on UDP port `base + i` of 127.0.0.1.
pub(crate) struct Responder {
    pub(crate) child: Child,
    pub(crate) base: u16,
    count: usize,
}

/// First port of the ephemeral range (`ip_local_port_range`): the
/// responder's ports lie below it, so no client socket (ours, a tool's, or
/// another process's on this host) can hold one of them.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32768)
}

/// Base ports to try, 20000 first, all below the ephemeral range where possible.
fn candidate_bases(count: usize) -> Vec<u16> {
    let top = usize::from(ephemeral_start());
    let mut v: Vec<usize> =
        std::iter::once(20_000).chain((10_000..top).step_by(1000)).filter(|b| b + count <= top).collect();
    if v.is_empty() {
        // A fleet larger than the ports below the ephemeral range.
        v.extend((1024..=65_536usize.saturating_sub(count)).step_by(1000).take(30));
    }
    v.dedup();
    v.into_iter().filter_map(|b| u16::try_from(b).ok()).collect()
}

/// RMCP/ASF Presence Ping (message tag `tag`).
fn presence_ping(tag: u8) -> [u8; 12] {
    [0x06, 0x00, 0xFF, 0x06, 0x00, 0x00, 0x11, 0xBE, 0x80, tag, 0x00, 0x00]
}

/// Whether the BMC on `port` answers a presence ping with a pong.
async fn pongs(port: u16) -> bool {
    let Ok(socket) = tokio::net::UdpSocket::bind("127.0.0.1:0").await else { return false };
    if socket.connect(("127.0.0.1", port)).await.is_err() {
        return false;
    }
    for tag in 1..=3u8 {
        if socket.send(&presence_ping(tag)).await.is_err() {
            return false;
        }
        let mut buf = [0u8; 64];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf)).await {
            // ASF message type 0x40: Presence Pong.
            if n >= 12 && buf[8] == 0x40 {
                return true;
            }
        }
    }
    false
}

impl Responder {
    /// Start `count` BMCs with `latency`, and wait until they answer.
    async fn start(count: usize, latency: Duration) -> anyhow::Result<Responder> {
        Self::start_with(count, latency, &[]).await
    }

    /// [`Responder::start`] with more `bmc-ipmi-fleet` arguments.
    pub(crate) async fn start_with(count: usize, latency: Duration, extra: &[String]) -> anyhow::Result<Responder> {
        let program = harness::workspace_bin("bmc-ipmi-fleet")?;
        let mut last = None;
        for base in candidate_bases(count) {
            let args: Vec<String> = [
                "--count",
                &count.to_string(),
                "--base-port",
                &base.to_string(),
                "--ip",
                "127.0.0.1",
                "--latency",
                &dur(latency),
                "--suites",
                "3,17",
                "--user",
                USER,
                "--password",
                PASSWORD,
                "--session-limit",
                "32",
                "--idle-timeout",
                "60s",
                "--threads",
                "2",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain(extra.iter().cloned())
            .collect();
            let mut child = harness::spawn(&program, "bmc-ipmi-fleet", &args, &[])?;
            match Self::wait_ready(&mut child, base, count).await {
                Ok(()) => return Ok(Responder { child, base, count }),
                // A port of this range is taken: try the next range.
                Err(e) if child.try_wait().is_some() && child.log_text().contains("binding") => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no port range for {count} BMCs")))
    }

    /// Ready: every socket is bound (the binary prints `ready` on stdout,
    /// which the harness discards, right after binding them all, so its
    /// socket count is the signal), and the first and last BMC answer a
    /// presence ping (the serving tasks run).
    async fn wait_ready(child: &mut Child, base: u16, count: usize) -> anyhow::Result<()> {
        let end = Instant::now() + Duration::from_secs(120);
        loop {
            child.ensure_running()?;
            let pid = child.pid().context("responder pid")?;
            if harness::socket_count(pid).unwrap_or(0) >= count
                && pongs(base).await
                && pongs(base + (count - 1) as u16).await
            {
                return Ok(());
            }
            if Instant::now() >= end {
                bail!("bmc-ipmi-fleet did not become ready; log:\n{}", child.log_tail(20));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn port(&self, i: usize) -> u16 {
        self.base + i as u16
    }

    /// FreeIPMI host lists for the first `n` BMCs, `chunk` hosts per list
    /// (hostrange syntax: `127.0.0.1:[20000-21999]`).
    fn host_ranges(&self, n: usize, chunk: usize) -> Vec<String> {
        (0..n.min(self.count))
            .step_by(chunk.max(1))
            .map(|s| {
                let e = (s + chunk).min(n) - 1;
                if s == e {
                    format!("127.0.0.1:{}", self.port(s))
                } else {
                    format!("127.0.0.1:[{}-{}]", self.port(s), self.port(e))
                }
            })
            .collect()
    }
}

/// What one client measured in one run of one workload.
#[derive(Clone, Debug, Default)]
struct Run {
    /// BMCs the run covered.
    bmcs: usize,
    makespan: Duration,
    /// BMCs that got through every step (`ok_upper` differs when the tool's
    /// output cannot say which BMC failed: FreeIPMI prints hosts without ports).
    ok: usize,
    ok_upper: usize,
    /// Per-step successes (FreeIPMI workload b: config / cycle / status).
    steps: Vec<usize>,
    /// Admission time of all batches (bmcfleet).
    submit: Option<Duration>,
    /// Failure reasons and how many BMCs each.
    failures: BTreeMap<String, usize>,
    cpu: Option<CpuUsage>,
    /// Datagrams the kernel dropped during the run on the worker's sockets
    /// (bmcfleet runs) and on the responder's (receive buffer full).
    drops: UdpDrops,
}

/// Kernel UDP drops on the worker's and the responder's sockets.
#[derive(Clone, Copy, Debug, Default)]
struct UdpDrops {
    worker: Option<u64>,
    responder: Option<u64>,
}

impl UdpDrops {
    fn now(worker: Option<u32>, responder: &Responder) -> UdpDrops {
        UdpDrops {
            worker: worker.and_then(harness::udp_drops),
            responder: responder.child.pid().and_then(harness::udp_drops),
        }
    }

    /// Drops since `before`.
    fn since(self, before: UdpDrops) -> UdpDrops {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        UdpDrops { worker: d(self.worker, before.worker), responder: d(self.responder, before.responder) }
    }
}

impl Run {
    fn cpu_of(&self, name: &str) -> f64 {
        self.cpu.as_ref().and_then(|c| c.used.iter().find(|(n, _)| n == name).map(|x| x.1)).unwrap_or(f64::NAN)
    }
}

/// The workloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Workload {
    /// Power status of every BMC.
    Status,
    /// Boot PXE, power cycle, power status of every BMC.
    Cycle,
}

impl Workload {
    fn actions(self) -> Vec<Action> {
        match self {
            Workload::Status => vec![Action::Power(PowerOp::Status)],
            Workload::Cycle => vec![
                Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false }),
                Action::Power(PowerOp::Cycle),
                Action::Power(PowerOp::Status),
            ],
        }
    }

    /// ipmitool commands in order, each with the text its success prints.
    fn ipmitool_steps(self) -> &'static [(&'static [&'static str], &'static str)] {
        match self {
            Workload::Status => &[(&["power", "status"], "Chassis Power is")],
            Workload::Cycle => &[
                (&["chassis", "bootdev", "pxe"], "Set Boot Device to pxe"),
                (&["power", "cycle"], "Chassis Power Control: Cycle"),
                (&["power", "status"], "Chassis Power is on"),
            ],
        }
    }
}

/// The clients, in table order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Client {
    /// bmcfleet on a worker that has no session yet.
    Cold,
    /// bmcfleet with every BMC's session already open.
    Warm,
    FreeIpmi,
    Ipmitool,
}

/// Meters for one run: the deployment's processes (when running), the responder, and the bench with the tools it ran.
fn meters(fleet: &Fleet, worker: Option<u32>, responder: &Responder) -> Vec<Meter> {
    let mut m = vec![];
    if let Some(pid) = worker {
        m.push(Meter::pid("worker", Some(pid)));
        m.push(Meter::pid("gateway", fleet.gateway.pid()));
        m.push(Meter::pid("nats-server", fleet.nats.pid()));
    }
    m.push(Meter::pid("responder", responder.child.pid()));
    m.push(Meter::this_process_with_children("client"));
    m
}

/// `127.0.0.1:20005` → `127.0.0.1:PORT`, so that one reason counts once.
fn without_ports(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("127.0.0.1:") {
        out.push_str(&rest[..at + "127.0.0.1:".len()]);
        rest = &rest[at + "127.0.0.1:".len()..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("PORT");
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// Why the batches `failed` failed: the first failed action's error code and
/// message, from their status records (at most 1,000 read).
async fn failure_reasons(fleet: &Fleet, failed: &[BatchId]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    if failed.is_empty() {
        return out;
    }
    let kv = match async_nats::jetstream::new(fleet.client.clone()).get_key_value(fleet.subjects.batches_bucket()).await
    {
        Ok(kv) => kv,
        Err(e) => {
            out.insert(format!("(status bucket unreadable: {e})"), failed.len());
            return out;
        }
    };
    for id in failed.iter().take(1000) {
        let status = match kv.get(id.to_string()).await {
            Ok(Some(bytes)) => Encoding::MessagePack.decode::<bmcfleet_schema::BatchStatus>(&bytes).ok(),
            _ => None,
        };
        let reason = match status {
            Some(s) => {
                let results = s.result.as_ref().map_or(&s.results, |r| &r.results);
                match results.iter().find(|r| r.error.is_some()) {
                    Some(r) => {
                        let e = r.error.as_ref().expect("checked");
                        let code = serde_json::to_value(e.code)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_else(|| format!("{:?}", e.code));
                        format!("`{code}` in {}: {}", r.action, without_ports(&e.message))
                    }
                    None => format!(
                        "{:?} without an action error ({} of {} actions done)",
                        s.state,
                        results.len(),
                        s.actions.len()
                    ),
                }
            }
            None => "no readable status record".into(),
        };
        *out.entry(reason).or_default() += 1;
    }
    if failed.len() > 1000 {
        out.insert(format!("(reasons read for 1,000 of {} failed batches)", failed.len()), 0);
    }
    out
}

/// bmcfleet: one batch per BMC (all submitted at once), completion through the events.
async fn bmcfleet_run(
    fleet: &Fleet,
    collector: &Collector,
    responder: &Responder,
    workload: Workload,
    o: &Options,
) -> anyhow::Result<Run> {
    let worker = fleet.workers.values().next().and_then(|w| w.pid());
    let n = responder.count;
    let batches = (0..n)
        .map(|i| {
            target_batch(&format!("127.0.0.1:{}", responder.port(i)), Protocol::Ipmi, PASSWORD, workload.actions())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let ids: Vec<BatchId> = batches.iter().filter_map(|b| b.id).collect();
    let drops = UdpDrops::now(worker, responder);
    let cpu = CpuMeter::new(&meters(fleet, worker, responder));
    let started = Instant::now();
    let (submit, _) = fleet.submit_all(Arc::new(batches), o.submit_concurrency).await?;
    let done = collector.wait_all(&ids, Duration::from_secs(900)).await?;
    let last = done.iter().map(|f| f.at).max().unwrap_or(started);
    let cpu = cpu.stop();
    let drops = UdpDrops::now(worker, responder).since(drops);
    let failed: Vec<BatchId> =
        ids.iter().zip(&done).filter(|(_, f)| f.state != BatchState::Succeeded).map(|(id, _)| *id).collect();
    let ok = n - failed.len();
    Ok(Run {
        bmcs: n,
        makespan: last.saturating_duration_since(started),
        ok,
        ok_upper: ok,
        steps: vec![],
        submit: Some(submit),
        failures: failure_reasons(fleet, &failed).await,
        cpu: Some(cpu),
        drops,
    })
}

/// Output of one tool invocation.
struct Ran {
    stdout: String,
    stderr: String,
    success: bool,
}

async fn run_tool(program: &Path, args: &[String], env: &[(&str, &str)]) -> anyhow::Result<Ran> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.with_context(|| format!("running {}", program.display()))?;
    Ok(Ran {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        success: out.status.success(),
    })
}

/// FreeIPMI's common arguments for `hosts`.
fn freeipmi_args(hosts: &str) -> Vec<String> {
    ["-D", "LAN_2_0", "-I", "17", "-h", hosts, "-u", USER, "-p", PASSWORD].iter().map(|s| s.to_string()).collect()
}

/// `ipmipower ... OP` over the first `n` BMCs, split into invocations of
/// `o.ipmipower_chunk` hosts, `o.ipmipower_parallel` at a time; returns the
/// lines ending in `: <want>` and the other lines (tallied).
async fn ipmipower(
    program: &Path,
    r: &Responder,
    n: usize,
    o: &Options,
    op: &str,
    want: &str,
) -> anyhow::Result<(usize, BTreeMap<String, usize>)> {
    use futures::StreamExt as _;
    let runs: Vec<anyhow::Result<Ran>> =
        futures::stream::iter(r.host_ranges(n, o.ipmipower_chunk).into_iter().map(|hosts| {
            let mut args = freeipmi_args(&hosts);
            args.push(op.into());
            async move { run_tool(program, &args, &[]).await }
        }))
        .buffer_unordered(o.ipmipower_parallel.max(1))
        .collect()
        .await;
    let (mut ok, mut other) = (0, BTreeMap::new());
    let suffix = format!(": {want}");
    for ran in runs {
        let ran = ran?;
        for line in ran.stdout.lines().chain(ran.stderr.lines()).map(str::trim).filter(|l| !l.is_empty()) {
            if line.ends_with(&suffix) {
                ok += 1;
            } else {
                *other.entry(format!("ipmipower {op}: {}", without_ports(line))).or_default() += 1;
            }
        }
    }
    Ok((ok.min(n), other))
}

/// `ipmi-config --commit -e Chassis_Boot_Flags:Boot_Device=PXE` over the
/// first `n` BMCs in one invocation (its own sliding window of `fanout`);
/// it prints nothing for a host that succeeded and prefixes every error
/// with the host and port, so the BMCs that failed are known.
async fn ipmi_config_pxe(
    program: &Path,
    r: &Responder,
    n: usize,
    fanout: usize,
) -> anyhow::Result<(usize, BTreeMap<String, usize>)> {
    let hosts = r.host_ranges(n, n).remove(0);
    let mut args = freeipmi_args(&hosts);
    args.extend([
        "-F".into(),
        fanout.to_string(),
        "--category=chassis".into(),
        "--commit".into(),
        "-e".into(),
        "Chassis_Boot_Flags:Boot_Device=PXE".into(),
    ]);
    let ran = run_tool(program, &args, &[]).await?;
    let mut failed_hosts = std::collections::BTreeSet::new();
    let mut other = BTreeMap::new();
    for line in ran.stdout.lines().chain(ran.stderr.lines()).map(str::trim).filter(|l| !l.is_empty()) {
        let host = line
            .strip_prefix("127.0.0.1:")
            .and_then(|rest| rest.split(':').next())
            .filter(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty());
        if let Some(port) = host {
            failed_hosts.insert(port.to_owned());
        }
        *other.entry(format!("ipmi-config: {}", without_ports(line))).or_default() += 1;
    }
    let ok = if !ran.success && failed_hosts.is_empty() { 0 } else { n.saturating_sub(failed_hosts.len()) };
    Ok((ok, other))
}

/// FreeIPMI, workload (a) or (b).
async fn freeipmi_run(
    fleet: &Fleet,
    r: &Responder,
    workload: Workload,
    o: &Options,
    tools: &Tools,
) -> anyhow::Result<Run> {
    let n = r.count;
    let drops = UdpDrops::now(None, r);
    let cpu = CpuMeter::new(&meters(fleet, None, r));
    let started = Instant::now();
    let mut run = Run { bmcs: n, ..Run::default() };
    match workload {
        Workload::Status => {
            let (on, other) = ipmipower(&tools.ipmipower, r, n, o, "--stat", "on").await?;
            // Powered on before the run: "off" is a wrong answer, counted with the other lines.
            run.ok = on;
            run.ok_upper = on;
            run.failures = other;
        }
        Workload::Cycle => {
            let (pxe, mut other) = ipmi_config_pxe(&tools.ipmi_config, r, n, o.config_fanout).await?;
            let (cycled, o2) = ipmipower(&tools.ipmipower, r, n, o, "--cycle", "ok").await?;
            let (on, o3) = ipmipower(&tools.ipmipower, r, n, o, "--stat", "on").await?;
            for (k, v) in o2.into_iter().chain(o3) {
                *other.entry(k).or_default() += v;
            }
            run.steps = vec![pxe, cycled, on];
            // ipmipower prints hosts without their ports: which BMC failed a
            // step is unknown, so the BMCs through all three lie between
            // these bounds (equal when every step succeeded everywhere).
            run.ok = n.saturating_sub((n - pxe) + (n - cycled) + (n - on));
            run.ok_upper = pxe.min(cycled).min(on);
            run.failures = other;
        }
    }
    run.makespan = started.elapsed();
    run.cpu = Some(cpu.stop());
    run.drops = UdpDrops::now(None, r).since(drops);
    Ok(run)
}

/// ipmitool, `parallel` processes at a time over the first `n` BMCs; each
/// BMC runs the workload's commands in sequence (one process each).
async fn ipmitool_run(
    fleet: &Fleet,
    r: &Responder,
    n: usize,
    workload: Workload,
    o: &Options,
    tools: &Tools,
) -> anyhow::Result<Run> {
    let drops = UdpDrops::now(None, r);
    let cpu = CpuMeter::new(&meters(fleet, None, r));
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..o.ipmitool_parallel.max(1) {
        let (next, program, base) = (next.clone(), tools.ipmitool.clone(), r.base);
        tasks.spawn(async move {
            let (mut ok, mut failures) = (0usize, BTreeMap::<String, usize>::new());
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>((ok, failures));
                }
                let port = (base + i as u16).to_string();
                let mut failed = None;
                for (command, expect) in workload.ipmitool_steps() {
                    let mut args: Vec<String> =
                        ["-I", "lanplus", "-C", "17", "-H", "127.0.0.1", "-p", &port, "-U", USER, "-E"]
                            .iter()
                            .map(|s| s.to_string())
                            .collect();
                    args.extend(command.iter().map(|s| s.to_string()));
                    let ran = run_tool(&program, &args, &[("IPMI_PASSWORD", PASSWORD)]).await?;
                    if !(ran.success && ran.stdout.contains(expect)) {
                        let why = ran
                            .stderr
                            .lines()
                            .chain(ran.stdout.lines())
                            .map(str::trim)
                            .find(|l| !l.is_empty())
                            .unwrap_or("no output")
                            .to_owned();
                        failed = Some(format!("ipmitool {}: {}", command.join(" "), without_ports(&why)));
                        break;
                    }
                }
                match failed {
                    None => ok += 1,
                    Some(why) => *failures.entry(why).or_default() += 1,
                }
            }
        });
    }
    let mut run = Run { bmcs: n, ..Run::default() };
    while let Some(t) = tasks.join_next().await {
        let (ok, failures) = t.context("ipmitool task")??;
        run.ok += ok;
        for (k, v) in failures {
            *run.failures.entry(k).or_default() += v;
        }
    }
    run.ok_upper = run.ok;
    run.makespan = started.elapsed();
    run.cpu = Some(cpu.stop());
    run.drops = UdpDrops::now(None, r).since(drops);
    Ok(run)
}

/// How long after the cold run of (a) the worker is measured again.
const SETTLE: Duration = Duration::from_secs(20);

/// Worker figures at one moment.
#[derive(Clone, Copy, Debug, Default)]
struct Resources {
    threads: usize,
    rss_kib: u64,
    /// The anonymous part of `rss_kib` (`RssAnon`: heap, stacks).
    anon_kib: u64,
    fds: usize,
    sockets: usize,
}

impl Resources {
    fn of(pid: u32) -> anyhow::Result<Resources> {
        Ok(Resources {
            threads: harness::thread_count(pid).context("worker threads")?,
            rss_kib: harness::rss_kib(pid).context("worker RSS")?,
            anon_kib: harness::status_kib(pid, "RssAnon").context("worker anonymous RSS")?,
            fds: harness::fd_count(pid).context("worker descriptors")?,
            sockets: harness::socket_count(pid).context("worker sockets")?,
        })
    }
}

struct Tools {
    ipmipower: PathBuf,
    ipmi_config: PathBuf,
    ipmitool: PathBuf,
}

/// Power every BMC on (the fleet starts with all hosts off, and a power
/// cycle of an off host is refused with 0xD5): `ipmipower --on`, untimed,
/// retried until every BMC answered ok.
async fn power_on_all(r: &Responder, o: &Options, tools: &Tools) -> anyhow::Result<()> {
    let mut last = (0, BTreeMap::new());
    for _ in 0..3 {
        last = ipmipower(&tools.ipmipower, r, r.count, o, "--on", "ok").await?;
        if last.0 == r.count {
            return Ok(());
        }
    }
    bail!("powering on {} BMCs: {} answered ok; other output: {:?}", r.count, last.0, last.1)
}

/// Start worker `id` and wait until it leases every partition.
async fn start_worker(fleet: &mut Fleet, id: &str, partitions: u16) -> anyhow::Result<u32> {
    fleet.spawn_worker(id, &[])?;
    fleet.wait_owned_by(&[id], partitions as usize, Duration::from_secs(120)).await?;
    fleet.worker(id)?.pid().context("worker pid")
}

/// SIGTERM the worker and wait for it to exit (SIGKILL after a minute).
async fn stop_worker(fleet: &mut Fleet, id: &str) -> anyhow::Result<()> {
    let mut w = fleet.workers.remove(id).with_context(|| format!("no worker {id}"))?;
    w.signal(Signal::SIGTERM);
    if w.wait_exit(Duration::from_secs(60)).await.is_none() {
        eprintln!("ipmi-fleet: worker {id} did not exit within 60 s of SIGTERM; killed");
        w.kill();
    }
    Ok(())
}

/// Everything measured at one size.
struct SizeResult {
    n: usize,
    /// BMCs ipmitool covered (all, or the first `ipmitool_cap`).
    n_tool: usize,
    /// Why ipmitool covered fewer (its expected duration over all).
    tool_estimate: Option<Duration>,
    runs: BTreeMap<(Workload, Client), Vec<Run>>,
    idle: Vec<Resources>,
    live: Vec<Resources>,
    /// The same worker `SETTLE` after `live`, every session still live.
    settled: Vec<Resources>,
    /// ipmitool seconds per BMC for (a) + (b) (for the next size's estimate).
    tool_secs_per_bmc: f64,
}

impl SizeResult {
    fn runs(&self, w: Workload, c: Client) -> &[Run] {
        self.runs.get(&(w, c)).map_or(&[], |v| v.as_slice())
    }

    fn med(&self, w: Workload, c: Client, f: impl Fn(&Run) -> f64) -> f64 {
        median(&self.runs(w, c).iter().map(f).collect::<Vec<_>>())
    }

    fn makespan(&self, w: Workload, c: Client) -> f64 {
        self.med(w, c, |r| r.makespan.as_secs_f64())
    }
}

/// `n` BMCs of one responder (`o.latency` before every reply), every one
/// powered on, and a deployment whose workers run with this benchmark's
/// flags plus `extra_worker_args` (workers are started by the caller).
/// The responder first: its ports are taken before any other socket here.
async fn start_fleet(
    bench: &str,
    n: usize,
    o: &Options,
    tools: &Tools,
    extra_worker_args: &[&str],
) -> anyhow::Result<(Responder, Fleet)> {
    let responder = Responder::start(n, o.latency).await.with_context(|| format!("starting {n} BMCs"))?;
    eprintln!("{bench}: {n} BMCs on 127.0.0.1:{}-{}", responder.base, responder.port(n - 1));
    power_on_all(&responder, o, tools).await?;
    let worker_args = [
        "--protocols",
        "ipmi",
        "--max-concurrent-batches",
        "20000",
        "--max-inflight-per-partition",
        "20000",
        "--lane-idle-timeout",
        "10m",
        "--bmc-min-interval",
        "0s",
    ];
    let fleet = Fleet::start(FleetOptions {
        partitions: o.partitions,
        ad_hoc_targets: "10.0.0.0/8,127.0.0.0/8".into(),
        worker_args: worker_args.iter().chain(extra_worker_args).map(|s| s.to_string()).collect(),
        ..FleetOptions::default()
    })
    .await?;
    Ok((responder, fleet))
}

async fn measure_size(
    n: usize,
    o: &Options,
    tools: &Tools,
    prior_secs_per_bmc: Option<f64>,
) -> anyhow::Result<SizeResult> {
    let (responder, mut fleet) = start_fleet("ipmi-fleet", n, o, tools, &[]).await?;
    let collector = Collector::start(&fleet.client, &fleet.subjects).await?;

    // ipmitool over every BMC only if that stays within the budget.
    let mut tool_estimate = None;
    let per_bmc = match prior_secs_per_bmc {
        Some(s) => Some(s),
        None if n > o.ipmitool_cap => {
            // A pilot over the first 160 BMCs (not reported) to estimate.
            let pilot = n.min(10 * o.ipmitool_parallel.max(1));
            let a = ipmitool_run(&fleet, &responder, pilot, Workload::Status, o, tools).await?;
            let b = ipmitool_run(&fleet, &responder, pilot, Workload::Cycle, o, tools).await?;
            Some((a.makespan + b.makespan).as_secs_f64() / pilot as f64)
        }
        None => None,
    };
    let n_tool = match per_bmc {
        Some(s) => {
            let all = Duration::from_secs_f64(s * n as f64 * o.reps as f64);
            if all > o.ipmitool_budget && n > o.ipmitool_cap {
                tool_estimate = Some(all);
                o.ipmitool_cap
            } else {
                n
            }
        }
        None => n,
    };

    let mut runs: BTreeMap<(Workload, Client), Vec<Run>> = BTreeMap::new();
    let (mut idle_all, mut live_all, mut settled_all, mut tool_secs) = (vec![], vec![], vec![], vec![]);
    for rep in 0..o.reps {
        let mut push = |w: Workload, c: Client, r: Run| {
            if !r.failures.is_empty() {
                eprintln!("ipmi-fleet: {n} BMCs, {w:?}, {c:?}: {} of {} ok; {:?}", r.ok, r.bmcs, r.failures);
            }
            runs.entry((w, c)).or_default().push(r);
        };
        // bmcfleet on a fresh worker: (a) opens every session, then (a) and (b) again on live sessions.
        let id = format!("w{rep}");
        let pid = start_worker(&mut fleet, &id, o.partitions).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        idle_all.push(Resources::of(pid)?);
        let cold = bmcfleet_run(&fleet, &collector, &responder, Workload::Status, o).await?;
        live_all.push(Resources::of(pid)?);
        // What the live sessions cost once the run's own buffers are freed
        // (the sessions stay: lane idle timeout 10 min, keep-alives every 10 s).
        tokio::time::sleep(SETTLE).await;
        settled_all.push(Resources::of(pid)?);
        push(Workload::Status, Client::Cold, cold);
        push(Workload::Status, Client::Warm, bmcfleet_run(&fleet, &collector, &responder, Workload::Status, o).await?);
        push(Workload::Cycle, Client::Warm, bmcfleet_run(&fleet, &collector, &responder, Workload::Cycle, o).await?);
        stop_worker(&mut fleet, &id).await?;
        // (b) on another fresh worker: every session opened inside the workload.
        let id = format!("w{rep}b");
        start_worker(&mut fleet, &id, o.partitions).await?;
        push(Workload::Cycle, Client::Cold, bmcfleet_run(&fleet, &collector, &responder, Workload::Cycle, o).await?);
        stop_worker(&mut fleet, &id).await?;
        // The peers, with no worker running (no keep-alives in the background).
        push(Workload::Status, Client::FreeIpmi, freeipmi_run(&fleet, &responder, Workload::Status, o, tools).await?);
        push(Workload::Cycle, Client::FreeIpmi, freeipmi_run(&fleet, &responder, Workload::Cycle, o, tools).await?);
        let a = ipmitool_run(&fleet, &responder, n_tool, Workload::Status, o, tools).await?;
        let b = ipmitool_run(&fleet, &responder, n_tool, Workload::Cycle, o, tools).await?;
        tool_secs.push((a.makespan + b.makespan).as_secs_f64() / n_tool as f64);
        push(Workload::Status, Client::Ipmitool, a);
        push(Workload::Cycle, Client::Ipmitool, b);
        eprintln!("ipmi-fleet: {n} BMCs, repetition {} of {} done", rep + 1, o.reps);
    }
    let res = SizeResult {
        n,
        n_tool,
        tool_estimate,
        runs,
        idle: idle_all,
        live: live_all,
        settled: settled_all,
        tool_secs_per_bmc: median(&tool_secs),
    };
    drop(collector);
    drop(fleet);
    drop(responder);
    Ok(res)
}

fn client_label(c: Client, res: &SizeResult, o: &Options) -> String {
    match c {
        Client::Cold => "bmcfleet, sessions opened in the run".into(),
        Client::Warm => "bmcfleet, sessions already open".into(),
        Client::FreeIpmi => {
            let k = res.n.div_ceil(o.ipmipower_chunk.max(1));
            if k > 1 {
                format!(
                    "FreeIPMI ({k} ipmipower of ≤ {}, {} at a time)",
                    num(o.ipmipower_chunk as f64, 0),
                    o.ipmipower_parallel
                )
            } else {
                "FreeIPMI (one ipmipower)".into()
            }
        }
        Client::Ipmitool if res.n_tool < res.n => {
            format!("ipmitool, first {} of {}", num(res.n_tool as f64, 0), num(res.n as f64, 0))
        }
        Client::Ipmitool => format!("ipmitool ×{} (exec per call)", o.ipmitool_parallel),
    }
}

fn successes(res: &SizeResult, w: Workload, c: Client) -> String {
    let lo = res.med(w, c, |r| r.ok as f64);
    let hi = res.med(w, c, |r| r.ok_upper as f64);
    let of = res.med(w, c, |r| r.bmcs as f64);
    let mut cell = if lo == hi {
        format!("{} of {}", num(lo, 0), num(of, 0))
    } else {
        format!("{}–{} of {}", num(lo, 0), num(hi, 0), num(of, 0))
    };
    // Per step where a step failed somewhere (FreeIPMI's (b)).
    let steps: Vec<f64> = (0..3).map(|i| res.med(w, c, |r| r.steps.get(i).map_or(f64::NAN, |v| *v as f64))).collect();
    if steps.iter().all(|v| v.is_finite()) && steps.iter().any(|v| *v < of) {
        cell.push_str(&format!(
            " (ipmi-config {}, --cycle {}, --stat {})",
            num(steps[0], 0),
            num(steps[1], 0),
            num(steps[2], 0)
        ));
    }
    cell
}

fn drops_cell(res: &SizeResult, w: Workload, c: Client) -> String {
    let f = |v: f64| if v.is_finite() { num(v, 0) } else { "—".into() };
    let worker = res.med(w, c, |r| r.drops.worker.map_or(f64::NAN, |v| v as f64));
    let responder = res.med(w, c, |r| r.drops.responder.map_or(f64::NAN, |v| v as f64));
    format!("{} / {}", f(worker), f(responder))
}

fn cpu_cell(res: &SizeResult, w: Workload, c: Client, name: &str) -> String {
    let v = res.med(w, c, |r| r.cpu_of(name));
    if v.is_finite() {
        num(v, 2)
    } else {
        "—".into()
    }
}

fn sizes_title(sizes: &[usize]) -> String {
    let names: Vec<String> = sizes.iter().map(|n| num(*n as f64, 0)).collect();
    match names.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    if o.sizes.is_empty() || o.sizes.contains(&0) {
        bail!("--sizes needs fleet sizes of at least 1");
    }
    let tools = Tools {
        ipmipower: harness::find_program("ipmipower", None, &[])
            .context("ipmipower is required (apt-get install freeipmi-tools)")?,
        ipmi_config: harness::find_program("ipmi-config", None, &[])
            .context("ipmi-config is required (apt-get install freeipmi-tools)")?,
        ipmitool: harness::find_program("ipmitool", None, &[])
            .context("ipmitool is required (apt-get install ipmitool)")?,
    };
    let largest = o.sizes.iter().copied().max().unwrap_or(1);
    // The responder holds one socket per BMC, and each ipmipower two per host of its chunk.
    if let Some(limit) = soft_fd_limit() {
        if limit < largest as u64 + 256 {
            bail!("the soft limit on open files ({limit}) is too low for {largest} BMCs in one process: raise it (ulimit -n)");
        }
    }
    let version = |p: &Path, args: &[&str]| harness::version_line(p, args).unwrap_or_else(|| "unknown".into());
    let versions = format!(
        "{}; {}; {}",
        version(&tools.ipmitool, &["-V"]),
        version(&tools.ipmipower, &["--version"]).replace("ipmipower - ", "FreeIPMI ipmipower "),
        harness::nats_server_binary()
            .ok()
            .map(|p| version(&p, &["--version"]))
            .unwrap_or_else(|| "nats-server not found".into()),
    );
    let date = time::format_description::parse_borrowed::<1>("[year]-[month]-[day] [hour]:[minute] UTC")
        .ok()
        .and_then(|f| time::OffsetDateTime::now_utc().format(&f).ok())
        .unwrap_or_else(|| "unknown date".into());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();

    let mut section = Section::new(format!("8. IPMI at fleet scale: {} RMCP+ BMCs", sizes_title(&o.sizes)));
    section.method = vec![
        format!(
            "**BMCs**: one `bmc-ipmi-fleet` process per size (`bmcfleet_testing::ipmi::lan`: N spec-built IPMI 2.0 \
             RMCP+ BMCs, BMC i on UDP port base+i of 127.0.0.1, cipher suites 3 and 17 offered, user admin at \
             Administrator, 32 sessions per BMC, 60 s idle expiry, 2 threads), every reply delayed by {} (a tokio \
             timer, not a blocked thread), so every client pays one {} round trip per IPMI message. The fleet starts \
             with every host off; an untimed `ipmipower --on` fan-out powers them all on first. Its CPU is measured \
             as its own process.",
            dur(o.latency),
            dur(o.latency)
        ),
        format!(
            "**bmcfleet**: nats-server, gateway and ONE worker as processes (release builds), {} partitions, ad hoc \
             targets `127.0.0.1:PORT` with protocol `ipmi` and inline credentials sealed by the gateway; worker \
             `--protocols ipmi --max-concurrent-batches 20000 --max-inflight-per-partition 20000 --lane-idle-timeout 10m \
             --bmc-min-interval 0s`, everything else default (RMCP+ sessions multiplexed over a few shared UDP sockets, \
             cipher suite 17 tried first, one session per BMC kept by its lane). A run submits one batch per BMC, all at \
             once ({} submit requests in flight, not waiting), and collects the final results from the events; makespan \
             = first submit → last final result. *Sessions opened in the run*: a fresh worker, so each BMC's batch \
             includes its probe and RMCP+ handshake; *sessions already open*: the same workload again right after, on \
             the live sessions. Workload (b)'s cold run uses another fresh worker.",
            o.partitions, o.submit_concurrency
        ),
        format!(
            "**FreeIPMI**: (a) `ipmipower -D LAN_2_0 -I 17 -h 127.0.0.1:[P0-P1] -u admin -p password --stat` (hostrange \
             syntax; no `-W opensesspriv` is needed against this responder); successes are output lines ending `: on` \
             (it prints hosts without ports). One invocation does not scale to 10,000 hosts here: ipmipower opens two \
             sockets per host (20,000 descriptors, the soft limit here) and, in trials before this run, printed only about \
             3,480 answer lines for 5,000 hosts; and several invocations at once on these 2 CPUs make some of them exit \
             early with `unassemble_ipmi_rmcpplus_pkt: Success` (ten invocations of 1,000 hosts in every trial, five of \
             2,000 in some). So fleets above {} hosts are split into invocations of at most {} hosts, {} at a time \
             (reliable in trials, and about as fast as one at a time). (b) `ipmi-config -D LAN_2_0 -I 17 -h ... -F {} \
             --category=chassis --commit -e Chassis_Boot_Flags:Boot_Device=PXE` in one invocation (its sliding \
             window of {} sessions; it prints only failures, each with host and port), then `ipmipower --cycle`, then \
             `ipmipower --stat`, as in (a); makespan is the sum; the BMCs through all three steps are given as a range \
             when a step failed somewhere (ipmipower's output cannot say which BMC).",
            num(o.ipmipower_chunk as f64, 0),
            num(o.ipmipower_chunk as f64, 0),
            o.ipmipower_parallel,
            o.config_fanout,
            o.config_fanout
        ),
        format!(
            "**ipmitool**: `IPMI_PASSWORD=password ipmitool -I lanplus -C 17 -H 127.0.0.1 -p PORT -U admin -E power status`, \
             one process per call (a fresh session each time), {} processes in parallel over the BMCs; (b) runs `chassis \
             bootdev pxe`, `power cycle`, `power status` in sequence per BMC. It covers the whole fleet only if (a) + (b) \
             over all repetitions is expected to take at most {} (expected from this run's smaller size, or from a pilot \
             over 160 BMCs); otherwise it runs on the first {} BMCs and its row says so. Nothing is extrapolated.",
            o.ipmitool_parallel,
            dur(o.ipmitool_budget),
            num(o.ipmitool_cap as f64, 0)
        ),
        "Order within a repetition: bmcfleet (a) cold, worker figures, (a) warm, (b) warm, worker stopped; (b) cold on a \
         fresh worker, stopped; FreeIPMI (a), (b); ipmitool (a), (b). The peers run with no worker (so no keep-alive \
         traffic in the background); nats-server and the gateway stay up, idle. CPU columns: user+system seconds during \
         the run, per process; *client side* is the bench process (bmcfleet: submitting and collecting) with the tool \
         processes it ran. *UDP drops*: datagrams the kernel dropped during the run because a socket's receive \
         buffer was full, on the worker's sockets and on the responder's (the `drops` column of `/proc/net/udp` for \
         each process's sockets). **Worker resources**: `Threads`, `VmRSS` and its anonymous part `RssAnon` from `/proc/PID/status`, entries of `/proc/PID/fd` \
         (and those that are sockets), on the fresh worker after it leased every partition (idle) and right after the \
         cold run of (a), with every BMC's lane and session live (10 min lane idle timeout; sessions send a keep-alive \
         after 10 s idle), and again 20 s later with every session still live. RSS growth per live session = \
         (RSS live − RSS idle) / N; right after the run it includes buffers the run itself grew, 20 s later what \
         the allocator kept of them. The rest of `VmRSS` is `RssFile`: pages of mapped files, almost all of them the \
         worker's executable, whose code the first run faults in once, whatever the fleet's size. The goal is \
         decided on the anonymous growth 20 s later, the worker's own memory for its sessions; the goal's row also gives \
         the growth of all RSS and, over two fleet sizes, the slope of the settled RSS: what one more live session adds."
            .into(),
        format!("Run: {date}, 1-minute load average at the start {load}; {versions}."),
    ];

    let mut results: Vec<SizeResult> = vec![];
    let mut prior = None;
    for &n in &o.sizes {
        let r = measure_size(n, o, &tools, prior).await?;
        if r.tool_secs_per_bmc.is_finite() {
            prior = Some(r.tool_secs_per_bmc);
        }
        results.push(r);
    }

    let header = [
        "BMCs",
        "client",
        "makespan",
        "BMCs/s",
        "successes",
        "CPU s worker",
        "CPU s gateway",
        "CPU s nats-server",
        "CPU s responder",
        "CPU s client side",
        "UDP drops: worker / responder",
    ];
    let mut tables = vec![
        (Workload::Status, Table::new("Workload (a): power status of every BMC (medians)", &header)),
        (
            Workload::Cycle,
            Table::new("Workload (b): boot PXE, power cycle, power status of every BMC (medians)", &header),
        ),
    ];
    for (w, t) in &mut tables {
        for res in &results {
            for c in [Client::Cold, Client::Warm, Client::FreeIpmi, Client::Ipmitool] {
                if res.runs(*w, c).is_empty() {
                    continue;
                }
                let span = res.makespan(*w, c);
                let covered = res.med(*w, c, |r| r.bmcs as f64);
                t.row(vec![
                    num(res.n as f64, 0),
                    client_label(c, res, o),
                    format!("{} s", num(span, 2)),
                    ops(covered / span),
                    successes(res, *w, c),
                    cpu_cell(res, *w, c, "worker"),
                    cpu_cell(res, *w, c, "gateway"),
                    cpu_cell(res, *w, c, "nats-server"),
                    cpu_cell(res, *w, c, "responder"),
                    cpu_cell(res, *w, c, "client"),
                    drops_cell(res, *w, c),
                ]);
            }
        }
    }
    section.tables.extend(tables.into_iter().map(|(_, t)| t));

    let mut resources = Table::new(
        "Worker resources: idle, and with every BMC's session live (right after the cold run of (a), and 20 s later)",
        &[
            "BMCs",
            "threads idle",
            "threads live",
            "RSS idle",
            "RSS live",
            "RSS growth per live session",
            "the same 20 s later",
            "of which anonymous (heap, stacks)",
            "fds idle → live",
            "sockets idle → live",
        ],
    );
    let med_of = |v: &[Resources], f: &dyn Fn(&Resources) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let growth_of = |res: &SizeResult, at: &[Resources], f: &dyn Fn(&Resources) -> u64| -> f64 {
        median(&res.idle.iter().zip(at).map(|(i, l)| (f(l) as f64 - f(i) as f64) / res.n as f64).collect::<Vec<_>>())
    };
    let growth = |res: &SizeResult, at: &[Resources]| growth_of(res, at, &|r| r.rss_kib);
    let anon_growth = |res: &SizeResult| growth_of(res, &res.settled, &|r| r.anon_kib);
    let per_session = |res: &SizeResult| growth(res, &res.live);
    for res in &results {
        resources.row(vec![
            num(res.n as f64, 0),
            num(med_of(&res.idle, &|r| r.threads as f64), 0),
            num(med_of(&res.live, &|r| r.threads as f64), 0),
            mib(med_of(&res.idle, &|r| r.rss_kib as f64)),
            mib(med_of(&res.live, &|r| r.rss_kib as f64)),
            kib_each(per_session(res) * res.n as f64, res.n),
            kib_each(growth(res, &res.settled) * res.n as f64, res.n),
            kib_each(anon_growth(res) * res.n as f64, res.n),
            format!(
                "{} → {}",
                num(med_of(&res.idle, &|r| r.fds as f64), 0),
                num(med_of(&res.live, &|r| r.fds as f64), 0)
            ),
            format!(
                "{} → {}",
                num(med_of(&res.idle, &|r| r.sockets as f64), 0),
                num(med_of(&res.live, &|r| r.sockets as f64), 0)
            ),
        ]);
    }
    section.tables.push(resources);

    // Goals.
    let threads: Vec<(usize, f64, f64)> = results
        .iter()
        .map(|r| (r.n, med_of(&r.idle, &|x| x.threads as f64), med_of(&r.live, &|x| x.threads as f64)))
        .collect();
    if let (Some(first), Some(last)) = (threads.first(), threads.last()) {
        let measured = threads
            .iter()
            .map(|(n, idle, live)| {
                format!("{} live at {} BMCs (idle {})", num(*live, 0), num(*n as f64, 0), num(*idle, 0))
            })
            .collect::<Vec<_>>()
            .join(", ");
        let met = last.2 <= first.2 && threads.iter().all(|(_, idle, live)| live <= idle);
        let target = if threads.len() > 1 {
            format!(
                "no more threads at {} than at {} BMCs, none added by live sessions",
                num(last.0 as f64, 0),
                num(first.0 as f64, 0)
            )
        } else {
            "none added by live sessions".into()
        };
        section.goal("IPMI fleet: worker threads independent of the number of BMCs", &target, measured, met);
    }
    // The slope of the settled RSS over the fleet sizes: what one more live
    // session costs, free of what any run costs once whatever its size.
    let slope = match (results.first(), results.last()) {
        (Some(a), Some(b)) if b.n > a.n => {
            let at = |r: &SizeResult| med_of(&r.settled, &|x| x.rss_kib as f64);
            Some((at(b) - at(a)) / (b.n - a.n) as f64)
        }
        _ => None,
    };
    for res in &results {
        // Decided on the settled figure of the worker's own memory: what
        // keeping the sessions costs, not what the run that opened them left
        // in the allocator, nor the pages of its executable the first run
        // touched (file-backed, the same at any fleet size).
        let (right_after, settled, anon) = (per_session(res), growth(res, &res.settled), anon_growth(res));
        let slope = slope
            .map(|k| format!("; over the fleet sizes, each live session adds {} KiB of RSS", num(k, 2)))
            .unwrap_or_default();
        section.goal(
            &format!("IPMI fleet: worker RSS growth per live RMCP+ session, {} BMCs", num(res.n as f64, 0)),
            "≤ 8 KiB",
            format!(
                "{} KiB anonymous 20 s after the run ({} KiB of all RSS, the other {} MiB file pages, the executable's code the run \
                 faulted in; {} KiB right after it){slope}",
                num(anon, 2),
                num(settled, 2),
                num((settled - anon) * res.n as f64 / 1024.0, 1),
                num(right_after, 2)
            ),
            anon <= 8.0,
        );
    }
    for (w, what) in [(Workload::Status, "power status"), (Workload::Cycle, "PXE + cycle + status")] {
        for res in &results {
            let (cold, warm, free) =
                (res.makespan(w, Client::Cold), res.makespan(w, Client::Warm), res.makespan(w, Client::FreeIpmi));
            let peer = if w == Workload::Status { "ipmipower" } else { "FreeIPMI (ipmi-config + ipmipower ×2)" };
            section.goal(
                &format!(
                    "IPMI fleet, {what} of {} BMCs: bmcfleet makespan (sessions opened in the run) vs {peer}",
                    num(res.n as f64, 0)
                ),
                &format!("≤ {peer}'s"),
                format!(
                    "{} s vs {} s ({}; sessions already open: {} s)",
                    num(cold, 2),
                    num(free, 2),
                    ratio(cold / free),
                    num(warm, 2)
                ),
                cold <= free,
            );
        }
    }

    // Findings computed from this run.
    for res in &results {
        let n = res.n as f64;
        let total = |w: Workload, c: Client| -> f64 {
            ["worker", "gateway", "nats-server", "responder", "client"]
                .iter()
                .map(|p| res.med(w, c, |r| r.cpu_of(p)))
                .filter(|v| v.is_finite())
                .sum()
        };
        let submit = res.med(Workload::Status, Client::Cold, |r| r.submit.map_or(f64::NAN, |d| d.as_secs_f64()));
        let bmcfleet_cpu =
            total(Workload::Status, Client::Cold) - res.med(Workload::Status, Client::Cold, |r| r.cpu_of("responder"));
        let free_cpu = res.med(Workload::Status, Client::FreeIpmi, |r| r.cpu_of("client"));
        section.findings.push(format!(
            "{} BMCs, (a) with sessions opened in the run: admission of all {} batches took {} s of the {} s makespan; bmcfleet's \
             processes (worker, gateway, nats-server, bench submitting and collecting) used {} CPU s in all, {} ms per BMC, \
             against {} ms per BMC for ipmipower; the responder used {} CPU s serving bmcfleet and {} CPU s serving ipmipower.",
            num(n, 0),
            num(n, 0),
            num(submit, 2),
            num(res.makespan(Workload::Status, Client::Cold), 2),
            num(bmcfleet_cpu, 2),
            num(bmcfleet_cpu * 1e3 / n, 2),
            num(free_cpu * 1e3 / n, 2),
            num(res.med(Workload::Status, Client::Cold, |r| r.cpu_of("responder")), 2),
            num(res.med(Workload::Status, Client::FreeIpmi, |r| r.cpu_of("responder")), 2),
        ));
        if let Some(est) = res.tool_estimate {
            section.findings.push(format!(
                "ipmitool at {} BMCs ran on the first {} only: over all of them (a) + (b) × {} repetition(s) was expected to \
                 take about {} s (over the {} s budget), from {} s per BMC measured for (a) + (b) at the smaller size or in the pilot.",
                num(n, 0),
                num(res.n_tool as f64, 0),
                o.reps,
                num(est.as_secs_f64(), 0),
                num(o.ipmitool_budget.as_secs_f64(), 0),
                num(est.as_secs_f64() / (n * o.reps as f64), 3),
            ));
        }
        let mut failures: BTreeMap<String, usize> = BTreeMap::new();
        for ((w, c), runs) in &res.runs {
            for r in runs {
                for (k, v) in &r.failures {
                    let label = match c {
                        Client::Cold | Client::Warm => {
                            format!("bmcfleet ({}) {k}", if *w == Workload::Status { "a" } else { "b" })
                        }
                        _ => format!("({}) {k}", if *w == Workload::Status { "a" } else { "b" }),
                    };
                    *failures.entry(label).or_default() += v;
                }
            }
        }
        if !failures.is_empty() {
            let list: Vec<String> = failures.iter().map(|(k, v)| format!("{k} ×{v}")).collect();
            section.findings.push(format!("Failures at {} BMCs, all repetitions: {}.", num(n, 0), list.join("; ")));
        }
    }
    section.elapsed = started.elapsed();
    Ok(section)
}

/// The soft limit on open files (Linux, from /proc).
fn soft_fd_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    limits.lines().find(|l| l.starts_with("Max open files"))?.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_folded_out_of_reasons() {
        assert_eq!(
            without_ports("timeout talking to 127.0.0.1:20005 (127.0.0.1:20006)"),
            "timeout talking to 127.0.0.1:PORT (127.0.0.1:PORT)"
        );
        assert_eq!(without_ports("127.0.0.1: on"), "127.0.0.1: on");
    }

    #[test]
    fn base_ports_stay_below_the_ephemeral_range_when_they_fit() {
        let top = ephemeral_start() as usize;
        let bases = candidate_bases(10_000);
        assert!(!bases.is_empty());
        if top >= 20_000 {
            assert!(bases.iter().all(|b| *b as usize + 10_000 <= top), "{bases:?}");
        }
    }

    #[test]
    fn titles_list_the_sizes() {
        assert_eq!(sizes_title(&[1000, 10_000]), "1,000 and 10,000");
        assert_eq!(sizes_title(&[200]), "200");
    }
}
