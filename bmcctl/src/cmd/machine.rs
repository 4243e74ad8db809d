//! `bmcctl machine apply|add|set|get|ls|rm`: the machine registry, written
//! by operators (the NATS user needs write access to `<STREAM>_MACHINES`);
//! `ls` adds each machine's observed state from `<STREAM>_STATE`, which
//! only workers write (bmcctl never creates it). `machine watch`:
//! [`super::machine_watch`].
//!
//! Output: `ls` is a table (`--output wide`: more columns), or one JSON
//! line per machine (its record and `state`); `get` prints the record as
//! JSON in every format, `--output wide` adds its observed `state`; `apply
//! --output json` prints one document of the names added, changed and
//! removed (and how many were unchanged).
//!
//! # Machine file
//! YAML (or JSON, which is YAML) with a `machines` list, each entry a
//! [`Machine`] record:
//! ```yaml
//! machines:
//!   - name: rack12-node3
//!     address: 10.0.12.3
//!     protocol: redfish
//!     credentials: rack12-bmc      # a named credential (bmcctl cred put)
//!     tls: {ca_pem: "-----BEGIN CERTIFICATE-----..."}
//!     labels: {rack: "12", site: fra1}
//!     tenant: default
//! ```
//! `apply` is declarative and idempotent: it prints what it adds, changes
//! and (with `--prune`) removes, and writes only those; applying the same
//! file twice changes nothing. The whole file is checked first, before
//! connecting ([`super::machine_file`]: unknown fields, bad values with the
//! entry's name, line and column, duplicate names or hosts), then against
//! the machines it keeps and the credentials bucket; nothing is written
//! unless all of it is valid.

use crate::cli::MachineOp;
use crate::output::Format;
use anyhow::{bail, Context};
use bmcfleet_common::config::TopologyArgs;
use bmcfleet_common::streams;
use bmcfleet_schema::audit::{AuditEvent, AuditRecord};
use bmcfleet_schema::state::MachineState;
use bmcfleet_schema::{Machine, Subjects};
use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use std::collections::BTreeMap;
use std::process::ExitCode;

/// Read and check a machine file before connecting (see [`super::machine_file`]):
/// an unreadable or invalid file is a [`crate::Usage`] error (exit 2).
pub fn read_file(file: &str) -> anyhow::Result<Vec<Machine>> {
    let text = std::fs::read_to_string(file).map_err(|e| crate::Usage(format!("cannot read {file}: {e}")))?;
    super::machine_file::parse(&text, file)
}

/// What can be checked before connecting: the machine file of `apply`;
/// the fields of `add`/`set` (labels, lists, a CA file) on a scratch record.
pub fn prepare(op: &MachineOp) -> anyhow::Result<Option<Vec<Machine>>> {
    match op {
        MachineOp::Apply { file, .. } => read_file(file).map(Some),
        MachineOp::Add { name, fields } | MachineOp::Set { name, fields } => {
            let mut scratch = Machine::new(name.clone(), "127.0.0.1".parse()?, Default::default(), "x");
            fields.apply_to(&mut scratch).map_err(|e| anyhow::Error::new(crate::Usage(format!("{e:#}"))))?;
            Ok(None)
        }
        _ => Ok(None),
    }
}

/// Refuse (or warn, `allow`) machines naming a credential not in the credentials bucket.
async fn credentials_known<'a>(
    js: &async_nats::jetstream::Context,
    subjects: &Subjects,
    machines: impl IntoIterator<Item = &'a Machine>,
    allow: bool,
) -> anyhow::Result<()> {
    let bucket = subjects.credentials_bucket();
    let stored = super::machine_file::stored_credentials(js, &bucket).await?;
    super::machine_file::check_credentials(&super::machine_file::missing_credentials(machines, &stored), &bucket, allow)
}

