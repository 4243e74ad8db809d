//! The Python producer of examples/python (nats-py), written from
//! schema/asyncapi.yaml, against the real stack: nats-server, bmc-gateway,
//! bmc-worker and bmc-sim. `demo.py` submits and waits, follows events,
//! reads status, cancels (a finished batch: conflict; a running one:
//! cancelled), sees action errors (any failure code, then skipped) and every refusal it
//! can provoke, validating each reply and event against schema/json/; this
//! test checks every step reported `ok` and what the simulated BMC did.
//!
//! Python with nats-py, msgpack and jsonschema (examples/python/requirements.txt)
//! comes from `$BMCFLEET_PYTHON`, else `.tools/bin/python3` (scripts/setup.sh
//! installs them there). Without it the test skips with a note, unless
//! `BMCFLEET_REQUIRE_PEERS=1` (scripts/test.sh).

use bmcfleet_schema::PowerState;
use bmcfleet_testing::{peers, SimConfig};
use bmcfleet_tests::checks::sim_batch;
use bmcfleet_tests::producer::SimStack;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn python() -> Option<PathBuf> {
    let candidates =
        std::env::var_os("BMCFLEET_PYTHON").map(PathBuf::from).into_iter().chain([root().join(".tools/bin/python3")]);
    peers::or_skip(
        peers::python_with(candidates, "nats, msgpack, jsonschema"),
        "no python3 with nats-py, msgpack and jsonschema (examples/python/requirements.txt)",
        "scripts/setup.sh installs them into .tools, or set BMCFLEET_PYTHON",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_producer_works_against_the_real_stack() {
    let Some(python) = python() else { return };
    let stack =
        SimStack::start(SimConfig { record_calls: true, ..SimConfig::default() }).await.with_workers(1, &[]).await;
    let (producer, topo, sim) = (&stack.producer, &stack.topology, &stack.sim);
    let register = |address: &'static str| {
        let target = sim_batch(address, vec![]).bmc.unwrap();
        let (topo, client) = (topo.clone(), producer.client.clone());
        async move { topo.register_machine(&client, &target).await }
    };
    let machine = register("10.0.0.7").await;
    let failing = register("fail-1.example").await;
    let slow = register("slow-1.example").await;

    let run = tokio::process::Command::new(&python)
        .arg(root().join("examples/python/demo.py"))
        .args([
            "--server",
            &stack.nats.url(),
            "--machine",
            &machine,
            "--failing-machine",
            &failing,
            "--slow-machine",
            &slow,
        ])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("demo.py finishes within 180 s")
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo.py failed ({}):\n{stdout}\n{stderr}", out.status);
    eprintln!("{stdout}");
    let steps: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("ok ")).collect();
    let expected = [
        "plan sim power_cycle",
        "submit_wait",
        "status succeeded",
        "follow action_started action_finished action_started action_finished batch_finished",
        "duplicate",
        "cancel_finished_conflict 409",
        "cancel_running",
        "action_errors bmc_error (bmc) skipped",
        "refused malformed 400",
        "refused empty_batch 400",
        "refused too_many_actions 400",
        "refused machine_not_found 404",
        "refused invalid_field 400",
        "refused not_found 404",
        "rollout rollout_started rollout_progress rollout_finished pause_finished 409",
    ];
    for step in expected {
        assert!(steps.iter().any(|s| s.starts_with(step)), "step `{step}` missing from demo.py's output:\n{stdout}");
    }
    assert_eq!(steps.iter().filter(|s| s.starts_with("refused ")).count(), 8, "{stdout}");
    // What the BMCs saw: the batches really ran, in the order submitted,
    // and nothing ran on the slow machine after the cancel but what had started.
    let actions = |bmc: &str| -> Vec<String> { sim.calls(bmc).into_iter().filter_map(|c| c.action).collect() };
    assert_eq!(
        actions("v4-10-0-0-7"),
        ["boot_device", "power_on", "power_status", "power_cycle", "inventory", "power_status"],
        "the machine's calls: submit_wait's batch, then follow's (the plan and the duplicate ran nothing), then the rollout's"
    );
    assert_eq!(sim.power("v4-10-0-0-7"), Some(PowerState::On));
    assert!(actions("h-slow-1_example").len() <= 1, "a cancelled batch ran on: {:?}", actions("h-slow-1_example"));
    assert_eq!(
        actions("h-fail-1_example"),
        ["power_on"],
        "the failing BMC got the first action only (the second was skipped)"
    );
}

