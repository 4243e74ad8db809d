//! The machine registry as gateways and workers see it: an in-memory copy
//! of the `<STREAM>_MACHINES` bucket, kept current by a KV watch, so a
//! lookup never costs a NATS round trip.
//!
//! # Who writes what
//! Only operators write the bucket (`bmcctl machine`; NATS permissions in
//! `deploy/nats/bmcfleet.conf`). Readers still treat each value as input:
//! a record that does not decode or validate is held as [`Lookup::Invalid`]
//! and refused, never used, and two machines at one BMC endpoint (host and
//! port, and system for a Redfish service serving several:
//! [`Machine::conflict_with`]) are both refused ([`Lookup::Conflict`])
//! until the operator fixes one.
//!
//! # Staying current
//! The watch starts with the last value of every key and then follows
//! changes. When it ends (NATS reconnects, the server restarts) it is opened
//! again and the copy is rebuilt from scratch, then swapped in whole, so a
//! deletion missed while disconnected is never kept.

use crate::streams::{bucket, machines_config, Mode, SetupError};
use async_nats::jetstream::kv::{Operation, Store};
use async_nats::jetstream::Context;
use bmcfleet_schema::{BmcAddress, Machine, Subjects};
use futures::StreamExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest wait for the first complete copy at start.
const INITIAL_SYNC: Duration = Duration::from_secs(30);

/// What failed in writing or following the registry bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The record does not validate (the source is the
    /// [`bmcfleet_schema::machine::MachineError`]); nothing was written.
    Invalid,
    /// The record cannot be encoded; nothing was written.
    Encode,
    /// The bucket refused or did not answer the write.
    Store,
    /// Following the bucket failed or its watch ended (it is reopened).
    Watch,
}

impl bmcfleet_schema::error::Coded for ErrorKind {
    fn code(self) -> bmcfleet_schema::ErrorCode {
        match self {
            ErrorKind::Invalid => bmcfleet_schema::ErrorCode::InvalidField,
            ErrorKind::Encode => bmcfleet_schema::ErrorCode::Internal,
            ErrorKind::Store | ErrorKind::Watch => bmcfleet_schema::ErrorCode::Unavailable,
        }
    }
}

pub type Error = bmcfleet_schema::error::Error<ErrorKind>;

/// What the registry says about a name.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    Found(Arc<Machine>),
    NotFound,
    /// The stored record is unusable (the reason, for the operator).
    Invalid(String),
    /// Another machine is registered at the same BMC endpoint.
    Conflict(String),
}

#[derive(Default)]
struct Copy {
    machines: HashMap<String, Arc<Machine>>,
    invalid: HashMap<String, String>,
    /// Host identity -> machine names.
    hosts: HashMap<String, BTreeSet<String>>,
    /// (Host identity, port as registered) -> machine names: a machine's
    /// possible conflicts are found without going over every machine at
    /// its host (thousands of BMCs behind one address, each on its port).
    endpoints: HashMap<(String, Option<u16>), BTreeSet<String>>,
}

impl Copy {
    /// Why machine `m` is not usable beside the others at its host, if it is not.
    /// Only machines at its host on its port, or registered without a
    /// port, can conflict with one registered with a port (two explicit
    /// ports that differ never do); one without a port is compared with
    /// every machine at its host.
    fn conflict(&self, m: &Machine) -> Option<String> {
        let host = m.host_identity();
        let mut names: Vec<&String> = match m.address.port {
            Some(port) => {
                [Some(port), None].iter().filter_map(|p| self.endpoints.get(&(host.clone(), *p))).flatten().collect()
            }
            None => self.hosts.get(&host)?.iter().collect(),
        };
        names.sort();
        names
            .into_iter()
            .filter(|n| **n != m.name)
            .filter_map(|n| self.machines.get(n))
            .find_map(|o| m.conflict_with(o))
    }

