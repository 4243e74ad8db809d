//! [`SpecBmc`]: a deterministic, in-process BMC built from the IPMI v2.0
//! specification, implementing [`Transport`].
//!
//! It exists for the command paths OpenIPMI's `ipmi_sim` refuses or ignores,
//! so those paths are tested rather than skipped:
//! - Chassis Control 4, *pulse diagnostic interrupt* (NMI): `ipmi_sim`
//!   answers 0xCC;
//! - Warm Reset (app 0x03): `ipmi_sim` answers 0xC1 (cold reset is accepted
//!   but does nothing observable);
//! - boot flags *persistent* and *EFI* (parameter 5, data 1 bits 6 and 5):
//!   `ipmi_sim` stores only the device selector and reads the flags back as
//!   zero (valid bit included);
//! - boot device *safe mode* (selector 0011b): `ipmi_sim`'s chassis program
//!   interface has no name for it and fails the command;
//! - privilege failures (0xD4), which `ipmi_sim` only shows before Set
//!   Session Privilege Level;
//! - the identify state in Get Chassis Status (byte 3 bits 6 and 5:4):
//!   `ipmi_sim` passes Chassis Identify to its chassis program but always
//!   reports the state as not supported;
//! - DCMI power reading and power limit (group extension 0x2C): `ipmi_sim`
//!   answers 0xC1.
//!
//! State is shared through [`SpecHandle`], so a test keeps a handle, moves
//! the `SpecBmc` into an `bmcfleet_ipmi::IpmiSession`, and asserts what the
//! "machine" did. Faults can be injected per command ([`Fault`]).

use async_trait::async_trait;
use bmcfleet_ipmi::{Request, Response, Transport, TransportError, TransportErrorKind};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::time::Instant;

/// User slots (ids 1..=MAX_USERS; id 1 is the fixed anonymous user).
pub const MAX_USERS: u8 = 10;
/// The LAN channel number the responder reports.
pub const LAN_CHANNEL: u8 = 1;

/// One user slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecUser {
    pub name: String,
    /// 20-byte, zero-padded.
    pub password: [u8; 20],
    pub enabled: bool,
    /// 1 callback, 2 user, 3 operator, 4 admin, 0xF no access (0 = unset).
    pub privilege: u8,
    pub ipmi_messaging: bool,
}

impl SpecUser {
    fn empty() -> Self {
        SpecUser { name: String::new(), password: [0; 20], enabled: false, privilege: 0, ipmi_messaging: false }
    }

    /// The password up to its first NUL.
    pub fn password_str(&self) -> String {
        let end = self.password.iter().position(|b| *b == 0).unwrap_or(20);
        String::from_utf8_lossy(&self.password[..end]).into_owned()
    }
}

/// LAN configuration parameters of channel [`LAN_CHANNEL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecLan {
    pub set_in_progress: u8,
    pub ip_source: u8,
    pub address: [u8; 4],
    pub netmask: [u8; 4],
    pub gateway: [u8; 4],
}

/// An injected failure for the next matching request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this completion code instead of executing.
    CompletionCode(u8),
    /// Behave like a BMC that stopped answering (transport timeout).
    NoReply,
}

/// The chassis identify light (IPMI v2.0 §28.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecIdentify {
    Off,
    /// Timed: on until this instant (the interval of Chassis Identify).
    Until(Instant),
    /// Force Identify On: on until turned off.
    Forced,
}

/// DCMI 1.5 power management (group extension 0x2C, id 0xDC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecDcmi {
    /// Get Power Reading: current, min, max, average watts.
    pub watts: [u16; 4],
    /// The statistics reporting period, milliseconds.
    pub period_ms: u32,
    /// Power reading state bit 6 (measurement active).
    pub measuring: bool,
    /// Exception action (0x00 none, 0x01 hard off + log, 0x11 log).
    pub exception: u8,
    pub limit_watts: u16,
    pub correction_ms: u32,
    pub sampling_s: u16,
    pub limit_active: bool,
    /// Set Power Limit answers 0x84 outside this range (inclusive).
    pub limit_range: (u16, u16),
}

