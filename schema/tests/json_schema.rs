//! The hand-written JSON Schemas in `schema/json/` against the Rust types.
//!
//! `schemars` is not available offline, so the schemas are written by hand
//! and this test keeps them honest: it serializes a value of **every**
//! variant of every wire enum (actions, action data, error codes, event
//! kinds, machine event kinds, batch states, ...) and validates each against
//! its schema with Python's `jsonschema` (draft 2020-12). Each enum has a
//! `tag` function with an exhaustive `match`: a new variant does not compile
//! until it has a tag, and the test fails until an example carries that tag.
//! It also checks that every enum list in `defs.json` equals the Rust list,
//! that mutated (invalid) values are rejected, and that every JSON batch in
//! README.md validates against `batch.json`.
//!
//! Python with `jsonschema` comes from `$BMCFLEET_PYTHON`, else
//! `.tools/bin/python3` (scripts/setup.sh installs it), else `python3`.
//! Without it the validating tests skip with a note, unless
//! `BMCFLEET_REQUIRE_PEERS=1` (scripts/test.sh) makes that a failure.

use bmcfleet_schema::components::{Drive, Firmware, Fru, MemoryModule, Nic, PowerSupply, Processor, Section};
use bmcfleet_schema::rollout::{
    Counts, PartOutcome, PartState, PartView, RolloutEvent, RolloutEventKind, RolloutListRequest, RolloutRecord,
    RolloutRequest, RolloutState, RolloutStatusRequest, RolloutView, StopReason,
};
use bmcfleet_schema::state::{ChangeKind, InventoryChange, MachineEvent, MachineEventKind, MachineState};
use bmcfleet_schema::*;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn schema_dir() -> PathBuf {
    root().join("schema/json")
}

fn defs() -> Value {
    serde_json::from_str(&std::fs::read_to_string(schema_dir().join("defs.json")).unwrap()).unwrap()
}

/// A Python interpreter that can `import jsonschema`, or `None` (skip).
fn python() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(p) = std::env::var_os("BMCFLEET_PYTHON") {
        candidates.push(PathBuf::from(p));
    }
    candidates.push(root().join(".tools/bin/python3"));
    candidates.push(PathBuf::from("python3"));
    bmcfleet_testing::peers::or_skip(
        bmcfleet_testing::peers::python_with(candidates, "jsonschema, referencing"),
        "no python3 with the jsonschema package",
        "scripts/setup.sh installs it into .tools",
    )
}

/// One instance to check: which schema file, the value, and whether it must validate.
struct Case {
    label: String,
    schema: &'static str,
    instance: Value,
    valid: bool,
}

fn case(label: impl Into<String>, schema: &'static str, value: &impl serde::Serialize) -> Case {
    Case { label: label.into(), schema, instance: serde_json::to_value(value).unwrap(), valid: true }
}

