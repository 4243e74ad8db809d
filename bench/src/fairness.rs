//! `isolation` (tenant fairness, issue 32): does one tenant's hung BMCs hurt
//! another tenant's healthy machines on the same partition?
//!
//! One worker owns the only partition. Tenant B's registered machines (all
//! healthy) run a closed loop of 1-action batches (`power status`, one in
//! flight per machine) and their submit → result latency is recorded, side
//! by side in one run:
//!
//! - **B alone**;
//! - **next to A's N hung machines**: tenant A's N registered machines
//!   never answer, and each has as many batches queued as the per-BMC cap
//!   allows (64): A's jobs fill its window of the partition
//!   (`--max-inflight-per-partition`, 256) from N = 4 on, with more queued
//!   behind it.
//!
//! For N = 1, 4, 16, 64, alternating within each repetition, with fresh
//! hung machines each time (no breaker carries over). Goal: B's p99 next
//! to A's hung machines within 2× of B alone.

use crate::fleet::{cancel, status, submit, Fleet, FleetOptions};
use crate::harness;
use crate::report::{Section, Table};
use crate::stats::{median, ms, ratio, Latency};
use anyhow::{bail, Context as _};
use bmcfleet_schema::{Action, Batch, BatchId, BatchState, ErrorCode, Machine, OnError, PowerOp, Protocol, Reply};
use bmcfleet_testing::{SimConfig, SimServer};
use futures::TryStreamExt;
use std::time::{Duration, Instant};

/// Settings of the tenant fairness benchmark.
#[derive(Clone, Debug)]
pub struct Options {
    /// Tenant B's healthy machines, each with one batch in flight.
    pub healthy: usize,
    /// Tenant A's hung machines, one measurement each.
    pub hung: Vec<usize>,
    /// Measurement window per phase.
    pub duration: Duration,
    /// Time each healthy simulated action takes.
    pub sim_latency: Duration,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            healthy: 8,
            hung: vec![1, 4, 16, 64],
            duration: Duration::from_secs(3),
            sim_latency: Duration::from_millis(2),
            reps: 3,
        }
    }
}

const CREDENTIAL: &str = "bench";
const PER_BMC_CAP: usize = bmcfleet_common::streams::DEFAULT_MAX_QUEUED_PER_BMC as usize;

fn batch(machine: &str, deadline: Duration) -> Batch {
    Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: Some(machine.into()),
        bmc: None,
        actions: vec![Action::Power(PowerOp::Status)],
        on_error: OnError::Stop,
        deadline: Some(deadline),
    }
}

async fn register(fleet: &Fleet, name: &str, address: &str, tenant: &str) -> anyhow::Result<()> {
    use bmcfleet_common::streams::{bucket, machines_config, Mode};
    let js = async_nats::jetstream::new(fleet.client.clone());
    let kv = bucket(&js, machines_config(&fleet.subjects, 1), Mode::UseExisting).await.context("machines bucket")?;
    let machine = Machine {
        tenant: tenant.into(),
        ..Machine::new(name, address.parse().context("address")?, Protocol::Sim, CREDENTIAL)
    };
    bmcfleet_common::registry::put(&kv, &machine).await.map_err(anyhow::Error::msg)?;
    Ok(())
}

/// B's closed loops for `window`: every batch's latency.
async fn b_loops(fleet: &Fleet, healthy: usize, window: Duration) -> anyhow::Result<Vec<Duration>> {
    let client = fleet.client.clone();
    let tasks = harness::closed_loops(healthy, Instant::now() + window, move |i| {
        let client = client.clone();
        async move {
            match submit(&client, &batch(&format!("b-node{i}"), Duration::from_secs(60)), true).await? {
                Reply::Result(r) if r.state == BatchState::Succeeded => Ok(()),
                other => bail!("tenant B's batch: {other:?}"),
            }
        }
    });
    Ok(harness::join_samples(tasks, "tenant B loop").await?.into_iter().map(|(_, latency)| latency).collect())
}

