//! The simulator: per-BMC state, fault injection and an execution log.
//!
//! Faults come from the BMC's host name (`hang-*`, `slow-*`, `down-*`,
//! `fail-*`, `basic-*`) or are injected at run time per BMC key with
//! [`SimServer::inject`] ([`Faults`]: refuse the next N logins, lose the
//! replies of the next N actions, hang). [`SimServer::calls`] lists every
//! request a BMC received, faults included, with its arrival time.

use bmcfleet_schema::{
    Action, ActionData, Bios, BiosPending, BmcClock, BmcResetKind, BootDevice, BootDeviceRequest, ErrorBody, ErrorCode,
    EventLog, EventLogEntry, EventLogOp, FirmwareUpdateResult, Health, IdentifyLight, IdentifyState, Inventory,
    NetworkSourceOp, PowerLimit, PowerOp, PowerReading, PowerState, RawRequest, RawResponse, SecureBootState,
    SensorKind, SensorReading, Thresholds, UserInfo, UserOp, UserRole, VirtualMediaOp,
};
use bmcfleet_sim::proto::{Call, Request, Response};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// Simulator settings.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Where to listen (use port 0 for a free port).
    pub listen: SocketAddr,
    /// Time every action takes.
    pub latency: Duration,
    /// Time an action takes on a `slow-*` BMC.
    pub slow_latency: Duration,
    /// The password every BMC accepts; `None` accepts any but `wrong`.
    pub password: Option<String>,
    /// Keep a [`CallRecord`] of every request for [`SimServer::calls`]
    /// (tests that count calls); off by default, as the record grows with
    /// every request for the server's whole life.
    pub record_calls: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: ([127, 0, 0, 1], 0).into(),
            latency: Duration::ZERO,
            slow_latency: Duration::from_secs(2),
            password: None,
            record_calls: false,
        }
    }
}

/// One executed action, in the order the simulator started them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Global start order.
    pub seq: u64,
    pub bmc: String,
    pub call: Option<Call>,
    pub action: String,
    /// How many actions of this BMC were running when this one started
    /// (including itself). Anything above 1 is a concurrency violation.
    pub concurrent: usize,
    pub ok: bool,
}

/// One request as the simulator received it, before any fault applied:
/// session logins (no action) and actions alike.
#[derive(Clone, Debug)]
pub struct CallRecord {
    pub bmc: String,
    /// The action's kind, or `None` for a session login.
    pub action: Option<String>,
    pub call: Option<Call>,
    /// When the request arrived.
    pub at: Instant,
}

/// Faults injected into one BMC at run time (see [`SimServer::inject`]).
/// Counted faults apply to the next requests of their kind and are used up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// The next N logins are refused: the connection closes before any
    /// action could be sent (the client sees `unreachable`, nothing sent).
    pub refuse_logins: u32,
    /// The next N actions are executed but their replies are lost: the
    /// connection closes without an answer (the client sees `unreachable`;
    /// the action did take effect).
    pub lose_replies: u32,
    /// Every request is read and never answered, until cleared.
    pub hang: bool,
}

#[derive(Clone, Debug)]
struct User {
    id: u32,
    name: String,
    role: UserRole,
    enabled: bool,
    /// What the last create or update set (tests check it arrived whole).
    password: String,
}

#[derive(Clone, Debug)]
struct Bmc {
    power: PowerState,
    boot: BootDeviceRequest,
    users: Vec<User>,
    net: NetworkSourceOp,
    media: Option<String>,
    /// The data of the last raw IPMI request.
    raw_data: Option<Vec<u8>>,
    resets: u32,
    nmis: u32,
    /// The event log, oldest first: one entry per power change.
    events: Vec<EventLogEntry>,
    /// BIOS attributes (current) and what waits for the next reset.
    bios: BTreeMap<String, serde_json::Value>,
    bios_pending: BTreeMap<String, serde_json::Value>,
    secure_boot: bool,
    /// The identify light, and when a timed identify ends.
    identify: IdentifyLight,
    identify_until: Option<Instant>,
    /// The power limit (watts, enforced).
    power_limit: (Option<u32>, bool),
    in_flight: usize,
    /// The typed components its inventory reports (a test may swap them).
    components: Inventory,
}

