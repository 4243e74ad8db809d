//! [`SushyEmulator`]: OpenStack `sushy-emulator` (PyPI `sushy-tools`) with
//! its fake driver, as a real Redfish peer.
//!
//! Each instance gets its own temporary directory holding the config, the
//! TLS certificate (signed by a fresh [`TestPki`]), a bcrypt-cost-4
//! htpasswd, the emulator's state (`SUSHY_EMULATOR_STATE_DIR`; the default
//! is shared between processes) and its log. It listens on 127.0.0.1 on a
//! free port, is ready when `GET /redfish/v1/` answers (polled with a
//! deadline), and is killed on `Drop`.
//!
//! Quirks worth knowing (sushy-tools 2.2.0): power changes apply after a
//! random 1–11 s (wait on read-back); `Nmi` is listed but answers 501;
//! `Once` boot overrides read back as `Continuous`; AccountService,
//! SessionService and Manager.Reset are not implemented.

use super::{credentials, env_flag, loopback_target, HarnessError, TestPki};
use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::BmcTarget;
use rustls::pki_types::pem::PemObject;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// One emulated system of the fake driver.
#[derive(Clone, Debug)]
pub struct FakeSystem {
    pub uuid: String,
    pub name: String,
    /// `On` or `Off`.
    pub power_state: String,
}

impl FakeSystem {
    pub fn new(uuid: &str, name: &str, power_state: &str) -> FakeSystem {
        FakeSystem { uuid: uuid.into(), name: name.into(), power_state: power_state.into() }
    }
}

/// Builds a [`SushyEmulator`].
#[derive(Clone, Debug)]
pub struct SushyBuilder {
    systems: Vec<FakeSystem>,
    username: String,
    password: String,
    start_timeout: Duration,
}

impl Default for SushyBuilder {
    fn default() -> Self {
        SushyBuilder {
            systems: vec![FakeSystem::new("27946b59-9e44-4fa7-8e91-f3527a1ef094", "fake", "Off")],
            username: "admin".into(),
            password: "password".into(),
            start_timeout: Duration::from_secs(30),
        }
    }
}

/// A Python string literal (JSON string syntax is valid Python).
fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "''".into())
}

impl SushyBuilder {
    setters! {
        /// Replace the emulated systems (default: one, `fake`, powered off).
        systems(systems: Vec<FakeSystem>);
        /// How long to wait for the emulator to answer (default 30 s).
        start_timeout(start_timeout: Duration);
    }

    pub fn credentials(mut self, username: &str, password: &str) -> Self {
        self.username = username.into();
        self.password = password.into();
        self
    }

    /// Start it. `Err(NotInstalled)` when `sushy-emulator` cannot be found.
    pub async fn start(self) -> Result<SushyEmulator, HarnessError> {
        let exe = find_executable()?;
        let dir = tempfile::Builder::new()
            .prefix("bmcfleet-sushy-")
            .tempdir()
            .map_err(|e| HarnessError::io("creating a temporary directory", e))?;
        let pki = TestPki::generate()?;
        let (cert, key) = pki.write_to(dir.path())?;
        let htpasswd = dir.path().join("htpasswd");
        let hash = bcrypt::hash(&self.password, 4).map_err(|e| HarnessError::Start(format!("bcrypt: {e}")))?;
        std::fs::write(&htpasswd, format!("{}:{hash}\n", self.username))
            .map_err(|e| HarnessError::io("writing htpasswd", e))?;
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).map_err(|e| HarnessError::io("creating the state dir", e))?;

