//! Health verdict and readings in fleet state (issue 37): the owning
//! worker's polls check each machine's health (sensors against their
//! thresholds, the recent warning and critical entries of its event log,
//! the BMC's own rollup) and read its power draw and clock drift, each on
//! its own interval; a change of the verdict is written and announced as
//! `health_changed`, and `bmcctl machine ls` shows it (HEALTH; JSON).
//!
//! Against real BMCs: the DMTF public-rackmount1 mockup (its system's
//! `Status.HealthRollup`, its chassis' Thermal fan, its event log, changed
//! behind bmcfleet's back) and OpenIPMI `ipmi_sim` (Fan 1 below its warning
//! threshold; a critical SEL entry added and cleared with `ipmitool`, the
//! SEL clock set by bmcfleet's own `bmc_clock_sync`).

use bmcfleet_schema::state::{MachineEvent, MachineEventKind};
use bmcfleet_schema::*;
use bmcfleet_testing::ipmi::IpmiSim;
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{MockupServer, SushyEmulator};
use bmcfleet_tests::machine_events::{machine_state as state_of, MachineEvents as Events};
use bmcfleet_tests::producer::{machine_batch, Stack};
use serde_json::json;
use std::time::Duration;

/// A machine's health changes, read from its collected events.
trait HealthChanges {
    /// The health changes seen so far: (from, to, reasons).
    fn health(&self) -> Vec<(Option<Health>, Health, Vec<String>)>;
    /// Waits for the `n`th (1-based) health change and answers it.
    async fn nth_health(&self, n: usize, timeout: Duration) -> (Option<Health>, Health, Vec<String>);
}

fn health_changes(seen: &[MachineEvent]) -> Vec<(Option<Health>, Health, Vec<String>)> {
    seen.iter()
        .filter_map(|e| match &e.event {
            MachineEventKind::HealthChanged { from, to, reasons } => Some((*from, *to, reasons.clone())),
            _ => None,
        })
        .collect()
}

impl HealthChanges for Events {
    fn health(&self) -> Vec<(Option<Health>, Health, Vec<String>)> {
        health_changes(&self.seen())
    }

    async fn nth_health(&self, n: usize, timeout: Duration) -> (Option<Health>, Health, Vec<String>) {
        self.wait_until(&format!("health change #{n}"), timeout, |seen| health_changes(seen).get(n - 1).cloned()).await
    }
}

/// `bmcctl machine ls` (with `args`) against the stack's NATS.
async fn bmcctl_ls(stack: &Stack, args: &[&str]) -> String {
    let mut cmd = tokio::process::Command::new(bmcfleet_tests::bin("bmcctl"));
    cmd.args(["--nats-url", &stack.nats.url()])
        .args(args)
        .args(["machine", "ls"])
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1");
    let r = bmcfleet_tests::process::run_piped(cmd, "").await;
    assert_eq!(r.code, Some(0), "{}{}", r.out, r.err);
    r.out
}

/// The HEALTH cell of `machine` in `machine ls`'s table.
fn health_cell(table: &str, machine: &str) -> String {
    let mut lines = table.lines();
    let header = lines.next().expect("a header");
    let start = header.find("HEALTH").unwrap_or_else(|| panic!("no HEALTH column: {header}"));
    let row = lines.find(|l| l.starts_with(machine)).unwrap_or_else(|| panic!("no row for {machine}:\n{table}"));
    row.get(start..).unwrap_or("").split_whitespace().next().unwrap_or("").to_owned()
}

fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    now.format(&time::format_description::well_known::Rfc3339).unwrap()
}

const SYS: &str = "/redfish/v1/Systems/437XR1138R2";
const CH: &str = "/redfish/v1/Chassis/1U";

