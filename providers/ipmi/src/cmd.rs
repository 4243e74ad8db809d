//! The IPMI commands bmcfleet sends, and pure encoders/decoders for their
//! data (no I/O here: every function is unit-tested against spec bytes).
//!
//! Section numbers refer to the IPMI v2.0 rev 1.1 specification.

use crate::error::{CommandId, SpecificCode};
use crate::transport::Retry;
use crate::Privilege;
use bmcfleet_provider::ProviderError;
use bmcfleet_schema::{BootDevice, BootDeviceRequest, ErrorCode, PowerOp, UserRole};
use std::net::Ipv4Addr;

/// A command: its identity, whether a retransmit is safe, and its
/// command-specific completion codes.
#[derive(Clone, Copy, Debug)]
pub struct Command {
    pub id: CommandId,
    pub retry: Retry,
    pub specific: &'static [SpecificCode],
}

const fn command(name: &'static str, netfn: u8, cmd: u8, retry: Retry) -> Command {
    Command { id: CommandId { name, netfn, cmd }, retry, specific: &[] }
}

impl Command {
    /// The same command with the completion codes its section defines.
    const fn with(self, specific: &'static [SpecificCode]) -> Command {
        Command { specific, ..self }
    }
}

/// A command-specific completion code: what it means and the wire code.
const fn cc(cc: u8, code: ErrorCode, meaning: &'static str) -> SpecificCode {
    SpecificCode { cc, code, meaning }
}

pub const NETFN_CHASSIS: u8 = 0x00;
pub const NETFN_SENSOR: u8 = 0x04;
pub const NETFN_APP: u8 = 0x06;
pub const NETFN_STORAGE: u8 = 0x0A;
pub const NETFN_TRANSPORT: u8 = 0x0C;
/// Group extension (DCMI: first data byte 0xDC).
pub const NETFN_GROUP: u8 = 0x2C;
/// The DCMI group extension id, first byte of every DCMI request and response.
pub const DCMI: u8 = 0xDC;

/// The lowest session privilege a command needs (IPMI v2.0 appendix G);
/// `None` for commands this table does not know (raw passthrough: the BMC
/// decides, and its 0xD4 is reported as `permission_denied`).
pub fn required_privilege(netfn: u8, cmd: u8) -> Option<Privilege> {
    use Privilege::{Administrator as A, Operator as O, User as U};
    Some(match (netfn, cmd) {
        (NETFN_APP, 0x01) | (NETFN_APP, 0x42) => U,
        (NETFN_APP, 0x02) | (NETFN_APP, 0x03) => A,
        (NETFN_APP, 0x43) | (NETFN_APP, 0x45) | (NETFN_APP, 0x47) => A,
        (NETFN_APP, 0x44) | (NETFN_APP, 0x46) => O,
        (NETFN_CHASSIS, 0x01) => U,
        (NETFN_CHASSIS, 0x02) | (NETFN_CHASSIS, 0x04) | (NETFN_CHASSIS, 0x08) | (NETFN_CHASSIS, 0x09) => O,
        (NETFN_STORAGE, 0x10) | (NETFN_STORAGE, 0x11) => U,
        (NETFN_STORAGE, 0x40) | (NETFN_STORAGE, 0x42) | (NETFN_STORAGE, 0x43) => U,
        (NETFN_STORAGE, 0x47) | (NETFN_STORAGE, 0x49) => O,
        (NETFN_STORAGE, 0x48) => U,
        (NETFN_STORAGE, 0x20) | (NETFN_STORAGE, 0x22) | (NETFN_STORAGE, 0x23) => U,
        (NETFN_SENSOR, 0x2D) => U,
        (NETFN_TRANSPORT, 0x01) => A,
        // DCMI 1.5: Get Power Reading / Get Power Limit at user, Set / Activate at operator.
        (NETFN_GROUP, 0x02) | (NETFN_GROUP, 0x03) => U,
        (NETFN_GROUP, 0x04) | (NETFN_GROUP, 0x05) => O,
        (NETFN_TRANSPORT, 0x02) => O,
        _ => return None,
    })
}

