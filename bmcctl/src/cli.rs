//! The command line. Shared groups come from `bmcfleet_common::config`
//! (NATS, telemetry, topology, service prefix); the value enums are the
//! schema's where the schema derives them, so a new power operation or boot
//! device appears here by itself. The schema's other action enums (user
//! roles, BMC reset kinds, media kinds, HTTP methods) have a flag twin
//! here, converted by an exhaustive `match` so a new variant cannot be
//! forgotten.
//!
//! Every action command takes a [`Target`]: one ad hoc BMC (`--bmc`), one
//! registered machine (`--machine`), or many (`--machine` repeated,
//! `--selector`, `--tenant`: a fleet run, see [`crate::cmd::fleet`]).

use crate::output::Format;
use bmcfleet_common::config::{duration, NatsArgs, OtelArgs, ServiceArgs, TopologyArgs};
use bmcfleet_schema::{BmcAddress, BmcResetKind, BootDevice, HttpMethod, MediaKind, PowerOp, Protocol, UserRole};
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::collections::BTreeMap;
use std::time::Duration;

/// Command-line producer for bmcfleet: ordered out-of-band BMC actions.
#[derive(Parser, Debug)]
#[command(name = "bmcctl", version)]
pub struct Cli {
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub otel: OtelArgs,
    /// Subject prefix (`watch`), stream stem (`cred`), replicas (`cred put`).
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub service: ServiceArgs,
    /// Start a W3C trace for the request (`traceparent` header) and print its trace id on stderr.
    #[arg(long, global = true)]
    pub trace: bool,
    /// How to print results: `table` (human-readable), `wide` (more
    /// columns: times, batch ids, workers, last errors) or `json`
    /// (machine-readable: one document, or one line per item where a
    /// command streams: `watch`, `machine watch`, `machine ls`, `audit`, a fleet run).
    #[arg(
        long,
        short = 'o',
        global = true,
        value_enum,
        env = "BMCCTL_OUTPUT",
        default_value = "table",
        value_name = "FORMAT"
    )]
    pub output: Format,
    /// The same as `--output json` (and it wins over `--output`).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The output format: `--output`, or `json` with `--json`.
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else {
            self.output
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Power control: on, off, soft-off, cycle, reset, status, nmi.
    Power {
        op: PowerOp,
        /// How long the machine may take to show the change before
        /// `not_reached` (default: the worker's --power-settle-timeout).
        #[arg(long, value_parser = duration)]
        settle: Option<std::time::Duration>,
        /// soft-off only: still on after this long, switch it off hard.
        #[arg(long, value_parser = duration)]
        escalate_after: Option<std::time::Duration>,
        #[command(flatten)]
        target: Target,
    },
    /// Set the next boot device, or read the current override (`boot get`).
    Boot {
        device: BootArg,
        /// Boot from it every time, not just next time.
        #[arg(long, conflicts_with = "once")]
        persistent: bool,
        /// Next boot only (the default).
        #[arg(long)]
        once: bool,
        /// UEFI boot (default legacy BIOS).
        #[arg(long)]
        efi: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Read the BMC's inventory.
    Inventory {
        #[command(flatten)]
        target: Target,
    },
    /// The system event log: read (newest first, paged) or clear.
    #[command(name = "event-log")]
    EventLog {
        #[command(subcommand)]
        op: EventLogCmd,
    },
    /// Sensor readings: temperatures, fans, voltages, power, with thresholds and health.
    Sensors {
        #[command(flatten)]
        target: Target,
    },
    /// BIOS settings (Redfish): get, set (pending until the next reset), reset to defaults.
    Bios {
        #[command(subcommand)]
        op: BiosCmd,
    },
    /// UEFI secure boot (Redfish): get, enable, disable, reset-keys.
    #[command(name = "secure-boot")]
    SecureBoot {
        #[command(subcommand)]
        op: SecureBootCmd,
    },
    /// The identify light that finds the machine in the row: get, on, off,
    /// blink (`--seconds N`: on for N seconds, then off by itself; IPMI only).
    Identify {
        #[command(subcommand)]
        op: IdentifyCmd,
    },
    /// The BMC's clock: get (with its drift against the worker), sync (set
    /// it to the worker's UTC time, read back), ntp get|set (Redfish
    /// NetworkProtocol NTP servers, read back).
    #[command(name = "bmc-clock")]
    BmcClock {
        #[command(subcommand)]
        op: BmcClockCmd,
    },
    /// The BMC's HTTPS certificate: get (subject, issuer, validity,
    /// SHA-256), replace (--cert FILE --key FILE: Redfish
    /// CertificateService.ReplaceCertificate where the BMC advertises it;
    /// for a registered machine the registry's tls.pin_sha256 follows:
    /// docs/BMC_CERTIFICATES.md).
    #[command(name = "bmc-cert")]
    BmcCert {
        #[command(subcommand)]
        op: BmcCertCmd,
    },
    /// Power draw and power limit: reading, limit get, limit set (watts
    /// and/or --activate / --deactivate), read back.
    #[command(name = "power-cap")]
    PowerCap {
        #[command(subcommand)]
        op: PowerCapCmd,
    },
    /// Firmware (Redfish UpdateService): update from an image URL the BMC
    /// fetches (--image), or push an image file the workers hold in their
    /// --firmware-image-dir (--image-file), watched to the end with its
    /// percentage (give a long --deadline). Refused unless gateway and
    /// worker run with --allow-firmware-update for the machine's tenant.
    Firmware {
        #[command(subcommand)]
        op: FirmwareCmd,
    },
    /// The BMC's user accounts: list, create, update, delete.
    User {
        #[command(subcommand)]
        op: UserCmd,
    },
    /// Reset the BMC itself (not the host): warm or cold.
    BmcReset {
        kind: ResetKind,
        #[command(flatten)]
        target: Target,
    },
    /// The BMC's own network source: read it, or set DHCP or a static IPv4 address.
    Network {
        #[command(subcommand)]
        op: NetworkCmd,
    },
    /// A raw IPMI command or Redfish request (as the raw policy allows).
    Raw {
        #[command(subcommand)]
        op: RawCmd,
    },
    /// Virtual media: insert an image by URL, or eject.
    #[command(visible_alias = "virtual-media")]
    Media {
        #[command(subcommand)]
        op: MediaCmd,
    },
    /// Probe address ranges for BMCs (operators only): a worker started
    /// with --discover-allow ranges probes them, unauthenticated and at a
    /// bounded rate, and the proposed machine records are printed in the
    /// `machine apply` file format. Nothing is registered.
    Discover(DiscoverArgs),
    /// Submit a batch from a JSON file (`-` for standard input).
    Submit(SubmitArgs),
    /// Show a batch's status.
    Status { id: ulid::Ulid },
    /// Cancel a batch (queued: at once; running: after its current action).
    Cancel { id: ulid::Ulid },
    /// Stream batch events (all batches, or one batch until it finishes);
    /// machine state changes: `machine watch`.
    Watch {
        /// Only this batch.
        id: Option<ulid::Ulid>,
    },
    /// Rollouts: one request running the same actions on many machines in
    /// waves (canary, max parallel, stop after failures), driven by the
    /// gateways; it goes on if bmcctl goes away.
    Rollout {
        #[command(subcommand)]
        op: RolloutOp,
    },
    /// Create a workers' sealing key pair: the seed (SX...) goes to a new file
    /// with mode 0600 (give it to the workers: --sealing-key-file), the public
    /// key (X...) is printed (give it to the gateways and `cred put`).
    Keygen {
        /// Where to write the seed; must not exist.
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Named BMC credentials in the credentials KV bucket, sealed to the workers' key.
    Cred {
        #[command(subcommand)]
        op: CredOp,
    },
    /// The machine registry (operators only).
    Machine {
        #[command(subcommand)]
        op: MachineOp,
    },
    /// A machine's serial console (IPMI Serial over LAN): `bmcctl console
    /// MACHINE` attaches (raw terminal; `~.` at the start of a line leaves,
    /// `~B` sends a break, `~~` types a `~`); `--watch` only reads;
    /// `bmcctl console log MACHINE --since 1h` prints what was logged.
    #[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
    Console {
        #[command(subcommand)]
        op: Option<ConsoleOp>,
        /// The registered machine.
        #[arg(required = true)]
        machine: Option<String>,
        /// Read only: nothing typed is sent.
        #[arg(long)]
        watch: bool,
        /// The machine's tenant (default: read from the registry, which
        /// operators may read; tenants name their own account here).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// The audit log: admitted batches and registry changes, with who made them.
    Audit {
        /// How far back.
        #[arg(long, default_value = "24h", value_parser = duration)]
        since: Duration,
    },
    /// Print the shell completion script for bmcctl (to stdout): e.g.
    /// `bmcctl completions bash > /etc/bash_completion.d/bmcctl`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Words for the completion scripts (hidden): registered machine names,
    /// or label keys (`KEY=`) and pairs (`KEY=VALUE`), one per line; nothing
    /// (exit 0) when NATS does not answer within about two seconds.
    #[command(name = "__complete", hide = true)]
    Complete {
        #[arg(value_enum)]
        what: crate::cmd::complete::Words,
    },
    /// Print bmcctl's man page (roff, to stdout), or write it and one page per
    /// subcommand (bmcctl.1, bmcctl-machine.1, bmcctl-machine-ls.1, ...) into a directory.
    Man {
        /// Write the pages into this directory (created if missing).
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum RolloutOp {
    /// Submit a rollout from a JSON file (`-` for standard input; see
    /// docs/ROLLOUTS.md): `selector` or `machines`, `actions`, `max_parallel`,
    /// `canary`, `canary_successes`, `stop_after_failures`, `deadline`,
    /// `batch_deadline`. Prints the rollout (with `--watch`: follows it).
    Submit {
        file: String,
        /// Follow its progress until it finishes (exit 0 only if every machine succeeded).
        #[arg(long)]
        watch: bool,
    },
    /// Show a rollout: its state and counts; `--machines` lists every machine.
    Status {
        id: ulid::Ulid,
        /// Also list each machine with its batch and state.
        #[arg(long)]
        machines: bool,
    },
    /// Start no further machine (those running finish).
    Pause { id: ulid::Ulid },
    /// Go on after a pause.
    Resume { id: ulid::Ulid },
    /// Start no further machine and cancel the batches in flight.
    Abort { id: ulid::Ulid },
    /// Rollouts not finished (`--all`: finished ones too), newest first.
    List {
        #[arg(long)]
        all: bool,
    },
    /// Follow a rollout's events until it finishes (exit 0 only if every machine succeeded).
    Watch { id: ulid::Ulid },
}

#[derive(Subcommand, Debug)]
pub enum ConsoleOp {
    /// Print the machine's logged console output (the console stream), oldest first.
    Log {
        machine: String,
        /// How far back.
        #[arg(long, default_value = "1h", value_parser = duration)]
        since: Duration,
        /// The machine's tenant (default: read from the registry).
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum MachineOp {
    /// Make the registry match a machine file (YAML/JSON): add and change
    /// what differs, remove what the file lacks with --prune. Idempotent.
    Apply {
        #[arg(short = 'f', long)]
        file: String,
        /// Also remove registered machines the file does not name.
        #[arg(long)]
        prune: bool,
        /// Show the changes without writing them.
        #[arg(long)]
        dry_run: bool,
        /// Only warn about credential names that are not in the credentials
        /// bucket (`cred put`), e.g. held in the workers' --credentials-file.
        #[arg(long)]
        allow_missing_credentials: bool,
    },
    /// Register one machine (refused if the name or its host is taken).
    Add {
        name: String,
        #[command(flatten)]
        fields: MachineFields,
    },
    /// Change fields of a registered machine (only those given).
    Set {
        name: String,
        #[command(flatten)]
        fields: MachineFields,
    },
    /// Show one machine's record (JSON; `--output wide` adds its observed `state`).
    Get { name: String },
    /// List machines with their observed state (POWER, CONTACTABLE, LAST
    /// SEEN, HEALTH, from the workers' polls; `-` where none was recorded yet).
    /// `--output wide`: more columns (last error, provider, worker, watts,
    /// clock drift, health reasons, ...);
    /// `--output json`: one line per machine, its record and its `state`.
    /// NAMEs and --selector / --tenant narrow the list (all must match).
    Ls {
        /// Only these machines (each must be registered).
        #[arg(value_name = "NAME", value_parser = name)]
        names: Vec<String>,
        /// Only machines whose labels match all of these (`rack=12,role=worker`).
        #[arg(long, value_name = "KEY=VALUE,...", value_parser = selector)]
        selector: Option<Selector>,
        /// Only machines of this tenant.
        #[arg(long, value_parser = name)]
        tenant: Option<String>,
    },
    /// Stream machine state changes (power_changed, unreachable, recovered,
    /// inventory_changed, health_changed) until Ctrl-C: of every machine, the named ones, or
    /// those matching --selector / --tenant. `--output json`: one event per line.
    Watch {
        /// Only these machines.
        #[arg(value_name = "NAME", value_parser = name, conflicts_with_all = ["selector", "tenant"])]
        names: Vec<String>,
        /// Only machines whose labels match all of these (`rack=12,role=worker`),
        /// as the registry says at the time of each event.
        #[arg(long, value_name = "KEY=VALUE,...", value_parser = selector)]
        selector: Option<Selector>,
        /// Only machines of this tenant.
        #[arg(long, value_parser = name)]
        tenant: Option<String>,
    },
    /// Remove a machine (its batches then fail with machine_not_found).
    Rm { name: String },
}

#[derive(Args, Debug)]
pub struct DiscoverArgs {
    /// Addresses or CIDR ranges to probe (`10.1.2.0/24`, `10.1.2.7`); names are not resolved.
    #[arg(required = true, value_name = "CIDR")]
    pub targets: Vec<String>,
    /// Protocols to probe for (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "ipmi,redfish,amt", value_parser = discover_protocol)]
    pub protocols: Vec<bmcfleet_schema::Protocol>,
    /// UDP ports of the IPMI probe (default 623).
    #[arg(long, value_delimiter = ',', value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub ipmi_ports: Vec<u16>,
    /// TCP ports of the Redfish probe (default 443).
    #[arg(long, value_delimiter = ',', value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub redfish_ports: Vec<u16>,
    /// TCP ports of the AMT probe (default 16993,16992).
    #[arg(long, value_delimiter = ',', value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    pub amt_ports: Vec<u16>,
    /// Probes per second (default 50; the worker's --discover-rate caps it).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate: Option<u32>,
    /// One probe's timeout (50ms-10s; default 1s).
    #[arg(long, value_parser = duration)]
    pub probe_timeout: Option<Duration>,
    /// The credential the proposed records name: put it (`cred put`) or
    /// edit the file before applying it.
    #[arg(long, default_value = "discovered", value_parser = discover_credential)]
    pub credentials: String,
    /// Write the proposed machine file here instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<std::path::PathBuf>,
}

fn discover_protocol(s: &str) -> Result<bmcfleet_schema::Protocol, String> {
    match s.trim() {
        "ipmi" => Ok(bmcfleet_schema::Protocol::Ipmi),
        "redfish" => Ok(bmcfleet_schema::Protocol::Redfish),
        "amt" => Ok(bmcfleet_schema::Protocol::Amt),
        other => Err(format!("`{other}`: one of ipmi, redfish, amt")),
    }
}

fn discover_credential(s: &str) -> Result<String, String> {
    bmcfleet_schema::validate::credential_name(s).map(|()| s.to_owned()).map_err(|e| e.to_string())
}

#[derive(Args, Debug)]
pub struct SubmitArgs {
    pub file: String,
    /// Seal an inline password to the workers' public key (X...) here,
    /// so it does not travel in clear even to the gateway.
    #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY", value_parser = workers_key)]
    pub workers_public_key: Option<String>,
    /// Wait for the final result.
    #[arg(long)]
    pub wait: bool,
    /// Request timeout when waiting.
    #[arg(long, default_value = "15m", value_parser = duration)]
    pub timeout: Duration,
}

#[derive(Subcommand, Debug)]
pub enum CredOp {
    /// Seal a credential to the workers' public key and store it (replaces an
    /// existing one). The bucket is created with `--replicas` when missing.
    Put {
        name: String,
        #[arg(long)]
        username: String,
        /// Read the password from standard input (one line).
        #[arg(long, required = true)]
        password_stdin: bool,
        /// The workers' public sealing key (X...).
        #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY")]
        workers_public_key: String,
    },
    /// Remove a credential (purged: no sealed copy stays in the bucket).
    Delete { name: String },
    /// List credential names (never values).
    List,
}

/// Fields of a machine record on the command line (`machine add` needs
/// `--address` and `--credentials`).
#[derive(Args, Debug, Default)]
pub struct MachineFields {
    /// Only warn when `--credentials` names a credential that is not in the
    /// credentials bucket (`cred put`), e.g. held in the workers' --credentials-file.
    #[arg(long)]
    pub allow_missing_credentials: bool,
    /// BMC address: IP, [IPv6]:port or hostname[:port].
    #[arg(long)]
    pub address: Option<BmcAddress>,
    #[arg(long, value_enum)]
    pub protocol: Option<Protocol>,
    /// The named credential (`bmcctl cred put`) used for this machine only.
    #[arg(long)]
    pub credentials: Option<String>,
    /// The tenant owning it (default `default`).
    #[arg(long)]
    pub tenant: Option<String>,
    /// Redfish: the ComputerSystem to drive.
    #[arg(long)]
    pub system_id: Option<String>,
    /// With protocol `auto`: the protocols to try, in order (comma-separated,
    /// e.g. `redfish,ipmi`); `--protocols ''` clears the list.
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub protocols: Option<Vec<String>>,
    /// Redfish: how to authenticate (`auto`: a session, else Basic;
    /// `session`: a session only, never Basic; `basic`: Basic only).
    #[arg(long, value_enum)]
    pub redfish_auth: Option<bmcfleet_schema::RedfishAuth>,
    /// IPMI: RMCP+ cipher suites to offer, in order (comma-separated, 17
    /// and/or 3; default 17,3); `--ipmi-cipher-suites ''` clears the list.
    #[arg(long, value_delimiter = ',', num_args = 0..)]
    pub ipmi_cipher_suites: Option<Vec<String>>,
    /// IPMI: the privilege level to log in with (default administrator).
    #[arg(long, value_enum)]
    pub ipmi_privilege: Option<bmcfleet_schema::IpmiPrivilege>,
    /// A CA bundle file to trust for this BMC's TLS.
    #[arg(long)]
    pub ca_file: Option<std::path::PathBuf>,
    /// Skip TLS verification for this BMC (explicit, operator only).
    #[arg(long)]
    pub insecure: Option<bool>,
    /// Trust exactly the certificate with this SHA-256 fingerprint (hex).
    #[arg(long)]
    pub pin_sha256: Option<String>,
    /// Intel AMT: allow plain HTTP (16992) for this machine.
    #[arg(long)]
    pub allow_plain_http: Option<bool>,
    /// A label `key=value` (repeatable; `key=` removes it).
    #[arg(long = "label")]
    pub labels: Vec<String>,
}

/// The BMC an action command addresses, and how: one ad hoc BMC (`--bmc`),
/// one registered machine (`--machine`), or many (fleet run).
///
/// An ad hoc target carries only what a gateway accepts on one: the
/// producer's own user and password (inline, or sealed here with
/// `--workers-public-key`), never a named credential nor TLS options; those
/// belong to a registered machine's record (`bmcctl machine add`).
#[derive(Args, Debug)]
pub struct Target {
    /// A registered machine (instead of --bmc and credentials). Repeat it to
    /// act on several machines, one batch each (a fleet run).
    #[arg(
        long = "machine",
        value_name = "NAME",
        conflicts_with_all = ["bmc", "user", "password_env", "selector", "tenant"],
        required_unless_present_any = ["bmc", "selector", "tenant"]
    )]
    pub machines: Vec<String>,
    /// Every registered machine whose labels match all of these
    /// (`rack=12,role=worker`), one batch each (a fleet run).
    #[arg(long, value_name = "KEY=VALUE,...", value_parser = selector, conflicts_with_all = ["bmc", "user", "password_env"])]
    pub selector: Option<Selector>,
    /// Only machines of this tenant (with --selector; alone: all of the tenant's machines).
    #[arg(long, conflicts_with_all = ["bmc", "user", "password_env"])]
    pub tenant: Option<String>,
    /// BMC address of an ad hoc target, where the deployment allows them
    /// (the gateway's --ad-hoc-targets): IP, [IPv6]:port or hostname[:port].
    /// It needs --user and --password-env (the gateway must run
    /// --inline-credentials sealed).
    #[arg(long, requires = "user")]
    pub bmc: Option<BmcAddress>,
    /// Protocol to speak to an ad hoc target.
    #[arg(long, value_enum, default_value = "auto")]
    pub protocol: Protocol,
    /// BMC user name of an ad hoc target (with --password-env).
    #[arg(long, requires_all = ["password_env", "bmc"])]
    pub user: Option<String>,
    /// Environment variable holding the ad hoc target's BMC password.
    #[arg(long, requires = "user")]
    pub password_env: Option<String>,
    /// Wait for the final result: the default, for one machine as for
    /// many (exit codes: see `bmcctl --help` and docs/BMCCTL.md).
    #[arg(long, overrides_with = "no_wait")]
    pub wait: bool,
    /// Do not wait: print the accepted batch (a fleet run: the rollout,
    /// which the gateways drive on) and exit 0.
    #[arg(long, overrides_with = "wait", conflicts_with = "plan")]
    pub no_wait: bool,
    /// How long to wait for the result before exit 4 with the batch's
    /// status (a fleet run: with the rollout's id) [default: the deadline
    /// plus 10s; a fleet run: until every machine's batch finished].
    #[arg(long, value_parser = duration)]
    pub timeout: Option<Duration>,
    /// Batch deadline.
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub deadline: Duration,
    /// Plan only: run each action up to its first state-changing request
    /// and print that request (and what was read to decide) instead of
    /// sending it; nothing on the BMC changes. Waits for the result. A
    /// fleet run groups identical plans.
    #[arg(long)]
    pub plan: bool,
    /// Seal the password (--password-env) to the workers' public key (X...)
    /// here, so it does not travel in clear even to the gateway.
    #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY", value_parser = workers_key)]
    pub workers_public_key: Option<String>,
    #[command(flatten)]
    pub fleet: FleetArgs,
}

/// How a fleet run proceeds. Any of them makes even one `--machine` a fleet run.
#[derive(Args, Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FleetArgs {
    /// Batches running at once [default: 16].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "bmc")]
    pub max_parallel: Option<u32>,
    /// Run the first N machines first (in --machine order, or by name), and
    /// the others only if all N succeed.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "bmc")]
    pub canary: Option<u32>,
    /// Start no further machine once K have failed (those running finish).
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "bmc")]
    pub stop_after_failures: Option<u32>,
}

impl FleetArgs {
    /// Whether any fleet flag was given.
    pub fn any(&self) -> bool {
        *self != FleetArgs::default()
    }
}

/// Machine labels that must all match (`--selector rack=12,role=worker`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector(pub BTreeMap<String, String>);

impl Selector {
    /// Whether `labels` has every key of the selector with its value.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|(k, v)| labels.get(k) == Some(v))
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pairs: Vec<String> = self.0.iter().map(|(k, v)| format!("{k}={v}")).collect();
        f.write_str(&pairs.join(","))
    }
}

/// `key=value[,key=value...]`: no empty key or value, no key twice.
fn selector(s: &str) -> Result<Selector, String> {
    let mut out = BTreeMap::new();
    for pair in s.split(',').map(str::trim) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(format!("`{pair}` is not key=value"));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            return Err(format!("`{pair}`: both the label and its value are needed"));
        }
        if out.insert(k.to_owned(), v.to_owned()).is_some() {
            return Err(format!("label `{k}` is given twice"));
        }
    }
    Ok(Selector(out))
}