fn fan(reading: u32) -> serde_json::Value {
    json!({"@odata.id": format!("{CH}/Thermal"), "Id": "Thermal",
           "Temperatures": [{"Name": "Inlet", "ReadingCelsius": 24, "UpperThresholdNonCritical": 35, "UpperThresholdCritical": 42, "Status": {"State": "Enabled"}}],
           "Fans": [{"Name": "Fan 1", "Reading": reading, "ReadingUnits": "RPM", "LowerThresholdNonCritical": 1000, "LowerThresholdCritical": 500, "Status": {"State": "Enabled"}}]})
}

fn log_entries(entries: &[serde_json::Value]) -> serde_json::Value {
    json!({"@odata.id": format!("{SYS}/LogServices/Log1/Entries"), "Members": entries, "Members@odata.count": entries.len()})
}

fn log_entry(id: u32, created: &str, severity: &str, message: &str) -> serde_json::Value {
    json!({"@odata.id": format!("{SYS}/LogServices/Log1/Entries/{id}"), "@odata.type": "#LogEntry.v1_6_0.LogEntry", "Id": id.to_string(),
           "EntryType": "Event", "Created": created, "Severity": severity, "Message": message})
}

/// The public-rackmount1 mockup with its chassis `1U` (Thermal: a fan
/// within its thresholds; Power: 250 W) and the system's event log (one
/// old critical entry, outside the window, and a recent OK one).
async fn rackmount() -> MockupServer {
    let server = MockupServer::builder()
        .dir(mockup_dir("dmtf-public-rackmount1"))
        .unwrap()
        .resource(CH, json!({"@odata.id": CH, "Id": "1U", "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
            "Thermal": {"@odata.id": format!("{CH}/Thermal")}, "Power": {"@odata.id": format!("{CH}/Power")}}))
        .resource(&format!("{CH}/Thermal"), fan(4000))
        .resource(&format!("{CH}/Power"), json!({"@odata.id": format!("{CH}/Power"), "Id": "Power",
            "PowerControl": [{"@odata.id": format!("{CH}/Power#/PowerControl/0"), "MemberId": "0", "Name": "System", "PowerConsumedWatts": 250}]}))
        // The manager links its LogServices: none (the fixture does not serve them).
        .resource("/redfish/v1/Managers/BMC/LogServices", json!({"@odata.id": "/redfish/v1/Managers/BMC/LogServices", "Members": []}))
        .resource(&format!("{SYS}/LogServices"), json!({"@odata.id": format!("{SYS}/LogServices"), "Members": [{"@odata.id": format!("{SYS}/LogServices/Log1")}]}))
        .resource(&format!("{SYS}/LogServices/Log1"), json!({"@odata.id": format!("{SYS}/LogServices/Log1"), "Id": "Log1", "Entries": {"@odata.id": format!("{SYS}/LogServices/Log1/Entries")}}))
        .resource(
            &format!("{SYS}/LogServices/Log1/Entries"),
            log_entries(&[
                log_entry(2, &now_rfc3339(), "OK", "System boot"),
                log_entry(1, "2015-03-13T04:14:33Z", "Critical", "PSU 1 failed (long ago)"),
            ]),
        )
        .start()
        .await
        .unwrap();
    server.merge_resource(SYS, &json!({"Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"}}));
    server
}