/// Whether a request only reads (plan mode sends it and lists it as a
/// read; everything else is state-changing: recorded, not sent). An
/// explicit table of the spec's Get/Read commands (IPMI v2.0 appendix G);
/// any command it does not name, an OEM one or an unknown raw request
/// included, counts as changing. The Reserve commands hand out a
/// reservation id (needed to read the SEL or SDRs page by page) and change
/// nothing a machine keeps.
pub fn reads_only(netfn: u8, cmd: u8) -> bool {
    matches!(
        (netfn, cmd),
        // Chassis: Get Chassis Capabilities, Status, Restart Cause, Boot Options, POH Counter.
        (NETFN_CHASSIS, 0x00 | 0x01 | 0x07 | 0x09 | 0x0F)
        // Sensor: Get Device SDR Info, Device SDR, Sensor Hysteresis, Thresholds,
        // Event Enable, Reading Factors, Reading, Type.
        | (NETFN_SENSOR, 0x20 | 0x21 | 0x25 | 0x27 | 0x29 | 0x23 | 0x2D | 0x2F)
        // App: Get Device ID, Self Test Results, ACPI Power State, Device GUID,
        // Watchdog Timer, BMC Global Enables, System GUID, Channel Auth
        // Capabilities, Session Info, Channel Access, Channel Info, User
        // Access, User Name, Channel Cipher Suites.
        | (NETFN_APP, 0x01 | 0x04 | 0x07 | 0x08 | 0x25 | 0x2F | 0x37 | 0x38 | 0x3D | 0x41 | 0x42 | 0x44 | 0x46 | 0x54)
        // Storage: FRU Inventory Area Info, Read FRU Data, SDR Repository
        // Info, Reserve SDR, Get SDR, SEL Info, Reserve SEL, Get SEL Entry, SEL Time.
        | (NETFN_STORAGE, 0x10 | 0x11 | 0x20 | 0x22 | 0x23 | 0x40 | 0x42 | 0x43 | 0x48)
        // Transport: Get LAN Configuration Parameters, SOL Configuration Parameters.
        | (NETFN_TRANSPORT, 0x02 | 0x22)
        // Group extension: DCMI Get DCMI Capability Info, Get Power Reading,
        // Get Power Limit (the same codes in PICMG's group are Get PICMG
        // Properties, Get Address Info, Get Shelf Address Info: reads too).
        | (NETFN_GROUP, 0x01..=0x03)
    )
}

/// Whether a request's data starts with a reservation id (two bytes the
/// BMC hands out per Reserve call: Get SDR, Get SEL Entry, Clear SEL): a
/// plan shows them as `xxxx`, so that the same plan reads the same on
/// every machine.
pub fn starts_with_reservation(netfn: u8, cmd: u8) -> bool {
    matches!((netfn, cmd), (NETFN_STORAGE, 0x23 | 0x43 | 0x47))
}

/// Whether a request's data is the worker's clock when it is sent (Set SEL
/// Time): plan mode shows it as `x` nibbles, since a run sends a later time.
pub fn is_clock(netfn: u8, cmd: u8) -> bool {
    (netfn, cmd) == (SET_SEL_TIME.id.netfn, SET_SEL_TIME.id.cmd)
}

/// Whether a request's data is secret (plan mode shows it `[redacted]`):
/// Set User Password and Set Channel Security Keys.
pub fn secret_data(netfn: u8, cmd: u8) -> bool {
    matches!((netfn, cmd), (NETFN_APP, 0x47 | 0x56))
}

// --- App (netfn 0x06) ---
/// 20.1 Get Device ID.
pub const GET_DEVICE_ID: Command = command("Get Device ID", NETFN_APP, 0x01, Retry::Safe);
/// 20.2 Cold Reset.
pub const COLD_RESET: Command = command("Cold Reset", NETFN_APP, 0x02, Retry::Once);
/// 20.3 Warm Reset.
pub const WARM_RESET: Command = command("Warm Reset", NETFN_APP, 0x03, Retry::Once);
/// 22.24 Get Channel Info.
pub const GET_CHANNEL_INFO: Command = command("Get Channel Info", NETFN_APP, 0x42, Retry::Safe);
/// 22.26 Set User Access.
pub const SET_USER_ACCESS: Command = command("Set User Access", NETFN_APP, 0x43, Retry::Safe);
/// 22.27 Get User Access.
pub const GET_USER_ACCESS: Command = command("Get User Access", NETFN_APP, 0x44, Retry::Safe);
/// 22.28 Set User Name.
pub const SET_USER_NAME: Command = command("Set User Name", NETFN_APP, 0x45, Retry::Safe);
/// 22.29 Get User Name.
pub const GET_USER_NAME: Command = command("Get User Name", NETFN_APP, 0x46, Retry::Safe);
/// 22.30 Set User Password (enable, disable, set password).
pub const SET_USER_PASSWORD: Command = command("Set User Password", NETFN_APP, 0x47, Retry::Safe).with(&[
    cc(0x80, ErrorCode::BmcError, "password test failed"),
    cc(0x81, ErrorCode::InvalidField, "password is longer than the BMC accepts"),
]);

// --- Chassis (netfn 0x00) ---
/// 28.2 Get Chassis Status.
pub const GET_CHASSIS_STATUS: Command = command("Get Chassis Status", NETFN_CHASSIS, 0x01, Retry::Safe);
/// 28.3 Chassis Control.
/// Its only data byte is the function, so "invalid data field" means the
/// BMC does not implement that function (e.g. `ipmi_sim` and NMI).
pub const CHASSIS_CONTROL: Command = command("Chassis Control", NETFN_CHASSIS, 0x02, Retry::Once).with(&[cc(
    0xCC,
    ErrorCode::Unsupported,
    "invalid data field: the BMC does not implement this chassis control function",
)]);
/// 28.12 Set System Boot Options.
pub const SET_BOOT_OPTIONS: Command = command("Set System Boot Options", NETFN_CHASSIS, 0x08, Retry::Safe).with(&[
    cc(0x80, ErrorCode::Unsupported, "boot option parameter not supported"),
    cc(0x81, ErrorCode::BmcError, "set already in progress by another party"),
    cc(0x82, ErrorCode::Unsupported, "attempt to write a read-only parameter"),
]);
/// 28.13 Get System Boot Options.
pub const GET_BOOT_OPTIONS: Command = command("Get System Boot Options", NETFN_CHASSIS, 0x09, Retry::Safe).with(&[cc(
    0x80,
    ErrorCode::Unsupported,
    "boot option parameter not supported",
)]);

