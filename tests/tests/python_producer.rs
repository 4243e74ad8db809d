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
/// mismatch (`SchemaError`) too, with a code and a handling of its own, so
/// one `except BmcfleetError` catches all.
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