/// Validates every case with schema/json/check.py; returns the complaints.
fn check(python: &Path, cases: &[Case]) -> Vec<String> {
    let input: String = cases
        .iter()
        .map(|c| {
            json!({"label": c.label, "schema": c.schema, "instance": c.instance, "valid": c.valid}).to_string() + "\n"
        })
        .collect();
    let mut child = Command::new(python)
        .arg(schema_dir().join("check.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout.lines().last().unwrap_or_default().to_owned();
    assert!(
        summary == format!("checked {}", cases.len()) || !out.status.success(),
        "check.py did not check every case: {summary:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        return Vec::new();
    }
    let mut complaints: Vec<String> =
        stdout.lines().filter(|l| !l.starts_with("checked ")).map(str::to_owned).collect();
    if complaints.is_empty() {
        complaints.push(format!("check.py failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    complaints
}

// ---------------------------------------------------------------- tags
// One exhaustive match per enum: a new variant must be tagged here, and the
// test below fails until an example carries the new tag.

/// A tag function, one exhaustive `match` (no wildcard), and the number of
/// tags it has (one an arm).
macro_rules! tags {
    (fn $name:ident($ty:ty) -> $count:ident { $($pat:pat => $tag:literal,)+ }) => {
        fn $name(x: &$ty) -> &'static str {
            match x {
                $($pat => $tag,)+
            }
        }
        const $count: usize = [$($tag),+].len();
    };
}

tags! {
    fn action_tag(Action) -> ACTION_TAGS {
        Action::Power(_) => "power",
        Action::PowerSettle(_) => "power_settle",
        Action::BootDevice(_) => "boot_device",
        Action::GetBootDevice => "get_boot_device",
        Action::User(UserOp::List) => "user.list",
        Action::User(UserOp::Create(_)) => "user.create",
        Action::User(UserOp::Update(_)) => "user.update",
        Action::User(UserOp::Delete { .. }) => "user.delete",
        Action::BmcReset(_) => "bmc_reset",
        Action::NetworkSource(NetworkSourceOp::Get) => "network_source.get",
        Action::NetworkSource(NetworkSourceOp::Dhcp) => "network_source.dhcp",
        Action::NetworkSource(NetworkSourceOp::Static(_)) => "network_source.static",
        Action::Raw(RawRequest::Ipmi(_)) => "raw.ipmi",
        Action::Raw(RawRequest::Redfish(_)) => "raw.redfish",
        Action::VirtualMedia(VirtualMediaOp::Insert { .. }) => "virtual_media.insert",
        Action::VirtualMedia(VirtualMediaOp::Eject { .. }) => "virtual_media.eject",
        Action::Inventory => "inventory",
        Action::EventLog(EventLogOp::Read { .. }) => "event_log.read",
        Action::EventLog(EventLogOp::Clear { .. }) => "event_log.clear",
        Action::Sensors => "sensors",
        Action::BiosGet => "bios_get",
        Action::BiosSet(_) => "bios_set",
        Action::BiosReset => "bios_reset",
        Action::SecureBootGet => "secure_boot_get",
        Action::SecureBootSet(_) => "secure_boot_set",
        Action::SecureBootResetKeys(_) => "secure_boot_reset_keys",
        Action::FirmwareUpdate(_) => "firmware_update",
        Action::IdentifyGet => "identify_get",
        Action::Identify(_) => "identify",
        Action::PowerReading => "power_reading",
        Action::PowerLimitGet => "power_limit_get",
        Action::PowerLimitSet(_) => "power_limit_set",
        Action::BmcClockGet => "bmc_clock_get",
        Action::BmcClockSync => "bmc_clock_sync",
        Action::NtpGet => "ntp_get",
        Action::NtpSet(_) => "ntp_set",
        Action::BmcCertGet => "bmc_cert_get",
        Action::BmcCertReplace(_) => "bmc_cert_replace",
    }
}

tags! {
    fn credentials_tag(Credentials) -> CREDENTIALS_TAGS {
        Credentials::Ref(_) => "ref",
        Credentials::Inline { .. } => "inline",
        Credentials::Sealed(_) => "sealed",
    }
}

tags! {
    fn data_tag(ActionData) -> DATA_TAGS {
        ActionData::PowerState(_) => "power_state",
        ActionData::BootDevice(_) => "boot_device",
        ActionData::BootDevicePending(_) => "boot_device_pending",
        ActionData::Users(_) => "users",
        ActionData::NetworkSource(_) => "network_source",
        ActionData::Raw(_) => "raw",
        ActionData::Inventory(_) => "inventory",
        ActionData::EventLog(_) => "event_log",
        ActionData::NoChange(_) => "no_change",
        ActionData::Sensors(_) => "sensors",
        ActionData::Bios(_) => "bios",
        ActionData::BiosPending(_) => "bios_pending",
        ActionData::SecureBoot(_) => "secure_boot",
        ActionData::FirmwareUpdate(_) => "firmware_update",
        ActionData::Identify(_) => "identify",
        ActionData::PowerReading(_) => "power_reading",
        ActionData::PowerLimit(_) => "power_limit",
        ActionData::BmcClock(_) => "bmc_clock",
        ActionData::Ntp(_) => "ntp",
        ActionData::BmcCertificate(_) => "bmc_certificate",
    }
}

tags! {
    fn event_tag(EventKind) -> EVENT_TAGS {
        EventKind::ActionStarted { .. } => "action_started",
        EventKind::ActionFinished { .. } => "action_finished",
        EventKind::ActionProgress { .. } => "action_progress",
        EventKind::BatchFinished { .. } => "batch_finished",
    }
}

fn machine_event_tag(e: &MachineEventKind) -> &'static str {
    e.name()
}
const MACHINE_EVENT_TAGS: usize = 5;

tags! {
    fn reply_tag(Reply) -> REPLY_TAGS {
        Reply::Accepted(_) => "accepted",
        Reply::Result(_) => "result",
        Reply::Status(_) => "status",
        Reply::Cancelled { .. } => "cancelled",
        Reply::Error(_) => "error",
        Reply::Rollout(_) => "rollout",
        Reply::Rollouts { .. } => "rollouts",
        Reply::Discovery(_) => "discovery",
        Reply::ConsoleLog(_) => "console_log",
    }
}

fn rollout_event_tag(e: &RolloutEventKind) -> &'static str {
    e.name()
}
const ROLLOUT_EVENT_TAGS: usize = 6;

/// Every value of a field-less enum, checked exhaustively: the array is
/// followed by a `match` that lists every variant.
macro_rules! every {
    ($ty:ident: $($v:ident),+ $(,)?) => {{
        #[allow(dead_code)]
        fn exhaustive(x: $ty) { match x { $($ty::$v => ()),+ } }
        vec![$($ty::$v),+]
    }};
}

fn every_error_code() -> Vec<ErrorCode> {
    every!(ErrorCode: Malformed, TooLarge, EmptyBatch, TooManyActions, InvalidAddress, InvalidField, InlineCredentialsDisabled,
        RawNotAllowed, NotFound, MachineNotFound, TargetForbidden, Conflict, Unavailable, BmcQueueFull, UnknownCredential,
        CredentialUnavailable, UnsupportedProtocol, Unsupported, AuthFailed, PermissionDenied, Unreachable, Timeout, NotReached,
        DeadlineExceeded, BmcError, ProtocolError, TargetNotFound, Interrupted, CircuitOpen, Cancelled, Skipped, WorkerExhausted, FirmwareUpdateDisabled, FirmwareImageInvalid, UpdateFailed, Internal)
}

/// The JSON names serde gives the values, in order.
fn names<T: serde::Serialize>(values: &[T]) -> Vec<String> {
    values.iter().map(|v| serde_json::to_value(v).unwrap().as_str().unwrap().to_owned()).collect()
}

/// Each field-less enum of the wire, by its `defs.json` name.
fn enums() -> Vec<(&'static str, Vec<String>)> {
    vec![
        ("ErrorCode", names(&every_error_code())),
        ("Protocol", names(&every!(Protocol: Ipmi, Redfish, Amt, Auto, Sim))),
        ("PowerOp", names(&every!(PowerOp: On, Off, SoftOff, Cycle, Reset, Status, Nmi))),
        ("PowerState", names(&every!(PowerState: On, Off, Unknown))),
        ("BootDevice", names(&every!(BootDevice: Pxe, Disk, Cdrom, Bios, Safe, Http, None, Other))),
        ("UserRole", names(&every!(UserRole: Admin, Operator, User, Callback, NoAccess))),
        ("BmcResetKind", names(&every!(BmcResetKind: Warm, Cold))),
        ("MediaKind", names(&every!(MediaKind: Cd, Usb))),
        ("HttpMethod", names(&every!(HttpMethod: Get, Post, Patch, Put, Delete))),
        ("OnError", names(&every!(OnError: Stop, Continue))),
        ("RedfishAuth", names(&every!(RedfishAuth: Auto, Session, Basic))),
        ("IpmiPrivilege", names(&every!(IpmiPrivilege: User, Operator, Administrator))),
        ("DesiredPower", names(&every!(DesiredPower: On, Off))),
        ("BatchState", names(&every!(BatchState: Queued, Running, Succeeded, Failed, Cancelled))),
        ("Outcome", names(&every!(Outcome: Ok, Error))),
        ("Health", names(&every!(Health: Ok, Warning, Critical))),
        ("SensorKind", names(&every!(SensorKind: Temperature, Fan, Voltage, Power, Other))),
        ("IdentifyLight", names(&every!(IdentifyLight: On, Off, Blink))),
        ("SecureBootResetKeys", names(&every!(SecureBootResetKeys: ResetAllKeysToDefault, DeleteAllKeys, DeletePk))),
        ("InventorySection", names(&every!(Section: Processors, Memory, Drives, Nics, PowerSupplies, Firmware, Fru))),
        ("InventoryChangeKind", names(&every!(ChangeKind: Added, Removed, Changed))),
        ("TransferProtocol", names(&every_transfer_protocol())),
        ("UpdateApplyTime", names(&every_apply_time())),
        ("RolloutState", names(&every!(RolloutState: Running, Paused, Aborting, Succeeded, Failed, Aborted))),
        ("StopReason", names(&every!(StopReason: Canary, Failures, Deadline, Aborted))),
        ("PartOutcome", names(&every!(PartOutcome: Succeeded, Failed, Cancelled, Refused))),
        ("PartState", names(&every!(PartState: Pending, Running, Succeeded, Failed, Cancelled, Refused))),
    ]
}

fn every_transfer_protocol() -> Vec<TransferProtocol> {
    every!(TransferProtocol: Http, Https, Ftp, Sftp, Scp, Tftp, Nfs, Cifs)
}

fn every_apply_time() -> Vec<UpdateApplyTime> {
    every!(UpdateApplyTime: Immediate, OnReset, AtMaintenanceWindowStart, InMaintenanceWindowOnReset, OnStartUpdateRequest)
}

// ------------------------------------------------------------ examples

fn id() -> BatchId {
    ulid::Ulid::from_parts(1_764_000_000_000, 7)
}

fn every_action() -> Vec<Action> {
    let mut out: Vec<Action> =
        every!(PowerOp: On, Off, SoftOff, Cycle, Reset, Status, Nmi).into_iter().map(Action::Power).collect();
    out.extend([
        Action::PowerSettle(PowerSettle {
            op: PowerOp::SoftOff,
            settle: Some(Duration::from_secs(120)),
            escalate_after: Some(Duration::from_secs(90)),
        }),
        Action::PowerSettle(PowerSettle { op: PowerOp::On, settle: None, escalate_after: None }),
        Action::GetBootDevice,
        Action::User(UserOp::List),
        Action::User(UserOp::Create(UserSpec {
            name: "ops".into(),
            password: Secret::new("pw"),
            role: UserRole::Operator,
            enabled: true,
        })),
        Action::User(UserOp::Update(UserUpdate {
            name: "ops".into(),
            password: Some(Secret::new("pw2")),
            role: Some(UserRole::NoAccess),
            enabled: Some(false),
        })),
        Action::User(UserOp::Update(UserUpdate { name: "ops".into(), password: None, role: None, enabled: None })),
        Action::User(UserOp::Delete { name: "ops".into() }),
        Action::NetworkSource(NetworkSourceOp::Get),
        Action::NetworkSource(NetworkSourceOp::Dhcp),
        Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
            address: "10.0.0.9".parse().unwrap(),
            netmask: "255.255.255.0".parse().unwrap(),
            gateway: Some("10.0.0.1".parse().unwrap()),
        })),
        Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x06, cmd: 0x01, data: vec![1, 255] })),
        Action::Raw(RawRequest::Redfish(RawRedfish {
            method: HttpMethod::Patch,
            path: "/redfish/v1/Systems/1".into(),
            body: Some(json!({"AssetTag": "x"})),
        })),
        Action::Inventory,
        Action::EventLog(EventLogOp::read()),
        Action::EventLog(EventLogOp::Read { limit: Some(10), offset: 20, logs: LogSet::Other, log_ids: vec![] }),
        Action::EventLog(EventLogOp::Read {
            limit: None,
            offset: 0,
            logs: LogSet::Event,
            log_ids: vec!["EventLog".into(), "/redfish/v1/Systems/1/LogServices/PostCodes".into()],
        }),
        Action::EventLog(EventLogOp::clear()),
        Action::EventLog(EventLogOp::clear_logs(["EventLog"])),
        Action::Sensors,
        Action::BiosGet,
        Action::BiosSet(BiosSet {
            attributes: [
                ("BootMode".to_owned(), json!("Uefi")),
                ("Cores".to_owned(), json!(4)),
                ("Vt".to_owned(), json!(true)),
            ]
            .into(),
        }),
        Action::BiosReset,
        Action::SecureBootGet,
        Action::SecureBootSet(SecureBootSet { enabled: true }),
    ]);
    for kind in every!(SecureBootResetKeys: ResetAllKeysToDefault, DeleteAllKeys, DeletePk) {
        out.push(Action::SecureBootResetKeys(kind));
    }
    out.push(Action::IdentifyGet);
    for light in every!(IdentifyLight: On, Off, Blink) {
        out.push(Action::Identify(IdentifySet { light, seconds: None }));
    }
    out.push(Action::Identify(IdentifySet { light: IdentifyLight::Blink, seconds: Some(255) }));
    out.push(Action::BmcClockGet);
    out.push(Action::BmcClockSync);
    out.push(Action::NtpGet);
    out.push(Action::NtpSet(NtpSet {
        servers: Some(vec!["10.0.0.1".into(), "ntp.example.org".into()]),
        enabled: Some(true),
    }));
    out.push(Action::NtpSet(NtpSet { servers: None, enabled: Some(false) }));
    out.push(Action::NtpSet(NtpSet { servers: Some(vec![]), enabled: None }));
    out.push(Action::BmcCertGet);
    out.push(Action::BmcCertReplace(BmcCertReplace {
        certificate_pem: "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n".into(),
        private_key_pem: Secret::new("-----BEGIN PRIVATE KEY-----\nMAMCAQA=\n-----END PRIVATE KEY-----\n"),
    }));
    out.push(Action::PowerReading);
    out.push(Action::PowerLimitGet);
    out.push(Action::PowerLimitSet(PowerLimitSet { watts: Some(450), active: Some(true) }));
    out.push(Action::PowerLimitSet(PowerLimitSet { watts: None, active: Some(false) }));
    out.push(Action::PowerLimitSet(PowerLimitSet { watts: Some(65535), active: None }));
    out.push(Action::FirmwareUpdate(FirmwareUpdate {
        image_uri: Some("https://repo.example/bios.bin".into()),
        ..FirmwareUpdate::default()
    }));
    out.push(Action::FirmwareUpdate(FirmwareUpdate {
        image_file: Some("bios-2.1.bin".into()),
        ..FirmwareUpdate::default()
    }));
    out.push(Action::FirmwareUpdate(FirmwareUpdate {
        image_file: Some("BMC_fw+2.4~rc1.bin".into()),
        sha256: Some("9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08".into()),
        targets: vec!["/redfish/v1/UpdateService/FirmwareInventory/BMC".into()],
        apply_time: Some(UpdateApplyTime::OnReset),
        ..FirmwareUpdate::default()
    }));
    for (p, at) in every_transfer_protocol().into_iter().zip(every_apply_time().into_iter().cycle()) {
        out.push(Action::FirmwareUpdate(FirmwareUpdate {
            image_uri: Some("https://u:p@repo.example/bmc.bin?sig=1".into()),
            targets: vec!["/redfish/v1/UpdateService/FirmwareInventory/BMC".into()],
            transfer_protocol: Some(p),
            apply_time: Some(at),
            ..FirmwareUpdate::default()
        }));
    }
    for device in every!(BootDevice: Pxe, Disk, Cdrom, Bios, Safe, Http, None, Other) {
        out.push(Action::BootDevice(BootDeviceRequest { device, persistent: true, efi: false }));
    }
    for kind in every!(BmcResetKind: Warm, Cold) {
        out.push(Action::BmcReset(kind));
    }
    for media in every!(MediaKind: Cd, Usb) {
        out.push(Action::VirtualMedia(VirtualMediaOp::Insert { url: "https://images.example/boot.iso".into(), media }));
        out.push(Action::VirtualMedia(VirtualMediaOp::Eject { media }));
    }
    for method in every!(HttpMethod: Get, Post, Patch, Put, Delete) {
        out.push(Action::Raw(RawRequest::Redfish(RawRedfish { method, path: "/redfish/v1".into(), body: None })));
    }
    out
}