// --- Storage (netfn 0x0A) ---
/// 34.1 Get FRU Inventory Area Info.
pub const GET_FRU_INFO: Command = command("Get FRU Inventory Area Info", NETFN_STORAGE, 0x10, Retry::Safe);
/// 34.2 Read FRU Data.
pub const READ_FRU: Command = command("Read FRU Data", NETFN_STORAGE, 0x11, Retry::Safe).with(&[cc(
    0x81,
    ErrorCode::BmcError,
    "FRU device busy",
)]);

/// 31.2 Get SEL Info.
pub const GET_SEL_INFO: Command = command("Get SEL Info", NETFN_STORAGE, 0x40, Retry::Safe);
/// 31.4 Reserve SEL.
pub const RESERVE_SEL: Command = command("Reserve SEL", NETFN_STORAGE, 0x42, Retry::Safe);
/// 31.5 Get SEL Entry.
pub const GET_SEL_ENTRY: Command = command("Get SEL Entry", NETFN_STORAGE, 0x43, Retry::Safe).with(&[cc(
    0x81,
    ErrorCode::BmcError,
    "cannot execute command, SEL erase in progress",
)]);
/// 31.9 Clear SEL (initiate erase, or get its status: both safe to repeat).
pub const CLEAR_SEL: Command = command("Clear SEL", NETFN_STORAGE, 0x47, Retry::Safe);

/// 33.9 Get SDR Repository Info.
pub const GET_SDR_REPO_INFO: Command = command("Get SDR Repository Info", NETFN_STORAGE, 0x20, Retry::Safe);
/// 33.11 Reserve SDR Repository.
pub const RESERVE_SDR_REPO: Command = command("Reserve SDR Repository", NETFN_STORAGE, 0x22, Retry::Safe);
/// 33.12 Get SDR.
pub const GET_SDR: Command = command("Get SDR", NETFN_STORAGE, 0x23, Retry::Safe);

// --- Sensor/Event (netfn 0x04) ---
/// 35.14 Get Sensor Reading.
pub const GET_SENSOR_READING: Command = command("Get Sensor Reading", NETFN_SENSOR, 0x2D, Retry::Safe);

// --- Transport (netfn 0x0C) ---
const LAN_SPECIFIC: &[SpecificCode] = &[
    cc(0x80, ErrorCode::Unsupported, "LAN parameter not supported"),
    cc(0x81, ErrorCode::BmcError, "set already in progress by another party"),
    cc(0x82, ErrorCode::Unsupported, "attempt to write a read-only parameter"),
    cc(0x83, ErrorCode::Unsupported, "attempt to read a write-only parameter"),
];
/// 23.1 Set LAN Configuration Parameters.
pub const SET_LAN_CONFIG: Command =
    command("Set LAN Configuration Parameters", NETFN_TRANSPORT, 0x01, Retry::Safe).with(LAN_SPECIFIC);
/// 23.2 Get LAN Configuration Parameters.
pub const GET_LAN_CONFIG: Command =
    command("Get LAN Configuration Parameters", NETFN_TRANSPORT, 0x02, Retry::Safe).with(LAN_SPECIFIC);

/// "This channel" in channel-number fields.
pub const CURRENT_CHANNEL: u8 = 0x0E;

// ---------------------------------------------------------------- chassis

/// Chassis Control data byte for a power operation (28.3); `None` for
/// [`PowerOp::Status`], which is Get Chassis Status instead.
pub fn chassis_control_code(op: PowerOp) -> Option<u8> {
    match op {
        PowerOp::Off => Some(0x00),
        PowerOp::On => Some(0x01),
        PowerOp::Cycle => Some(0x02),
        PowerOp::Reset => Some(0x03),
        PowerOp::Nmi => Some(0x04),
        PowerOp::SoftOff => Some(0x05),
        PowerOp::Status => None,
    }
}

/// Decoded Get Chassis Status response (28.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChassisStatus {
    pub power_on: bool,
    pub power_overload: bool,
    pub interlock: bool,
    pub power_fault: bool,
    pub control_fault: bool,
    /// 0 = stay off, 1 = restore previous, 2 = always on, 3 = unknown.
    pub restore_policy: u8,
    pub last_event: u8,
    pub misc: u8,
}

pub fn decode_chassis_status(data: &[u8]) -> Option<ChassisStatus> {
    let current = *data.first()?;
    Some(ChassisStatus {
        power_on: current & 0x01 != 0,
        power_overload: current & 0x02 != 0,
        interlock: current & 0x04 != 0,
        power_fault: current & 0x08 != 0,
        control_fault: current & 0x10 != 0,
        restore_policy: (current >> 5) & 0x03,
        last_event: data.get(1).copied().unwrap_or(0),
        misc: data.get(2).copied().unwrap_or(0),
    })
}

/// 28.5 Chassis Identify. Idempotent: a retransmit asks for the same state
/// (a timed identify's interval starts again, which is harmless).
pub const CHASSIS_IDENTIFY: Command = command("Chassis Identify", NETFN_CHASSIS, 0x04, Retry::Safe).with(&[cc(
    0xCC,
    ErrorCode::Unsupported,
    "the BMC refused the identify request (Force Identify On is optional)",
)]);

