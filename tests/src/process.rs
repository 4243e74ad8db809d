//! bmcfleet binaries as child processes.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Path of a workspace binary (`bmc-gateway`, `bmc-worker`, `bmcctl`, `bmc-sim`)
/// next to the running test executable.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `cargo build --workspace --bins` first", path.display());
    path
}

/// A running child; killed on drop. Its stderr goes to a log file.
pub struct Process {
    child: Option<Child>,
    pub name: String,
    pub log: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl Process {
    pub fn spawn(name: &str, args: &[String], env: &[(&str, String)]) -> Process {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join(format!("{name}.log"));
        Self::spawn_logged(name, args, env, log, Some(dir))
    }

    /// Like [`Process::spawn`], started in the directory `cwd` (relative
    /// paths among `args` are read from there).
    pub fn spawn_in(name: &str, args: &[String], env: &[(&str, String)], cwd: &Path) -> Process {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join(format!("{name}.log"));
        let binary = name.split(':').next().unwrap_or(name);
        Self::start_in(&bin(binary), name, args, env, log, Some(dir), Some(cwd))
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"))
    }

    /// Spawn with the log at a given path (kept after the process ends).
    pub fn spawn_logged(
        name: &str,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        dir: Option<tempfile::TempDir>,
    ) -> Process {
        let binary = name.split(':').next().unwrap_or(name);
        Self::start(&bin(binary), name, args, env, log, dir).unwrap_or_else(|e| panic!("spawn {name}: {e}"))
    }

    /// Start `program` as `name` with its stderr in `log` (`dir`, if given,
    /// is kept alive with the process): the fallible form, for callers that
    /// report errors instead of panicking (the benchmarks).
    pub fn start(
        program: &Path,
        name: &str,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        dir: Option<tempfile::TempDir>,
    ) -> std::io::Result<Process> {
        Self::start_in(program, name, args, env, log, dir, None)
    }

    fn start_in(
        program: &Path,
        name: &str,
        args: &[String],
        env: &[(&str, String)],
        log: PathBuf,
        dir: Option<tempfile::TempDir>,
        cwd: Option<&Path>,
    ) -> std::io::Result<Process> {
        let mut cmd = Command::new(program);
        if let Some(cwd) = cwd {
            cmd.current_dir(cwd);
        }
        cmd.args(args)
            .env_remove("RUST_LOG")
            // Many processes share this host: metrics on any free loopback port
            // unless the caller asks for another address.
            .env("BMCFLEET_METRICS_ADDR", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn()?;
        Ok(Process { child: Some(child), name: name.to_owned(), log, _dir: dir })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn signal(&self, sig: Signal) {
        if let Some(pid) = self.pid() {
            let _ = kill(Pid::from_raw(pid as i32), sig);
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait up to `timeout` for a clean exit; returns the exit status.
    pub fn terminate(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        self.signal(Signal::SIGTERM);
        let end = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < end {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(st)) = c.try_wait() {
                    self.child = None;
                    return Some(st);
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }

    /// Whether the process exited; with its status.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// As [`Process::try_wait`], and once it exited forget it: no later
    /// signal can reach another process that reuses its pid.
    pub fn reap(&mut self) -> Option<std::process::ExitStatus> {
        let status = self.try_wait()?;
        self.child = None;
        Some(status)
    }

    /// Wait for exit (for processes expected to stop by themselves).
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.take().expect("running").wait().expect("wait")
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = self.log_text();
        let v: Vec<&str> = text.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }

    /// Bytes written to the log so far.
    pub fn log_bytes(&self) -> u64 {
        std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a command run by [`run_piped`] did: exit code, stdout, stderr and
/// how long it took.
#[derive(Debug)]
pub struct Ran {
    pub code: Option<i32>,
    pub out: String,
    pub err: String,
    pub took: std::time::Duration,
}

/// Runs `cmd` with `stdin` written to it and its output collected.
pub async fn run_piped(mut cmd: tokio::process::Command, stdin: &str) -> Ran {
    use tokio::io::AsyncWriteExt;
    let started = std::time::Instant::now();
    let mut child =
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn the command");
    child.stdin.take().expect("piped stdin").write_all(stdin.as_bytes()).await.expect("write stdin");
    let out = child.wait_with_output().await.expect("the command's output");
    Ran {
        code: out.status.code(),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}
