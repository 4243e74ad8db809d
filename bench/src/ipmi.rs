//! `ipmi`: power status (and Get Device ID) operations per second against 1
//! and N OpenIPMI `ipmi_sim` BMCs, side by side:
//! - bmcfleet's native provider (`IpmiConnector`, one RMCP+ session per BMC
//!   opened once and reused, no pipeline),
//! - `ipmitool -I lanplus -C 3` executed once per call (what exec-based
//!   tools do), one sequential loop per BMC,
//! - FreeIPMI (`ipmipower --stat`, `ipmi-raw`) over the whole fleet in one
//!   invocation (its own parallel fan-out), invocations back to back.

use crate::proc::{CpuMeter, Meter};
use crate::report::{Section, Table};
use crate::stats::{median, num, ops, ratio};
use anyhow::{bail, Context as _};
use bmcfleet_ipmi::{IpmiConnector, IpmiSession, RmcpTransport};
use bmcfleet_provider::Offer;
use bmcfleet_provider::{BmcSession, Ctx};
use bmcfleet_schema::{PowerOp, RawIpmi, RawRequest};
use bmcfleet_testing::ipmi::IpmiSim;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

#[derive(Clone, Debug)]
pub struct Options {
    /// BMCs in the fleet case.
    pub fleet: usize,
    pub duration: Duration,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { fleet: 20, duration: Duration::from_secs(2), reps: 3 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Get Chassis Status (ipmi_sim forks its chassis_control program for the power state).
    PowerStatus,
    /// Get Device ID (answered by ipmi_sim itself).
    DeviceId,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Native,
    Ipmitool,
    FreeIpmi,
}

/// One measurement.
#[derive(Clone, Debug)]
struct Sample {
    rate: f64,
    errors: usize,
    /// CPU µs per successful op: client side (bench + its child processes), BMC side (ipmi_sim + its children).
    client_cpu_us: f64,
    bmc_cpu_us: f64,
}

type Session = Arc<Mutex<IpmiSession<RmcpTransport>>>;

struct Fleet {
    sims: Vec<IpmiSim>,
    sessions: Vec<Session>,
    sim_meters: Vec<Meter>,
}

fn ipmitool_args(sim: &IpmiSim, op: Op) -> Vec<String> {
    let mut a: Vec<String> =
        ["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", &sim.port().to_string(), "-U", sim.username(), "-E"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    match op {
        Op::PowerStatus => a.extend(["power".into(), "status".into()]),
        Op::DeviceId => a.extend(["raw".into(), "6".into(), "1".into()]),
    }
    a
}

fn freeipmi_command(sims: &[&IpmiSim], op: Op) -> (String, Vec<String>) {
    let hosts = sims.iter().map(|s| format!("127.0.0.1:{}", s.port())).collect::<Vec<_>>().join(",");
    let user = sims.first().map(|s| s.username().to_owned()).unwrap_or_default();
    let password = sims.first().map(|s| s.password().expose().to_owned()).unwrap_or_default();
    let mut a: Vec<String> = vec![
        "-D".into(),
        "LAN_2_0".into(),
        "-h".into(),
        hosts,
        "-u".into(),
        user,
        "-p".into(),
        password,
        "-W".into(),
        "opensesspriv".into(),
    ];
    match op {
        Op::PowerStatus => {
            a.push("--stat".into());
            ("ipmipower".into(), a)
        }
        Op::DeviceId => {
            a.extend(["0".into(), "6".into(), "1".into()]);
            ("ipmi-raw".into(), a)
        }
    }
}

/// Successful answers in FreeIPMI output (one line per host).
fn freeipmi_successes(op: Op, stdout: &str) -> usize {
    stdout
        .lines()
        .filter(|l| match op {
            Op::PowerStatus => l.trim_end().ends_with(": on") || l.trim_end().ends_with(": off"),
            // `rcvd: <cmd> <completion code> ...`: completion code 00.
            Op::DeviceId => l.split("rcvd:").nth(1).is_some_and(|r| r.split_whitespace().nth(1) == Some("00")),
        })
        .count()
}

async fn native_op(session: &Session, op: Op) -> bool {
    let ctx = Ctx::with_timeout(Duration::from_secs(10));
    let mut s = session.lock().await;
    match op {
        Op::PowerStatus => match s.power() {
            Some(p) => p.power(&ctx, PowerOp::Status).await.is_ok_and(|st| st.is_some()),
            None => false,
        },
        Op::DeviceId => {
            let req = RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: vec![] });
            match s.raw() {
                Some(r) => r.raw(&ctx, &req).await.is_ok_and(|resp| resp.status == 0 && !resp.data.is_empty()),
                None => false,
            }
        }
    }
}