impl Default for SpecDcmi {
    fn default() -> Self {
        SpecDcmi {
            watts: [300, 120, 450, 280],
            period_ms: 60_000,
            measuring: true,
            exception: 0x00,
            limit_watts: 0,
            correction_ms: 1000,
            sampling_s: 1,
            limit_active: false,
            limit_range: (100, 1000),
        }
    }
}

/// Everything the responder knows; public so tests can assert on it.
#[derive(Clone, Debug)]
pub struct SpecState {
    pub power_on: bool,
    /// Boot option parameter 5, data bytes 1–5.
    pub boot_flags: [u8; 5],
    /// Boot option parameter 3 as last set (bit 3: keep the flags valid
    /// past the 60-second timeout).
    pub boot_valid_clearing: u8,
    /// Index 0 is user id 1.
    pub users: Vec<SpecUser>,
    pub lan: SpecLan,
    /// LAN parameters this BMC answers with 0x80 (parameter not supported).
    pub lan_unsupported: Vec<u8>,
    /// Privilege of the current session. Starts at Administrator: the
    /// responder stands in for a session whose handshake (and Set Session
    /// Privilege Level) a real transport has already done. Lower it to test
    /// 0xD4 handling.
    pub session_privilege: u8,
    /// Highest privilege the session may raise itself to.
    pub privilege_limit: u8,
    pub fru: Vec<u8>,
    /// SEL records (16 bytes each, record ids set from their position + 1).
    pub sel: Vec<[u8; 16]>,
    /// How many Clear SEL status requests answer "erasure in progress"
    /// before the erase completes (IPMI v2.0 §31.9).
    pub sel_erase_polls: u32,
    /// The current SEL reservation (Reserve SEL; cancelled by a new one).
    pub sel_reservation: u16,
    pub power_cycles: u32,
    pub hard_resets: u32,
    pub soft_offs: u32,
    pub nmis: u32,
    pub cold_resets: u32,
    pub warm_resets: u32,
    pub identify: SpecIdentify,
    /// Whether Get Chassis Status reports the identify state (byte 3 bit 6
    /// and bits 5:4); a BMC may leave it out (the spec makes it optional).
    pub identify_state_reported: bool,
    /// Whether Chassis Identify accepts byte 2 bit 0, Force Identify On
    /// (optional in the spec; 0xCC where not).
    pub identify_force_supported: bool,
    /// The SEL clock: seconds added to the host's clock (Get/Set SEL Time).
    pub sel_clock_offset: i64,
    /// DCMI power management; `None`: a BMC without DCMI (0xC1).
    pub dcmi: Option<SpecDcmi>,
    /// Every request's (netfn, cmd), in order.
    pub calls: Vec<(u8, u8)>,
    /// Whether `close()` was called.
    pub closed: bool,
    faults: VecDeque<(u8, u8, Fault)>,
}

/// The FRU the responder serves: board "SPEC-BOARD" / serial "SB-1",
/// product "SPEC-BMC" / serial "SP-1", manufacturer "spec".
fn default_fru() -> Vec<u8> {
    fn area(fields: &[&str], date: bool) -> Vec<u8> {
        let mut a = vec![0x01, 0x00, 0x00];
        if date {
            a.extend_from_slice(&[0, 0, 0]);
        }
        for f in fields {
            a.push(0xC0 | f.len() as u8);
            a.extend_from_slice(f.as_bytes());
        }
        a.push(0xC1);
        while (a.len() + 1) % 8 != 0 {
            a.push(0);
        }
        a[1] = ((a.len() + 1) / 8) as u8;
        let sum = a.iter().fold(0u8, |s, b| s.wrapping_add(*b));
        a.push(sum.wrapping_neg());
        a
    }
    let board = area(&["spec", "SPEC-BOARD", "SB-1", "SB-PN"], true);
    let product = area(&["spec", "SPEC-BMC", "SPEC-MODEL", "2.0", "SP-1", "TAG-7"], false);
    let mut header = vec![0x01, 0, 0, 1, 1 + (board.len() / 8) as u8, 0, 0];
    let sum = header.iter().fold(0u8, |s, b| s.wrapping_add(*b));
    header.push(sum.wrapping_neg());
    [header, board, product].concat()
}