impl crate::cli::MachineFields {
    /// Apply the given fields to `m`.
    fn apply_to(&self, m: &mut Machine) -> anyhow::Result<()> {
        if let Some(a) = &self.address {
            m.address = a.clone();
        }
        if let Some(p) = self.protocol {
            m.protocol = p;
        }
        if let Some(c) = &self.credentials {
            m.credentials = c.clone();
        }
        if let Some(t) = &self.tenant {
            m.tenant = t.clone();
        }
        if let Some(s) = &self.system_id {
            m.system_id = Some(s.clone());
        }
        if let Some(list) = &self.protocols {
            m.protocols = list
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| {
                    serde_json::from_value::<bmcfleet_schema::Protocol>(serde_json::Value::String(p.trim().to_owned()))
                        .map_err(|_| anyhow::anyhow!("--protocols: `{p}` is not a protocol (redfish, ipmi, amt)"))
                })
                .collect::<anyhow::Result<_>>()?;
        }
        if let Some(auth) = self.redfish_auth {
            m.redfish.auth = auth;
        }
        if let Some(list) = &self.ipmi_cipher_suites {
            m.ipmi.cipher_suites = list
                .iter()
                .filter(|s| !s.is_empty())
                .map(|s| {
                    s.trim().parse::<u8>().map_err(|_| {
                        anyhow::anyhow!("--ipmi-cipher-suites: `{s}` is not a cipher suite number (17, 3)")
                    })
                })
                .collect::<anyhow::Result<_>>()?;
        }
        if let Some(p) = self.ipmi_privilege {
            m.ipmi.privilege = Some(p);
        }
        if let Some(path) = &self.ca_file {
            m.tls.ca_pem =
                Some(std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?);
        }
        if let Some(i) = self.insecure {
            m.tls.insecure = i;
        }
        if let Some(pin) = &self.pin_sha256 {
            m.tls.pin_sha256 = Some(pin.clone());
        }
        if let Some(allow) = self.allow_plain_http {
            m.tls.allow_plain_http = allow;
        }
        for l in &self.labels {
            let (k, v) = l.split_once('=').with_context(|| format!("label `{l}`: write key=value"))?;
            if v.is_empty() {
                m.labels.remove(k);
            } else {
                m.labels.insert(k.to_owned(), v.to_owned());
            }
        }
        Ok(())
    }
}

/// Write one record after the same checks as `apply` (valid, host not taken by another machine).
async fn put_one(
    kv: &async_nats::jetstream::kv::Store,
    js: &async_nats::jetstream::Context,
    subjects: &bmcfleet_schema::Subjects,
    actor: &str,
    m: &Machine,
) -> anyhow::Result<()> {
    m.validate()?;
    if let Some(why) = load_all(kv).await?.values().find_map(|o| m.conflict_with(o)) {
        bail!("{why}");
    }
    let revision = bmcfleet_common::registry::put(kv, m).await.map_err(anyhow::Error::msg)?;
    audit(
        js,
        subjects,
        actor,
        AuditEvent::MachinePut { machine: m.name.clone(), revision, record: serde_json::to_value(m)? },
    )
    .await;
    Ok(())
}

/// Every registered machine, by name: what a fleet run chooses from.
pub(crate) async fn registry(
    nats: async_nats::Client,
    topology: &TopologyArgs,
) -> anyhow::Result<BTreeMap<String, Machine>> {
    let bucket = topology.subjects().machines_bucket();
    let kv = registry_bucket(&async_nats::jetstream::new(nats), topology).await?;
    load_all(&kv).await.with_context(|| format!("the machine registry (bucket {bucket})"))
}

/// The machine registry's bucket (created when missing, as `apply` would).
pub(crate) async fn registry_bucket(
    js: &async_nats::jetstream::Context,
    topology: &TopologyArgs,
) -> anyhow::Result<async_nats::jetstream::kv::Store> {
    let subjects = topology.subjects();
    let bucket = subjects.machines_bucket();
    streams::bucket(js, streams::machines_config(&subjects, usize::from(topology.replicas)), streams::Mode::UseExisting)
        .await
        .with_context(|| format!("the machine registry (bucket {bucket})"))
}

/// Reads of the state bucket at once (`machine ls`).
const STATE_READS_IN_FLIGHT: usize = 32;