impl Default for Bmc {
    fn default() -> Self {
        Bmc {
            power: PowerState::Off,
            boot: BootDeviceRequest { device: BootDevice::None, persistent: false, efi: false },
            users: vec![User {
                id: 2,
                name: "admin".into(),
                role: UserRole::Admin,
                enabled: true,
                password: String::new(),
            }],
            net: NetworkSourceOp::Dhcp,
            media: None,
            raw_data: None,
            resets: 0,
            nmis: 0,
            events: Vec::new(),
            bios: default_bios(),
            bios_pending: BTreeMap::new(),
            secure_boot: false,
            identify: IdentifyLight::Off,
            identify_until: None,
            power_limit: (None, false),
            in_flight: 0,
            components: default_components(),
        }
    }
}

#[derive(Default)]
struct State {
    bmcs: HashMap<String, Bmc>,
    log: Vec<LogEntry>,
    seq: u64,
    connections: u64,
    closed: u64,
    calls: Vec<CallRecord>,
    faults: HashMap<String, Faults>,
}

/// A running simulator. Dropping it stops accepting connections.
pub struct SimServer {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl SimServer {
    pub async fn start(config: SimConfig) -> std::io::Result<SimServer> {
        let listener = TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(Notify::new());
        let config = Arc::new(config);
        let task = {
            let state = state.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = stop.notified() => break,
                        accepted = listener.accept() => {
                            let Ok((socket, _)) = accepted else { continue };
                            state.lock().unwrap().connections += 1;
                            let state = state.clone();
                            let config = config.clone();
                            tokio::spawn(async move {
                                serve(socket, state.clone(), config).await;
                                state.lock().unwrap().closed += 1;
                            });
                        }
                    }
                }
            })
        };
        Ok(SimServer { addr, state, stop, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every action started so far, in start order.
    pub fn log(&self) -> Vec<LogEntry> {
        self.state.lock().unwrap().log.clone()
    }

    pub fn power(&self, bmc: &str) -> Option<PowerState> {
        self.state.lock().unwrap().bmcs.get(bmc).map(|b| b.power)
    }

    /// The data of the last raw IPMI request one BMC received.
    pub fn raw_data(&self, bmc: &str) -> Option<Vec<u8>> {
        self.state.lock().unwrap().bmcs.get(bmc).and_then(|b| b.raw_data.clone())
    }

    /// The inserted virtual media URL of one BMC.
    pub fn media(&self, bmc: &str) -> Option<String> {
        self.state.lock().unwrap().bmcs.get(bmc).and_then(|b| b.media.clone())
    }

    /// The password one BMC user was last given.
    pub fn user_password(&self, bmc: &str, user: &str) -> Option<String> {
        self.state
            .lock()
            .unwrap()
            .bmcs
            .get(bmc)
            .and_then(|b| b.users.iter().find(|u| u.name == user).map(|u| u.password.clone()))
    }

    pub fn boot(&self, bmc: &str) -> Option<BootDeviceRequest> {
        self.state.lock().unwrap().bmcs.get(bmc).map(|b| b.boot.clone())
    }

    /// Change one BMC's hardware behind bmcfleet's back (a DIMM swapped, a
    /// firmware flashed): `change` edits the typed components its inventory
    /// reports (the BMC is created if it was never called).
    pub fn change_components(&self, bmc: &str, change: impl FnOnce(&mut Inventory)) {
        change(&mut self.state.lock().unwrap().bmcs.entry(bmc.to_owned()).or_default().components);
    }

    /// Inject faults into one BMC (by key, e.g. `v4-10-0-0-1`), replacing its previous ones.
    pub fn inject(&self, bmc: &str, faults: Faults) {
        self.state.lock().unwrap().faults.insert(bmc.to_owned(), faults);
    }

    /// Every request one BMC received (logins and actions), in arrival order;
    /// empty unless the server was started with [`SimConfig::record_calls`].
    pub fn calls(&self, bmc: &str) -> Vec<CallRecord> {
        self.state.lock().unwrap().calls.iter().filter(|c| c.bmc == bmc).cloned().collect()
    }

    /// How many TCP connections (sessions) were opened.
    pub fn connections(&self) -> u64 {
        self.state.lock().unwrap().connections
    }

    /// How many sessions were closed (by the client, or on a fault).
    pub fn closed_connections(&self) -> u64 {
        self.state.lock().unwrap().closed
    }

    /// Wait until `pred(log)` holds or `timeout` passes; returns whether it held.
    pub async fn wait_for(&self, timeout: Duration, pred: impl Fn(&[LogEntry]) -> bool) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if pred(&self.state.lock().unwrap().log) {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        self.stop.notify_one();
        self.task.abort();
    }
}

async fn serve(socket: TcpStream, state: Arc<Mutex<State>>, config: Arc<SimConfig>) {
    let _ = socket.set_nodelay(true);
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let resp = Response::Err(ErrorBody::new(ErrorCode::ProtocolError, format!("bad request: {e}")));
                let _ = send(&mut write, &resp).await;
                continue;
            }
        };
        enum Injected {
            None,
            Refuse,
            LoseReply,
            Hang,
        }
        let injected = {
            let mut st = state.lock().unwrap();
            if config.record_calls {
                st.calls.push(CallRecord {
                    bmc: req.bmc.clone(),
                    action: req.action.as_ref().map(|a| a.kind().to_owned()),
                    call: req.call.clone(),
                    at: Instant::now(),
                });
            }
            match st.faults.get_mut(&req.bmc) {
                Some(f) if f.hang => Injected::Hang,
                Some(f) if req.action.is_none() && f.refuse_logins > 0 => {
                    f.refuse_logins -= 1;
                    Injected::Refuse
                }
                Some(f) if req.action.is_some() && f.lose_replies > 0 => {
                    f.lose_replies -= 1;
                    Injected::LoseReply
                }
                _ => Injected::None,
            }
        };
        if req.host.starts_with("down-") || matches!(injected, Injected::Refuse) {
            return;
        }
        if req.host.starts_with("hang-") || matches!(injected, Injected::Hang) {
            // Keep the connection open and never answer.
            std::future::pending::<()>().await;
        }
        let auth_ok = match &config.password {
            Some(p) => req.password.expose() == p,
            None => req.password.expose() != "wrong",
        };
        if !auth_ok {
            let resp = Response::Err(ErrorBody::new(ErrorCode::AuthFailed, "invalid username or password"));
            let _ = send(&mut write, &resp).await;
            continue;
        }
        let Some(action) = req.action else {
            let _ = send(&mut write, &Response::Ok(None)).await;
            continue;
        };
        let seq = {
            let mut st = state.lock().unwrap();
            st.seq += 1;
            let seq = st.seq;
            let bmc = st.bmcs.entry(req.bmc.clone()).or_default();
            bmc.in_flight += 1;
            let concurrent = bmc.in_flight;
            st.log.push(LogEntry {
                seq,
                bmc: req.bmc.clone(),
                call: req.call.clone(),
                action: action.kind().to_owned(),
                concurrent,
                ok: false,
            });
            seq
        };
        let latency = if req.host.starts_with("slow-") { config.slow_latency } else { config.latency };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let resp = {
            let mut st = state.lock().unwrap();
            let bmc = st.bmcs.get_mut(&req.bmc).expect("inserted above");
            bmc.in_flight -= 1;
            let resp = execute(bmc, &req.host, &action);
            if let Some(entry) = st.log.iter_mut().rev().find(|e| e.seq == seq) {
                entry.ok = matches!(resp, Response::Ok(_));
            }
            resp
        };
        if matches!(injected, Injected::LoseReply) {
            return; // executed, but the reply never leaves
        }
        if send(&mut write, &resp).await.is_err() {
            return;
        }
    }
}