impl Default for SpecState {
    fn default() -> Self {
        let mut users = vec![SpecUser::empty(); usize::from(MAX_USERS)];
        let mut password = [0u8; 20];
        password[..8].copy_from_slice(b"password");
        users[1] = SpecUser { name: "admin".into(), password, enabled: true, privilege: 4, ipmi_messaging: true };
        SpecState {
            power_on: false,
            boot_flags: [0; 5],
            boot_valid_clearing: 0,
            users,
            lan: SpecLan {
                set_in_progress: 0,
                ip_source: 0x01,
                address: [192, 0, 2, 10],
                netmask: [255, 255, 255, 0],
                gateway: [192, 0, 2, 1],
            },
            lan_unsupported: Vec::new(),
            session_privilege: 4,
            privilege_limit: 4,
            fru: default_fru(),
            sel: Vec::new(),
            sel_erase_polls: 0,
            sel_reservation: 0,
            power_cycles: 0,
            hard_resets: 0,
            soft_offs: 0,
            nmis: 0,
            cold_resets: 0,
            warm_resets: 0,
            identify: SpecIdentify::Off,
            identify_state_reported: true,
            identify_force_supported: true,
            sel_clock_offset: 0,
            dcmi: Some(SpecDcmi::default()),
            calls: Vec::new(),
            closed: false,
            faults: VecDeque::new(),
        }
    }
}

impl SpecState {
    /// Removes and returns the first fault injected (with
    /// [`SpecHandle::inject`]) for this netfn/cmd.
    pub(crate) fn take_fault(&mut self, netfn: u8, cmd: u8) -> Option<Fault> {
        let i = self.faults.iter().position(|(n, c, _)| *n == netfn && *c == cmd)?;
        self.faults.remove(i).map(|(_, _, f)| f)
    }

    /// The user named `name`, with its id.
    pub fn user(&self, name: &str) -> Option<(u8, &SpecUser)> {
        self.users.iter().enumerate().find(|(_, u)| u.name == name).map(|(i, u)| (i as u8 + 1, u))
    }
}

/// Shared access to a [`SpecBmc`]'s state.
#[derive(Clone, Debug, Default)]
pub struct SpecHandle(Arc<Mutex<SpecState>>);

impl SpecHandle {
    fn lock(&self) -> MutexGuard<'_, SpecState> {
        // A panicking test thread must not hide the state from the others.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A copy of the current state.
    pub fn snapshot(&self) -> SpecState {
        self.lock().clone()
    }

    /// Changes the state (set up a scenario).
    pub fn update<R>(&self, f: impl FnOnce(&mut SpecState) -> R) -> R {
        f(&mut self.lock())
    }

    /// Fails the next request with this netfn/cmd.
    pub fn inject(&self, netfn: u8, cmd: u8, fault: Fault) {
        self.lock().faults.push_back((netfn, cmd, fault));
    }
}

/// The in-process BMC; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct SpecBmc {
    state: SpecHandle,
}

impl SpecBmc {
    /// A BMC in the default state: power off, no boot override, user 2
    /// `admin`/`password` (Administrator, enabled), static LAN 192.0.2.10/24.
    pub fn new() -> Self {
        SpecBmc::default()
    }

    pub fn handle(&self) -> SpecHandle {
        self.state.clone()
    }
}

