//! `rollout-fleet`: issue 35's fleet measurement. The same RMCP+ responder
//! as `ipmi-fleet` (one `bmc-ipmi-fleet` process, N BMCs, a fixed delay
//! before every reply), the BMCs registered as machines (protocol `ipmi`,
//! one sealed named credential), and each workload submitted as ONE
//! rollout (`rollout.submit`, every machine by name, `max_parallel` the
//! most allowed) against FreeIPMI on the same responder, side by side and
//! interleaved repetition by repetition. Makespan = rollout submit →
//! `rollout_finished` received. The gateway's and the worker's RSS are read
//! after each rollout; one more rollout (not timed) runs with a spy on `>`
//! counting every message nats-server carries, per machine.

use super::{
    freeipmi_run, meters, start_worker, stop_worker, Client, Options as FleetBenchOptions, Resources, Responder, Run,
    Tools, Workload, PASSWORD, USER,
};
use crate::fleet::Fleet;
use crate::harness;
use crate::proc::CpuMeter;
use crate::report::{Section, Table};
use crate::stats::{median, mib, num, ratio};
use anyhow::{bail, Context as _};
use bmcfleet_schema::rollout::{RolloutEvent, RolloutEventKind, RolloutId, RolloutRequest, RolloutState};
use bmcfleet_schema::{Encoding, OnError, Reply};
use futures::StreamExt;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Options {
    pub sizes: Vec<usize>,
    pub latency: Duration,
    pub reps: usize,
    /// The rollout's `max_parallel`.
    pub max_parallel: u32,
    /// Count every message of one more rollout per size (a `>` spy).
    pub count_messages: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sizes: vec![1000, 10_000],
            latency: Duration::from_millis(20),
            reps: 3,
            max_parallel: bmcfleet_schema::rollout::MAX_PARALLEL,
            count_messages: true,
        }
    }
}

/// The named credential every registered machine uses.
const CREDENTIAL: &str = "fleet";

fn machine_name(i: usize) -> String {
    format!("bmc-{i:05}")
}

/// Register the responder's BMCs as machines `bmc-00000`… with one sealed credential.
async fn register(fleet: &Fleet, r: &Responder) -> anyhow::Result<Vec<String>> {
    use bmcfleet_common::streams::{bucket, credentials_config, machines_config, Mode};
    let js = async_nats::jetstream::new(fleet.client.clone());
    let creds = bucket(&js, credentials_config(&fleet.subjects, 1), Mode::UseExisting).await?;
    let sealed = bmcfleet_common::sealing::Sealer::new(&fleet.sealing.1)
        .map_err(anyhow::Error::msg)?
        .seal(
            USER,
            &bmcfleet_schema::Secret::new(PASSWORD.to_owned()),
            &bmcfleet_common::sealing::Binding::credential(CREDENTIAL),
        )
        .map_err(anyhow::Error::msg)?;
    creds.put(CREDENTIAL, serde_json::to_vec(&sealed)?.into()).await?;
    let machines = bucket(&js, machines_config(&fleet.subjects, 1), Mode::UseExisting).await?;
    let machines = &machines;
    let names: Vec<String> = (0..r.count).map(machine_name).collect();
    let puts: Vec<anyhow::Result<()>> = futures::stream::iter((0..r.count).map(|i| async move {
        let address: bmcfleet_schema::BmcAddress = format!("127.0.0.1:{}", r.port(i)).parse()?;
        let m = bmcfleet_schema::Machine::new(machine_name(i), address, bmcfleet_schema::Protocol::Ipmi, CREDENTIAL);
        bmcfleet_common::registry::put(machines, &m).await.map_err(|e| anyhow::anyhow!("registering: {e}"))?;
        Ok(())
    }))
    .buffer_unordered(64)
    .collect()
    .await;
    puts.into_iter().collect::<anyhow::Result<()>>()?;
    Ok(names)
}

/// What one rollout run measured.
struct RolloutRun {
    id: RolloutId,
    run: Run,
    gateway_rss_kib: u64,
    worker_rss_kib: u64,
}

