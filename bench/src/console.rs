//! `console`: issue 36's bench. One worker logs the serial consoles of N
//! machines at once (IPMI Serial over LAN against `bmc-ipmi-fleet`, whose
//! BMCs' hosts print numbered lines at a set rate while a console holds
//! their SOL). Every machine is registered with `console.always_on`, so the
//! worker holds all N sessions with nobody watching (conserver-style
//! logging). After every session is open, one window is measured: the
//! worker's CPU (share of one core, /proc), its RSS, the console output it
//! stored (`bmcfleet_console_bytes_total{direction="out"}`) per second, what
//! it dropped (`bmcfleet_console_lost_bytes_total`) and the sessions held.

use crate::fleet::{Fleet, FleetOptions};
use crate::harness::Bench as _;
use crate::ipmi_fleet::{Responder, PASSWORD, USER};
use crate::poll::{metric, metrics_port};
use crate::report::{Section, Table};
use crate::stats::{median, num};
use anyhow::{bail, Context as _};
use bmcfleet_schema::{Machine, Protocol};
use futures::StreamExt as _;
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Options {
    /// Consoles held at once.
    pub consoles: usize,
    /// Host output per console (bytes/s).
    pub rate: u64,
    /// Measured window.
    pub window: Duration,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { consoles: 1000, rate: 1000, window: Duration::from_secs(30), reps: 1 }
    }
}

const PARTITIONS: u16 = 16;

struct Sample {
    worker_cpu: f64,
    nats_cpu: f64,
    rss_mib: f64,
    rss_per_console_kib: f64,
    bytes_per_s: f64,
    lost_per_s: f64,
    sessions: f64,
    open_secs: f64,
}