#[async_trait]
impl Transport for SpecBmc {
    async fn call(&mut self, deadline: Instant, request: &Request) -> Result<Response, TransportError> {
        if Instant::now() >= deadline {
            return Err(TransportError::new(TransportErrorKind::DeadlineExceeded, "deadline passed"));
        }
        let mut state = self.state.lock();
        if state.closed {
            return Err(TransportError::new(TransportErrorKind::Closed, "session closed"));
        }
        state.calls.push((request.netfn, request.cmd));
        let fault = state.faults.iter().position(|(n, c, _)| *n == request.netfn && *c == request.cmd);
        if let Some(fault) = fault.and_then(|i| state.faults.remove(i)).map(|(_, _, f)| f) {
            return match fault {
                Fault::CompletionCode(cc) => Ok(Response { cc, data: vec![] }),
                Fault::NoReply => Err(TransportError::new(TransportErrorKind::Timeout, "no reply (injected)")),
            };
        }
        let (cc, data) = handle(&mut state, request.netfn, request.cmd, &request.data);
        Ok(Response { cc, data })
    }

    async fn close(&mut self) {
        self.state.lock().closed = true;
    }
}

const OK: u8 = 0x00;
const INVALID_CMD: u8 = 0xC1;
const BAD_LENGTH: u8 = 0xC7;
const OUT_OF_RANGE: u8 = 0xC9;
const NOT_PRESENT: u8 = 0xCB;
const INVALID_FIELD: u8 = 0xCC;
const NO_PRIVILEGE: u8 = 0xD4;
const NOT_IN_STATE: u8 = 0xD5;
const PARAM_UNSUPPORTED: u8 = 0x80;

fn reply(cc: u8) -> (u8, Vec<u8>) {
    (cc, vec![])
}

/// Minimum session privilege per command (IPMI v2.0 appendix G).
fn required_privilege(netfn: u8, cmd: u8) -> u8 {
    match (netfn, cmd) {
        (0x00, 0x02) | (0x00, 0x04) | (0x00, 0x08) => 3, // chassis control, identify, set boot options: operator
        (0x2C, 0x04) | (0x2C, 0x05) => 3,                // DCMI set / activate power limit: operator
        (0x06, 0x02) | (0x06, 0x03) => 4,                // resets: admin
        (0x06, 0x43) | (0x06, 0x45) | (0x06, 0x47) => 4, // user changes: admin
        (0x06, 0x44) | (0x06, 0x46) => 3,                // user reads: operator
        (0x0C, 0x01) => 4,                               // set LAN: admin
        (0x0C, 0x02) => 3,                               // get LAN: operator
        (0x0A, 0x47) | (0x0A, 0x49) => 3,                // clear SEL: operator
        _ => 1,
    }
}