    fn apply(&mut self, key: &str, value: Option<&[u8]>) {
        self.remove(key);
        let Some(bytes) = value else { return };
        match serde_json::from_slice::<Machine>(bytes).map_err(|e| e.to_string()).and_then(|m| {
            m.validate().map_err(|e| e.to_string())?;
            if m.name != key {
                return Err(format!("the record under key `{key}` names machine `{}`", m.name));
            }
            Ok(m)
        }) {
            Ok(m) => {
                self.hosts.entry(m.host_identity()).or_default().insert(m.name.clone());
                self.endpoints.entry((m.host_identity(), m.address.port)).or_default().insert(m.name.clone());
                self.machines.insert(m.name.clone(), Arc::new(m));
            }
            Err(why) => {
                tracing::warn!(machine = key, error = %why, "Unusable machine record; batches for it are refused.");
                self.invalid.insert(key.to_owned(), why);
            }
        }
    }

    fn remove(&mut self, key: &str) {
        self.invalid.remove(key);
        if let Some(old) = self.machines.remove(key) {
            let host = old.host_identity();
            if let Some(names) = self.hosts.get_mut(&host) {
                names.remove(key);
                if names.is_empty() {
                    self.hosts.remove(&host);
                }
            }
            let endpoint = (host, old.address.port);
            if let Some(names) = self.endpoints.get_mut(&endpoint) {
                names.remove(key);
                if names.is_empty() {
                    self.endpoints.remove(&endpoint);
                }
            }
        }
    }
}

/// One change of the bucket seen live (after the initial load).
#[derive(Clone, Debug)]
pub struct Change {
    pub machine: String,
    pub revision: u64,
    /// The new record; `None` for a removal.
    pub value: Option<Vec<u8>>,
}

/// A live, read-only copy of the machine registry.
#[derive(Clone)]
pub struct Registry {
    copy: Arc<RwLock<Copy>>,
    /// Bumped on every change of the copy (pollers rebuild their schedules).
    generation: Arc<std::sync::atomic::AtomicU64>,
    store: Option<Store>,
    stop: CancellationToken,
    changes: tokio::sync::broadcast::Sender<Change>,
    /// The bucket's stream sequence the copy includes (its last applied
    /// entry's revision; 0 before the first load).
    applied: Arc<std::sync::atomic::AtomicU64>,
}

impl Registry {
    /// Open (creating when missing) the registry bucket, load it completely
    /// and keep following it until [`Registry::stop`] or the token is cancelled.
    pub async fn start(
        js: &Context,
        subjects: &Subjects,
        replicas: usize,
        stop: CancellationToken,
    ) -> Result<Registry, SetupError> {
        let store = bucket(js, machines_config(subjects, replicas), Mode::UseExisting).await?;
        let (changes, _) = tokio::sync::broadcast::channel(1024);
        let registry = Registry {
            copy: Arc::default(),
            generation: Arc::default(),
            store: Some(store.clone()),
            stop,
            changes,
            applied: Arc::default(),
        };
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(follow(
            store,
            registry.copy.clone(),
            registry.generation.clone(),
            registry.stop.clone(),
            synced_tx,
            registry.changes.clone(),
            registry.applied.clone(),
        ));
        match tokio::time::timeout(INITIAL_SYNC, synced_rx).await {
            Ok(Ok(())) => Ok(registry),
            _ => Err(SetupError::JetStream {
                what: format!("bucket {}", subjects.machines_bucket()),
                message: format!("could not read the machine registry within {INITIAL_SYNC:?}"),
            }),
        }
    }

    /// Wait until the copy holds every write the bucket had stored when
    /// this was called (read-your-writes for what reads the whole copy: a
    /// selector's machines, just registered). `false` when the bucket
    /// cannot be read or the copy is not there within `within`. A registry
    /// with no store is always caught up.
    pub async fn caught_up(&self, within: std::time::Duration) -> bool {
        let Some(store) = &self.store else { return true };
        // (`Store::status` answers from the stream info read at open.)
        let mut stream = store.stream.clone();
        let last = match stream.info().await {
            Ok(info) => info.state.last_sequence,
            Err(e) => {
                tracing::warn!(error = %e, "Cannot read the machine registry's last sequence.");
                return false;
            }
        };
        let until = tokio::time::Instant::now() + within;
        let mut pause = std::time::Duration::from_millis(1);
        while self.applied.load(std::sync::atomic::Ordering::Acquire) < last {
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        }
        true
    }