/// The identify state in Get Chassis Status byte 3 (§28.2): `None` when the
/// BMC does not report it (bit 6 clear; the spec makes it optional); else
/// `(on, timed)` from bits 5:4 (00 off, 01 temporary on, 10 indefinite on).
/// The reserved value 11 answers `None` too (the BMC says nothing usable).
pub fn identify_state(misc: u8) -> Option<(bool, bool)> {
    if misc & 0x40 == 0 {
        return None;
    }
    match (misc >> 4) & 0x03 {
        0 => Some((false, false)),
        1 => Some((true, true)),
        2 => Some((true, false)),
        _ => None,
    }
}

/// Chassis Identify's data: `[0]` off, `[0, 1]` Force Identify On (until
/// turned off), `[seconds]` on for an interval.
pub fn identify_data(on: bool, seconds: Option<u16>) -> Vec<u8> {
    match (on, seconds) {
        (false, _) => vec![0],
        (true, None) => vec![0, 1],
        (true, Some(s)) => vec![s.clamp(1, 255) as u8],
    }
}

/// 31.10 Get SEL Time.
pub const GET_SEL_TIME: Command = command("Get SEL Time", NETFN_STORAGE, 0x48, Retry::Safe);
/// 31.11 Set SEL Time (a retransmit writes the same second again).
pub const SET_SEL_TIME: Command = command("Set SEL Time", NETFN_STORAGE, 0x49, Retry::Safe);

/// Get SEL Time's answer: seconds since 1970, little-endian.
pub fn decode_sel_time(d: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(..4)?.try_into().ok()?))
}

/// DCMI 1.5 §6.6.1 Get Power Reading.
pub const DCMI_GET_POWER_READING: Command = command("DCMI Get Power Reading", NETFN_GROUP, 0x02, Retry::Safe);
/// DCMI 1.5 §6.6.2 Get Power Limit (0x80: a limit is set but not active).
pub const DCMI_GET_POWER_LIMIT: Command = command("DCMI Get Power Limit", NETFN_GROUP, 0x03, Retry::Safe);
/// DCMI 1.5 §6.6.3 Set Power Limit.
pub const DCMI_SET_POWER_LIMIT: Command = command("DCMI Set Power Limit", NETFN_GROUP, 0x04, Retry::Safe).with(&[
    cc(0x84, ErrorCode::InvalidField, "power limit out of the range the BMC accepts"),
    cc(0x85, ErrorCode::InvalidField, "correction time out of range"),
    cc(0x89, ErrorCode::InvalidField, "statistics reporting period out of range"),
]);
/// DCMI 1.5 §6.6.4 Activate/Deactivate Power Limit.
pub const DCMI_ACTIVATE_POWER_LIMIT: Command =
    command("DCMI Activate/Deactivate Power Limit", NETFN_GROUP, 0x05, Retry::Safe);

/// Get Power Reading's request: system power statistics (mode 1).
pub fn dcmi_power_reading_request() -> Vec<u8> {
    vec![DCMI, 0x01, 0x00, 0x00]
}

/// A DCMI Get Power Reading answer: current, min, max, average watts, the
/// statistics reporting period (ms) and whether measurement is active.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcmiPowerReading {
    pub current: u16,
    pub min: u16,
    pub max: u16,
    pub average: u16,
    pub period_ms: u32,
    pub active: bool,
}

pub fn decode_dcmi_power_reading(d: &[u8]) -> Option<DcmiPowerReading> {
    if d.len() < 18 || d[0] != DCMI {
        return None;
    }
    let w = |i: usize| u16::from_le_bytes([d[i], d[i + 1]]);
    Some(DcmiPowerReading {
        current: w(1),
        min: w(3),
        max: w(5),
        average: w(7),
        period_ms: u32::from_le_bytes([d[13], d[14], d[15], d[16]]),
        active: d[17] & 0x40 != 0,
    })
}

/// A DCMI power limit (Get Power Limit's answer, Set Power Limit's request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcmiPowerLimit {
    /// 0x00 none, 0x01 hard power off and log, 0x11 log only.
    pub exception: u8,
    pub watts: u16,
    pub correction_ms: u32,
    pub sampling_s: u16,
}

pub fn decode_dcmi_power_limit(d: &[u8]) -> Option<DcmiPowerLimit> {
    if d.len() < 14 || d[0] != DCMI {
        return None;
    }
    Some(DcmiPowerLimit {
        exception: d[3],
        watts: u16::from_le_bytes([d[4], d[5]]),
        correction_ms: u32::from_le_bytes([d[6], d[7], d[8], d[9]]),
        sampling_s: u16::from_le_bytes([d[12], d[13]]),
    })
}

pub fn encode_dcmi_power_limit(l: &DcmiPowerLimit) -> Vec<u8> {
    let mut d = vec![DCMI, 0, 0, 0, l.exception];
    d.extend_from_slice(&l.watts.to_le_bytes());
    d.extend_from_slice(&l.correction_ms.to_le_bytes());
    d.extend_from_slice(&[0, 0]);
    d.extend_from_slice(&l.sampling_s.to_le_bytes());
    d
}

