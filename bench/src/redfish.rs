//! `redfish`: power status operations per second and the latency of a
//! 5-action batch against `sushy-emulator` (HTTPS + Basic auth, as the
//! provider's test harness runs it), bmcfleet's Redfish provider against the
//! python `sushy` library in the same run, plus the same batch end to end
//! through the gateway and a worker.

use crate::fleet::{Fleet, FleetOptions};
use crate::harness::{child_pids, find_program, repo_tools_bin};
use crate::proc::{CpuMeter, Meter};
use crate::report::{Section, Table};
use crate::stats::{median, ms, num, ops, percentile_sorted, ratio};
use anyhow::{bail, Context as _};
use bmcfleet_provider::Offer;
use bmcfleet_provider::{BmcSession, Ctx};
use bmcfleet_redfish::{RedfishConnector, RedfishSession};
use bmcfleet_schema::{Action, Batch, BatchState, BootDevice, BootDeviceRequest, OnError, PowerOp, Reply};
use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The reference client, run with the Python that has `sushy` installed.
const SUSHY_REF: &str = include_str!("redfish/sushy_ref.py");

#[derive(Clone, Debug)]
pub struct Options {
    pub duration: Duration,
    /// Batches timed per repetition and client.
    pub batches: usize,
    pub reps: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { duration: Duration::from_secs(3), batches: 20, reps: 3 }
    }
}

/// The Python interpreter with `sushy`: `$BMCFLEET_PYTHON`, else the first
/// of (the one next to `sushy-emulator`, the repository's tools venv,
/// `python3` on PATH) that can import `sushy`.
pub fn python_binary() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("BMCFLEET_PYTHON").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let mut candidates = vec![];
    if let Ok(emu) = find_program("sushy-emulator", Some("BMCFLEET_SUSHY_EMULATOR"), &[repo_tools_bin()]) {
        candidates.extend(emu.parent().map(|d| d.join("python3")));
    }
    candidates.push(repo_tools_bin().join("python3"));
    candidates.extend(find_program("python3", None, &[]).ok());
    let has_sushy = |py: &PathBuf| {
        std::process::Command::new(py)
            .args(["-c", "import sushy"])
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    candidates.into_iter().filter(|p| p.is_file()).find(has_sushy).context(
        "no Python with the `sushy` library found; install it in the tools venv (`.tools/bin/pip install sushy==5.14.0`, \
         which scripts/bench.sh does) or set BMCFLEET_PYTHON",
    )
}

/// "sushy-tools X, python sushy Y" for the report header.
pub fn tool_versions() -> String {
    let script = "import importlib.metadata as m\nfor p in ('sushy-tools', 'sushy'):\n    try: print(p, m.version(p))\n    except Exception: print(p, 'not installed')";
    python_binary()
        .ok()
        .and_then(|py| std::process::Command::new(py).args(["-c", script]).output().ok())
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().collect::<Vec<_>>().join(", "))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "not found".into())
}

/// The 5 actions, as a bmcfleet batch.
fn actions() -> Vec<Action> {
    vec![
        Action::Power(PowerOp::Status),
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: true }),
        Action::GetBootDevice,
        Action::Inventory,
        Action::BootDevice(BootDeviceRequest { device: BootDevice::Disk, persistent: true, efi: true }),
    ]
}

async fn provider_status(s: &mut RedfishSession) -> anyhow::Result<()> {
    let ctx = Ctx::with_timeout(Duration::from_secs(30));
    let p = s.power().context("no power capability")?;
    p.power(&ctx, PowerOp::Status).await?.context("no power state")?;
    Ok(())
}