/// A machine or tenant name (a DNS label): it becomes a subject token, so
/// no wildcard or dot gets through.
fn name(s: &str) -> Result<String, String> {
    if bmcfleet_schema::machine::valid_name(s) {
        Ok(s.to_owned())
    } else {
        Err(format!("`{s}` is not a machine or tenant name ({})", bmcfleet_schema::machine::NAME_RULE))
    }
}

/// `boot`'s argument: a device to set, or `get` to read the override.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootArg {
    Get,
    Set(BootDevice),
}

impl ValueEnum for BootArg {
    fn value_variants<'a>() -> &'a [Self] {
        // The schema's settable devices, after `get`: a new one appears by itself.
        static ALL: std::sync::OnceLock<Vec<BootArg>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| {
            std::iter::once(BootArg::Get)
                .chain(BootDevice::value_variants().iter().copied().map(BootArg::Set))
                .collect()
        })
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        match self {
            BootArg::Get => Some(clap::builder::PossibleValue::new("get").help("read the current boot override")),
            BootArg::Set(d) => d.to_possible_value(),
        }
    }
}

/// `bmcctl user ...`. A new password is never an argument (it would show in
/// the process list and shell history): it comes from a file or a variable.
#[derive(Subcommand, Debug)]
pub enum UserCmd {
    /// List the BMC's users.
    List {
        #[command(flatten)]
        target: Target,
    },
    /// Create a user (an existing name is an error).
    Create {
        name: String,
        #[arg(long, value_enum)]
        role: Role,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
        #[command(flatten)]
        password: NewPassword,
        #[command(flatten)]
        target: Target,
    },
    /// Change a user: only what is given (a missing user is an error, never created).
    Update {
        name: String,
        #[arg(long, value_enum)]
        role: Option<Role>,
        /// Enable (true) or disable (false) the user.
        #[arg(long)]
        enabled: Option<bool>,
        #[command(flatten)]
        password: NewPassword,
        #[command(flatten)]
        target: Target,
    },
    /// Delete a user.
    Delete {
        name: String,
        #[command(flatten)]
        target: Target,
    },
}