pub fn dcmi_exception_name(action: u8) -> String {
    match action {
        0x00 => "none".into(),
        0x01 => "power_off".into(),
        0x11 => "log".into(),
        other => format!("oem_0x{other:02x}"),
    }
}

pub fn restore_policy_name(policy: u8) -> &'static str {
    match policy {
        0 => "always-off",
        1 => "previous",
        2 => "always-on",
        _ => "unknown",
    }
}

// ---------------------------------------------------------------- boot

/// Boot option parameter 5, "boot flags" (28.13, table 28-14).
pub const BOOT_PARAM_FLAGS: u8 = 5;

const BOOT_VALID: u8 = 0x80;
const BOOT_PERSISTENT: u8 = 0x40;
const BOOT_EFI: u8 = 0x20;

/// Device selector (boot flags data 2, bits 5:2); `unsupported` for a
/// device IPMI has no selector for.
fn device_selector(device: BootDevice) -> Result<u8, ProviderError> {
    Ok(match device {
        BootDevice::None => 0x0,
        BootDevice::Pxe => 0x1,
        BootDevice::Disk => 0x2,
        BootDevice::Safe => 0x3,
        BootDevice::Cdrom => 0x5,
        BootDevice::Bios => 0x6,
        BootDevice::Http => {
            return Err(ProviderError::unsupported_op("IPMI has no UEFI HTTP boot device (Redfish `UefiHttp` has)"))
        }
        BootDevice::Other => {
            return Err(ProviderError::new(
                ErrorCode::InvalidField,
                "`other` is a boot device the BMC reports, not one to set",
            ))
        }
    })
}

fn selector_name(selector: u8) -> &'static str {
    match selector {
        0x4 => "diagnostic partition",
        0x7 => "remote floppy/primary removable media",
        0x8 => "remote CD/DVD",
        0x9 => "primary remote media",
        0xB => "remote hard disk",
        0xF => "floppy/primary removable media",
        _ => "reserved",
    }
}

/// Set System Boot Options request data for parameter 5: valid, one-time or
/// persistent, legacy or EFI, device selector; bytes 3–5 zero (no CMOS
/// clear, no lockouts, default verbosity/console redirection).
pub fn encode_boot_flags(req: &BootDeviceRequest) -> Result<Vec<u8>, ProviderError> {
    let mut b1 = BOOT_VALID;
    if req.persistent {
        b1 |= BOOT_PERSISTENT;
    }
    if req.efi {
        b1 |= BOOT_EFI;
    }
    Ok(vec![BOOT_PARAM_FLAGS, b1, device_selector(req.device)? << 2, 0, 0, 0])
}

/// Boot option parameter 3, "BMC boot flag valid bit clearing" (table 28-14).
pub const BOOT_PARAM_VALID_CLEARING: u8 = 3;

/// Parameter 3, data 1 bit 3: do not clear the boot flags' valid bit when
/// no Chassis Control command arrives within 60 seconds. Without it a BMC
/// forgets the next boot device a minute after it was set unless the
/// machine is powered on or reset in time (what Ironic also turns off).
pub const KEEP_VALID_WITHOUT_CHASSIS_CONTROL: u8 = 0x08;

/// Set System Boot Options request data turning the 60-second boot-flag
/// timeout off.
pub fn encode_keep_boot_flags_valid() -> Vec<u8> {
    vec![BOOT_PARAM_VALID_CLEARING, KEEP_VALID_WITHOUT_CHASSIS_CONTROL]
}

/// Data byte 1 (valid, persistent, EFI) and the device selector of a Get
/// System Boot Options answer for parameter 5, after checking it is one.
fn boot_flags_fields(data: &[u8]) -> Result<(u8, u8), ProviderError> {
    let protocol = |m: String| ProviderError::new(ErrorCode::ProtocolError, m);
    if data.len() < 4 {
        return Err(protocol(format!("boot flags response has {} bytes, expected at least 4", data.len())));
    }
    if data[1] & 0x7F != BOOT_PARAM_FLAGS {
        return Err(protocol(format!("asked for boot parameter 5, got {}", data[1] & 0x7F)));
    }
    Ok((data[2], (data[3] >> 2) & 0x0F))
}

/// How a read-back of parameter 5 compares with what was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootReadBack {
    /// Valid, with the device, persistence and mode that were set.
    Exact,
    /// The device selector that was set, but the valid bit (and with it the
    /// persistence and mode bits) reads clear: what OpenIPMI's `ipmi_sim`
    /// answers, which stores only the selector.
    SelectorOnly,
}

/// Compare the Get System Boot Options answer (parameter 5) with the
/// request just written: the device selector must be the one set, and when
/// the BMC reports the flags valid, persistence and mode must match too.
pub fn check_boot_read_back(set: &BootDeviceRequest, data: &[u8]) -> Result<BootReadBack, ProviderError> {
    let (b1, selector) = boot_flags_fields(data)?;
    let want = device_selector(set.device)?;
    let differs = |what: String| {
        ProviderError::new(
            ErrorCode::BmcError,
            format!("the BMC accepted the boot device but reads back {what}; the boot device is not set"),
        )
    };
    if selector != want {
        return Err(differs(format!("device selector 0x{selector:X} instead of 0x{want:X}")));
    }
    if b1 & BOOT_VALID == 0 {
        return Ok(BootReadBack::SelectorOnly);
    }
    let (persistent, efi) = (b1 & BOOT_PERSISTENT != 0, b1 & BOOT_EFI != 0);
    if persistent != set.persistent {
        return Err(differs(format!("{} instead of {}", once_or_always(persistent), once_or_always(set.persistent))));
    }
    if efi != set.efi {
        return Err(differs(format!("{} boot instead of {}", legacy_or_efi(efi), legacy_or_efi(set.efi))));
    }
    Ok(BootReadBack::Exact)
}

