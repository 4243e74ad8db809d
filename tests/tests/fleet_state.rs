//! Fleet state (issue 19): the owning worker polls every registered
//! machine and keeps its observed state (power, contactable, last seen) in
//! the state bucket, announcing changes on the machine's subject. Against
//! real BMCs: OpenIPMI `ipmi_sim` (power switched with `ipmitool` behind
//! bmcfleet's back, the BMC killed and restarted) and `sushy-emulator`
//! (power switched by a Redfish client); the simulator's call log shows
//! polls never overlap a batch; a killed worker's machines are polled by
//! the survivor within an interval plus the lease TTL.

use bmcfleet_schema::state::MachineEventKind;
use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_tests::machine_events::{machine_state as state_of, MachineEvents as Events};
use bmcfleet_tests::producer::{batch_for, machine_batch, Stack};
use std::time::{Duration, Instant};

/// nats-server, a gateway and one worker (`args`) talking to `sim`, every
/// partition owned.
async fn sim_stack(sim: &bmcfleet_testing::SimServer, args: &[&str]) -> Stack {
    let endpoint = sim.addr().to_string();
    Stack::start(1, &[&["--sim-endpoint", endpoint.as_str()][..], args].concat()).await
}

/// A bmc-sim machine at `address` with inline credentials.
fn sim_target(address: &str) -> BmcTarget {
    BmcTarget {
        address: address.parse().unwrap(),
        protocol: Protocol::Sim,
        credentials: Credentials::Inline { username: "admin".into(), password: Secret::new("pw") },
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    }
}

