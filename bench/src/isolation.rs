//! `isolation`: does a hung or a slow BMC hurt its neighbours?
//!
//! One worker owns the only partition, so every BMC below shares one
//! consumer, one dispatcher and one worker process. Healthy BMCs run a
//! closed loop of 1-action batches (`power status`, each healthy BMC with one
//! batch in flight) and their submit → result latency is recorded, in two
//! phases per repetition, side by side in one run:
//!
//! - **baseline**: healthy BMCs alone;
//! - **with faulty peers**: the same, while a hung BMC (accepts, never
//!   answers) holds one action until its deadline (longer than the window)
//!   and a slow BMC answers each action only after a delay, in a closed loop;
//! - **next to a backlog**: the same, while a slow BMC has a full queue:
//!   64-action batches submitted until the gateway answers `bmc_queue_full`
//!   (the default `--max-queued-per-bmc`), all held by the same partition.
//!
//! The phases alternate within each repetition; the hung batch's result is
//! awaited before the next baseline starts, and each repetition uses fresh
//! faulty BMCs (so no circuit breaker carries over). Reported: p50/p99 of
//! each phase (medians over repetitions) and their ratio, with the goal that
//! the healthy p99 with faulty peers, and next to a backlog, stays within 2×
//! of the baseline.

use crate::fleet::{cancel, sim_batch, status, status_round_trip, submit, Fleet, FleetOptions};
use crate::harness;
use crate::report::{Section, Table};
use crate::stats::{median, ms, ops, rate, ratio, Latency};
use anyhow::{bail, Context as _};
use bmcfleet_schema::{Action, BatchState, ErrorCode, PowerOp, Reply};
use bmcfleet_testing::{SimConfig, SimServer};
use std::time::{Duration, Instant};

/// Settings of the isolation benchmark.
#[derive(Clone, Debug)]
pub struct Options {
    /// Healthy BMCs, each with one batch in flight.
    pub healthy: usize,
    /// Measurement window per phase.
    pub duration: Duration,
    /// Time each healthy simulated action takes.
    pub sim_latency: Duration,
    /// Time each action on the slow BMC takes.
    pub slow_latency: Duration,
    pub warmup: Duration,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            healthy: 20,
            duration: Duration::from_secs(4),
            sim_latency: Duration::from_millis(2),
            slow_latency: Duration::from_secs(1),
            warmup: Duration::from_secs(1),
            reps: 3,
        }
    }
}

/// One phase's healthy-BMC latencies.
struct Phase {
    latency: Latency,
    rate: f64,
}

/// Run the healthy closed loops for `window`; returns every batch's latency.
async fn healthy_loops(
    client: &async_nats::Client,
    healthy: usize,
    window: Duration,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let started = Instant::now();
    let client = client.clone();
    let tasks = harness::closed_loops(healthy, started + window, move |i| {
        let client = client.clone();
        async move { status_round_trip(&client, 1000 + i).await.context("a healthy BMC's batch") }
    });
    let all = harness::join_samples(tasks, "healthy loop").await?.into_iter().map(|(_, latency)| latency).collect();
    Ok((all, started.elapsed()))
}

/// The faulty peers of a phase (each repetition uses fresh BMCs).
#[derive(Clone, Copy)]
enum Faults {
    None,
    /// A hung and a slow BMC, in closed loops.
    HungAndSlow(usize),
    /// A slow BMC whose queue is full.
    Backlog(usize),
}

/// Fill a slow BMC's queue with 64-action batches until the gateway refuses
/// the next with `bmc_queue_full`; the ids queued.
async fn fill_backlog(fleet: &Fleet, bmc: &str) -> anyhow::Result<Vec<bmcfleet_schema::BatchId>> {
    let mut ids = Vec::new();
    loop {
        let b = sim_batch(bmc, vec![Action::Power(PowerOp::Status); 64])?;
        match submit(&fleet.client, &b, false).await? {
            Reply::Accepted(a) => ids.push(a.id),
            Reply::Error(e) if e.code == ErrorCode::BmcQueueFull => return Ok(ids),
            other => bail!("filling the backlog: {other:?}"),
        }
        if ids.len() > 100_000 {
            bail!("the gateway never refused a batch for a full BMC queue");
        }
    }
}

