//! Child processes the benchmarks start (nats-server, bmc-gateway,
//! bmc-worker, external tools), readiness polling with deadlines, and
//! per-process figures read from `/proc`.
//!
//! Every child is killed on `Drop`, so an early return or a panic leaves no
//! stray process behind.

use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Directory holding `bmc-gateway`, `bmc-worker` (and `bmc-bench` itself):
/// `$BMCFLEET_BIN_DIR`, else the directory of the running executable, so the
/// pipeline always uses binaries from the same build as the bench.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("BMCFLEET_BIN_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("locating the running executable")?;
    Ok(exe.parent().context("executable has no parent directory")?.to_path_buf())
}

/// Path of a workspace binary next to the bench.
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if !path.is_file() {
        bail!(
            "{} is missing: build it next to bmc-bench with \
             `CARGO_TARGET_DIR=<same dir> cargo build --release -p bmcfleet-gateway -p bmcfleet-worker -p bmcfleet-bench` \
             (`bmc-ipmi-fleet`: `-p bmcfleet-testing --bin bmc-ipmi-fleet`), or set BMCFLEET_BIN_DIR",
            path.display()
        );
    }
    Ok(path)
}

/// Find an executable: `$env_var` if given and set, else on `PATH`, else in `extra` directories.
pub fn find_program(name: &str, env_var: Option<&str>, extra: &[PathBuf]) -> anyhow::Result<PathBuf> {
    if let Some(var) = env_var {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            if p.is_file() {
                return Ok(p);
            }
            bail!("{var}={} does not exist", p.display());
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(extra.iter().cloned())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("`{name}` not found on PATH (scripts/setup.sh installs it)"))
}

/// The repository's `.tools/bin` (where scripts/setup.sh installs nats-server,
/// sushy-emulator and the Python venv), derived from this crate's location.
pub fn repo_tools_bin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin")
}

/// Poll `check` every `every` until it returns `Some`, or fail after `timeout`.
pub async fn poll<T, F, Fut>(timeout: Duration, every: Duration, what: &str, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    match bmcfleet_tests::poll_until(timeout, every, check).await {
        Some(v) => Ok(v),
        None => bail!("timed out after {timeout:?} waiting for {what}"),
    }
}

/// One call of a closed loop: when it ended and how long it took.
pub type Sample = (Instant, Duration);

/// Closed loops: `loops` tasks, task `i` calling `op(i)` one call at a time
/// until `until`; collect them with [`join_samples`].
pub fn closed_loops<F, Fut>(loops: usize, until: Instant, op: F) -> tokio::task::JoinSet<anyhow::Result<Vec<Sample>>>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..loops {
        let op = op.clone();
        tasks.spawn(async move {
            let mut samples = vec![];
            while Instant::now() < until {
                let t0 = Instant::now();
                op(i).await?;
                let t1 = Instant::now();
                samples.push((t1, t1 - t0));
            }
            Ok(samples)
        });
    }
    tasks
}

/// Every sample of the [`closed_loops`] `tasks`, or the first failure (in
/// the context `what`).
pub async fn join_samples(
    mut tasks: tokio::task::JoinSet<anyhow::Result<Vec<Sample>>>,
    what: &'static str,
) -> anyhow::Result<Vec<Sample>> {
    let mut all = vec![];
    while let Some(r) = tasks.join_next().await {
        all.extend(r.context(what)??);
    }
    Ok(all)
}

/// A child process with its stderr in a log file; SIGKILLed on drop (the
/// test harness's process type; what the benchmarks add is in [`Bench`]).
pub type Child = bmcfleet_tests::Process;

/// Start `program` as `name`, its stderr in a log in a new temporary directory.
pub fn spawn(program: &Path, name: &str, args: &[String], env: &[(&str, String)]) -> anyhow::Result<Child> {
    let dir = tempfile::Builder::new().prefix("bmc-bench-").tempdir().context("temporary directory")?;
    let log = dir.path().join(format!("{}.log", name.replace([':', '/'], "_")));
    Child::start(program, name, args, env, log, Some(dir))
        .with_context(|| format!("starting {} ({})", name, program.display()))
}

/// What the benchmarks read of their children.
pub trait Bench {
    /// Poll for exit until `timeout`; `None` if still running.
    fn wait_exit(&mut self, timeout: Duration) -> impl std::future::Future<Output = Option<ExitStatus>> + Send;
    /// Fails with the log tail when the process already exited.
    fn ensure_running(&mut self) -> anyhow::Result<()>;
    fn rss_kib(&self) -> Option<u64>;
    fn sockets(&self) -> Option<usize>;
}

impl Bench for Child {
    async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.pid()?;
        bmcfleet_tests::poll_until(timeout, Duration::from_millis(10), || {
            let s = self.reap();
            async move { s }
        })
        .await
    }

    fn ensure_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.try_wait() {
            bail!("{} exited ({status}); log tail:\n{}", self.name, self.log_tail(30));
        }
        Ok(())
    }

    fn rss_kib(&self) -> Option<u64> {
        self.pid().and_then(rss_kib)
    }

    fn sockets(&self) -> Option<usize> {
        self.pid().and_then(socket_count)
    }
}

/// Resident set size of a process in KiB (`VmRSS` in `/proc/PID/status`).
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS")
}

