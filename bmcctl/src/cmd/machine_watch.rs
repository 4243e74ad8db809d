//! `bmcctl machine watch [NAME...] [--selector k=v] [--tenant T]`: machine
//! state changes as they happen (`power_changed`, `unreachable`,
//! `recovered`, `inventory_changed`, `health_changed`), one line each, until Ctrl-C.
//!
//! Owns which machine-event subjects to follow and which events to print;
//! never writes anything. The owning worker publishes every change once,
//! on core NATS (`<prefix>.events.<tenant>.machine.<name>`): nothing is
//! replayed, a watch sees what happens while it runs (`machine ls` shows
//! where things stand).
//!
//! - NAMEs (registered machines, else exit 2) are followed on their own
//!   subjects, whatever their tenant;
//! - `--tenant` narrows the subject to that tenant's machines;
//! - `--selector` is matched against the registry as it is at each event:
//!   a watch of the registry keeps bmcctl's copy current, so a machine
//!   labelled after the watch started is followed from then on.
//!
//! Once subscribed it says so on stderr (`watching ...`), so a script or a
//! test knows from when on nothing is missed.

use crate::cli::Selector;
use crate::output::Format;
use crate::Usage;
use anyhow::bail;
use async_nats::jetstream::kv::{Operation, Store};
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_schema::state::MachineEvent;
use bmcfleet_schema::subject::CONTENT_TYPE;
use bmcfleet_schema::{Encoding, Machine, Subjects};
use futures::{FutureExt, StreamExt};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Which machines' events to print.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only these machines (none: all).
    pub names: Vec<String>,
    /// Only machines whose registry labels match.
    pub selector: Option<Selector>,
    /// Only this tenant's machines.
    pub tenant: Option<String>,
}

impl Filter {
    /// The subjects to subscribe to: each named machine's (any tenant), or
    /// the tenant's machines', or every machine's.
    pub fn subjects(&self, subjects: &Subjects) -> Vec<String> {
        if self.names.is_empty() {
            return vec![match &self.tenant {
                Some(t) => subjects.machine_events(t, "*"),
                None => subjects.machine_events_all(),
            }];
        }
        let mut out: Vec<String> = self.names.iter().map(|n| subjects.machine_events("*", n)).collect();
        out.dedup();
        out
    }

    /// Whether an event of `machine` is printed, given the registry's labels
    /// of every machine (consulted only with a selector; the subjects did
    /// the rest).
    pub fn wants(&self, machine: &str, labels: &BTreeMap<String, BTreeMap<String, String>>) -> bool {
        match &self.selector {
            Some(s) => labels.get(machine).is_some_and(|l| s.matches(l)),
            None => true,
        }
    }
}

/// Decode one message of a machine-event subject (MessagePack unless its
/// `Content-Type` says otherwise).
pub fn decode(msg: &async_nats::Message) -> Result<MachineEvent, bmcfleet_schema::codec::CodecError> {
    let content_type = msg.headers.as_ref().and_then(|h| h.get(CONTENT_TYPE)).map(|v| v.as_str());
    Encoding::from_content_type(content_type)?.decode(&msg.payload)
}

/// The registry's labels of every machine (what `--selector` matches).
fn labels_of(registry: &BTreeMap<String, Machine>) -> BTreeMap<String, BTreeMap<String, String>> {
    registry.iter().map(|(name, m)| (name.clone(), m.labels.clone())).collect()
}