async fn send(write: &mut tokio::net::tcp::OwnedWriteHalf, resp: &Response) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(resp).expect("responses serialise");
    line.push(b'\n');
    write.write_all(&line).await
}

fn bmc_err(code: ErrorCode, msg: impl Into<String>) -> Response {
    Response::Err(ErrorBody::new(code, msg))
}

fn execute(bmc: &mut Bmc, host: &str, action: &Action) -> Response {
    let basic = host.starts_with("basic-");
    if host.starts_with("fail-") {
        return bmc_err(ErrorCode::BmcError, "simulated BMC failure (completion code 0xff)");
    }
    match action {
        // The simulator's power changes take effect at once: a settle time
        // or escalation has nothing to wait for.
        Action::PowerSettle(p) => execute(bmc, host, &Action::Power(p.op)),
        Action::Power(op) => {
            match op {
                PowerOp::On => bmc.power = PowerState::On,
                PowerOp::Off | PowerOp::SoftOff => bmc.power = PowerState::Off,
                PowerOp::Cycle | PowerOp::Reset => {
                    if bmc.power == PowerState::Off && *op == PowerOp::Reset {
                        return bmc_err(ErrorCode::BmcError, "cannot reset: chassis is powered off");
                    }
                    bmc.power = PowerState::On;
                    bmc.resets += 1;
                    let pending = std::mem::take(&mut bmc.bios_pending);
                    bmc.bios.extend(pending);
                    if !bmc.boot.persistent {
                        bmc.boot.device = BootDevice::None;
                    }
                }
                PowerOp::Nmi => {
                    if basic {
                        return bmc_err(ErrorCode::Unsupported, "this BMC does not implement the diagnostic interrupt");
                    }
                    bmc.nmis += 1;
                }
                PowerOp::Status => {}
            }
            if *op != PowerOp::Status {
                let id = bmc.events.last().and_then(|e| e.id.parse::<u32>().ok()).map_or(1, |n| n + 1);
                bmc.events.push(EventLogEntry {
                    id: id.to_string(),
                    severity: Some(Health::Ok),
                    kind: Some("Power Unit".into()),
                    message: format!("power {}", Action::Power(*op).kind().trim_start_matches("power_")),
                    ..EventLogEntry::default()
                });
            }
            Response::Ok(Some(ActionData::PowerState(bmc.power)))
        }
        Action::BootDevice(req) => {
            bmc.boot = req.clone();
            Response::Ok(None)
        }
        Action::GetBootDevice => Response::Ok(Some(ActionData::BootDevice(bmc.boot.clone()))),
        Action::User(op) => user(bmc, op),
        Action::BmcReset(kind) => {
            if basic && *kind == BmcResetKind::Warm {
                return bmc_err(ErrorCode::Unsupported, "warm reset is not supported");
            }
            Response::Ok(None)
        }
        Action::NetworkSource(NetworkSourceOp::Get) => Response::Ok(Some(ActionData::NetworkSource(bmc.net.clone()))),
        Action::NetworkSource(op) => {
            bmc.net = op.clone();
            Response::Ok(None)
        }
        Action::Raw(RawRequest::Ipmi(r)) => {
            bmc.raw_data = Some(r.data.clone());
            // Get Device ID answers; everything else is "invalid command".
            if r.netfn == 0x06 && r.cmd == 0x01 {
                Response::Ok(Some(ActionData::Raw(RawResponse {
                    status: 0,
                    data: vec![0x20, 0x01, 0x02, 0x03, 0x02],
                    body: None,
                })))
            } else {
                Response::Ok(Some(ActionData::Raw(RawResponse { status: 0xC1, data: vec![], body: None })))
            }
        }
        Action::Raw(RawRequest::Redfish(_)) => bmc_err(ErrorCode::Unsupported, "the simulator speaks no Redfish"),
        Action::VirtualMedia(VirtualMediaOp::Insert { url, .. }) => {
            bmc.media = Some(url.clone());
            Response::Ok(None)
        }
        Action::VirtualMedia(VirtualMediaOp::Eject { .. }) => {
            bmc.media = None;
            Response::Ok(None)
        }
        // The simulator keeps one log, the SEL (named `sel`).
        Action::EventLog(op) if op.log_ids().iter().any(|i| !i.eq_ignore_ascii_case("sel")) => bmc_err(
            ErrorCode::TargetNotFound,
            "this BMC has no log of that name: its only log is the system event log, named `sel`; nothing was done",
        ),
        Action::EventLog(EventLogOp::Read { limit, offset, .. }) => {
            let limit = limit.unwrap_or(EventLogOp::DEFAULT_LIMIT) as usize;
            let entries = bmc.events.iter().rev().skip(*offset as usize).take(limit).cloned().collect();
            Response::Ok(Some(ActionData::EventLog(EventLog { total: Some(bmc.events.len() as u32), entries })))
        }
        Action::EventLog(EventLogOp::Clear { .. }) => {
            bmc.events.clear();
            Response::Ok(None)
        }
        Action::Sensors => Response::Ok(Some(ActionData::Sensors(vec![SensorReading {
            name: "Inlet Temp".into(),
            kind: SensorKind::Temperature,
            value: Some(24.0),
            unit: Some("Cel".into()),
            thresholds: Thresholds { upper_warning: Some(40.0), upper_critical: Some(45.0), ..Thresholds::default() },
            health: Some(Health::Ok),
        }]))),
        Action::BiosGet => Response::Ok(Some(ActionData::Bios(Bios {
            attributes: bmc.bios.clone(),
            pending: bmc.bios_pending.clone(),
            registry: vec![],
        }))),
        Action::BiosSet(set) => {
            if let Some(name) = set.attributes.keys().find(|k| !bmc.bios.contains_key(*k)) {
                return bmc_err(
                    ErrorCode::InvalidField,
                    format!("bios_set: `{name}` is not a BIOS attribute of this system"),
                );
            }
            bmc.bios_pending.extend(set.attributes.clone());
            Response::Ok(Some(ActionData::BiosPending(BiosPending {
                attributes: set.attributes.clone(),
                apply_time: Some("OnReset".into()),
            })))
        }
        Action::BiosReset => {
            bmc.bios = default_bios();
            bmc.bios_pending.clear();
            Response::Ok(None)
        }
        Action::SecureBootGet => Response::Ok(Some(ActionData::SecureBoot(secure_boot(bmc.secure_boot)))),
        Action::SecureBootSet(s) => {
            bmc.secure_boot = s.enabled;
            Response::Ok(Some(ActionData::SecureBoot(secure_boot(bmc.secure_boot))))
        }
        Action::SecureBootResetKeys(_) => Response::Ok(None),
        Action::IdentifyGet => Response::Ok(Some(ActionData::Identify(identify(bmc)))),
        // The simulated machine draws 120 W on, 5 W off (standby).
        Action::PowerReading => {
            let watts = if bmc.power == PowerState::On { 120.0 } else { 5.0 };
            Response::Ok(Some(ActionData::PowerReading(PowerReading {
                watts,
                min_watts: Some(watts),
                max_watts: Some(watts),
                average_watts: Some(watts),
                interval_ms: Some(60_000),
                source: "sim".into(),
            })))
        }
        // The simulated BMC's clock is the host's.
        Action::BmcClockGet | Action::BmcClockSync => Response::Ok(Some(ActionData::BmcClock(BmcClock {
            time: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            drift_ms: 0,
            utc_offset: None,
            source: "sim".into(),
        }))),
        Action::PowerLimitGet => Response::Ok(Some(ActionData::PowerLimit(power_limit(bmc)))),
        Action::PowerLimitSet(set) => {
            if let Some(w) = set.watts {
                bmc.power_limit.0 = Some(w);
            }
            if let Some(a) = set.active {
                bmc.power_limit.1 = a;
            }
            Response::Ok(Some(ActionData::PowerLimit(power_limit(bmc))))
        }
        Action::Identify(set) => {
            bmc.identify = set.light;
            bmc.identify_until = set
                .seconds
                .filter(|_| set.light != IdentifyLight::Off)
                .map(|s| Instant::now() + Duration::from_secs(u64::from(s)));
            Response::Ok(Some(ActionData::Identify(identify(bmc))))
        }
        // The simulated BMC applies an update at once, without a task.
        Action::FirmwareUpdate(_) => Response::Ok(Some(ActionData::FirmwareUpdate(FirmwareUpdateResult {
            state: "Completed".into(),
            percent: Some(100),
            ..FirmwareUpdateResult::default()
        }))),
        Action::Inventory => Response::Ok(Some(ActionData::Inventory(Box::new(Inventory {
            manufacturer: Some("bmcfleet".into()),
            model: Some("bmc-sim".into()),
            serial: Some(format!("SIM-{}", host)),
            firmware_version: Some(env!("CARGO_PKG_VERSION").into()),
            power_state: Some(bmc.power),
            extra: vec![("resets".into(), bmc.resets.to_string()), ("nmis".into(), bmc.nmis.to_string())],
            ..bmc.components.clone()
        })))),
        // A capability the simulator does not model yet answers like a BMC
        // without it: adding a capability does not have to touch the
        // simulator.
        #[allow(unreachable_patterns)]
        _ => bmc_err(ErrorCode::Unsupported, format!("the simulator does not model {}", action.kind())),
    }
}