/// The same 5 actions, straight on the provider session.
async fn provider_batch(s: &mut RedfishSession) -> anyhow::Result<()> {
    let ctx = Ctx::with_timeout(Duration::from_secs(60));
    for action in actions() {
        match action {
            Action::Power(op) => {
                s.power().context("power")?.power(&ctx, op).await?;
            }
            Action::BootDevice(req) => {
                s.boot().context("boot")?.set_boot_device(&ctx, &req).await?;
            }
            Action::GetBootDevice => {
                s.boot().context("boot")?.boot_device(&ctx).await?;
            }
            Action::Inventory => {
                s.inventory().context("inventory")?.inventory(&ctx).await?;
            }
            other => bail!("unexpected action {other:?}"),
        }
    }
    Ok(())
}

/// The python `sushy` reference client.
struct PyRef {
    python: PathBuf,
    script: PathBuf,
    settings: serde_json::Value,
    _dir: tempfile::TempDir,
}

impl PyRef {
    async fn new(emu: &SushyEmulator) -> anyhow::Result<PyRef> {
        let python = python_binary()?;
        let dir = tempfile::Builder::new().prefix("bmc-bench-sushy-").tempdir()?;
        let script = dir.path().join("sushy_ref.py");
        std::fs::write(&script, SUSHY_REF)?;
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, emu.ca_pem())?;
        let managers = emu.get("/redfish/v1/Managers").await.context("reading the manager collection")?;
        let manager = managers["Members"][0]["@odata.id"].as_str().context("the emulator lists no manager")?.to_owned();
        let creds = emu.credentials();
        let settings = serde_json::json!({
            "base": emu.base_url(),
            "username": creds.username,
            "password": creds.password.expose(),
            "ca": ca.display().to_string(),
            "system": emu.system_path(0),
            "manager": manager,
            "emulator_pid": child_pids("sushy-emulator").first().copied(),
        });
        let r = PyRef { python, script, settings, _dir: dir };
        r.call(serde_json::json!({"mode": "check"})).await.context(
            "the python `sushy` reference client does not work; install it in the tools venv \
             (`.tools/bin/pip install sushy==5.14.0`, which scripts/bench.sh does) or set BMCFLEET_PYTHON",
        )?;
        Ok(r)
    }

    async fn call(&self, extra: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let mut s = self.settings.clone();
        if let (Some(obj), Some(more)) = (s.as_object_mut(), extra.as_object()) {
            obj.extend(more.clone());
        }
        let out = tokio::process::Command::new(&self.python)
            .arg(&self.script)
            .arg(s.to_string())
            .output()
            .await
            .context("running python")?;
        if !out.status.success() {
            bail!("python sushy client failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().context("no output from the python client")?;
        Ok(serde_json::from_str(line)?)
    }
}

#[derive(Default)]
struct Side {
    status_rates: Vec<f64>,
    batch_ms: Vec<f64>,
    batch_p50s: Vec<f64>,
    /// CPU µs per status op: client side, emulator side.
    cpu: Vec<(f64, f64)>,
}

pub async fn run(o: &Options) -> anyhow::Result<Section> {
    let started = Instant::now();
    let mut section = Section::new("3. Redfish: bmcfleet provider vs python sushy against sushy-emulator");
    section.method = vec![
        "Peer: one `sushy-emulator` (sushy-tools, fake driver, one system powered on) over HTTPS with a per-run CA and \
         HTTP Basic auth (bcrypt cost 4), started by the provider's test harness (`SushyEmulator`). **bmcfleet**: \
         `RedfishConnector` opens one session (service root, login — Basic, as the emulator has no SessionService — and \
         discovery) before timing, then reuses it. **python sushy**: `sushy.Sushy(..., auth=BasicAuth, verify=CA)` with \
         the system and manager resolved before timing; the script (bench/src/redfish/sushy_ref.py) times itself, so \
         interpreter start-up is not counted. Both clients make the same requests per operation. The emulator (Werkzeug) \
         answers every request with `Connection: close`, so each request costs both clients a new TCP connection and TLS \
         handshake."
            .into(),
        "Power status: GET the ComputerSystem and read PowerState, one request at a time for a fixed window. 5-action \
         batch: power status; boot override PXE once (UEFI where modelled); read the boot override; inventory (system + \
         manager); boot override disk, continuous (back to the normal boot). A boot change is GET (fresh state and allowed values) + PATCH + GET (read back \
         and verify) on both sides, 11 requests per batch. **bmcfleet pipeline**: the same batch submitted to the gateway \
         with `Bmcfleet-Wait: true` and run by a worker (its lane keeps the Redfish session between batches). Batch \
         latencies are pooled over the repetitions. CPU: user+system time per power-status operation of the client \
         (bench process, or the python process) and of the emulator process."
            .into(),
    ];
    let emu = SushyEmulator::builder()
        .systems(vec![FakeSystem::new("27946b59-9e44-4fa7-8e91-f3527a1ef094", "bench", "On")])
        .start()
        .await
        .context("starting sushy-emulator (pip install sushy-tools==2.2.0; scripts/setup.sh)")?;
    let emu_pid = child_pids("sushy-emulator").first().copied();
    let py = PyRef::new(&emu).await?;
    let connector = RedfishConnector::default();
    let mut session = connector
        .open(&Ctx::with_timeout(Duration::from_secs(30)), &emu.target(), &emu.credentials())
        .await
        .context("opening a Redfish session to sushy-emulator")?;
    provider_batch(&mut session).await.context("bmcfleet batch against sushy-emulator")?;

    let mut fleet = Fleet::start(FleetOptions::default()).await?;
    fleet.spawn_worker("w0", &["--protocols".into(), "redfish".into()])?;
    fleet.wait_owned_by(&["w0"], 1, Duration::from_secs(30)).await?;
    let machine =
        bmcfleet_tests::producer::register_machine(&fleet.client, &fleet.subjects, &fleet.sealing.1, &emu.target())
            .await;
    let pipeline_batch = || Batch {
        plan: false,
        events: Default::default(),
        id: Some(ulid::Ulid::new()),
        machine: Some(machine.clone()),
        bmc: None,
        actions: actions(),
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(60)),
    };
    // First batch opens the lane's session; not timed.
    match fleet.submit(&pipeline_batch(), true).await? {
        Reply::Result(r) if r.state == BatchState::Succeeded => {}
        other => bail!("pipeline batch against sushy-emulator failed: {other:?}"),
    }

    let meters = |client: &str| vec![Meter::this_process(client), Meter::pid("sushy-emulator", emu_pid)];
    let (mut ours, mut theirs, mut pipe) = (Side::default(), Side::default(), Side::default());
    for rep in 0..o.reps {
        // Power status, bmcfleet provider.
        let warm_end = Instant::now() + Duration::from_millis(300);
        while Instant::now() < warm_end {
            provider_status(&mut session).await?;
        }
        let cpu = CpuMeter::new(&meters("bench"));
        let t0 = Instant::now();
        let mut n = 0;
        while t0.elapsed() < o.duration {
            provider_status(&mut session).await?;
            n += 1;
        }
        ours.status_rates.push(crate::stats::rate(n, t0.elapsed()));
        let u = cpu.stop().per_op_us(n);
        ours.cpu.push((u[0].1, u[1].1));

        // Power status, python sushy (it measures its own and the emulator's CPU over its window).
        let v = py
            .call(serde_json::json!({"mode": "status", "warmup_s": 0.3, "duration_s": o.duration.as_secs_f64()}))
            .await?;
        let n = v["ops"].as_u64().context("ops")? as usize;
        theirs.status_rates.push(n as f64 / v["elapsed_s"].as_f64().context("elapsed")?);
        let per_op = |k: &str| v[k].as_f64().map_or(f64::NAN, |s| s * 1e6 / n.max(1) as f64);
        theirs.cpu.push((per_op("cpu_s"), per_op("emulator_cpu_s")));

        // 5-action batch, all three.
        provider_batch(&mut session).await?;
        let mut lat = vec![];
        for _ in 0..o.batches {
            let t = Instant::now();
            provider_batch(&mut session).await?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ours.batch_p50s.push(median(&lat));
        ours.batch_ms.extend(lat);

        let v = py.call(serde_json::json!({"mode": "batch", "warmup_batches": 1, "batches": o.batches})).await?;
        let lat: Vec<f64> =
            v["latencies_ms"].as_array().context("latencies")?.iter().filter_map(|x| x.as_f64()).collect();
        theirs.batch_p50s.push(median(&lat));
        theirs.batch_ms.extend(lat);

        let mut lat = vec![];
        for _ in 0..o.batches {
            let t = Instant::now();
            match fleet.submit(&pipeline_batch(), true).await? {
                Reply::Result(r) if r.state == BatchState::Succeeded => {}
                other => bail!("pipeline batch failed: {other:?}"),
            }
            lat.push(t.elapsed().as_secs_f64() * 1e3);
        }
        pipe.batch_p50s.push(median(&lat));
        pipe.batch_ms.extend(lat);
        eprintln!("redfish: repetition {} of {} done", rep + 1, o.reps);
    }
    session.close().await;

    let rate_ours = median(&ours.status_rates);
    let rate_theirs = median(&theirs.status_rates);
    let cpu = |side: &Side, which: usize| {
        median(&side.cpu.iter().map(|c| if which == 0 { c.0 } else { c.1 }).collect::<Vec<_>>())
    };
    let mut t = Table::new(
        "Power status against sushy-emulator, operations per second (one request at a time)",
        &["client", "ops/s", "vs python sushy", "client CPU µs/op", "emulator CPU µs/op"],
    );
    t.row(vec![
        "bmcfleet provider".into(),
        ops(rate_ours),
        ratio(rate_ours / rate_theirs),
        num(cpu(&ours, 0), 0),
        num(cpu(&ours, 1), 0),
    ]);
    t.row(vec!["python sushy".into(), ops(rate_theirs), ratio(1.0), num(cpu(&theirs, 0), 0), num(cpu(&theirs, 1), 0)]);
    let pct = |v: &[f64], p: f64| {
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        percentile_sorted(&s, p)
    };
    let mut b =
        Table::new("5-action batch latency (ms)", &["client", "p50", "p99", "batches", "vs python sushy (p50)"]);
    let theirs_p50 = pct(&theirs.batch_ms, 50.0);
    for (name, side) in [
        ("bmcfleet provider (direct)", &ours),
        ("python sushy", &theirs),
        ("bmcfleet pipeline (gateway + worker)", &pipe),
    ] {
        let p50 = pct(&side.batch_ms, 50.0);
        b.row(vec![
            name.into(),
            ms(p50),
            ms(pct(&side.batch_ms, 99.0)),
            side.batch_ms.len().to_string(),
            ratio(theirs_p50 / p50),
        ]);
    }
    section.tables = vec![t, b];
    let (ours_p50, pipe_p50) = (pct(&ours.batch_ms, 50.0), pct(&pipe.batch_ms, 50.0));
    section.findings.push(format!(
        "bmcfleet's provider did {} power reads/s against python sushy's {} ({}), and ran the 5-action batch in {} ms \
         against {} ms (p50). Through the whole pipeline the batch took {} ms, i.e. {} ms more than calling the provider \
         directly.",
        ops(rate_ours),
        ops(rate_theirs),
        ratio(rate_ours / rate_theirs),
        ms(ours_p50),
        ms(theirs_p50),
        ms(pipe_p50),
        ms(pipe_p50 - ours_p50)
    ));
    section.findings.push(format!(
        "Per power read the emulator (Python/Flask, TLS) used {} µs of CPU, the bmcfleet client {} µs and the python \
         sushy client {} µs: the emulator bounds both clients, so the rate ratio understates the client difference.",
        num(cpu(&ours, 1), 0),
        num(cpu(&ours, 0), 0),
        num(cpu(&theirs, 0), 0),
    ));
    drop(fleet);
    drop(emu);
    section.elapsed = started.elapsed();
    Ok(section)
}
