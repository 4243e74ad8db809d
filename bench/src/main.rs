//! `bmc-bench`: parse the command line, run the chosen benchmarks, print
//! their tables, and (for `all --out`) write docs/BENCHMARKS.md.

use anyhow::Context as _;
use bmcfleet_bench::{
    console, fairness, ipmi, ipmi_fleet, isolation, ordering, pipeline, poll, redfish, report, scale,
};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Side-by-side benchmarks of bmcfleet; prints medians, p99 and ratios.
#[derive(Parser, Debug)]
#[command(name = "bmc-bench", version)]
struct Cli {
    /// Repetitions per measurement (medians are reported).
    #[arg(long, env = "BMC_BENCH_REPS", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50), global = true)]
    reps: u32,
    /// Print a single benchmark's section as Markdown (the shape of its
    /// section in docs/BENCHMARKS.md) instead of plain text.
    #[arg(long, global = true)]
    markdown: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Raw JetStream round trip vs bmcfleet submit → result.
    Pipeline(PipelineArgs),
    /// Native IPMI provider vs ipmitool vs FreeIPMI against ipmi_sim.
    Ipmi(IpmiArgs),
    /// 1,000 and 10,000 RMCP+ BMCs: bmcfleet (gateway + one worker) vs FreeIPMI vs ipmitool, worker threads and memory.
    IpmiFleet(IpmiFleetArgs),
    /// The same RMCP+ BMCs registered as machines, each workload ONE rollout, vs FreeIPMI; memory and messages per machine.
    RolloutFleet(RolloutFleetArgs),
    /// Redfish provider vs python sushy against sushy-emulator.
    Redfish(RedfishArgs),
    /// 10,000 BMCs, 64 partitions, 1 and 3 workers: throughput, memory, rebalance, backlog drain.
    Scale(ScaleArgs),
    /// Strict per-BMC ordering vs an unordered consumer on the same stream.
    Ordering(OrderingArgs),
    /// Healthy BMCs' latency alone vs next to a hung and a slow BMC on the same partition.
    Isolation(IsolationArgs),
    /// Fleet state at rest: registered machines polled by one worker.
    Poll(PollArgs),
    /// One worker logging N serial consoles (IPMI SOL) at once: CPU, memory, bytes/s.
    Console(ConsoleArgs),
    /// Every benchmark, then the results document.
    All(AllArgs),
}

fn duration(s: &str) -> Result<Duration, String> {
    let d = bmcfleet_schema::duration::parse(s)?;
    if d.is_zero() {
        return Err("must be greater than zero".into());
    }
    Ok(d)
}

#[derive(Args, Debug, Clone)]
struct PipelineArgs {
    /// Closed-loop concurrencies (the last is the throughput goal's moderate load).
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    concurrency: Vec<usize>,
    /// Open-loop arrival rate for the added-latency goal (requests per second).
    #[arg(long, default_value_t = 200.0)]
    open_rate: f64,
    /// Measurement window per run.
    #[arg(long, default_value = "4s", value_parser = duration)]
    duration: Duration,
}

#[derive(Args, Debug, Clone)]
struct IpmiArgs {
    /// ipmi_sim instances in the fleet case.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=50))]
    fleet: u32,
    /// Measurement window per client and case.
    #[arg(long, default_value = "2s", value_parser = duration)]
    duration: Duration,
}

#[derive(Args, Debug, Clone)]
struct PollArgs {
    /// Registered machines.
    #[arg(long, default_value_t = 10_000)]
    machines: u32,
    /// The worker's --poll-interval (the measured window is one interval).
    #[arg(long, default_value = "60s", value_parser = duration)]
    interval: Duration,
}

#[derive(Args, Debug, Clone)]
struct ConsoleArgs {
    /// Consoles held at once (one `bmc-ipmi-fleet` BMC each).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    consoles: u64,
    /// Host output per console (bytes/s).
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// Measured window.
    #[arg(long, default_value = "30s", value_parser = duration)]
    window: Duration,
}

#[derive(Args, Debug, Clone)]
struct IpmiFleetArgs {
    /// Fleet sizes (one bmc-ipmi-fleet process and one deployment per size).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000", value_parser = clap::value_parser!(u64).range(1..=20_000))]
    sizes: Vec<u64>,
    /// The BMCs' delay before every reply.
    #[arg(long, default_value = "20ms", value_parser = duration)]
    latency: Duration,
}

#[derive(Args, Debug, Clone)]
struct RolloutFleetArgs {
    /// Fleet sizes (one bmc-ipmi-fleet process and one deployment per size).
    #[arg(long, value_delimiter = ',', default_value = "1000,10000", value_parser = clap::value_parser!(u64).range(1..=20_000))]
    sizes: Vec<u64>,
    /// The BMCs' delay before every reply.
    #[arg(long, default_value = "20ms", value_parser = duration)]
    latency: Duration,
    /// The rollout's max_parallel (1..=1000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=1000))]
    max_parallel: u32,
    /// Skip the counted rollout (a `>` spy) at the end of each size.
    #[arg(long)]
    no_message_count: bool,
}

