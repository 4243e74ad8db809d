//! The action commands (`power`, `boot`, `inventory`, `user`, `bmc-reset`,
//! `network`, `raw`, `media`): each builds the actions of one batch from its
//! flags; the batch goes to one target, or to many machines (a fleet run,
//! [`super::fleet`]).

use crate::cli::{
    BiosCmd, BmcCertCmd, BmcClockCmd, BootArg, Command, EventLogCmd, FirmwareCmd, IdentifyCmd, MediaCmd, NetworkCmd,
    NewPassword, NtpCmd, PowerCapCmd, RawCmd, SecureBootCmd, Target, UserCmd,
};
use crate::client::Client;
use crate::Usage;
use anyhow::Context;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::{
    Action, Batch, BiosSet, BmcTarget, BootDeviceRequest, Credentials, EventLogOp, IdentifyLight, IdentifySet,
    NetworkSourceOp, OnError, PowerLimitSet, RawIpmi, RawRedfish, RawRequest, Secret, SecureBootSet, StaticIpv4,
    TlsOptions, UserOp, UserSpec, UserUpdate, VirtualMediaOp,
};
use std::process::ExitCode;

impl Target {
    /// Whether this is a fleet run: machines chosen by label or tenant,
    /// several `--machine`, or any fleet flag. One `--machine` alone is a
    /// single batch, as `--bmc` is.
    pub fn is_fleet(&self) -> bool {
        self.bmc.is_none()
            && (self.selector.is_some() || self.tenant.is_some() || self.machines.len() > 1 || self.fleet.any())
    }

    /// The batch of `actions` for this (single) target.
    pub fn batch(&self, actions: Vec<Action>) -> anyhow::Result<Batch> {
        let (machine, bmc) = match (self.machines.first(), &self.bmc) {
            (Some(name), _) => (Some(name.clone()), None),
            (None, Some(address)) => (None, Some(self.ad_hoc(address)?)),
            (None, None) => anyhow::bail!("give --machine NAME, or --bmc ADDRESS with --user and --password-env"),
        };
        Ok(Batch {
            plan: self.plan,
            events: Default::default(),
            id: None,
            machine,
            bmc,
            actions,
            on_error: OnError::Stop,
            deadline: Some(self.deadline),
        })
    }

    /// An ad hoc target as a gateway accepts one: the producer's own user
    /// and password (sealed here when the workers' key is given), no named
    /// credential, no TLS options (both are refused on ad hoc targets:
    /// they belong to a registered machine's record).
    fn ad_hoc(&self, address: &bmcfleet_schema::BmcAddress) -> anyhow::Result<BmcTarget> {
        let (Some(user), Some(var)) = (&self.user, &self.password_env) else {
            return Err(Usage("an ad hoc target (--bmc) needs --user and --password-env".into()).into());
        };
        let pw =
            std::env::var(var).with_context(|| format!("environment variable {var} (the BMC password) is not set"))?;
        let credentials = Credentials::Inline { username: user.clone(), password: Secret::new(pw) };
        let credentials = super::seal_inline(credentials, self.workers_public_key.as_deref(), address, self.deadline)?;
        Ok(BmcTarget {
            address: address.clone(),
            protocol: self.protocol,
            credentials,
            tls: TlsOptions::default(),
            system_id: None,
            options: Default::default(),
        })
    }
}

/// Read a secret or a document from `path` (`-`: standard input).
fn read_source(path: &std::path::Path) -> anyhow::Result<String> {
    if path == std::path::Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text).context("reading standard input")?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(|e| Usage(format!("cannot read {}: {e}", path.display())).into())
    }
}

/// One value from a file or standard input: one trailing newline dropped, never empty.
fn read_value(path: &std::path::Path, what: &str) -> anyhow::Result<String> {
    let text = read_source(path)?;
    let value = text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text);
    if value.is_empty() {
        return Err(Usage(format!("{what} from {} is empty", path.display())).into());
    }
    Ok(value.to_owned())
}

