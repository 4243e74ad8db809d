//! One batch to one target (`--machine NAME` or `--bmc`): waited for by
//! default, as a fleet run is (`--no-wait`: accepted and done), never
//! longer than `--timeout`. The batch id is chosen here, so a wait that
//! runs out can still say where the batch is.

use crate::cli::Target;
use crate::client::Client;
use crate::exit;
use bmcfleet_schema::{Action, Encoding, IdRequest, Reply};
use std::process::ExitCode;
use std::time::Duration;

impl Target {
    /// Whether the command waits for the final result: unless `--no-wait`
    /// (a plan always waits), for one machine as for many.
    pub fn waits(&self) -> bool {
        self.plan || !self.no_wait
    }

    /// How long to wait for the answer: `--timeout`, else the batch's
    /// deadline plus 10s (the gateway's own wait ends about then).
    pub fn answer_timeout(&self) -> Duration {
        self.timeout.unwrap_or(self.deadline + Duration::from_secs(10))
    }
}

/// Whether `e` is a request that got no answer in time.
fn timed_out(e: &anyhow::Error) -> bool {
    e.downcast_ref::<async_nats::RequestError>().is_some_and(|r| r.kind() == async_nats::RequestErrorKind::TimedOut)
}

pub async fn run(client: &Client, target: &Target, actions: Vec<Action>) -> anyhow::Result<ExitCode> {
    let mut batch = target.batch(actions)?;
    let id = ulid::Ulid::new();
    batch.id = Some(id);
    let wait = target.waits();
    let timeout = target.answer_timeout();
    match client.request("submit", wait, Encoding::Json.encode(&batch)?, timeout).await {
        Ok(reply) => Ok(client.print(&reply)),
        Err(e) if wait && timed_out(&e) => {
            eprintln!(
                "no result within {} (--timeout): batch {id} may still be queued or running; `bmcctl status {id}`",
                bmcfleet_schema::duration::format(timeout)
            );
            let body = serde_json::to_vec(&IdRequest { id })?;
            if let Ok(reply @ Reply::Status(_)) = client.request("status", false, body, super::status::TIMEOUT).await {
                client.print(&reply);
            }
            Ok(ExitCode::from(exit::NOT_FINISHED))
        }
        Err(e) => Err(e),
    }
}
