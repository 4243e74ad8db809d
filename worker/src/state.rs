//! Observed machine state (issue 19): polls of each registered machine by
//! the worker that owns its partition, the state book, and what is written
//! and announced.
//!
//! # Polling
//! Each partition runner keeps a [`Schedule`] of its partition's machines
//! (rebuilt when the registry copy changes). A due machine's poll goes to
//! the machine's lane like a batch, so it never runs concurrently with a
//! batch on that machine and uses the lane's session (never a second one)
//! and its guarded path ([`crate::call`]): the breaker, the pacing
//! (`--bmc-min-interval` since the lane's last call, a batch's or a
//! poll's) and the fence, as for a batch's actions. A lane with a batch
//! queued or running skips the poll: the batch's own power reads refresh
//! the state. A machine whose circuit breaker is open is recorded as not
//! contactable without being called. The first poll of a
//! machine comes at a random point of its interval (a fleet never polls in
//! step); each next one an interval (±10 %) later. Hand-over: the new owner
//! of a partition starts its schedule when it takes the partition, the old
//! one stops with its partition runner.
//!
//! # Writing
//! The book holds the last state of every machine this worker observed
//! (read from the bucket on first sight, so a new owner compares with its
//! predecessor's last word). An observation writes the bucket only when
//! power, reachability or the failure's code changed, or when the last
//! write is older than the heartbeat; each change is published as a
//! [`MachineEvent`] on the machine's subject. All of one machine's
//! observations come from its lane, one at a time.

use crate::Shared;
use async_nats::jetstream::kv::Store;
use bmcfleet_schema::state::{changes, MachineEvent, MachineState, PartitionSeen, SeenAt};
use bmcfleet_schema::subject::{CONTENT_TYPE, EVENT_HEADER};
use bmcfleet_schema::{Encoding, ErrorBody, Machine, PowerState};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Settings of polling and state keeping.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Default poll interval (a machine's `poll_interval` overrides it);
    /// `None`: polling off.
    pub poll_interval: Option<Duration>,
    /// A state is rewritten at least this often even without change.
    pub heartbeat: Duration,
    /// Time a poll (session set-up and the power read) may take.
    pub poll_timeout: Duration,
    /// How often a poll also reads the machine's inventory; `None`: never.
    pub inventory_interval: Option<Duration>,
    /// Time an inventory read (every component collection) may take.
    pub inventory_timeout: Duration,
    /// How often each owned partition's [`PartitionSeen`] record (every
    /// polled machine's last observation and answer) is written.
    pub seen_every: Duration,
    /// `--state-stale-grace`: added to what the schedule itself may take
    /// before a record is stale ([`bmcfleet_schema::state::stale_after`]).
    pub stale_grace: Duration,
    /// How often a poll also checks the machine's health; `None`: never.
    pub health_interval: Option<Duration>,
    /// Event log entries older than this do not count in the verdict.
    pub health_log_window: Duration,
    /// How often a poll also reads the power draw; `None`: never.
    pub power_reading_interval: Option<Duration>,
    /// How often a poll also reads the BMC's clock drift; `None`: never.
    pub clock_interval: Option<Duration>,
    /// Export each machine's readings as series of their own.
    pub per_machine_metrics: bool,
}

/// The optional readings a poll may take besides the power state, each on
/// its own interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    Inventory = 0,
    Health = 1,
    Power = 2,
    Clock = 3,
}

impl Reading {
    pub const ALL: [Reading; 4] = [Reading::Inventory, Reading::Health, Reading::Power, Reading::Clock];

    /// The metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reading::Inventory => "inventory",
            Reading::Health => "health",
            Reading::Power => "power",
            Reading::Clock => "clock",
        }
    }
}

/// Which readings a poll takes this time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due([bool; 4]);

impl Due {
    pub fn has(self, r: Reading) -> bool {
        self.0[r as usize]
    }

    pub fn with(mut self, r: Reading) -> Due {
        self.0[r as usize] = true;
        self
    }
}

impl Settings {
    /// How often `reading` is taken (`None`: never).
    pub fn every(&self, reading: Reading) -> Option<Duration> {
        match reading {
            Reading::Inventory => self.inventory_interval,
            Reading::Health => self.health_interval,
            Reading::Power => self.power_reading_interval,
            Reading::Clock => self.clock_interval,
        }
    }

    /// The poll interval and the staleness limit (ms) this worker gives
    /// `machine` (both `None`: not polled).
    pub fn limits_of(&self, machine: &Machine) -> (Option<u64>, Option<u64>) {
        match interval_of(machine, self) {
            Some(every) => {
                let limit =
                    bmcfleet_schema::state::stale_after(every, self.poll_timeout, self.seen_every, self.stale_grace);
                (Some(every.as_millis() as u64), Some(limit.as_millis() as u64))
            }
            None => (None, None),
        }
    }
}

/// What one contact with a machine showed.
#[derive(Clone, Debug)]
pub enum Observation {
    /// The BMC answered; with the power it reported (`None`: not read)
    /// and the optional readings taken with it.
    Answered { power: Option<PowerState>, provider: Option<String>, readings: Readings },
    /// It did not (or could not be called): why.
    Failed(ErrorBody),
}

/// The optional readings one poll took (each `None`: not due, or it failed).
#[derive(Clone, Debug, Default)]
pub struct Readings {
    pub health: Option<bmcfleet_schema::health::HealthSummary>,
    /// Watts.
    pub power_watts: Option<f64>,
    /// BMC minus worker, ms.
    pub clock_drift_ms: Option<i64>,
}

/// What the book keeps of a machine's last state: what the next write needs
/// and the next change compares (compact: a fleet keeps one per machine).
#[derive(Clone, Debug)]
struct Seen {
    power: Option<PowerState>,
    contactable: bool,
    error_code: Option<bmcfleet_schema::ErrorCode>,
    reason: Option<Box<str>>,
    last_seen_ms: Option<u64>,
    last_changed_ms: u64,
    updated_ms: u64,
    consecutive_failures: u32,
    provider: Option<Box<str>>,
    firmware: Option<Box<str>>,
    inventory_ms: Option<u64>,
    observed_ms: Option<u64>,
    health: Option<bmcfleet_schema::health::HealthSummary>,
    power_watts: Option<f64>,
    power_read_ms: Option<u64>,
    clock_drift_ms: Option<i64>,
    clock_read_ms: Option<u64>,
    cert_not_after_ms: Option<u64>,
}