#[derive(Args, Debug, Clone)]
struct RedfishArgs {
    /// Power-status measurement window.
    #[arg(long, default_value = "3s", value_parser = duration)]
    duration: Duration,
    /// 5-action batches timed per repetition and client.
    #[arg(long, default_value_t = 20)]
    batches: usize,
}

#[derive(Args, Debug, Clone)]
struct ScaleArgs {
    #[arg(long, default_value_t = 10_000)]
    bmcs: usize,
    #[arg(long, default_value_t = 64)]
    partitions: u16,
    /// Worker counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    workers: Vec<usize>,
    /// Batches queued before the drain test's worker starts.
    #[arg(long, default_value_t = 100_000)]
    queued: usize,
    /// Worker --lane-idle-timeout.
    #[arg(long, default_value = "15s", value_parser = duration)]
    lane_idle: Duration,
    /// Worker --lease-ttl.
    #[arg(long, default_value = "6s", value_parser = duration)]
    lease_ttl: Duration,
    /// Worker --rebalance-interval.
    #[arg(long, default_value = "2s", value_parser = duration)]
    rebalance: Duration,
}

#[derive(Args, Debug, Clone)]
struct OrderingArgs {
    /// Batches per drain.
    #[arg(long, default_value_t = 5000)]
    batches: usize,
    /// Workloads: distinct BMCs the batches are spread over.
    #[arg(long, value_delimiter = ',', default_value = "1000,10")]
    bmcs: Vec<usize>,
    /// Time each simulated action takes.
    #[arg(long, default_value = "1ms", value_parser = duration)]
    sim_latency: Duration,
}

#[derive(Args, Debug, Clone)]
struct IsolationArgs {
    /// Healthy BMCs, each with one batch in flight.
    #[arg(long, default_value_t = 20)]
    healthy: usize,
    /// Measurement window per phase.
    #[arg(long, default_value = "4s", value_parser = duration)]
    duration: Duration,
    /// Time each action on the slow BMC takes.
    #[arg(long, default_value = "1s", value_parser = duration)]
    slow_latency: Duration,
}

#[derive(Args, Debug, Clone)]
struct AllArgs {
    /// Write the results document here (e.g. docs/BENCHMARKS.md).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Smaller sizes and shorter windows (a smoke run; its figures are not for publication).
    #[arg(long)]
    quick: bool,
}

fn pipeline_opts(a: &PipelineArgs, reps: usize) -> pipeline::Options {
    pipeline::Options {
        concurrency: a.concurrency.clone(),
        open_rate: a.open_rate,
        duration: a.duration,
        reps,
        ..pipeline::Options::default()
    }
}

fn ipmi_opts(a: &IpmiArgs, reps: usize) -> ipmi::Options {
    ipmi::Options { fleet: a.fleet as usize, duration: a.duration, reps }
}

fn ipmi_fleet_opts(a: &IpmiFleetArgs, reps: usize) -> ipmi_fleet::Options {
    ipmi_fleet::Options {
        sizes: a.sizes.iter().map(|n| *n as usize).collect(),
        latency: a.latency,
        reps,
        ..ipmi_fleet::Options::default()
    }
}

fn redfish_opts(a: &RedfishArgs, reps: usize) -> redfish::Options {
    redfish::Options { duration: a.duration, batches: a.batches, reps }
}

fn scale_opts(a: &ScaleArgs, reps: usize) -> scale::Options {
    scale::Options {
        bmcs: a.bmcs,
        partitions: a.partitions,
        workers: a.workers.clone(),
        queued: a.queued,
        lane_idle: a.lane_idle,
        lease_ttl: a.lease_ttl,
        rebalance: a.rebalance,
        reps,
        ..scale::Options::default()
    }
}

fn ordering_opts(a: &OrderingArgs, reps: usize) -> ordering::Options {
    ordering::Options {
        batches: a.batches,
        bmc_counts: a.bmcs.clone(),
        sim_latency: a.sim_latency,
        reps,
        ..ordering::Options::default()
    }
}

/// Tenant fairness (issue 32) runs with the isolation benchmark: its window, its repetitions.
fn fairness_opts(a: &IsolationArgs, reps: usize) -> fairness::Options {
    fairness::Options { duration: a.duration.min(Duration::from_secs(3)), reps, ..fairness::Options::default() }
}

fn isolation_opts(a: &IsolationArgs, reps: usize) -> isolation::Options {
    isolation::Options {
        healthy: a.healthy,
        duration: a.duration,
        slow_latency: a.slow_latency,
        reps,
        ..isolation::Options::default()
    }
}