const HEALTH_FLAGS: [&str; 10] = [
    "--poll-interval",
    "1s",
    "--poll-timeout",
    "900ms",
    "--health-interval",
    "1s",
    "--power-reading-interval",
    "1s",
    "--clock-interval",
    "1s",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_rollup_sensor_and_event_log_turn_the_verdict_critical_and_back() {
    let server = rackmount().await;
    let stack = Stack::start(1, &HEALTH_FLAGS).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &server.target()).await;
    let events = Events::start(client, subjects.machine_events("default", &name)).await;
    let t = Duration::from_secs(20);

    // First verdict: ok. The old critical entry is outside the window.
    let (from, to, reasons) = events.nth_health(1, t).await;
    assert_eq!((from, to), (None, Health::Ok), "{reasons:?}");
    let s = bmcfleet_tests::poll_until(t, Duration::from_millis(100), || async {
        state_of(client, &subjects, &name).await.filter(|s| s.health.is_some())
    })
    .await
    .expect("the verdict is written");
    let h = s.health.as_ref().unwrap();
    assert_eq!((h.status, h.reasons.len(), h.unread.len()), (Health::Ok, 0, 0), "{h:?}");

    // The BMC's rollup goes Critical behind bmcfleet's back.
    server.merge_resource(SYS, &json!({"Status": {"HealthRollup": "Critical"}}));
    let (from, to, reasons) = events.nth_health(2, t).await;
    assert_eq!((from, to), (Some(Health::Ok), Health::Critical));
    assert_eq!(reasons, ["BMC rollup: system 437XR1138R2 HealthRollup critical"]);
    let table = bmcctl_ls(&stack, &[]).await;
    assert_eq!(health_cell(&table, &name), "critical", "{table}");
    let listed = bmcfleet_tests::checks::machines_by_name(&bmcctl_ls(&stack, &["--json"]).await);
    assert_eq!(listed[&name]["health"], "critical", "{:?}", listed[&name]);
    assert_eq!(listed[&name]["state"]["health"]["status"], "critical");
    assert_eq!(listed[&name]["state"]["health"]["reasons"][0], "BMC rollup: system 437XR1138R2 HealthRollup critical");
    // The readings came with it: 250 W, and the mockup's clock (2015) far behind.
    assert_eq!(listed[&name]["state"]["power_watts"], 250.0, "{:?}", listed[&name]["state"]);
    let drift = listed[&name]["state"]["clock_drift_ms"].as_i64().expect("a clock drift");
    assert!(drift < -300 * 24 * 3_600_000, "the mockup's clock says 2015: {drift} ms");
    let wide = bmcctl_ls(&stack, &["--output", "wide"]).await;
    assert!(wide.contains("BMC rollup: system 437XR1138R2 HealthRollup critical"), "{wide}");

    // It recovers: back to ok, announced.
    server.merge_resource(SYS, &json!({"Status": {"HealthRollup": "OK"}}));
    let (from, to, reasons) = events.nth_health(3, t).await;
    assert_eq!((from, to, reasons.len()), (Some(Health::Critical), Health::Ok, 0));

    // A fan falls below its critical threshold (the BMC still says nothing).
    server.set_resource(&format!("{CH}/Thermal"), fan(400));
    let (from, to, reasons) = events.nth_health(4, t).await;
    assert_eq!((from, to), (Some(Health::Ok), Health::Critical));
    assert_eq!(reasons, ["sensor Fan 1 critical, reads 400 RPM (critical threshold: at or below 500)"]);
    server.set_resource(&format!("{CH}/Thermal"), fan(4000));
    assert_eq!(events.nth_health(5, t).await.1, Health::Ok);

    // A critical event log entry of just now.
    server.set_resource(
        &format!("{SYS}/LogServices/Log1/Entries"),
        log_entries(&[
            log_entry(3, &now_rfc3339(), "Critical", "CPU1 temperature above critical"),
            log_entry(2, &now_rfc3339(), "OK", "System boot"),
        ]),
    );
    let (from, to, reasons) = events.nth_health(6, t).await;
    assert_eq!((from, to), (Some(Health::Ok), Health::Critical));
    assert!(
        reasons.len() == 1
            && reasons[0].starts_with("event log: 1 critical entry in the last 24h")
            && reasons[0].ends_with("CPU1 temperature above critical"),
        "{reasons:?}"
    );
    // Cleared: ok again.
    server.set_resource(&format!("{SYS}/LogServices/Log1/Entries"), log_entries(&[]));
    assert_eq!(events.nth_health(7, t).await.1, Health::Ok);

    // One event per change, never one per poll.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(events.health().len(), 7, "{:?}", events.health());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_sensor_states_and_the_sel_make_the_verdict() {
    let bmc = IpmiSim::start().expect("ipmi_sim (Debian package openipmi) must be installed");
    let stack = Stack::start(1, &HEALTH_FLAGS).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &bmc.target()).await;
    let events = Events::start(client, subjects.machine_events("default", &name)).await;
    let t = Duration::from_secs(20);

    // ipmi_sim's Fan 1 reads 750 RPM, below its 1000 RPM warning threshold.
    let (from, to, reasons) = events.nth_health(1, t).await;
    assert_eq!((from, to), (None, Health::Warning));
    assert_eq!(reasons, ["sensor Fan 1 warning, reads 750 RPM (warning threshold: at or below 1000)"]);
    let s = state_of(client, &subjects, &name).await.expect("a state record");
    let h = s.health.expect("a verdict");
    // IPMI keeps no rollup: said, and the verdict stands on the sensors and the SEL.
    assert!(h.unread.iter().any(|u| u.starts_with("rollup: unsupported")), "{h:?}");
    let table = bmcctl_ls(&stack, &[]).await;
    assert_eq!(health_cell(&table, &name), "warning", "{table}");

    // A critical SEL entry, timed (bmcfleet syncs the SEL clock first; an
    // entry of a clock never set cannot be placed and would not count).
    let r = stack.run(&machine_batch(&name, vec![Action::BmcClockSync])).await;
    assert_eq!(r.state, BatchState::Succeeded, "{r:#?}");
    let file = bmc.dir().join("critical.sel");
    std::fs::write(&file, "0x04 0x01 0x30 0x01 0x59 0x58 0x55 # CPU Temp upper critical going high\n").unwrap();
    bmc.ipmitool(&["sel", "add", file.to_str().unwrap()]).unwrap();
    let (from, to, reasons) = events.nth_health(2, t).await;
    assert_eq!((from, to), (Some(Health::Warning), Health::Critical));
    assert!(reasons[0].starts_with("event log: 1 critical entry in the last 24h"), "{reasons:?}");
    assert!(reasons.iter().any(|r| r.starts_with("sensor Fan 1 warning")), "{reasons:?}");

    // The SEL cleared: back to the fan's warning, announced.
    bmc.ipmitool(&["sel", "clear"]).unwrap();
    let (from, to, reasons) = events.nth_health(3, t).await;
    assert_eq!((from, to), (Some(Health::Critical), Health::Warning), "{reasons:?}");
    let s = state_of(client, &subjects, &name).await.expect("a state record");
    assert_eq!(s.health.map(|h| h.status), Some(Health::Warning));
    assert!(s.clock_drift_ms.is_some_and(|d| d.abs() < 5_000), "synced clock: {:?}", s.clock_drift_ms);
}