fn every_credentials() -> Vec<Credentials> {
    vec![
        Credentials::Ref("rack12-bmc".into()),
        Credentials::Inline { username: "admin".into(), password: Secret::new("pw") },
        Credentials::Sealed(SealedCredentials {
            username: "admin".into(),
            key: "XKEY".into(),
            sender: "XSENDER".into(),
            sealed: "Ym94".into(),
        }),
    ]
}

fn every_batch() -> Vec<Batch> {
    let machine = Batch {
        plan: false,
        events: Default::default(),
        id: Some(id()),
        machine: Some("rack12-node3".into()),
        bmc: None,
        actions: every_action(),
        on_error: OnError::Continue,
        deadline: Some(Duration::from_secs(300)),
    };
    let mut out = vec![
        machine,
        Batch {
            plan: true,
            events: bmcfleet_schema::EventsMode::Final,
            id: None,
            machine: Some("m".into()),
            bmc: None,
            actions: vec![Action::Inventory],
            on_error: OnError::Stop,
            deadline: None,
        },
    ];
    for (i, credentials) in every_credentials().into_iter().enumerate() {
        let protocol = every!(Protocol: Ipmi, Redfish, Amt, Auto, Sim)[i % 5];
        let full = i == 0;
        out.push(Batch {
            plan: false,
            events: Default::default(),
            id: None,
            machine: None,
            bmc: Some(BmcTarget {
                address: "[fe80::1]:623".parse().unwrap(),
                protocol,
                credentials,
                tls: if full {
                    TlsOptions {
                        insecure: true,
                        ca_pem: Some("PEM".into()),
                        pin_sha256: Some("ab".repeat(32)),
                        allow_plain_http: true,
                    }
                } else {
                    TlsOptions::default()
                },
                system_id: full.then(|| "1".into()),
                options: if full {
                    TargetOptions {
                        protocols: vec![Protocol::Redfish, Protocol::Ipmi],
                        redfish: RedfishOptions { auth: RedfishAuth::Session },
                        ipmi: IpmiOptions { cipher_suites: vec![17, 3], privilege: Some(IpmiPrivilege::Operator) },
                        resolved: vec!["10.0.0.5".parse().unwrap(), "::1".parse().unwrap()],
                    }
                } else {
                    TargetOptions::default()
                },
            }),
            actions: vec![Action::Power(PowerOp::Status)],
            on_error: OnError::Stop,
            deadline: None,
        });
    }
    out
}

