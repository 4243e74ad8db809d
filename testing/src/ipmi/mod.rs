//! IPMI test support: the `ipmi_sim` launcher and the spec responder.
//!
//! - [`IpmiSim`]: a real OpenIPMI `ipmi_sim` BMC on a free loopback UDP port,
//!   with its own `lan.conf`, command file and chassis-control program
//!   keeping power/boot state on disk. Several run side by side. Killed on
//!   drop.
//! - [`SpecBmc`]: the in-process spec responder for what `ipmi_sim` refuses.
//! - [`lan`]: the same semantics on the wire: [`LanFleet`] runs many
//!   RMCP+ BMCs (cipher suites 1/2/3/17) on loopback UDP ports, proven with
//!   ipmitool and FreeIPMI.
//! - [`PyghmiBmc`]: pyghmi's BMC server (what VirtualBMC runs) from
//!   `testing/pyghmi/bmc.py`, keeping real power and boot state.
//! - [`wait_until`]: poll a condition against a deadline (never a bare sleep).
//!
//! Requires the Debian packages `openipmi` (`ipmi_sim`) and, for
//! [`IpmiSim::ipmitool`], `ipmitool`. Templates and the chassis-control
//! script live in the repository's `tests/ipmi_sim/` (override with
//! `BMCFLEET_IPMI_SIM_DIR`); the simulator binary is `ipmi_sim` on `PATH`
//! (override with `IPMI_SIM_BIN`).
//!
//! ```no_run
//! # async fn demo() {
//! use bmcfleet_ipmi::IpmiConnector;
//! use bmcfleet_testing::ipmi::IpmiSim;
//! use bmcfleet_provider::{Connector, Ctx};
//! use std::time::Duration;
//!
//! let sim = IpmiSim::start().expect("ipmi_sim");
//! let ctx = Ctx::with_timeout(Duration::from_secs(10));
//! let mut session = IpmiConnector::default()
//!     .connect(&ctx, &sim.target(), &sim.credentials())
//!     .await
//!     .unwrap();
//! session.power().unwrap().power(&ctx, bmcfleet_schema::PowerOp::On).await.unwrap();
//! assert!(sim.power_on());
//! # }
//! ```

pub mod lan;
mod pyghmi;
mod serial;
mod spec_bmc;

mod recorded;
pub use lan::{LanBmc, LanConfig, LanFaults, LanFleet, LanStats};
pub use pyghmi::{PyghmiBmc, PyghmiState};
pub use recorded::Recorded;
pub use serial::SerialHost;
pub use spec_bmc::{
    Fault, SpecBmc, SpecDcmi, SpecHandle, SpecIdentify, SpecLan, SpecState, SpecUser, LAN_CHANNEL, MAX_USERS,
};

use bmcfleet_ipmi::probe;
use bmcfleet_provider::ResolvedCredentials;
use bmcfleet_schema::{BmcAddress, BmcTarget, Credentials, Host, Protocol, Secret, TlsOptions};
use std::fs;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why a simulator could not be started or a tool run failed.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("`{0}` is not installed (apt-get install openipmi ipmitool)")]
    NotInstalled(String),
    #[error("ipmi_sim exited during start-up: {log}")]
    Exited { log: String },
    #[error("ipmi_sim did not answer within {timeout:?}: {log}")]
    NotReady { timeout: Duration, log: String },
    #[error("{command} failed ({status}): {stderr}")]
    Tool { command: String, status: String, stderr: String },
    #[error("invalid harness setting: {0}")]
    Invalid(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> SimError {
    let what = what.into();
    move |source| SimError::Io { what, source }
}

/// Polls `cond` every few milliseconds until it holds or `timeout` passes;
/// returns whether it held. For waiting on state a BMC changes
/// asynchronously (power cycle), never as a fixed delay.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Where the lan.conf/emu templates and the chassis-control script are.
pub fn template_dir() -> PathBuf {
    std::env::var_os("BMCFLEET_IPMI_SIM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/ipmi_sim"))
}

