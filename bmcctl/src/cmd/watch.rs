//! `bmcctl watch [ID]`: follow events, of every batch or of one until it finishes.

use crate::client::{finished, Client};
use bmcfleet_schema::{Encoding, Event, EventKind, IdRequest, Reply, Subjects};
use futures::StreamExt;
use std::process::ExitCode;

pub async fn run(client: &Client, subjects: &Subjects, id: Option<ulid::Ulid>) -> anyhow::Result<ExitCode> {
    let subject = match id {
        Some(id) => subjects.events_of_batch(&id),
        None => subjects.events_all(),
    };
    let mut sub = client.nats.subscribe(subject).await?;
    // Subscribed first, so nothing is missed: a batch that already finished is reported from its status.
    if let Some(id) = id {
        client.nats.flush().await?;
        let body = serde_json::to_vec(&IdRequest { id })?;
        if let Reply::Status(s) = client.request("status", false, body, super::status::TIMEOUT).await? {
            if let (true, Some(result)) = (s.state.is_final(), s.result) {
                let state = result.state;
                let ev = Event { batch: id, at_ms: result.finished_at_ms, event: EventKind::BatchFinished { result } };
                print(client, &ev);
                return Ok(finished(state));
            }
        }
    }
    while let Some(msg) = sub.next().await {
        let Ok(ev) = Encoding::MessagePack.decode::<Event>(&msg.payload) else { continue };
        print(client, &ev);
        if let (Some(_), EventKind::BatchFinished { result }) = (id, &ev.event) {
            return Ok(finished(result.state));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print(client: &Client, ev: &Event) {
    if client.json {
        println!("{}", serde_json::to_string(ev).unwrap_or_default());
    } else {
        crate::output::event(ev);
    }
}