/// Delivered, unacknowledged jobs of the partition's consumers whose name
/// ends with `suffix`, and those still pending.
async fn held(fleet: &Fleet, suffix: &str) -> anyhow::Result<(usize, u64)> {
    let js = async_nats::jetstream::new(fleet.client.clone());
    let stream = js.get_stream(fleet.subjects.jobs_stream()).await?;
    let names: Vec<String> = stream.consumer_names().try_collect().await?;
    let (mut held, mut pending) = (0, 0);
    for name in names.iter().filter(|n| n.ends_with(suffix)) {
        let info = stream.consumer_info(name).await?;
        held += info.num_ack_pending;
        pending += info.num_pending;
    }
    Ok((held, pending))
}

/// Queue `per_bmc` batches on each of `machines` (tenant A's hung ones).
async fn fill(fleet: &Fleet, machines: &[String], deadline: Duration) -> anyhow::Result<Vec<BatchId>> {
    let mut ids = vec![];
    for m in machines {
        for _ in 0..PER_BMC_CAP {
            match submit(&fleet.client, &batch(m, deadline), false).await? {
                Reply::Accepted(a) => ids.push(a.id),
                other => bail!("queueing tenant A's batch: {other:?}"),
            }
        }
    }
    Ok(ids)
}

/// Cancel `ids` and wait until every one is final.
async fn clear(fleet: &Fleet, ids: &[BatchId], deadline: Duration) -> anyhow::Result<()> {
    for id in ids {
        match cancel(&fleet.client, *id).await? {
            Reply::Cancelled { .. } => {}
            Reply::Error(e) if e.code == ErrorCode::Conflict => {}
            other => bail!("cancelling tenant A's batch: {other:?}"),
        }
    }
    for id in ids {
        harness::poll(
            deadline + Duration::from_secs(30),
            Duration::from_millis(20),
            "tenant A's batches final",
            || async {
                match status(&fleet.client, *id).await.ok()? {
                    Reply::Status(s) if s.state.is_final() => Some(()),
                    _ => None,
                }
            },
        )
        .await?;
    }
    Ok(())
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let mut section = Section::new(
        "6b. Tenant fairness: tenant B's healthy machines next to tenant A's hung machines on the same partition",
    );
    section.method = vec![
        "One worker process owns the only partition (`--partitions 1`, default `--max-inflight-per-partition` 256 and \
         `--max-queued-per-bmc` 64). Tenant B's registered simulated machines (fixed latency per action) each run a \
         closed loop of 1-action batches (`power status`, one in flight per machine), submitted by machine name with \
         `Bmcfleet-Wait`; the latency is submit → final result through the gateway. **B alone**: B's loops only. \
         **Next to A's N hung machines**: tenant A's N registered machines never answer (the simulator accepts and \
         holds every request), and each has 64 batches queued (the per-BMC cap); measurement starts once the \
         partition holds A's jobs up to its window (N × 64, at most 256) delivered and unacknowledged. A's batches are \
         cancelled afterwards and their running ones end at their deadline."
            .into(),
        "For each N the two phases alternate within each repetition; each repetition uses fresh hung machines. \
         `--bmc-min-interval 0s`, `--poll-interval off`. p50/p99 are per repetition, then the median is taken."
            .into(),
    ];
    let sim = SimServer::start(SimConfig { latency: o.sim_latency, ..SimConfig::default() })
        .await
        .context("starting the simulator")?;
    let mut fleet = Fleet::start(FleetOptions {
        partitions: 1,
        sim: Some(sim.addr()),
        max_queued_per_bmc: PER_BMC_CAP as u32,
        ..FleetOptions::default()
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let creds = dir.path().join("credentials.json");
    std::fs::write(&creds, format!(r#"{{"{CREDENTIAL}": {{"username": "admin", "password": "bench-pw"}}}}"#))?;
    let creds = creds.to_string_lossy().into_owned();
    fleet.spawn_worker("w0", &["--credentials-file".into(), creds, "--poll-interval".into(), "off".into()])?;
    fleet.wait_owned_by(&["w0"], 1, Duration::from_secs(30)).await?;
    for i in 0..o.healthy {
        register(&fleet, &format!("b-node{i}"), &format!("10.77.0.{}", i + 1), "tenant-b").await?;
    }
    let reps = o.reps.max(1);
    for rep in 0..reps {
        for &n in &o.hung {
            for i in 0..n {
                register(&fleet, &format!("a-hung-{rep}-{n}-{i}"), &format!("hang-{rep}-{n}-{i}.bench"), "tenant-a")
                    .await?;
            }
        }
    }
    // Warm-up, and until every gateway and worker copy of the registry knows B's machines.
    harness::poll(Duration::from_secs(30), Duration::from_millis(50), "tenant B's machines known", || async {
        b_loops(&fleet, o.healthy, Duration::from_millis(200)).await.ok()
    })
    .await?;
    b_loops(&fleet, o.healthy, Duration::from_secs(1)).await.context("warm-up")?;

    // Long enough to outlast the fill (N × 64 submits) and the measurement.
    let deadline = o.duration + Duration::from_secs(17);
    // Per N: (alone, loaded) latencies of each repetition.
    let mut results: Vec<(Vec<Latency>, Vec<Latency>)> = vec![(vec![], vec![]); o.hung.len()];
    for rep in 0..reps {
        for (k, &n) in o.hung.iter().enumerate() {
            let alone = Latency::of(&b_loops(&fleet, o.healthy, o.duration).await.context("B alone")?);
            let machines: Vec<String> = (0..n).map(|i| format!("a-hung-{rep}-{n}-{i}")).collect();
            let ids = fill(&fleet, &machines, deadline).await?;
            let window = (n * PER_BMC_CAP).min(256);
            harness::poll(Duration::from_secs(60), Duration::from_millis(20), "tenant A's window full", || async {
                let (held, _) = held(&fleet, "-tenant-a").await.ok()?;
                (held >= window).then_some(())
            })
            .await?;
            let loaded = Latency::of(&b_loops(&fleet, o.healthy, o.duration).await.context("B next to A")?);
            clear(&fleet, &ids, deadline).await?;
            // Nothing of A's left held or queued before the next phase.
            harness::poll(
                deadline + Duration::from_secs(30),
                Duration::from_millis(50),
                "tenant A's window empty",
                || async {
                    let (held, pending) = held(&fleet, "-tenant-a").await.ok()?;
                    (held == 0 && pending == 0).then_some(())
                },
            )
            .await?;
            eprintln!(
                "fairness rep {} N={n}: B's p99 {} ms alone, {} ms next to A's hung machines",
                rep + 1,
                ms(alone.p99_ms),
                ms(loaded.p99_ms)
            );
            results[k].0.push(alone);
            results[k].1.push(loaded);
        }
    }

    let mut t = Table::new(
        format!(
            "Tenant B's batch latency, {} healthy machines ({} ms per action), one partition, one worker; tenant A: N hung machines with 64 queued batches each",
            o.healthy,
            ms(o.sim_latency.as_secs_f64() * 1e3)
        ),
        &["N (A's hung machines)", "B alone p50 (ms)", "B alone p99 (ms)", "B next to A p50 (ms)", "B next to A p99 (ms)", "p99 ratio", "samples"],
    );
    for (k, &n) in o.hung.iter().enumerate() {
        let (alone, loaded) = &results[k];
        let med = |v: &[Latency], f: fn(&Latency) -> f64| median(&v.iter().map(f).collect::<Vec<_>>());
        let (a50, a99, l50, l99) =
            (med(alone, |l| l.p50_ms), med(alone, |l| l.p99_ms), med(loaded, |l| l.p50_ms), med(loaded, |l| l.p99_ms));
        let samples = alone.iter().chain(loaded).map(|l| l.samples).sum::<usize>();
        t.row(vec![n.to_string(), ms(a50), ms(a99), ms(l50), ms(l99), ratio(l99 / a99), samples.to_string()]);
        section.goal(
            &format!("tenant B's p99 latency next to tenant A's {n} hung machine(s) on the same partition"),
            "≤ 2× B alone",
            ratio(l99 / a99),
            l99 / a99 <= 2.0,
        );
    }
    section.tables.push(t);
    section.findings.push(
        "Each tenant has a consumer, and so a window of delivered jobs, of its own in every partition: from N = 4 on \
         A's hung machines hold A's whole window (and more of A's jobs wait behind it), while B's jobs are still pulled \
         at once. Before (one consumer per partition), N = 4 filled the partition's window and B got no reply within \
         15 s (issue 32)."
            .into(),
    );
    section.elapsed = started.elapsed();
    Ok(section)
}
