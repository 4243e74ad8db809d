//! `pipeline`: the transport limit (a raw async-nats JetStream round trip)
//! against bmcfleet's submit → result through the gateway and a worker,
//! with an instant simulated BMC.
//!
//! Raw round trip: the producer publishes a job-sized message to a
//! work-queue file stream (waiting for the PubAck, as the gateway does); a
//! responder pull-consumes it, acks it and publishes a reply to the subject
//! named in a header; the producer receives the reply. bmcfleet: the
//! producer sends `bmcfleet.submit` with `Bmcfleet-Wait: true` and a 1-action
//! batch (`power status`) for a `sim` BMC with zero latency, and receives the
//! final `BatchResult`.
//!
//! Both run against the same nats-server, one after the other within each
//! repetition, closed loop at fixed concurrencies and open loop at a fixed
//! arrival rate.

use crate::fleet::{sim_address, sim_batch, status_round_trip, Fleet, FleetOptions};
use crate::harness;
use crate::proc::{CpuMeter, Meter};
use crate::report::{Section, Table};
use crate::stats::{median, ms, ops, rate, ratio, Latency};
use anyhow::Context as _;
use async_nats::jetstream::{self, consumer::pull, stream};
use async_nats::HeaderMap;
use bmcfleet_schema::{Action, Encoding, Job, PowerOp};
use bmcfleet_testing::{SimConfig, SimServer};
use futures::StreamExt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Settings of the pipeline benchmark.
#[derive(Clone, Debug)]
pub struct Options {
    /// Closed-loop concurrencies; the last one is the "moderate load" of the throughput goal.
    pub concurrency: Vec<usize>,
    /// Open-loop arrival rate (requests per second) for the added-latency goal.
    pub open_rate: f64,
    pub duration: Duration,
    pub warmup: Duration,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            concurrency: vec![1, 16],
            open_rate: 200.0,
            duration: Duration::from_secs(4),
            warmup: Duration::from_secs(1),
            reps: 3,
        }
    }
}

const RAW_STREAM: &str = "RAWBENCH";
const REPLY_HEADER: &str = "Bench-Reply";