        // A free port can be taken between our probe and the emulator's
        // bind: try a few.
        let mut last = String::new();
        for _ in 0..3 {
            let port = free_port()?;
            let config = self.config_file(dir.path(), port, &cert, &key, &htpasswd, &state)?;
            let log_path = dir.path().join(format!("sushy-{port}.log"));
            let log = std::fs::File::create(&log_path).map_err(|e| HarnessError::io("creating the log", e))?;
            let log2 = log.try_clone().map_err(|e| HarnessError::io("cloning the log handle", e))?;
            let child = Command::new(&exe)
                .arg("--config")
                .arg(&config)
                .env_remove("SUSHY_EMULATOR_CONFIG")
                .env("PYTHONUNBUFFERED", "1")
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .spawn()
                .map_err(|e| HarnessError::io(format!("starting {}", exe.display()), e))?;
            let mut emu = SushyEmulator {
                child,
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                pki: pki.clone(),
                username: self.username.clone(),
                password: self.password.clone(),
                systems: self.systems.clone(),
                log_path,
                http: reader(&pki)?,
                _dir: None,
            };
            match emu.wait_ready(self.start_timeout).await {
                Ok(()) => {
                    emu._dir = Some(dir);
                    return Ok(emu);
                }
                Err(e) => {
                    last = e.to_string();
                    drop(emu);
                }
            }
        }
        Err(HarnessError::Start(format!("sushy-emulator did not start: {last}")))
    }

    fn config_file(
        &self,
        dir: &Path,
        port: u16,
        cert: &Path,
        key: &Path,
        htpasswd: &Path,
        state: &Path,
    ) -> Result<PathBuf, HarnessError> {
        let systems: Vec<String> = self
            .systems
            .iter()
            .map(|s| {
                format!(
                    "{{'uuid': {}, 'name': {}, 'power_state': {}, 'external_notifier': False, 'nics': [{{'mac': '00:5c:52:31:3a:9c', 'ip': '192.0.2.10'}}]}}",
                    py_str(&s.uuid),
                    py_str(&s.name),
                    py_str(&s.power_state)
                )
            })
            .collect();
        let text = format!(
            "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n\
             SUSHY_EMULATOR_LISTEN_PORT = {port}\n\
             SUSHY_EMULATOR_SSL_CERT = {}\n\
             SUSHY_EMULATOR_SSL_KEY = {}\n\
             SUSHY_EMULATOR_AUTH_FILE = {}\n\
             SUSHY_EMULATOR_STATE_DIR = {}\n\
             SUSHY_EMULATOR_FAKE_DRIVER = True\n\
             SUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\n",
            py_str(&cert.display().to_string()),
            py_str(&key.display().to_string()),
            py_str(&htpasswd.display().to_string()),
            py_str(&state.display().to_string()),
            systems.join(", ")
        );
        let path = dir.join(format!("sushy-{port}.conf"));
        std::fs::write(&path, text).map_err(|e| HarnessError::io("writing the emulator config", e))?;
        Ok(path)
    }
}

fn find_executable() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("BMCFLEET_SUSHY_EMULATOR").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(HarnessError::NotInstalled {
                what: "sushy-emulator".into(),
                hint: format!("BMCFLEET_SUSHY_EMULATOR={} does not exist", p.display()),
            })
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join("sushy-emulator");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(HarnessError::NotInstalled {
        what: "sushy-emulator".into(),
        hint: "run `pip install sushy-tools==2.2.0` (or set BMCFLEET_SUSHY_EMULATOR)".into(),
    })
}

fn free_port() -> Result<u16, HarnessError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| HarnessError::io("probing a free port", e))?;
    l.local_addr().map(|a| a.port()).map_err(|e| HarnessError::io("probing a free port", e))
}

/// A running `sushy-emulator`; killed on `Drop`.
pub struct SushyEmulator {
    child: Child,
    addr: SocketAddr,
    pki: TestPki,
    username: String,
    password: String,
    systems: Vec<FakeSystem>,
    log_path: PathBuf,
    /// An independent client (not the provider) to read the emulator's state.
    http: reqwest::Client,
    /// Held for its `Drop` (removes config, certs, state).
    _dir: Option<tempfile::TempDir>,
}

impl SushyEmulator {
    pub fn builder() -> SushyBuilder {
        SushyBuilder::default()
    }

    /// Start with the defaults (one system, `admin`/`password`).
    pub async fn start() -> Result<SushyEmulator, HarnessError> {
        SushyBuilder::default().start().await
    }