fn every_data() -> Vec<ActionData> {
    let boot = BootDeviceRequest { device: BootDevice::Other, persistent: false, efi: true };
    vec![
        ActionData::PowerState(PowerState::Unknown),
        ActionData::BootDevice(boot.clone()),
        ActionData::BootDevicePending(boot),
        ActionData::Users(vec![
            UserInfo { id: "2".into(), name: "admin".into(), role: Some(UserRole::Admin), enabled: true },
            UserInfo { id: "3".into(), name: "".into(), role: None, enabled: false },
        ]),
        ActionData::NetworkSource(NetworkSourceOp::Dhcp),
        ActionData::Raw(RawResponse { status: 200, data: vec![0, 1, 2], body: Some(json!({"Id": "1"})) }),
        ActionData::Inventory(Box::new(Inventory {
            manufacturer: Some("Contoso".into()),
            model: Some("1U".into()),
            serial: Some("S1".into()),
            firmware_version: Some("1.0".into()),
            power_state: Some(PowerState::On),
            extra: vec![("bios".into(), "2.1".into())],
            ..Default::default()
        })),
        ActionData::Inventory(Box::new(Inventory {
            processors: vec![Processor {
                id: "CPU1".into(),
                model: Some("Xeon".into()),
                manufacturer: Some("Intel".into()),
                cores: Some(32),
                threads: Some(64),
                max_speed_mhz: Some(3500),
                health: Some(Health::Ok),
            }],
            memory: vec![MemoryModule {
                id: "DIMM1".into(),
                capacity_mib: Some(32768),
                memory_type: Some("DDR5".into()),
                speed_mhz: Some(4800),
                manufacturer: Some("Hynix".into()),
                part_number: Some("HMCG".into()),
                serial: Some("M1".into()),
                health: Some(Health::Warning),
            }],
            drives: vec![Drive {
                id: "Disk.Bay.0".into(),
                model: Some("PM883".into()),
                manufacturer: Some("Samsung".into()),
                serial: Some("S1".into()),
                capacity_bytes: Some(960_197_124_096),
                media_type: Some("SSD".into()),
                protocol: Some("SATA".into()),
                firmware_version: Some("HXT7".into()),
                health: Some(Health::Ok),
            }],
            nics: vec![Nic {
                id: "NIC.1".into(),
                mac_addresses: vec!["00:11:22:33:44:55".into()],
                speed_mbps: Some(25_000),
                link_status: Some("LinkUp".into()),
                model: Some("X710".into()),
                manufacturer: Some("Intel".into()),
                firmware_version: Some("9.1".into()),
                health: None,
            }],
            power_supplies: vec![PowerSupply {
                id: "PSU1".into(),
                model: Some("PWS".into()),
                manufacturer: Some("Delta".into()),
                serial: Some("P1".into()),
                part_number: Some("PN".into()),
                capacity_w: Some(1600),
                firmware_version: Some("1.2".into()),
                health: Some(Health::Critical),
            }],
            firmware: vec![Firmware {
                id: "BMC".into(),
                name: Some("BMC".into()),
                version: Some("6.10".into()),
                updateable: Some(true),
                description: Some("BMC image".into()),
                software_id: Some("ast2600-bmc".into()),
                related: vec!["/redfish/v1/Managers/bmc".into()],
            }],
            fru: Some(Fru {
                chassis_type: Some("Rack Mount Chassis".into()),
                board_serial: Some("B1".into()),
                asset_tag: Some("A1".into()),
                ..Default::default()
            }),
            unread: vec![Section::Drives],
            truncated: vec![Section::Memory, Section::Firmware],
            ..Default::default()
        })),
        ActionData::EventLog(EventLog {
            total: Some(2),
            entries: vec![
                EventLogEntry {
                    id: "0042".into(),
                    time: Some("2024-01-01T00:00:00Z".into()),
                    severity: Some(Health::Critical),
                    sensor: Some("0x30".into()),
                    kind: Some("Temperature".into()),
                    message: "Upper Critical going high (asserted)".into(),
                    raw: Some("42000200".repeat(4)),
                    log: None,
                },
                EventLogEntry {
                    id: "1".into(),
                    message: "m".into(),
                    log: Some("SEL".into()),
                    severity: Some(Health::Warning),
                    ..EventLogEntry::default()
                },
            ],
        }),
        ActionData::NoChange(NoChange::NotInserted),
        ActionData::NoChange(NoChange::AlreadyInserted),
        ActionData::Sensors(vec![
            SensorReading {
                name: "Inlet".into(),
                kind: SensorKind::Temperature,
                value: Some(24.5),
                unit: Some("Cel".into()),
                thresholds: Thresholds {
                    lower_critical: Some(0.0),
                    lower_warning: Some(5.0),
                    upper_warning: Some(40.0),
                    upper_critical: Some(45.0),
                },
                health: Some(Health::Ok),
            },
            SensorReading {
                name: "Fan1".into(),
                kind: SensorKind::Fan,
                value: None,
                unit: None,
                thresholds: Thresholds::default(),
                health: None,
            },
        ]),
        ActionData::Bios(Bios {
            attributes: [("BootMode".to_owned(), json!("Uefi")), ("Cores".to_owned(), json!(4))].into(),
            pending: [("BootMode".to_owned(), json!("Bios"))].into(),
            registry: vec![
                BiosAttribute {
                    name: "BootMode".into(),
                    kind: "Enumeration".into(),
                    read_only: false,
                    allowed: vec!["Bios".into(), "Uefi".into()],
                    ..BiosAttribute::default()
                },
                BiosAttribute {
                    name: "Cores".into(),
                    kind: "Integer".into(),
                    read_only: true,
                    allowed: vec![],
                    lower_bound: Some(1),
                    upper_bound: Some(64),
                    max_length: None,
                },
                BiosAttribute {
                    name: "Tag".into(),
                    kind: "String".into(),
                    max_length: Some(16),
                    ..BiosAttribute::default()
                },
            ],
        }),
        ActionData::Bios(Bios::default()),
        ActionData::BiosPending(BiosPending {
            attributes: [("BootMode".to_owned(), json!("Bios"))].into(),
            apply_time: Some("OnReset".into()),
        }),
        ActionData::SecureBoot(SecureBootState {
            enabled: true,
            current_boot: Some("Enabled".into()),
            mode: Some("DeployedMode".into()),
        }),
        ActionData::SecureBoot(SecureBootState::default()),
        ActionData::Identify(IdentifyState {
            light: Some(IdentifyLight::On),
            timed: true,
            source: "chassis_status".into(),
            note: None,
        }),
        ActionData::PowerReading(PowerReading {
            watts: 300.0,
            min_watts: Some(120.0),
            max_watts: Some(450.5),
            average_watts: Some(280.0),
            interval_ms: Some(60_000),
            source: "dcmi".into(),
        }),
        ActionData::PowerReading(PowerReading { watts: 5.0, source: "PowerControl".into(), ..PowerReading::default() }),
        ActionData::PowerLimit(PowerLimit {
            watts: Some(450),
            active: Some(true),
            allowed_min: Some(100),
            allowed_max: Some(1000),
            correction_ms: Some(1000),
            exception: Some("power_off".into()),
            source: "dcmi".into(),
        }),
        ActionData::PowerLimit(PowerLimit { source: "PowerControl".into(), ..PowerLimit::default() }),
        ActionData::BmcClock(BmcClock {
            time: "2026-12-06T05:04:36+01:00".into(),
            drift_ms: -1500,
            utc_offset: Some("+01:00".into()),
            source: "DateTime".into(),
        }),
        ActionData::BmcClock(BmcClock {
            time: "2026-12-06T05:04:36Z".into(),
            source: "sel_time".into(),
            ..BmcClock::default()
        }),
        ActionData::Ntp(NtpSettings {
            servers: vec!["10.0.0.1".into()],
            enabled: Some(true),
            source: "NetworkProtocol".into(),
        }),
        ActionData::Ntp(NtpSettings { servers: vec![], enabled: None, source: "sim".into() }),
        ActionData::BmcCertificate(Box::new(BmcCertificate {
            subject: "CN=bmc-7".into(),
            issuer: "CN=ops CA".into(),
            not_before: "2026-12-01T00:00:00Z".into(),
            not_after: "2027-12-01T00:00:00Z".into(),
            not_after_unix: 1_827_619_200,
            sha256: "ab".repeat(32),
            uri: Some("/redfish/v1/Managers/1/NetworkProtocol/HTTPS/Certificates/1".into()),
            source: "tls_handshake".into(),
        })),
        ActionData::Identify(IdentifyState {
            light: None,
            source: "chassis_status".into(),
            note: Some("the BMC's Get Chassis Status does not report the identify state".into()),
            ..IdentifyState::default()
        }),
        ActionData::FirmwareUpdate(FirmwareUpdateResult {
            task: Some("/redfish/v1/TaskService/TaskMonitors/7".into()),
            state: "Completed".into(),
            percent: Some(100),
            messages: vec!["Update successful".into()],
            resumed: true,
        }),
        ActionData::FirmwareUpdate(FirmwareUpdateResult {
            state: "Accepted".into(),
            ..FirmwareUpdateResult::default()
        }),
    ]
}

fn every_result() -> Vec<ActionResult> {
    let mut out: Vec<ActionResult> = every_data()
        .into_iter()
        .enumerate()
        .map(|(i, d)| ActionResult::ok(i as u32, "power_status", Some("sim".into()), Some(d), 50))
        .collect();
    out.push(ActionResult::ok(0, "power_on", None, None, 0));
    for (i, code) in every_error_code().into_iter().enumerate() {
        out.push(ActionResult::err(i as u32, "power_cycle", Some("ipmi".into()), ErrorBody::new(code, "why"), 1));
    }
    // Plan mode: every kind of planned request, as a read and as the change.
    use bmcfleet_schema::plan::{ActionPlan, PlannedRequest};
    for (i, change) in every_planned_request().into_iter().enumerate() {
        let plan = ActionPlan { reads: every_planned_request(), reads_omitted: i as u32, change: Some(change) };
        out.push(ActionResult::ok(i as u32, "power_on", Some("redfish".into()), None, 3).with_plan(Some(plan)));
    }
    out.push(
        ActionResult::ok(0, "power_status", None, Some(ActionData::PowerState(PowerState::On)), 1)
            .with_plan(Some(ActionPlan::default())),
    );
    out.push(ActionResult::err(0, "bios_get", None, ErrorBody::new(ErrorCode::Unsupported, "no"), 1).with_plan(Some(
        ActionPlan {
            reads: vec![PlannedRequest::Sim { action: "bios_get".into(), params: String::new() }],
            ..Default::default()
        },
    )));
    out
}

/// One planned request of every protocol. The `match` has no wildcard: a
/// new protocol does not compile here until it has an example.
fn every_planned_request() -> Vec<bmcfleet_schema::plan::PlannedRequest> {
    use bmcfleet_schema::plan::PlannedRequest;
    let all = vec![
        PlannedRequest::Redfish {
            method: "PATCH".into(),
            path: "/redfish/v1/Systems/1".into(),
            body: Some(json!({"Boot": {"BootSourceOverrideTarget": "Pxe"}, "Password": "[redacted]"})),
        },
        PlannedRequest::Redfish { method: "GET".into(), path: "/redfish/v1/Systems/1".into(), body: None },
        PlannedRequest::Ipmi { netfn: 0, cmd: 2, name: Some("Chassis Control".into()), data: "01".into() },
        PlannedRequest::Ipmi { netfn: 0x2e, cmd: 1, name: None, data: "[redacted]".into() },
        PlannedRequest::Wsman {
            action:
                "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_PowerManagementService/RequestPowerStateChange"
                    .into(),
            resource_uri: "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_PowerManagementService".into(),
            selectors: [("Name".to_owned(), "Intel(r) AMT Power Management Service".to_owned())].into_iter().collect(),
            body: [("PowerState".to_owned(), "2".to_owned())].into_iter().collect(),
        },
        PlannedRequest::Wsman {
            action: "http://schemas.xmlsoap.org/ws/2004/09/transfer/Get".into(),
            resource_uri: "http://intel.com/wbem/wscim/1/amt-schema/1/AMT_GeneralSettings".into(),
            selectors: Default::default(),
            body: Default::default(),
        },
        PlannedRequest::Sim { action: "power_on".into(), params: String::new() },
    ];
    for r in &all {
        match r {
            PlannedRequest::Redfish { .. }
            | PlannedRequest::Ipmi { .. }
            | PlannedRequest::Wsman { .. }
            | PlannedRequest::Sim { .. } => {}
        }
    }
    all
}

fn batch_result(state: BatchState) -> BatchResult {
    BatchResult {
        id: id(),
        bmc: "v4-10-0-0-5".into(),
        state,
        results: every_result(),
        worker: "w1".into(),
        deliveries: 1,
        admitted_at_ms: 1,
        finished_at_ms: 2,
    }
}

fn every_state() -> Vec<BatchState> {
    every!(BatchState: Queued, Running, Succeeded, Failed, Cancelled)
}