/// The raw JetStream round-trip client.
struct Raw {
    js: jetstream::Context,
    next: AtomicU64,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    payload: bytes::Bytes,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Raw {
    /// Create the stream and start the responder (its own connection) and the reply dispatcher.
    async fn start(fleet: &Fleet) -> anyhow::Result<Raw> {
        let client = fleet.client.clone();
        let js = jetstream::new(client.clone());
        js.create_stream(stream::Config {
            name: RAW_STREAM.into(),
            subjects: vec!["rawbench.jobs.>".into()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .context("creating the raw stream")?;
        let responder_client = fleet.nats.client().await?;
        let rjs = jetstream::new(responder_client.clone());
        let consumer = rjs
            .get_stream(RAW_STREAM)
            .await?
            .create_consumer(pull::Config {
                durable_name: Some("responder".into()),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                max_ack_pending: 10_000,
                ..Default::default()
            })
            .await
            .context("creating the raw consumer")?;
        let mut messages = consumer.stream().max_messages_per_batch(256).messages().await?;
        let responder = tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                let reply = msg.headers.as_ref().and_then(|h| h.get(REPLY_HEADER)).map(|v| v.as_str().to_owned());
                let _ = msg.ack().await;
                if let Some(reply) = reply {
                    let _ = responder_client.publish(reply, msg.payload.clone()).await;
                }
            }
        });
        let pending: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
        let mut replies = client.subscribe("rawbench.reply.>").await?;
        client.flush().await?;
        let sink = pending.clone();
        let dispatcher = tokio::spawn(async move {
            while let Some(msg) = replies.next().await {
                let id = msg.subject.rsplit('.').next().and_then(|s| s.parse::<u64>().ok());
                if let Some(tx) = id.and_then(|id| sink.lock().expect("pending lock").remove(&id)) {
                    let _ = tx.send(());
                }
            }
        });
        // A job-sized payload: exactly what the gateway would queue for one batch.
        let batch = sim_batch(&sim_address(1), vec![Action::Power(PowerOp::Status)])?;
        let mut batch = batch;
        let target = batch.bmc.take().expect("an ad hoc sim batch");
        let job = Job {
            id: batch.id.expect("id"),
            admitted_at_ms: 0,
            deadline_at_ms: u64::MAX / 2,
            batch,
            target,
            tenant: "default".into(),
            sealed_params: vec![],
            by_operator: true,
            record_at_claim: false,
        };
        let payload = Encoding::MessagePack.encode(&job)?.into();
        Ok(Raw { js, next: AtomicU64::new(0), pending, payload, tasks: vec![responder, dispatcher] })
    }

    async fn round_trip(&self, task: usize) -> anyhow::Result<()> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending lock").insert(id, tx);
        let mut h = HeaderMap::new();
        h.insert(REPLY_HEADER, format!("rawbench.reply.{id}").as_str());
        let ack = self.js.publish_with_headers(format!("rawbench.jobs.{task}"), h, self.payload.clone()).await?;
        ack.await.context("raw publish ack")?;
        tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .context("raw reply timed out")?
            .context("raw reply lost")?;
        Ok(())
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Side {
    Raw,
    Bmcfleet,
}

/// One measured run: completions inside the window and their latencies.
struct Run {
    rate: f64,
    latency: Latency,
    /// CPU time per operation, per process (µs).
    cpu_per_op_us: Vec<(String, f64)>,
    /// Messages through nats-server (in + out) per operation.
    msgs_per_op: f64,
    /// Log bytes written by the gateway and worker per operation.
    log_bytes_per_op: f64,
}

/// Counters read at the start and end of a measurement window.
struct Counters {
    msgs: Option<(u64, u64)>,
    log_bytes: u64,
}

impl Ctx {
    async fn counters(&self) -> Counters {
        Counters {
            msgs: self.fleet.nats.message_counts().await,
            log_bytes: self.fleet.gateway.log_bytes() + self.fleet.workers.values().map(|w| w.log_bytes()).sum::<u64>(),
        }
    }

    fn per_op(a: &Counters, b: &Counters, ops: usize) -> (f64, f64) {
        let n = ops.max(1) as f64;
        let msgs = match (a.msgs, b.msgs) {
            (Some((ai, ao)), Some((bi, bo))) => ((bi - ai) + (bo - ao)) as f64 / n,
            _ => f64::NAN,
        };
        (msgs, b.log_bytes.saturating_sub(a.log_bytes) as f64 / n)
    }
}

struct Ctx {
    fleet: Fleet,
    raw: Raw,
    meters: Vec<Meter>,
}

impl Ctx {
    async fn op(self: &Arc<Self>, side: Side, slot: usize) -> anyhow::Result<()> {
        match side {
            Side::Raw => self.raw.round_trip(slot).await,
            Side::Bmcfleet => status_round_trip(&self.fleet.client, 1000 + slot).await,
        }
    }
}

/// Closed loop: `concurrency` tasks, each one request at a time.
async fn closed_loop(
    ctx: &Arc<Ctx>,
    side: Side,
    concurrency: usize,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<Run> {
    let from = Instant::now() + warmup;
    let to = from + duration;
    let cpu = CpuMeter::new(&ctx.meters);
    let op = {
        let ctx = ctx.clone();
        move |slot| {
            let ctx = ctx.clone();
            async move { ctx.op(side, slot).await }
        }
    };
    let tasks = harness::closed_loops(concurrency, to, op);
    tokio::time::sleep_until(from.into()).await;
    let cpu = cpu.restart();
    let c0 = ctx.counters().await;
    tokio::time::sleep_until(to.into()).await;
    let cpu = cpu.stop();
    let c1 = ctx.counters().await;
    // Only calls that ended inside the measured window count.
    let samples: Vec<Duration> = harness::join_samples(tasks, "benchmark task")
        .await?
        .into_iter()
        .filter(|(end, _)| *end >= from && *end < to)
        .map(|(_, latency)| latency)
        .collect();
    let (msgs_per_op, log_bytes_per_op) = Ctx::per_op(&c0, &c1, samples.len());
    Ok(Run {
        rate: rate(samples.len(), duration),
        latency: Latency::of(&samples),
        cpu_per_op_us: cpu.per_op_us(samples.len()),
        msgs_per_op,
        log_bytes_per_op,
    })
}

/// Open loop: requests start at a fixed rate whatever the latency.
async fn open_loop(
    ctx: &Arc<Ctx>,
    side: Side,
    per_sec: f64,
    warmup: Duration,
    duration: Duration,
) -> anyhow::Result<Run> {
    let from = Instant::now() + warmup;
    let to = from + duration;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sec));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut tasks = tokio::task::JoinSet::new();
    let mut n = 0usize;
    let cpu = CpuMeter::new(&ctx.meters);
    let mut cpu = Some(cpu);
    let mut started_cpu = None;
    loop {
        tick.tick().await;
        let now = Instant::now();
        if now >= to {
            break;
        }
        if now >= from && started_cpu.is_none() {
            started_cpu = cpu.take().map(CpuMeter::restart);
        }
        let ctx = ctx.clone();
        let slot = n % 64;
        n += 1;
        tasks.spawn(async move {
            let t0 = Instant::now();
            ctx.op(side, slot).await?;
            Ok::<_, anyhow::Error>((t0, Instant::now()))
        });
    }
    let cpu = started_cpu.context("open loop never reached its window")?.stop();
    let mut samples = vec![];
    while let Some(r) = tasks.join_next().await {
        let (t0, t1) = r.context("benchmark task")??;
        if t0 >= from && t0 < to {
            samples.push(t1 - t0);
        }
    }
    Ok(Run {
        rate: rate(samples.len(), duration),
        latency: Latency::of(&samples),
        cpu_per_op_us: cpu.per_op_us(samples.len()),
        msgs_per_op: f64::NAN,
        log_bytes_per_op: f64::NAN,
    })
}

/// Median over repetitions of (rate, p50, p99) and of the CPU split.
struct Agg {
    rate: f64,
    p50: f64,
    p99: f64,
    cpu: Vec<(String, f64)>,
    msgs: f64,
    log_bytes: f64,
}

fn aggregate(runs: &[Run]) -> Agg {
    let names: Vec<String> =
        runs.first().map(|r| r.cpu_per_op_us.iter().map(|(n, _)| n.clone()).collect()).unwrap_or_default();
    Agg {
        rate: median(&runs.iter().map(|r| r.rate).collect::<Vec<_>>()),
        p50: median(&runs.iter().map(|r| r.latency.p50_ms).collect::<Vec<_>>()),
        p99: median(&runs.iter().map(|r| r.latency.p99_ms).collect::<Vec<_>>()),
        msgs: median(&runs.iter().map(|r| r.msgs_per_op).collect::<Vec<_>>()),
        log_bytes: median(&runs.iter().map(|r| r.log_bytes_per_op).collect::<Vec<_>>()),
        cpu: names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.clone(),
                    median(&runs.iter().map(|r| r.cpu_per_op_us.get(i).map_or(f64::NAN, |x| x.1)).collect::<Vec<_>>()),
                )
            })
            .collect(),
    }
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("1. Pipeline overhead: raw JetStream round trip vs bmcfleet submit → result");
    section.method = vec![
        "**Raw**: the producer publishes a job-sized MessagePack message (the exact `Job` the gateway would queue) to a \
         work-queue, file-backed stream and waits for the PubAck; a responder on its own connection pull-consumes it, \
         acks it and publishes a reply to the subject named in a header; the producer receives the reply. \
         **bmcfleet**: the producer sends `bmcfleet.submit` with `Bmcfleet-Wait: true` for a 1-action batch \
         (`power status`) to a `sim` BMC with zero latency; the gateway (process) admits and queues it, the worker \
         (process, default settings, JSON logs at info) runs it and publishes the result, the gateway replies with \
         the final `BatchResult`. Both sides share one nats-server 2.x (JetStream, file store) and the simulator runs \
         in the bench process."
            .into(),
        "Closed loop: N producer tasks, each with one request in flight (each on its own BMC for bmcfleet). \
         Open loop: requests start at a fixed rate whatever the latency (the 'moderate load' of the latency goal). \
         Each repetition runs raw then bmcfleet, after a warm-up; figures are medians over repetitions. \
         CPU per round trip is each process's user+system CPU time (`/proc/PID/stat`) during the window divided by \
         the completed round trips: it shows where the time goes."
            .into(),
    ];

    let sim = SimServer::start(SimConfig::default()).await.context("starting the simulator")?;
    let mut fleet = Fleet::start(FleetOptions { sim: Some(sim.addr()), ..FleetOptions::default() }).await?;
    fleet.spawn_worker("w0", &[])?;
    fleet.wait_owned_by(&["w0"], 1, Duration::from_secs(30)).await?;
    let raw = Raw::start(&fleet).await?;
    let meters = vec![
        Meter::pid("nats-server", fleet.nats.pid()),
        Meter::pid("gateway", fleet.gateway.pid()),
        Meter::pid("worker", fleet.workers.get("w0").and_then(|w| w.pid())),
        Meter::this_process("bench (producer, sim)"),
    ];
    let ctx = Arc::new(Ctx { fleet, raw, meters });

    let mut closed: Vec<(usize, Vec<Run>, Vec<Run>)> = o.concurrency.iter().map(|c| (*c, vec![], vec![])).collect();
    let (mut open_raw, mut open_bmc) = (vec![], vec![]);
    for rep in 0..o.reps {
        for (c, raw_runs, bmc_runs) in closed.iter_mut() {
            raw_runs.push(closed_loop(&ctx, Side::Raw, *c, o.warmup, o.duration).await.context("raw closed loop")?);
            bmc_runs.push(
                closed_loop(&ctx, Side::Bmcfleet, *c, o.warmup, o.duration).await.context("bmcfleet closed loop")?,
            );
        }
        open_raw.push(open_loop(&ctx, Side::Raw, o.open_rate, o.warmup, o.duration).await.context("raw open loop")?);
        open_bmc.push(
            open_loop(&ctx, Side::Bmcfleet, o.open_rate, o.warmup, o.duration).await.context("bmcfleet open loop")?,
        );
        eprintln!("pipeline: repetition {} of {} done", rep + 1, o.reps);
    }

    let (inventory_table, inventory_total) = inventory(&ctx).await.context("message inventory")?;

    let mut t = Table::new(
        "Closed loop (N requests in flight): throughput and latency",
        &[
            "in flight",
            "raw msg/s",
            "raw p50 ms",
            "raw p99 ms",
            "bmcfleet batch/s",
            "bmcfleet p50 ms",
            "bmcfleet p99 ms",
            "bmcfleet / raw rate",
            "added p50 ms",
            "added p99 ms",
        ],
    );
    let mut cpu_table = Table::new(
        "Where the time goes, closed loop: CPU µs per round trip by process, messages through nats-server and log bytes per round trip",
        &["side", "in flight", "nats-server", "gateway", "worker", "bench (producer, sim)", "total CPU", "NATS messages (in + out)", "log bytes (gateway + worker)"],
    );
    let mut moderate = None;
    for (c, raw_runs, bmc_runs) in &closed {
        let (r, b) = (aggregate(raw_runs), aggregate(bmc_runs));
        t.row(vec![
            c.to_string(),
            ops(r.rate),
            ms(r.p50),
            ms(r.p99),
            ops(b.rate),
            ms(b.p50),
            ms(b.p99),
            ratio(b.rate / r.rate),
            ms(b.p50 - r.p50),
            ms(b.p99 - r.p99),
        ]);
        for (side, a) in [("raw", &r), ("bmcfleet", &b)] {
            let mut row = vec![side.to_string(), c.to_string()];
            row.extend(a.cpu.iter().map(|(_, us)| crate::stats::num(*us, 0)));
            row.push(crate::stats::num(a.cpu.iter().map(|(_, us)| us).sum::<f64>(), 0));
            row.push(crate::stats::num(a.msgs, 1));
            row.push(crate::stats::num(a.log_bytes, 0));
            cpu_table.row(row);
        }
        moderate = Some((*c, r, b));
    }
    let (or, ob) = (aggregate(&open_raw), aggregate(&open_bmc));
    let mut open = Table::new(
        format!("Open loop at {} requests/s: latency", ops(o.open_rate)),
        &["side", "achieved /s", "p50 ms", "p99 ms", "CPU µs per round trip (all processes)"],
    );
    open.row(vec![
        "raw JetStream".into(),
        ops(or.rate),
        ms(or.p50),
        ms(or.p99),
        crate::stats::num(or.cpu.iter().map(|x| x.1).sum::<f64>(), 0),
    ]);
    open.row(vec![
        "bmcfleet".into(),
        ops(ob.rate),
        ms(ob.p50),
        ms(ob.p99),
        crate::stats::num(ob.cpu.iter().map(|x| x.1).sum::<f64>(), 0),
    ]);
    open.row(vec!["added by bmcfleet".into(), String::new(), ms(ob.p50 - or.p50), ms(ob.p99 - or.p99), String::new()]);
    section.tables = vec![t, open, cpu_table, inventory_table];

    if let Some((c, r, b)) = moderate {
        let share = b.rate / r.rate;
        section.goal(
            &format!("pipeline throughput vs raw JetStream ({c} in flight)"),
            "≥ 50 % of raw",
            format!("{} % ({} vs {} /s)", crate::stats::num(share * 100.0, 0), ops(b.rate), ops(r.rate)),
            share >= 0.5,
        );
        section.goal(
            &format!("pipeline throughput vs raw JetStream ({c} in flight), issue 35"),
            "≥ 30 % of raw",
            format!("{} %", crate::stats::num(share * 100.0, 0)),
            share >= 0.3,
        );
        section.goal(
            "NATS messages per single batch (in + out), issue 35",
            "≤ 12",
            format!("{} (raw round trip: {})", crate::stats::num(b.msgs, 1), crate::stats::num(r.msgs, 1)),
            b.msgs <= 12.0,
        );
        let added = ob.p99 - or.p99;
        section.goal(
            &format!("added p99 latency, open loop at {} /s", ops(o.open_rate)),
            "< 5 ms",
            format!("{} ms (p99 {} vs {} ms)", ms(added), ms(ob.p99), ms(or.p99)),
            added < 5.0,
        );
        let total = |a: &Agg| a.cpu.iter().map(|x| x.1).sum::<f64>();
        section.findings.push(format!(
            "At {c} in flight a bmcfleet batch costs {} µs of CPU over all processes against {} µs for a raw round trip \
             ({} of it in nats-server, {} in the worker, {} in the gateway): {} the CPU for {} of the rate. Both sides are \
             CPU-bound on this 2-CPU machine.",
            crate::stats::num(total(&b), 0),
            crate::stats::num(total(&r), 0),
            crate::stats::num(b.cpu.first().map_or(f64::NAN, |x| x.1), 0),
            crate::stats::num(b.cpu.get(2).map_or(f64::NAN, |x| x.1), 0),
            crate::stats::num(b.cpu.get(1).map_or(f64::NAN, |x| x.1), 0),
            ratio(total(&b) / total(&r)),
            ratio(b.rate / r.rate),
        ));
        section.findings.push(format!(
            "Each bmcfleet batch moved {} messages through nats-server against {} for a raw round trip (status record \
             reads and compare-and-set writes, the job, three events stored in the events stream, acks and replies), and \
             the gateway and worker wrote {} bytes of JSON logs for it.",
            crate::stats::num(b.msgs, 1),
            crate::stats::num(r.msgs, 1),
            crate::stats::num(b.log_bytes, 0)
        ));
        section.findings.push(format!(
            "The open-loop rate ({} /s) is {} % of bmcfleet's closed-loop capacity at {c} in flight.",
            ops(o.open_rate),
            crate::stats::num(o.open_rate / b.rate * 100.0, 0)
        ));
    }
    section.findings.push(format!(
        "A spy subscribed to `>` saw {} messages published per single-action batch (the last table: what each is \
         for is in docs/BATCHES.md, \"Messages of one batch\"); nats-server counts each again as it delivers it.",
        crate::stats::num(inventory_total, 1)
    ));
    drop(ctx);
    drop(sim);
    section.elapsed = started.elapsed();
    Ok(section)
}