/// The observed state of each of `names` that has a record (`machine ls`).
/// Only workers create the state bucket: before any has run there is none,
/// and every machine simply has no state. Any other failure is a warning,
/// not an error: the registry is still worth listing.
pub(crate) async fn states<'a>(
    js: &async_nats::jetstream::Context,
    subjects: &Subjects,
    names: impl Iterator<Item = &'a str>,
) -> BTreeMap<String, MachineState> {
    let bucket = subjects.state_bucket();
    let kv = match js.get_key_value(&bucket).await {
        Ok(kv) => kv,
        Err(e) if bucket_missing(&e) => return BTreeMap::new(),
        Err(e) => {
            eprintln!("warning: cannot read the observed state (bucket {bucket}): {e}");
            return BTreeMap::new();
        }
    };
    let reads = futures::stream::iter(names.map(|name| {
        let kv = &kv;
        async move { (name, kv.get(name).await) }
    }))
    .buffered(STATE_READS_IN_FLIGHT);
    let mut out = BTreeMap::new();
    let seen = seen(&kv, subjects).await;
    let mut reads = std::pin::pin!(reads);
    while let Some((name, read)) = reads.next().await {
        match read {
            Ok(Some(bytes)) => match serde_json::from_slice::<MachineState>(&bytes) {
                Ok(mut s) => {
                    if let Some((at, worker)) = seen.get(name) {
                        s.merge_seen(at, worker);
                    }
                    out.insert(name.to_owned(), s);
                }
                Err(e) => eprintln!("warning: the observed state of `{name}` is unreadable ({e})"),
            },
            Ok(None) => {}
            Err(e) => eprintln!("warning: cannot read the observed state of `{name}`: {e}"),
        }
    }
    out
}

/// The partitions' latest word on their polled machines (written every
/// `--state-seen-interval` by each owner; a machine's own record only on a
/// change or heartbeat): each machine's last observation and answer, and
/// the worker that made them.
async fn seen(
    kv: &async_nats::jetstream::kv::Store,
    subjects: &Subjects,
) -> std::collections::HashMap<String, (bmcfleet_schema::state::SeenAt, String)> {
    use bmcfleet_schema::state::PartitionSeen;
    let reads =
        futures::stream::iter((0..subjects.partitions).map(|p| async move { kv.get(subjects.seen_key(p)).await }))
            .buffered(STATE_READS_IN_FLIGHT);
    let mut reads = std::pin::pin!(reads);
    let mut out: std::collections::HashMap<String, (bmcfleet_schema::state::SeenAt, String)> = Default::default();
    while let Some(read) = reads.next().await {
        let Ok(Some(bytes)) = read else { continue };
        let Ok(record) = serde_json::from_slice::<PartitionSeen>(&bytes) else { continue };
        for (name, at) in record.machines {
            if out.get(&name).is_none_or(|(had, _)| had.observed_ms < at.observed_ms) {
                out.insert(name, (at, record.worker.clone()));
            }
        }
    }
    out
}

/// Whether opening a bucket failed because its stream does not exist.
pub(crate) fn bucket_missing(e: &async_nats::jetstream::context::KeyValueError) -> bool {
    use async_nats::jetstream::context::{GetStreamError, GetStreamErrorKind};
    use async_nats::jetstream::ErrorCode;
    std::error::Error::source(e).and_then(|s| s.downcast_ref::<GetStreamError>()).is_some_and(
        |s| matches!(s.kind(), GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND),
    )
}

/// One `machine ls --output json` line, and `machine get --output wide`:
/// the record, and its observed state (`null`: none yet).
#[derive(Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    machine: &'a Machine,
    state: Option<&'a MachineState>,
    /// Whether the state still says how the machine is (`current`,
    /// `stale`, `unknown`), judged now; absent without a state.
    #[serde(skip_serializing_if = "Option::is_none")]
    freshness: Option<bmcfleet_schema::state::Freshness>,
    /// The health verdict judged now, as the HEALTH column shows it (`ok`,
    /// `warning`, `critical`; `unknown` while the machine does not answer
    /// or its state is stale); absent when never checked. The reasons are
    /// in `state.health`.
    #[serde(skip_serializing_if = "Option::is_none")]
    health: Option<&'static str>,
}

impl<'a> Listed<'a> {
    fn new(machine: &'a Machine, state: Option<&'a MachineState>) -> Listed<'a> {
        let now = bmcfleet_common::runtime::now_ms();
        let health = Some(crate::output::health_cell(state, now)).filter(|h| *h != "-");
        Listed { machine, state, freshness: state.map(|s| s.freshness(now)), health }
    }
}

/// What `machine apply` changed (or would, `dry_run`): its `--output json` document.
#[derive(Debug, Default, Serialize)]
struct Applied {
    added: Vec<String>,
    changed: Vec<String>,
    removed: Vec<String>,
    unchanged: usize,
    dry_run: bool,
}