/// `Seen::of` and `Seen::state` from one list of the fields a [`Seen`]
/// keeps: `copied` as they are, `text` as boxed strings (and back).
macro_rules! seen_fields {
    (copied: $($copied:ident),+; text: $($text:ident),+; cloned: $($cloned:ident),+;) => {
        impl Seen {
            fn of(s: &MachineState) -> Seen {
                Seen {
                    $($copied: s.$copied,)+
                    $($text: s.$text.as_deref().map(Box::from),)+
                    $($cloned: s.$cloned.clone(),)+
                }
            }

            fn state(&self, machine: &str, tenant: &str, worker: &str) -> MachineState {
                MachineState {
                    machine: machine.to_owned(),
                    tenant: tenant.to_owned(),
                    $($copied: self.$copied,)+
                    $($text: self.$text.as_deref().map(str::to_owned),)+
                    $($cloned: self.$cloned.clone(),)+
                    worker: worker.to_owned(),
                    // Not kept: the registry and the settings say them at each write.
                    poll_interval_ms: None,
                    stale_after_ms: None,
                }
            }
        }
    };
}

seen_fields! {
    copied: power, contactable, error_code, last_seen_ms, last_changed_ms, updated_ms, consecutive_failures, inventory_ms, observed_ms,
        power_watts, power_read_ms, clock_drift_ms, clock_read_ms, cert_not_after_ms;
    text: reason, provider, firmware;
    cloned: health;
}

/// The last state of every machine this worker observed.
pub struct StateBook {
    store: Store,
    settings: Settings,
    states: Mutex<HashMap<Box<str>, Seen>>,
}

fn now_ms() -> u64 {
    bmcfleet_common::runtime::now_ms()
}