/// Where a BMC user's new password comes from.
#[derive(Args, Debug, Default)]
pub struct NewPassword {
    /// Read the user's new password from this file (`-`: standard input);
    /// one trailing newline is dropped.
    #[arg(long, visible_alias = "password-file", value_name = "FILE", conflicts_with = "new_password_env")]
    pub new_password_file: Option<std::path::PathBuf>,
    /// Read the user's new password from this environment variable.
    #[arg(long, value_name = "VAR")]
    pub new_password_env: Option<String>,
}

/// A BMC user's role (the schema's `UserRole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Admin,
    Operator,
    User,
    Callback,
    #[value(name = "no_access", alias = "no-access")]
    NoAccess,
}

impl From<Role> for UserRole {
    fn from(r: Role) -> UserRole {
        match r {
            Role::Admin => UserRole::Admin,
            Role::Operator => UserRole::Operator,
            Role::User => UserRole::User,
            Role::Callback => UserRole::Callback,
            Role::NoAccess => UserRole::NoAccess,
        }
    }
}

/// A BMC reset (the schema's `BmcResetKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ResetKind {
    /// Restart the BMC's firmware.
    Warm,
    /// Reset the BMC's hardware.
    Cold,
}

impl From<ResetKind> for BmcResetKind {
    fn from(k: ResetKind) -> BmcResetKind {
        match k {
            ResetKind::Warm => BmcResetKind::Warm,
            ResetKind::Cold => BmcResetKind::Cold,
        }
    }
}