impl NewPassword {
    /// The new password, if one was given (from its file or variable).
    pub fn read(&self) -> anyhow::Result<Option<Secret>> {
        match (&self.new_password_file, &self.new_password_env) {
            (Some(path), _) => Ok(Some(Secret::new(read_value(path, "the new password")?))),
            (None, Some(var)) => match std::env::var(var) {
                Ok(pw) if !pw.is_empty() => Ok(Some(Secret::new(pw))),
                _ => Err(Usage(format!("environment variable {var} (the new password) is not set or empty")).into()),
            },
            (None, None) => Ok(None),
        }
    }
}

/// The target and actions of an action command (`None`: not one). Files
/// and variables the flags name (passwords, bodies, URLs) are read here.
pub fn plan(command: &Command) -> anyhow::Result<Option<(&Target, Vec<Action>)>> {
    let action = |target, action| Ok(Some((target, vec![action])));
    match command {
        Command::Power { op, target, settle: None, escalate_after: None } => action(target, Action::Power(*op)),
        Command::Power { op, target, settle, escalate_after } => {
            let request = bmcfleet_schema::PowerSettle { op: *op, settle: *settle, escalate_after: *escalate_after };
            request.validate().map_err(|why| anyhow::Error::from(Usage(why)))?;
            action(target, Action::PowerSettle(request))
        }
        Command::Boot { device: BootArg::Get, persistent, once, efi, target } => {
            if *persistent || *once || *efi {
                return Err(Usage(
                    "`boot get` reads the override: --persistent, --once and --efi are for setting one".into(),
                )
                .into());
            }
            action(target, Action::GetBootDevice)
        }
        Command::Boot { device: BootArg::Set(device), persistent, efi, target, .. } => action(
            target,
            Action::BootDevice(BootDeviceRequest { device: *device, persistent: *persistent, efi: *efi }),
        ),
        Command::Inventory { target } => action(target, Action::Inventory),
        Command::EventLog { op: EventLogCmd::Read { limit, offset, logs, target } } => action(
            target,
            Action::EventLog(EventLogOp::Read {
                limit: *limit,
                offset: *offset,
                logs: Default::default(),
                log_ids: logs.clone(),
            }),
        ),
        Command::EventLog { op: EventLogCmd::Clear { logs, target } } => {
            action(target, Action::EventLog(EventLogOp::Clear { log_ids: logs.clone() }))
        }
        Command::Sensors { target } => action(target, Action::Sensors),
        Command::Bios { op } => match op {
            BiosCmd::Get { target } => action(target, Action::BiosGet),
            BiosCmd::Set { attributes, target } => {
                action(target, Action::BiosSet(BiosSet { attributes: attributes.iter().cloned().collect() }))
            }
            BiosCmd::Reset { target } => action(target, Action::BiosReset),
        },
        Command::SecureBoot { op } => match op {
            SecureBootCmd::Get { target } => action(target, Action::SecureBootGet),
            SecureBootCmd::Enable { target } => action(target, Action::SecureBootSet(SecureBootSet { enabled: true })),
            SecureBootCmd::Disable { target } => {
                action(target, Action::SecureBootSet(SecureBootSet { enabled: false }))
            }
            SecureBootCmd::ResetKeys { kind, target } => action(target, Action::SecureBootResetKeys(*kind)),
        },
        Command::Identify { op } => {
            let set = |light, seconds| Action::Identify(IdentifySet { light, seconds });
            match op {
                IdentifyCmd::Get { target } => action(target, Action::IdentifyGet),
                IdentifyCmd::On { seconds, target } => action(target, set(IdentifyLight::On, *seconds)),
                IdentifyCmd::Blink { seconds, target } => action(target, set(IdentifyLight::Blink, *seconds)),
                IdentifyCmd::Off { target } => action(target, set(IdentifyLight::Off, None)),
            }
        }
        Command::BmcClock { op: BmcClockCmd::Get { target } } => action(target, Action::BmcClockGet),
        Command::BmcClock { op: BmcClockCmd::Sync { target } } => action(target, Action::BmcClockSync),
        Command::BmcClock { op: BmcClockCmd::Ntp { op: NtpCmd::Get { target } } } => action(target, Action::NtpGet),
        Command::BmcClock { op: BmcClockCmd::Ntp { op: NtpCmd::Set { servers, enable, disable, target } } } => {
            let set = bmcfleet_schema::NtpSet {
                servers: (!servers.is_empty()).then(|| servers.clone()),
                enabled: match (enable, disable) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                },
            };
            set.validate().map_err(|why| anyhow::Error::from(Usage(why)))?;
            action(target, Action::NtpSet(set))
        }
        Command::BmcCert { op: BmcCertCmd::Get { target } } => action(target, Action::BmcCertGet),
        Command::BmcCert { op: BmcCertCmd::Replace { cert, key, target } } => {
            let replace = bmcfleet_schema::BmcCertReplace {
                certificate_pem: read_source(cert)?,
                private_key_pem: Secret::new(read_source(key)?),
            };
            replace.validate().map_err(|why| anyhow::Error::from(Usage(why)))?;
            action(target, Action::BmcCertReplace(replace))
        }
        Command::PowerCap { op } => match op {
            PowerCapCmd::Reading { target } => action(target, Action::PowerReading),
            PowerCapCmd::Get { target } => action(target, Action::PowerLimitGet),
            PowerCapCmd::Set { watts, activate, deactivate, target } => {
                let active = match (activate, deactivate) {
                    (true, _) => Some(true),
                    (_, true) => Some(false),
                    _ => None,
                };
                action(target, Action::PowerLimitSet(PowerLimitSet { watts: *watts, active }))
            }
        },
        Command::Firmware {
            op: FirmwareCmd::Update { image, image_file, sha256, components, transfer_protocol, apply_time, target },
        } => {
            let update = bmcfleet_schema::FirmwareUpdate {
                image_uri: image.clone(),
                image_file: image_file.clone(),
                sha256: sha256.clone(),
                targets: components.clone(),
                transfer_protocol: *transfer_protocol,
                apply_time: *apply_time,
            };
            update.validate().map_err(|why| anyhow::Error::from(Usage(why)))?;
            action(target, Action::FirmwareUpdate(update))
        }
        Command::User { op } => match op {
            UserCmd::List { target } => action(target, Action::User(UserOp::List)),
            UserCmd::Create { name, role, disabled, password, target } => {
                let Some(password) = password.read()? else {
                    return Err(Usage(
                        "user create needs the new password: --new-password-file FILE or --new-password-env VAR".into(),
                    )
                    .into());
                };
                action(
                    target,
                    Action::User(UserOp::Create(UserSpec {
                        name: name.clone(),
                        password,
                        role: (*role).into(),
                        enabled: !disabled,
                    })),
                )
            }
            UserCmd::Update { name, role, enabled, password, target } => {
                let password = password.read()?;
                if role.is_none() && enabled.is_none() && password.is_none() {
                    return Err(
                        Usage("user update changes nothing: give --role, --enabled or a new password".into()).into()
                    );
                }
                let update = UserUpdate { name: name.clone(), password, role: role.map(Into::into), enabled: *enabled };
                action(target, Action::User(UserOp::Update(update)))
            }
            UserCmd::Delete { name, target } => action(target, Action::User(UserOp::Delete { name: name.clone() })),
        },
        Command::BmcReset { kind, target } => action(target, Action::BmcReset((*kind).into())),
        Command::Network { op } => match op {
            NetworkCmd::Get { target } => action(target, Action::NetworkSource(NetworkSourceOp::Get)),
            NetworkCmd::Dhcp { target } => action(target, Action::NetworkSource(NetworkSourceOp::Dhcp)),
            NetworkCmd::Static { address, netmask, gateway, target } => action(
                target,
                Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
                    address: *address,
                    netmask: *netmask,
                    gateway: *gateway,
                })),
            ),
        },
        Command::Raw { op } => match op {
            RawCmd::Ipmi { netfn, cmd, data, target } => action(
                target,
                Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: *netfn, cmd: *cmd, data: data.0.clone() })),
            ),
            RawCmd::Redfish { method, path, body_file, target } => {
                let body = match body_file {
                    Some(file) => {
                        let text = read_source(file)?;
                        Some(
                            serde_json::from_str(&text)
                                .map_err(|e| Usage(format!("{} is not JSON: {e}", file.display())))?,
                        )
                    }
                    None => None,
                };
                action(
                    target,
                    Action::Raw(RawRequest::Redfish(RawRedfish { method: (*method).into(), path: path.clone(), body })),
                )
            }
        },
        Command::Media { op } => match op {
            MediaCmd::Insert { url, url_file, media, target } => {
                let url = match (url, url_file) {
                    (Some(url), _) => url.clone(),
                    (None, Some(file)) => read_value(file, "the media URL")?,
                    (None, None) => return Err(Usage("media insert needs a URL or --url-file".into()).into()),
                };
                action(target, Action::VirtualMedia(VirtualMediaOp::Insert { url, media: (*media).into() }))
            }
            MediaCmd::Eject { media, target } => {
                action(target, Action::VirtualMedia(VirtualMediaOp::Eject { media: (*media).into() }))
            }
        },
        Command::Submit(_)
        | Command::Discover(_)
        | Command::Status { .. }
        | Command::Cancel { .. }
        | Command::Watch { .. }
        | Command::Rollout { .. }
        | Command::Keygen { .. }
        | Command::Cred { .. }
        | Command::Machine { .. }
        | Command::Audit { .. }
        | Command::Console { .. }
        | Command::Completions { .. }
        | Command::Complete { .. }
        | Command::Man { .. } => Ok(None),
    }
}

