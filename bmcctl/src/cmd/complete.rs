//! `bmcctl __complete machines|labels` (hidden): the words the shell
//! completion scripts ([`super::completions`]) ask for at run time —
//! registered machine names (after `--machine`, and for `machine
//! get|set|rm|ls|watch`), label pairs `KEY=VALUE` (after `--selector`).
//! Bounded in time: a completion must never hang a shell, so when NATS does
//! not answer within [`BUDGET`] it prints nothing and exits 0.

use bmcfleet_common::config::{NatsArgs, TopologyArgs};
use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::Duration;

/// All a completion may take, connecting included.
pub const BUDGET: Duration = Duration::from_secs(2);

/// What to complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Words {
    /// Registered machine names.
    Machines,
    /// Label pairs of registered machines (`rack=12`).
    Labels,
}

async fn words(nats: &NatsArgs, topology: &TopologyArgs, what: Words) -> anyhow::Result<BTreeSet<String>> {
    let mut nats = nats.clone();
    nats.connect_timeout = nats.connect_timeout.min(BUDGET);
    let client = bmcfleet_common::nats::connect(&nats, "bmcctl-complete").await?;
    // Read only: a completion never creates the registry's bucket.
    let js = async_nats::jetstream::new(client);
    let kv = js.get_key_value(topology.subjects().machines_bucket()).await?;
    let machines = super::machine::load_all(&kv).await?;
    Ok(match what {
        Words::Machines => machines.into_keys().collect(),
        Words::Labels => machines.values().flat_map(|m| m.labels.iter().map(|(k, v)| format!("{k}={v}"))).collect(),
    })
}

/// Print the words, one a line; nothing on any failure or after [`BUDGET`].
pub async fn run(nats: &NatsArgs, topology: &TopologyArgs, what: Words) -> ExitCode {
    if let Ok(Ok(words)) = tokio::time::timeout(BUDGET, words(nats, topology, what)).await {
        for w in words {
            println!("{w}");
        }
    }
    ExitCode::SUCCESS
}