/// Sequential batches the message inventory runs (one in flight).
const INVENTORY_BATCHES: usize = 40;

/// What one message seen on the server is, for the inventory: its subject
/// with the per-batch, per-inbox and per-machine tokens replaced, and for a
/// reply, what it answers.
pub(crate) fn message_class(subject: &str, headers: Option<&HeaderMap>, asked: &HashMap<String, String>) -> String {
    if let Some(what) = asked.get(subject) {
        return format!("↳ reply to {what}");
    }
    if subject.starts_with("_INBOX.") || subject.starts_with("_R_.") {
        return "↳ reply (unknown request)".into();
    }
    let toks: Vec<&str> = subject.split('.').collect();
    let kind = headers.and_then(|h| h.get(bmcfleet_schema::subject::EVENT_HEADER)).map(|v| v.as_str().to_owned());
    match toks.as_slice() {
        ["bmc", "jobs", ..] => "bmc.jobs.<p>.<tenant>.<bmc> (job)".into(),
        ["bmc", "events", ..] => format!("bmc.events.<tenant>.<batch> ({})", kind.unwrap_or_else(|| "?".into())),
        ["$JS", "ACK", stream, ..] => format!("$JS.ACK.{stream}.<consumer>… (ack)"),
        ["$KV", bucket, ..] => format!("$KV.{bucket}.<key> (put)"),
        ["$JS", "API", "DIRECT", "GET", stream, ..] => format!("$JS.API.DIRECT.GET.{stream}.<key>"),
        ["$JS", "API", "CONSUMER", "MSG", "NEXT", stream, ..] => {
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.<consumer>")
        }
        ["$JS", "API", "STREAM", "INFO", stream, ..] => format!("$JS.API.STREAM.INFO.{stream}"),
        ["$JS", "API", rest @ ..] => {
            let keep: Vec<&str> = rest.iter().take(2).copied().collect();
            format!("$JS.API.{}…", keep.join("."))
        }
        ["$JS", "EVENT", "ADVISORY", kind, ..] => format!("$JS.EVENT.ADVISORY.{kind}…"),
        _ => {
            let keep: Vec<&str> = toks.iter().take(3).copied().collect();
            format!("{}…", keep.join("."))
        }
    }
}