    /// Live changes from now on (for the audit log).
    pub fn changes(&self) -> tokio::sync::broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Stop following the bucket.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// [`Registry::get`], reading the bucket itself when the copy has no
    /// usable answer (a machine registered a moment ago, or a conflict that
    /// a change not yet seen may have resolved): what an operator just
    /// wrote is honoured at once. Costs a round trip per name involved, only
    /// on that path.
    pub async fn get_fresh(&self, name: &str) -> Lookup {
        let first = self.get(name);
        let Some(store) = &self.store else { return first };
        let mut to_read: Vec<String> = match &first {
            Lookup::Found(_) | Lookup::Invalid(_) => return first,
            Lookup::NotFound => vec![name.to_owned()],
            Lookup::Conflict(_) => self.names_at_host_of(name),
        };
        let mut read: Vec<String> = Vec::new();
        // A name read fresh may meet a neighbour at its host that the copy
        // still holds but the bucket no longer does (a machine replaced a
        // moment ago): those are read fresh too, once.
        for _ in 0..2 {
            if !to_read.iter().all(|n| bmcfleet_schema::machine::valid_name(n)) {
                return first;
            }
            for n in &to_read {
                match store.entry(n).await {
                    Ok(entry) => {
                        let value =
                            entry.as_ref().filter(|e| matches!(e.operation, Operation::Put)).map(|e| e.value.to_vec());
                        self.copy.write().expect("registry lock").apply(n, value.as_deref());
                    }
                    Err(e) => {
                        tracing::warn!(machine = n, error = %e, "Cannot read the machine registry; using the cached copy.");
                        return first;
                    }
                }
            }
            read.append(&mut to_read);
            match self.get(name) {
                Lookup::Conflict(_) => {
                    to_read = self.names_at_host_of(name).into_iter().filter(|n| !read.contains(n)).collect()
                }
                other => return other,
            }
            if to_read.is_empty() {
                break;
            }
        }
        self.get(name)
    }

    /// Every name the copy holds at the host of machine `name`.
    fn names_at_host_of(&self, name: &str) -> Vec<String> {
        let copy = self.copy.read().expect("registry lock");
        let host = copy.machines.get(name).map(|m| m.host_identity()).unwrap_or_default();
        copy.hosts.get(&host).into_iter().flatten().cloned().collect()
    }

    pub fn get(&self, name: &str) -> Lookup {
        let copy = self.copy.read().expect("registry lock");
        if let Some(why) = copy.invalid.get(name) {
            return Lookup::Invalid(why.clone());
        }
        let Some(m) = copy.machines.get(name) else { return Lookup::NotFound };
        match copy.conflict(m) {
            Some(why) => Lookup::Conflict(why),
            None => Lookup::Found(m.clone()),
        }
    }

    /// A machine registered at this address's host, if any, however the
    /// address spells it (an IPv4-mapped IPv6 address is its IPv4 address),
    /// whatever the ports: a host with a registered machine is no ad hoc
    /// target (the same BMC may answer on another port or protocol).
    pub fn machine_at(&self, address: &BmcAddress) -> Option<String> {
        self.machine_at_identity(&address.host_identity())
    }

    /// The machine registered at `host` (a name, or an IP in any text
    /// form), if any.
    pub fn machine_at_host(&self, host: &str) -> Option<String> {
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) => self.machine_at_ip(ip),
            Err(_) => self.machine_at_identity(host),
        }
    }

    /// A machine registered at this IP address (however an address of
    /// that host is spelled), whatever its port, if any.
    pub fn machine_at_ip(&self, ip: std::net::IpAddr) -> Option<String> {
        self.machine_at_identity(&bmcfleet_schema::bmc::ip_identity(ip))
    }

    /// Every machine registered at this IP address, whatever its port
    /// (several BMCs may share one IP on different ports).
    pub fn machines_at_ip(&self, ip: std::net::IpAddr) -> Vec<String> {
        let copy = self.copy.read().expect("registry lock");
        copy.hosts.get(&bmcfleet_schema::bmc::ip_identity(ip)).into_iter().flatten().cloned().collect()
    }

    fn machine_at_identity(&self, host: &str) -> Option<String> {
        let copy = self.copy.read().expect("registry lock");
        copy.hosts.get(host).and_then(|names| names.iter().next().cloned())
    }

    /// Changes with every change of the copy.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The usable machines `keep` selects (a record in conflict with
    /// another at the same BMC endpoint is left out).
    pub fn machines(&self, keep: impl Fn(&Machine) -> bool) -> Vec<Arc<Machine>> {
        let copy = self.copy.read().expect("registry lock");
        copy.machines.values().filter(|m| keep(m) && copy.conflict(m).is_none()).cloned().collect()
    }

    /// How many usable records the copy holds.
    pub fn len(&self) -> usize {
        self.copy.read().expect("registry lock").machines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Watch the bucket until stopped; rebuild the copy after every reconnect.
async fn follow(
    store: Store,
    shared: Arc<RwLock<Copy>>,
    generation: Arc<std::sync::atomic::AtomicU64>,
    stop: CancellationToken,
    synced: tokio::sync::oneshot::Sender<()>,
    changes: tokio::sync::broadcast::Sender<Change>,
    applied: Arc<std::sync::atomic::AtomicU64>,
) {
    let mut synced = Some(synced);
    let backoff = crate::backoff::Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
    let mut failures = 0;
    loop {
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            r = follow_once(&store, &shared, &generation, &mut synced, &changes, &applied) => r,
        };
        if let Err(e) = outcome {
            tracing::warn!(error = %e, "Machine registry watch ended; reopening it.");
        }
        failures += 1;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff.delay(failures.min(10))) => {}
        }
    }
}