fn batch_status(state: BatchState, full: bool) -> BatchStatus {
    BatchStatus {
        id: id(),
        bmc: "v4-10-0-0-5".into(),
        tenant: "default".into(),
        state,
        results: if full { every_result() } else { vec![] },
        in_progress: full.then_some(3),
        task: full.then(|| {
            Box::new(TaskRecord {
                index: 3,
                requested: true,
                uri: Some("/redfish/v1/TaskService/TaskMonitors/7".into()),
            })
        }),
        cancel_requested: full,
        actions: vec!["power_on".into(), "boot_device".into()],
        stream_sequence: full.then_some(12),
        worker: full.then(|| "w1".into()),
        deliveries: 2,
        admitted_at_ms: 1,
        updated_at_ms: 2,
        result: (full && state.is_final()).then(|| batch_result(state)),
    }
}

fn accepted() -> Accepted {
    Accepted { id: id(), stream_sequence: 1, duplicate: false, subject: "bmc.jobs.3.v4-10-0-0-5".into(), unowned: None }
}

fn every_reply() -> Vec<Reply> {
    vec![
        Reply::Accepted(accepted()),
        Reply::Result(batch_result(BatchState::Succeeded)),
        Reply::Status(batch_status(BatchState::Running, true)),
        Reply::Cancelled { id: id(), state: BatchState::Cancelled },
        Reply::Error(ErrorBody::new(ErrorCode::BmcQueueFull, "full")),
        Reply::Rollout(rollout_view(true)),
        Reply::Rollout(rollout_view(false)),
        Reply::Rollouts { rollouts: vec![rollout_record(false), rollout_record(true)] },
        Reply::Discovery(discover_report()),
        Reply::ConsoleLog(bmcfleet_schema::ConsoleLogPage {
            machine: "node-1".into(),
            entries: vec![
                bmcfleet_schema::ConsoleEntry {
                    position: 7,
                    time: "2026-12-06T08:00:00Z".into(),
                    session: Some("01JD5Q8K3C2V7X9N4M6P1R0T8S".into()),
                    seq: Some(1),
                    event: Some("takeover".into()),
                    reason: Some("session … ended without closing".into()),
                    gap_bytes: Some(70_000),
                    ..Default::default()
                },
                bmcfleet_schema::ConsoleEntry {
                    position: 9,
                    time: "2026-12-06T08:00:01Z".into(),
                    session: Some("01JD5Q8K3C2V7X9N4M6P1R0T8S".into()),
                    seq: Some(2),
                    lost: Some(12),
                    data: "bG9naW46IA==".into(),
                    ..Default::default()
                },
            ],
            next: Some(9),
            more: true,
        }),
        Reply::ConsoleLog(bmcfleet_schema::ConsoleLogPage { machine: "node-2".into(), ..Default::default() }),
    ]
}

fn discover_report() -> bmcfleet_schema::discover::DiscoverReport {
    use bmcfleet_schema::discover::Found;
    let ip: std::net::IpAddr = "10.20.7.4".parse().unwrap();
    let bare = |port, protocol| Found {
        address: ip,
        port,
        protocol,
        vendor: None,
        product: None,
        version: None,
        uuid: None,
        pin_sha256: None,
        asf: None,
    };
    bmcfleet_schema::discover::DiscoverReport {
        worker: "w1".into(),
        addresses: 256,
        probes: 1024,
        rate: 50,
        elapsed_ms: 20_480,
        found: vec![
            Found { version: Some("2.0".into()), asf: Some(true), ..bare(623, Protocol::Ipmi) },
            Found {
                vendor: Some("Dell".into()),
                product: Some("Integrated Dell Remote Access Controller".into()),
                version: Some("1.9.0".into()),
                uuid: Some("4c4c4544-0042-3510-8052-b3c04f4e3732".into()),
                pin_sha256: Some("ab".repeat(32)),
                ..bare(443, Protocol::Redfish)
            },
            Found { address: "fd00::7".parse().unwrap(), ..bare(16993, Protocol::Amt) },
        ],
    }
}

fn rollout_request(full: bool) -> RolloutRequest {
    RolloutRequest {
        id: full.then(id),
        selector: full.then(|| [("rack".to_owned(), "12".to_owned())].into()),
        machines: if full { vec![] } else { vec!["node-1".into(), "node-2".into()] },
        actions: vec![Action::Power(PowerOp::Cycle), Action::Power(PowerOp::Status)],
        on_error: OnError::Continue,
        max_parallel: full.then_some(8),
        canary: full.then_some(2),
        canary_successes: full.then_some(1),
        stop_after_failures: full.then_some(3),
        deadline: full.then(|| Duration::from_secs(3600)),
        batch_deadline: full.then(|| Duration::from_secs(600)),
        plan: full,
    }
}

fn rollout_record(full: bool) -> RolloutRecord {
    let mut r = RolloutRecord::new(id(), &rollout_request(full), "tenant-a", "tenant:tenant-a", 10, 1);
    if full {
        r.start(2);
        r.start(2);
        r.finish(0, PartOutcome::Succeeded, 3);
        r.stop = Some(StopReason::Failures);
        r.finished_at_ms = Some(4);
        r.state = RolloutState::Failed;
    }
    r
}

fn rollout_view(full: bool) -> RolloutView {
    let parts = if full {
        vec![
            PartView {
                index: 0,
                machine: "node-1".into(),
                batch: id(),
                state: PartState::Succeeded,
                error: None,
                plan: Some(
                    "POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset {\"ResetType\":\"ForceOff\"}".into(),
                ),
            },
            PartView {
                index: 1,
                machine: "node-2".into(),
                batch: id(),
                state: PartState::Refused,
                error: Some(ErrorBody::new(ErrorCode::MachineNotFound, "gone")),
                plan: None,
            },
        ]
    } else {
        vec![]
    };
    RolloutView { rollout: rollout_record(full), parts, duplicate: full }
}

fn every_rollout_event() -> Vec<RolloutEvent> {
    let counts = Counts { succeeded: 3, failed: 1, cancelled: 0, refused: 1 };
    let kinds = vec![
        RolloutEventKind::RolloutStarted { machines: 10, actions: vec!["power_on".into()] },
        RolloutEventKind::RolloutProgress {
            index: 4,
            machine: "node-5".into(),
            batch: id(),
            outcome: PartOutcome::Failed,
            counts,
            error: Some(ErrorBody::new(ErrorCode::BmcError, "no")),
        },
        RolloutEventKind::RolloutProgress {
            index: 5,
            machine: "node-6".into(),
            batch: id(),
            outcome: PartOutcome::Succeeded,
            counts,
            error: None,
        },
        RolloutEventKind::RolloutPaused,
        RolloutEventKind::RolloutResumed,
        RolloutEventKind::RolloutAborting,
        RolloutEventKind::RolloutFinished {
            state: RolloutState::Aborted,
            counts,
            not_started: 5,
            stop: Some(StopReason::Aborted),
        },
        RolloutEventKind::RolloutFinished { state: RolloutState::Succeeded, counts, not_started: 0, stop: None },
    ];
    kinds.into_iter().map(|event| RolloutEvent { rollout: id(), at_ms: 5, event }).collect()
}

fn every_event() -> Vec<Event> {
    let kinds = vec![
        EventKind::ActionStarted { index: 0, action: "power_on".into() },
        EventKind::ActionFinished { result: every_result().pop().unwrap() },
        EventKind::ActionProgress {
            index: 1,
            action: "firmware_update".into(),
            percent: Some(40),
            state: Some("Running".into()),
        },
        EventKind::ActionProgress { index: 1, action: "firmware_update".into(), percent: None, state: None },
        EventKind::BatchFinished { result: batch_result(BatchState::Failed) },
    ];
    kinds.into_iter().map(|event| Event { batch: id(), at_ms: 5, event }).collect()
}

fn machine_state(contactable: bool) -> MachineState {
    MachineState {
        machine: "rack12-node3".into(),
        tenant: "default".into(),
        power: contactable.then_some(PowerState::On),
        contactable,
        error_code: (!contactable).then_some(ErrorCode::Timeout),
        reason: (!contactable).then(|| "no reply within 900ms".into()),
        last_seen_ms: contactable.then_some(10),
        last_changed_ms: 10,
        updated_ms: 11,
        consecutive_failures: u32::from(!contactable),
        provider: contactable.then(|| "ipmi".into()),
        firmware: contactable.then(|| "1.0".into()),
        inventory_ms: contactable.then_some(9),
        worker: "w1".into(),
        observed_ms: Some(12),
        poll_interval_ms: Some(60_000),
        stale_after_ms: Some(106_000),
        health: Some(bmcfleet_schema::health::HealthSummary {
            status: Health::Critical,
            reasons: vec!["sensor Fan 1 critical, reads 400 RPM (critical threshold: at or below 500)".into()],
            unread: vec!["event_log: unsupported".into()],
            checked_ms: 17,
        }),
        power_watts: Some(212.5),
        power_read_ms: Some(17),
        clock_drift_ms: Some(-1200),
        clock_read_ms: Some(17),
        cert_not_after_ms: Some(1_827_619_200_000),
    }
}