/// A small two-socket machine: what a simulated BMC's inventory reports.
fn default_components() -> Inventory {
    use bmcfleet_schema::components::{Drive, Firmware, MemoryModule, Nic, PowerSupply, Processor};
    let cpu = |id: &str| Processor {
        id: id.into(),
        model: Some("Sim CPU 16C".into()),
        manufacturer: Some("bmcfleet".into()),
        cores: Some(16),
        threads: Some(32),
        max_speed_mhz: Some(3000),
        health: Some(Health::Ok),
    };
    let dimm = |id: &str, serial: &str| MemoryModule {
        id: id.into(),
        capacity_mib: Some(16384),
        memory_type: Some("DDR5".into()),
        speed_mhz: Some(4800),
        manufacturer: Some("bmcfleet".into()),
        part_number: Some("SIM-16G".into()),
        serial: Some(serial.into()),
        health: Some(Health::Ok),
    };
    Inventory {
        processors: vec![cpu("CPU1"), cpu("CPU2")],
        memory: vec![dimm("DIMM1", "D-0001"), dimm("DIMM2", "D-0002")],
        drives: vec![Drive {
            id: "Disk.Bay.0".into(),
            model: Some("Sim SSD".into()),
            serial: Some("S-0001".into()),
            capacity_bytes: Some(960_197_124_096),
            media_type: Some("SSD".into()),
            protocol: Some("NVMe".into()),
            firmware_version: Some("1.0".into()),
            health: Some(Health::Ok),
            ..Drive::default()
        }],
        nics: vec![Nic {
            id: "NIC1".into(),
            mac_addresses: vec!["02:00:00:00:00:01".into()],
            speed_mbps: Some(25_000),
            link_status: Some("LinkUp".into()),
            ..Nic::default()
        }],
        power_supplies: vec![PowerSupply {
            id: "PSU1".into(),
            model: Some("Sim PSU".into()),
            capacity_w: Some(800),
            firmware_version: Some("1.0".into()),
            health: Some(Health::Ok),
            ..PowerSupply::default()
        }],
        firmware: vec![
            Firmware {
                id: "BMC".into(),
                name: Some("BMC firmware".into()),
                version: Some(env!("CARGO_PKG_VERSION").into()),
                updateable: Some(true),
                ..Firmware::default()
            },
            Firmware {
                id: "BIOS".into(),
                name: Some("BIOS".into()),
                version: Some("1.0.0".into()),
                updateable: Some(true),
                ..Firmware::default()
            },
        ],
        ..Inventory::default()
    }
}