impl StateBook {
    pub fn new(store: Store, settings: Settings) -> StateBook {
        StateBook { store, settings, states: Mutex::new(HashMap::new()) }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn cached(&self, machine: &str, tenant: &str, worker: &str) -> Option<MachineState> {
        self.states.lock().expect("state book lock").get(machine).map(|seen| seen.state(machine, tenant, worker))
    }

    /// Forget machines (their partition went to another worker, which
    /// becomes the only writer).
    pub fn forget(&self, keep: impl Fn(&str) -> bool) {
        self.states.lock().expect("state book lock").retain(|name, _| keep(name));
    }

    /// How many machines the book holds.
    pub fn len(&self) -> usize {
        self.states.lock().expect("state book lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The poll interval and staleness limit of a registered machine.
    fn limits(&self, shared: &Shared, machine: &str) -> (Option<u64>, Option<u64>) {
        match shared.targets.machines.get(machine) {
            bmcfleet_common::registry::Lookup::Found(m) => self.settings.limits_of(&m),
            _ => (None, None),
        }
    }

    /// The partition's [`PartitionSeen`] record: the last observation and
    /// answer of each of `machines` this worker has observed.
    pub fn seen(&self, partition: u16, worker: &str, machines: &[Arc<Machine>]) -> PartitionSeen {
        let states = self.states.lock().expect("state book lock");
        let mut out = std::collections::BTreeMap::new();
        for m in machines {
            let Some(seen) = states.get(m.name.as_str()) else { continue };
            let Some(observed_ms) = seen.observed_ms else { continue };
            let (_, stale_after_ms) = self.settings.limits_of(m);
            out.insert(m.name.clone(), SeenAt { observed_ms, last_seen_ms: seen.last_seen_ms, stale_after_ms });
        }
        PartitionSeen { partition, worker: worker.to_owned(), at_ms: now_ms(), machines: out }
    }

    /// Writes the partition's [`PartitionSeen`] record (one write for all
    /// its machines: their records are written only on change).
    pub async fn write_seen(&self, shared: &Shared, partition: u16, machines: &[Arc<Machine>]) {
        let seen = self.seen(partition, &shared.worker_id, machines);
        if seen.machines.is_empty() {
            return;
        }
        let key = shared.subjects.seen_key(partition);
        match serde_json::to_vec(&seen) {
            Ok(bytes) => match self.store.put(&key, bytes.into()).await {
                Ok(_) => {
                    shared.metrics.state_seen_writes.inc();
                }
                Err(e) => tracing::warn!(partition, error = %e, "Cannot write the partition's last observations."),
            },
            Err(e) => tracing::error!(partition, error = %e, "Cannot encode the partition's last observations."),
        }
    }

    /// Records `what` for `machine` (of `tenant`): writes and announces it
    /// when it changed something or the heartbeat is due; the observation
    /// time and last answer reach the bucket in the partition's next
    /// [`PartitionSeen`] record otherwise.
    pub async fn observe(&self, shared: &Shared, machine: &str, tenant: &str, what: Observation) {
        let before = match self.cached(machine, tenant, &shared.worker_id) {
            Some(s) => Some(s),
            None => self.load(machine).await,
        };
        let now = now_ms();
        let mut after = before.clone().unwrap_or_else(|| MachineState {
            machine: machine.to_owned(),
            tenant: tenant.to_owned(),
            power: None,
            contactable: true,
            error_code: None,
            reason: None,
            last_seen_ms: None,
            last_changed_ms: now,
            updated_ms: 0,
            consecutive_failures: 0,
            provider: None,
            firmware: None,
            inventory_ms: None,
            worker: shared.worker_id.clone(),
            observed_ms: None,
            poll_interval_ms: None,
            stale_after_ms: None,
            health: None,
            power_watts: None,
            power_read_ms: None,
            clock_drift_ms: None,
            clock_read_ms: None,
            cert_not_after_ms: None,
        });
        after.tenant = tenant.to_owned();
        after.worker = shared.worker_id.clone();
        after.observed_ms = Some(now);
        (after.poll_interval_ms, after.stale_after_ms) = self.limits(shared, machine);
        match what {
            Observation::Answered { power, provider, readings } => {
                if power.is_some() {
                    after.power = power;
                }
                if readings.health.is_some() {
                    after.health = readings.health;
                }
                if let Some(watts) = readings.power_watts {
                    (after.power_watts, after.power_read_ms) = (Some(watts), Some(now));
                }
                if let Some(drift) = readings.clock_drift_ms {
                    (after.clock_drift_ms, after.clock_read_ms) = (Some(drift), Some(now));
                }
                if provider.is_some() {
                    after.provider = provider;
                }
                after.contactable = true;
                after.error_code = None;
                after.reason = None;
                after.last_seen_ms = Some(now);
                after.consecutive_failures = 0;
            }
            Observation::Failed(e) => {
                after.contactable = false;
                after.error_code = Some(e.code);
                after.reason = Some(e.message.chars().take(300).collect());
                after.consecutive_failures = after.consecutive_failures.saturating_add(1);
            }
        }
        let events = changes(before.as_ref(), &after);
        let changed = before.as_ref().is_none_or(|b| !b.same_condition(&after));
        if changed {
            after.last_changed_ms = now;
        }
        let heartbeat_due = before
            .as_ref()
            .is_none_or(|b| now.saturating_sub(b.updated_ms) >= self.settings.heartbeat.as_millis() as u64);
        if changed || heartbeat_due {
            after.updated_ms = now;
            match serde_json::to_vec(&after) {
                Ok(bytes) => {
                    if let Err(e) = self.store.put(machine, bytes.into()).await {
                        tracing::warn!(machine, error = %e, "Cannot write the machine's observed state.");
                    } else {
                        shared.metrics.state_writes.inc();
                    }
                }
                Err(e) => tracing::error!(machine, error = %e, "Cannot encode the machine's observed state."),
            }
        } else if let Some(b) = &before {
            after.updated_ms = b.updated_ms;
        }
        for event in events {
            match &event {
                bmcfleet_schema::state::MachineEventKind::Unreachable { code, reason } => {
                    tracing::warn!(machine, code = code.as_str(), reason = %reason, "Machine not contactable.")
                }
                bmcfleet_schema::state::MachineEventKind::Recovered => {
                    tracing::info!(machine, "Machine contactable again.")
                }
                bmcfleet_schema::state::MachineEventKind::PowerChanged { from, to } => {
                    tracing::info!(machine, from = ?from, to = ?to, "Machine power changed.")
                }
                bmcfleet_schema::state::MachineEventKind::InventoryChanged { .. } => {}
                bmcfleet_schema::state::MachineEventKind::HealthChanged { from, to, reasons } => {
                    tracing::info!(machine, from = ?from, to = ?to, reasons = ?reasons, "Machine health changed.")
                }
            }
            self.announce(shared, machine, tenant, now, event, after.clone()).await;
        }
        self.states.lock().expect("state book lock").insert(machine.into(), Seen::of(&after));
    }

    /// Records an inventory read: stored under `<name>.inventory`, compared
    /// with the previous one (an `inventory_changed` event names what
    /// differs), the firmware version copied into the machine's state.
    pub async fn inventory(
        &self,
        shared: &Shared,
        machine: &str,
        tenant: &str,
        mut inventory: bmcfleet_schema::Inventory,
    ) {
        use bmcfleet_schema::state::{inventory_drift, MachineEventKind};
        inventory.power_state = None; // the poll's business, and not a component
                                      // Whatever the provider did, the stored record is bounded (64 KiB).
        bmcfleet_schema::components::bound(&mut inventory);
        let key = format!("{machine}.inventory");
        let before: Option<bmcfleet_schema::Inventory> = match self.store.get(&key).await {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).ok(),
            _ => None,
        };
        if let Some(b) = &before {
            // A section the BMC failed this time keeps what was known.
            inventory.keep_unread_from(b);
        }
        // A record from before typed components is a new baseline, not a
        // fleet-wide burst of "components added" events.
        let baseline =
            before.as_ref().is_some_and(|b| !b.has_components() && b.unread.is_empty() && inventory.has_components());
        let drift = match &before {
            Some(b) if !baseline => inventory_drift(b, &inventory),
            _ => Vec::new(),
        };
        if before.as_ref() != Some(&inventory) {
            // Also health and link changes: stored, not announced.
            if let Ok(bytes) = serde_json::to_vec(&inventory) {
                if let Err(e) = self.store.put(&key, bytes.into()).await {
                    tracing::warn!(machine, error = %e, "Cannot write the machine's inventory.");
                }
            }
        }
        let now = now_ms();
        let (firmware_changed, snapshot) = {
            let mut states = self.states.lock().expect("state book lock");
            let Some(seen) = states.get_mut(machine) else { return };
            seen.inventory_ms = Some(now);
            let firmware_changed = seen.firmware.as_deref() != inventory.firmware_version.as_deref();
            seen.firmware = inventory.firmware_version.as_deref().map(Box::from);
            if firmware_changed {
                seen.updated_ms = now;
            }
            let mut snapshot = seen.state(machine, tenant, &shared.worker_id);
            (snapshot.poll_interval_ms, snapshot.stale_after_ms) = self.limits(shared, machine);
            (firmware_changed, snapshot)
        };
        if firmware_changed {
            if let Ok(bytes) = serde_json::to_vec(&snapshot) {
                if self.store.put(machine, bytes.into()).await.is_ok() {
                    shared.metrics.state_writes.inc();
                }
            }
        }
        if !drift.is_empty() {
            tracing::info!(machine, changes = ?drift, "Machine inventory changed.");
            let event = MachineEventKind::InventoryChanged { changes: drift };
            self.announce(shared, machine, tenant, now, event, snapshot).await;
        }
    }

    /// Records the expiry of the certificate the machine's BMC serves
    /// (`notAfter`, Unix seconds), written into its state when it changed.
    pub async fn certificate(&self, shared: &Shared, machine: &str, tenant: &str, not_after_unix: i64) {
        let not_after_ms = u64::try_from(not_after_unix).unwrap_or(0).saturating_mul(1000);
        let snapshot = {
            let mut states = self.states.lock().expect("state book lock");
            let Some(seen) = states.get_mut(machine) else { return };
            if seen.cert_not_after_ms == Some(not_after_ms) {
                return;
            }
            seen.cert_not_after_ms = Some(not_after_ms);
            seen.updated_ms = now_ms();
            let mut snapshot = seen.state(machine, tenant, &shared.worker_id);
            (snapshot.poll_interval_ms, snapshot.stale_after_ms) = self.limits(shared, machine);
            snapshot
        };
        if let Ok(bytes) = serde_json::to_vec(&snapshot) {
            if self.store.put(machine, bytes.into()).await.is_ok() {
                shared.metrics.state_writes.inc();
            }
        }
    }

    /// How many of the book's machines serve a certificate that expires
    /// before `now_ms + within_ms` (or has expired).
    pub fn certificates_expiring(&self, now_ms: u64, within_ms: u64) -> i64 {
        let states = self.states.lock().expect("state book lock");
        states.values().filter(|s| s.cert_not_after_ms.is_some_and(|t| t <= now_ms.saturating_add(within_ms))).count()
            as i64
    }

    async fn announce(
        &self,
        shared: &Shared,
        machine: &str,
        tenant: &str,
        now: u64,
        event: bmcfleet_schema::state::MachineEventKind,
        state: MachineState,
    ) {
        let kind = event.name();
        let message = MachineEvent { machine: machine.to_owned(), at_ms: now, event, state };
        let Ok(payload) = Encoding::MessagePack.encode(&message) else { return };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(EVENT_HEADER, kind);
        headers.insert(CONTENT_TYPE, Encoding::MessagePack.content_type());
        let subject = shared.subjects.machine_events(tenant, machine);
        if let Err(e) = shared.client.publish_with_headers(subject, headers, payload.into()).await {
            tracing::warn!(machine, error = %e, "Cannot publish a machine state event.");
        }
        shared.metrics.state_events.get_or_create(&crate::metrics::KindLabels { kind: kind.to_owned() }).inc();
    }

    /// The state a predecessor (or an earlier run) left in the bucket.
    async fn load(&self, machine: &str) -> Option<MachineState> {
        match self.store.get(machine).await {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).ok(),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(machine, error = %e, "Cannot read the machine's last state.");
                None
            }
        }
    }