fn every_machine_event() -> Vec<MachineEvent> {
    let kinds = vec![
        MachineEventKind::PowerChanged { from: Some(PowerState::Off), to: PowerState::On },
        MachineEventKind::PowerChanged { from: None, to: PowerState::Unknown },
        MachineEventKind::Unreachable { code: ErrorCode::Timeout, reason: "no reply".into() },
        MachineEventKind::Recovered,
        MachineEventKind::InventoryChanged {
            changes: vec![
                InventoryChange {
                    field: "firmware_version".into(),
                    from: Some("1.0".into()),
                    to: Some("2.0".into()),
                    change: Default::default(),
                },
                InventoryChange { field: "extra.bios".into(), from: None, to: None, change: Default::default() },
                InventoryChange::added("drives.Disk.Bay.1".into(), "PM883 S2".into()),
                InventoryChange::removed("memory.DIMM2".into(), "32768 MiB DDR5".into()),
                InventoryChange {
                    field: "firmware.BMC".into(),
                    from: Some("6.00".into()),
                    to: Some("6.10".into()),
                    change: ChangeKind::Changed,
                },
            ],
        },
        MachineEventKind::HealthChanged {
            from: Some(Health::Ok),
            to: Health::Critical,
            reasons: vec!["BMC rollup: system 437XR1138R2 HealthRollup critical".into()],
        },
        MachineEventKind::HealthChanged { from: None, to: Health::Ok, reasons: vec![] },
    ];
    kinds
        .into_iter()
        .enumerate()
        .map(|(i, event)| MachineEvent {
            machine: "rack12-node3".into(),
            at_ms: 12,
            event,
            state: machine_state(i % 2 == 0),
        })
        .collect()
}

fn every_machine() -> Vec<Machine> {
    let full = serde_json::from_value(json!({
        "name": "rack12-node3", "address": "10.0.0.5:623", "protocol": "redfish", "credentials": "rack12-bmc",
        "tls": {"insecure": false, "ca_pem": "PEM"}, "system_id": "1", "protocols": ["redfish", "ipmi"],
        "redfish": {"auth": "basic"}, "poll_interval": "5m", "desired_power": "on",
        "ipmi": {"cipher_suites": [17], "privilege": "user"}, "labels": {"rack": "12"}, "tenant": "acme"
    }))
    .expect("a full machine record");
    let small = serde_json::from_value(json!({"name": "m", "address": "bmc.example", "credentials": "c"})).unwrap();
    vec![full, small]
}

/// Every example, each with the schema it must satisfy.
fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (i, b) in every_batch().iter().enumerate() {
        out.push(case(format!("batch {i}"), "batch.json", b));
    }
    for a in every_action() {
        let b = Batch {
            plan: false,
            events: Default::default(),
            id: None,
            machine: Some("m".into()),
            bmc: None,
            actions: vec![a.clone()],
            on_error: OnError::Stop,
            deadline: None,
        };
        out.push(case(format!("batch with action {}", action_tag(&a)), "batch.json", &b));
    }
    out.push(case("accepted", "accepted.json", &accepted()));
    let unowned = Unowned {
        partition: 3,
        since_ms: Some(1),
        message: "no worker owns partition 3 since 1970-01-01T00:00:00.001Z".into(),
    };
    out.push(case("accepted, no owner", "accepted.json", &Accepted { unowned: Some(unowned), ..accepted() }));
    for state in every_state() {
        out.push(case(format!("batch result {state:?}"), "batch-result.json", &batch_result(state)));
        out.push(case(format!("batch status {state:?} (full)"), "batch-status.json", &batch_status(state, true)));
        out.push(case(format!("batch status {state:?} (minimal)"), "batch-status.json", &batch_status(state, false)));
    }
    for r in every_reply() {
        out.push(case(format!("reply {}", reply_tag(&r)), "reply.json", &r));
    }
    for e in every_event() {
        out.push(case(format!("event {}", event_tag(&e.event)), "event.json", &e));
    }
    for e in every_machine_event() {
        out.push(case(format!("machine event {}", e.event.name()), "machine-event.json", &e));
    }
    for c in [true, false] {
        out.push(case(format!("machine state contactable={c}"), "machine-state.json", &machine_state(c)));
    }
    {
        use bmcfleet_schema::state::{PartitionSeen, SeenAt};
        let seen = PartitionSeen {
            partition: 3,
            worker: "w1".into(),
            at_ms: 20,
            machines: [
                (
                    "rack12-node3".to_owned(),
                    SeenAt { observed_ms: 19, last_seen_ms: Some(19), stale_after_ms: Some(106_000) },
                ),
                ("rack12-node4".to_owned(), SeenAt { observed_ms: 18, last_seen_ms: None, stale_after_ms: None }),
            ]
            .into(),
        };
        out.push(case("partition seen", "partition-seen.json", &seen));
    }
    for (i, m) in every_machine().iter().enumerate() {
        out.push(case(format!("machine {i}"), "machine.json", m));
    }
    for code in every_error_code() {
        out.push(case(format!("error {code}"), "error-body.json", &ErrorBody::new(code, "why")));
    }
    out.push(case("id request", "id-request.json", &IdRequest { id: id() }));
    out.push(case("rollout id request", "id-request.json", &bmcfleet_schema::rollout::RolloutIdRequest { id: id() }));
    for full in [true, false] {
        out.push(case(format!("rollout request full={full}"), "rollout-request.json", &rollout_request(full)));
    }
    out.push(case(
        "rollout status request",
        "rollout-status-request.json",
        &RolloutStatusRequest { id: id(), from: 5, limit: 100 },
    ));
    out.push(case("rollout list request", "rollout-list-request.json", &RolloutListRequest { all: true }));
    let discover = bmcfleet_schema::discover::DiscoverRequest {
        targets: vec!["10.20.7.0/24".into(), "10.20.8.9".into()],
        ports: bmcfleet_schema::discover::DiscoverPorts { ipmi: vec![623], redfish: vec![443, 8443], amt: vec![] },
        rate: Some(20),
        timeout_ms: Some(500),
    };
    out.push(case("discover request", "discover-request.json", &discover));
    out.push(case("discover request (defaults)", "discover-request.json", &json!({"targets": ["10.20.7.0/24"]})));
    out.push(case("discover report", "discover-report.json", &discover_report()));
    out.push(case(
        "console log request",
        "console-log-request.json",
        &bmcfleet_schema::ConsoleLogRequest {
            machine: "node-1".into(),
            after: Some(9),
            since: Some("10m".into()),
            max_bytes: Some(4096),
        },
    ));
    out.push(case(
        "console log request (machine only)",
        "console-log-request.json",
        &bmcfleet_schema::ConsoleLogRequest { machine: "node-1".into(), ..Default::default() },
    ));
    out.push(case("rollout list request (default)", "rollout-list-request.json", &RolloutListRequest::default()));
    for e in every_rollout_event() {
        out.push(case(format!("rollout event {}", e.event.name()), "rollout-event.json", &e));
    }
    out
}

/// A result reply whose first action returned `inventory`.
fn inventory_reply(inventory: Value) -> Value {
    let mut r = batch_result(BatchState::Succeeded);
    r.results.truncate(1);
    let mut v = serde_json::to_value(Reply::Result(r)).unwrap();
    v["result"]["results"][0]["data"] = json!({"inventory": inventory});
    v
}