/// Executes one request against the state: the command semantics shared by
/// [`SpecBmc`] and the wire-level responder (`super::lan`), which applies the
/// calling session's privilege to `session_privilege`/`privilege_limit`
/// around each call.
pub(crate) fn handle(s: &mut SpecState, netfn: u8, cmd: u8, d: &[u8]) -> (u8, Vec<u8>) {
    if s.session_privilege < required_privilege(netfn, cmd) {
        return reply(NO_PRIVILEGE);
    }
    match (netfn, cmd) {
        (0x06, 0x01) => (
            OK,
            // device 0x20, rev 1 (no SDRs), fw 2.45, IPMI 2.0, chassis+FRU+SEL+SDR+sensor,
            // manufacturer 0x001234, product 0x0001, aux 0.
            vec![0x20, 0x01, 0x02, 0x45, 0x02, 0x8F, 0x34, 0x12, 0x00, 0x01, 0x00, 0, 0, 0, 0],
        ),
        (0x06, 0x02) => {
            s.cold_resets += 1;
            reply(OK)
        }
        (0x06, 0x03) => {
            s.warm_resets += 1;
            reply(OK)
        }
        (0x06, 0x3B) => {
            let Some(&level) = d.first() else { return reply(BAD_LENGTH) };
            let level = level & 0x0F;
            if level == 0 {
                return (OK, vec![s.session_privilege]);
            }
            if !(1..=5).contains(&level) {
                return reply(INVALID_FIELD);
            }
            if level > s.privilege_limit {
                return reply(0x81);
            }
            s.session_privilege = level;
            (OK, vec![level])
        }
        (0x06, 0x42) => match d.first().map(|c| c & 0x0F) {
            None => reply(BAD_LENGTH),
            Some(0x0E) | Some(LAN_CHANNEL) => (OK, vec![LAN_CHANNEL, 0x04, 0x01, 0x80, 0xF2, 0x1B, 0x00, 0, 0]),
            Some(_) => reply(INVALID_FIELD),
        },
        (0x06, 0x43) => set_user_access(s, d),
        (0x06, 0x44) => get_user_access(s, d),
        (0x06, 0x45) => {
            if d.len() != 17 {
                return reply(BAD_LENGTH);
            }
            let id = d[0] & 0x3F;
            if !(2..=MAX_USERS).contains(&id) {
                return reply(INVALID_FIELD);
            }
            let end = d[1..].iter().position(|b| *b == 0).unwrap_or(16);
            s.users[usize::from(id) - 1].name = String::from_utf8_lossy(&d[1..1 + end]).into_owned();
            reply(OK)
        }
        (0x06, 0x46) => {
            let Some(id) = d.first().map(|b| b & 0x3F) else { return reply(BAD_LENGTH) };
            if !(2..=MAX_USERS).contains(&id) {
                return reply(INVALID_FIELD);
            }
            let mut name = s.users[usize::from(id) - 1].name.clone().into_bytes();
            name.resize(16, 0);
            (OK, name)
        }
        (0x06, 0x47) => set_user_password(s, d),
        (0x00, 0x01) => {
            // current power state: bit 0 on, bits 6:5 restore policy "previous";
            // misc state: bit 6 identify state reported, bits 5:4 the state.
            (OK, vec![u8::from(s.power_on) | (0x01 << 5), 0x00, identify_bits(s), 0x00])
        }
        (0x00, 0x02) => chassis_control(s, d),
        (0x00, 0x04) => chassis_identify(s, d),
        (0x00, 0x08) => {
            let Some(param) = d.first().map(|p| p & 0x7F) else { return reply(BAD_LENGTH) };
            match param {
                5 if d.len() == 6 => {
                    let selector = (d[2] >> 2) & 0x0F;
                    if !matches!(selector, 0x0..=0x6 | 0x7..=0x9 | 0xB | 0xF) {
                        return reply(INVALID_FIELD);
                    }
                    s.boot_flags.copy_from_slice(&d[1..6]);
                    reply(OK)
                }
                5 => reply(BAD_LENGTH),
                3 if d.len() == 2 => {
                    s.boot_valid_clearing = d[1];
                    reply(OK)
                }
                3 => reply(BAD_LENGTH),
                0 | 4 => reply(OK),
                _ => reply(PARAM_UNSUPPORTED),
            }
        }
        (0x00, 0x09) => {
            if d.len() != 3 {
                return reply(BAD_LENGTH);
            }
            match d[0] & 0x7F {
                5 => {
                    let mut out = vec![0x01, 0x05];
                    out.extend_from_slice(&s.boot_flags);
                    (OK, out)
                }
                _ => reply(PARAM_UNSUPPORTED),
            }
        }
        // 31.2 Get SEL Info: version 0x51, entries, free space, timestamps, operations.
        (0x0A, 0x40) => {
            let [lo, hi] = (s.sel.len() as u16).to_le_bytes();
            (OK, vec![0x51, lo, hi, 0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0x02])
        }
        // 31.4 Reserve SEL.
        (0x0A, 0x42) => {
            s.sel_reservation = s.sel_reservation.wrapping_add(1).max(1);
            (OK, s.sel_reservation.to_le_bytes().to_vec())
        }
        // 31.5 Get SEL Entry: whole records only (offset 0, 0xFF bytes); 0x0000 is the first, 0xFFFF the last.
        (0x0A, 0x43) => {
            if d.len() != 6 {
                return reply(BAD_LENGTH);
            }
            let id = u16::from_le_bytes([d[2], d[3]]);
            let index = match id {
                0x0000 => 0,
                0xFFFF => s.sel.len().wrapping_sub(1),
                n => usize::from(n) - 1,
            };
            let Some(record) = s.sel.get(index) else { return reply(NOT_PRESENT) };
            let next: u16 = if index + 1 >= s.sel.len() { 0xFFFF } else { index as u16 + 2 };
            let mut out = next.to_le_bytes().to_vec();
            let mut r = *record;
            r[..2].copy_from_slice(&(index as u16 + 1).to_le_bytes());
            out.extend_from_slice(&r);
            (OK, out)
        }
        // 31.9 Clear SEL: reservation, 'CLR', 0xAA initiate / 0x00 status.
        (0x0A, 0x47) => {
            if d.len() != 6 || &d[2..5] != b"CLR" {
                return reply(INVALID_FIELD);
            }
            if u16::from_le_bytes([d[0], d[1]]) != s.sel_reservation || s.sel_reservation == 0 {
                return reply(0xC5); // reservation cancelled or invalid
            }
            match d[5] {
                0xAA => s.sel.clear(),
                0x00 => {}
                _ => return reply(INVALID_FIELD),
            }
            if s.sel_erase_polls > 0 {
                s.sel_erase_polls -= 1;
                (OK, vec![0x00]) // erasure in progress
            } else {
                (OK, vec![0x01]) // erase completed
            }
        }
        // 31.10 / 31.11 Get / Set SEL Time: seconds since 1970, little-endian.
        (0x0A, 0x48) => (OK, ((host_secs() + s.sel_clock_offset) as u32).to_le_bytes().to_vec()),
        (0x0A, 0x49) => match <[u8; 4]>::try_from(d) {
            Ok(b) => {
                s.sel_clock_offset = i64::from(u32::from_le_bytes(b)) - host_secs();
                reply(OK)
            }
            Err(_) => reply(BAD_LENGTH),
        },
        (0x0A, 0x10) => match d.first() {
            None => reply(BAD_LENGTH),
            Some(0) => {
                let [lo, hi] = (s.fru.len() as u16).to_le_bytes();
                (OK, vec![lo, hi, 0x00])
            }
            Some(_) => reply(NOT_PRESENT),
        },
        (0x0A, 0x11) => {
            if d.len() != 4 {
                return reply(BAD_LENGTH);
            }
            if d[0] != 0 {
                return reply(NOT_PRESENT);
            }
            let offset = usize::from(u16::from_le_bytes([d[1], d[2]]));
            let count = usize::from(d[3]);
            if count > 32 {
                return reply(0xCA);
            }
            if offset >= s.fru.len() {
                return reply(OUT_OF_RANGE);
            }
            let end = (offset + count).min(s.fru.len());
            let mut out = vec![(end - offset) as u8];
            out.extend_from_slice(&s.fru[offset..end]);
            (OK, out)
        }
        (0x0C, 0x01) => set_lan(s, d),
        (0x0C, 0x02) => get_lan(s, d),
        (0x2C, cmd) if d.first() == Some(&0xDC) => match s.dcmi.as_mut() {
            Some(dcmi) => dcmi_command(dcmi, cmd, d),
            None => reply(INVALID_CMD),
        },
        _ => reply(INVALID_CMD),
    }
}