    /// Counts of the book's machines by power and reachability (for
    /// gauges); a machine that does not answer counts as power `unknown`.
    pub fn census(&self) -> HashMap<(String, bool), i64> {
        let mut out = HashMap::new();
        for s in self.states.lock().expect("state book lock").values() {
            let power = match s.power {
                _ if !s.contactable => "unknown",
                Some(PowerState::On) => "on",
                Some(PowerState::Off) => "off",
                Some(PowerState::Unknown) | None => "unknown",
            };
            *out.entry((power.to_owned(), s.contactable)).or_insert(0) += 1;
        }
        out
    }
}

/// What the book holds of its machines' health and readings, for the
/// gauges (bounded: a handful of series whatever the fleet's size).
#[derive(Debug, Default, PartialEq)]
pub struct ReadingsCensus {
    /// Machines by health verdict (`unknown`: not checked, or nothing read).
    pub health: HashMap<&'static str, i64>,
    /// Sum of the current power readings (watts), and how many machines
    /// have one (taken within three reading intervals).
    pub power_watts_sum: f64,
    pub power_machines: i64,
    /// The largest absolute clock drift among current clock readings
    /// (seconds), how many machines have one, and the current readings by machine
    /// when per-machine series are asked for.
    pub clock_drift_max_seconds: f64,
    pub clock_machines: i64,
    /// Per machine (only with `--per-machine-metrics`): watts and drift (s).
    pub per_machine: Vec<(String, Option<f64>, Option<f64>)>,
}

impl StateBook {
    /// Counts and aggregates of the book's machines' health and readings.
    pub fn readings_census(&self) -> ReadingsCensus {
        let states = self.states.lock().expect("state book lock");
        ReadingsCensus::of(states.iter().map(|(name, s)| (&**name, s)), &self.settings, now_ms())
    }
}

impl ReadingsCensus {
    /// The census of `machines` at `now`: a reading counts while it is
    /// younger than three of its intervals (a machine whose readings stop,
    /// or a reading turned off, drops out of the sums and counts).
    fn of<'a>(machines: impl Iterator<Item = (&'a str, &'a Seen)>, settings: &Settings, now: u64) -> ReadingsCensus {
        let current = |at: Option<u64>, every: Option<Duration>| match (at, every) {
            (Some(at), Some(every)) => now.saturating_sub(at) <= 3 * every.as_millis() as u64,
            _ => false,
        };
        let mut out = ReadingsCensus::default();
        for (name, s) in machines {
            let health = match &s.health {
                Some(h) if current(Some(h.checked_ms), settings.health_interval) => h.status.as_str(),
                _ => "unknown",
            };
            *out.health.entry(health).or_insert(0) += 1;
            let watts = s.power_watts.filter(|_| current(s.power_read_ms, settings.power_reading_interval));
            if let Some(w) = watts {
                out.power_watts_sum += w;
                out.power_machines += 1;
            }
            let drift = s
                .clock_drift_ms
                .filter(|_| current(s.clock_read_ms, settings.clock_interval))
                .map(|d| d as f64 / 1000.0);
            if let Some(d) = drift {
                out.clock_drift_max_seconds = out.clock_drift_max_seconds.max(d.abs());
                out.clock_machines += 1;
            }
            if settings.per_machine_metrics && (watts.is_some() || drift.is_some()) {
                out.per_machine.push((name.to_owned(), watts, drift));
            }
        }
        out.per_machine.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// The interval of `machine` under `settings`; `None`: not polled.
pub fn interval_of(machine: &Machine, settings: &Settings) -> Option<Duration> {
    settings.poll_interval.map(|default| machine.poll_interval.unwrap_or(default))
}

/// When each machine of one partition is polled next.
#[derive(Default)]
pub struct Schedule {
    due: BTreeSet<(Instant, Arc<str>)>,
    at: HashMap<Arc<str>, (Instant, Arc<Machine>)>,
    /// When each machine's optional readings ([`Reading`]) are taken next
    /// (with a poll; `None`: that reading is off).
    readings: HashMap<Arc<str>, [Option<Instant>; 4]>,
    /// The registry generation the machine set was built from.
    generation: Option<u64>,
}

/// A random fraction in [0, 1).
fn unit() -> f64 {
    crate::guard::jitter_unit()
}

impl Schedule {
    /// Rebuilds the machine set from `machines()` (the partition's) when
    /// the registry's `generation` moved: new ones get a first poll at a
    /// random point of their interval, removed ones are dropped, changed
    /// records are replaced keeping their due time. At the same generation
    /// `machines` is not called: a partition runner asks every tick, and a
    /// scan of the registry copy per tick and partition was most of an idle
    /// fleet's CPU.
    pub fn refresh(
        &mut self,
        generation: u64,
        machines: impl FnOnce() -> Vec<Arc<Machine>>,
        settings: &Settings,
        now: Instant,
    ) {
        if self.generation == Some(generation) {
            return;
        }
        self.generation = Some(generation);
        let machines = machines();
        let mut keep: HashMap<Arc<str>, (Instant, Arc<Machine>)> = HashMap::with_capacity(machines.len());
        for m in machines {
            let Some(interval) = interval_of(&m, settings) else { continue };
            // One shared name per machine for every index.
            let (name, due) = match self.at.get_key_value(m.name.as_str()) {
                Some((name, (due, _))) => (name.clone(), *due),
                None => (Arc::from(m.name.as_str()), now + interval.mul_f64(unit())),
            };
            keep.insert(name, (due, m));
        }
        self.due = keep.iter().map(|(name, (due, _))| (*due, name.clone())).collect();
        let mut readings = HashMap::with_capacity(keep.len());
        if Reading::ALL.iter().any(|r| settings.every(*r).is_some()) {
            for name in keep.keys() {
                let before = self.readings.get(name);
                let due = Reading::ALL.map(|r| {
                    let every = settings.every(r)?;
                    Some(before.and_then(|b| b[r as usize]).unwrap_or_else(|| now + every.mul_f64(unit())))
                });
                readings.insert(name.clone(), due);
            }
        }
        self.readings = readings;
        self.at = keep;
    }