pub async fn run(
    js: &async_nats::jetstream::Context,
    topology: &TopologyArgs,
    registry: &Store,
    filter: Filter,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    let nats = js.client();
    // The registry is read only when it decides something: the names must
    // exist, the selector needs labels (followed from here on).
    let mut updates = match filter.selector {
        Some(_) => Some(registry.watch_all().await?),
        None => None,
    };
    let mut labels = BTreeMap::new();
    if !filter.names.is_empty() || filter.selector.is_some() {
        let machines = super::machine::load_all(registry).await?;
        let missing: Vec<String> =
            filter.names.iter().filter(|n| !machines.contains_key(*n)).map(|n| format!("`{n}`")).collect();
        if !missing.is_empty() {
            return Err(Usage(format!(
                "machine_not_found: no machine named {} is registered (bmcctl machine ls)",
                missing.join(", ")
            ))
            .into());
        }
        labels = labels_of(&machines);
        if let Some(s) = &filter.selector {
            if !labels
                .iter()
                .any(|(name, l)| s.matches(l) && filter.tenant.as_ref().is_none_or(|t| machines[name].tenant == *t))
            {
                eprintln!("note: no registered machine matches --selector {s} yet; its events are shown once one does");
            }
        }
    }

    let wanted = filter.subjects(&subjects);
    let mut subs = Vec::with_capacity(wanted.len());
    for subject in &wanted {
        subs.push(nats.subscribe(subject.clone()).await?);
    }
    let mut events = futures::stream::select_all(subs);
    // The subscriptions reached the server, and Ctrl-C is ours (the
    // handler is installed on the first poll): from here on nothing is missed.
    nats.flush().await?;
    let mut interrupt = std::pin::pin!(tokio::signal::ctrl_c());
    if (&mut interrupt).now_or_never().is_some() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("watching {} (Ctrl-C to stop)", wanted.join(", "));

    loop {
        let update = async {
            match updates.as_mut() {
                Some(u) => u.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = &mut interrupt => return Ok(ExitCode::SUCCESS),
            update = update => match update {
                Some(Ok(entry)) => match entry.operation {
                    Operation::Put => match serde_json::from_slice::<Machine>(&entry.value) {
                        Ok(m) => {
                            labels.insert(entry.key, m.labels);
                        }
                        Err(e) => eprintln!("warning: the registry record of `{}` is unreadable ({e})", entry.key),
                    },
                    Operation::Delete | Operation::Purge => {
                        labels.remove(&entry.key);
                    }
                },
                Some(Err(e)) => eprintln!("warning: following the machine registry: {e}"),
                None => {
                    eprintln!("warning: the machine registry is no longer followed; --selector matches the labels last seen");
                    updates = None;
                }
            },
            msg = events.next() => {
                let Some(msg) = msg else { bail!("the NATS subscription ended") };
                if !subjects.is_machine_event(&msg.subject) {
                    continue;
                }
                let event = match decode(&msg) {
                    Ok(e) => e,
                    Err(e) => {
                        eprintln!("warning: an unreadable machine event on {}: {e}", msg.subject);
                        continue;
                    }
                };
                if !filter.wants(&event.machine, &labels) {
                    continue;
                }
                if format.is_json() {
                    println!("{}", serde_json::to_string(&event)?);
                } else {
                    println!("{}", crate::output::machine_event(&event, format.is_wide()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selector(pairs: &[(&str, &str)]) -> Selector {
        Selector(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    #[test]
    fn names_follow_their_own_subjects_a_tenant_its_own_and_otherwise_all() {
        let s = Subjects::default();
        let f = |names: &[&str], tenant: Option<&str>| Filter {
            names: names.iter().map(|n| n.to_string()).collect(),
            selector: None,
            tenant: tenant.map(str::to_owned),
        };
        assert_eq!(f(&[], None).subjects(&s), ["bmc.events.*.machine.*"]);
        assert_eq!(f(&[], Some("tenant-a")).subjects(&s), ["bmc.events.tenant-a.machine.*"]);
        assert_eq!(
            f(&["web-1", "web-2"], None).subjects(&s),
            ["bmc.events.*.machine.web-1", "bmc.events.*.machine.web-2"]
        );
        for subject in f(&["web-1"], None).subjects(&s).iter().chain(&f(&[], Some("t")).subjects(&s)) {
            assert!(s.is_machine_event(subject), "{subject}");
        }
    }

    #[test]
    fn a_selector_matches_the_registrys_labels_of_the_moment() {
        let mut labels: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        labels.insert("a".into(), [("rack".to_string(), "12".to_string())].into());
        labels.insert("b".into(), [("rack".to_string(), "13".to_string())].into());
        let f = Filter { selector: Some(selector(&[("rack", "12")])), ..Filter::default() };
        assert!(f.wants("a", &labels));
        assert!(!f.wants("b", &labels));
        assert!(!f.wants("unregistered", &labels), "a machine the registry does not know matches no selector");
        labels.get_mut("b").unwrap().insert("rack".into(), "12".into());
        assert!(f.wants("b", &labels), "relabelled: followed from then on");
        assert!(Filter::default().wants("unregistered", &labels), "no selector: every event");
    }
}