async fn ipmitool_op(sim_args: &[String], password: &str, op: Op) -> bool {
    let out = tokio::process::Command::new("ipmitool")
        .args(sim_args)
        .env("IPMI_PASSWORD", password)
        .stdin(Stdio::null())
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            match op {
                Op::PowerStatus => text.contains("Chassis Power is"),
                Op::DeviceId => !text.trim().is_empty(),
            }
        }
        _ => false,
    }
}

impl Fleet {
    /// Run `client` doing `op` against the first `n` BMCs for `duration`.
    async fn measure(&self, client: Client, op: Op, n: usize, duration: Duration) -> anyhow::Result<Sample> {
        let mut meters = vec![Meter::this_process_with_children("bench")];
        meters.extend(self.sim_meters.iter().cloned());
        let cpu = CpuMeter::new(&meters);
        let started = Instant::now();
        let end = started + duration;
        let (ok, errors) = match client {
            Client::Native | Client::Ipmitool => {
                let mut tasks = tokio::task::JoinSet::new();
                for i in 0..n {
                    let session = self.sessions[i].clone();
                    let args = ipmitool_args(&self.sims[i], op);
                    let password = self.sims[i].password().expose().to_owned();
                    tasks.spawn(async move {
                        let (mut ok, mut err) = (0usize, 0usize);
                        while Instant::now() < end {
                            let success = match client {
                                Client::Native => native_op(&session, op).await,
                                _ => ipmitool_op(&args, &password, op).await,
                            };
                            if success {
                                ok += 1
                            } else {
                                err += 1
                            }
                        }
                        (ok, err)
                    });
                }
                let (mut ok, mut err) = (0, 0);
                while let Some(r) = tasks.join_next().await {
                    let (o, e) = r.context("client task")?;
                    ok += o;
                    err += e;
                }
                (ok, err)
            }
            Client::FreeIpmi => {
                let sims: Vec<&IpmiSim> = self.sims.iter().take(n).collect();
                let (program, args) = freeipmi_command(&sims, op);
                let (mut ok, mut err) = (0, 0);
                while Instant::now() < end {
                    let out = tokio::process::Command::new(&program)
                        .args(&args)
                        .stdin(Stdio::null())
                        .output()
                        .await
                        .with_context(|| format!("running {program}"))?;
                    let good = freeipmi_successes(op, &String::from_utf8_lossy(&out.stdout));
                    ok += good;
                    err += n.saturating_sub(good);
                }
                (ok, err)
            }
        };
        let elapsed = started.elapsed();
        let usage = cpu.stop().per_op_us(ok);
        let client_cpu_us = usage.first().map_or(f64::NAN, |x| x.1);
        let bmc_cpu_us = usage.iter().skip(1).map(|x| x.1).sum();
        Ok(Sample { rate: crate::stats::rate(ok, elapsed), errors, client_cpu_us, bmc_cpu_us })
    }
}