    /// Machines due at `now` (with the readings due too), each
    /// rescheduled one interval (±10 %) later, and each due reading one of
    /// its own intervals later.
    pub fn take_due(&mut self, now: Instant, settings: &Settings) -> Vec<(Arc<Machine>, Due)> {
        let mut out = Vec::new();
        while let Some((due, name)) = self.due.first().cloned() {
            if due > now {
                break;
            }
            self.due.pop_first();
            let Some((_, m)) = self.at.get(&*name).cloned() else { continue };
            let Some(interval) = interval_of(&m, settings) else { continue };
            let next = now + interval.mul_f64(0.9 + 0.2 * unit());
            self.at.insert(name.clone(), (next, m.clone()));
            let mut readings = Due::default();
            if let Some(dues) = self.readings.get_mut(&*name) {
                for r in Reading::ALL {
                    if let (Some(due), Some(every)) = (&mut dues[r as usize], settings.every(r)) {
                        if *due <= now {
                            *due = now + every.mul_f64(0.9 + 0.2 * unit());
                            readings = readings.with(r);
                        }
                    }
                }
            }
            self.due.insert((next, name));
            out.push((m, readings));
        }
        out
    }

    /// How far behind schedule the most overdue machine is.
    pub fn behind(&self, now: Instant) -> Duration {
        self.due.first().map(|(due, _)| now.saturating_duration_since(*due)).unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }

    /// The scheduled machines' records.
    pub fn machines(&self) -> Vec<Arc<Machine>> {
        self.at.values().map(|(_, m)| m.clone()).collect()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.at.keys().map(|k| &**k)
    }
}

/// One poll of `machine` inside its lane: the power state (and, with a
/// desired power, the correction) read on the lane's guarded path (breaker,
/// pacing, fence: [`crate::call`]), the inventory when due, each due
/// reading (health, power draw, clock) as a guarded call of its own, then
/// the observation recorded.
pub async fn poll(
    shared: &Shared,
    machine: &Machine,
    due: Due,
    slot: &mut crate::session::SessionSlot,
    guard: &mut crate::guard::BmcGuard,
    fence: &crate::fence::Fence,
) {
    use crate::call::{Call, Purpose};
    use bmcfleet_provider::Ctx;
    let target = machine.target();
    let key = machine.key();
    let mut inventory = None;
    let mut certificate = None;
    let observation = match shared.credentials.resolve(&target.credentials, &key).await {
        Err(e) => Observation::Failed(e),
        Ok(creds) => {
            // The poll and its inventory read each have their own deadline.
            let ctx_for =
                |timeout| Ctx::with_timeout(timeout).with_gate(fence.gate()).with_settle(Some(shared.power_settle));
            let ctx = ctx_for(shared.state.settings().poll_timeout);
            let protocol = target.protocol.to_string();
            let call = Call { bmc: &key, purpose: Purpose::Poll, protocol: &protocol, deadline: ctx.deadline };
            let read = PowerRead { shared, machine, target: &target, creds: &creds, ctx: &ctx };
            match crate::call::guarded(shared, guard, slot, call, fence, read).await {
                Ok((power, provider)) => {
                    if due.has(Reading::Inventory) {
                        let ctx = ctx_for(shared.state.settings().inventory_timeout);
                        inventory = read_inventory(shared, machine, &target, &creds, slot, &ctx).await;
                        certificate = read_certificate(shared, machine, &target, &creds, slot, &ctx).await;
                    }
                    let mut readings = Readings::default();
                    for reading in [Reading::Health, Reading::Power, Reading::Clock] {
                        if !due.has(reading) || !fence.valid() {
                            continue;
                        }
                        let ctx = ctx_for(shared.state.settings().poll_timeout);
                        let call =
                            Call { bmc: &key, purpose: Purpose::Poll, protocol: &protocol, deadline: ctx.deadline };
                        let read = ReadingRead { shared, target: &target, creds: &creds, ctx: &ctx, reading };
                        let got = crate::call::guarded(shared, guard, slot, call, fence, read).await;
                        let outcome = match &got {
                            Ok(_) => "ok",
                            Err(e) => e.code.as_str(),
                        };
                        shared
                            .metrics
                            .poll_readings
                            .get_or_create(&crate::metrics::ReadingLabels {
                                reading: reading.as_str().to_owned(),
                                outcome: outcome.to_owned(),
                            })
                            .inc();
                        match got {
                            Ok(Got::Health(inputs)) => {
                                let settings = shared.state.settings();
                                readings.health =
                                    bmcfleet_schema::health::verdict(&inputs, now_ms(), settings.health_log_window)
                                        .map(|mut v| {
                                            let secrets = [creds.password.expose()];
                                            for s in v.reasons.iter_mut().chain(v.unread.iter_mut()) {
                                                *s = bmcfleet_schema::secret::scrub(s, &secrets);
                                            }
                                            v
                                        });
                            }
                            Ok(Got::Watts(w)) => readings.power_watts = Some(w),
                            Ok(Got::DriftMs(d)) => readings.clock_drift_ms = Some(d),
                            Err(e) => tracing::info!(
                                machine = %machine.name, reading = reading.as_str(), error.code = e.code.as_str(),
                                error = %bmcfleet_schema::secret::scrub(&e.message, &[creds.password.expose()]),
                                "A poll's reading failed; taken again at its next interval."
                            ),
                        }
                    }
                    Observation::Answered { power, provider: Some(provider.to_owned()), readings }
                }
                Err(e) => {
                    let message = bmcfleet_schema::secret::scrub(&e.message, &[creds.password.expose()]);
                    Observation::Failed(ErrorBody::new(e.code, message))
                }
            }
        }
    };
    let outcome = match &observation {
        Observation::Answered { .. } => "ok".to_owned(),
        Observation::Failed(e) => e.code.as_str().to_owned(),
    };
    shared.metrics.polls.get_or_create(&crate::metrics::OutcomeLabels { outcome }).inc();
    if fence.valid() {
        shared.state.observe(shared, &machine.name, &machine.tenant, observation).await;
        if let Some(inventory) = inventory {
            shared.state.inventory(shared, &machine.name, &machine.tenant, inventory).await;
        }
        if let Some(not_after) = certificate {
            shared.state.certificate(shared, &machine.name, &machine.tenant, not_after).await;
        }
    }
}

/// A poll's attempt: the power state through the capability dispatch (so
/// a session that executes actions itself, the simulator, is polled too),
/// corrected when it drifted from the machine's desired power. Its time is
/// what the breaker judges and `poll_duration_seconds` counts.
struct PowerRead<'r> {
    shared: &'r Shared,
    machine: &'r Machine,
    target: &'r bmcfleet_schema::BmcTarget,
    creds: &'r bmcfleet_provider::ResolvedCredentials,
    ctx: &'r bmcfleet_provider::Ctx,
}

