//! The system event log against a real OpenIPMI `ipmi_sim` (its SEL is
//! enabled in tests/ipmi_sim/bmc.emu.in), cross-checked with `ipmitool sel`:
//! entries added by ipmitool are read by us newest first with their raw
//! records; a clear by us empties what ipmitool lists.

mod common;

use bmcfleet_provider::EventLog;
use bmcfleet_schema::{ErrorCode, Health};
use common::{ctx, open, start_sim};

/// Adds SEL entries with `ipmitool sel add FILE` (one event a line:
/// EvMRev, sensor type, sensor number, event dir|type, data 1-3).
fn add_events(sim: &bmcfleet_testing::ipmi::IpmiSim, lines: &[&str]) {
    let file = sim.dir().join("events.txt");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    sim.ipmitool(&["sel", "add", file.to_str().unwrap()]).unwrap();
}

#[tokio::test]
async fn entries_added_by_ipmitool_read_newest_first_and_clear() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;
    let empty = s.read_event_log(&ctx, 100, 0).await.unwrap();
    let before = empty.entries.len();

    add_events(
        &sim,
        &[
            // Temperature sensor 0x30, threshold, asserted, upper critical going high.
            "0x04 0x01 0x30 0x01 0x09 0xff 0xff",
            // Power supply 0x41, sensor-specific, failure detected.
            "0x04 0x08 0x41 0x6f 0x01 0xff 0xff",
            // Temperature 0x30 deasserted, upper non-critical going high.
            "0x04 0x01 0x30 0x81 0x07 0xff 0xff",
        ],
    );
    let log = s.read_event_log(&ctx, 100, 0).await.unwrap();
    assert_eq!(log.entries.len(), before + 3, "{log:?}");
    assert_eq!(log.total, Some(log.entries.len() as u32));
    let [newest, middle, oldest] = &log.entries[..3] else { unreachable!() };
    assert_eq!(
        (oldest.kind.as_deref(), oldest.sensor.as_deref(), oldest.severity),
        (Some("Temperature"), Some("0x30"), Some(Health::Critical))
    );
    assert_eq!(
        (middle.kind.as_deref(), middle.sensor.as_deref(), middle.severity),
        (Some("Power Supply"), Some("0x41"), None)
    );
    assert_eq!(newest.severity, Some(Health::Ok));
    assert!(newest.message.ends_with("(deasserted)"), "{}", newest.message);
    for e in &log.entries[..3] {
        let raw = e.raw.as_deref().unwrap();
        assert_eq!(raw.len(), 32);
        assert_eq!(&raw[..4], format!("{}{}", &e.id[2..], &e.id[..2]), "the record id, little-endian");
    }

    // ipmitool lists the same record ids.
    let listed = sim.ipmitool(&["sel", "list"]).unwrap();
    for e in &log.entries[..3] {
        let id = e.id.trim_start_matches('0');
        assert!(listed.to_lowercase().lines().any(|l| l.trim_start().starts_with(id)), "{id} in\n{listed}");
    }

    // Paging: skip the newest, take one.
    let page = s.read_event_log(&ctx, 1, 1).await.unwrap();
    assert_eq!(page.entries, vec![middle.clone()]);

    s.clear_event_log(&ctx).await.unwrap();
    let after = s.read_event_log(&ctx, 100, 0).await.unwrap();
    assert!(after.entries.len() <= 1, "at most the BMC's own 'log cleared' entry: {after:?}");
    assert!(!sim.ipmitool(&["sel", "list"]).unwrap().contains("Temperature"), "ipmitool sees the cleared log");
    // Clearing again is harmless.
    s.clear_event_log(&ctx).await.unwrap();

    // An empty log reads as empty, not as an error.
    let again = s.read_event_log(&ctx, 100, 0).await.unwrap();
    assert!(again.entries.len() <= 1);
}

#[tokio::test]
async fn the_sel_is_named_sel_and_any_other_name_touches_nothing() {
    let sim = start_sim();
    let ctx = ctx();
    let mut s = open(&sim).await;
    add_events(&sim, &["0x04 0x01 0x30 0x01 0x09 0xff 0xff"]);
    let log = s.read_named_logs(&ctx, 100, 0, &["sel".into()]).await.unwrap();
    assert!(!log.entries.is_empty());
    assert!(log.entries.iter().all(|e| e.log.as_deref() == Some("sel")), "each entry names its log: {log:?}");
    // A name this BMC does not have: refused before anything is sent.
    let e = s.clear_named_logs(&ctx, &["EventLog".into()]).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound, "{e:?}");
    assert!(e.message.contains("named `sel`"), "{}", e.message);
    assert!(sim.ipmitool(&["sel", "list"]).unwrap().contains("Temperature"), "the SEL was not cleared");
    s.clear_named_logs(&ctx, &["SEL".into()]).await.unwrap();
    assert!(!sim.ipmitool(&["sel", "list"]).unwrap().contains("Temperature"), "ipmitool sees the cleared log");
}
