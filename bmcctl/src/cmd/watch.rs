//! `bmcctl watch [ID]`: follow batch events, of every batch or of one until
//! it finishes.
//!
//! Machine state events (`<prefix>.events.<tenant>.machine.<name>`) share
//! the events wildcard this follows; they are skipped here, so text and
//! `--output json` lines stay batch events only: `bmcctl machine watch` shows them.

use crate::client::{finished, Client};
use bmcfleet_schema::{Encoding, Event, EventKind, IdRequest, Reply, Subjects};
use futures::StreamExt;
use std::process::ExitCode;

pub async fn run(client: &Client, subjects: &Subjects, id: Option<ulid::Ulid>) -> anyhow::Result<ExitCode> {
    let subject = match id {
        Some(id) => subjects.events_of_batch(&id),
        None => subjects.events_all(),
    };
    let mut sub = client.nats.subscribe(subject.clone()).await?;
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
    } else {
        client.nats.flush().await?;
        eprintln!("watching {subject} (batch events; machine state: bmcctl machine watch)");
    }
    while let Some(msg) = sub.next().await {
        let Some(ev) = batch_event(subjects, &msg.subject, &msg.payload) else { continue };
        print(client, &ev);
        if let (Some(_), EventKind::BatchFinished { result }) = (id, &ev.event) {
            return Ok(finished(result.state));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The batch event a message carries; `None` for a machine state event or
/// anything unreadable.
pub fn batch_event(subjects: &Subjects, subject: &str, payload: &[u8]) -> Option<Event> {
    if subjects.is_machine_event(subject) {
        return None;
    }
    Encoding::MessagePack.decode::<Event>(payload).ok()
}

fn print(client: &Client, ev: &Event) {
    if client.format.is_json() {
        println!("{}", serde_json::to_string(ev).unwrap_or_default());
    } else {
        print!("{}", crate::output::event_text(ev, client.format.is_wide()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::state::{MachineEvent, MachineEventKind, MachineState};
    use bmcfleet_schema::PowerState;

    #[test]
    fn machine_state_events_are_not_batch_events() {
        let s = Subjects::default();
        let id = ulid::Ulid::new();
        let batch =
            Event { batch: id, at_ms: 1, event: EventKind::ActionStarted { index: 0, action: "power_on".into() } };
        let bytes = Encoding::MessagePack.encode(&batch).unwrap();
        assert_eq!(batch_event(&s, &s.events("default", &id), &bytes), Some(batch));
        let state = MachineState {
            machine: "web-1".into(),
            tenant: "default".into(),
            power: Some(PowerState::On),
            contactable: true,
            error_code: None,
            reason: None,
            last_seen_ms: Some(1),
            last_changed_ms: 1,
            updated_ms: 1,
            consecutive_failures: 0,
            provider: Some("sim".into()),
            firmware: None,
            inventory_ms: None,
            worker: "w0".into(),
            observed_ms: Some(1),
            poll_interval_ms: None,
            stale_after_ms: None,
            health: None,
            power_watts: None,
            power_read_ms: None,
            clock_drift_ms: None,
            clock_read_ms: None,
            cert_not_after_ms: None,
        };
        let machine = MachineEvent {
            machine: "web-1".into(),
            at_ms: 1,
            event: MachineEventKind::PowerChanged { from: None, to: PowerState::On },
            state,
        };
        let subject = s.machine_events("default", "web-1");
        assert!(batch_event(&s, &subject, &Encoding::MessagePack.encode(&machine).unwrap()).is_none());
        // Even one that decoded as a batch event is skipped by its subject.
        assert!(batch_event(&s, &subject, &bytes).is_none(), "skipped by subject, not by luck of decoding");
    }
}