impl crate::call::Attempt for PowerRead<'_> {
    type Output = (Option<PowerState>, &'static str);

    fn attempt<'s>(
        &'s mut self,
        slot: &'s mut crate::session::SessionSlot,
        _retry: u32,
    ) -> impl std::future::Future<Output = Result<Self::Output, bmcfleet_provider::ProviderError>> + Send + 's {
        use bmcfleet_schema::PowerOp;
        let PowerRead { shared, machine, target, creds, ctx } = *self;
        async move {
            let started = Instant::now();
            let result = async {
                let session = slot.get(&shared.providers, ctx, target, creds, true).await?;
                let provider = session.provider();
                let read = |data: Option<bmcfleet_schema::ActionData>| match data {
                    Some(bmcfleet_schema::ActionData::PowerState(p)) => Some(p),
                    _ => None,
                };
                let status = bmcfleet_schema::Action::Power(PowerOp::Status);
                let mut state = read(bmcfleet_provider::perform(session, &ctx.for_attempt(), &status).await?);
                let want = machine.desired_power.map(|d| match d {
                    bmcfleet_schema::DesiredPower::On => (PowerState::On, PowerOp::On),
                    bmcfleet_schema::DesiredPower::Off => (PowerState::Off, PowerOp::Off),
                });
                if let (Some((want, op)), Some(seen)) = (want, state) {
                    if seen != want && seen != PowerState::Unknown {
                        tracing::warn!(machine = %machine.name, seen = ?seen, want = ?want, "Power drifted from the machine's desired power; correcting it.");
                        let fix = bmcfleet_schema::Action::Power(op);
                        state = read(bmcfleet_provider::perform(session, &ctx.for_attempt(), &fix).await?).or(Some(want));
                    }
                }
                Ok((state, provider))
            }
            .await;
            shared.metrics.poll_seconds.observe(started.elapsed().as_secs_f64());
            result
        }
    }
}

/// What a reading's attempt brought back.
enum Got {
    Health(bmcfleet_schema::health::HealthInputs),
    Watts(f64),
    DriftMs(i64),
}

/// One optional reading of a poll (health, power draw or clock), a guarded
/// call of its own: through the capability dispatch (power draw, clock,
/// sensors, the event log: a session that executes actions itself, the
/// simulator, answers them too), the BMC's health rollup through the
/// sensors capability where the session offers it.
struct ReadingRead<'r> {
    shared: &'r Shared,
    target: &'r bmcfleet_schema::BmcTarget,
    creds: &'r bmcfleet_provider::ResolvedCredentials,
    ctx: &'r bmcfleet_provider::Ctx,
    reading: Reading,
}

