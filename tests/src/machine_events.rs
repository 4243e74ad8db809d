//! A machine's state events and state record, as the fleet-state suites
//! read them: every event on its subject, collected in order (each one's
//! `Bmcfleet-Event` header checked against its kind), and its record in
//! the state bucket.

use bmcfleet_schema::state::{MachineEvent, MachineEventKind, MachineState};
use bmcfleet_schema::{subject, Encoding, Subjects};
use futures::StreamExt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Collects the events published on one machine's subject.
pub struct MachineEvents {
    seen: Arc<Mutex<Vec<MachineEvent>>>,
    task: tokio::task::JoinHandle<()>,
}

impl MachineEvents {
    /// Subscribes to `subject` (flushed: nothing published after this returns is missed).
    pub async fn start(client: &async_nats::Client, subject: String) -> MachineEvents {
        let mut sub = client.subscribe(subject).await.unwrap();
        client.flush().await.unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let e: MachineEvent = Encoding::MessagePack.decode(&msg.payload).expect("a machine event");
                let header =
                    msg.headers.as_ref().and_then(|h| h.get(subject::EVENT_HEADER)).map(|v| v.as_str().to_owned());
                assert_eq!(header.as_deref(), Some(e.event.name()), "the header names the event");
                sink.lock().unwrap().push(e);
            }
        });
        MachineEvents { seen, task }
    }

    /// The events so far, in order.
    pub fn seen(&self) -> Vec<MachineEvent> {
        self.seen.lock().unwrap().clone()
    }

    /// The kinds of the events so far, in order.
    pub fn all(&self) -> Vec<MachineEventKind> {
        self.seen.lock().unwrap().iter().map(|e| e.event.clone()).collect()
    }

    /// Waits for what `find` finds in the events so far; panics naming
    /// `what` and the events seen after `timeout`.
    pub async fn wait_until<T>(&self, what: &str, timeout: Duration, find: impl Fn(&[MachineEvent]) -> Option<T>) -> T {
        let seen = self.seen.clone();
        crate::poll_until(timeout, Duration::from_millis(50), || {
            let found = find(&seen.lock().unwrap());
            async move { found }
        })
        .await
        .unwrap_or_else(|| panic!("no {what} within {timeout:?}; got {:?}", self.all()))
    }

    /// Waits for the first event whose kind `pred` accepts.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&MachineEventKind) -> bool,
    ) -> MachineEvent {
        self.wait_until(&format!("{what} event"), timeout, |seen| seen.iter().find(|e| pred(&e.event)).cloned()).await
    }
}

impl Drop for MachineEvents {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The machine's record in the state bucket, if any.
pub async fn machine_state(client: &async_nats::Client, subjects: &Subjects, machine: &str) -> Option<MachineState> {
    let kv = async_nats::jetstream::new(client.clone()).get_key_value(subjects.state_bucket()).await.ok()?;
    let bytes = kv.get(machine).await.ok()??;
    Some(serde_json::from_slice(&bytes).expect("a machine state record"))
}