/// Values the schemas must refuse: proves they constrain something.
fn invalid_cases() -> Vec<Case> {
    let bad = |label: &str, schema: &'static str, instance: Value| Case {
        label: label.into(),
        schema,
        instance,
        valid: false,
    };
    let batch = |actions: Value| json!({"machine": "m", "actions": actions});
    vec![
        bad(
            "unknown rollout field",
            "rollout-request.json",
            json!({"machines": ["a"], "actions": ["inventory"], "waves": 2}),
        ),
        bad("rollout without actions", "rollout-request.json", json!({"machines": ["a"], "actions": []})),
        bad(
            "rollout max_parallel 0",
            "rollout-request.json",
            json!({"machines": ["a"], "actions": ["inventory"], "max_parallel": 0}),
        ),
        bad(
            "rollout event of no kind",
            "rollout-event.json",
            json!({"rollout": id(), "at_ms": 1, "event": {"type": "rollout_exploded"}}),
        ),
        bad("unknown batch field", "batch.json", json!({"machine": "m", "actions": ["inventory"], "priority": 1})),
        bad("no target", "batch.json", json!({"actions": ["inventory"]})),
        bad("plan that is no boolean", "batch.json", json!({"machine": "m", "actions": ["inventory"], "plan": "yes"})),
        bad(
            "machine and bmc",
            "batch.json",
            json!({"machine": "m", "bmc": {"address": "10.0.0.1", "credentials": {"ref": "c"}}, "actions": ["inventory"]}),
        ),
        bad("no actions", "batch.json", batch(json!([]))),
        bad("unknown power op", "batch.json", batch(json!([{"power": "sideways"}]))),
        bad("unknown action", "batch.json", batch(json!([{"reboot": {}}]))),
        bad("two keys in an action", "batch.json", batch(json!([{"power": "on", "bmc_reset": "warm"}]))),
        bad("boot device without device", "batch.json", batch(json!([{"boot_device": {"persistent": true}}]))),
        bad(
            "cipher suite 0",
            "batch.json",
            json!({"bmc": {"address": "a", "credentials": {"ref": "c"}, "options": {"ipmi": {"cipher_suites": [0]}}}, "actions": ["inventory"]}),
        ),
        bad("raw netfn out of range", "batch.json", batch(json!([{"raw": {"ipmi": {"netfn": 256, "cmd": 1}}}]))),
        bad("identify seconds 0", "batch.json", batch(json!([{"identify": {"light": "on", "seconds": 0}}]))),
        bad("identify seconds 256", "batch.json", batch(json!([{"identify": {"light": "blink", "seconds": 256}}]))),
        bad("identify light unknown", "batch.json", batch(json!([{"identify": {"light": "red"}}]))),
        bad("power limit set of nothing", "batch.json", batch(json!([{"power_limit_set": {}}]))),
        bad("ntp set of nothing", "batch.json", batch(json!([{"ntp_set": {}}]))),
        bad("ntp server with a space", "batch.json", batch(json!([{"ntp_set": {"servers": ["a b"]}}]))),
        bad(
            "certificate replace without a key",
            "batch.json",
            batch(json!([{"bmc_cert_replace": {"certificate_pem": "x"}}])),
        ),
        bad("power limit of 0 W", "batch.json", batch(json!([{"power_limit_set": {"watts": 0}}]))),
        bad("power limit beyond two bytes", "batch.json", batch(json!([{"power_limit_set": {"watts": 65536}}]))),
        bad("firmware update without an image", "batch.json", batch(json!([{"firmware_update": {"targets": []}}]))),
        bad(
            "firmware image uri and file",
            "batch.json",
            batch(json!([{"firmware_update": {"image_uri": "https://r/x.bin", "image_file": "x.bin"}}])),
        ),
        bad(
            "firmware image file with a path",
            "batch.json",
            batch(json!([{"firmware_update": {"image_file": "../etc/passwd"}}])),
        ),
        bad("firmware image file hidden", "batch.json", batch(json!([{"firmware_update": {"image_file": ".x"}}]))),
        bad(
            "firmware sha256 not hex",
            "batch.json",
            batch(json!([{"firmware_update": {"image_file": "x.bin", "sha256": "xyz"}}])),
        ),
        bad(
            "firmware sha256 with a uri",
            "batch.json",
            batch(
                json!([{"firmware_update": {"image_uri": "https://r/x.bin", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}]),
            ),
        ),
        bad(
            "firmware push with a transfer protocol",
            "batch.json",
            batch(json!([{"firmware_update": {"image_file": "x.bin", "transfer_protocol": "https"}}])),
        ),
        bad("bad deadline", "batch.json", json!({"machine": "m", "actions": ["inventory"], "deadline": "soon"})),
        bad("bad id", "batch.json", json!({"id": "not-a-ulid", "machine": "m", "actions": ["inventory"]})),
        bad("unknown error code", "error-body.json", json!({"code": "oops", "message": ""})),
        bad("unknown batch state", "batch-result.json", {
            let mut v = serde_json::to_value(batch_result(BatchState::Failed)).unwrap();
            v["state"] = json!("exploded");
            v
        }),
        bad("planned request of an unknown protocol", "batch-result.json", {
            let mut v = serde_json::to_value(batch_result(BatchState::Succeeded)).unwrap();
            let planned = v["results"].as_array().unwrap().iter().position(|r| r.get("plan").is_some()).unwrap();
            v["results"][planned]["plan"]["change"] = json!({"protocol": "telnet", "line": "reboot"});
            v
        }),
        bad(
            "unknown event kind",
            "event.json",
            json!({"batch": id().to_string(), "at_ms": 1, "event": {"action_paused": {}}}),
        ),
        bad("unknown machine event kind", "machine-event.json", {
            let mut v = serde_json::to_value(&every_machine_event()[3]).unwrap();
            v["event"] = json!("vanished");
            v
        }),
        bad("machine state without worker", "machine-state.json", {
            let mut v = serde_json::to_value(machine_state(true)).unwrap();
            v.as_object_mut().unwrap().remove("worker");
            v
        }),
        bad("unknown reply", "reply.json", json!({"maybe": {}})),
        bad("discover without targets", "discover-request.json", json!({"ports": {"ipmi": [623]}})),
        bad("discover port 0", "discover-request.json", json!({"targets": ["10.0.0.1"], "ports": {"ipmi": [0]}})),
        bad("discover unknown field", "discover-request.json", json!({"targets": ["10.0.0.1"], "register": true})),
        bad("drive without id", "reply.json", inventory_reply(json!({"drives": [{"model": "x"}]}))),
        bad(
            "negative capacity",
            "reply.json",
            inventory_reply(json!({"memory": [{"id": "DIMM1", "capacity_mib": -1}]})),
        ),
        bad("unknown inventory section", "reply.json", inventory_reply(json!({"unread": ["gpus"]}))),
        bad("unknown inventory change kind", "machine-event.json", {
            let mut v = serde_json::to_value(&every_machine_event()[4]).unwrap();
            v["event"]["inventory_changed"]["changes"][0]["change"] = json!("swapped");
            v
        }),
    ]
}

#[test]
fn every_variant_has_an_example() {
    let actions: BTreeSet<_> = every_action().iter().map(action_tag).collect();
    assert_eq!(actions.len(), ACTION_TAGS, "an Action variant without an example: {actions:?}");
    let creds: BTreeSet<_> =
        every_batch().iter().filter_map(|b| b.bmc.as_ref()).map(|t| credentials_tag(&t.credentials)).collect();
    assert_eq!(creds.len(), CREDENTIALS_TAGS, "{creds:?}");
    let data: BTreeSet<_> = every_data().iter().map(data_tag).collect();
    assert_eq!(data.len(), DATA_TAGS, "{data:?}");
    let events: BTreeSet<_> = every_event().iter().map(|e| event_tag(&e.event)).collect();
    assert_eq!(events.len(), EVENT_TAGS, "{events:?}");
    let machine_events: BTreeSet<_> = every_machine_event().iter().map(|e| machine_event_tag(&e.event)).collect();
    assert_eq!(machine_events.len(), MACHINE_EVENT_TAGS, "{machine_events:?}");
    let replies: BTreeSet<_> = every_reply().iter().map(reply_tag).collect();
    assert_eq!(replies.len(), REPLY_TAGS, "{replies:?}");
    let rollout_events: BTreeSet<_> = every_rollout_event().iter().map(|e| rollout_event_tag(&e.event)).collect();
    assert_eq!(rollout_events.len(), ROLLOUT_EVENT_TAGS, "{rollout_events:?}");
    // as_str agrees with serde for every code (the schema is checked against serde's names).
    for code in every_error_code() {
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
    }
}

#[test]
fn schema_enums_equal_the_rust_enums() {
    let defs = defs();
    for (name, rust) in enums() {
        let schema: Vec<String> = defs["$defs"][name]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("defs.json has no enum {name}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let (r, s): (BTreeSet<_>, BTreeSet<_>) = (rust.iter().collect(), schema.iter().collect());
        assert_eq!(
            r,
            s,
            "{name}: Rust {:?} vs schema {:?}",
            r.difference(&s).collect::<Vec<_>>(),
            s.difference(&r).collect::<Vec<_>>()
        );
    }
    // The event kind names in the Bmcfleet-Event header equal the schema's tags.
    let tags = |def: &str| -> BTreeSet<String> {
        defs["$defs"][def]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|alt| {
                alt.get("const")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| alt["required"][0].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let events: BTreeSet<String> = every_event().iter().map(|e| event_tag(&e.event).to_owned()).collect();
    assert_eq!(tags("EventKind"), events);
    let machine: BTreeSet<String> = every_machine_event().iter().map(|e| e.event.name().to_owned()).collect();
    assert_eq!(tags("MachineEventKind"), machine);
    let actions: BTreeSet<String> =
        every_action().iter().map(|a| action_tag(a).split('.').next().unwrap().to_owned()).collect();
    assert_eq!(tags("Action"), actions);
}

#[test]
fn rust_values_validate_against_the_schemas() {
    let Some(python) = python() else { return };
    let cases = cases();
    let complaints = check(&python, &cases);
    assert!(
        complaints.is_empty(),
        "{} of {} values do not match the schemas:\n{}",
        complaints.len(),
        cases.len(),
        complaints.join("\n")
    );
}

#[test]
fn the_schemas_refuse_invalid_values() {
    let Some(python) = python() else { return };
    let cases = invalid_cases();
    let complaints = check(&python, &cases);
    assert!(complaints.is_empty(), "{}", complaints.join("\n"));
}

/// Every ```json block of README.md and docs/*.md that is a batch or a rollout (has
/// `actions`) must validate, and must also be accepted by the Rust decoder.
#[test]
fn readme_batches_validate() {
    let mut files = vec![root().join("README.md")];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut cases = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, block) in text.split("```json").skip(1).enumerate() {
            let block = block.split("```").next().unwrap();
            let where_ = format!("{} json block {i}", file.strip_prefix(root()).unwrap().display());
            let value: Value = serde_json::from_str(block).unwrap_or_else(|e| panic!("{where_} does not parse: {e}"));
            let rollout = value.get("selector").is_some() || value.get("machines").is_some_and(Value::is_array);
            if value.get("actions").is_some() && rollout {
                let _: RolloutRequest = serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("{where_}: a rollout the decoder refuses: {e}"));
                cases.push(Case { label: where_, schema: "rollout-request.json", instance: value, valid: true });
            } else if value.get("actions").is_some() {
                let _: Batch = serde_json::from_value(value.clone())
                    .unwrap_or_else(|e| panic!("{where_}: a batch the decoder refuses: {e}"));
                cases.push(Case { label: where_, schema: "batch.json", instance: value, valid: true });
            }
        }
    }
    assert!(!cases.is_empty(), "README.md has no JSON batch");
    let Some(python) = python() else { return };
    let complaints = check(&python, &cases);
    assert!(complaints.is_empty(), "{}", complaints.join("\n"));
}