/// Parse a subcommand's defaults (so `all` uses exactly what the subcommands would).
fn defaults<T: Args + clap::FromArgMatches>(extra: &[&str]) -> T {
    let cmd = T::augment_args(clap::Command::new("defaults"));
    let matches = cmd.get_matches_from(std::iter::once("defaults").chain(extra.iter().copied()));
    T::from_arg_matches(&matches).expect("defaults parse")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let reps = cli.reps as usize;
    let started = Instant::now();
    // The program by name only (its build directory says nothing about the run).
    let command_line = std::env::args()
        .enumerate()
        .map(|(i, a)| {
            if i == 0 {
                std::path::Path::new(&a).file_name().map_or(a.clone(), |n| n.to_string_lossy().into_owned())
            } else {
                a
            }
        })
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ");
    let sections = match &cli.command {
        Command::Pipeline(a) => vec![pipeline::run(&pipeline_opts(a, reps)).await?],
        Command::Ipmi(a) => vec![ipmi::run(&ipmi_opts(a, reps)).await?],
        Command::IpmiFleet(a) => vec![ipmi_fleet::run(&ipmi_fleet_opts(a, reps)).await?],
        Command::RolloutFleet(a) => vec![
            ipmi_fleet::rollout::run(&ipmi_fleet::rollout::Options {
                sizes: a.sizes.iter().map(|n| *n as usize).collect(),
                latency: a.latency,
                reps,
                max_parallel: a.max_parallel,
                count_messages: !a.no_message_count,
            })
            .await?,
        ],
        Command::Redfish(a) => vec![redfish::run(&redfish_opts(a, reps)).await?],
        Command::Scale(a) => vec![scale::run(&scale_opts(a, reps)).await?],
        Command::Ordering(a) => vec![ordering::run(&ordering_opts(a, reps)).await?],
        Command::Isolation(a) => {
            vec![isolation::run(&isolation_opts(a, reps)).await?, fairness::run(&fairness_opts(a, reps)).await?]
        }
        Command::Poll(a) => {
            vec![poll::run(&poll::Options { machines: a.machines as usize, interval: a.interval, reps }).await?]
        }
        Command::Console(a) => vec![
            console::run(&console::Options { consoles: a.consoles as usize, rate: a.rate, window: a.window, reps })
                .await?,
        ],
        Command::All(all) => {
            let q = all.quick;
            let (p, i, r, s, o): (PipelineArgs, IpmiArgs, RedfishArgs, ScaleArgs, OrderingArgs) = if q {
                (
                    defaults(&["--duration", "1s"]),
                    defaults(&["--fleet", "4", "--duration", "500ms"]),
                    defaults(&["--duration", "1s", "--batches", "5"]),
                    defaults(&["--bmcs", "1000", "--queued", "5000", "--lane-idle", "5s"]),
                    defaults(&["--batches", "500"]),
                )
            } else {
                (defaults(&[]), defaults(&[]), defaults(&[]), defaults(&[]), defaults(&[]))
            };
            let iso: IsolationArgs = if q { defaults(&["--duration", "1s"]) } else { defaults(&[]) };
            let fleet: IpmiFleetArgs = if q { defaults(&["--sizes", "200"]) } else { defaults(&[]) };
            let reps = if q { 1 } else { reps };
            // Describe the machine before the run loads it.
            let mut machine = report::machine();
            if q {
                machine.push((
                    "mode".into(),
                    "**quick smoke run — reduced sizes, 1 repetition; not representative**".into(),
                ));
            }
            let mut out = vec![];
            // Each section is shown as soon as it is measured.
            let mut show = |section: report::Section| {
                print!("{}", section.to_text());
                out.push(section);
            };
            show(pipeline::run(&pipeline_opts(&p, reps)).await.context("pipeline benchmark")?);
            show(ipmi::run(&ipmi_opts(&i, reps)).await.context("ipmi benchmark")?);
            show(ipmi_fleet::run(&ipmi_fleet_opts(&fleet, reps)).await.context("ipmi-fleet benchmark")?);
            show(redfish::run(&redfish_opts(&r, reps)).await.context("redfish benchmark")?);
            show(scale::run(&scale_opts(&s, reps)).await.context("scale benchmark")?);
            show(ordering::run(&ordering_opts(&o, reps)).await.context("ordering benchmark")?);
            show(isolation::run(&isolation_opts(&iso, reps)).await.context("isolation benchmark")?);
            show(fairness::run(&fairness_opts(&iso, reps)).await.context("tenant fairness benchmark")?);
            let polls: PollArgs = if q { defaults(&["--machines", "500", "--interval", "10s"]) } else { defaults(&[]) };
            show(
                poll::run(&poll::Options { machines: polls.machines as usize, interval: polls.interval, reps: 1 })
                    .await
                    .context("poll benchmark")?,
            );
            if let Some(path) = &all.out {
                let doc = report::document(&machine, &command_line, &out, started.elapsed());
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
                }
                std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
            return Ok(());
        }
    };
    for s in &sections {
        if cli.markdown {
            print!("{}", s.to_markdown());
        } else {
            print!("{}", s.to_text());
        }
    }
    Ok(())
}