pub(crate) async fn load_all(kv: &async_nats::jetstream::kv::Store) -> anyhow::Result<BTreeMap<String, Machine>> {
    let keys: Vec<String> = kv.keys().await?.try_collect().await?;
    let mut all = BTreeMap::new();
    for k in keys {
        if let Some(v) = kv.get(&k).await? {
            match serde_json::from_slice::<Machine>(&v) {
                Ok(m) => {
                    all.insert(k, m);
                }
                Err(e) => eprintln!(
                    "warning: the stored record of `{k}` is unreadable ({e}); apply replaces it if the file names it"
                ),
            }
        }
    }
    Ok(all)
}

/// Record a record written (`bmc-cert replace`'s pin changes).
pub(crate) async fn audit_put(
    js: &async_nats::jetstream::Context,
    subjects: &bmcfleet_schema::Subjects,
    actor: &str,
    m: &Machine,
    revision: u64,
) {
    let record = serde_json::to_value(m).unwrap_or_default();
    audit(js, subjects, actor, AuditEvent::MachinePut { machine: m.name.clone(), revision, record }).await;
}

/// Record who changed the registry (the gateways record every revision too).
async fn audit(
    js: &async_nats::jetstream::Context,
    subjects: &bmcfleet_schema::Subjects,
    actor: &str,
    what: AuditEvent,
) {
    let record = AuditRecord::new(bmcfleet_common::runtime::now_ms(), actor, what);
    if let Err(e) = bmcfleet_common::audit::write(js, subjects.audit_registry(), &record, None).await {
        eprintln!("warning: the change is made but not in the audit log: {e}");
    }
}