/// Submit `workload` over `names` as one rollout and wait for `rollout_finished`.
async fn rollout_run(
    fleet: &Fleet,
    names: &[String],
    r: &Responder,
    workload: Workload,
    o: &Options,
) -> anyhow::Result<RolloutRun> {
    let worker = fleet.workers.values().next().and_then(|w| w.pid());
    let id: RolloutId = ulid::Ulid::new();
    let mut events = fleet.client.subscribe(fleet.subjects.rollout_events_any(&id)).await?;
    fleet.client.flush().await?;
    let req = RolloutRequest {
        id: Some(id),
        selector: None,
        machines: names.to_vec(),
        actions: workload.actions(),
        on_error: OnError::Stop,
        max_parallel: Some(o.max_parallel),
        canary: None,
        canary_successes: None,
        stop_after_failures: None,
        deadline: None,
        batch_deadline: Some(Duration::from_secs(300)),
        plan: false,
    };
    let body = Encoding::MessagePack.encode(&req)?;
    let cpu = CpuMeter::new(&meters(fleet, worker, r));
    let started = Instant::now();
    let request = async_nats::Request::new().payload(body.into()).timeout(Some(Duration::from_secs(120)));
    let msg = fleet.client.send_request("bmcfleet.rollout.submit", request).await.context("rollout.submit")?;
    match Encoding::MessagePack.decode::<Reply>(&msg.payload)? {
        Reply::Rollout(_) => {}
        other => bail!("rollout.submit: {other:?}"),
    }
    let submit = started.elapsed();
    let deadline = Duration::from_secs(1800);
    let finished = tokio::time::timeout(deadline, async {
        while let Some(m) = events.next().await {
            if let Ok(ev) = Encoding::MessagePack.decode::<RolloutEvent>(&m.payload) {
                if let RolloutEventKind::RolloutFinished { state, counts, not_started, .. } = ev.event {
                    return Some((state, counts, not_started));
                }
            }
        }
        None
    })
    .await
    .context("the rollout did not finish in 30 minutes")?
    .context("the rollout events subscription ended")?;
    let makespan = started.elapsed();
    let cpu = cpu.stop();
    let (state, counts, not_started) = finished;
    let mut failures = BTreeMap::new();
    if state != RolloutState::Succeeded {
        failures.insert(format!("rollout {state:?}"), 0);
    }
    if counts.not_succeeded() + not_started > 0 {
        failures.insert(
            format!(
                "{} failed, {} cancelled, {} refused, {} not started",
                counts.failed, counts.cancelled, counts.refused, not_started
            ),
            (counts.not_succeeded() + not_started) as usize,
        );
    }
    let ok = counts.succeeded as usize;
    Ok(RolloutRun {
        id,
        run: Run {
            bmcs: names.len(),
            makespan,
            ok,
            ok_upper: ok,
            submit: Some(submit),
            failures,
            cpu: Some(cpu),
            ..Run::default()
        },
        gateway_rss_kib: fleet.gateway.pid().and_then(harness::rss_kib).unwrap_or(0),
        worker_rss_kib: worker.and_then(harness::rss_kib).unwrap_or(0),
    })
}

/// What a `>` spy saw of one rollout: every message by kind, and when
/// each machine's job, status writes and events passed (the timeline).
struct Counted {
    counts: BTreeMap<String, usize>,
    ok: usize,
    timeline: Timeline,
}

/// Seconds from the bench's `rollout.submit` to each step of each machine,
/// as the spy received them (its own delivery delay included).
#[derive(Default)]
struct Timeline {
    /// Per machine index: job queued, status record written `queued` (none
    /// for a rollout's batch since `record_at_claim`), claimed (`running`),
    /// final, `batch_finished`, `rollout_progress`.
    job: Vec<f64>,
    queued: Vec<f64>,
    claimed: Vec<f64>,
    result: Vec<f64>,
    finished: Vec<f64>,
    progress: Vec<f64>,
    rollout_finished: f64,
    /// The rollout's record writes (its creation by `rollout.submit`, then
    /// the driver's rounds) and its lease's first write (a driver took it).
    record_writes: Vec<f64>,
    leased: f64,
}

impl Timeline {
    fn new(n: usize) -> Timeline {
        Timeline {
            job: vec![f64::NAN; n],
            queued: vec![f64::NAN; n],
            claimed: vec![f64::NAN; n],
            result: vec![f64::NAN; n],
            finished: vec![f64::NAN; n],
            progress: vec![f64::NAN; n],
            rollout_finished: f64::NAN,
            record_writes: vec![],
            leased: f64::NAN,
        }
    }