/// Get Chassis Status byte 3's identify bits (§28.2): bit 6 "identify
/// state info supported", bits 5:4 off (00), temporary on (01), indefinite on (10).
fn identify_bits(s: &mut SpecState) -> u8 {
    if let SpecIdentify::Until(t) = s.identify {
        if Instant::now() >= t {
            s.identify = SpecIdentify::Off;
        }
    }
    if !s.identify_state_reported {
        return 0;
    }
    0x40 | match s.identify {
        SpecIdentify::Off => 0x00,
        SpecIdentify::Until(_) => 0x10,
        SpecIdentify::Forced => 0x20,
    }
}

/// 28.5 Chassis Identify: byte 1 the interval in seconds (0: off; absent:
/// 15 s), byte 2 bit 0 Force Identify On (which wins over the interval).
fn chassis_identify(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() > 2 {
        return reply(BAD_LENGTH);
    }
    let force = d.get(1).is_some_and(|b| b & 0x01 != 0);
    if d.get(1).is_some_and(|b| b & 0xFE != 0) {
        return reply(INVALID_FIELD);
    }
    if force {
        if !s.identify_force_supported {
            return reply(INVALID_FIELD);
        }
        s.identify = SpecIdentify::Forced;
        return reply(OK);
    }
    s.identify = match d.first().copied().unwrap_or(15) {
        0 => SpecIdentify::Off,
        secs => SpecIdentify::Until(Instant::now() + std::time::Duration::from_secs(u64::from(secs))),
    };
    reply(OK)
}