fn power_changed_to(to: PowerState) -> impl Fn(&MachineEventKind) -> bool {
    move |e| matches!(e, MachineEventKind::PowerChanged { to: t, .. } if *t == to)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_power_changed_behind_our_back_and_an_outage_are_observed() {
    let mut bmc = IpmiSim::start().expect("ipmi_sim");
    let stack = Stack::start(1, &["--poll-interval", "1s", "--poll-timeout", "900ms"]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    // Registering the machine (and a first power read through a batch).
    let name = stack.topology.register_machine(client, &bmc.target()).await;
    let r = stack.run(&machine_batch(&name, vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let events = Events::start(client, subjects.machine_events("default", &name)).await;
    let off = bmcfleet_tests::poll_until(Duration::from_secs(5), Duration::from_millis(50), || async {
        state_of(client, &subjects, &name).await.filter(|s| s.power == Some(PowerState::Off))
    })
    .await
    .expect("the batch's power read is recorded");
    assert!(off.contactable && off.last_seen_ms.is_some() && off.provider.as_deref() == Some("ipmi"), "{off:?}");

    // Behind bmcfleet's back: observed within about one interval, announced once.
    let switched = Instant::now();
    bmc.ipmitool(&["power", "on"]).unwrap();
    let e = events.wait_for("power_changed to on", Duration::from_secs(5), power_changed_to(PowerState::On)).await;
    assert!(
        switched.elapsed() < Duration::from_secs(4),
        "seen {:?} after the switch (interval 1s)",
        switched.elapsed()
    );
    assert_eq!(e.event, MachineEventKind::PowerChanged { from: Some(PowerState::Off), to: PowerState::On });
    assert_eq!(e.state.power, Some(PowerState::On));
    // Further polls see no change and say nothing.
    let polls_later = Instant::now() + Duration::from_secs(3);
    while Instant::now() < polls_later {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ons = events.all().iter().filter(|e| power_changed_to(PowerState::On)(e)).count();
    assert_eq!(ons, 1, "exactly one power_changed for one change: {:?}", events.all());

    // The BMC stops answering: not contactable, with the reason.
    bmc.kill();
    let e = events
        .wait_for("unreachable", Duration::from_secs(10), |e| matches!(e, MachineEventKind::Unreachable { .. }))
        .await;
    let MachineEventKind::Unreachable { code, reason } = &e.event else { unreachable!() };
    assert!(
        matches!(code, ErrorCode::Unreachable | ErrorCode::Timeout | ErrorCode::DeadlineExceeded),
        "{code:?}: {reason}"
    );
    assert!(!reason.is_empty());
    let down = state_of(client, &subjects, &name).await.unwrap();
    assert!(!down.contactable && down.error_code.is_some() && down.consecutive_failures >= 1, "{down:?}");
    assert_eq!(down.power, Some(PowerState::On), "the last known power is kept");
    assert!(!reason.contains(bmc.password().expose()), "no secret in the reason");

    // Back: recovered.
    bmc.restart().unwrap();
    events.wait_for("recovered", Duration::from_secs(15), |e| matches!(e, MachineEventKind::Recovered)).await;
    let up = state_of(client, &subjects, &name).await.unwrap();
    assert!(up.contactable && up.error_code.is_none() && up.consecutive_failures == 0, "{up:?}");
    let unreachable = events.all().iter().filter(|e| matches!(e, MachineEventKind::Unreachable { .. })).count();
    assert_eq!(unreachable, 1, "one unreachable event per outage: {:?}", events.all());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_power_changed_by_another_client_is_observed() {
    let Some(emu) = bmcfleet_tests::sushy_node(19, "redfish_power_changed_by_another_client_is_observed").await else {
        return;
    };
    let stack = Stack::start(1, &["--poll-interval", "1s", "--poll-timeout", "900ms"]).await;
    let subjects = stack.topology.subjects();
    let name = stack.topology.register_machine(&stack.producer.client, &emu.target()).await;
    let r = stack.run(&machine_batch(&name, vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.results[0].data, Some(ActionData::PowerState(PowerState::Off)), "{r:#?}");
    let events = Events::start(&stack.producer.client, subjects.machine_events("default", &name)).await;

    // Another Redfish client powers the system on (sushy applies it after 1–11 s).
    let ca = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(ca.path(), emu.ca_pem()).unwrap();
    let creds = emu.credentials();
    let url = format!("{}{}/Actions/ComputerSystem.Reset", emu.base_url(), emu.system_path(0));
    let out = std::process::Command::new("curl")
        .args(["-sS", "--fail", "--cacert"])
        .arg(ca.path())
        .args(["-u", &format!("{}:{}", creds.username, creds.password.expose())])
        .args(["-H", "Content-Type: application/json", "-d", r#"{"ResetType": "On"}"#, &url])
        .output()
        .expect("curl");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    emu.wait_for(&emu.system_path(0), Duration::from_secs(20), |v| v["PowerState"] == "On").await.unwrap();
    let seen_on = Instant::now();
    let e = events.wait_for("power_changed to on", Duration::from_secs(5), power_changed_to(PowerState::On)).await;
    assert!(seen_on.elapsed() < Duration::from_secs(4), "seen {:?} after the emulator switched", seen_on.elapsed());
    assert_eq!(e.state.provider.as_deref(), Some("redfish"));
}

/// The simulator counts, for every action, how many actions of the same BMC
/// were running when it started: polls and a batch on one machine never
/// overlap (the poll waits in the machine's lane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polls_never_overlap_a_batch_on_the_same_machine() {
    use bmcfleet_testing::{SimConfig, SimServer};
    let sim =
        SimServer::start(SimConfig { slow_latency: Duration::from_millis(400), ..SimConfig::default() }).await.unwrap();
    let nats = bmcfleet_tests::NatsServer::start();
    let topology = bmcfleet_tests::producer::Topology::default();
    let gateway = topology.gateway(&nats, &[]);
    let producer = bmcfleet_tests::producer::Producer::new(nats.client().await);
    bmcfleet_tests::producer::wait_gateway(&producer).await;
    let mut worker = topology.worker(
        &nats,
        "w0",
        sim.addr(),
        &["--poll-interval", "1s", "--poll-timeout", "900ms", "--lane-idle-timeout", "10m"],
    );
    if tokio::time::timeout(
        Duration::from_secs(20),
        bmcfleet_tests::producer::wait_partitions_owned(&producer.client, &topology.subjects()),
    )
    .await
    .is_err()
    {
        panic!("worker did not start: {:?}\n{}", worker.try_wait(), worker.log_text());
    }
    let stack = Stack { producer, topology, workers: vec![worker], gateway, nats };

    let target = sim_target("slow-19.example");
    // Several slow batches back to back while polls come every second.
    for _ in 0..3 {
        let r = stack.run(&batch_for(target.clone(), vec![Action::Power(PowerOp::Status); 4])).await;
        assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    }
    let polled = bmcfleet_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let log = sim.log();
        async move { (log.iter().filter(|e| e.bmc.contains("slow-19") && e.call.is_none()).count() >= 2).then_some(()) }
    })
    .await;
    assert!(polled.is_some(), "the machine was polled: {:?}", sim.log());
    let log: Vec<_> = sim.log().into_iter().filter(|e| e.bmc.contains("slow-19")).collect();
    assert_eq!(log.iter().filter(|e| e.call.is_some()).count(), 12, "every batch action ran once");
    assert!(log.iter().all(|e| e.concurrent == 1), "a poll overlapped a batch: {log:#?}");

    // A machine with a desired power: the poll that finds it off switches it on.
    let fix = BmcTarget { address: "fix-19.example".parse().unwrap(), ..target };
    let name = stack.topology.register_machine(&stack.producer.client, &fix).await;
    let js = async_nats::jetstream::new(stack.producer.client.clone());
    let machines = js.get_key_value(stack.topology.subjects().machines_bucket()).await.unwrap();
    let mut record: Machine = serde_json::from_slice(&machines.get(&name).await.unwrap().unwrap()).unwrap();
    record.desired_power = Some(DesiredPower::On);
    bmcfleet_common::registry::put(&machines, &record).await.unwrap();
    let on = bmcfleet_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        let p = sim.power("h-fix-19_example");
        async move { (p == Some(PowerState::On)).then_some(()) }
    })
    .await;
    assert!(
        on.is_some(),
        "the desired power was enforced: {:?}",
        sim.log().iter().filter(|e| e.bmc.starts_with("h-fix")).collect::<Vec<_>>()
    );
    let fixes: Vec<_> =
        sim.log().into_iter().filter(|e| e.bmc == "h-fix-19_example" && e.action == "power_on").collect();
    assert_eq!(fixes.len(), 1, "switched once: {fixes:?}");
    assert!(fixes[0].call.is_none(), "by a poll, not a batch");
}

/// A poll takes the lane's guarded path like a batch's actions: with
/// `--bmc-min-interval 3s` and a poll due every second, the BMC never sees
/// two calls, a batch's or a poll's, closer than the interval (less what a
/// request takes to arrive): a poll due sooner waits for its turn, or (past
/// its own timeout) sends nothing. That holds across lanes too: each poll
/// of an otherwise idle machine runs in a lane opened for it and dropped
/// after it, and the next lane is paced from the last one's call.
/// Measured where it matters, at the simulated BMC: the arrival of every
/// action request, polls before the batch, the batch, polls after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_is_paced_like_a_batch() {
    use bmcfleet_testing::{CallRecord, SimConfig, SimServer};
    let sim = SimServer::start(SimConfig { record_calls: true, ..SimConfig::default() }).await.unwrap();
    let min_interval = Duration::from_secs(3);
    let args =
        ["--poll-interval", "1s", "--poll-timeout", "900ms", "--bmc-min-interval", "3s", "--lane-idle-timeout", "10m"];
    let stack = sim_stack(&sim, &args).await;
    let name = stack.topology.register_machine(&stack.producer.client, &sim_target("paced-31.example")).await;
    let bmc = "h-paced-31_example";
    let actions = || -> Vec<CallRecord> { sim.calls(bmc).into_iter().filter(|c| c.action.is_some()).collect() };
    let polls = |at_least: usize| {
        bmcfleet_tests::poll_until(Duration::from_secs(30), Duration::from_millis(100), move || {
            let polls = actions().iter().filter(|c| c.call.is_none()).count();
            async move { (polls >= at_least).then_some(()) }
        })
    };
    // Polls of a machine no batch has touched: a lane each.
    assert!(polls(2).await.is_some(), "two polls: {:?}", sim.calls(bmc));
    let r = stack.run(&machine_batch(&name, vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    // Then the polls in the lane the batch kept.
    let before = actions().iter().filter(|c| c.call.is_none()).count();
    assert!(polls(before + 2).await.is_some(), "two polls after the batch: {:?}", sim.calls(bmc));
    let calls = actions();
    let gaps: Vec<Duration> = calls.windows(2).map(|w| w[1].at.duration_since(w[0].at)).collect();
    let least = min_interval - Duration::from_millis(250);
    assert!(
        gaps.iter().all(|g| *g >= least),
        "calls to the BMC closer than --bmc-min-interval ({min_interval:?}): gaps {gaps:?} between {:?}",
        calls.iter().map(|c| (c.action.clone(), c.call.is_some())).collect::<Vec<_>>()
    );
}

/// A worker killed mid-interval: the survivor takes the partition and polls
/// the machine within one interval plus the lease TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_machines_are_polled_by_the_survivor() {
    let bmc = IpmiSim::start().expect("ipmi_sim");
    let interval = Duration::from_secs(2);
    let stack =
        Stack::start(2, &["--poll-interval", "2s", "--poll-timeout", "1500ms", "--state-heartbeat", "1s"]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &bmc.target()).await;
    let r = stack.run(&machine_batch(&name, vec![Action::Power(PowerOp::Status)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let owner = bmcfleet_tests::poll_until(Duration::from_secs(10), Duration::from_millis(50), || async {
        state_of(client, &subjects, &name).await.map(|s| s.worker)
    })
    .await
    .expect("a state record");
    let (victim, survivor) = if owner == "w0" { (0, "w1") } else { (1, "w0") };
    let mut workers = stack.workers;
    workers[victim].kill();
    let killed = Instant::now();
    let ttl = Duration::from_secs(3); // Topology::default().lease_ttl
    let taken =
        bmcfleet_tests::poll_until(interval + ttl + Duration::from_secs(6), Duration::from_millis(50), || async {
            state_of(client, &subjects, &name).await.filter(|s| s.worker == survivor)
        })
        .await
        .unwrap_or_else(|| panic!("{survivor} never polled the machine after {owner} died"));
    let gap = killed.elapsed();
    assert!(taken.contactable, "{taken:?}");
    // One interval + the TTL, plus the rebalance period that notices the
    // expired lease and the poll's own time.
    assert!(gap <= interval + ttl + Duration::from_secs(3), "polling resumed {gap:?} after the kill");
}

/// The slow inventory refresh: stored beside the state, the firmware
/// version copied into it, and a change (here the simulator's reset
/// counter, which its inventory reports) announced once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inventory_change_is_announced() {
    use bmcfleet_testing::{SimConfig, SimServer};
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let stack =
        sim_stack(&sim, &["--poll-interval", "1s", "--poll-timeout", "900ms", "--inventory-interval", "1s"]).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;

    let target = sim_target("inv-19.example");
    let name = stack.topology.register_machine(client, &target).await;
    let events = Events::start(client, subjects.machine_events("default", &name)).await;
    let first = bmcfleet_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || async {
        state_of(client, &subjects, &name).await.filter(|s| s.inventory_ms.is_some())
    })
    .await
    .expect("an inventory read");
    assert_eq!(first.firmware.as_deref(), Some(env!("CARGO_PKG_VERSION")), "{first:?}");
    let kv = async_nats::jetstream::new(client.clone()).get_key_value(subjects.state_bucket()).await.unwrap();
    let stored: Inventory =
        serde_json::from_slice(&kv.get(format!("{name}.inventory")).await.unwrap().unwrap()).unwrap();
    assert_eq!(stored.model.as_deref(), Some("bmc-sim"));

    let r = stack.run(&machine_batch(&name, vec![Action::Power(PowerOp::On), Action::Power(PowerOp::Reset)])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let e = events
        .wait_for("inventory_changed", Duration::from_secs(10), |e| {
            matches!(e, MachineEventKind::InventoryChanged { .. })
        })
        .await;
    let MachineEventKind::InventoryChanged { changes } = &e.event else { unreachable!() };
    assert!(
        changes
            .iter()
            .any(|c| c.field == "extra.resets" && c.from.as_deref() == Some("0") && c.to.as_deref() == Some("1")),
        "{changes:?}"
    );
    // Later reads find nothing new.
    let quiet = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let n = events.all().iter().filter(|e| matches!(e, MachineEventKind::InventoryChanged { .. })).count();
    assert_eq!(n, 1, "one change, one event: {:?}", events.all());
}

/// Typed components (issues 19, 20): the simulated machine's DIMM is
/// swapped and its BIOS flashed behind bmcfleet's back; the next refresh
/// announces exactly that, once, with the component keys, and the stored
/// record holds the new components.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_component_is_announced_by_name() {
    use bmcfleet_schema::state::ChangeKind;
    use bmcfleet_testing::{SimConfig, SimServer};
    let sim = SimServer::start(SimConfig::default()).await.unwrap();
    let args =
        ["--poll-interval", "1s", "--poll-timeout", "900ms", "--inventory-interval", "1s", "--inventory-timeout", "5s"];
    let stack = sim_stack(&sim, &args).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let target = sim_target("inv-20.example");
    let name = stack.topology.register_machine(client, &target).await;
    let events = Events::start(client, subjects.machine_events("default", &name)).await;
    let kv = async_nats::jetstream::new(client.clone()).get_key_value(subjects.state_bucket()).await.unwrap();
    let stored = |kv: async_nats::jetstream::kv::Store, key: String| async move {
        kv.get(key).await.ok().flatten().map(|b| serde_json::from_slice::<Inventory>(&b).expect("an inventory record"))
    };
    let first = bmcfleet_tests::poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        stored(kv.clone(), format!("{name}.inventory"))
    })
    .await
    .expect("an inventory read");
    assert_eq!(first.memory.len(), 2, "{first:?}");
    assert_eq!(first.memory[1].serial.as_deref(), Some("D-0002"));
    assert!(first.firmware.iter().any(|f| f.id == "BIOS" && f.version.as_deref() == Some("1.0.0")), "{first:?}");

    let key = sim
        .log()
        .iter()
        .find(|e| e.action == "inventory")
        .map(|e| e.bmc.clone())
        .expect("the simulator served the inventory");
    sim.change_components(&key, |inv| {
        inv.memory[1].serial = Some("D-0099".into());
        inv.firmware.iter_mut().find(|f| f.id == "BIOS").unwrap().version = Some("1.1.0".into());
        inv.nics[0].link_status = Some("LinkDown".into()); // state, not inventory
    });
    let e = events
        .wait_for("inventory_changed", Duration::from_secs(10), |e| {
            matches!(e, MachineEventKind::InventoryChanged { .. })
        })
        .await;
    let MachineEventKind::InventoryChanged { changes } = &e.event else { unreachable!() };
    let got: Vec<(&str, Option<&str>, Option<&str>, ChangeKind)> =
        changes.iter().map(|c| (c.field.as_str(), c.from.as_deref(), c.to.as_deref(), c.change)).collect();
    assert_eq!(
        got,
        [
            ("memory.DIMM2.serial", Some("D-0002"), Some("D-0099"), ChangeKind::Changed),
            ("firmware.BIOS", Some("1.0.0"), Some("1.1.0"), ChangeKind::Changed)
        ]
    );
    let now = stored(kv.clone(), format!("{name}.inventory")).await.unwrap();
    assert_eq!(now.memory[1].serial.as_deref(), Some("D-0099"));
    assert_eq!(now.nics[0].link_status.as_deref(), Some("LinkDown"), "stored, not announced");

    // Later reads find nothing new: one change, one event.
    let quiet = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let n = events.all().iter().filter(|e| matches!(e, MachineEventKind::InventoryChanged { .. })).count();
    assert_eq!(n, 1, "{:?}", events.all());
}