    /// Start, or print why the test skips and return `None` (missing
    /// `sushy-emulator`). With `BMCFLEET_REQUIRE_PEERS=1` a missing
    /// emulator panics; a failed start always panics.
    pub async fn start_or_skip(builder: SushyBuilder, test: &str) -> Option<SushyEmulator> {
        match builder.start().await {
            Ok(e) => Some(e),
            Err(e) if e.is_missing() && !env_flag("BMCFLEET_REQUIRE_PEERS") => {
                eprintln!("SKIP {test}: {e}");
                None
            }
            Err(e) => panic!("{test}: {e}"),
        }
    }
}

/// An HTTPS client trusting only `pki`'s CA, independent of the provider.
fn reader(pki: &TestPki) -> Result<reqwest::Client, HarnessError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| HarnessError::Pki(e.to_string()))?;
        roots.add(cert).map_err(|e| HarnessError::Pki(e.to_string()))?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
        .map_err(|e| HarnessError::Pki(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| HarnessError::Start(format!("building the reader client: {e}")))
}

impl SushyEmulator {
    async fn wait_ready(&mut self, timeout: Duration) -> Result<(), HarnessError> {
        let deadline = Instant::now() + timeout;
        let url = format!("{}/redfish/v1/", self.base_url());
        let mut delay = Duration::from_millis(20);
        loop {
            if let Some(status) = self.child.try_wait().map_err(|e| HarnessError::io("checking the emulator", e))? {
                return Err(HarnessError::Start(format!("exited with {status}: {}", self.log_tail())));
            }
            if let Ok(r) = self.http.get(&url).timeout(Duration::from_secs(2)).send().await {
                // Another instance may hold the port (see `crate::ports`).
                if r.status().is_success() {
                    if crate::ports::listens_tcp(self.child.id(), self.addr.port()) {
                        return Ok(());
                    }
                    return Err(HarnessError::Start(format!(
                        "port {} is held by another process: {}",
                        self.addr.port(),
                        self.log_tail()
                    )));
                }
            }
            if Instant::now() + delay > deadline {
                return Err(HarnessError::Start(format!("not ready after {timeout:?}: {}", self.log_tail())));
            }
            // Readiness poll backoff, bounded by the deadline above.
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(250));
        }
    }

    /// The last lines of the emulator's log (for failure messages).
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().rev().take(15).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn base_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The certificate the emulator serves (PEM).
    pub fn cert_pem(&self) -> &str {
        &self.pki.cert_pem
    }

    /// A target for this emulator: inline credentials, its CA as `tls.ca_pem`.
    pub fn target(&self) -> BmcTarget {
        loopback_target(self.addr, &self.username, &self.password, &self.pki.ca_pem)
    }

    pub fn credentials(&self) -> ResolvedCredentials {
        credentials(&self.username, &self.password)
    }

    pub fn systems(&self) -> &[FakeSystem] {
        &self.systems
    }

    /// `/redfish/v1/Systems/<uuid>` of the n-th configured system.
    pub fn system_path(&self, n: usize) -> String {
        format!("/redfish/v1/Systems/{}", self.systems[n].uuid)
    }

    /// GET a resource with an independent client (Basic auth), for asserting state.
    pub async fn get(&self, path: &str) -> Result<Value, HarnessError> {
        let r = self
            .http
            .get(format!("{}{path}", self.base_url()))
            .basic_auth(&self.username, Some(&self.password))
            .send()
            .await
            .map_err(|e| HarnessError::Start(format!("GET {path}: {e}")))?;
        let status = r.status();
        let body = r.bytes().await.map_err(|e| HarnessError::Start(format!("GET {path}: {e}")))?;
        if !status.is_success() {
            return Err(HarnessError::Start(format!("GET {path}: HTTP {status}: {}", String::from_utf8_lossy(&body))));
        }
        serde_json::from_slice(&body).map_err(|e| HarnessError::Start(format!("GET {path}: not JSON: {e}")))
    }

    /// Poll `path` until `pred` holds, up to `timeout`; returns the last body.
    /// (sushy applies power changes after a random 1–11 s.)
    pub async fn wait_for(
        &self,
        path: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Result<Value, HarnessError> {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.get(path).await?;
            if pred(&v) {
                return Ok(v);
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Start(format!(
                    "{path} did not reach the expected state within {timeout:?}; last: {v}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for SushyEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
