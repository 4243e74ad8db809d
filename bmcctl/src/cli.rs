//! The command line. Shared groups come from `bmcfleet_common::config`
//! (NATS, telemetry, topology, service prefix); the value enums are the
//! schema's, so a new power operation or boot device appears here by itself.

use bmcfleet_common::config::{duration, NatsArgs, OtelArgs, ServiceArgs, TopologyArgs};
use bmcfleet_schema::{BmcAddress, BootDevice, PowerOp, Protocol};
use clap::{Args, Parser, Subcommand};
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
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Power control: on, off, soft-off, cycle, reset, status, nmi.
    Power {
        op: PowerOp,
        #[command(flatten)]
        target: Target,
    },
    /// Set the next boot device.
    Boot {
        device: BootDevice,
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
    /// Submit a batch from a JSON file (`-` for standard input).
    Submit(SubmitArgs),
    /// Show a batch's status.
    Status { id: ulid::Ulid },
    /// Cancel a batch (queued: at once; running: after its current action).
    Cancel { id: ulid::Ulid },
    /// Stream events (all batches, or one batch until it finishes).
    Watch {
        /// Only this batch.
        id: Option<ulid::Ulid>,
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
    /// The audit log: admitted batches and registry changes, with who made them.
    Audit {
        /// How far back.
        #[arg(long, default_value = "24h", value_parser = duration)]
        since: Duration,
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
    /// Show one machine's record.
    Get { name: String },
    /// List machines.
    Ls,
    /// Remove a machine (its batches then fail with machine_not_found).
    Rm { name: String },
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

/// The BMC an action command addresses, and how.
#[derive(Args, Debug)]
pub struct Target {
    /// A registered machine (instead of --bmc and credentials).
    #[arg(long, conflicts_with_all = ["bmc", "cred", "user", "password_env", "insecure"], required_unless_present = "bmc")]
    pub machine: Option<String>,
    /// BMC address of an ad hoc target (where the deployment allows them):
    /// IP, [IPv6]:port or hostname[:port].
    #[arg(long)]
    pub bmc: Option<BmcAddress>,
    /// Protocol to speak.
    #[arg(long, value_enum, default_value = "auto")]
    pub protocol: Protocol,
    /// Named credential known to the workers.
    #[arg(long, conflicts_with_all = ["user", "password_env"])]
    pub cred: Option<String>,
    /// BMC user name (with --password-env).
    #[arg(long, requires = "password_env")]
    pub user: Option<String>,
    /// Environment variable holding the BMC password.
    #[arg(long, requires = "user")]
    pub password_env: Option<String>,
    /// Wait for the final result.
    #[arg(long)]
    pub wait: bool,
    /// Batch deadline.
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub deadline: Duration,
    /// Skip TLS verification of the BMC (Redfish/AMT).
    #[arg(long)]
    pub insecure: bool,
    /// Seal the password (--password-env) to the workers' public key (X...)
    /// here, so it does not travel in clear even to the gateway.
    #[arg(long, env = "BMCFLEET_WORKERS_PUBLIC_KEY", value_parser = workers_key)]
    pub workers_public_key: Option<String>,
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
        let Command::Power { op, target } = parse(&["power", "soft-off", "--bmc", "10.0.0.5", "--cred", "r"]).unwrap().command else {
            panic!("power")
        };
        assert_eq!((op, target.protocol), (PowerOp::SoftOff, Protocol::Auto));
        let Command::Boot { device, efi, persistent, .. } =
            parse(&["boot", "pxe", "--efi", "--bmc", "10.0.0.5", "--protocol", "ipmi", "--cred", "r"]).unwrap().command
        else {
            panic!("boot")
        };
        assert_eq!((device, efi, persistent), (BootDevice::Pxe, true, false));
        // `none` is a read-back value, never a request.
        assert!(parse(&["boot", "none", "--bmc", "10.0.0.5", "--cred", "r"]).is_err());
        assert!(parse(&["power", "sideways", "--bmc", "10.0.0.5", "--cred", "r"]).is_err());
    }

    #[test]
    fn shared_flags_work_after_the_subcommand() {
        let cli = parse(&["watch", "--subject-prefix", "lab", "--service-prefix", "lab.gw"]).unwrap();
        assert_eq!((cli.topology.subject_prefix.as_str(), cli.service.service_prefix.as_str()), ("lab", "lab.gw"));
        let cli = parse(&["cred", "put", "x", "--username", "u", "--password-stdin", "--workers-public-key", "X", "--replicas", "3"]).unwrap();
        assert_eq!(cli.topology.replicas, 3);
        assert!(parse(&["status", "01JD5Q8K3C2V7X9N4M6P1R0T8S", "--service-prefix", "bad..prefix"]).is_err());
    }

    #[test]
    fn credentials_are_a_name_or_a_user_with_a_password_variable() {
        assert!(parse(&["power", "on", "--bmc", "h", "--cred", "r", "--user", "u"]).is_err());
        assert!(parse(&["power", "on", "--bmc", "h", "--user", "u"]).is_err(), "--user needs --password-env");
        assert!(parse(&["boot", "pxe", "--persistent", "--once", "--bmc", "h", "--cred", "r"]).is_err());
    }
}