    fn table(&self, title: String) -> Table {
        let mut t = Table::new(
            title,
            &["step (each machine's; s since `rollout.submit`)", "machines seen", "first", "median", "p90", "last"],
        );
        let row = |t: &mut Table, name: &str, v: &[f64]| {
            let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
            s.sort_by(f64::total_cmp);
            let q = |p: f64| num(crate::stats::percentile_sorted(&s, p), 3);
            t.row(vec![
                name.into(),
                s.len().to_string(),
                s.first().map_or("n/a".into(), |x| num(*x, 3)),
                q(50.0),
                q(90.0),
                s.last().map_or("n/a".into(), |x| num(*x, 3)),
            ]);
        };
        let once = |t: &mut Table, name: &str, x: f64| {
            t.row(vec![name.into(), "-".into(), "-".into(), num(x, 3), "-".into(), "-".into()])
        };
        once(
            &mut t,
            "the rollout: record created (`rollout.submit` admitted it)",
            self.record_writes.first().copied().unwrap_or(f64::NAN),
        );
        once(&mut t, "the rollout: a driver took its lease", self.leased);
        once(
            &mut t,
            "the rollout: the driver's first record write (machines started)",
            self.record_writes.get(1).copied().unwrap_or(f64::NAN),
        );
        row(&mut t, "job stored (the driver's submit)", &self.job);
        row(&mut t, "status record written `queued` (none since `record_at_claim`)", &self.queued);
        row(&mut t, "status record claimed (`running`)", &self.claimed);
        row(&mut t, "status record final (the result)", &self.result);
        row(&mut t, "`batch_finished`", &self.finished);
        row(&mut t, "`rollout_progress` (the driver recorded it)", &self.progress);
        let lag = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| y - x).collect::<Vec<f64>>();
        row(&mut t, "per machine: job → claim (queued)", &lag(&self.job, &self.claimed));
        row(&mut t, "per machine: claim → result (the BMC work)", &lag(&self.claimed, &self.result));
        row(&mut t, "per machine: `batch_finished` → `rollout_progress`", &lag(&self.finished, &self.progress));
        t.row(vec![
            "`rollout_finished`".into(),
            "-".into(),
            "-".into(),
            num(self.rollout_finished, 3),
            "-".into(),
            "-".into(),
        ]);
        t
    }
}

/// Every message nats-server carries during one more rollout of `workload`,
/// by kind (a spy on `>` sees each published message once), per machine,
/// and the rollout's timeline.
async fn count_messages(
    fleet: &Fleet,
    names: &[String],
    r: &Responder,
    workload: Workload,
    o: &Options,
) -> anyhow::Result<Counted> {
    let spy = async_nats::connect(fleet.nats.url()).await.context("connecting the spy")?;
    let mut sub = spy.subscribe(">").await?;
    spy.flush().await?;
    // What was queued before: drained for at most a second (background
    // traffic such as lease renewals never stops).
    let drain = tokio::time::Instant::now() + Duration::from_secs(1);
    while let Ok(Some(_)) = tokio::time::timeout_at(drain, sub.next()).await {}
    let counting = async {
        let mut asked: HashMap<String, String> = HashMap::new();
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut seen = vec![];
        let mut submitted = None;
        while let Some(m) = sub.next().await {
            let at = Instant::now();
            if m.subject.as_str() == "bench.rollout.end" {
                break;
            }
            if m.subject.as_str() == "bmcfleet.rollout.submit" {
                submitted.get_or_insert(at);
            }
            let class = crate::pipeline::message_class(&m.subject, m.headers.as_ref(), &asked);
            if let Some(reply) = &m.reply {
                asked.insert(reply.to_string(), class.trim_start_matches("↳ reply to ").to_owned());
            }
            *counts.entry(class).or_default() += 1;
            seen.push((at, m));
        }
        (counts, seen, submitted)
    };
    let driving = async {
        let run = rollout_run(fleet, names, r, workload, o).await?;
        // The driver's last writes and the final acks land before the marker.
        tokio::time::sleep(Duration::from_millis(500)).await;
        spy.publish("bench.rollout.end", "".into()).await?;
        anyhow::Ok(run)
    };
    let ((counts, seen, submitted), run) = tokio::join!(counting, driving);
    let run = run?;
    let timeline = timeline(run.id, names, &fleet.subjects, seen, submitted.unwrap_or_else(Instant::now));
    Ok(Counted { counts, ok: run.run.ok, timeline })
}