/// The power reading (DCMI) and the clock drift (SEL time) of the spec
/// responder over RMCP+ reach the state record and the worker's metrics:
/// the bounded aggregates, and a series per machine with
/// `--per-machine-metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipmi_power_and_clock_readings_reach_the_state_and_the_metrics() {
    use bmcfleet_testing::ipmi::{LanConfig, LanFleet};
    use bmcfleet_tests::metrics::{metrics_port, scrape, value};
    let fleet = LanFleet::start(LanConfig::default()).expect("responder");
    let bmc = fleet.bmc(0);
    // DCMI Get Power Reading answers 300 W now; the SEL clock is an hour behind.
    bmc.handle().update(|s| s.sel_clock_offset = -3600);
    let flags = [
        "--poll-interval",
        "1s",
        "--poll-timeout",
        "900ms",
        "--power-reading-interval",
        "1s",
        "--clock-interval",
        "1s",
        "--per-machine-metrics",
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    let stack = Stack::start(1, &flags).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let target = BmcTarget {
        address: bmc.addr().to_string().parse().unwrap(),
        protocol: Protocol::Ipmi,
        credentials: Credentials::Inline { username: "admin".into(), password: Secret::new("password") },
        tls: TlsOptions::default(),
        system_id: None,
        options: Default::default(),
    };
    let name = stack.topology.register_machine(client, &target).await;
    let t = Duration::from_secs(20);

    let port = metrics_port(&stack.workers[0]).await;
    let m = bmcfleet_tests::poll_until(t, Duration::from_millis(200), || async {
        let m = scrape(port);
        (value(&m, "bmcfleet_machines_power_read", &[]) == 1.0 && value(&m, "bmcfleet_machines_clock_read", &[]) == 1.0)
            .then_some(m)
    })
    .await
    .expect("the readings counted in the worker's gauges");
    assert_eq!(value(&m, "bmcfleet_machines_power_watts", &[]), 300.0);
    let drift = value(&m, "bmcfleet_machines_clock_drift_max_seconds", &[]);
    assert!((drift - 3600.0).abs() <= 2.0, "an hour off: {drift}");
    assert_eq!(value(&m, "bmcfleet_machine_power_watts", &[("machine", &name)]), 300.0);
    let own = value(&m, "bmcfleet_machine_clock_drift_seconds", &[("machine", &name)]);
    assert!((own + 3600.0).abs() <= 2.0, "BMC minus worker: {own}");
    assert!(value(&m, "bmcfleet_poll_readings_total", &[("reading", "power"), ("outcome", "ok")]) >= 1.0);
    assert!(value(&m, "bmcfleet_poll_readings_total", &[("reading", "clock"), ("outcome", "ok")]) >= 1.0);
    assert_eq!(value(&m, "bmcfleet_poll_readings_total", &[("reading", "health")]), 0.0, "the health check is off");
    // The record carries the readings as of its last write (a change or the
    // heartbeat; a reading alone writes nothing): power the machine on
    // behind bmcfleet's back, and the write of that change has them.
    bmc.handle().update(|s| s.power_on = true);
    let s = bmcfleet_tests::poll_until(t, Duration::from_millis(200), || async {
        state_of(client, &subjects, &name).await.filter(|s| s.power == Some(PowerState::On))
    })
    .await
    .expect("the power change is written");
    assert_eq!(s.power_watts, Some(300.0));
    assert!(s.clock_drift_ms.is_some_and(|d| (d + 3_600_000).abs() <= 2_000), "{:?}", s.clock_drift_ms);
    assert!(s.power_read_ms.is_some() && s.clock_read_ms.is_some(), "{s:?}");
    assert!(s.health.is_none(), "not checked: {:?}", s.health);
}