impl crate::call::Attempt for ReadingRead<'_> {
    type Output = Got;

    fn attempt<'s>(
        &'s mut self,
        slot: &'s mut crate::session::SessionSlot,
        _retry: u32,
    ) -> impl std::future::Future<Output = Result<Self::Output, bmcfleet_provider::ProviderError>> + Send + 's {
        use bmcfleet_provider::{perform, ProviderError};
        use bmcfleet_schema::{Action, ActionData, ErrorCode, EventLogOp, LogSet};
        let ReadingRead { shared, target, creds, ctx, reading } = *self;
        async move {
            let session = slot.get(&shared.providers, ctx, target, creds, true).await?;
            let unexpected =
                || ProviderError::new(ErrorCode::Internal, "the provider answered the reading with other data");
            match reading {
                Reading::Power => match perform(session, &ctx.for_attempt(), &Action::PowerReading).await? {
                    Some(ActionData::PowerReading(r)) => Ok(Got::Watts(r.watts)),
                    _ => Err(unexpected()),
                },
                Reading::Clock => match perform(session, &ctx.for_attempt(), &Action::BmcClockGet).await? {
                    Some(ActionData::BmcClock(c)) => Ok(Got::DriftMs(c.drift_ms)),
                    _ => Err(unexpected()),
                },
                Reading::Health => {
                    use bmcfleet_schema::health::{HealthInputs, LOG_ENTRIES};
                    // Each source on its own: one the BMC lacks (`unsupported`)
                    // or fails leaves the verdict to the others.
                    let mut first_error: Option<ProviderError> = None;
                    let mut keep = |r: Result<Option<ActionData>, ProviderError>| match r {
                        Ok(data) => Ok(data),
                        Err(e) => {
                            let said = format!("{}: {}", e.code.as_str(), e.message);
                            if e.code != ErrorCode::Unsupported && first_error.is_none() {
                                first_error = Some(e);
                            }
                            Err(said)
                        }
                    };
                    let sensors =
                        keep(perform(session, &ctx.for_attempt(), &Action::Sensors).await).and_then(|d| match d {
                            Some(ActionData::Sensors(s)) => Ok(s),
                            _ => Err("no sensor readings in the answer".to_owned()),
                        });
                    let read = Action::EventLog(EventLogOp::Read {
                        limit: Some(LOG_ENTRIES),
                        offset: 0,
                        logs: LogSet::Event,
                        log_ids: vec![],
                    });
                    let log = keep(perform(session, &ctx.for_attempt(), &read).await).and_then(|d| match d {
                        Some(ActionData::EventLog(l)) => Ok(l.entries),
                        _ => Err("no event log in the answer".to_owned()),
                    });
                    let rollup = match session.sensors() {
                        Some(s) => Some(match s.health_rollup(&ctx.for_attempt()).await {
                            Ok(r) => Ok(r),
                            Err(e) => {
                                let said = format!("{}: {}", e.code.as_str(), e.message);
                                if e.code != ErrorCode::Unsupported && first_error.is_none() {
                                    first_error = Some(e);
                                }
                                Err(said)
                            }
                        }),
                        None => None,
                    };
                    let inputs = HealthInputs { sensors: Some(sensors), log: Some(log), rollup };
                    let nothing_read = !matches!(inputs.sensors, Some(Ok(_)))
                        && !matches!(inputs.log, Some(Ok(_)))
                        && !matches!(inputs.rollup, Some(Ok(_)));
                    // A BMC that answered nothing at all is judged like a failed call (the breaker sees it).
                    match first_error {
                        Some(e) if nothing_read => Err(e),
                        _ => Ok(Got::Health(inputs)),
                    }
                }
                Reading::Inventory => unreachable!("the inventory is read by `read_inventory`"),
            }
        }
    }
}

/// The slow refresh after a poll that answered: the inventory, read on the
/// poll's session with its own deadline. Not judged by the breaker, and not
/// fatal for the poll: a failure is retried at the next inventory interval.
async fn read_inventory(
    shared: &Shared,
    machine: &Machine,
    target: &bmcfleet_schema::BmcTarget,
    creds: &bmcfleet_provider::ResolvedCredentials,
    slot: &mut crate::session::SessionSlot,
    ctx: &bmcfleet_provider::Ctx,
) -> Option<bmcfleet_schema::Inventory> {
    let read = bmcfleet_schema::Action::Inventory;
    let result = match slot.get(&shared.providers, ctx, target, creds, true).await {
        Ok(session) => bmcfleet_provider::perform(session, &ctx.for_attempt(), &read).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(Some(bmcfleet_schema::ActionData::Inventory(i))) => Some(*i),
        Ok(_) => None,
        Err(e) => {
            tracing::info!(machine = %machine.name, error = %e, "Inventory read failed; retried at the next inventory interval.");
            None
        }
    }
}