/// Every error of the Python client is a `BmcfleetError`: a contract
/// mismatch (`SchemaError`) and an unreadable state bucket
/// (`StateUnavailable`) too, with a code and a handling of their own, so
/// one `except BmcfleetError` catches all. Its freshness rule is bmcctl's:
/// a record older than its `stale_after_ms` is stale, its power unknown.
#[test]
fn the_python_client_s_errors_share_one_base_class() {
    let Some(python) = python() else { return };
    let program = r#"
import bmcfleet
assert issubclass(bmcfleet.SchemaError, bmcfleet.BmcfleetError)
try:
    raise bmcfleet.SchemaError("reply Content-Type 'text/plain'")
except bmcfleet.BmcfleetError as e:
    assert (e.code, e.handling, e.retryable) == ("schema_mismatch", "operator", False), (e.code, e.handling)
    assert str(e) == "schema_mismatch: reply Content-Type 'text/plain'", str(e)
e = bmcfleet.BmcfleetError("unavailable", "no worker", 503)
assert (e.handling, e.retryable, e.status) == ("retry", True, 503)
assert issubclass(bmcfleet.StateUnavailable, bmcfleet.BmcfleetError)
assert bmcfleet.StateUnavailable("no bucket").retryable
# Freshness as bmcctl judges it (schema/src/state.rs): older than stale_after_ms is stale.
s = {"machine": "m", "tenant": "default", "power": "on", "contactable": True, "last_changed_ms": 0,
     "updated_ms": 1000, "observed_ms": 10_000, "stale_after_ms": 4_000, "worker": "w0"}
assert [bmcfleet.freshness(s, now) for now in (14_000, 14_001)] == ["current", "stale"]
assert [bmcfleet.power_now(s, now) for now in (14_000, 14_001)] == ["on", "unknown"]
assert [bmcfleet.contactable_now(s, now) for now in (14_000, 14_001)] == ["yes", "stale"]
down = {**s, "contactable": False, "error_code": "timeout"}
assert (bmcfleet.power_now(down, 10_000), bmcfleet.contactable_now(down, 10_000)) == ("unknown", "no (timeout)")
old = {k: v for k, v in s.items() if k not in ("observed_ms", "stale_after_ms")}
assert bmcfleet.freshness(old, 10**12) == "unknown" and bmcfleet.power_now(old, 10**12) == "on"
assert bmcfleet.freshness({**old, "stale_after_ms": 4_000}, 5_001) == "stale", "updated_ms stands for observed_ms"
seen = bmcfleet.merge_seen(s, {"observed_ms": 20_000, "last_seen_ms": 20_000, "stale_after_ms": 5_000}, "w1")
assert (seen["observed_ms"], seen["worker"], seen["stale_after_ms"], bmcfleet.freshness(seen, 25_000)) == (20_000, "w1", 5_000, "current")
print("ok")
"#;
    let out = std::process::Command::new(&python)
        .args(["-c", program])
        .current_dir(root().join("examples/python"))
        .output()
        .expect("run python");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.trim() == "ok", "{stdout}{stderr}");
}

/// Polls every second, the partition record every second, a grace of 1s:
/// a record is stale 1s + 0.1s + 0.9s + 1s + 1s = 4s after its last
/// observation (as in tests/tests/stale_state.rs).
const POLLS: [&str; 10] = [
    "--poll-interval",
    "1s",
    "--poll-timeout",
    "900ms",
    "--state-seen-interval",
    "1s",
    "--state-stale-grace",
    "1s",
    "--breaker-threshold",
    "0",
];