async fn one(o: &Options) -> anyhow::Result<Sample> {
    let responder = Responder::start_with(o.consoles, Duration::ZERO, &["--sol-output".into(), o.rate.to_string()])
        .await
        .with_context(|| format!("starting {} BMCs", o.consoles))?;
    let mut fleet = Fleet::start(FleetOptions {
        partitions: PARTITIONS,
        worker_args: ["--protocols", "ipmi", "--metrics-addr", "127.0.0.1:0", "--bmc-min-interval", "0s"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
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
    let rss_before = fleet.workers["w0"].rss_kib().context("worker RSS")? as f64;

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
        .seal(USER, &bmcfleet_schema::Secret::new(PASSWORD), &bmcfleet_common::sealing::Binding::credential("bench"))
        .map_err(anyhow::Error::msg)?;
    creds.put("bench", serde_json::to_vec(&sealed)?.into()).await.context("credential")?;
    let machines = bmcfleet_common::streams::bucket(
        &js,
        bmcfleet_common::streams::machines_config(subjects, 1),
        bmcfleet_common::streams::Mode::UseExisting,
    )
    .await?;
    let opening = Instant::now();
    let puts = (0..o.consoles).map(|i| {
        let machines = machines.clone();
        let address = format!("127.0.0.1:{}", responder.port(i));
        async move {
            let mut m =
                Machine::new(format!("c{i}"), address.parse().map_err(anyhow::Error::msg)?, Protocol::Ipmi, "bench");
            m.console.always_on = true;
            bmcfleet_common::registry::put(&machines, &m).await.map_err(anyhow::Error::msg)
        }
    });
    futures::stream::iter(puts)
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Every session open (the worker's gauge), within a deadline.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let held = metric(port, "bmcfleet_console_sessions").await.unwrap_or(0.0);
        if held >= o.consoles as f64 {
            break;
        }
        if Instant::now() >= deadline {
            bail!("only {held} of {} console sessions open after 300 s", o.consoles);
        }
        fleet.workers.get_mut("w0").context("worker")?.ensure_running()?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let open_secs = opening.elapsed().as_secs_f64();
    // Settle: the first output of every console is stored.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let worker_pid = fleet.workers["w0"].pid().context("worker pid")?;
    let nats_pid = fleet.nats.pid().context("nats pid")?;
    let meter = crate::proc::CpuMeter::new(&[
        crate::proc::Meter::pid("worker", Some(worker_pid)),
        crate::proc::Meter::pid("nats-server", Some(nats_pid)),
    ]);
    let out = "bmcfleet_console_bytes_total{direction=\"out\"}";
    let bytes0 = metric(port, out).await.unwrap_or(0.0);
    let lost0 = metric(port, "bmcfleet_console_lost_bytes_total").await.unwrap_or(0.0);
    let started = Instant::now();
    tokio::time::sleep(o.window).await;
    let usage = meter.stop();
    let secs = started.elapsed().as_secs_f64();
    let bytes = metric(port, out).await.unwrap_or(0.0) - bytes0;
    let lost = metric(port, "bmcfleet_console_lost_bytes_total").await.unwrap_or(0.0) - lost0;
    let sessions = metric(port, "bmcfleet_console_sessions").await.unwrap_or(0.0);
    let rss = fleet.workers["w0"].rss_kib().context("worker RSS")? as f64;
    fleet.workers.get_mut("w0").context("worker")?.ensure_running()?;
    let cpus = usage.cpus();
    drop(responder);
    Ok(Sample {
        worker_cpu: cpus[0].1,
        nats_cpu: cpus[1].1,
        rss_mib: rss / 1024.0,
        rss_per_console_kib: (rss - rss_before) / o.consoles as f64,
        bytes_per_s: bytes / secs,
        lost_per_s: lost / secs,
        sessions,
        open_secs,
    })
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("10. Serial consoles: one worker logging N consoles at once");
    section.method = vec![format!(
        "One worker (release build, 16 partitions) owns every partition; {} machines are registered (protocol \
         `ipmi`, one named credential, `console.always_on`) at the BMCs of one `bmc-ipmi-fleet` process (RMCP+ \
         suite 17 or 3, SOL payload), whose hosts print numbered lines at {} bytes/s each (written every 100 ms \
         while a console holds the BMC's SOL and less than 4 KiB waits). Once every SOL session is open (the \
         worker's `bmcfleet_console_sessions` gauge), {} s settle, then a {}-second window is measured: CPU of \
         the worker and of nats-server (share of one core, /proc), the worker's RSS at the end and its growth per \
         console since before registration, console output stored (`bmcfleet_console_bytes_total{{direction=\"out\"}}`) \
         and dropped (`bmcfleet_console_lost_bytes_total`) per second. The BMCs, nats-server and the worker share \
         this machine's cores: the load at the time is in the header.",
        o.consoles,
        o.rate,
        5,
        o.window.as_secs()
    )];
    let mut samples = Vec::new();
    for rep in 0..o.reps {
        eprintln!("console: repetition {}/{}", rep + 1, o.reps);
        samples.push(one(o).await?);
    }
    let m = |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
    let mut t = Table::new(
        format!(
            "{} consoles, one worker, {} bytes/s of host output each (median of {} repetition(s))",
            o.consoles, o.rate, o.reps
        ),
        &[
            "sessions held",
            "time to open all (s)",
            "stored (bytes/s)",
            "dropped (bytes/s)",
            "worker CPU (% of one core)",
            "nats-server CPU (%)",
            "worker RSS (MiB)",
            "worker KiB per console",
        ],
    );
    t.row(vec![
        num(m(|s| s.sessions), 0),
        num(m(|s| s.open_secs), 1),
        num(m(|s| s.bytes_per_s), 0),
        num(m(|s| s.lost_per_s), 0),
        num(m(|s| s.worker_cpu) * 100.0, 1),
        num(m(|s| s.nats_cpu) * 100.0, 1),
        num(m(|s| s.rss_mib), 1),
        num(m(|s| s.rss_per_console_kib), 1),
    ]);
    section.tables.push(t);
    let held = m(|s| s.sessions);
    section.goal(
        "consoles logged by one worker",
        &format!("{} at once", o.consoles),
        num(held, 0),
        held >= o.consoles as f64,
    );
    let offered = (o.consoles as u64 * o.rate) as f64;
    let stored = m(|s| s.bytes_per_s);
    section.goal(
        "host output stored",
        &format!("≥ 90 % of what the hosts offer ({} bytes/s)", num(offered, 0)),
        format!("{} bytes/s ({} %)", num(stored, 0), num(stored / offered * 100.0, 1)),
        stored >= 0.9 * offered,
    );
    section.elapsed = started.elapsed();
    Ok(section)
}
