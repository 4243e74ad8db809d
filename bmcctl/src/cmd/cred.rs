//! `bmcctl cred put|delete|list`: named credentials in the credentials KV
//! bucket, each value sealed to the workers' public key. `list --output
//! json`: one JSON array of the names.

use crate::cli::CredOp;
use crate::output::Format;
use anyhow::Context;
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_common::streams;
use bmcfleet_schema::validate::credential_name;
use bmcfleet_schema::Secret;
use futures::TryStreamExt;
use std::process::ExitCode;

pub async fn run(
    nats: async_nats::Client,
    topology: &TopologyArgs,
    op: &CredOp,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    let js = async_nats::jetstream::new(nats);
    let bucket = subjects.credentials_bucket();
    match op {
        CredOp::Put { name, username, workers_public_key, .. } => {
            credential_name(name).map_err(anyhow::Error::msg)?;
            let key = bmcfleet_common::sealing::public_key(workers_public_key).map_err(anyhow::Error::msg)?;
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).context("reading the password from standard input")?;
            let password = Secret::new(line.trim_end_matches(['\r', '\n']));
            anyhow::ensure!(!password.is_empty(), "empty password on standard input");
            let binding = bmcfleet_common::sealing::Binding::credential(name);
            let sealed =
                bmcfleet_common::sealing::seal(username, &password, &key, &binding).map_err(anyhow::Error::msg)?;
            let config = streams::credentials_config(&subjects, usize::from(topology.replicas));
            let kv = streams::bucket(&js, config, streams::Mode::UseExisting).await?;
            kv.put(name.as_str(), serde_json::to_vec(&sealed)?.into())
                .await
                .with_context(|| format!("writing {name} to {bucket}"))?;
            println!("stored {name} in {bucket} (sealed to {})", sealed.key);
        }
        CredOp::Delete { name } => {
            credential_name(name).map_err(anyhow::Error::msg)?;
            let kv = js.get_key_value(&bucket).await.with_context(|| format!("bucket {bucket}"))?;
            kv.purge(name.as_str()).await.with_context(|| format!("deleting {name} from {bucket}"))?;
            println!("deleted {name} from {bucket}");
        }
        CredOp::List => {
            let kv = js.get_key_value(&bucket).await.with_context(|| format!("bucket {bucket}"))?;
            let mut names: Vec<String> = kv.keys().await?.try_collect().await?;
            names.sort();
            if format.is_json() {
                println!("{}", serde_json::to_string(&names)?);
            } else {
                for n in names {
                    println!("{n}");
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