fn host_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// DCMI 1.5 §6.6: Get Power Reading (0x02, mode 1), Get / Set Power Limit
/// (0x03 / 0x04), Activate/Deactivate Power Limit (0x05).
fn dcmi_command(dcmi: &mut SpecDcmi, cmd: u8, d: &[u8]) -> (u8, Vec<u8>) {
    match cmd {
        0x02 => {
            if d.len() != 4 {
                return reply(BAD_LENGTH);
            }
            if d[1] != 0x01 {
                return reply(INVALID_FIELD); // only system power statistics
            }
            let mut out = vec![0xDC];
            for w in dcmi.watts {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&[0, 0, 0, 0]); // timestamp
            out.extend_from_slice(&dcmi.period_ms.to_le_bytes());
            out.push(if dcmi.measuring { 0x40 } else { 0x00 });
            (OK, out)
        }
        0x03 => {
            if d.len() != 3 {
                return reply(BAD_LENGTH);
            }
            let mut out = vec![0xDC, 0, 0, dcmi.exception];
            out.extend_from_slice(&dcmi.limit_watts.to_le_bytes());
            out.extend_from_slice(&dcmi.correction_ms.to_le_bytes());
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(&dcmi.sampling_s.to_le_bytes());
            // 0x80: no active set power limit (the data still says what is set).
            (if dcmi.limit_active { OK } else { 0x80 }, out)
        }
        0x04 => {
            if d.len() != 15 {
                return reply(BAD_LENGTH);
            }
            let watts = u16::from_le_bytes([d[5], d[6]]);
            if watts < dcmi.limit_range.0 || watts > dcmi.limit_range.1 {
                return reply(0x84);
            }
            if !matches!(d[4], 0x00 | 0x01 | 0x11) {
                return reply(INVALID_FIELD);
            }
            dcmi.exception = d[4];
            dcmi.limit_watts = watts;
            dcmi.correction_ms = u32::from_le_bytes([d[7], d[8], d[9], d[10]]);
            dcmi.sampling_s = u16::from_le_bytes([d[13], d[14]]);
            (OK, vec![0xDC])
        }
        0x05 => {
            if d.len() != 4 {
                return reply(BAD_LENGTH);
            }
            match d[1] {
                0 | 1 => dcmi.limit_active = d[1] == 1,
                _ => return reply(INVALID_FIELD),
            }
            (OK, vec![0xDC])
        }
        _ => reply(INVALID_CMD),
    }
}

fn chassis_control(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() != 1 {
        return reply(BAD_LENGTH);
    }
    match d[0] & 0x0F {
        0 => s.power_on = false,
        1 => s.power_on = true,
        // Cycle, reset and NMI need a running system (28.3: 0xD5 otherwise).
        2..=4 if !s.power_on => return reply(NOT_IN_STATE),
        2 => s.power_cycles += 1,
        3 => s.hard_resets += 1,
        4 => s.nmis += 1,
        5 => {
            s.soft_offs += 1;
            s.power_on = false;
        }
        _ => return reply(INVALID_FIELD),
    }
    reply(OK)
}

fn user_slot(s: &mut SpecState, id: u8) -> Option<&mut SpecUser> {
    (1..=MAX_USERS).contains(&id).then(|| &mut s.users[usize::from(id) - 1])
}