/// Options for [`IpmiSim::start_with`].
#[derive(Clone, Debug)]
pub struct IpmiSimOptions {
    /// The administrator account configured in slot 2.
    pub username: String,
    pub password: Secret,
    /// How long to wait for the simulator to answer.
    pub ready_timeout: Duration,
    /// A TCP port playing the host's serial port ([`SerialHost`]): adds
    /// `sol "tcp:127.0.0.1:PORT" 115200` to lan.conf (SOL payload).
    pub sol_port: Option<u16>,
}

impl Default for IpmiSimOptions {
    fn default() -> Self {
        IpmiSimOptions {
            username: "admin".into(),
            password: Secret::new("password"),
            ready_timeout: Duration::from_secs(10),
            sol_port: None,
        }
    }
}

/// A running `ipmi_sim` instance; see the module docs.
pub struct IpmiSim {
    child: Option<Child>,
    /// Owns the instance directory (configs, ipmi_sim state, chassis state,
    /// log); removed on drop.
    dir: tempfile::TempDir,
    port: u16,
    options: IpmiSimOptions,
}

impl IpmiSim {
    /// Starts a simulator with user `admin` / `password`.
    pub fn start() -> Result<IpmiSim, SimError> {
        IpmiSim::start_with(IpmiSimOptions::default())
    }