/// With the inventory: the expiry of the BMC's HTTPS certificate (Unix
/// seconds), where the session offers `bmc_certificates` (Redfish: read
/// from the handshake the session made anyway, plus one GET).
async fn read_certificate(
    shared: &Shared,
    machine: &Machine,
    target: &bmcfleet_schema::BmcTarget,
    creds: &bmcfleet_provider::ResolvedCredentials,
    slot: &mut crate::session::SessionSlot,
    ctx: &bmcfleet_provider::Ctx,
) -> Option<i64> {
    let session = slot.get(&shared.providers, ctx, target, creds, true).await.ok()?;
    if !bmcfleet_provider::capabilities(session).contains(&bmcfleet_provider::Capability::BmcCertificates) {
        return None;
    }
    match bmcfleet_provider::perform(session, &ctx.for_attempt(), &bmcfleet_schema::Action::BmcCertGet).await {
        Ok(Some(bmcfleet_schema::ActionData::BmcCertificate(c))) => Some(c.not_after_unix),
        Ok(_) => None,
        Err(e) if e.code == bmcfleet_schema::ErrorCode::Unsupported => None,
        Err(e) => {
            tracing::info!(machine = %machine.name, error = %e, "Certificate read failed; retried at the next inventory interval.");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine(name: &str, every: Option<Duration>) -> Arc<Machine> {
        let mut m = Machine::new(name, "10.0.0.1".parse().unwrap(), bmcfleet_schema::Protocol::Ipmi, "c");
        m.poll_interval = every;
        Arc::new(m)
    }

    #[test]
    fn the_book_gives_back_every_field_it_keeps() {
        let state = MachineState {
            machine: "m1".into(),
            tenant: "t".into(),
            power: Some(PowerState::On),
            contactable: false,
            error_code: Some(bmcfleet_schema::ErrorCode::Timeout),
            reason: Some("no answer".into()),
            last_seen_ms: Some(1),
            last_changed_ms: 2,
            updated_ms: 3,
            consecutive_failures: 4,
            provider: Some("ipmi".into()),
            firmware: Some("1.2".into()),
            inventory_ms: Some(5),
            worker: "w".into(),
            observed_ms: Some(6),
            poll_interval_ms: None,
            stale_after_ms: None,
            health: Some(bmcfleet_schema::health::HealthSummary {
                status: bmcfleet_schema::Health::Warning,
                reasons: vec!["sensor Fan 1 warning".into()],
                unread: vec![],
                checked_ms: 7,
            }),
            power_watts: Some(250.5),
            power_read_ms: Some(8),
            clock_drift_ms: Some(-3),
            clock_read_ms: Some(9),
            cert_not_after_ms: Some(7),
        };
        assert_eq!(Seen::of(&state).state("m1", "t", "w"), state);
    }

    #[test]
    fn the_readings_census_is_bounded_current_and_per_machine_only_when_asked() {
        let min = Duration::from_secs(60);
        let settings = Settings {
            poll_interval: Some(min),
            heartbeat: Duration::from_secs(600),
            poll_timeout: Duration::from_secs(10),
            inventory_interval: None,
            inventory_timeout: Duration::from_secs(120),
            seen_every: Duration::from_secs(15),
            stale_grace: Duration::from_secs(15),
            health_interval: Some(min),
            health_log_window: Duration::from_secs(3600),
            power_reading_interval: Some(min),
            clock_interval: Some(min),
            per_machine_metrics: false,
        };
        let now = 10_000_000;
        let seen =
            |health: Option<(bmcfleet_schema::Health, u64)>, watts: Option<(f64, u64)>, drift: Option<(i64, u64)>| {
                let mut state = MachineState {
                    machine: "m".into(),
                    tenant: "t".into(),
                    power: Some(PowerState::On),
                    contactable: true,
                    error_code: None,
                    reason: None,
                    last_seen_ms: Some(now),
                    last_changed_ms: 0,
                    updated_ms: 0,
                    consecutive_failures: 0,
                    provider: None,
                    firmware: None,
                    inventory_ms: None,
                    worker: "w".into(),
                    observed_ms: Some(now),
                    poll_interval_ms: None,
                    stale_after_ms: None,
                    health: None,
                    power_watts: None,
                    power_read_ms: None,
                    clock_drift_ms: None,
                    clock_read_ms: None,
                    cert_not_after_ms: None,
                };
                state.health = health.map(|(status, checked_ms)| bmcfleet_schema::health::HealthSummary {
                    status,
                    reasons: vec![],
                    unread: vec![],
                    checked_ms,
                });
                (state.power_watts, state.power_read_ms) = (watts.map(|w| w.0), watts.map(|w| w.1));
                (state.clock_drift_ms, state.clock_read_ms) = (drift.map(|d| d.0), drift.map(|d| d.1));
                Seen::of(&state)
            };
        use bmcfleet_schema::Health::{Critical, Ok};
        let old = now - 181_000; // more than three intervals ago
        let book = [
            ("a", seen(Some((Critical, now - 1_000)), Some((250.0, now - 1_000)), Some((-90_000, now - 1_000)))),
            ("b", seen(Some((Ok, now - 1_000)), Some((100.0, now - 1_000)), Some((2_000, now - 1_000)))),
            ("c", seen(Some((Critical, old)), Some((999.0, old)), Some((-999_000, old)))),
            ("d", seen(None, None, None)),
        ];
        let census = |settings: &Settings| ReadingsCensus::of(book.iter().map(|(n, s)| (*n, s)), settings, now);
        let c = census(&settings);
        assert_eq!(c.health, [("critical", 1), ("ok", 1), ("unknown", 2)].into_iter().collect());
        assert_eq!((c.power_watts_sum, c.power_machines), (350.0, 2), "c's reading is too old to count");
        assert_eq!((c.clock_drift_max_seconds, c.clock_machines), (90.0, 2), "the largest absolute drift");
        assert!(c.per_machine.is_empty(), "no series per machine unless asked");
        let c = census(&Settings { per_machine_metrics: true, ..settings.clone() });
        assert_eq!(
            c.per_machine,
            [("a".to_owned(), Some(250.0), Some(-90.0)), ("b".to_owned(), Some(100.0), Some(2.0))]
        );
        // A reading turned off no longer counts, whatever the book holds.
        let c = census(&Settings { power_reading_interval: None, health_interval: None, ..settings });
        assert_eq!((c.power_machines, c.health.get("unknown")), (0, Some(&4)));
    }

    #[test]
    fn first_polls_are_spread_over_the_interval_and_repeat_once_per_interval() {
        let settings = Settings {
            poll_interval: Some(Duration::from_secs(60)),
            heartbeat: Duration::from_secs(600),
            poll_timeout: Duration::from_secs(10),
            inventory_interval: Some(Duration::from_secs(600)),
            inventory_timeout: Duration::from_secs(120),
            seen_every: Duration::from_secs(15),
            stale_grace: Duration::from_secs(15),
            health_interval: None,
            health_log_window: Duration::from_secs(3600),
            power_reading_interval: None,
            clock_interval: None,
            per_machine_metrics: false,
        };
        let start = Instant::now();
        let mut s = Schedule::default();
        let machines: Vec<_> = (0..200).map(|i| machine(&format!("m{i}"), None)).collect();
        s.refresh(1, || machines.clone(), &settings, start);
        assert_eq!(s.len(), 200);
        assert!(s.take_due(start, &settings).len() < 20, "not all at once");
        let half = s.take_due(start + Duration::from_secs(30), &settings).len();
        assert!((60..=140).contains(&half), "about half in the first half interval: {half}");
        let rest = s.take_due(start + Duration::from_secs(60), &settings);
        assert!(half + rest.len() >= 190, "everyone once within the interval");
        let with_inventory = rest.iter().filter(|(_, due)| due.has(Reading::Inventory)).count();
        assert!(with_inventory < 40, "inventories spread over their own (10×) interval: {with_inventory}");
        // Nobody comes back before 0.9 interval after its poll.
        assert!(s.take_due(start + Duration::from_secs(60), &settings).is_empty());
        // The same generation changes nothing; a removal drops the machine.
        s.refresh(1, || unreachable!("same generation: the registry is not read"), &settings, start);
        assert_eq!(s.len(), 200);
        s.refresh(2, || machines[..10].to_vec(), &settings, start);
        assert_eq!(s.len(), 10);
        // A machine's own interval; polling off.
        let mut s = Schedule::default();
        s.refresh(1, || vec![machine("fast", Some(Duration::from_secs(10)))], &settings, start);
        let mut polls = 0;
        for t in 0..=60 {
            polls += s.take_due(start + Duration::from_secs(t), &settings).len();
        }
        assert!((5..=7).contains(&polls), "every ~10 s for a minute: {polls}");
        let off = Settings { poll_interval: None, ..settings };
        let mut s = Schedule::default();
        s.refresh(1, || vec![machine("m", None)], &off, start);
        assert!(s.is_empty());
    }
}
