//! The event log against the Dell iDRAC mockup, extended from the DMTF
//! LogService/LogEntry schemas: the Manager's `Sel` service (expanded
//! entries, `LogService.ClearLog`) and a System `Log1` service (entries as
//! bare links, no ClearLog). sushy-emulator 2.2 has no LogServices.

mod common;

use bmcfleet_provider::{BmcSession, EventLog};
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{ErrorCode, Health};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::MockupServer;
use common::{connector, ctx};
use serde_json::json;

const MGR: &str = "/redfish/v1/Managers/iDRAC.Embedded.1";
const SYS: &str = "/redfish/v1/Systems/System.Embedded.1";

fn sel_entry(id: u32, created: &str, severity: &str, message: &str) -> serde_json::Value {
    json!({"@odata.id": format!("{MGR}/LogServices/Sel/Entries/{id}"), "@odata.type": "#LogEntry.v1_6_0.LogEntry", "Id": id.to_string(),
           "EntryType": "SEL", "Created": created, "Severity": severity, "SensorType": "Temperature", "SensorNumber": 48, "Message": message})
}

#[tokio::test]
async fn logs_are_discovered_merged_newest_first_and_cleared() {
    let dir = mockup_dir("dell");
    let e1 = sel_entry(1, "2024-01-01T10:00:00Z", "OK", "System boot");
    let e2 = sel_entry(2, "2024-01-01T12:00:00Z", "Critical", "CPU1 temperature above critical");
    let log1 = json!({"@odata.id": format!("{SYS}/LogServices/Log1/Entries/5"), "Id": "5", "EntryType": "Event", "Created": "2024-01-01T11:00:00Z",
                      "Severity": "Warning", "Message": "Fan 3 below warning threshold"});
    let server = MockupServer::builder()
        .dir(dir.join("bmclib"))
        .unwrap()
        .resource(&format!("{MGR}/LogServices"), json!({"@odata.id": format!("{MGR}/LogServices"), "Members": [{"@odata.id": format!("{MGR}/LogServices/Sel")}, {"@odata.id": format!("{MGR}/LogServices/Lclog")}]}))
        // Linked but not served: skipped, the other logs still read.
        .resource(&format!("{MGR}/LogServices/Lclog"), json!({"@odata.id": format!("{MGR}/LogServices/Lclog"), "Id": "Lclog", "Entries": {"@odata.id": format!("{MGR}/LogServices/Lclog/Entries")}}))
        .resource(&format!("{MGR}/LogServices/Sel"), json!({"@odata.id": format!("{MGR}/LogServices/Sel"), "Id": "Sel", "Entries": {"@odata.id": format!("{MGR}/LogServices/Sel/Entries")},
            "Actions": {"#LogService.ClearLog": {"target": format!("{MGR}/LogServices/Sel/Actions/LogService.ClearLog")}}}))
        .resource(&format!("{MGR}/LogServices/Sel/Entries"), json!({"@odata.id": format!("{MGR}/LogServices/Sel/Entries"), "Members": [e1.clone(), e2.clone()], "Members@odata.count": 2}))
        .resource(&format!("{MGR}/LogServices/Sel/Entries/1"), e1)
        .resource(&format!("{MGR}/LogServices/Sel/Entries/2"), e2)
        .resource(&format!("{SYS}/LogServices"), json!({"@odata.id": format!("{SYS}/LogServices"), "Members": [{"@odata.id": format!("{SYS}/LogServices/Log1")}]}))
        .resource(&format!("{SYS}/LogServices/Log1"), json!({"@odata.id": format!("{SYS}/LogServices/Log1"), "Id": "Log1", "Entries": {"@odata.id": format!("{SYS}/LogServices/Log1/Entries")}}))
        .resource(&format!("{SYS}/LogServices/Log1/Entries"), json!({"@odata.id": format!("{SYS}/LogServices/Log1/Entries"), "Members": [{"@odata.id": format!("{SYS}/LogServices/Log1/Entries/5")}]}))
        .resource(&format!("{SYS}/LogServices/Log1/Entries/5"), log1)
        .start()
        .await
        .unwrap();
    server.merge_resource(SYS, &json!({"LogServices": {"@odata.id": format!("{SYS}/LogServices")}}));
    let mut s: RedfishSession = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let ctx = ctx(10);

    let log = s.read_event_log(&ctx, 100, 0).await.unwrap();
    assert_eq!(log.total, Some(3));
    let got: Vec<(&str, &str, Option<Health>)> =
        log.entries.iter().map(|e| (e.log.as_deref().unwrap(), e.id.as_str(), e.severity)).collect();
    assert_eq!(
        got,
        [("Sel", "2", Some(Health::Critical)), ("Log1", "5", Some(Health::Warning)), ("Sel", "1", Some(Health::Ok))]
    );
    assert_eq!(log.entries[0].message, "CPU1 temperature above critical");
    assert_eq!(log.entries[0].sensor.as_deref(), Some("48"));
    let page = s.read_event_log(&ctx, 1, 1).await.unwrap();
    assert_eq!(page.entries, vec![log.entries[1].clone()]);

    s.clear_event_log(&ctx).await.unwrap();
    let posts = server.requests_to("POST", &format!("{MGR}/LogServices/Sel/Actions/LogService.ClearLog"));
    assert_eq!(posts.len(), 1, "ClearLog on the service that offers it, and nowhere else");
    let after = s.read_event_log(&ctx, 100, 0).await.unwrap();
    let ids: Vec<&str> = after.entries.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["5"], "the SEL is empty; Log1 cannot be cleared");
    s.close().await;
}