    pub fn start_with(options: IpmiSimOptions) -> Result<IpmiSim, SimError> {
        for value in [options.username.as_str(), options.password.expose()] {
            if value.is_empty() || value.len() > 16 || value.contains(['"', '\\', '\n']) {
                return Err(SimError::Invalid("user name and password: 1-16 characters, no quotes".into()));
            }
        }
        let dir = tempfile::Builder::new()
            .prefix("bmcfleet-ipmi-sim-")
            .tempdir()
            .map_err(io_err("creating the instance directory"))?;
        let mut sim = IpmiSim { child: None, dir, port: 0, options };
        // A port picked by binding port 0 can be taken before ipmi_sim binds
        // it; try a few.
        let mut last = None;
        for _ in 0..5 {
            sim.port = free_udp_port()?;
            sim.write_config()?;
            match sim.spawn_and_wait() {
                Ok(()) => return Ok(sim),
                Err(SimError::Exited { log }) if log.contains("in use") || log.contains("bind") => {
                    last = Some(SimError::Exited { log })
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn write_config(&self) -> Result<(), SimError> {
        let templates = template_dir();
        let script = templates.join("chassis_control");
        let chassis = self.chassis_dir();
        let state = self.dir.path().join("state");
        for d in [&chassis, &state] {
            fs::create_dir_all(d).map_err(io_err(format!("creating {}", d.display())))?;
        }
        for p in [&script, &chassis] {
            let s = p.to_string_lossy();
            if s.contains(|c: char| c.is_whitespace() || c == '"') {
                return Err(SimError::Invalid(format!("path {s:?} must not contain spaces or quotes")));
            }
        }
        let read = |name: &str| {
            let path = templates.join(name);
            fs::read_to_string(&path).map_err(io_err(format!("reading {}", path.display())))
        };
        let lan = read("lan.conf.in")?
            .replace("@NAME@", &format!("bmcfleet-sim-{}", self.port))
            .replace("@PORT@", &self.port.to_string())
            .replace("@CHASSIS_CONTROL@", &format!("/bin/sh {}", script.display()))
            .replace("@STATE_DIR@", &chassis.display().to_string())
            .replace("@USERNAME@", &self.options.username)
            .replace("@PASSWORD@", self.options.password.expose());
        let mut lan = lan;
        if let Some(port) = self.options.sol_port {
            lan.push_str(&format!(
                "\n# Serial over LAN to the test's serial host.\nsol \"tcp:127.0.0.1:{port}\" 115200\n"
            ));
        }
        write(&self.dir.path().join("lan.conf"), &lan)?;
        write(&self.dir.path().join("bmc.emu"), &read("bmc.emu.in")?)
    }

    fn spawn_and_wait(&mut self) -> Result<(), SimError> {
        let bin = std::env::var("IPMI_SIM_BIN").unwrap_or_else(|_| "ipmi_sim".into());
        let log_path = self.log_path();
        let log = fs::File::create(&log_path).map_err(io_err("creating the ipmi_sim log"))?;
        let log2 = log.try_clone().map_err(io_err("duplicating the log handle"))?;
        let dir = self.dir.path();
        let child = Command::new(&bin)
            .arg("-c")
            .arg(dir.join("lan.conf"))
            .arg("-f")
            .arg(dir.join("bmc.emu"))
            .arg("-s")
            .arg(dir.join("state"))
            .arg("-n")
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| match e.kind() {
                io::ErrorKind::NotFound => SimError::NotInstalled(bin.clone()),
                _ => SimError::Io { what: format!("starting {bin}"), source: e },
            })?;
        self.child = Some(child);

        let timeout = self.options.ready_timeout;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return Err(SimError::Exited { log: self.log() });
                }
            }
            let attempt_end = (Instant::now() + Duration::from_millis(200)).min(deadline);
            match probe::channel_auth_caps(self.socket_addr(), attempt_end, Duration::from_millis(50)) {
                // An answer proves only that something holds the port: when
                // another instance took it between `free_udp_port` and our
                // bind, ours exits and theirs answers, or (ipmi_sim sets
                // SO_REUSEADDR) both hold it and one gets the datagrams.
                // Only a port our child holds alone is ours.
                Ok(_) => {
                    let pid = self.child.as_ref().map(Child::id);
                    if pid.is_some_and(|pid| crate::ports::holds_udp_alone(pid, self.port)) {
                        return Ok(());
                    }
                    self.kill();
                    return Err(SimError::Exited {
                        log: format!("port {} in use by another process\n{}", self.port, self.log()),
                    });
                }
                // Not bound yet: ICMP port unreachable comes back at once.
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        self.kill();
        Err(SimError::NotReady { timeout, log: self.log() })
    }

    /// Stops the simulator (SIGKILL), keeping its state: a BMC that died.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the simulator again on the same port with the same state.
    pub fn restart(&mut self) -> Result<(), SimError> {
        self.kill();
        self.spawn_and_wait()
    }

    /// Whether the simulator process is alive.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    pub fn host(&self) -> Ipv4Addr {
        Ipv4Addr::LOCALHOST
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::from((self.host(), self.port))
    }

    /// `127.0.0.1:PORT` as a bmcfleet address.
    pub fn address(&self) -> BmcAddress {
        BmcAddress { host: Host::V4(self.host()), port: Some(self.port) }
    }

    pub fn username(&self) -> &str {
        &self.options.username
    }

    pub fn password(&self) -> &Secret {
        &self.options.password
    }

    /// A target with inline credentials and protocol `ipmi`.
    pub fn target(&self) -> BmcTarget {
        BmcTarget {
            address: self.address(),
            protocol: Protocol::Ipmi,
            credentials: Credentials::Inline {
                username: self.options.username.clone(),
                password: self.options.password.clone(),
            },
            tls: TlsOptions::default(),
            system_id: None,
            options: Default::default(),
        }
    }

    pub fn credentials(&self) -> ResolvedCredentials {
        ResolvedCredentials { username: self.options.username.clone(), password: self.options.password.clone() }
    }

    /// The instance directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the chassis-control program keeps the machine's state.
    pub fn chassis_dir(&self) -> PathBuf {
        self.dir.path().join("chassis")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("ipmi_sim.log")
    }

    /// The simulator's stdout/stderr so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn chassis_value(&self, name: &str) -> Option<String> {
        fs::read_to_string(self.chassis_dir().join(name)).ok().map(|s| s.trim().to_string())
    }

    /// Whether the machine is powered on (it starts off).
    pub fn power_on(&self) -> bool {
        self.chassis_value("power").is_some_and(|v| v == "1")
    }

    /// The last boot device ipmi_sim passed to the chassis program:
    /// `none`, `pxe`, `default` (disk), `cdrom` or `bios`.
    pub fn boot_device(&self) -> Option<String> {
        self.chassis_value("boot")
    }