fn once_or_always(persistent: bool) -> &'static str {
    if persistent {
        "persistent"
    } else {
        "next boot only"
    }
}

fn legacy_or_efi(efi: bool) -> &'static str {
    if efi {
        "EFI"
    } else {
        "legacy"
    }
}

/// Get System Boot Options request data for parameter 5.
pub fn get_boot_flags_request() -> Vec<u8> {
    vec![BOOT_PARAM_FLAGS, 0, 0]
}

/// Decodes the Get System Boot Options response for parameter 5.
///
/// The spec says the flags apply only while the *valid* bit is set; when it
/// is clear (expired one-time override, or never set) the result is
/// `device: None`. The persistent/EFI bits are reported as read.
pub fn decode_boot_flags(data: &[u8]) -> Result<BootDeviceRequest, ProviderError> {
    let (b1, selector) = boot_flags_fields(data)?;
    let persistent = b1 & BOOT_PERSISTENT != 0;
    let efi = b1 & BOOT_EFI != 0;
    if b1 & BOOT_VALID == 0 {
        return Ok(BootDeviceRequest { device: BootDevice::None, persistent, efi });
    }
    let device = match selector {
        0x0 => BootDevice::None,
        0x1 => BootDevice::Pxe,
        0x2 => BootDevice::Disk,
        0x3 => BootDevice::Safe,
        0x5 => BootDevice::Cdrom,
        0x6 => BootDevice::Bios,
        other => {
            // Reported readably rather than failing the read.
            tracing::debug!(
                selector = other,
                name = selector_name(other),
                "The BMC's boot device selector has no bmcfleet name; reporting `other`."
            );
            BootDevice::Other
        }
    };
    Ok(BootDeviceRequest { device, persistent, efi })
}

// ---------------------------------------------------------------- users

/// User name field width (22.28).
pub const USER_NAME_LEN: usize = 16;

pub fn role_privilege(role: UserRole) -> u8 {
    match role {
        UserRole::Callback => 0x1,
        UserRole::User => 0x2,
        UserRole::Operator => 0x3,
        UserRole::Admin => 0x4,
        UserRole::NoAccess => 0xF,
    }
}

pub fn privilege_role(privilege: u8) -> Option<UserRole> {
    match privilege & 0x0F {
        0x1 => Some(UserRole::Callback),
        0x2 => Some(UserRole::User),
        0x3 => Some(UserRole::Operator),
        0x4 => Some(UserRole::Admin),
        0xF => Some(UserRole::NoAccess),
        _ => None,
    }
}

/// A value IPMI cannot carry, or a response too short for what it answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A user name that does not fit the 16-byte field.
    UserName,
    /// A password IPMI 2.0 cannot carry.
    Password,
    /// A response shorter than the value it must hold.
    Truncated,
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// Validates a user name for the 16-byte IPMI field: 1–16 printable ASCII
/// characters, no spaces at either end.
pub fn validate_user_name(name: &str) -> Result<(), Error> {
    if name.is_empty() || name.len() > USER_NAME_LEN {
        return Err(Error::new(
            ErrorKind::UserName,
            format!("an IPMI user name has 1 to {USER_NAME_LEN} characters, got {}", name.len()),
        ));
    }
    if !name.bytes().all(|b| b.is_ascii_graphic() || b == b' ') || name.trim() != name {
        return Err(Error::new(
            ErrorKind::UserName,
            "an IPMI user name is printable ASCII without leading or trailing spaces",
        ));
    }
    Ok(())
}

/// Validates a password: at most 20 bytes (IPMI 2.0), no NUL.
pub fn validate_password(password: &str) -> Result<(), Error> {
    if password.len() > 20 {
        return Err(Error::new(
            ErrorKind::Password,
            format!("an IPMI 2.0 password has at most 20 bytes, got {}", password.len()),
        ));
    }
    if password.bytes().any(|b| b == 0) {
        return Err(Error::new(ErrorKind::Password, "an IPMI password cannot contain NUL bytes"));
    }
    Ok(())
}

pub fn encode_set_user_name(user_id: u8, name: &str) -> Vec<u8> {
    let mut data = vec![user_id & 0x3F];
    let mut field = [0u8; USER_NAME_LEN];
    field[..name.len()].copy_from_slice(name.as_bytes());
    data.extend_from_slice(&field);
    data
}

pub fn decode_user_name(data: &[u8]) -> String {
    let field = &data[..data.len().min(USER_NAME_LEN)];
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// Set User Password operations (22.30, data byte 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PasswordOp {
    Disable = 0,
    Enable = 1,
    Set = 2,
}

