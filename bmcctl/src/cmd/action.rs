//! `bmcctl power|boot|inventory`: one action on one BMC, as a batch.

use crate::cli::{Command, Target};
use crate::client::Client;
use anyhow::Context;
use bmcfleet_schema::{Action, Batch, BmcTarget, BootDeviceRequest, Credentials, Encoding, OnError, Secret, TlsOptions};
use std::process::ExitCode;
use std::time::Duration;

impl Target {
    /// The batch of `actions` for this target.
    pub fn batch(&self, actions: Vec<Action>) -> anyhow::Result<Batch> {
        let (machine, bmc) = match (&self.machine, &self.bmc) {
            (Some(name), _) => (Some(name.clone()), None),
            (None, Some(address)) => (None, Some(self.ad_hoc(address)?)),
            (None, None) => anyhow::bail!("give --machine NAME, or --bmc ADDRESS with credentials"),
        };
        Ok(Batch { id: None, machine, bmc, actions, on_error: OnError::Stop, deadline: Some(self.deadline) })
    }

    fn ad_hoc(&self, address: &bmcfleet_schema::BmcAddress) -> anyhow::Result<BmcTarget> {
        let credentials = match (&self.cred, &self.user, &self.password_env) {
            (Some(name), _, _) => Credentials::Ref(name.clone()),
            (None, Some(user), Some(var)) => {
                let pw = std::env::var(var).with_context(|| format!("environment variable {var} (the BMC password) is not set"))?;
                Credentials::Inline { username: user.clone(), password: Secret::new(pw) }
            }
            _ => anyhow::bail!("give --cred NAME, or --user and --password-env"),
        };
        let credentials = super::seal_inline(credentials, self.workers_public_key.as_deref(), address, self.deadline)?;
        Ok(BmcTarget {
            address: address.clone(),
            protocol: self.protocol,
            credentials,
            tls: TlsOptions { insecure: self.insecure, ca_pem: None, pin_sha256: None, allow_plain_http: false },
            system_id: None,
            options: Default::default(),
        })
    }
}

/// The target and actions of an action command.
pub fn plan(command: &Command) -> Option<(&Target, Vec<Action>)> {
    Some(match command {
        Command::Power { op, target } => (target, vec![Action::Power(*op)]),
        Command::Boot { device, persistent, efi, target, .. } => {
            (target, vec![Action::BootDevice(BootDeviceRequest { device: *device, persistent: *persistent, efi: *efi })])
        }
        Command::Inventory { target } => (target, vec![Action::Inventory]),
        _ => return None,
    })
}

pub async fn run(client: &Client, command: &Command) -> anyhow::Result<ExitCode> {
    let (target, actions) = plan(command).expect("an action command");
    let batch = target.batch(actions)?;
    let timeout = target.deadline + Duration::from_secs(10);
    let reply = client.request("submit", target.wait, Encoding::Json.encode(&batch)?, timeout).await?;
    Ok(client.print(&reply))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use bmcfleet_schema::{BootDevice, PowerOp, Protocol};
    use clap::Parser;

    fn batch_of(args: &[&str]) -> anyhow::Result<Batch> {
        let cli = Cli::try_parse_from(std::iter::once("bmcctl").chain(args.iter().copied())).unwrap();
        let (target, actions) = plan(&cli.command).unwrap();
        target.batch(actions)
    }

    #[test]
    fn flags_become_the_batch() {
        let b = batch_of(&["boot", "pxe", "--persistent", "--bmc", "10.0.0.5", "--protocol", "redfish", "--cred", "rack12", "--insecure", "--deadline", "30s"]).unwrap();
        assert_eq!(b.actions, vec![Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: true, efi: false })]);
        assert_eq!(b.bmc.as_ref().unwrap().protocol, Protocol::Redfish);
        assert_eq!(b.bmc.as_ref().unwrap().credentials, Credentials::Ref("rack12".into()));
        assert!(b.bmc.as_ref().unwrap().tls.insecure);
        assert_eq!(b.deadline, Some(Duration::from_secs(30)));
        let b = batch_of(&["power", "cycle", "--bmc", "[fe80::1]:623", "--cred", "r"]).unwrap();
        assert_eq!(b.actions, vec![Action::Power(PowerOp::Cycle)]);
    }

    #[test]
    fn an_inline_password_comes_from_the_environment_and_can_be_sealed() {
        let var = "BMCCTL_TEST_PASSWORD_SEALED";
        std::env::set_var(var, "s3cret");
        let b = batch_of(&["power", "on", "--bmc", "h", "--user", "admin", "--password-env", var]).unwrap();
        assert!(matches!(&b.bmc.as_ref().unwrap().credentials, Credentials::Inline { username, password } if username == "admin" && password.expose() == "s3cret"));
        let (_, public) = bmcfleet_common::sealing::generate();
        let b = batch_of(&["power", "on", "--bmc", "h", "--user", "admin", "--password-env", var, "--workers-public-key", &public]).unwrap();
        let Credentials::Sealed(sealed) = &b.bmc.as_ref().unwrap().credentials else { panic!("not sealed: {:?}", b.bmc) };
        assert!(!serde_json::to_string(sealed).unwrap().contains("s3cret"));
        let missing = batch_of(&["power", "on", "--bmc", "h", "--user", "admin", "--password-env", "BMCCTL_TEST_UNSET_VARIABLE"]).unwrap_err();
        assert!(missing.to_string().contains("BMCCTL_TEST_UNSET_VARIABLE"), "{missing}");
    }
}