/// One KiB figure of `/proc/PID/status`: `VmRSS`, or its parts `RssAnon`
/// (the process's own memory: heap, stacks) and `RssFile` (pages of mapped
/// files, the executable's code among them).
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// Open sockets of a process (entries of `/proc/PID/fd` that are sockets).
pub fn socket_count(pid: u32) -> Option<usize> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        dir.filter_map(Result::ok)
            .filter(|e| {
                std::fs::read_link(e.path()).map(|t| t.to_string_lossy().starts_with("socket:")).unwrap_or(false)
            })
            .count(),
    )
}

/// Threads of a process (`Threads` in `/proc/PID/status`).
pub fn thread_count(pid: u32) -> Option<usize> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|v| v.trim().parse().ok())
}

/// Open file descriptors of a process (entries of `/proc/PID/fd`).
pub fn fd_count(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Datagrams the kernel dropped on a process's open UDP sockets so far
/// (receive buffer full): the `drops` column of `/proc/net/udp` and
/// `/proc/net/udp6` for the socket inodes in `/proc/PID/fd`. Sockets the
/// process already closed are not counted.
pub fn udp_drops(pid: u32) -> Option<u64> {
    let inodes: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|t| t.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok())
        .collect();
    let mut drops = 0;
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
            if let (Some(inode), Some(d)) =
                (f.get(9).and_then(|i| i.parse::<u64>().ok()), f.last().and_then(|d| d.parse::<u64>().ok()))
            {
                if inodes.contains(&inode) {
                    drops += d;
                }
            }
        }
    }
    Some(drops)
}

/// Pids of this process's children whose command name is `comm` (peers
/// started by harnesses that do not expose their pid).
pub fn child_pids(comm: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return vec![] };
    let mut pids: Vec<u32> = dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let name = stat.split_once('(').and_then(|(_, r)| r.rsplit_once(')')).map(|(c, _)| c.to_owned());
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            name.as_deref() == Some(comm) && ppid == Some(me)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The version line of `program args...` (tool versions for the report): the
/// first output line mentioning "version", else the first non-empty one.
pub fn version_line(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().ok()?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.iter().find(|l| l.to_ascii_lowercase().contains("version")).or(lines.first()).map(|l| l.to_string())
}

/// A `nats-server` with JetStream on free loopback ports and a private store.
pub struct Nats {
    child: Child,
    pub port: u16,
    pub monitor_port: u16,
    /// The JetStream store; removed on drop.
    _store: tempfile::TempDir,
}

/// The nats-server binary: `$BMCFLEET_NATS_SERVER`, `PATH`, or `.tools/bin`.
pub fn nats_server_binary() -> anyhow::Result<PathBuf> {
    find_program("nats-server", Some("BMCFLEET_NATS_SERVER"), &[repo_tools_bin()])
}

impl Nats {
    pub async fn start() -> anyhow::Result<Nats> {
        let bin = nats_server_binary()?;
        let store = tempfile::Builder::new().prefix("bmc-bench-nats-").tempdir().context("nats store")?;
        let args: Vec<String> = ["-js", "-a", "127.0.0.1", "-p", "-1", "-m", "-1", "-sd"]
            .iter()
            .map(|s| s.to_string())
            .chain([store.path().join("js").display().to_string()])
            .collect();
        let mut child = spawn(&bin, "nats-server", &args, &[])?;
        // The server picks its own ports (-1) and logs them: no port races.
        let (port, monitor_port) = {
            let end = Instant::now() + Duration::from_secs(15);
            loop {
                child.ensure_running()?;
                let log = child.log_text();
                let find = |marker: &str| {
                    log.lines()
                        .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim().to_owned()))
                        .and_then(|addr| addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()))
                };
                if let (Some(c), Some(m)) =
                    (find("Listening for client connections on "), find("Starting http monitor on "))
                {
                    if healthz(m).await {
                        break (c, m);
                    }
                }
                if Instant::now() >= end {
                    bail!("nats-server did not become ready; log:\n{}", child.log_tail(30));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        Ok(Nats { child, port, monitor_port, _store: store })
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub async fn client(&self) -> anyhow::Result<async_nats::Client> {
        async_nats::ConnectOptions::new()
            .name("bmc-bench")
            .connect(self.url())
            .await
            .with_context(|| format!("connecting to {}", self.url()))
    }

    pub fn rss_kib(&self) -> Option<u64> {
        self.child.rss_kib()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.pid()
    }

    /// Messages into and out of the server so far (`/varz` in_msgs, out_msgs).
    pub async fn message_counts(&self) -> Option<(u64, u64)> {
        let body = http_get(self.monitor_port, "/varz").await?;
        let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
        Some((v["in_msgs"].as_u64()?, v["out_msgs"].as_u64()?))
    }
}

/// GET a loopback HTTP/1.0 resource; the body on a 200.
async fn http_get(port: u16, path: &str) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(("127.0.0.1", port)))
        .await
        .ok()?
        .ok()?;
    let req = format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
    s.write_all(req.as_bytes()).await.ok()?;
    let mut resp = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut resp)).await.ok()?.ok()?;
    if !(resp.starts_with(b"HTTP/1.0 200") || resp.starts_with(b"HTTP/1.1 200")) {
        return None;
    }
    let at = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    Some(resp[at + 4..].to_vec())
}

async fn healthz(port: u16) -> bool {
    http_get(port, "/healthz?js-enabled-only=true").await.is_some()
}