/// Every message nats-server carries for one single-action batch, by kind:
/// a spy subscribed to `>` sees each published message once (requests,
/// replies and PubAcks, KV puts, direct gets, pulls and their deliveries,
/// acks, events), counted over [`INVENTORY_BATCHES`] sequential batches
/// and divided. Background traffic (lease renewals, heartbeats) shows up
/// as fractions.
async fn inventory(ctx: &Arc<Ctx>) -> anyhow::Result<(Table, f64)> {
    let spy = async_nats::connect(ctx.fleet.nats.url()).await.context("connecting the spy")?;
    let mut sub = spy.subscribe(">").await?;
    spy.flush().await?;
    // One batch first so the lane, session and caches are warm as in the closed loops.
    status_round_trip(&ctx.fleet.client, 999).await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(50), sub.next()).await {}
    let counting = async {
        let mut asked: HashMap<String, String> = HashMap::new();
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        while let Some(m) = sub.next().await {
            let class = message_class(&m.subject, m.headers.as_ref(), &asked);
            if let Some(r) = &m.reply {
                asked.insert(r.to_string(), class.trim_start_matches("↳ reply to ").to_owned());
            }
            *counts.entry(class).or_default() += 1;
            if m.subject.as_str() == "bench.inventory.end" {
                break;
            }
        }
        counts
    };
    let driving = async {
        for _ in 0..INVENTORY_BATCHES {
            status_round_trip(&ctx.fleet.client, 999).await?;
        }
        // Trailing messages (the job's ack after the reply) arrive before this marker.
        tokio::time::sleep(Duration::from_millis(200)).await;
        spy.publish("bench.inventory.end", "".into()).await?;
        anyhow::Ok(())
    };
    let (counts, driven) = tokio::join!(counting, driving);
    driven?;
    let mut t = Table::new(
        format!(
            "Messages one single-action batch sends through nats-server, by kind (a `>` spy, {INVENTORY_BATCHES} sequential batches; fractions are background traffic)"
        ),
        &["message (subject; ↳ = the reply to it)", "per batch"],
    );
    let mut total = 0.0;
    let mut rows: Vec<(String, f64)> = counts
        .into_iter()
        .filter(|(k, _)| !k.starts_with("bench.inventory"))
        .map(|(k, n)| (k, n as f64 / INVENTORY_BATCHES as f64))
        .collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    for (k, per) in rows {
        total += per;
        t.row(vec![format!("`{k}`"), crate::stats::num(per, 2)]);
    }
    t.row(vec!["**total published (each is delivered about once more)**".into(), crate::stats::num(total, 1)]);
    Ok((t, total))
}