/// Wall time of one run of the chassis_control program, as ipmi_sim runs it per power read.
async fn chassis_control_cost(sim: &IpmiSim, runs: usize) -> anyhow::Result<f64> {
    let script = bmcfleet_testing::ipmi::template_dir().join("chassis_control");
    let mut times = vec![];
    for _ in 0..runs {
        let t0 = Instant::now();
        let out = tokio::process::Command::new("/bin/sh")
            .arg(&script)
            .arg(sim.chassis_dir())
            .args(["get", "power"])
            .output()
            .await?;
        if !out.status.success() {
            bail!("chassis_control failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(&times))
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let n = o.fleet.max(1);
    let mut section =
        Section::new(format!("2. IPMI: bmcfleet native provider vs ipmitool vs FreeIPMI, 1 and {n} ipmi_sim BMCs"));
    section.method = vec![
        format!(
            "Peers: {n} OpenIPMI `ipmi_sim` instances on loopback UDP ports, configured by the repository's \
             tests/ipmi_sim templates (the same harness as the provider's tests). **bmcfleet native**: \
             `IpmiConnector` opens one RMCP+ session (cipher suite 3) per BMC before timing and reuses it; one \
             sequential loop per BMC, no pipeline. **ipmitool**: `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin -E \
             power status` (or `raw 6 1`), one process per call (a fresh RMCP+ session each time, as exec-based tools do), \
             one sequential loop per BMC. **FreeIPMI**: one `ipmipower -D LAN_2_0 -h HOST:PORT,... -W opensesspriv --stat` \
             (or `ipmi-raw ... 0 6 1`) invocation over the whole fleet (FreeIPMI fans out in parallel itself), invocations \
             back to back. Each cell: successful operations per second over a fixed window, median of the repetitions \
             (clients interleaved within each repetition)."
        ),
        "Power status is Get Chassis Status. ipmi_sim does not know the power state itself: for every power read it \
         forks and runs the chassis_control program (tests/ipmi_sim/chassis_control, a /bin/sh script whose reads use \
         only shell builtins, so one fork+exec per read), so power status is bounded by the simulator's fork+exec more \
         than by any client. Get Device ID is answered by ipmi_sim directly and \
         shows the clients' own costs. CPU columns: user+system CPU per successful operation of the client side (the \
         bench process plus the tool processes it ran) and of the BMC side (all ipmi_sim processes plus the \
         chassis_control processes they ran)."
            .into(),
    ];

    let sims = tokio::task::spawn_blocking(move || (0..n).map(|_| IpmiSim::start()).collect::<Result<Vec<_>, _>>())
        .await
        .context("starting ipmi_sim")?
        .context("starting ipmi_sim (apt-get install openipmi)")?;
    let connector = IpmiConnector::default();
    let mut sessions = vec![];
    for sim in &sims {
        let ctx = Ctx::with_timeout(Duration::from_secs(15));
        let s = connector
            .open(&ctx, &sim.target(), &sim.credentials())
            .await
            .with_context(|| format!("opening an IPMI session to {}", sim.address()))?;
        sessions.push(Arc::new(Mutex::new(s)));
    }
    let sim_meters = crate::harness::child_pids("ipmi_sim")
        .into_iter()
        .map(|pid| Meter::pid_with_children("ipmi_sim", pid))
        .collect::<Vec<_>>();
    if sim_meters.len() != n {
        bail!("found {} ipmi_sim processes, expected {n}", sim_meters.len());
    }
    for tool in ["ipmitool", "ipmipower", "ipmi-raw"] {
        crate::harness::find_program(tool, None, &[])
            .with_context(|| format!("{tool} is required (apt-get install ipmitool freeipmi-tools)"))?;
    }
    let fleet = Fleet { sims, sessions, sim_meters };

    let clients = [Client::Native, Client::Ipmitool, Client::FreeIpmi];
    let sizes = if n > 1 { vec![1, n] } else { vec![1] };
    let ops_list = [Op::PowerStatus, Op::DeviceId];
    // results[(op, size, client)] = samples
    let mut results: std::collections::HashMap<(u8, usize, u8), Vec<Sample>> = Default::default();
    for rep in 0..o.reps {
        for (oi, op) in ops_list.iter().enumerate() {
            for &size in &sizes {
                for (ci, client) in clients.iter().enumerate() {
                    let s = fleet.measure(*client, *op, size, o.duration).await?;
                    results.entry((oi as u8, size, ci as u8)).or_default().push(s);
                }
            }
        }
        eprintln!("ipmi: repetition {} of {} done", rep + 1, o.reps);
    }
    let handshakes: u64 = {
        let mut total = 0;
        for s in &fleet.sessions {
            total += s.lock().await.transport().handshakes();
        }
        total
    };
    let fork_ms = chassis_control_cost(&fleet.sims[0], 20).await?;

    let med = |op: usize, size: usize, client: usize, f: &dyn Fn(&Sample) -> f64| -> f64 {
        median(
            &results
                .get(&(op as u8, size, client as u8))
                .map(|v| v.iter().map(f).collect::<Vec<_>>())
                .unwrap_or_default(),
        )
    };
    let errors = |op: usize, size: usize, client: usize| -> usize {
        results.get(&(op as u8, size, client as u8)).map(|v| v.iter().map(|s| s.errors).sum()).unwrap_or(0)
    };
    for (oi, op) in ops_list.iter().enumerate() {
        let caption = match op {
            Op::PowerStatus => "Power status (Get Chassis Status), operations per second",
            Op::DeviceId => "Get Device ID (raw netfn 0x06 cmd 0x01), operations per second",
        };
        let freeipmi = if *op == Op::PowerStatus { "ipmipower" } else { "ipmi-raw" };
        let mut t = Table::new(
            caption,
            &[
                "BMCs",
                "bmcfleet native",
                "ipmitool (exec per call)",
                &format!("FreeIPMI {freeipmi} (fleet)"),
                "native / ipmitool",
                &format!("native / {freeipmi}"),
                "errors (native/ipmitool/FreeIPMI)",
            ],
        );
        let mut cpu = Table::new(
            format!(
                "{} — CPU µs per operation: client side / BMC side",
                if *op == Op::PowerStatus { "Power status" } else { "Get Device ID" }
            ),
            &["BMCs", "bmcfleet native", "ipmitool", freeipmi],
        );
        for &size in &sizes {
            let rate = |c: usize| med(oi, size, c, &|s| s.rate);
            let (nat, tool, free) = (rate(0), rate(1), rate(2));
            t.row(vec![
                size.to_string(),
                ops(nat),
                ops(tool),
                ops(free),
                ratio(nat / tool),
                ratio(nat / free),
                format!("{}/{}/{}", errors(oi, size, 0), errors(oi, size, 1), errors(oi, size, 2)),
            ]);
            let c = |ci: usize| {
                format!(
                    "{} / {}",
                    num(med(oi, size, ci, &|s| s.client_cpu_us), 0),
                    num(med(oi, size, ci, &|s| s.bmc_cpu_us), 0)
                )
            };
            cpu.row(vec![size.to_string(), c(0), c(1), c(2)]);
            if *op == Op::PowerStatus {
                let bmcs = if size == 1 { "1 BMC".to_owned() } else { format!("{size} BMCs") };
                section.goal(
                    &format!("IPMI power status, {bmcs}: native vs ipmitool"),
                    "≥ 10×",
                    ratio(nat / tool),
                    nat / tool >= 10.0,
                );
                section.goal(
                    &format!("IPMI power status, {bmcs}: native vs ipmipower"),
                    "≥ 1×",
                    ratio(nat / free),
                    nat / free >= 1.0,
                );
            }
        }
        section.tables.push(t);
        section.tables.push(cpu);
    }
    let nat1 = med(0, 1, 0, &|s| s.rate);
    section.findings.push(format!(
        "One run of the chassis_control script (`/bin/sh chassis_control DIR get power`, as ipmi_sim forks it for each power \
         read) takes {} ms of wall time here, which alone caps one simulated BMC near {} power reads/s; the native provider \
         reached {} /s on one BMC. Get Device ID, which ipmi_sim answers without forking, shows the clients' own speed.",
        num(fork_ms, 2),
        ops(1000.0 / fork_ms),
        ops(nat1)
    ));
    section.findings.push(format!(
        "The native provider completed all its operations over {} RMCP+ handshakes in total (one per BMC, sessions reused); \
         each ipmitool call and each FreeIPMI invocation performs its own handshake per BMC.",
        handshakes
    ));
    for s in &fleet.sessions {
        s.lock().await.close().await;
    }
    drop(fleet);
    section.elapsed = started.elapsed();
    Ok(section)
}