/// sushy-emulator (what Ironic's and Metal3's CI run) as it is: its
/// system's `Status` and its chassis are read, the event log it does not
/// offer is named as unread, and the verdict is written and announced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sushy_emulator_gets_a_verdict_from_every_source() {
    let Some(sushy) = SushyEmulator::start_or_skip(SushyEmulator::builder(), "machine_health").await else { return };
    let stack = Stack::start(1, &HEALTH_FLAGS).await;
    let subjects = stack.topology.subjects();
    let client = &stack.producer.client;
    let name = stack.topology.register_machine(client, &sushy.target()).await;
    let events = Events::start(client, subjects.machine_events("default", &name)).await;
    let t = Duration::from_secs(30);
    let (from, to, reasons) = events.nth_health(1, t).await;
    assert_eq!(from, None);
    let s = bmcfleet_tests::poll_until(t, Duration::from_millis(100), || async {
        state_of(client, &subjects, &name).await.filter(|s| s.health.is_some())
    })
    .await
    .expect("the verdict is written");
    let h = s.health.as_ref().unwrap();
    assert_eq!((h.status, &h.reasons), (to, &reasons), "the record says what the event said");
    assert_eq!(h.status, Health::Ok, "sushy's fake system is healthy: {h:?}");
    // sushy links no LogService: the verdict says so rather than pretend it read one.
    assert_eq!(h.unread.len(), 1, "{:?}", h.unread);
    assert!(h.unread[0].starts_with("event_log: unsupported"), "{:?}", h.unread);
    let table = bmcctl_ls(&stack, &[]).await;
    assert_eq!(health_cell(&table, &name), "ok", "{table}");
}