fn default_bios() -> BTreeMap<String, serde_json::Value> {
    [("BootMode", serde_json::json!("Uefi")), ("ProcTurboMode", serde_json::json!("Enabled"))]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}

fn power_limit(bmc: &Bmc) -> PowerLimit {
    PowerLimit {
        watts: bmc.power_limit.0,
        active: Some(bmc.power_limit.1),
        source: "sim".into(),
        ..PowerLimit::default()
    }
}

/// The simulated identify light (a timed one goes off by itself).
fn identify(bmc: &mut Bmc) -> IdentifyState {
    if bmc.identify_until.is_some_and(|t| Instant::now() >= t) {
        bmc.identify = IdentifyLight::Off;
        bmc.identify_until = None;
    }
    IdentifyState { light: Some(bmc.identify), timed: bmc.identify_until.is_some(), source: "sim".into(), note: None }
}

fn secure_boot(enabled: bool) -> SecureBootState {
    SecureBootState {
        enabled,
        current_boot: Some(if enabled { "Enabled" } else { "Disabled" }.into()),
        mode: Some("DeployedMode".into()),
    }
}

fn info(u: &User) -> UserInfo {
    UserInfo { id: u.id.to_string(), name: u.name.clone(), role: Some(u.role), enabled: u.enabled }
}