/// One watch: a fresh copy is built from the current values, swapped in
/// once complete, then changes are applied until the watch ends.
async fn follow_once(
    store: &Store,
    shared: &RwLock<Copy>,
    generation: &std::sync::atomic::AtomicU64,
    synced: &mut Option<tokio::sync::oneshot::Sender<()>>,
    changes: &tokio::sync::broadcast::Sender<Change>,
    applied: &std::sync::atomic::AtomicU64,
) -> Result<(), Error> {
    use std::sync::atomic::Ordering::Release;
    // Read now, not the info read when the bucket was opened.
    let mut stream = store.stream.clone();
    let state = stream.info().await.map_err(|e| Error::with_source(ErrorKind::Watch, "", e))?.state.clone();
    let values = state.messages;
    // Everything stored up to here is in the watch's first values (it
    // starts after this read); what follows comes with its revision.
    let mut latest = state.last_sequence;
    let mut watch = store.watch_with_history(">").await.map_err(|e| Error::with_source(ErrorKind::Watch, "", e))?;
    let mut fresh = Some(Copy::default());
    let publish = |fresh: &mut Option<Copy>, synced: &mut Option<tokio::sync::oneshot::Sender<()>>| {
        if let Some(copy) = fresh.take() {
            *shared.write().expect("registry lock") = copy;
            generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            if let Some(tx) = synced.take() {
                let _ = tx.send(());
            }
        }
    };
    if values == 0 {
        publish(&mut fresh, synced);
        applied.fetch_max(latest, Release);
    }
    while let Some(entry) = watch.next().await {
        let entry = entry.map_err(|e| Error::with_source(ErrorKind::Watch, "", e))?;
        let value = matches!(entry.operation, Operation::Put).then_some(&entry.value[..]);
        latest = latest.max(entry.revision);
        match fresh.as_mut() {
            Some(copy) => copy.apply(&entry.key, value),
            None => {
                shared.write().expect("registry lock").apply(&entry.key, value);
                applied.fetch_max(latest, Release);
                generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                let _ = changes.send(Change {
                    machine: entry.key.clone(),
                    revision: entry.revision,
                    value: value.map(<[u8]>::to_vec),
                });
            }
        }
        if entry.delta == 0 && fresh.is_some() {
            publish(&mut fresh, synced);
            applied.fetch_max(latest, Release);
        }
    }
    Err(Error::new(ErrorKind::Watch, "the watch stream closed"))
}