// ------------------------------------------------------------- AsyncAPI
// deploy/validate.sh validates schema/asyncapi.yaml with the official parser;
// here its names and lists are held against the Rust ones (plain text: the
// document's layout is ours).

fn asyncapi() -> String {
    std::fs::read_to_string(root().join("schema/asyncapi.yaml")).unwrap()
}

/// The `key: value` lines of the block that follows the line `header`, at
/// the block's indentation.
fn yaml_block(doc: &str, header: &str) -> Vec<(String, String)> {
    let lines = doc.lines().skip_while(|l| l.trim() != header).skip(1);
    let first = lines.clone().next().unwrap_or_else(|| panic!("asyncapi.yaml has no `{header}`"));
    let indent = first.len() - first.trim_start().len();
    lines
        .take_while(|l| l.len() - l.trim_start().len() >= indent && !l.trim().is_empty())
        .filter(|l| l.len() - l.trim_start().len() == indent)
        .filter_map(|l| {
            l.trim().split_once(':').map(|(k, v)| (k.trim().to_owned(), v.trim().trim_matches('\'').to_owned()))
        })
        .collect()
}

/// The inline `[a, b]` list of `key: [...]` (possibly over several lines) after `after`.
fn yaml_list(doc: &str, after: &str, key: &str) -> BTreeSet<String> {
    let rest = &doc[doc.find(after).unwrap_or_else(|| panic!("asyncapi.yaml has no `{after}`"))..];
    let start =
        rest.find(&format!("{key}: [")).unwrap_or_else(|| panic!("no `{key}: [` after `{after}`")) + key.len() + 3;
    let end = start + rest[start..].find(']').unwrap();
    rest[start..end].split(',').map(|s| s.trim().trim_matches('\'').to_owned()).filter(|s| !s.is_empty()).collect()
}

#[test]
fn asyncapi_error_codes_and_statuses_equal_the_rust_ones() {
    let doc = asyncapi();
    let statuses: BTreeSet<(String, String)> = yaml_block(&doc, "x-status:").into_iter().collect();
    let rust: BTreeSet<(String, String)> =
        every_error_code().into_iter().map(|c| (c.as_str().to_owned(), c.status().to_string())).collect();
    assert_eq!(
        statuses,
        rust,
        "x-status differs: only in the document {:?}, only in Rust {:?}",
        statuses.difference(&rust).collect::<Vec<_>>(),
        rust.difference(&statuses).collect::<Vec<_>>()
    );
    let listed = yaml_list(&doc, "    ErrorCode:", "enum");
    let names: BTreeSet<String> = every_error_code().into_iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(listed, names);
    let codes: BTreeSet<String> = every_error_code().into_iter().map(|c| c.status().to_string()).collect();
    assert_eq!(yaml_list(&doc, "Nats-Service-Error-Code:", "enum"), codes, "Nats-Service-Error-Code enum");
    let flat = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    for code in every_error_code() {
        let prose = format!("{} {}", code.as_str(), code.status());
        assert!(flat.contains(&prose), "the ErrorCode description lacks `{prose}`");
    }
}

#[test]
fn asyncapi_subjects_headers_and_event_kinds_equal_the_rust_ones() {
    use bmcfleet_schema::subject::{self, Subjects};
    let doc = asyncapi();
    let s = Subjects::default();
    let id: BatchId = id();
    let addresses: BTreeSet<String> = yaml_block(&doc, "channels:").into_iter().map(|(k, _)| k).collect();
    assert_eq!(addresses.len(), 8 + subject::ROLLOUT_ENDPOINTS.len() + 2 + 3 + 3 + 2, "{addresses:?}");
    let address = |channel: &str| -> String {
        let rest = &doc[doc.find(&format!("\n  {channel}:\n")).unwrap_or_else(|| panic!("no channel {channel}"))..];
        rest.lines().find_map(|l| l.trim().strip_prefix("address: ")).unwrap().to_owned()
    };
    for endpoint in subject::ENDPOINTS {
        assert_eq!(address(endpoint), subject::service_subject("bmcfleet", endpoint));
    }
    assert_eq!(address("discover"), subject::service_subject("bmcfleet", subject::DISCOVER_ENDPOINT));
    assert_eq!(address("discoverRun"), s.discover_run());
    assert_eq!(address("consoleLog"), subject::console_endpoint_subject("bmcfleet", subject::CONSOLE_ENDPOINTS[0]));
    for endpoint in subject::ROLLOUT_ENDPOINTS {
        let channel = format!("rollout{}{}", endpoint[..1].to_ascii_uppercase(), &endpoint[1..]);
        assert_eq!(address(&channel), subject::rollout_subject("bmcfleet", endpoint));
    }
    let rollout: bmcfleet_schema::rollout::RolloutId = id;
    assert_eq!(
        address("rolloutEvents").replace("{tenant}", "acme").replace("{rollout}", &rollout.to_string()),
        s.rollout_events("acme", &rollout)
    );
    let rollout_kinds: BTreeSet<String> = every_rollout_event().iter().map(|e| e.event.name().to_owned()).collect();
    assert_eq!(yaml_list(&doc, "    RolloutEventHeaders:", "enum"), rollout_kinds);
    assert_eq!(
        address("batchEvents").replace("{tenant}", "acme").replace("{batch}", &id.to_string()),
        s.events("acme", &id)
    );
    assert_eq!(
        address("machineEvents").replace("{tenant}", "acme").replace("{machine}", "n1"),
        s.machine_events("acme", "n1")
    );
    for (channel, subject) in [
        ("consoleOutput", s.console_out("acme", "n1")),
        ("consoleInput", s.console_in("acme", "n1")),
        ("consoleWatch", s.console_watch("acme", "n1")),
    ] {
        assert_eq!(address(channel).replace("{tenant}", "acme").replace("{machine}", "n1"), subject);
    }
    assert_eq!(
        yaml_list(&doc, "    ConsoleOutputHeaders:", "enum"),
        subject::CONSOLE_EVENTS.iter().map(|e| e.to_string()).collect::<BTreeSet<_>>()
    );
    for header in [
        subject::CONSOLE_SESSION_HEADER,
        subject::CONSOLE_SEQ_HEADER,
        subject::CONSOLE_LOST_HEADER,
        subject::CONSOLE_EVENT_HEADER,
        subject::CONSOLE_REASON_HEADER,
        subject::CONSOLE_GAP_BYTES_HEADER,
        subject::CONSOLE_GAP_MS_HEADER,
        subject::CONSOLE_OP_HEADER,
        subject::CONSOLE_VIEWER_HEADER,
        subject::CONTENT_TYPE,
        subject::WAIT_HEADER,
        subject::EVENT_HEADER,
        subject::WORKER_HEADER,
        "Nats-Service-Error",
        "Nats-Service-Error-Code",
        "traceparent",
    ] {
        assert!(doc.contains(&format!("        {header}:")), "header {header} is not described");
    }
    let batch_kinds: BTreeSet<String> = every_event().iter().map(|e| event_tag(&e.event).to_owned()).collect();
    assert_eq!(yaml_list(&doc, "    BatchEventHeaders:", "enum"), batch_kinds);
    let machine_kinds: BTreeSet<String> = every_machine_event().iter().map(|e| e.event.name().to_owned()).collect();
    assert_eq!(yaml_list(&doc, "    MachineEventHeaders:", "enum"), machine_kinds);
    let content_types = yaml_list(&doc, "    ContentType:", "enum");
    for ct in [bmcfleet_schema::codec::JSON, bmcfleet_schema::codec::MSGPACK] {
        assert!(content_types.contains(ct), "{ct}");
        assert_eq!(Encoding::from_content_type(Some(ct)).map(|e| e.content_type()).unwrap(), ct);
    }
    // Every JSON Schema file is referenced from the document (defs.json through them).
    for entry in std::fs::read_dir(schema_dir()).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".json") && name != "defs.json" {
            assert!(doc.contains(&format!("./json/{name}")), "{name} is not referenced from asyncapi.yaml");
        }
    }
}