async fn phase(fleet: &Fleet, sim: &SimServer, o: &Options, faults: Faults) -> anyhow::Result<Phase> {
    let mut peers = tokio::task::JoinSet::new();
    let mut backlog = Vec::new();
    if let Faults::Backlog(rep) = faults {
        let slow = format!("slow-backlog-{rep}.bench");
        let slow_key = slow.parse::<bmcfleet_schema::BmcAddress>()?.key().to_string();
        backlog = fill_backlog(fleet, &slow).await?;
        crate::harness::poll(
            Duration::from_secs(30),
            Duration::from_millis(5),
            "the backlogged BMC's first request",
            || async { sim.calls(&slow_key).iter().any(|c| c.action.is_some()).then_some(()) },
        )
        .await?;
    }
    if let Faults::HungAndSlow(rep) = faults {
        // A hung BMC: one action that waits for its deadline, past the window.
        let mut hung = sim_batch(&format!("hang-{rep}.bench"), vec![Action::Power(PowerOp::Status)])?;
        hung.deadline = Some(o.duration + Duration::from_secs(2));
        let hung_key = hung.bmc.as_ref().expect("ad hoc").address.key().to_string();
        let client = fleet.client.clone();
        peers.spawn(async move {
            match submit(&client, &hung, true).await? {
                Reply::Result(r)
                    if r.results[0]
                        .error
                        .as_ref()
                        .is_some_and(|e| matches!(e.code, ErrorCode::Timeout | ErrorCode::DeadlineExceeded)) =>
                {
                    Ok(())
                }
                other => bail!("the hung BMC's batch did not time out: {other:?}"),
            }
        });
        // A slow BMC: a closed loop of slow actions for the whole window.
        let slow = format!("slow-{rep}.bench");
        let slow_key = slow.parse::<bmcfleet_schema::BmcAddress>()?.key().to_string();
        let client = fleet.client.clone();
        let end = Instant::now() + o.duration;
        peers.spawn(async move {
            while Instant::now() < end {
                let b = sim_batch(&slow, vec![Action::Power(PowerOp::Status)])?;
                match submit(&client, &b, true).await? {
                    Reply::Result(r) if r.state == BatchState::Succeeded => {}
                    other => bail!("the slow BMC's batch failed: {other:?}"),
                }
            }
            Ok(())
        });
        // Measure only once both faulty peers are occupying their lanes.
        crate::harness::poll(
            Duration::from_secs(30),
            Duration::from_millis(5),
            "the faulty BMCs' first requests",
            || async {
                (sim.calls(&hung_key).iter().any(|c| c.action.is_none())
                    && sim.calls(&slow_key).iter().any(|c| c.action.is_some()))
                .then_some(())
            },
        )
        .await?;
    }
    let (samples, elapsed) = healthy_loops(&fleet.client, o.healthy, o.duration).await?;
    while let Some(r) = peers.join_next().await {
        r.context("faulty peer")??;
    }
    // Clear the backlog before the next phase: cancelled batches are skipped.
    for id in &backlog {
        match cancel(&fleet.client, *id).await? {
            Reply::Cancelled { .. } => {}
            Reply::Error(e) if e.code == ErrorCode::Conflict => {} // finished already
            other => bail!("cancelling the backlog: {other:?}"),
        }
    }
    if let Some(last) = backlog.last() {
        crate::harness::poll(
            Duration::from_secs(120),
            Duration::from_millis(20),
            "the cancelled backlog to drain",
            || async {
                match status(&fleet.client, *last).await.ok()? {
                    Reply::Status(s) if s.state.is_final() => Some(()),
                    _ => None,
                }
            },
        )
        .await?;
    }
    Ok(Phase { latency: Latency::of(&samples), rate: rate(samples.len(), elapsed) })
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let mut section =
        Section::new("6. Isolation: healthy BMCs next to a hung and a slow BMC on the same partition and worker");
    section.method = vec![
        "One worker process owns the only partition (`--partitions 1`), so every BMC shares one consumer, one \
         dispatcher and one worker. Healthy simulated BMCs (fixed latency per action) each run a closed loop of \
         1-action batches (`power status`, one in flight per BMC); the latency is submit → final result through \
         the gateway. **Baseline**: healthy BMCs alone. **With faulty peers**: the same, while a hung BMC (accepts \
         the connection, never answers) holds one action until its batch deadline, which is longer than the window, \
         and a slow BMC answers every action after a fixed delay, in a closed loop. Measurement starts once both \
         faulty BMCs have received a request. **Next to a backlog**: the same, after a slow BMC's queue was filled \
         with 64-action batches until the gateway answered `bmc_queue_full` (the default `--max-queued-per-bmc` 64); \
         measurement starts once its first action reached the simulator, and the backlog is cancelled afterwards."
            .into(),
        "The two phases alternate within each repetition (after a warm-up); each repetition uses fresh faulty BMCs \
         and waits for the hung batch's timeout before the next baseline. The worker runs with \
         `--bmc-min-interval 0s` so that per-BMC pacing does not add to the closed loops' latency. p50/p99 are per \
         repetition, then the median is taken."
            .into(),
    ];
    let sim = SimServer::start(SimConfig {
        latency: o.sim_latency,
        slow_latency: o.slow_latency,
        record_calls: true,
        ..SimConfig::default()
    })
    .await
    .context("starting the simulator")?;
    // The fleet starts workers with --bmc-min-interval 0s.
    let mut fleet = Fleet::start(FleetOptions {
        partitions: 1,
        sim: Some(sim.addr()),
        max_queued_per_bmc: bmcfleet_common::streams::DEFAULT_MAX_QUEUED_PER_BMC as u32,
        ..FleetOptions::default()
    })
    .await?;
    fleet.spawn_worker("w0", &[])?;
    fleet.wait_owned_by(&["w0"], 1, Duration::from_secs(30)).await?;
    healthy_loops(&fleet.client, o.healthy, o.warmup).await.context("warm-up")?;

    let (mut base, mut faulty, mut backlog) = (vec![], vec![], vec![]);
    for rep in 0..o.reps.max(1) {
        base.push(phase(&fleet, &sim, o, Faults::None).await.context("baseline phase")?);
        faulty.push(phase(&fleet, &sim, o, Faults::HungAndSlow(rep)).await.context("phase with faulty peers")?);
        backlog.push(phase(&fleet, &sim, o, Faults::Backlog(rep)).await.context("phase next to a backlog")?);
        eprintln!(
            "isolation rep {}: healthy p99 {} ms alone, {} ms with a hung and a slow peer, {} ms next to a full slow queue",
            rep + 1,
            ms(base[rep].latency.p99_ms),
            ms(faulty[rep].latency.p99_ms),
            ms(backlog[rep].latency.p99_ms)
        );
    }
    let med = |v: &[Phase], f: fn(&Phase) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
    let (b50, b99, brate) =
        (med(&base, |p| p.latency.p50_ms), med(&base, |p| p.latency.p99_ms), med(&base, |p| p.rate));
    let (f50, f99, frate) =
        (med(&faulty, |p| p.latency.p50_ms), med(&faulty, |p| p.latency.p99_ms), med(&faulty, |p| p.rate));
    let (l50, l99, lrate) =
        (med(&backlog, |p| p.latency.p50_ms), med(&backlog, |p| p.latency.p99_ms), med(&backlog, |p| p.rate));
    let samples = |v: &[Phase]| v.iter().map(|p| p.latency.samples).sum::<usize>();

    let mut t = Table::new(
        format!(
            "Healthy-BMC batch latency, {} healthy BMCs ({} ms per action), one partition, one worker; hung BMC: never answers; slow BMC: {} ms per action",
            o.healthy,
            ms(o.sim_latency.as_secs_f64() * 1e3),
            ms(o.slow_latency.as_secs_f64() * 1e3)
        ),
        &["phase", "p50 (ms)", "p99 (ms)", "batches/s", "samples"],
    );
    t.row(vec!["baseline (healthy only)".into(), ms(b50), ms(b99), ops(brate), samples(&base).to_string()]);
    t.row(vec!["with a hung and a slow BMC".into(), ms(f50), ms(f99), ops(frate), samples(&faulty).to_string()]);
    t.row(vec![
        "ratio (faulty / baseline)".into(),
        ratio(f50 / b50),
        ratio(f99 / b99),
        ratio(frate / brate),
        String::new(),
    ]);
    t.row(vec![
        "next to a slow BMC with a full queue".into(),
        ms(l50),
        ms(l99),
        ops(lrate),
        samples(&backlog).to_string(),
    ]);
    t.row(vec![
        "ratio (backlog / baseline)".into(),
        ratio(l50 / b50),
        ratio(l99 / b99),
        ratio(lrate / brate),
        String::new(),
    ]);
    section.tables.push(t);
    section.goal(
        "healthy BMCs' p99 latency with a hung and a slow BMC on the same partition and worker",
        "≤ 2× baseline p99",
        ratio(f99 / b99),
        f99 / b99 <= 2.0,
    );
    section.goal(
        "healthy BMCs' p99 latency next to a slow BMC whose queue is full (64-action batches up to the default per-BMC cap)",
        "≤ 2× baseline p99",
        ratio(l99 / b99),
        l99 / b99 <= 2.0,
    );
    section.findings.push(format!(
        "A hung BMC waiting for its deadline and a slow BMC in a closed loop change healthy neighbours' p50 by {} and p99 by {}; \
         each occupies only its own lane.",
        ratio(f50 / b50),
        ratio(f99 / b99)
    ));
    section.elapsed = started.elapsed();
    Ok(section)
}