pub async fn run(
    nats: async_nats::Client,
    topology: &TopologyArgs,
    op: &MachineOp,
    file_machines: Option<Vec<Machine>>,
    actor: &str,
    format: Format,
) -> anyhow::Result<ExitCode> {
    let subjects = topology.subjects();
    let js = async_nats::jetstream::new(nats);
    let kv = registry_bucket(&js, topology).await?;
    match op {
        MachineOp::Apply { file, prune, dry_run, allow_missing_credentials } => {
            let wanted = match file_machines {
                Some(w) => w,
                None => read_file(file)?,
            };
            credentials_known(&js, &subjects, &wanted, *allow_missing_credentials).await?;
            let stored = load_all(&kv).await?;
            let wanted_names: BTreeMap<&str, &Machine> = wanted.iter().map(|m| (m.name.as_str(), m)).collect();
            // Hosts of machines that stay must not collide with the file's.
            for (name, m) in &stored {
                if !*prune && !wanted_names.contains_key(name.as_str()) {
                    if let Some(why) = wanted.iter().find_map(|w| w.conflict_with(m)) {
                        bail!("{file}: {why}; `{name}` is registered and stays (remove it or use --prune)");
                    }
                }
            }
            let mut plan = Applied { dry_run: *dry_run, ..Applied::default() };
            for m in &wanted {
                match stored.get(&m.name) {
                    Some(old) if old == m => {
                        plan.unchanged += 1;
                        continue;
                    }
                    Some(_) => plan.changed.push(m.name.clone()),
                    None => plan.added.push(m.name.clone()),
                }
                if !format.is_json() {
                    println!("{} {}", if stored.contains_key(&m.name) { "~" } else { "+" }, m.name);
                }
                if !dry_run {
                    let revision = bmcfleet_common::registry::put(&kv, m)
                        .await
                        .map_err(anyhow::Error::msg)
                        .with_context(|| format!("writing {}", m.name))?;
                    let record = serde_json::to_value(m)?;
                    audit(&js, &subjects, actor, AuditEvent::MachinePut { machine: m.name.clone(), revision, record })
                        .await;
                }
            }
            if *prune {
                for name in stored.keys().filter(|n| !wanted_names.contains_key(n.as_str())) {
                    if !format.is_json() {
                        println!("- {name}");
                    }
                    plan.removed.push(name.clone());
                    if !dry_run {
                        let revision =
                            kv.delete(name.as_str()).await.map(|_| 0).with_context(|| format!("removing {name}"))?;
                        audit(&js, &subjects, actor, AuditEvent::MachineRemoved { machine: name.clone(), revision })
                            .await;
                    }
                }
            }
            if format.is_json() {
                println!("{}", serde_json::to_string(&plan)?);
            } else {
                let verb = if *dry_run { "would apply" } else { "applied" };
                let (added, changed, removed) = (plan.added.len(), plan.changed.len(), plan.removed.len());
                println!("{verb}: {added} added, {changed} changed, {removed} removed, {} unchanged", plan.unchanged);
            }
        }
        MachineOp::Add { name, fields } => {
            if kv.get(name.as_str()).await?.is_some() {
                bail!("machine `{name}` is already registered (use `machine set`)");
            }
            let (Some(address), Some(credentials)) = (&fields.address, &fields.credentials) else {
                bail!("machine add needs --address and --credentials");
            };
            let mut m = Machine::new(name.clone(), address.clone(), Default::default(), credentials.clone());
            fields.apply_to(&mut m)?;
            credentials_known(&js, &subjects, [&m], fields.allow_missing_credentials).await?;
            put_one(&kv, &js, &subjects, actor, &m).await?;
            println!("added {name}");
        }
        MachineOp::Set { name, fields } => {
            let Some(v) = kv.get(name.as_str()).await? else {
                eprintln!("machine_not_found: no machine named `{name}` is registered");
                return Ok(ExitCode::from(4));
            };
            let mut m: Machine = serde_json::from_slice(&v).with_context(|| format!("the stored record of {name}"))?;
            fields.apply_to(&mut m)?;
            if fields.credentials.is_some() {
                credentials_known(&js, &subjects, [&m], fields.allow_missing_credentials).await?;
            }
            put_one(&kv, &js, &subjects, actor, &m).await?;
            println!("changed {name}");
        }
        MachineOp::Get { name } => match kv.get(name.as_str()).await? {
            Some(v) => {
                let m: Machine = serde_json::from_slice(&v).with_context(|| format!("the stored record of {name}"))?;
                if format.is_wide() {
                    let states = states(&js, &subjects, std::iter::once(name.as_str())).await;
                    println!("{}", serde_json::to_string_pretty(&Listed::new(&m, states.get(name)))?);
                } else {
                    println!("{}", serde_json::to_string_pretty(&m)?);
                }
            }
            None => {
                eprintln!("machine_not_found: no machine named `{name}` is registered");
                return Ok(ExitCode::from(4));
            }
        },
        MachineOp::Ls { names, selector, tenant } => {
            let mut machines = load_all(&kv).await?;
            let unknown: Vec<&str> =
                names.iter().filter(|n| !machines.contains_key(n.as_str())).map(String::as_str).collect();
            if !unknown.is_empty() {
                eprintln!("machine_not_found: no machine named {} is registered", unknown.join(", "));
                return Ok(ExitCode::from(2));
            }
            machines.retain(|name, m| {
                (names.is_empty() || names.contains(name))
                    && selector.as_ref().is_none_or(|s| s.matches(&m.labels))
                    && tenant.as_ref().is_none_or(|t| *t == m.tenant)
            });
            let states = states(&js, &subjects, machines.keys().map(String::as_str)).await;
            let rows: Vec<(&Machine, Option<&MachineState>)> =
                machines.values().map(|m| (m, states.get(&m.name))).collect();
            if format.is_json() {
                for (machine, state) in rows {
                    println!("{}", serde_json::to_string(&Listed::new(machine, state))?);
                }
            } else {
                print!("{}", crate::output::machine_table(&rows, bmcfleet_common::runtime::now_ms(), format.is_wide()));
            }
        }
        MachineOp::Watch { names, selector, tenant } => {
            let filter = super::machine_watch::Filter {
                names: names.clone(),
                selector: selector.clone(),
                tenant: tenant.clone(),
            };
            return super::machine_watch::run(&js, topology, &kv, filter, format).await;
        }
        MachineOp::Rm { name } => {
            if kv.get(name.as_str()).await?.is_none() {
                eprintln!("machine_not_found: no machine named `{name}` is registered");
                return Ok(ExitCode::from(4));
            }
            kv.delete(name.as_str()).await.with_context(|| format!("removing {name}"))?;
            audit(&js, &subjects, actor, AuditEvent::MachineRemoved { machine: name.clone(), revision: 0 }).await;
            println!("removed {name}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
