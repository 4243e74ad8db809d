//! # bmcctl
//!
//! A command-line producer for bmcfleet: builds batches from flags (or reads
//! one from a file), sends them to the gateway's micro service, and prints
//! the reply; also follows batch events and machines' observed state
//! (`machine ls`, `machine watch`), and manages the workers' sealing key,
//! the named credentials bucket and the machine registry.
//!
//! Exit codes: one table for one machine and many, see [`exit`].
//!
//! # Layout
//! - [`cli`]: the command line (clap derive). NATS, telemetry, topology and
//!   service flags are the shared groups of `bmcfleet_common::config`; value
//!   enums are the schema's own (`PowerOp`, `BootDevice`, `Protocol`).
//! - [`client`]: requests to the gateway, replies, exit codes.
//! - [`output`]: how replies, results, events and fleet runs read, per
//!   `--output` format (`table`, `wide`, `json`).
//! - [`progress`]: the progress bar of a fleet run (indicatif, on a
//!   terminal's stderr only), and when to colour (`NO_COLOR`).
//! - [`cmd`]: one module per command; [`cmd::action`] builds the batch of
//!   every action command and [`cmd::fleet`] runs one on many machines;
//!   [`cmd::completions`] and [`cmd::man`] generate shell completions and
//!   man pages from [`cli`].

pub mod cli;
pub mod client;
pub mod cmd;
pub mod exit;
pub mod identity;
pub mod output;
pub mod progress;

/// A usage or configuration error found after parsing (a file that cannot
/// be read, a selector matching no machine): exit code 2, as clap's own.
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

use cli::{Cli, Command, MachineOp};
use std::process::ExitCode;

/// Run one command line to its exit code.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let format = cli.format();
    match &cli.command {
        Command::Keygen { out } => return cmd::keygen::run(out),
        Command::Completions { shell } => return cmd::completions::run(*shell),
        Command::Complete { what } => return Ok(cmd::complete::run(&cli.nats, &cli.topology, *what).await),
        Command::Man { out } => return cmd::man::run(out.as_deref()),
        _ => {}
    }
    // What can be checked offline is checked before connecting (a bad machine file: exit 2).
    let machine_file = match &cli.command {
        Command::Machine { op } => cmd::machine::prepare(op)?,
        _ => None,
    };
    let nats = bmcfleet_common::nats::connect(&cli.nats, "bmcctl").await?;
    if let Command::Cred { op } = &cli.command {
        return cmd::cred::run(nats, &cli.topology, op, format).await;
    }
    if let Command::Machine { op } = &cli.command {
        // Only changes are audited: reads need not ask the server who we are.
        let changes = matches!(
            op,
            MachineOp::Apply { .. } | MachineOp::Add { .. } | MachineOp::Set { .. } | MachineOp::Rm { .. }
        );
        let actor = if changes { identity::of(&nats, cli.nats.user.as_deref()).await } else { String::new() };
        return cmd::machine::run(nats, &cli.topology, op, machine_file, &actor, format).await;
    }
    if let Command::Console { op, machine, watch, tenant } = &cli.command {
        let client = client::Client::new(nats, &cli.service.service_prefix, format, async_nats::HeaderMap::new());
        return cmd::console::run(client, &cli.topology, op.as_ref(), machine.as_deref(), *watch, tenant.as_deref())
            .await;
    }
    if let Command::Audit { since } = &cli.command {
        return cmd::audit::run(nats, &cli.topology, *since, format).await;
    }
    let trace = if cli.trace { client::start_trace() } else { async_nats::HeaderMap::new() };
    let mut client = client::Client::new(nats.clone(), &cli.service.service_prefix, format, trace);
    // Who we say we are: an unverified annotation in the gateway's audit
    // log (it records the NATS identity the server vouches for).
    client.claim = identity::claim(cli.nats.user.as_deref(), std::env::var("USER").ok().as_deref());
    match &cli.command {
        Command::Power { .. }
        | Command::Boot { .. }
        | Command::Inventory { .. }
        | Command::EventLog { .. }
        | Command::Sensors { .. }
        | Command::Bios { .. }
        | Command::SecureBoot { .. }
        | Command::Identify { .. }
        | Command::PowerCap { .. }
        | Command::BmcClock { .. }
        | Command::BmcCert { .. }
        | Command::Firmware { .. }
        | Command::User { .. }
        | Command::BmcReset { .. }
        | Command::Network { .. }
        | Command::Raw { .. }
        | Command::Media { .. } => cmd::action::run(nats, &client, &cli.topology, &cli.command).await,
        Command::Discover(args) => cmd::discover::run(&client, args).await,
        Command::Submit(args) => cmd::submit::run(&client, args).await,
        Command::Status { id } => cmd::status::status(&client, *id).await,
        Command::Cancel { id } => cmd::status::cancel(&client, *id).await,
        Command::Watch { id } => cmd::watch::run(&client, &cli.topology.subjects(), *id).await,
        Command::Rollout { op } => cmd::rollout::run(&client, &cli.topology.subjects(), op).await,
        Command::Keygen { .. }
        | Command::Cred { .. }
        | Command::Machine { .. }
        | Command::Audit { .. }
        | Command::Console { .. }
        | Command::Completions { .. }
        | Command::Complete { .. }
        | Command::Man { .. } => {
            unreachable!("handled above")
        }
    }
}