/// `bmcctl network ...`: the BMC's own address.
#[derive(Subcommand, Debug)]
pub enum NetworkCmd {
    /// Read the current source and address.
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// Take the address from DHCP.
    Dhcp {
        #[command(flatten)]
        target: Target,
    },
    /// A static IPv4 address.
    Static {
        #[arg(long)]
        address: std::net::Ipv4Addr,
        #[arg(long)]
        netmask: std::net::Ipv4Addr,
        #[arg(long)]
        gateway: Option<std::net::Ipv4Addr>,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl raw ...`: passthrough, bounded by the deployment's raw policy.
#[derive(Subcommand, Debug)]
pub enum RawCmd {
    /// An IPMI command: network function, command, request data.
    Ipmi {
        /// Network function (`0x06` or `6`).
        #[arg(long, value_parser = byte)]
        netfn: u8,
        /// Command (`0x01` or `1`).
        #[arg(long, value_parser = byte)]
        cmd: u8,
        /// Request data bytes in hex (`01 02 ff`, `0x01,0x02`, `0102ff`).
        #[arg(long, value_parser = hex_bytes, default_value = "")]
        data: HexBytes,
        #[command(flatten)]
        target: Target,
    },
    /// A Redfish request: method, path under /redfish/v1, optional JSON body.
    Redfish {
        #[arg(value_enum)]
        method: Method,
        /// Must start with /redfish/v1.
        path: String,
        /// The JSON body, from this file (`-`: standard input).
        #[arg(long, value_name = "FILE")]
        body_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        target: Target,
    },
}

/// Request data of a raw IPMI command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HexBytes(pub Vec<u8>);

/// An HTTP method of a raw Redfish request (the schema's `HttpMethod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Method {
    Get,
    Post,
    Patch,
    Put,
    Delete,
}

impl From<Method> for HttpMethod {
    fn from(m: Method) -> HttpMethod {
        match m {
            Method::Get => HttpMethod::Get,
            Method::Post => HttpMethod::Post,
            Method::Patch => HttpMethod::Patch,
            Method::Put => HttpMethod::Put,
            Method::Delete => HttpMethod::Delete,
        }
    }
}

/// `bmcctl event-log ...`: the system event log.
#[derive(Subcommand, Debug)]
pub enum EventLogCmd {
    /// Entries newest first.
    Read {
        /// At most this many entries (default 100, at most 1000).
        #[arg(long)]
        limit: Option<u32>,
        /// Skip this many of the newest entries first.
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// Read exactly this log, by the BMC's id (repeatable; the log
        /// column of a read shows each entry's log; Redfish: a LogService's
        /// Id or path; IPMI: `sel`). Default: the event log.
        #[arg(long = "log", value_name = "ID")]
        logs: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Erase every entry of the event log, or of the logs named with
    /// `--log` (never a diagnostic dump or crash data service): refused
    /// unless the deployment's raw policy has `allow action:event_log_clear`.
    Clear {
        /// Clear exactly this log, by the BMC's id (repeatable; see `read`).
        /// Needed where the BMC does not say which log is its event log
        /// (OpenBMC: `--log EventLog`).
        #[arg(long = "log", value_name = "ID")]
        logs: Vec<String>,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl bios ...`.
#[derive(Subcommand, Debug)]
pub enum BiosCmd {
    /// Attributes, what is pending, and the registry's types and allowed values.
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// Set attributes: NAME=VALUE (an integer or true/false is sent as such,
    /// anything else as a string); checked against the BMC's attribute
    /// registry, applied at the next reset.
    Set {
        #[arg(required = true, value_parser = bios_attribute)]
        attributes: Vec<(String, serde_json::Value)>,
        #[command(flatten)]
        target: Target,
    },
    /// Every setting back to the defaults: refused unless the raw policy has
    /// `allow action:bios_reset`.
    Reset {
        #[command(flatten)]
        target: Target,
    },
}

/// `NAME=VALUE` of `bios set`.
fn bios_attribute(s: &str) -> Result<(String, serde_json::Value), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    let value = match v {
        "true" => serde_json::Value::Bool(true),
        "false" => serde_json::Value::Bool(false),
        _ => v.parse::<i64>().map(serde_json::Value::from).unwrap_or_else(|_| serde_json::Value::String(v.to_owned())),
    };
    Ok((k.trim().to_owned(), value))
}

/// `bmcctl firmware ...`.
#[derive(Subcommand, Debug)]
pub enum FirmwareCmd {
    /// `SimpleUpdate`: the BMC fetches the image from --image (a URL with
    /// credentials or a query is sealed to the workers like a media URL).
    /// Multipart HTTP push: the worker sends --image-file, a file name in
    /// its --firmware-image-dir, to the BMC's `MultipartHttpPushUri`.
    #[command(group(clap::ArgGroup::new("image_source").required(true).args(["image", "image_file"])))]
    Update {
        /// Where the BMC fetches the image (http, https, ftp, sftp, scp, tftp, nfs, cifs).
        #[arg(long)]
        image: Option<String>,
        /// The image file to push: a plain file name in the workers' --firmware-image-dir (no path).
        #[arg(long, conflicts_with_all = ["image", "transfer_protocol"])]
        image_file: Option<String>,
        /// SHA-256 of --image-file (64 hex digits), checked by the worker before anything is sent.
        #[arg(long, requires = "image_file")]
        sha256: Option<String>,
        /// A firmware inventory item to update (`/redfish/v1/UpdateService/FirmwareInventory/...`); repeat for several.
        #[arg(long = "component")]
        components: Vec<String>,
        #[arg(long, value_enum)]
        transfer_protocol: Option<bmcfleet_schema::TransferProtocol>,
        #[arg(long, value_enum)]
        apply_time: Option<bmcfleet_schema::UpdateApplyTime>,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl secure-boot ...`.
#[derive(Subcommand, Debug)]
pub enum SecureBootCmd {
    Get {
        #[command(flatten)]
        target: Target,
    },
    Enable {
        #[command(flatten)]
        target: Target,
    },
    Disable {
        #[command(flatten)]
        target: Target,
    },
    /// Reset the keys: refused unless the raw policy has `allow action:secure_boot_reset_keys`.
    ResetKeys {
        kind: bmcfleet_schema::SecureBootResetKeys,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl identify ...`.
#[derive(Subcommand, Debug)]
pub enum IdentifyCmd {
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// On until turned off, or for `--seconds`.
    On {
        /// On for this long (1-255), then off by the BMC itself (IPMI only).
        #[arg(long)]
        seconds: Option<u16>,
        #[command(flatten)]
        target: Target,
    },
    /// Blinking until turned off, or for `--seconds` (IPMI: the same as `on`).
    Blink {
        /// Blinking for this long (1-255), then off by the BMC itself (IPMI only).
        #[arg(long)]
        seconds: Option<u16>,
        #[command(flatten)]
        target: Target,
    },
    Off {
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl bmc-clock ...`.
#[derive(Subcommand, Debug)]
pub enum BmcClockCmd {
    Get {
        #[command(flatten)]
        target: Target,
    },
    Sync {
        #[command(flatten)]
        target: Target,
    },
    /// The BMC's NTP settings (Redfish NetworkProtocol): get, or set
    /// servers and/or whether NTP is used, read back.
    Ntp {
        #[command(subcommand)]
        op: NtpCmd,
    },
}

/// `bmcctl bmc-clock ntp ...`.
#[derive(Subcommand, Debug)]
pub enum NtpCmd {
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// `--server` (repeat it, in order: the list replaces the BMC's),
    /// `--enable` / `--disable`; at least one.
    Set {
        #[arg(long = "server", value_name = "HOST")]
        servers: Vec<String>,
        #[arg(long, conflicts_with = "disable")]
        enable: bool,
        #[arg(long)]
        disable: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl bmc-cert ...`.
#[derive(Subcommand, Debug)]
pub enum BmcCertCmd {
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// Install a certificate and its private key (PEM files; `-` reads
    /// standard input). The key is sealed to the workers' key at the
    /// gateway and never shown.
    Replace {
        #[arg(long = "cert", value_name = "FILE")]
        cert: std::path::PathBuf,
        #[arg(long = "key", value_name = "FILE")]
        key: std::path::PathBuf,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl power-cap ...`.
#[derive(Subcommand, Debug)]
pub enum PowerCapCmd {
    /// Current, min, max, average watts and the interval they cover.
    Reading {
        #[command(flatten)]
        target: Target,
    },
    /// The power limit and whether it is enforced.
    Get {
        #[command(flatten)]
        target: Target,
    },
    /// Set the limit (watts) and/or activate or deactivate it.
    Set {
        /// The limit in watts (1-65535).
        #[arg(long)]
        watts: Option<u32>,
        /// Enforce the limit.
        #[arg(long, conflicts_with = "deactivate")]
        activate: bool,
        /// Stop enforcing the limit.
        #[arg(long)]
        deactivate: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// `bmcctl media ...`: virtual media.
#[derive(Subcommand, Debug)]
pub enum MediaCmd {
    /// Insert an image by URL (the BMC fetches it).
    Insert {
        /// The image URL. One carrying credentials or a signed query is
        /// better read from --url-file: arguments show in the process list.
        #[arg(required_unless_present = "url_file", conflicts_with = "url_file")]
        url: Option<String>,
        /// Read the URL from this file (`-`: standard input).
        #[arg(long, value_name = "FILE")]
        url_file: Option<std::path::PathBuf>,
        #[arg(long, value_enum, default_value = "cd")]
        media: Media,
        #[command(flatten)]
        target: Target,
    },
    /// Eject the inserted image.
    Eject {
        #[arg(long, value_enum, default_value = "cd")]
        media: Media,
        #[command(flatten)]
        target: Target,
    },
}

/// A virtual media device (the schema's `MediaKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Media {
    Cd,
    Usb,
}

impl From<Media> for MediaKind {
    fn from(m: Media) -> MediaKind {
        match m {
            Media::Cd => MediaKind::Cd,
            Media::Usb => MediaKind::Usb,
        }
    }
}

/// A byte in decimal or `0x` hex.
fn byte(s: &str) -> Result<u8, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u8::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("`{s}` is not a byte (0-255, or 0x00-0xff)"))
}

/// Hex bytes, separated by spaces, commas or colons, each with an optional
/// `0x`; a token longer than two digits is read as consecutive bytes.
fn hex_bytes(s: &str) -> Result<HexBytes, String> {
    let mut out = Vec::new();
    for token in s.split([' ', ',', ':']).filter(|t| !t.is_empty()) {
        let digits = token.strip_prefix("0x").or_else(|| token.strip_prefix("0X")).unwrap_or(token);
        let bad = || format!("`{token}` is not hex bytes");
        if digits.is_empty() || !digits.is_ascii() {
            return Err(bad());
        }
        if digits.len() <= 2 {
            out.push(u8::from_str_radix(digits, 16).map_err(|_| bad())?);
        } else if digits.len() % 2 == 0 {
            for pair in digits.as_bytes().chunks(2) {
                let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
                out.push(u8::from_str_radix(pair, 16).map_err(|_| bad())?);
            }
        } else {
            return Err(format!("`{token}`: an odd number of hex digits"));
        }
    }
    Ok(HexBytes(out))
}

/// A workers' public key (`X...`), checked at parse time like every flag.
fn workers_key(s: &str) -> Result<String, String> {
    bmcfleet_common::sealing::public_key(s).map(|k| k.public_key()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("bmcctl").chain(args.iter().copied()))
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn value_enums_are_the_schemas() {
        let Command::Power { op, target, .. } =
            parse(&["power", "soft-off", "--bmc", "10.0.0.5", "--user", "admin", "--password-env", "PW"])
                .unwrap()
                .command
        else {
            panic!("power")
        };
        assert_eq!((op, target.protocol), (PowerOp::SoftOff, Protocol::Auto));
        let Command::Boot { device, efi, persistent, .. } =
            parse(&["boot", "pxe", "--efi", "--machine", "a"]).unwrap().command
        else {
            panic!("boot")
        };
        assert_eq!((device, efi, persistent), (BootArg::Set(BootDevice::Pxe), true, false));
        // `none` is a read-back value, never a request.
        assert!(parse(&["boot", "none", "--machine", "a"]).is_err());
        assert!(parse(&["power", "sideways", "--machine", "a"]).is_err());
    }

    #[test]
    fn shared_flags_work_after_the_subcommand() {
        let cli = parse(&["watch", "--subject-prefix", "lab", "--service-prefix", "lab.gw"]).unwrap();
        assert_eq!((cli.topology.subject_prefix.as_str(), cli.service.service_prefix.as_str()), ("lab", "lab.gw"));
        let cli = parse(&[
            "cred",
            "put",
            "x",
            "--username",
            "u",
            "--password-stdin",
            "--workers-public-key",
            "X",
            "--replicas",
            "3",
        ])
        .unwrap();
        assert_eq!(cli.topology.replicas, 3);
        assert!(parse(&["status", "01JD5Q8K3C2V7X9N4M6P1R0T8S", "--service-prefix", "bad..prefix"]).is_err());
    }

    #[test]
    fn an_ad_hoc_target_carries_only_what_a_gateway_accepts_on_one() {
        let ok = |args: &[&str]| parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        ok(&["power", "on", "--bmc", "h", "--user", "u", "--password-env", "PW"]);
        ok(&["power", "on", "--bmc", "h", "--protocol", "redfish", "--user", "u", "--password-env", "PW"]);
        assert!(parse(&["power", "on", "--bmc", "h"]).is_err(), "an ad hoc target needs its user and password");
        assert!(parse(&["power", "on", "--bmc", "h", "--user", "u"]).is_err(), "--user needs --password-env");
        assert!(parse(&["power", "on", "--machine", "a", "--user", "u", "--password-env", "PW"]).is_err());
        // A named credential or TLS options on an ad hoc target are refused
        // by every gateway (`target_forbidden`): bmcctl does not offer them.
        for flag in [&["--cred", "r"][..], &["--insecure"]] {
            let args = [&["power", "on", "--bmc", "h", "--user", "u", "--password-env", "PW"][..], flag].concat();
            let e = parse(&args).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument, "{args:?}");
            let args = [&["power", "on", "--machine", "a"][..], flag].concat();
            assert_eq!(parse(&args).unwrap_err().kind(), clap::error::ErrorKind::UnknownArgument, "{args:?}");
        }
        assert!(parse(&["boot", "pxe", "--persistent", "--once", "--machine", "a"]).is_err());
    }

    #[test]
    fn a_target_is_one_bmc_or_machines_by_name_label_or_tenant() {
        let target = |args: &[&str]| match parse(&[&["inventory"], args].concat()).map(|c| c.command) {
            Ok(Command::Inventory { target }) => Ok(target),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.kind()),
        };
        let t = target(&[
            "--machine",
            "a",
            "--machine",
            "b",
            "--canary",
            "1",
            "--max-parallel",
            "4",
            "--stop-after-failures",
            "2",
        ])
        .unwrap();
        assert_eq!(t.machines, ["a", "b"]);
        assert_eq!(t.fleet, FleetArgs { max_parallel: Some(4), canary: Some(1), stop_after_failures: Some(2) });
        let t = target(&["--selector", "rack=12, role=worker", "--tenant", "tenant-a"]).unwrap();
        let want: BTreeMap<String, String> =
            [("rack", "12"), ("role", "worker")].map(|(k, v)| (k.to_owned(), v.to_owned())).into();
        assert_eq!((t.selector.unwrap().0, t.tenant.as_deref()), (want, Some("tenant-a")));
        for bad in [
            &["--selector", "rack"][..],
            &["--selector", "rack="],
            &["--selector", "rack=1,rack=2"],
            &["--machine", "a", "--selector", "rack=1"],
            &["--machine", "a", "--tenant", "t"],
            &["--machine", "a", "--bmc", "10.0.0.1"],
            &["--bmc", "10.0.0.1", "--user", "u", "--password-env", "PW", "--canary", "1"],
            &["--selector", "rack=1", "--user", "u", "--password-env", "PW"],
            &["--selector", "rack=1", "--max-parallel", "0"],
            &["--selector", "rack=1", "--stop-after-failures", "0"],
            &[],
        ] {
            assert!(target(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn every_action_has_a_command() {
        let ok = |args: &[&str]| parse(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        ok(&["boot", "get", "--machine", "a"]);
        ok(&["user", "list", "--machine", "a"]);
        ok(&["user", "create", "ops", "--role", "no_access", "--new-password-env", "PW", "--selector", "rack=1"]);
        ok(&["user", "create", "ops", "--role", "admin", "--password-file", "/dev/null", "--machine", "a"]);
        ok(&["user", "update", "ops", "--enabled", "false", "--machine", "a"]);
        ok(&["user", "delete", "ops", "--machine", "a"]);
        ok(&["bmc-reset", "cold", "--machine", "a"]);
        ok(&[
            "network",
            "static",
            "--address",
            "10.1.0.5",
            "--netmask",
            "255.255.255.0",
            "--gateway",
            "10.1.0.1",
            "--machine",
            "a",
        ]);
        ok(&["raw", "ipmi", "--netfn", "0x06", "--cmd", "1", "--data", "01 0x02,ff", "--machine", "a"]);
        ok(&["raw", "redfish", "patch", "/redfish/v1/Systems/1", "--body-file", "-", "--machine", "a"]);
        ok(&["media", "insert", "https://img/x.iso", "--media", "usb", "--machine", "a"]);
        ok(&["virtual-media", "eject", "--machine", "a"]);
        // Never a password on the command line; never both sources; a role the schema knows.
        assert!(parse(&["user", "create", "ops", "--role", "admin", "--password", "x", "--machine", "a"]).is_err());
        assert!(parse(&[
            "user",
            "create",
            "ops",
            "--role",
            "admin",
            "--new-password-file",
            "f",
            "--new-password-env",
            "V",
            "--machine",
            "a"
        ])
        .is_err());
        assert!(
            parse(&["user", "create", "ops", "--role", "root", "--new-password-env", "V", "--machine", "a"]).is_err()
        );
        assert!(parse(&[
            "network",
            "static",
            "--address",
            "10.1.0.300",
            "--netmask",
            "255.255.255.0",
            "--machine",
            "a"
        ])
        .is_err());
        assert!(parse(&["raw", "ipmi", "--netfn", "0x100", "--cmd", "1", "--machine", "a"]).is_err());
        assert!(parse(&["media", "insert", "--machine", "a"]).is_err(), "a URL or --url-file");
        // Every role of the schema has a flag value (and only those).
        let roles: Vec<String> = Role::value_variants()
            .iter()
            .map(|r| serde_json::to_value(UserRole::from(*r)).unwrap().as_str().unwrap().to_owned())
            .collect();
        let names: Vec<String> =
            Role::value_variants().iter().map(|r| r.to_possible_value().unwrap().get_name().to_owned()).collect();
        assert_eq!(roles, names, "flag values are the wire names");
    }

    #[test]
    fn machine_watch_takes_names_or_a_selector_and_tenant_never_a_wildcard() {
        let watch = |args: &[&str]| match parse(&[&["machine", "watch"], args].concat()).map(|c| c.command) {
            Ok(Command::Machine { op: MachineOp::Watch { names, selector, tenant } }) => {
                Ok((names, selector.map(|s| s.to_string()), tenant))
            }
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.kind()),
        };
        assert_eq!(watch(&[]).unwrap(), (vec![], None, None));
        assert_eq!(watch(&["web-1", "web-2"]).unwrap().0, ["web-1", "web-2"]);
        assert_eq!(
            watch(&["--selector", "rack=12", "--tenant", "tenant-a"]).unwrap(),
            (vec![], Some("rack=12".into()), Some("tenant-a".into()))
        );
        for bad in [
            &["web-1", "--selector", "rack=1"][..],
            &["web-1", "--tenant", "t"],
            &["web.*"],
            &["--tenant", ">"],
            &["--selector", "rack"],
        ] {
            assert!(watch(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn raw_bytes_read_as_hex_in_any_common_spelling() {
        assert_eq!(hex_bytes("01 0x02,ff:A0").unwrap().0, [1, 2, 0xff, 0xa0]);
        assert_eq!(hex_bytes("0x0102ff").unwrap().0, [1, 2, 0xff]);
        assert_eq!(hex_bytes("").unwrap().0, Vec::<u8>::new());
        for bad in ["0x", "123", "zz", "0x1g"] {
            assert!(hex_bytes(bad).is_err(), "{bad}");
        }
        assert_eq!((byte("0x06"), byte("6"), byte("255")), (Ok(6), Ok(6), Ok(255)));
        assert!(byte("256").is_err() && byte("0x1ff").is_err());
    }
}