/// `states.py --json` (examples/python): each machine's record with the
/// example's `freshness` and `power_now`, by name.
async fn python_states(python: &Path, nats_url: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = tokio::process::Command::new(python)
        .arg(root().join("examples/python/states.py"))
        .args(["--server", nats_url, "--json"])
        .kill_on_drop(true)
        .output()
        .await
        .expect("run states.py");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "states.py failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("one JSON record a line"))
        .map(|v| (v["machine"].as_str().unwrap().to_owned(), v))
        .collect()
}

/// Issue 34: the Python example judges the observed state as bmcctl does.
/// While a worker polls, a machine that answers is `current` with its
/// power; one that does not answer shows power `unknown` (never its last
/// reading). Once the worker stops, within the records' `stale_after_ms`
/// (plus the polling of this test), the example shows the answering
/// machine `stale` with power `unknown`, and agrees with `bmcctl machine ls`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_example_shows_stale_state_and_unknown_power() {
    let Some(python) = python() else { return };
    let mut stack = SimStack::start(SimConfig::default()).await.with_workers(1, &POLLS).await;
    let (producer, topo) = (&stack.producer, &stack.topology);
    let register = |address: &'static str| {
        let target = sim_batch(address, vec![]).bmc.unwrap();
        let (topo, client) = (topo.clone(), producer.client.clone());
        async move { topo.register_machine(&client, &target).await }
    };
    let up = register("10.0.0.34").await;
    let down = register("down-34.example").await;
    let url = stack.nats.url();

    // Polled: the answering machine current with its power, the other not
    // contactable and its power unknown.
    let polled = bmcfleet_tests::poll_until(Duration::from_secs(30), Duration::from_millis(300), || async {
        let s = python_states(&python, &url).await;
        let (u, d) = (s.get(&up)?, s.get(&down)?);
        let ready = u["freshness"] == "current"
            && u["contactable"] == true
            && u["power_now"].is_string()
            && d["freshness"] == "current"
            && d["contactable"] == false;
        ready.then_some(s)
    })
    .await
    .expect("both machines polled within 30s");
    let (u, d) = (&polled[&up], &polled[&down]);
    assert_eq!(u["stale_after_ms"], 4_000, "{u}");
    assert_eq!(u["power_now"], u["power"], "an answering, current machine shows its reading: {u}");
    assert_ne!(u["power_now"], "unknown", "{u}");
    assert_eq!(d["power_now"], "unknown", "a machine that does not answer has no known power: {d}");

    // The worker stops: the example shows the machine stale, power unknown.
    let mut worker = stack.workers.pop().unwrap();
    worker.terminate(Duration::from_secs(10));
    let stopped = std::time::Instant::now();
    let stale = bmcfleet_tests::poll_until(Duration::from_secs(20), Duration::from_millis(300), || async {
        let s = python_states(&python, &url).await;
        (s.get(&up)?["freshness"] == "stale").then_some(s)
    })
    .await
    .expect("the example shows the machine stale after the worker stopped");
    assert!(stopped.elapsed() <= Duration::from_secs(10), "stale only {:?} after the stop", stopped.elapsed());
    let u = &stale[&up];
    assert_eq!(u["power_now"], "unknown", "{u}");
    let observed = u["observed_ms"].as_u64().expect("observed_ms");
    assert!(bmcfleet_common::runtime::now_ms().saturating_sub(observed) > 4_000, "stale only past the limit: {u}");

    // The table says it as bmcctl does (POWER unknown, CONTACTABLE stale),
    // and bmcctl agrees.
    let table = std::process::Command::new(&python)
        .arg(root().join("examples/python/states.py"))
        .args(["--server", &url, &up])
        .output()
        .expect("run states.py");
    let text = String::from_utf8_lossy(&table.stdout);
    let row: Vec<&str> = text.lines().find(|l| l.starts_with(&up)).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row.get(1..4), Some(&["unknown", "stale", "stale"][..]), "{text}");
    let ls = std::process::Command::new(bmcfleet_tests::bin("bmcctl"))
        .args(["--nats-url", &url, "--json", "machine", "ls"])
        .output()
        .expect("run bmcctl");
    let machines = bmcfleet_tests::checks::machines_by_name(&String::from_utf8_lossy(&ls.stdout));
    assert_eq!(machines[&up]["freshness"], "stale", "{:?}", machines[&up]);
}
