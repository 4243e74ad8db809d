//! [`PyghmiBmc`]: pyghmi's IPMI BMC server (what VirtualBMC runs, one per
//! port) as a test peer, from `testing/pyghmi/bmc.py`: a `pyghmi.ipmi.bmc.Bmc`
//! keeping real power and boot state, on a free loopback UDP port, killed
//! on drop.
//!
//! What it is good for: pyghmi offers cipher suite 3 only and answers any
//! Open Session proposal with suite 3's algorithms and status 0 (so a
//! client proposing suite 17 must take suite 3 or fail); power status, on,
//! off, cycle, reset, soft off, NMI; boot device set and get (flags
//! reported valid). It has no user commands (0xC1): users are proven
//! against `ipmi_sim` and the spec responders.
//!
//! The interpreter: `BMCFLEET_PYTHON`, then the repository's
//! `.tools/bin/python3` (scripts/setup.sh installs pyghmi there from
//! examples/python/requirements.txt), then `python3` on `PATH`; the first
//! that imports `pyghmi`.

use super::SimError;
use bmcfleet_ipmi::probe;
use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::{BmcAddress, BmcTarget, Credentials, Host, Protocol, Secret, TlsOptions};
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What the BMC program keeps (its `state.json`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PyghmiState {
    /// `on` or `off`.
    pub power: String,
    /// pyghmi's name of the boot device: `default`, `network`, `hd`,
    /// `optical`, `setup`, `floppy`, `safe`.
    pub boot: String,
    pub resets: u32,
    pub cycles: u32,
    pub shutdowns: u32,
    pub nmis: u32,
    /// Every change, in order (`power on`, `boot network`, ...).
    pub log: Vec<String>,
}

/// A running pyghmi BMC; see the module docs.
pub struct PyghmiBmc {
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
    username: String,
    password: Secret,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the testing crate is in the workspace").to_path_buf()
}

/// A Python that imports pyghmi, if any (see the module docs).
pub fn python() -> Option<PathBuf> {
    let candidates = std::env::var_os("BMCFLEET_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([root().join(".tools/bin/python3"), PathBuf::from("python3")]);
    crate::peers::python_with(candidates, "pyghmi.ipmi.bmc")
}

impl PyghmiBmc {
    /// Starts a BMC with user `admin` / `password`. `NotInstalled` when no
    /// Python with pyghmi is found.
    pub fn start() -> Result<PyghmiBmc, SimError> {
        let python = python().ok_or_else(|| {
            SimError::NotInstalled("python3 with pyghmi (pip install -r examples/python/requirements.txt)".into())
        })?;
        let dir = tempfile::Builder::new()
            .prefix("bmcfleet-pyghmi-")
            .tempdir()
            .map_err(|e| SimError::Io { what: "creating the BMC's directory".into(), source: e })?;
        let password = Secret::new("password");
        let stderr = std::fs::File::create(dir.path().join("stderr.log"))
            .map_err(|e| SimError::Io { what: "creating the BMC's log".into(), source: e })?;
        let mut child = Command::new(&python)
            .arg(root().join("testing/pyghmi/bmc.py"))
            .args(["--user", "admin", "--state-dir"])
            .arg(dir.path())
            .env("PYGHMI_BMC_PASSWORD", password.expose())
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| SimError::Io { what: format!("starting {}", python.display()), source: e })?;
        // The first line says the port; the rest of stdout is drained.
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let mut bmc = PyghmiBmc { child: Some(child), dir, port: 0, username: "admin".into(), password };
        let timeout = Duration::from_secs(15);
        let deadline = Instant::now() + timeout;
        let line = rx.recv_timeout(timeout).map_err(|_| SimError::NotReady { timeout, log: bmc.log() })?;
        bmc.port = line
            .strip_prefix("PORT ")
            .and_then(|p| p.trim().parse().ok())
            .ok_or_else(|| SimError::Exited { log: format!("{line}\n{}", bmc.log()) })?;
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = bmc.child.as_mut().map(|c| c.try_wait()) {
                bmc.child = None;
                return Err(SimError::Exited { log: bmc.log() });
            }
            let attempt_end = (Instant::now() + Duration::from_millis(300)).min(deadline);
            if probe::channel_auth_caps(bmc.socket_addr(), attempt_end, Duration::from_millis(100)).is_ok() {
                return Ok(bmc);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(SimError::NotReady { timeout, log: bmc.log() })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> BmcAddress {
        BmcAddress { host: Host::V4(Ipv4Addr::LOCALHOST), port: Some(self.port) }
    }

    pub fn username(&self) -> &str {
        &self.username
    }

    pub fn password(&self) -> &Secret {
        &self.password
    }

    /// A target with inline credentials, protocol `ipmi` and no options
    /// of its own (the default cipher-suite list, 17 then 3).
    pub fn target(&self) -> BmcTarget {
        BmcTarget {
            address: self.address(),
            protocol: Protocol::Ipmi,
            credentials: Credentials::Inline { username: self.username.clone(), password: self.password.clone() },
            tls: TlsOptions::default(),
            system_id: None,
            options: Default::default(),
        }
    }

    pub fn credentials(&self) -> ResolvedCredentials {
        ResolvedCredentials { username: self.username.clone(), password: self.password.clone() }
    }

    /// The BMC's state as it last wrote it.
    pub fn state(&self) -> PyghmiState {
        let Some(v) = std::fs::read(self.dir.path().join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        else {
            return PyghmiState::default();
        };
        let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
        let count = |k: &str| v[k].as_u64().unwrap_or_default() as u32;
        PyghmiState {
            power: text("power"),
            boot: text("boot"),
            resets: count("resets"),
            cycles: count("cycles"),
            shutdowns: count("shutdowns"),
            nmis: count("nmis"),
            log: v["log"].as_array().into_iter().flatten().filter_map(|e| e.as_str().map(str::to_owned)).collect(),
        }
    }

    /// What the BMC program wrote on stderr (pyghmi's tracebacks).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }

    /// `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U admin -E ARGS...`
    /// (password in `IPMI_PASSWORD`); stdout, or the error with stderr.
    pub fn ipmitool(&self, args: &[&str]) -> Result<String, SimError> {
        super::ipmitool(self.port, &self.username, self.password.expose(), args)
    }
}

impl Drop for PyghmiBmc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