/// Run an action command: one batch, or a fleet run.
pub async fn run(
    nats: async_nats::Client,
    client: &Client,
    topology: &TopologyArgs,
    command: &Command,
) -> anyhow::Result<ExitCode> {
    let (target, actions) = plan(command)?.expect("an action command");
    // A certificate replacement on one registered machine moves its pin too.
    if matches!(command, Command::BmcCert { op: BmcCertCmd::Replace { .. } })
        && !target.plan
        && !target.is_fleet()
        && target.machines.len() == 1
    {
        return super::bmc_cert::replace(nats, client, topology, target, actions).await;
    }
    if target.is_fleet() {
        return super::fleet::run(client, topology, target, actions).await;
    }
    super::single::run(client, target, actions).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use bmcfleet_schema::{BootDevice, PowerOp, Protocol};
    use clap::Parser;
    use std::time::Duration;

    fn batch_of(args: &[&str]) -> anyhow::Result<Batch> {
        let cli = Cli::try_parse_from(std::iter::once("bmcctl").chain(args.iter().copied())).unwrap();
        let (target, actions) = plan(&cli.command)?.unwrap();
        target.batch(actions)
    }

    #[test]
    fn plan_flag_makes_a_plan_batch() {
        let b = batch_of(&["event-log", "clear", "--machine", "web-1", "--plan"]).unwrap();
        assert!(b.plan);
        let b = batch_of(&["event-log", "clear", "--machine", "web-1"]).unwrap();
        assert!(!b.plan);
    }

    #[test]
    fn flags_become_the_batch() {
        let var = "BMCCTL_TEST_FLAGS_PASSWORD";
        std::env::set_var(var, "s3cret");
        let b = batch_of(&[
            "boot",
            "pxe",
            "--persistent",
            "--bmc",
            "10.0.0.5",
            "--protocol",
            "redfish",
            "--user",
            "admin",
            "--password-env",
            var,
            "--deadline",
            "30s",
        ])
        .unwrap();
        assert_eq!(
            b.actions,
            vec![Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: false })]
        );
        let target = b.bmc.as_ref().unwrap();
        assert_eq!(target.protocol, Protocol::Redfish);
        assert_eq!(
            target.credentials,
            Credentials::Inline { username: "admin".into(), password: Secret::new("s3cret") }
        );
        // What a gateway accepts on an ad hoc target: no TLS options, no named credential.
        assert_eq!(target.tls, TlsOptions::default());
        assert_eq!(b.deadline, Some(Duration::from_secs(30)));
        let b = batch_of(&["power", "cycle", "--machine", "web-1"]).unwrap();
        assert_eq!((b.machine.as_deref(), b.bmc.is_none()), (Some("web-1"), true));
        assert_eq!(b.actions, vec![Action::Power(PowerOp::Cycle)]);
    }

    fn actions_of(args: &[&str]) -> anyhow::Result<Vec<Action>> {
        let cli = Cli::try_parse_from(std::iter::once("bmcctl").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        Ok(plan(&cli.command)?.expect("an action command").1)
    }

    #[test]
    fn every_command_is_its_action() {
        use bmcfleet_schema::*;
        let dir = tempfile_dir();
        let pw = dir.join("pw");
        std::fs::write(&pw, "n3w-secret\n").unwrap();
        let body = dir.join("body.json");
        std::fs::write(&body, r#"{"AssetTag": "r12"}"#).unwrap();
        let pw = pw.to_str().unwrap();
        let m = ["--machine", "a"];
        let cases: Vec<(Vec<&str>, Action)> = vec![
            (vec!["power", "on"], Action::Power(PowerOp::On)),
            (
                vec!["power", "soft-off", "--escalate-after", "90s"],
                Action::PowerSettle(PowerSettle {
                    op: PowerOp::SoftOff,
                    settle: None,
                    escalate_after: Some(std::time::Duration::from_secs(90)),
                }),
            ),
            (
                vec!["power", "cycle", "--settle", "3m"],
                Action::PowerSettle(PowerSettle {
                    op: PowerOp::Cycle,
                    settle: Some(std::time::Duration::from_secs(180)),
                    escalate_after: None,
                }),
            ),
            (vec!["boot", "get"], Action::GetBootDevice),
            (vec!["user", "list"], Action::User(UserOp::List)),
            (
                vec!["user", "create", "ops", "--role", "operator", "--disabled", "--new-password-file", pw],
                Action::User(UserOp::Create(UserSpec {
                    name: "ops".into(),
                    password: "n3w-secret".into(),
                    role: UserRole::Operator,
                    enabled: false,
                })),
            ),
            (
                vec!["user", "update", "ops", "--role", "no_access", "--enabled", "true"],
                Action::User(UserOp::Update(UserUpdate {
                    name: "ops".into(),
                    password: None,
                    role: Some(UserRole::NoAccess),
                    enabled: Some(true),
                })),
            ),
            (
                vec!["user", "update", "ops", "--password-file", pw],
                Action::User(UserOp::Update(UserUpdate {
                    name: "ops".into(),
                    password: Some("n3w-secret".into()),
                    role: None,
                    enabled: None,
                })),
            ),
            (vec!["user", "delete", "ops"], Action::User(UserOp::Delete { name: "ops".into() })),
            (vec!["bmc-reset", "warm"], Action::BmcReset(BmcResetKind::Warm)),
            (vec!["network", "get"], Action::NetworkSource(NetworkSourceOp::Get)),
            (vec!["network", "dhcp"], Action::NetworkSource(NetworkSourceOp::Dhcp)),
            (
                vec!["network", "static", "--address", "10.1.0.5", "--netmask", "255.255.255.0"],
                Action::NetworkSource(NetworkSourceOp::Static(StaticIpv4 {
                    address: [10, 1, 0, 5].into(),
                    netmask: [255, 255, 255, 0].into(),
                    gateway: None,
                })),
            ),
            (
                vec!["raw", "ipmi", "--netfn", "0x06", "--cmd", "0x01"],
                Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 6, cmd: 1, data: vec![] })),
            ),
            (
                vec!["raw", "ipmi", "--netfn", "0x30", "--cmd", "2", "--data", "de ad"],
                Action::Raw(RawRequest::Ipmi(RawIpmi { netfn: 0x30, cmd: 2, data: vec![0xde, 0xad] })),
            ),
            (
                vec!["raw", "redfish", "patch", "/redfish/v1/Systems/1", "--body-file", body.to_str().unwrap()],
                Action::Raw(RawRequest::Redfish(RawRedfish {
                    method: HttpMethod::Patch,
                    path: "/redfish/v1/Systems/1".into(),
                    body: Some(serde_json::json!({"AssetTag": "r12"})),
                })),
            ),
            (
                vec!["media", "insert", "https://img/x.iso"],
                Action::VirtualMedia(VirtualMediaOp::Insert { url: "https://img/x.iso".into(), media: MediaKind::Cd }),
            ),
            (
                vec!["media", "eject", "--media", "usb"],
                Action::VirtualMedia(VirtualMediaOp::Eject { media: MediaKind::Usb }),
            ),
            (vec!["event-log", "read"], Action::EventLog(EventLogOp::read())),
            (
                vec!["event-log", "read", "--limit", "5", "--offset", "10"],
                Action::EventLog(EventLogOp::Read {
                    limit: Some(5),
                    offset: 10,
                    logs: Default::default(),
                    log_ids: vec![],
                }),
            ),
            (
                vec!["event-log", "read", "--log", "PostCodes"],
                Action::EventLog(EventLogOp::Read {
                    limit: None,
                    offset: 0,
                    logs: Default::default(),
                    log_ids: vec!["PostCodes".into()],
                }),
            ),
            (vec!["event-log", "clear"], Action::EventLog(EventLogOp::clear())),
            (
                vec!["event-log", "clear", "--log", "EventLog", "--log", "sel"],
                Action::EventLog(EventLogOp::clear_logs(["EventLog", "sel"])),
            ),
            (vec!["sensors"], Action::Sensors),
            (vec!["bios", "get"], Action::BiosGet),
            (
                vec!["bios", "set", "BootMode=Uefi", "Cores=4", "Vt=true"],
                Action::BiosSet(BiosSet {
                    attributes: [
                        ("BootMode".to_owned(), serde_json::json!("Uefi")),
                        ("Cores".to_owned(), serde_json::json!(4)),
                        ("Vt".to_owned(), serde_json::json!(true)),
                    ]
                    .into(),
                }),
            ),
            (vec!["bios", "reset"], Action::BiosReset),
            (vec!["identify", "get"], Action::IdentifyGet),
            (vec!["identify", "on"], Action::Identify(IdentifySet { light: IdentifyLight::On, seconds: None })),
            (
                vec!["identify", "blink", "--seconds", "30"],
                Action::Identify(IdentifySet { light: IdentifyLight::Blink, seconds: Some(30) }),
            ),
            (vec!["identify", "off"], Action::Identify(IdentifySet { light: IdentifyLight::Off, seconds: None })),
            (vec!["bmc-clock", "get"], Action::BmcClockGet),
            (vec!["bmc-clock", "sync"], Action::BmcClockSync),
            (vec!["bmc-clock", "ntp", "get"], Action::NtpGet),
            (
                vec!["bmc-clock", "ntp", "set", "--server", "10.0.0.1", "--server", "ntp.example", "--enable"],
                Action::NtpSet(bmcfleet_schema::NtpSet {
                    servers: Some(vec!["10.0.0.1".into(), "ntp.example".into()]),
                    enabled: Some(true),
                }),
            ),
            (vec!["bmc-cert", "get"], Action::BmcCertGet),
            (vec!["power-cap", "reading"], Action::PowerReading),
            (vec!["power-cap", "get"], Action::PowerLimitGet),
            (
                vec!["power-cap", "set", "--watts", "450", "--activate"],
                Action::PowerLimitSet(PowerLimitSet { watts: Some(450), active: Some(true) }),
            ),
            (
                vec!["power-cap", "set", "--deactivate"],
                Action::PowerLimitSet(PowerLimitSet { watts: None, active: Some(false) }),
            ),
            (vec!["secure-boot", "get"], Action::SecureBootGet),
            (vec!["secure-boot", "enable"], Action::SecureBootSet(SecureBootSet { enabled: true })),
            (vec!["secure-boot", "disable"], Action::SecureBootSet(SecureBootSet { enabled: false })),
            (
                vec!["secure-boot", "reset-keys", "delete-pk"],
                Action::SecureBootResetKeys(SecureBootResetKeys::DeletePk),
            ),
            (
                vec![
                    "firmware",
                    "update",
                    "--image",
                    "https://repo/bmc.bin",
                    "--component",
                    "/redfish/v1/UpdateService/FirmwareInventory/BMC",
                    "--apply-time",
                    "on-reset",
                ],
                Action::FirmwareUpdate(FirmwareUpdate {
                    image_uri: Some("https://repo/bmc.bin".into()),
                    targets: vec!["/redfish/v1/UpdateService/FirmwareInventory/BMC".into()],
                    apply_time: Some(UpdateApplyTime::OnReset),
                    ..FirmwareUpdate::default()
                }),
            ),
            (
                vec![
                    "firmware",
                    "update",
                    "--image-file",
                    "bios-2.1.bin",
                    "--sha256",
                    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
                ],
                Action::FirmwareUpdate(FirmwareUpdate {
                    image_file: Some("bios-2.1.bin".into()),
                    sha256: Some("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into()),
                    ..FirmwareUpdate::default()
                }),
            ),
        ];
        for (args, want) in cases {
            let args = [&args[..], &m[..]].concat();
            assert_eq!(actions_of(&args).unwrap(), vec![want], "{args:?}");
        }
    }

    /// A fresh directory, removed when dropped.
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn join(&self, name: &str) -> std::path::PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn tempfile_dir() -> TempDir {
        let dir = std::env::temp_dir().join(format!("bmcctl-test-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    #[test]
    fn what_a_command_cannot_mean_is_a_usage_error() {
        let usage = |args: &[&str]| {
            let e = actions_of(&[args, &["--machine", "a"]].concat()).unwrap_err();
            assert!(e.downcast_ref::<crate::Usage>().is_some(), "{args:?}: {e}");
            e.to_string()
        };
        assert!(usage(&["boot", "get", "--persistent"]).contains("boot get"));
        assert!(usage(&["power", "on", "--escalate-after", "1m"]).contains("only with op soft_off"));
        assert!(usage(&["power", "status", "--settle", "1m"]).contains("changes no power state"));
        assert!(usage(&["user", "create", "ops", "--role", "admin"]).contains("--new-password-file"));
        assert!(usage(&["user", "update", "ops"]).contains("changes nothing"));
        assert!(usage(&["firmware", "update", "--image-file", "../etc/passwd"]).contains("image_file"));
        assert!(usage(&["user", "update", "ops", "--new-password-env", "BMCCTL_TEST_UNSET_NEW_PASSWORD"])
            .contains("BMCCTL_TEST_UNSET_NEW_PASSWORD"));
        assert!(usage(&["user", "update", "ops", "--new-password-file", "/nonexistent/pw"]).contains("/nonexistent/pw"));
        let dir = tempfile_dir();
        let empty = dir.join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(usage(&["user", "update", "ops", "--new-password-file", empty.to_str().unwrap()]).contains("empty"));
        let not_json = dir.join("body");
        std::fs::write(&not_json, "{nope").unwrap();
        assert!(usage(&["raw", "redfish", "post", "/redfish/v1/x", "--body-file", not_json.to_str().unwrap()])
            .contains("not JSON"));
    }

    #[test]
    fn an_inline_password_comes_from_the_environment_and_can_be_sealed() {
        let var = "BMCCTL_TEST_PASSWORD_SEALED";
        std::env::set_var(var, "s3cret");
        let b = batch_of(&["power", "on", "--bmc", "h", "--user", "admin", "--password-env", var]).unwrap();
        assert!(
            matches!(&b.bmc.as_ref().unwrap().credentials, Credentials::Inline { username, password } if username == "admin" && password.expose() == "s3cret")
        );
        let (_, public) = bmcfleet_common::sealing::generate();
        let b = batch_of(&[
            "power",
            "on",
            "--bmc",
            "h",
            "--user",
            "admin",
            "--password-env",
            var,
            "--workers-public-key",
            &public,
        ])
        .unwrap();
        let Credentials::Sealed(sealed) = &b.bmc.as_ref().unwrap().credentials else {
            panic!("not sealed: {:?}", b.bmc)
        };
        assert!(!serde_json::to_string(sealed).unwrap().contains("s3cret"));
        let missing =
            batch_of(&["power", "on", "--bmc", "h", "--user", "admin", "--password-env", "BMCCTL_TEST_UNSET_VARIABLE"])
                .unwrap_err();
        assert!(missing.to_string().contains("BMCCTL_TEST_UNSET_VARIABLE"), "{missing}");
    }
}