fn user(bmc: &mut Bmc, op: &UserOp) -> Response {
    match op {
        UserOp::List => Response::Ok(Some(ActionData::Users(bmc.users.iter().map(info).collect()))),
        UserOp::Create(spec) => {
            if bmc.users.iter().any(|u| u.name == spec.name) {
                return bmc_err(ErrorCode::BmcError, format!("user `{}` already exists", spec.name));
            }
            let Some(id) = (2..=16).find(|id| !bmc.users.iter().any(|u| u.id == *id)) else {
                return bmc_err(ErrorCode::BmcError, "no free user slot");
            };
            let u = User {
                id,
                name: spec.name.clone(),
                role: spec.role,
                enabled: spec.enabled,
                password: spec.password.expose().to_owned(),
            };
            bmc.users.push(u.clone());
            Response::Ok(Some(ActionData::Users(vec![info(&u)])))
        }
        UserOp::Update(up) => {
            let Some(u) = bmc.users.iter_mut().find(|u| u.name == up.name) else {
                return bmc_err(ErrorCode::TargetNotFound, format!("no user named `{}`", up.name));
            };
            if let Some(r) = up.role {
                u.role = r;
            }
            if let Some(e) = up.enabled {
                u.enabled = e;
            }
            if let Some(p) = &up.password {
                u.password = p.expose().to_owned();
            }
            Response::Ok(Some(ActionData::Users(vec![info(u)])))
        }
        UserOp::Delete { name } => {
            let before = bmc.users.len();
            bmc.users.retain(|u| &u.name != name);
            if bmc.users.len() == before {
                return bmc_err(ErrorCode::TargetNotFound, format!("no user named `{name}`"));
            }
            Response::Ok(None)
        }
    }
}