/// Set User Password request. Passwords longer than 16 bytes use the
/// 20-byte form (bit 7 of the user id byte).
pub fn encode_set_user_password(user_id: u8, op: PasswordOp, password: Option<&str>) -> Vec<u8> {
    let pw = password.unwrap_or("");
    let wide = pw.len() > 16;
    let mut data = vec![(user_id & 0x3F) | if wide { 0x80 } else { 0 }, op as u8];
    if op == PasswordOp::Set {
        let mut field = vec![0u8; if wide { 20 } else { 16 }];
        field[..pw.len()].copy_from_slice(pw.as_bytes());
        data.extend_from_slice(&field);
    }
    data
}

/// Set User Access request: privilege limit and IPMI messaging on `channel`.
pub fn encode_set_user_access(channel: u8, user_id: u8, privilege: u8, messaging: bool) -> Vec<u8> {
    // bit 7: change the bits below; bit 4: IPMI messaging; bit 5: link auth.
    let flags = 0x80 | if messaging { 0x10 } else { 0 };
    vec![flags | (channel & 0x0F), user_id & 0x3F, privilege & 0x0F]
}

pub fn encode_get_user_access(channel: u8, user_id: u8) -> Vec<u8> {
    vec![channel & 0x0F, user_id & 0x3F]
}

/// Decoded Get User Access response (22.27).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserAccess {
    pub max_users: u8,
    /// `Some` when the BMC reports the user's enable status (bits 7:6 of
    /// byte 2); IPMI 1.5 BMCs and `ipmi_sim` leave it unspecified.
    pub enabled: Option<bool>,
    pub ipmi_messaging: bool,
    pub link_auth: bool,
    pub callback_only: bool,
    pub privilege: u8,
}

pub fn decode_user_access(data: &[u8]) -> Option<UserAccess> {
    if data.len() < 4 {
        return None;
    }
    Some(UserAccess {
        max_users: data[0] & 0x3F,
        enabled: match data[1] >> 6 {
            0b01 => Some(true),
            0b10 => Some(false),
            _ => None,
        },
        callback_only: data[3] & 0x40 != 0,
        link_auth: data[3] & 0x20 != 0,
        ipmi_messaging: data[3] & 0x10 != 0,
        privilege: data[3] & 0x0F,
    })
}

impl UserAccess {
    /// Whether the user can log in: the spec's enable status when the BMC
    /// reports it, else (ipmi_sim, old BMCs) IPMI messaging on the channel.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(self.ipmi_messaging)
    }
}

// ---------------------------------------------------------------- LAN

/// LAN configuration parameters (23.2, table 23-4).
pub const LAN_SET_IN_PROGRESS: u8 = 0;
pub const LAN_IP_ADDRESS: u8 = 3;
pub const LAN_IP_SOURCE: u8 = 4;
pub const LAN_SUBNET_MASK: u8 = 6;
pub const LAN_DEFAULT_GATEWAY: u8 = 12;

/// IP address source values (parameter 4).
pub const IP_SOURCE_STATIC: u8 = 0x01;
pub const IP_SOURCE_DHCP: u8 = 0x02;

pub fn encode_get_lan_param(channel: u8, param: u8) -> Vec<u8> {
    vec![channel & 0x0F, param, 0, 0]
}

pub fn encode_set_lan_param(channel: u8, param: u8, value: &[u8]) -> Vec<u8> {
    let mut data = vec![channel & 0x0F, param];
    data.extend_from_slice(value);
    data
}

/// The parameter bytes of a Get LAN Configuration Parameters response
/// (after the revision byte).
pub fn lan_param_value(data: &[u8], len: usize) -> Result<&[u8], Error> {
    data.get(1..1 + len).ok_or_else(|| {
        Error::new(
            ErrorKind::Truncated,
            format!("LAN parameter response has {} bytes, expected {}", data.len(), len + 1),
        )
    })
}

pub fn ipv4(bytes: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3])
}

/// How a parameter 4 value reads: `true` for a dynamically obtained
/// address (DHCP 2, BIOS/system software 3, other BMC protocol 4), `false`
/// for static (1) or unspecified (0, treated as static configuration).
pub fn ip_source_is_dynamic(source: u8) -> bool {
    matches!(source & 0x0F, 0x02..=0x04)
}

// ---------------------------------------------------------------- device id