/// Each machine's steps, from what the spy saw.
fn timeline(
    id: RolloutId,
    names: &[String],
    subjects: &bmcfleet_schema::subject::Subjects,
    seen: Vec<(Instant, async_nats::Message)>,
    t0: Instant,
) -> Timeline {
    let by_batch: HashMap<String, usize> = names
        .iter()
        .enumerate()
        .map(|(i, m)| (bmcfleet_schema::rollout::batch_id(id, i as u32, m).to_string(), i))
        .collect();
    let mut t = Timeline::new(names.len());
    let jobs = format!("{}.jobs.", subjects.prefix);
    let events = format!("{}.events.", subjects.prefix);
    let batches = format!("$KV.{}_BATCHES.", subjects.stream);
    let record = format!("$KV.{}.{id}", subjects.rollouts_bucket());
    let lease = format!("$KV.{}.{id}", subjects.rollout_leases_bucket());
    let rollout = format!(".rollout.{id}");
    for (at, m) in seen {
        let s = at.saturating_duration_since(t0).as_secs_f64();
        let subject = m.subject.as_str();
        let header = |name: &str| m.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
        if subject == record {
            t.record_writes.push(s);
        } else if subject == lease {
            if t.leased.is_nan() {
                t.leased = s;
            }
        } else if subject.starts_with(&jobs) {
            if let Some(&i) = header(async_nats::header::NATS_MESSAGE_ID.as_ref()).and_then(|b| by_batch.get(&b)) {
                if t.job[i].is_nan() {
                    t.job[i] = s;
                }
            }
        } else if let Some(batch) = subject.strip_prefix(batches.as_str()) {
            let state = Encoding::MessagePack.decode::<bmcfleet_schema::BatchStatus>(&m.payload).map(|b| b.state);
            if let (Some(&i), Ok(state)) = (by_batch.get(batch), state) {
                let slot = match state {
                    bmcfleet_schema::BatchState::Queued => &mut t.queued[i],
                    bmcfleet_schema::BatchState::Running => &mut t.claimed[i],
                    _ => &mut t.result[i],
                };
                if slot.is_nan() {
                    *slot = s;
                }
            }
        } else if subject.starts_with(&events) && subject.ends_with(&rollout) {
            match Encoding::MessagePack.decode::<RolloutEvent>(&m.payload).map(|e| e.event) {
                Ok(RolloutEventKind::RolloutProgress { index, .. }) if (index as usize) < names.len() => {
                    t.progress[index as usize] = s;
                }
                Ok(RolloutEventKind::RolloutFinished { .. }) => t.rollout_finished = s,
                _ => {}
            }
        } else if subject.starts_with(&events)
            && header(bmcfleet_schema::subject::EVENT_HEADER).as_deref() == Some("batch_finished")
        {
            if let Some(&i) = subject.rsplit('.').next().and_then(|b| by_batch.get(b)) {
                t.finished[i] = s;
            }
        }
    }
    t
}

