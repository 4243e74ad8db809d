//! `poll`: fleet state at rest (issue 19): N registered machines (simulated
//! BMCs) polled by one worker every interval. Measures, over one interval in
//! steady state: the worker's and nats-server's CPU, NATS messages per poll,
//! state writes per poll, and the worker's memory per idle machine.

use crate::fleet::{sim_address, Fleet, FleetOptions};
use crate::harness::Bench as _;
use crate::report::{Section, Table};
use crate::stats::{median, num};
use anyhow::{bail, Context as _};
use bmcfleet_schema::{Machine, Protocol};
use bmcfleet_testing::{SimConfig, SimServer};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Options {
    pub machines: usize,
    pub interval: Duration,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { machines: 10_000, interval: Duration::from_secs(60), reps: 1 }
    }
}

fn dur(d: Duration) -> String {
    bmcfleet_schema::duration::format(d)
}

/// A counter or gauge from the worker's `/metrics` (summed over labels).
pub(crate) async fn metric(port: u16, name: &str) -> Option<f64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.ok()?;
    let mut body = Vec::new();
    s.read_to_end(&mut body).await.ok()?;
    let text = String::from_utf8_lossy(&body);
    let values: Vec<f64> = text
        .lines()
        .filter(|l| !l.starts_with('#') && (l.starts_with(&format!("{name} ")) || l.starts_with(&format!("{name}{{"))))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