/// Firmware revision text from Get Device ID bytes 3–4 (major binary,
/// minor BCD), e.g. `9.08`.
pub fn firmware_revision(data: &[u8]) -> Option<String> {
    let major = data.get(2)? & 0x7F;
    let minor = *data.get(3)?;
    Some(format!("{major}.{:X}{:X}", minor >> 4, minor & 0x0F))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_flags_round_trip_every_device() {
        for device in [BootDevice::Pxe, BootDevice::Disk, BootDevice::Safe, BootDevice::Cdrom, BootDevice::Bios] {
            for persistent in [false, true] {
                for efi in [false, true] {
                    let req = BootDeviceRequest { device, persistent, efi };
                    let set = encode_boot_flags(&req).unwrap();
                    // Get response: revision, parameter, then the 5 data bytes.
                    let mut get = vec![0x01, BOOT_PARAM_FLAGS];
                    get.extend_from_slice(&set[1..]);
                    assert_eq!(decode_boot_flags(&get).unwrap(), req);
                }
            }
        }
    }

    #[test]
    fn boot_flags_spec_bytes() {
        let req = BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: true };
        assert_eq!(encode_boot_flags(&req).unwrap(), vec![0x05, 0xE0, 0x04, 0, 0, 0]);
        let req = BootDeviceRequest { device: BootDevice::Bios, persistent: false, efi: false };
        assert_eq!(encode_boot_flags(&req).unwrap(), vec![0x05, 0x80, 0x18, 0, 0, 0]);
        let http = BootDeviceRequest { device: BootDevice::Http, persistent: false, efi: true };
        assert_eq!(encode_boot_flags(&http).unwrap_err().code, ErrorCode::Unsupported);
    }

    #[test]
    fn boot_read_back_must_match_what_was_set() {
        let set = BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: true };
        assert_eq!(encode_keep_boot_flags_valid(), vec![0x03, 0x08], "Ironic's `raw 0x00 0x08 0x03 0x08`");
        assert_eq!(check_boot_read_back(&set, &[0x01, 0x05, 0xE0, 0x04, 0, 0, 0]).unwrap(), BootReadBack::Exact);
        // ipmi_sim: the selector only, valid bit clear.
        assert_eq!(check_boot_read_back(&set, &[0x01, 0x05, 0x00, 0x04, 0, 0, 0]).unwrap(), BootReadBack::SelectorOnly);
        for (data, says) in [
            ([0x01, 0x05, 0xE0, 0x08, 0, 0, 0], "device selector 0x2"),
            ([0x01, 0x05, 0xA0, 0x04, 0, 0, 0], "next boot only instead of persistent"),
            ([0x01, 0x05, 0xC0, 0x04, 0, 0, 0], "legacy boot instead of EFI"),
        ] {
            let e = check_boot_read_back(&set, &data).unwrap_err();
            assert!(e.code == ErrorCode::BmcError && e.message.contains(says), "{data:?}: {e:?}");
        }
        assert_eq!(check_boot_read_back(&set, &[0x01, 0x04, 0xE0, 0x04]).unwrap_err().code, ErrorCode::ProtocolError);
    }

    #[test]
    fn invalid_boot_flags_mean_no_override() {
        // What ipmi_sim answers after `bootdev pxe`: valid bit clear.
        let got = decode_boot_flags(&[0x01, 0x05, 0x00, 0x04, 0, 0, 0]).unwrap();
        assert_eq!(got.device, BootDevice::None);
        // A selector without a bmcfleet name (remote floppy) reads as `other`.
        assert_eq!(decode_boot_flags(&[0x01, 0x05, 0x80, 0x1C, 0, 0, 0]).unwrap().device, BootDevice::Other);
        assert!(decode_boot_flags(&[0x01, 0x04, 0x80]).is_err());
    }

    #[test]
    fn user_fields() {
        assert_eq!(encode_set_user_name(3, "bob").len(), 17);
        assert_eq!(decode_user_name(&encode_set_user_name(3, "bob")[1..]), "bob");
        assert_eq!(validate_user_name("").unwrap_err().kind(), ErrorKind::UserName);
        assert!(validate_user_name("seventeen-chars-x").is_err());
        assert!(validate_user_name(" bob").is_err());
        assert!(validate_user_name("ops_admin-1").is_ok());
        assert_eq!(validate_password(&"x".repeat(21)).unwrap_err().kind(), ErrorKind::Password);
        assert_eq!(lan_param_value(&[0x11, 1, 2], 4).unwrap_err().kind(), ErrorKind::Truncated);
        assert_eq!(lan_param_value(&[0x11, 1, 2], 2).unwrap(), &[1, 2]);
        let short = encode_set_user_password(4, PasswordOp::Set, Some("pw"));
        assert_eq!((short[0], short[1], short.len()), (4, 2, 18));
        let wide = encode_set_user_password(4, PasswordOp::Set, Some("seventeen-chars-x"));
        assert_eq!((wide[0], wide.len()), (0x84, 22));
        assert_eq!(encode_set_user_password(4, PasswordOp::Enable, None), vec![4, 1]);
        assert_eq!(encode_set_user_access(1, 4, 0x4, true), vec![0x91, 4, 4]);
        let access = decode_user_access(&[0x0A, 0x42, 0x01, 0x14]).unwrap();
        assert_eq!(access.enabled, Some(true));
        assert!(access.ipmi_messaging);
        assert_eq!(privilege_role(access.privilege), Some(UserRole::Admin));
        // ipmi_sim style: status unspecified, messaging bit decides.
        let sim = decode_user_access(&[0x3F, 0x01, 0x00, 0x04]).unwrap();
        assert!(!sim.is_enabled());
    }

    #[test]
    fn firmware_revision_is_bcd_minor() {
        assert_eq!(firmware_revision(&[0, 0x03, 0x09, 0x08]).unwrap(), "9.08");
        assert_eq!(firmware_revision(&[0, 0x03, 0x82, 0x45]).unwrap(), "2.45");
    }

    #[test]
    fn chassis_status_bits() {
        let s = decode_chassis_status(&[0x41, 0x10, 0x00, 0x00]).unwrap();
        assert!(s.power_on);
        assert_eq!(restore_policy_name(s.restore_policy), "always-on");
        assert!(decode_chassis_status(&[]).is_none());
    }
}