#[tokio::test]
async fn a_bmc_without_log_services_is_unsupported() {
    let dir = mockup_dir("lenovo");
    let server = MockupServer::builder().dir(dir.join("bmclib")).unwrap().start().await.unwrap();
    let mut s: RedfishSession = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let e = s.read_event_log(&ctx(10), 10, 0).await.unwrap_err();
    // The Lenovo manager links LogServices it does not serve, or none at all.
    assert!(matches!(e.code, ErrorCode::Unsupported), "{e:?}");
}

/// A hostile BMC's `Members@odata.nextLink` that leads back to itself (or
/// to page after empty page) is not followed until the action deadline:
/// an empty page ends the log, and a log is read in a bounded number of pages.
#[tokio::test]
async fn an_endless_next_link_chain_is_not_followed_to_the_deadline() {
    let dir = mockup_dir("dell");
    let empty = format!("{MGR}/LogServices/Sel/Entries");
    let looping = format!("{SYS}/LogServices/Log1/Entries");
    let e1 = sel_entry(1, "2024-01-01T10:00:00Z", "OK", "System boot");
    let server = MockupServer::builder()
        .dir(dir.join("bmclib"))
        .unwrap()
        .resource(&format!("{MGR}/LogServices"), json!({"@odata.id": format!("{MGR}/LogServices"), "Members": [{"@odata.id": format!("{MGR}/LogServices/Sel")}]}))
        .resource(&format!("{MGR}/LogServices/Sel"), json!({"@odata.id": format!("{MGR}/LogServices/Sel"), "Id": "Sel", "Entries": {"@odata.id": empty}}))
        // No members, and a next page that is this page again.
        .resource(&empty, json!({"@odata.id": empty, "Members": [], "Members@odata.nextLink": empty}))
        .resource(&format!("{SYS}/LogServices"), json!({"@odata.id": format!("{SYS}/LogServices"), "Members": [{"@odata.id": format!("{SYS}/LogServices/Log1")}]}))
        .resource(&format!("{SYS}/LogServices/Log1"), json!({"@odata.id": format!("{SYS}/LogServices/Log1"), "Id": "Log1", "Entries": {"@odata.id": looping}}))
        // One entry, and a next page that is this page again.
        .resource(&looping, json!({"@odata.id": looping, "Members": [e1], "Members@odata.nextLink": looping}))
        .start()
        .await
        .unwrap();
    server.merge_resource(SYS, &json!({"LogServices": {"@odata.id": format!("{SYS}/LogServices")}}));
    let mut s: RedfishSession = connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap();
    let started = std::time::Instant::now();
    let log = s.read_event_log(&ctx(10), 10, 0).await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "took {:?}", started.elapsed());
    // Once to tell what the log holds (it says nothing of itself), once to read it.
    assert!(server.requests_to("GET", &empty).len() <= 2, "an empty page ends the log");
    let pages = server.requests_to("GET", &looping).len();
    // One page to tell what the log holds (it says nothing of itself), then at most 256.
    assert!(pages <= 257, "{pages} pages of one log read");
    assert!(log.total.is_some_and(|t| t as usize <= pages));
    s.close().await;
}