pub(crate) fn metrics_port(log: &str) -> Option<u16> {
    log.split("Metrics listening on 127.0.0.1:").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Partitions of the measured deployment.
const PARTITIONS: u16 = 16;
/// The worker's `--state-seen-interval` (its default).
const SEEN_EVERY: Duration = Duration::from_secs(15);

struct Sample {
    worker_cpu: f64,
    nats_cpu: f64,
    msgs_per_poll: f64,
    writes_per_poll: f64,
    /// Partition records written in the window.
    seen_writes: f64,
    polls: f64,
    kib_per_machine: f64,
    failed_polls: f64,
}

async fn one(o: &Options, sim: &SimServer) -> anyhow::Result<Sample> {
    let interval = dur(o.interval);
    let mut fleet = Fleet::start(FleetOptions {
        partitions: PARTITIONS,
        sim: Some(sim.addr()),
        worker_args: vec![
            "--poll-interval".into(),
            interval.clone(),
            "--poll-timeout".into(),
            "5s".into(),
            // Idle machines: lanes (and sessions) go between polls.
            "--lane-idle-timeout".into(),
            "5s".into(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
        ],
        ..FleetOptions::default()
    })
    .await?;
    fleet.spawn_worker("w0", &[])?;
    fleet.wait_owned_by(&["w0"], usize::from(PARTITIONS), Duration::from_secs(60)).await?;
    let port =
        crate::harness::poll(Duration::from_secs(10), Duration::from_millis(50), "the worker's metrics port", || {
            let log = fleet.workers["w0"].log_text();
            async move { metrics_port(&log) }
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await; // settle before the baseline
    let rss_before = fleet.workers["w0"].rss_kib().context("worker RSS")? as f64;

    // One named credential for every machine, then the machines.
    let js = async_nats::jetstream::new(fleet.client.clone());
    let subjects = &fleet.subjects;
    let creds = bmcfleet_common::streams::bucket(
        &js,
        bmcfleet_common::streams::credentials_config(subjects, 1),
        bmcfleet_common::streams::Mode::UseExisting,
    )
    .await?;
    let sealed = bmcfleet_common::sealing::Sealer::new(&fleet.sealing.1)
        .map_err(anyhow::Error::msg)?
        .seal("admin", &bmcfleet_schema::Secret::new("bench"), &bmcfleet_common::sealing::Binding::credential("bench"))
        .map_err(anyhow::Error::msg)?;
    creds.put("bench", serde_json::to_vec(&sealed)?.into()).await.context("credential")?;
    let machines = bmcfleet_common::streams::bucket(
        &js,
        bmcfleet_common::streams::machines_config(subjects, 1),
        bmcfleet_common::streams::Mode::UseExisting,
    )
    .await?;
    let puts = (0..o.machines).map(|i| {
        let machines = machines.clone();
        async move {
            let m = Machine::new(format!("m{i}"), sim_address(i).parse().expect("address"), Protocol::Sim, "bench");
            bmcfleet_common::registry::put(&machines, &m).await.map_err(anyhow::Error::msg)
        }
    });
    futures::stream::iter(puts)
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;

    // Warm-up: every machine's first poll (a random point of the interval) and first write.
    let warm = o.interval + o.interval / 5;
    let deadline = Instant::now() + warm + Duration::from_secs(30);
    loop {
        let polls = metric(port, "bmcfleet_polls_total").await.unwrap_or(0.0);
        if polls >= o.machines as f64 {
            break;
        }
        if Instant::now() >= deadline {
            bail!("only {polls} polls of {} machines after {warm:?}", o.machines);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Lanes of the first polls go idle; then one full interval in steady state.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let worker_pid = fleet.workers["w0"].pid().context("worker pid")?;
    let nats_pid = fleet.nats.pid().context("nats pid")?;
    let meter = crate::proc::CpuMeter::new(&[
        crate::proc::Meter::pid("worker", Some(worker_pid)),
        crate::proc::Meter::pid("nats-server", Some(nats_pid)),
    ]);
    let msgs0 = fleet.nats.message_counts().await.context("nats message counts")?;
    let polls0 = metric(port, "bmcfleet_polls_total").await.unwrap_or(0.0);
    let ok0 = metric(port, "bmcfleet_polls_total{outcome=\"ok\"}").await;
    let writes0 = metric(port, "bmcfleet_state_writes_total").await.unwrap_or(0.0);
    let seen0 = metric(port, "bmcfleet_state_seen_writes_total").await.unwrap_or(0.0);
    tokio::time::sleep(o.interval).await;
    let usage = meter.stop();
    let msgs1 = fleet.nats.message_counts().await.context("nats message counts")?;
    let polls = metric(port, "bmcfleet_polls_total").await.unwrap_or(0.0) - polls0;
    let ok = metric(port, "bmcfleet_polls_total{outcome=\"ok\"}").await;
    let writes = metric(port, "bmcfleet_state_writes_total").await.unwrap_or(0.0) - writes0;
    let seen_writes = metric(port, "bmcfleet_state_seen_writes_total").await.unwrap_or(0.0) - seen0;
    let rss_after = fleet.workers["w0"].rss_kib().context("worker RSS")? as f64;
    let cpus = usage.cpus();
    let msgs = (msgs1.0 - msgs0.0) + (msgs1.1 - msgs0.1);
    fleet.workers.get_mut("w0").context("worker")?.ensure_running()?;
    Ok(Sample {
        worker_cpu: cpus[0].1,
        nats_cpu: cpus[1].1,
        msgs_per_poll: msgs as f64 / polls.max(1.0),
        writes_per_poll: writes / polls.max(1.0),
        seen_writes,
        polls,
        kib_per_machine: (rss_after - rss_before) / o.machines as f64,
        failed_polls: match (ok0, ok) {
            (Some(a), Some(b)) => polls - (b - a),
            _ => f64::NAN,
        },
    })
}

use futures::StreamExt as _;

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("9. Fleet state at rest: registered machines polled by one worker");
    section.method = vec![format!(
        "One worker (release build, 16 partitions, `--poll-interval {}`, `--lane-idle-timeout 5s` so a machine's \
         lane and session go between polls) owns every partition; {} machines are registered (protocol `sim`, \
         one shared named credential) against `bmc-sim` in the bench process (zero latency). After every machine's \
         first poll and write (the warm-up: first polls are spread over one interval), one full interval is \
         measured: CPU of the worker and of nats-server (share of one core, /proc), NATS messages in + out per \
         poll (nats-server /varz), state writes per poll (the worker's `bmcfleet_state_writes_total`), the \
         partition records of the polled machines' last observations written in the window \
         (`bmcfleet_state_seen_writes_total`: one per partition every `--state-seen-interval`, 15 s), and the \
         worker's RSS growth per registered machine between before registration and after the window (what an \
         idle machine costs: registry copy, schedule, state book).",
        dur(o.interval),
        o.machines
    )];
    let sim = SimServer::start(SimConfig::default()).await.context("starting the simulator")?;
    let mut samples = Vec::new();
    for rep in 0..o.reps {
        eprintln!("poll: repetition {}/{}", rep + 1, o.reps);
        samples.push(one(o, &sim).await?);
    }
    let m = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
    let mut t = Table::new(
        format!(
            "{} machines, one worker, polled every {} (median of {} repetition(s))",
            o.machines,
            dur(o.interval),
            o.reps
        ),
        &[
            "polls in the window",
            "failed polls",
            "worker CPU (% of one core)",
            "nats-server CPU (%)",
            "NATS msgs per poll",
            "state writes per poll",
            "partition records written",
            "worker KiB per machine",
        ],
    );
    t.row(vec![
        num(m(|s| s.polls), 0),
        num(m(|s| s.failed_polls), 0),
        num(m(|s| s.worker_cpu) * 100.0, 2),
        num(m(|s| s.nats_cpu) * 100.0, 2),
        num(m(|s| s.msgs_per_poll), 2),
        num(m(|s| s.writes_per_poll), 3),
        num(m(|s| s.seen_writes), 0),
        num(m(|s| s.kib_per_machine), 2),
    ]);
    section.tables.push(t);
    let cpu = (m(|s| s.worker_cpu) + m(|s| s.nats_cpu)) * 100.0;
    section.goal(
        "worker + nats-server CPU while polling",
        "≤ 5 % of one core",
        format!("{}%", num(cpu, 2)),
        cpu <= 5.0,
    );
    let kib = m(|s| s.kib_per_machine);
    section.goal("memory per idle machine (worker)", "≤ 2 KiB", format!("{} KiB", num(kib, 2)), kib <= 2.0);
    let writes = m(|s| s.writes_per_poll);
    section.goal(
        "state writes at rest",
        "only on change (+ heartbeat ≤ once per interval)",
        format!("{} per poll", num(writes, 3)),
        writes <= 0.01,
    );
    // The partition records (issue 34: LAST SEEN and staleness without a
    // write per poll) cost one write per partition per --state-seen-interval
    // (15 s), whatever the fleet's size.
    let seen = m(|s| s.seen_writes);
    let bound = (PARTITIONS as f64) * (o.interval.as_secs_f64() / SEEN_EVERY.as_secs_f64()).ceil() + PARTITIONS as f64;
    section.goal(
        "partition records of the last observations",
        "one per partition per --state-seen-interval (15 s), not per poll",
        format!("{} in the window ({} per poll)", num(seen, 0), num(seen / m(|s| s.polls).max(1.0), 4)),
        seen <= bound,
    );
    section.elapsed = started.elapsed();
    Ok(section)
}