fn client_label(c: Client) -> &'static str {
    match c {
        Client::Cold => "bmcfleet: one rollout, sessions opened in the run",
        Client::Warm => "bmcfleet: one rollout, sessions already open",
        Client::FreeIpmi => "FreeIPMI (ipmipower; ipmi-config for PXE)",
        Client::Ipmitool => "ipmitool",
    }
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    if o.sizes.is_empty() || o.sizes.contains(&0) {
        bail!("--sizes needs fleet sizes of at least 1");
    }
    let tools = Tools {
        ipmipower: harness::find_program("ipmipower", None, &[]).context("ipmipower is required")?,
        ipmi_config: harness::find_program("ipmi-config", None, &[]).context("ipmi-config is required")?,
        ipmitool: harness::find_program("ipmitool", None, &[]).context("ipmitool is required")?,
    };
    let fo = FleetBenchOptions { latency: o.latency, reps: o.reps, ..FleetBenchOptions::default() };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut section = Section::new("11. Rollouts at fleet scale: one rollout over RMCP+ BMCs vs FreeIPMI (issue 35)");
    section.method.push(format!(
        "One `bmc-ipmi-fleet` responder (latency {}) per size; nats-server, one gateway and one worker as processes \
         (the worker's flags as in `ipmi-fleet`, plus `--poll-interval off --inventory-interval off`: the machines' own state polls are not the workload); every BMC registered as a machine (protocol ipmi, one sealed named \
         credential). A workload is ONE `rollout.submit` naming every machine, `max_parallel` {}, no canary; makespan = \
         submit → `rollout_finished` received by the bench. Cold: a fresh worker (every session opened in the run). \
         FreeIPMI as in `ipmi-fleet` (ipmipower chunks of {} hosts, {} at a time; ipmi-config -F {}). Repetitions \
         interleaved. Load average at the start: {}",
        super::dur(o.latency),
        o.max_parallel,
        fo.ipmipower_chunk,
        fo.ipmipower_parallel,
        fo.config_fanout,
        load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    ));
    for &n in &o.sizes {
        // The registered machines' own state polls are not the workload.
        let extra = ["--poll-interval", "off", "--inventory-interval", "off"];
        let (responder, mut fleet) = super::start_fleet("rollout-fleet", n, &fo, &tools, &extra).await?;
        let names = register(&fleet, &responder).await?;
        let mut runs: BTreeMap<(Workload, Client), Vec<Run>> = BTreeMap::new();
        let (mut gw_rss, mut wk_rss) = (vec![], vec![]);
        let mut idle = vec![];
        for rep in 0..o.reps {
            let id = format!("r{rep}");
            let pid = start_worker(&mut fleet, &id, fo.partitions).await?;
            idle.push(Resources::of(pid)?.rss_kib as f64);
            let a = rollout_run(&fleet, &names, &responder, Workload::Status, o).await?;
            gw_rss.push(a.gateway_rss_kib as f64);
            wk_rss.push(a.worker_rss_kib as f64);
            runs.entry((Workload::Status, Client::Cold)).or_default().push(a.run);
            let w = rollout_run(&fleet, &names, &responder, Workload::Status, o).await?;
            runs.entry((Workload::Status, Client::Warm)).or_default().push(w.run);
            stop_worker(&mut fleet, &id).await?;
            let id = format!("r{rep}b");
            start_worker(&mut fleet, &id, fo.partitions).await?;
            let b = rollout_run(&fleet, &names, &responder, Workload::Cycle, o).await?;
            gw_rss.push(b.gateway_rss_kib as f64);
            wk_rss.push(b.worker_rss_kib as f64);
            runs.entry((Workload::Cycle, Client::Cold)).or_default().push(b.run);
            stop_worker(&mut fleet, &id).await?;
            runs.entry((Workload::Status, Client::FreeIpmi))
                .or_default()
                .push(freeipmi_run(&fleet, &responder, Workload::Status, &fo, &tools).await?);
            runs.entry((Workload::Cycle, Client::FreeIpmi))
                .or_default()
                .push(freeipmi_run(&fleet, &responder, Workload::Cycle, &fo, &tools).await?);
            eprintln!("rollout-fleet: {n} BMCs, repetition {} of {} done", rep + 1, o.reps);
        }
        let med = |w: Workload, c: Client, f: &dyn Fn(&Run) -> f64| {
            median(&runs.get(&(w, c)).map_or(vec![], |v| v.iter().map(f).collect::<Vec<_>>()))
        };
        let mut t = Table::new(
            format!("{n} BMCs, one rollout per workload vs FreeIPMI: medians over {} repetitions", o.reps),
            &["workload", "client", "makespan (s)", "BMCs ok", "CPU s (worker / gateway / nats-server)", "vs FreeIPMI"],
        );
        for w in [Workload::Status, Workload::Cycle] {
            let peer = med(w, Client::FreeIpmi, &|r| r.makespan.as_secs_f64());
            for c in [Client::Cold, Client::Warm, Client::FreeIpmi] {
                if !runs.contains_key(&(w, c)) {
                    continue;
                }
                let m = med(w, c, &|r| r.makespan.as_secs_f64());
                let cpu = |name: &str| num(med(w, c, &|r| r.cpu_of(name)), 2);
                t.row(vec![
                    match w {
                        Workload::Status => "(a) power status".into(),
                        Workload::Cycle => "(b) PXE + cycle + status".into(),
                    },
                    client_label(c).into(),
                    num(m, 2),
                    format!("{} of {n}", num(med(w, c, &|r| r.ok as f64), 0)),
                    if c == Client::FreeIpmi {
                        "-".into()
                    } else {
                        format!("{} / {} / {}", cpu("worker"), cpu("gateway"), cpu("nats-server"))
                    },
                    ratio(m / peer),
                ]);
            }
        }
        section.tables.push(t);
        let cold_a = med(Workload::Status, Client::Cold, &|r| r.makespan.as_secs_f64())
            / med(Workload::Status, Client::FreeIpmi, &|r| r.makespan.as_secs_f64());
        let cold_b = med(Workload::Cycle, Client::Cold, &|r| r.makespan.as_secs_f64())
            / med(Workload::Cycle, Client::FreeIpmi, &|r| r.makespan.as_secs_f64());
        let all_ok = runs.iter().filter(|((_, c), _)| *c != Client::FreeIpmi).all(|(_, v)| v.iter().all(|r| r.ok == n));
        section.goal(
            &format!("{n} BMCs, cold power status as one rollout vs ipmipower"),
            "≤ 0.8×",
            format!("{} (every machine ok: {all_ok})", ratio(cold_a)),
            cold_a <= 0.8 && all_ok,
        );
        section.goal(
            &format!("{n} BMCs, PXE + cycle + status as one rollout vs FreeIPMI"),
            "≤ 0.5×",
            ratio(cold_b),
            cold_b <= 0.5 && all_ok,
        );
        let mut mem =
            Table::new(format!("{n} BMCs: memory after each rollout (medians)"), &["process", "RSS", "per machine"]);
        let g = median(&gw_rss);
        let wk = median(&wk_rss);
        mem.row(vec!["gateway".into(), mib(g), crate::stats::kib_each(g, n)]);
        mem.row(vec!["worker (every session live)".into(), mib(wk), crate::stats::kib_each(wk - median(&idle), n)]);
        section.tables.push(mem);
        if o.count_messages {
            // A worker that has loaded the registry and opened every session
            // (one rollout first, not counted): what is counted is the
            // rollout's own traffic, not a worker's start.
            start_worker(&mut fleet, "count", fo.partitions).await?;
            rollout_run(&fleet, &names, &responder, Workload::Status, o).await?;
            let status = count_messages(&fleet, &names, &responder, Workload::Status, o).await?;
            // A rollout that changes something: each batch is claimed first.
            let cycle = count_messages(&fleet, &names, &responder, Workload::Cycle, o).await?;
            stop_worker(&mut fleet, "count").await?;
            // And where a cold rollout's makespan goes: a fresh worker, the spy on.
            start_worker(&mut fleet, "timeline", fo.partitions).await?;
            let cold = count_messages(&fleet, &names, &responder, Workload::Status, o).await?;
            stop_worker(&mut fleet, "timeline").await?;
            let mut totals = vec![];
            for (what, counted) in [("power status", &status), ("PXE + cycle + status", &cycle)] {
                let mut t = Table::new(
                    format!(
                        "{n} BMCs: messages one rollout of {what} sends through nats-server, per machine (a `>` spy; \
                         sessions already open; {} of {n} ok)",
                        counted.ok
                    ),
                    &["message (subject; ↳ = the reply to it)", "per machine"],
                );
                let mut rows: Vec<(String, f64)> =
                    counted.counts.iter().map(|(k, c)| (k.clone(), *c as f64 / n as f64)).collect();
                rows.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                let total: f64 = rows.iter().map(|r| r.1).sum();
                for (k, per) in rows {
                    if per >= 0.005 {
                        t.row(vec![format!("`{k}`"), num(per, 2)]);
                    }
                }
                t.row(vec!["**total published (each is delivered about once more)**".into(), num(total, 1)]);
                section.tables.push(t);
                totals.push((what, total));
            }
            section.tables.push(status.timeline.table(format!(
                "{n} BMCs: where the makespan of the counted rollout (power status, sessions already open) goes, per machine"
            )));
            section.tables.push(cold.timeline.table(format!(
                "{n} BMCs: where the makespan of a cold rollout (power status, a fresh worker, the spy on; {} of {n} ok) goes, per machine",
                cold.ok
            )));
            for (what, total) in totals {
                section.goal(
                    &format!("{n} BMCs: NATS messages per machine in a rollout of {what} (published)"),
                    "≤ 8",
                    num(total, 1),
                    total <= 8.0,
                );
            }
        }
        drop(fleet);
        drop(responder);
    }
    section.elapsed = started.elapsed();
    Ok(section)
}