fn set_user_access(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() < 3 {
        return reply(BAD_LENGTH);
    }
    if d[0] & 0x0F != LAN_CHANNEL && d[0] & 0x0F != 0x0E {
        return reply(INVALID_FIELD);
    }
    let privilege = d[2] & 0x0F;
    if !matches!(privilege, 1..=4 | 0xF) {
        return reply(INVALID_FIELD);
    }
    let Some(user) = user_slot(s, d[1] & 0x3F) else { return reply(INVALID_FIELD) };
    if d[0] & 0x80 != 0 {
        user.ipmi_messaging = d[0] & 0x10 != 0;
    }
    user.privilege = privilege;
    reply(OK)
}

fn get_user_access(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() != 2 {
        return reply(BAD_LENGTH);
    }
    let enabled_count = s.users.iter().filter(|u| u.enabled).count() as u8;
    let Some(user) = user_slot(s, d[1] & 0x3F).cloned() else { return reply(INVALID_FIELD) };
    let status = if user.enabled { 0b01 } else { 0b10 };
    let access = (u8::from(user.ipmi_messaging) << 4) | user.privilege;
    (OK, vec![MAX_USERS, (status << 6) | enabled_count, 0x01, access])
}

fn set_user_password(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() < 2 {
        return reply(BAD_LENGTH);
    }
    let wide = d[0] & 0x80 != 0;
    let Some(user) = user_slot(s, d[0] & 0x3F) else { return reply(INVALID_FIELD) };
    match d[1] & 0x03 {
        0 => user.enabled = false,
        1 => user.enabled = true,
        op => {
            let len = if wide { 20 } else { 16 };
            if d.len() != 2 + len {
                return reply(BAD_LENGTH);
            }
            let mut pw = [0u8; 20];
            pw[..len].copy_from_slice(&d[2..]);
            if op == 2 {
                user.password = pw;
            } else if user.password != pw {
                return reply(0x80); // password test failed
            }
        }
    }
    reply(OK)
}

fn set_lan(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() < 3 {
        return reply(BAD_LENGTH);
    }
    if d[0] & 0x0F != LAN_CHANNEL {
        return reply(INVALID_FIELD);
    }
    if s.lan_unsupported.contains(&d[1]) {
        return reply(PARAM_UNSUPPORTED);
    }
    let value = &d[2..];
    let quad = |v: &[u8]| -> Option<[u8; 4]> { v.try_into().ok() };
    match d[1] {
        0 if value.len() == 1 => {
            if value[0] & 0x03 == 0x01 && s.lan.set_in_progress == 0x01 {
                return reply(0x81); // set in progress by another party
            }
            s.lan.set_in_progress = value[0] & 0x03;
        }
        4 if value.len() == 1 => {
            if value[0] & 0x0F > 4 {
                return reply(INVALID_FIELD);
            }
            s.lan.ip_source = value[0] & 0x0F;
        }
        3 => match quad(value) {
            Some(q) => s.lan.address = q,
            None => return reply(BAD_LENGTH),
        },
        6 => match quad(value) {
            Some(q) => s.lan.netmask = q,
            None => return reply(BAD_LENGTH),
        },
        12 => match quad(value) {
            Some(q) => s.lan.gateway = q,
            None => return reply(BAD_LENGTH),
        },
        0 | 4 => return reply(BAD_LENGTH),
        _ => return reply(PARAM_UNSUPPORTED),
    }
    reply(OK)
}

fn get_lan(s: &mut SpecState, d: &[u8]) -> (u8, Vec<u8>) {
    if d.len() != 4 {
        return reply(BAD_LENGTH);
    }
    if d[0] & 0x0F != LAN_CHANNEL {
        return reply(INVALID_FIELD);
    }
    let value: Vec<u8> = match d[1] {
        0 => vec![s.lan.set_in_progress],
        3 => s.lan.address.to_vec(),
        4 => vec![s.lan.ip_source],
        6 => s.lan.netmask.to_vec(),
        12 => s.lan.gateway.to_vec(),
        _ => return reply(PARAM_UNSUPPORTED),
    };
    let mut out = vec![0x11];
    out.extend(value);
    (OK, out)
}
