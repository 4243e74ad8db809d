//! Workload builders and the ordering / exactly-once checks shared by the
//! pipeline, chaos and cluster suites. They read the `bmc-sim` execution log,
//! which records every action every worker process performed.

use crate::Producer;
use bmcfleet_schema::*;
use bmcfleet_testing::LogEntry;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// A batch for a simulated BMC with inline credentials (the test gateways
/// seal them: see [`crate::producer::Topology`]).
pub fn sim_batch(address: &str, actions: Vec<Action>) -> Batch {
    target_batch(address.parse().expect("valid address"), Protocol::Sim, "pw-in-line", actions)
}

/// A batch for the ad hoc target `address` spoken to with `protocol`,
/// inline credentials `admin` / `password`; it stops at the first error and
/// has 600 s.
pub fn target_batch(address: BmcAddress, protocol: Protocol, password: &str, actions: Vec<Action>) -> Batch {
    Batch {
        plan: false,
        events: Default::default(),
        id: None,
        machine: None,
        bmc: Some(BmcTarget {
            address,
            protocol,
            credentials: Credentials::Inline { username: "admin".into(), password: Secret::new(password) },
            tls: TlsOptions::default(),
            system_id: None,
            options: Default::default(),
        }),
        actions,
        on_error: OnError::Stop,
        deadline: Some(Duration::from_secs(600)),
    }
}

/// A rotating mix of one-, two- and three-action batches, including a
/// non-idempotent power cycle.
pub fn mixed_actions(i: usize) -> Vec<Action> {
    match i % 4 {
        0 => vec![Action::Power(PowerOp::On)],
        1 => vec![
            Action::BootDevice(BootDeviceRequest { device: BootDevice::Pxe, persistent: false, efi: false }),
            Action::Power(PowerOp::Cycle),
        ],
        2 => vec![Action::Power(PowerOp::Status), Action::Power(PowerOp::Off), Action::Power(PowerOp::On)],
        _ => vec![Action::Inventory],
    }
}

/// Submission order per BMC key.
pub type PerBmc = HashMap<String, Vec<BatchId>>;

/// Submit batches and return all ids plus, per BMC, the ids in submission
/// order. Each BMC's batches are submitted one after the other (each accepted
/// before the next is sent), different BMCs concurrently.
pub async fn submit_all(p: &Producer, batches: Vec<Batch>) -> (Vec<BatchId>, PerBmc) {
    let mut groups: Vec<(String, Vec<Batch>)> = vec![];
    let mut index: HashMap<String, usize> = HashMap::new();
    for b in batches {
        let key = b.key().map(|k| k.to_string()).unwrap_or_default();
        let i = *index.entry(key.clone()).or_insert_with(|| {
            groups.push((key.clone(), vec![]));
            groups.len() - 1
        });
        groups[i].1.push(b);
    }
    let mut tasks = tokio::task::JoinSet::new();
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(32));
    for (key, batches) in groups {
        let p = p.clone();
        let permits = permits.clone();
        tasks.spawn(async move {
            let _permit = permits.acquire_owned().await.unwrap();
            let mut ids = vec![];
            for b in batches {
                match p.submit(&b, false).await {
                    Reply::Accepted(a) => {
                        assert!(!a.duplicate, "fresh batch reported as duplicate");
                        ids.push(a.id);
                    }
                    other => panic!("batch for {key} not accepted: {other:?}"),
                }
            }
            (key, ids)
        });
    }
    let mut all = vec![];
    let mut per_bmc = PerBmc::new();
    while let Some(r) = tasks.join_next().await {
        let (key, ids) = r.expect("submit task");
        all.extend(ids.iter().copied());
        per_bmc.insert(key, ids);
    }
    (all, per_bmc)
}

/// Per BMC: the batches the simulator saw form contiguous runs in submission
/// order, and no action overlapped another on the same BMC.
pub fn assert_ordered(log: &[LogEntry], per_bmc: &PerBmc) {
    let mut seen: HashMap<&str, Vec<BatchId>> = HashMap::new();
    for e in log {
        assert_eq!(e.concurrent, 1, "BMC {} ran two actions at once: {e:?}", e.bmc);
        let call = e.call.as_ref().expect("worker calls carry call info");
        let runs = seen.entry(e.bmc.as_str()).or_default();
        if runs.last() != Some(&call.batch) {
            assert!(!runs.contains(&call.batch), "BMC {}: batch {} resumed after another batch ran", e.bmc, call.batch);
            runs.push(call.batch);
        }
    }
    for (bmc, submitted) in per_bmc {
        let ran = seen.get(bmc.as_str()).cloned().unwrap_or_default();
        for id in submitted.iter().filter(|id| !ran.contains(id)) {
            let entries: Vec<_> = log.iter().filter(|e| e.call.as_ref().is_some_and(|c| c.batch == *id)).collect();
            eprintln!("batch {id} of {bmc} missing from the run order; its log entries: {entries:?}");
        }
        assert_eq!(&ran, submitted, "BMC {bmc}: execution order differs from submission order");
    }
}

/// What crashes cost, as checked by [`assert_exactly_once`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CrashCost {
    /// Idempotent actions that ran a second time after their worker died mid-action.
    pub reruns: usize,
    /// Non-idempotent actions reported `interrupted` instead of being re-run.
    pub interrupted: usize,
}

/// Every batch has exactly one final result; the only failures are
/// `interrupted` actions (and the `skipped` ones after them); an action runs
/// twice only when its first run was on a worker in `killed` and it is
/// idempotent; a non-idempotent action never runs twice.
pub fn assert_exactly_once(
    log: &[LogEntry],
    ids: &[BatchId],
    results: &HashMap<BatchId, BatchResult>,
    killed: &HashSet<String>,
) -> CrashCost {
    let mut cost = CrashCost::default();
    assert_eq!(results.len(), ids.len(), "every batch has exactly one final result");
    for id in ids {
        let r = results.get(id).unwrap_or_else(|| panic!("batch {id} has no final result"));
        for a in &r.results {
            if let Some(e) = &a.error {
                assert!(matches!(e.code, ErrorCode::Interrupted | ErrorCode::Skipped), "unexpected failure {a:?}");
                cost.interrupted += usize::from(e.code == ErrorCode::Interrupted);
            }
        }
    }
    let mut runs: HashMap<(BatchId, u32), Vec<&LogEntry>> = HashMap::new();
    for e in log {
        let c = e.call.as_ref().expect("call info");
        runs.entry((c.batch, c.index)).or_default().push(e);
    }
    for ((batch, index), entries) in &runs {
        if entries.len() < 2 {
            continue;
        }
        cost.reruns += entries.len() - 1;
        for earlier in &entries[..entries.len() - 1] {
            let w = &earlier.call.as_ref().unwrap().worker;
            assert!(
                killed.contains(w),
                "{batch}/{index} ran again after a run on {w}, which was not killed: {:?}",
                entries
                    .iter()
                    .map(|e| (e.seq, &e.action, e.call.as_ref().map(|c| (&c.worker, c.delivery))))
                    .collect::<Vec<_>>()
            );
        }
        assert!(
            !matches!(
                entries[0].action.as_str(),
                "power_cycle" | "power_reset" | "power_nmi" | "bmc_reset" | "raw" | "user_create"
            ),
            "non-idempotent {batch}/{index} ({}) ran {} times",
            entries[0].action,
            entries.len()
        );
    }
    cost
}

/// `bmcctl --json machine ls` output (one JSON object per line), by the
/// machine name each line carries.
pub fn machines_by_name(out: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}"));
            (v["name"].as_str().expect("every line names its machine").to_owned(), v)
        })
        .collect()
}