    /// The last Chassis Identify ipmi_sim passed to the chassis program,
    /// `"INTERVAL FORCE"` (`"0 1"`: Force Identify On; `"0 0"`: off).
    pub fn identify(&self) -> Option<String> {
        self.chassis_value("identify")
    }

    /// Hard resets (Chassis Control 3) the machine received.
    pub fn resets(&self) -> u32 {
        self.chassis_value("resets").and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// Soft (ACPI) shutdowns (Chassis Control 5) the machine received.
    pub fn shutdowns(&self) -> u32 {
        self.chassis_value("shutdowns").and_then(|v| v.parse().ok()).unwrap_or(0)
    }

    /// Every `set` the chassis program received, in order (`power 0`, ...).
    pub fn chassis_log(&self) -> Vec<String> {
        fs::read_to_string(self.chassis_dir().join("log"))
            .map(|s| s.lines().map(str::to_owned).collect())
            .unwrap_or_default()
    }

    /// Runs the reference client against this simulator:
    /// `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U USER -E ARGS...`
    /// (password via `IPMI_PASSWORD`, never on the command line); returns
    /// stdout, or an error with stderr on a non-zero exit.
    pub fn ipmitool(&self, args: &[&str]) -> Result<String, SimError> {
        ipmitool(self.port, &self.options.username, self.options.password.expose(), args)
    }
}

/// The reference client against a BMC on loopback:
/// `ipmitool -I lanplus -C 3 -H 127.0.0.1 -p PORT -U USER -E ARGS...`
/// (password via `IPMI_PASSWORD`, never on the command line); stdout, or an
/// error with stderr on a non-zero exit. Every launcher here (ipmi_sim,
/// pyghmi) cross-checks through it.
pub(crate) fn ipmitool(port: u16, username: &str, password: &str, args: &[&str]) -> Result<String, SimError> {
    let port = port.to_string();
    let out = Command::new("ipmitool")
        .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", &port, "-U", username, "-E"])
        .args(args)
        .env("IPMI_PASSWORD", password)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => SimError::NotInstalled("ipmitool".into()),
            _ => SimError::Io { what: "running ipmitool".into(), source: e },
        })?;
    if !out.status.success() {
        return Err(SimError::Tool {
            command: format!("ipmitool {}", args.join(" ")),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        self.kill();
    }
}

fn write(path: &Path, contents: &str) -> Result<(), SimError> {
    fs::write(path, contents).map_err(io_err(format!("writing {}", path.display())))
}

/// A free UDP port never handed out before in this process (parallel tests
/// of one binary would otherwise be offered a port just closed by another).
fn free_udp_port() -> Result<u16, SimError> {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let socket = UdpSocket::bind("127.0.0.1:0").map_err(io_err("finding a free UDP port"))?;
        let port = socket.local_addr().map_err(io_err("finding a free UDP port"))?.port();
        let mut handed = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if !handed.contains(&port) {
            handed.push(port);
            return Ok(port);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two instances handed one port: the second's ipmi_sim either cannot
    /// bind it and exits while the first answers the readiness probe, or
    /// (SO_REUSEADDR) binds it beside the first. Either way the second must
    /// not take the port for its own (its tests' commands would reach the
    /// other instance's machine, or the first's would reach it).
    #[test]
    fn an_instance_is_ready_only_on_a_port_its_own_process_holds() {
        let first = IpmiSim::start().expect("ipmi_sim");
        let dir = tempfile::Builder::new().prefix("bmcfleet-ipmi-sim-").tempdir().unwrap();
        let mut second = IpmiSim { child: None, dir, port: first.port(), options: IpmiSimOptions::default() };
        second.write_config().unwrap();
        match second.spawn_and_wait() {
            Err(SimError::Exited { log }) => assert!(log.contains("in use"), "{log}"),
            other => panic!("the first instance's answer was taken for the second's: {:?}", other.map(|_| ())),
        }
        // The second is gone; the first holds its port alone again.
        let pid = first.child.as_ref().map(Child::id).unwrap();
        assert!(crate::ports::holds_udp_alone(pid, first.port()));
    }
}