/// Write a machine record (operators; `bmcctl machine`). Validated first.
pub async fn put(store: &Store, machine: &Machine) -> Result<u64, Error> {
    machine.validate().map_err(|e| Error::with_source(ErrorKind::Invalid, "", e))?;
    let bytes = serde_json::to_vec(machine).map_err(|e| Error::with_source(ErrorKind::Encode, "", e))?;
    store.put(&machine.name, bytes.into()).await.map_err(|e| Error::with_source(ErrorKind::Store, "", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registry with no store behind it: its copy is filled by the test.
    fn unstored() -> Registry {
        Registry {
            copy: Arc::default(),
            generation: Arc::default(),
            store: None,
            stop: CancellationToken::new(),
            changes: tokio::sync::broadcast::channel(1).0,
            applied: Arc::default(),
        }
    }

    fn record(name: &str, address: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"name": name, "address": address, "credentials": "c"})).unwrap()
    }

    #[test]
    fn the_copy_refuses_what_it_cannot_trust() {
        let r = unstored();
        {
            let mut c = r.copy.write().unwrap();
            c.apply("a", Some(&record("a", "10.0.0.1")));
            c.apply("b", Some(&record("b", "10.0.0.2:623")));
            c.apply("bad", Some(b"{not json"));
            c.apply("x", Some(&record("y", "10.0.0.9")));
        }
        assert!(matches!(r.get("a"), Lookup::Found(m) if m.address.to_string() == "10.0.0.1"));
        assert_eq!(r.get("nope"), Lookup::NotFound);
        assert!(matches!(r.get("bad"), Lookup::Invalid(_)));
        assert!(matches!(r.get("x"), Lookup::Invalid(why) if why.contains("names machine `y`")));
        // A second machine at b's endpoint (no port: every port of the host): both refused until one goes.
        r.copy.write().unwrap().apply("c", Some(&record("c", "10.0.0.2")));
        assert!(matches!(r.get("b"), Lookup::Conflict(_)));
        assert!(matches!(r.get("c"), Lookup::Conflict(why) if why.contains("`b`")));
        r.copy.write().unwrap().apply("c", None);
        assert!(matches!(r.get("b"), Lookup::Found(_)));
        assert_eq!(r.machine_at(&"10.0.0.2:443".parse().unwrap()).as_deref(), Some("b"));
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn machines_on_one_ip_with_their_own_ports_are_all_usable() {
        let r = unstored();
        {
            let mut c = r.copy.write().unwrap();
            c.apply("port-a", Some(&record("port-a", "127.0.0.1:26400")));
            c.apply("port-b", Some(&record("port-b", "127.0.0.1:26401")));
        }
        assert!(matches!(r.get("port-a"), Lookup::Found(_)));
        assert!(matches!(r.get("port-b"), Lookup::Found(_)));
        assert_eq!(r.machines(|_| true).len(), 2);
        let mut at = r.machines_at_ip("127.0.0.1".parse().unwrap());
        at.sort();
        assert_eq!(at, ["port-a", "port-b"], "the static-address guard sees every machine of the IP");
        assert!(r.machine_at(&"127.0.0.1:26402".parse().unwrap()).is_some(), "ad hoc: no other port of the host");
        // A third at port-a's port: those two refused, port-b still usable.
        r.copy.write().unwrap().apply("port-a2", Some(&record("port-a2", "[::ffff:127.0.0.1]:26400")));
        assert!(matches!(r.get("port-a"), Lookup::Conflict(why) if why.contains("`port-a2`")));
        assert!(matches!(r.get("port-a2"), Lookup::Conflict(_)));
        assert!(matches!(r.get("port-b"), Lookup::Found(_)));
        assert_eq!(r.machines(|_| true).iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["port-b"]);
    }

    #[test]
    fn every_spelling_of_a_registered_ip_is_that_machine() {
        // An ad hoc target (or a name resolving) to the IPv4-mapped IPv6
        // spelling of a registered IPv4 address reaches the same BMC.
        let r = unstored();
        r.copy.write().unwrap().apply("a", Some(&record("a", "10.0.0.1")));
        for spelling in ["::ffff:10.0.0.1", "[::ffff:10.0.0.1]:443", "[::ffff:a00:1]:623", "10.0.0.1:623"] {
            assert_eq!(r.machine_at(&spelling.parse().unwrap()).as_deref(), Some("a"), "{spelling}");
        }
        assert_eq!(r.machine_at_host("::ffff:10.0.0.1").as_deref(), Some("a"), "a resolved address");
        // A record at the mapped spelling is the same host as one at the IPv4 one: both refused.
        r.copy.write().unwrap().apply("b", Some(&record("b", "[::ffff:10.0.0.1]:443")));
        assert!(matches!(r.get("a"), Lookup::Conflict(_)));
        assert!(matches!(r.get("b"), Lookup::Conflict(_)));
    }
}
