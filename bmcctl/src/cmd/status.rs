//! `bmcctl status ID` and `bmcctl cancel ID`.

use crate::client::Client;
use bmcfleet_schema::IdRequest;
use std::process::ExitCode;
use std::time::Duration;

/// How long a status or cancel request may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

pub async fn status(client: &Client, id: ulid::Ulid) -> anyhow::Result<ExitCode> {
    let reply = client.request("status", false, serde_json::to_vec(&IdRequest { id })?, TIMEOUT).await?;
    Ok(client.print(&reply))
}

pub async fn cancel(client: &Client, id: ulid::Ulid) -> anyhow::Result<ExitCode> {
    let reply = client.request("cancel", false, serde_json::to_vec(&IdRequest { id })?, TIMEOUT).await?;
    Ok(client.print(&reply))
}
