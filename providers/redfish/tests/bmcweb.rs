//! The provider against the model of OpenBMC's bmcweb
//! (`bmcfleet_testing::redfish::bmcweb`, built from bmcweb's source: see
//! its Sources): what each capability touches is what the BMC advertises,
//! and what it must never touch is checked here, request by request.

mod common;

use bmcfleet_provider::{Bios, BmcSession, EventLog, Inventory, SecureBoot, Users, VirtualMedia};
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{ErrorCode, LogSet, MediaKind, NoChange};
use bmcfleet_testing::redfish::bmcweb::{self, clear_log, MANAGER_LOGS, SYSTEM_LOGS, VIRTUAL_MEDIA};
use bmcfleet_testing::redfish::{Fault, MockupServer};
use common::{connector, ctx};
use serde_json::json;

async fn open(server: &MockupServer) -> RedfishSession {
    connector().open(&ctx(10), &server.target(), &server.credentials()).await.unwrap()
}

fn logs_of(log: &bmcfleet_schema::EventLog) -> Vec<String> {
    let mut l: Vec<String> = log.entries.iter().filter_map(|e| e.log.clone()).collect();
    l.sort();
    l.dedup();
    l
}

/// No log service but the event log was sent a `ClearLog`, and every
/// diagnostic entry is still there.
fn assert_only_cleared(server: &MockupServer, allowed: &[String]) {
    for (service, _) in bmcweb::log_services() {
        let posts = server.requests_to("POST", &clear_log(&service));
        if !allowed.contains(&service) {
            assert!(posts.is_empty(), "ClearLog was POSTed to {service}");
        }
    }
    for dump in [format!("{SYSTEM_LOGS}/Dump/Entries/1"), format!("{MANAGER_LOGS}/Dump/Entries/2")] {
        assert!(server.resource(&dump).is_some(), "{dump} was deleted");
    }
}

#[tokio::test]
async fn event_log_read_leaves_out_dumps_journal_and_host_logs() {
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    let log = s.read_event_log(&ctx(10), 100, 0).await.unwrap();
    // bmcweb's EventLog and PostCodes say nothing of what they are and both
    // hold event records: both are read. Nothing of the dumps (diagnostic
    // data), crash dumps, the journal and the host log (OEM records).
    assert_eq!(logs_of(&log), ["EventLog", "PostCodes"]);
    assert_eq!(log.entries[0].message, "CPU0 Temp sensor crossed a critical high threshold going high.");
    // The journal's first page was looked at to tell what it is; no further page.
    assert!(server.requests_to("GET", &format!("{MANAGER_LOGS}/Journal/Entries")).len() <= 1);

    let other = s.read_logs(&ctx(10), 1000, 0, LogSet::Other).await.unwrap();
    assert_eq!(logs_of(&other), ["Crashdump", "Dump", "HostLogger", "Journal"]);
    let all = s.read_logs(&ctx(10), 1000, 0, LogSet::All).await.unwrap();
    assert_eq!(all.total, Some(log.total.unwrap() + other.total.unwrap()));
    s.close().await;
}

#[tokio::test]
async fn event_log_clear_never_touches_dumps_post_codes_or_crash_data() {
    // bmcweb as it is: no service advertises LogEntryType, two hold event
    // records (EventLog, PostCodes). Nothing is cleared, and the operator is told why.
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    let e = s.clear_event_log(&ctx(10)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(e.message.contains("EventLog, PostCodes"), "{}", e.message);
    assert!(server.writes().iter().all(|r| !r.path.ends_with("LogService.ClearLog")), "{:?}", server.writes());
    assert_only_cleared(&server, &[]);
    s.close().await;
}

#[tokio::test]
async fn event_log_clear_goes_to_the_advertised_event_log_only() {
    // The same BMC with its event log advertising what it is (LogService
    // v1_1+ `LogEntryType`): that one is cleared, nothing else.
    let server = bmcweb::service_model().start().await.unwrap();
    let event_log = format!("{SYSTEM_LOGS}/EventLog");
    server.merge_resource(&event_log, &json!({"LogEntryType": "Event"}));
    let mut s = open(&server).await;
    s.clear_event_log(&ctx(10)).await.unwrap();
    assert_eq!(server.requests_to("POST", &clear_log(&event_log)).len(), 1);
    assert_only_cleared(&server, std::slice::from_ref(&event_log));
    assert!(s.read_event_log(&ctx(10), 10, 0).await.unwrap().entries.is_empty());
    // PostCodes says nothing of itself: not the event log once one is advertised.
    let post_codes = server.resource(&format!("{SYSTEM_LOGS}/PostCodes/Entries")).unwrap();
    assert_eq!(post_codes["Members"].as_array().unwrap().len(), 1);
    s.close().await;
}

#[tokio::test]
async fn a_dump_service_that_calls_itself_an_event_log_is_still_not_cleared() {
    // A hostile or confused BMC: its dump service claims LogEntryType Event
    // but offers CollectDiagnosticData. What it can do decides.
    let server = bmcweb::service_model().start().await.unwrap();
    server.merge_resource(&format!("{SYSTEM_LOGS}/EventLog"), &json!({"LogEntryType": "Event"}));
    server.merge_resource(&format!("{MANAGER_LOGS}/Dump"), &json!({"LogEntryType": "Event"}));
    let mut s = open(&server).await;
    s.clear_event_log(&ctx(10)).await.unwrap();
    assert_only_cleared(&server, &[format!("{SYSTEM_LOGS}/EventLog")]);
    s.close().await;
}

/// Every request but the session's login and logout.
fn own_writes(server: &MockupServer) -> Vec<String> {
    server
        .writes()
        .into_iter()
        .filter(|r| !r.path.starts_with("/redfish/v1/SessionService"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

#[tokio::test]
async fn a_named_event_log_is_cleared_alone_and_verified() {
    // bmcweb as shipped: the operator names the EventLog. Only its
    // ClearLog is sent; PostCodes, the dumps and the rest are untouched.
    let server = bmcweb::service_model().start().await.unwrap();
    let event_log = format!("{SYSTEM_LOGS}/EventLog");
    let mut s = open(&server).await;
    s.clear_named_logs(&ctx(10), &ids(&["EventLog"])).await.unwrap();
    assert_eq!(own_writes(&server), [format!("POST {}", clear_log(&event_log))]);
    assert_only_cleared(&server, std::slice::from_ref(&event_log));
    let post_codes = server.resource(&format!("{SYSTEM_LOGS}/PostCodes/Entries")).unwrap();
    assert_eq!(post_codes["Members"].as_array().unwrap().len(), 1);
    // Verified: the entries were read again after the ClearLog.
    let entries = format!("{event_log}/Entries");
    let gets = server.requests().into_iter().filter(|r| r.is("GET", &entries) || r.is("POST", &clear_log(&event_log)));
    let order: Vec<String> = gets.map(|r| r.method).collect();
    assert!(order.ends_with(&["GET".into(), "POST".into(), "GET".into()]), "{order:?}");
    // A path names it too.
    server.clear_requests();
    s.clear_named_logs(&ctx(10), &ids(&[&event_log])).await.unwrap();
    assert_eq!(own_writes(&server), [format!("POST {}", clear_log(&event_log))]);
    s.close().await;
}

#[tokio::test]
async fn a_log_name_the_bmc_does_not_have_is_refused_with_nothing_sent() {
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    for names in [&["SEL"][..], &["EventLog", "SEL"], &["eventlog"]] {
        let e = s.clear_named_logs(&ctx(10), &ids(names)).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::TargetNotFound, "{names:?}: {e:?}");
        // The operator is told what there is to name.
        for there in ["EventLog (event", "PostCodes", "Journal (other", "/redfish/v1/Managers/bmc/LogServices/Dump"] {
            assert!(e.message.contains(there), "{there}: {}", e.message);
        }
        assert!(own_writes(&server).is_empty(), "{names:?}: {:?}", own_writes(&server));
    }
    let e = s.read_named_logs(&ctx(10), 10, 0, &ids(&["SEL"])).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::TargetNotFound);
    assert_only_cleared(&server, &[]);
    s.close().await;
}

#[tokio::test]
async fn a_named_dump_or_crash_service_is_never_cleared() {
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    // `Dump` is the Id of the System's and the BMC's dump services: which
    // one is not guessed.
    let e = s.clear_named_logs(&ctx(10), &ids(&["Dump"])).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidField, "{e:?}");
    assert!(e.message.contains(&format!("{MANAGER_LOGS}/Dump")), "{}", e.message);
    // Named by path, or with the event log: refused, nothing sent, the
    // event log not cleared either.
    for names in [
        vec![format!("{MANAGER_LOGS}/Dump")],
        vec![format!("{SYSTEM_LOGS}/Dump")],
        vec!["Crashdump".to_owned()],
        vec!["EventLog".to_owned(), format!("{SYSTEM_LOGS}/Dump")],
    ] {
        let e = s.clear_named_logs(&ctx(10), &names).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported, "{names:?}: {e:?}");
        assert!(e.message.contains("diagnostic data") && e.message.contains("never clears"), "{}", e.message);
        assert!(own_writes(&server).is_empty(), "{names:?}: {:?}", own_writes(&server));
    }
    assert_only_cleared(&server, &[]);
    // A service without ClearLog (the journal): nothing sent.
    let e = s.clear_named_logs(&ctx(10), &ids(&["Journal"])).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(own_writes(&server).is_empty());
    s.close().await;
}

#[tokio::test]
async fn a_named_clear_honours_the_action_info_and_reports_a_clear_that_did_not_happen() {
    let server = bmcweb::service_model().start().await.unwrap();
    let event_log = format!("{SYSTEM_LOGS}/EventLog");
    let info = format!("{event_log}/ClearLogActionInfo");
    server.merge_resource(
        &event_log,
        &json!({"Actions": {"#LogService.ClearLog": {"target": clear_log(&event_log), "@Redfish.ActionInfo": info}}}),
    );
    server.set_resource(
        &info,
        json!({"@odata.id": info, "Id": "ClearLogActionInfo", "Parameters": [{"Name": "Confirm", "Required": true, "DataType": "Boolean"}]}),
    );
    let mut s = open(&server).await;
    let e = s.clear_named_logs(&ctx(10), &ids(&["EventLog"])).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(e.message.contains("requires Confirm"), "{}", e.message);
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    assert_eq!(server.requests_to("GET", &info).len(), 1, "the ActionInfo was read");

    // A BMC that answers 204 and keeps its entries: not a success.
    server.set_resource(&info, json!({"@odata.id": info, "Id": "ClearLogActionInfo", "Parameters": []}));
    server.push_fault(Fault::status("POST", &clear_log(&event_log), 204).times(1));
    let e = s.clear_named_logs(&ctx(10), &ids(&["EventLog"])).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e:?}");
    assert!(e.message.contains("still holds 2 entries"), "{}", e.message);
    // Without the fault it clears.
    s.clear_named_logs(&ctx(10), &ids(&["EventLog"])).await.unwrap();
    assert!(s.read_named_logs(&ctx(10), 10, 0, &ids(&["EventLog"])).await.unwrap().entries.is_empty());
    s.close().await;
}

#[tokio::test]
async fn named_logs_are_read_alone_whatever_they_hold() {
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    let log = s.read_named_logs(&ctx(10), 100, 0, &ids(&["PostCodes"])).await.unwrap();
    assert_eq!((logs_of(&log), log.total), (ids(&["PostCodes"]), Some(1)));
    let log = s.read_named_logs(&ctx(10), 100, 0, &ids(&["Journal", "EventLog"])).await.unwrap();
    assert_eq!((logs_of(&log), log.total), (ids(&["EventLog", "Journal"]), Some(22)));
    assert!(own_writes(&server).is_empty());
    s.close().await;
}

#[tokio::test]
async fn a_named_clear_plans_exactly_its_one_post() {
    use bmcfleet_provider::{perform, Plan, PlannedRequest};
    use bmcfleet_schema::{Action, EventLogOp};
    let server = bmcweb::service_model().start().await.unwrap();
    let event_log = format!("{SYSTEM_LOGS}/EventLog");
    let mut s = open(&server).await;
    let plan = Plan::new();
    let action = Action::EventLog(EventLogOp::clear_logs(["EventLog"]));
    let e = perform(&mut s, &ctx(10).with_plan(plan.clone()).for_attempt(), &action).await.unwrap_err();
    assert_eq!(e, bmcfleet_provider::ProviderError::planned());
    let shown = plan.snapshot();
    assert_eq!(
        shown.change,
        Some(PlannedRequest::Redfish { method: "POST".into(), path: clear_log(&event_log), body: Some(json!({})) })
    );
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    // Executed: the one POST the plan showed.
    perform(&mut s, &ctx(10), &action).await.unwrap();
    assert_eq!(own_writes(&server), [format!("POST {}", clear_log(&event_log))]);
    s.close().await;
}

const IMAGE: &str = "http://127.0.0.1:8080/boot.iso";

fn slot(n: u8) -> String {
    format!("{VIRTUAL_MEDIA}/Slot_{n}")
}

#[tokio::test]
async fn media_goes_to_a_slot_that_advertises_insert_media() {
    // Slot_0 and Slot_1 are proxy slots (EjectMedia only, PATCH answers 405):
    // the first slot in the BMC's order cannot take a URL image.
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    assert_eq!(s.insert_media(&ctx(10), IMAGE, MediaKind::Cd).await.unwrap(), None);
    let writes = server.writes();
    assert!(writes.iter().all(|w| !w.path.starts_with(&slot(0)) && !w.path.starts_with(&slot(1))), "{writes:?}");
    assert_eq!(server.requests_to("POST", &format!("{}/Actions/VirtualMedia.InsertMedia", slot(2))).len(), 1);
    assert_eq!(server.resource(&slot(2)).unwrap()["Image"], IMAGE);
    // The same image again: nothing to do, said so, nothing sent.
    server.clear_requests();
    assert_eq!(s.insert_media(&ctx(10), IMAGE, MediaKind::Cd).await.unwrap(), Some(NoChange::AlreadyInserted));
    assert!(server.writes().is_empty());
    // Another image goes to the free legacy slot, not over the first one.
    let other = "http://127.0.0.1:8080/other.iso";
    s.insert_media(&ctx(10), other, MediaKind::Cd).await.unwrap();
    assert_eq!(server.resource(&slot(3)).unwrap()["Image"], other);
    assert_eq!(server.resource(&slot(2)).unwrap()["Image"], IMAGE, "the first image stays in");
    s.close().await;
}

#[tokio::test]
async fn eject_finds_the_media_in_whichever_slot_holds_it() {
    let server = bmcweb::service_model().start().await.unwrap();
    server.merge_resource(&slot(3), &json!({"Inserted": true, "Image": IMAGE, "ConnectedVia": "URI"}));
    let mut s = open(&server).await;
    assert_eq!(s.eject_media(&ctx(10), MediaKind::Cd).await.unwrap(), None);
    assert_eq!(server.requests_to("POST", &format!("{}/Actions/VirtualMedia.EjectMedia", slot(3))).len(), 1);
    assert_eq!(server.resource(&slot(3)).unwrap()["Inserted"], false);
    // Nothing left in: not a success that did not happen, `not_inserted`.
    server.clear_requests();
    assert_eq!(s.eject_media(&ctx(10), MediaKind::Cd).await.unwrap(), Some(NoChange::NotInserted));
    assert!(server.writes().is_empty(), "{:?}", server.writes());
    s.close().await;
}

#[tokio::test]
async fn firmware_components_of_one_name_keep_what_tells_them_apart() {
    // bmcweb names every software inventory item "Software Inventory".
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    let inv = s.inventory(&ctx(10)).await.unwrap();
    type Seen<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Vec<&'a str>);
    let got: Vec<Seen> = inv
        .firmware
        .iter()
        .map(|f| {
            (f.id.as_str(), f.name.as_deref(), f.description.as_deref(), f.related.iter().map(String::as_str).collect())
        })
        .collect();
    assert_eq!(
        got,
        [
            ("a3c1f2e9", Some("Software Inventory"), Some("BMC image"), vec!["/redfish/v1/Managers/bmc"]),
            ("5b7d9e01", Some("Software Inventory"), Some("Host image"), vec!["/redfish/v1/Systems/system/Bios"]),
        ]
    );
    s.close().await;
}

#[tokio::test]
async fn raw_paths_in_the_bmcs_own_spelling_are_sent_canonical() {
    // bmcweb's routes end with `/`; an operator copying one is not refused.
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    let r = common::raw_get(&mut s, "/redfish/v1/Managers/bmc/").await.unwrap();
    assert_eq!(r.body.unwrap()["Id"], "bmc");
    s.close().await;
}

// ---- The "never touched" columns of users delete, BIOS reset, secure
// boot key reset and BMC reset: what the server recorded is the one
// request the action names, and nothing of any other resource.

/// Every account as the server holds it.
fn accounts(server: &MockupServer) -> Vec<serde_json::Value> {
    bmcweb::USERS.iter().map(|(u, _)| server.resource(&bmcweb::account(u)).unwrap_or_default()).collect()
}

#[tokio::test]
async fn deleting_a_user_touches_that_account_only() {
    let server = bmcweb::service_model().start().await.unwrap();
    let before = accounts(&server);
    let mut s = open(&server).await;
    s.delete_user(&ctx(10), "ops").await.unwrap();
    assert_eq!(own_writes(&server), [format!("DELETE {}", bmcweb::account("ops"))]);
    for (i, (user, _)) in bmcweb::USERS.iter().enumerate() {
        if *user != "ops" {
            assert_eq!(server.resource(&bmcweb::account(user)).unwrap_or_default(), before[i], "{user} changed");
        }
    }
    // Nobody of that name, or the login account: nothing sent.
    server.clear_requests();
    assert_eq!(s.delete_user(&ctx(10), "ops").await.unwrap_err().code, ErrorCode::TargetNotFound);
    assert_eq!(s.delete_user(&ctx(10), "Viewer").await.unwrap_err().code, ErrorCode::TargetNotFound);
    assert_eq!(s.delete_user(&ctx(10), "admin").await.unwrap_err().code, ErrorCode::InvalidField);
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    s.close().await;
}

#[tokio::test]
async fn two_accounts_of_one_name_are_never_guessed_between() {
    // A hostile or broken BMC lists two accounts named `ops`: which one the
    // operator means is not known, so neither is deleted.
    let server = bmcweb::service_model().start().await.unwrap();
    server.merge_resource(&bmcweb::account("viewer"), &json!({"UserName": "ops"}));
    let before = accounts(&server);
    let mut s = open(&server).await;
    let e = s.delete_user(&ctx(10), "ops").await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Conflict, "{e:?}");
    assert!(e.message.contains(&bmcweb::account("viewer")) && e.message.contains(&bmcweb::account("ops")), "{e}");
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    assert_eq!(accounts(&server), before);
    s.close().await;
}

#[tokio::test]
async fn bios_reset_posts_reset_bios_and_nothing_else() {
    let server = bmcweb::service_model().start().await.unwrap();
    let mut s = open(&server).await;
    s.reset_bios(&ctx(10)).await.unwrap();
    let target = format!("{}/Actions/Bios.ResetBios", bmcweb::BIOS);
    assert_eq!(own_writes(&server), [format!("POST {target}")]);
    assert_eq!(server.requests_to("POST", &target)[0].json(), Some(json!({})));

    // An ActionInfo that requires a parameter bmcfleet does not send.
    let info = format!("{}/ResetBiosActionInfo", bmcweb::BIOS);
    server.merge_resource(bmcweb::BIOS, &json!({"Actions": {"#Bios.ResetBios": {"@Redfish.ActionInfo": info}}}));
    server.set_resource(
        &info,
        json!({"@odata.id": info, "Id": "ResetBiosActionInfo", "Parameters": [{"Name": "Password", "Required": true, "DataType": "String"}]}),
    );
    server.clear_requests();
    let e = s.reset_bios(&ctx(10)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(e.message.contains("requires Password"), "{e}");
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    s.close().await;
}

/// A spec-built SecureBoot resource (bmcweb serves none) whose ResetKeys
/// lists its values in an ActionInfo, or nowhere.
fn with_secure_boot(server: &MockupServer, values: Option<&[&str]>) -> (String, String) {
    let sb = format!("{}/SecureBoot", bmcweb::SYSTEM);
    let target = format!("{sb}/Actions/SecureBoot.ResetKeys");
    let info = format!("{sb}/ResetKeysActionInfo");
    let mut action = json!({"target": target});
    if let Some(values) = values {
        action["@Redfish.ActionInfo"] = json!(info);
        server.set_resource(
            &info,
            json!({"@odata.id": info, "Id": "ResetKeysActionInfo", "Parameters": [{"Name": "ResetKeysType",
                   "Required": true, "DataType": "String", "AllowableValues": values}]}),
        );
    }
    server.set_resource(
        &sb,
        json!({"@odata.id": sb, "@odata.type": "#SecureBoot.v1_1_0.SecureBoot", "Id": "SecureBoot",
               "SecureBootEnable": true, "SecureBootCurrentBoot": "Enabled", "SecureBootMode": "DeployedMode",
               "Actions": {"#SecureBoot.ResetKeys": action}}),
    );
    server.merge_resource(bmcweb::SYSTEM, &json!({"SecureBoot": {"@odata.id": sb}}));
    (sb, target)
}

#[tokio::test]
async fn secure_boot_key_reset_sends_only_a_type_the_action_info_allows() {
    use bmcfleet_schema::SecureBootResetKeys;
    let server = bmcweb::service_model().start().await.unwrap();
    let (sb, target) = with_secure_boot(&server, Some(&["ResetAllKeysToDefault"]));
    let before = server.resource(&sb).unwrap();
    let mut s = open(&server).await;
    for kind in [SecureBootResetKeys::DeletePk, SecureBootResetKeys::DeleteAllKeys] {
        let e = s.reset_secure_boot_keys(&ctx(10), kind).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidField, "{kind:?}: {e:?}");
        assert!(e.message.contains("offers ResetAllKeysToDefault"), "{e}");
        assert!(own_writes(&server).is_empty(), "{kind:?}: {:?}", own_writes(&server));
    }
    s.reset_secure_boot_keys(&ctx(10), SecureBootResetKeys::ResetAllKeysToDefault).await.unwrap();
    assert_eq!(own_writes(&server), [format!("POST {target}")]);
    assert_eq!(server.requests_to("POST", &target)[0].json(), Some(json!({"ResetKeysType": "ResetAllKeysToDefault"})));
    assert_eq!(server.resource(&sb).unwrap()["SecureBootEnable"], before["SecureBootEnable"], "never PATCHed");
    s.close().await;
}

#[tokio::test]
async fn secure_boot_keys_are_not_reset_where_no_type_is_advertised() {
    use bmcfleet_schema::SecureBootResetKeys;
    let server = bmcweb::service_model().start().await.unwrap();
    with_secure_boot(&server, None);
    let mut s = open(&server).await;
    let e = s.reset_secure_boot_keys(&ctx(10), SecureBootResetKeys::ResetAllKeysToDefault).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(e.message.contains("does not advertise"), "{e}");
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    s.close().await;
}

const SYSTEM2: &str = "/redfish/v1/Systems/system2";
const MANAGER2: &str = "/redfish/v1/Managers/bmc2";

/// The bmcweb model with a second host (`system2`) and a second BMC
/// (`bmc2`, its Manager.Reset allowing only `allowed`); `managed_by`: the
/// second system's `Links.ManagedBy`, `claims`: whether bmc2 lists it in
/// `ManagerForServers`.
async fn two_hosts(allowed: &[&str], managed_by: bool, claims: bool) -> MockupServer {
    let links = if managed_by { json!({"ManagedBy": [{"@odata.id": MANAGER2}]}) } else { json!({}) };
    let system2 = json!({"@odata.id": SYSTEM2, "@odata.type": "#ComputerSystem.v1_22_0.ComputerSystem", "Id": "system2",
                         "Name": "system2", "SystemType": "Physical", "PowerState": "On", "Links": links});
    let b = bmcweb::service_model()
        .resource(
            "/redfish/v1/Systems",
            json!({"Members": [{"@odata.id": bmcweb::SYSTEM}, {"@odata.id": SYSTEM2}], "Members@odata.count": 2}),
        )
        .resource(SYSTEM2, system2)
        .resource(
            "/redfish/v1/Managers",
            json!({"Members": [{"@odata.id": bmcweb::MANAGER}, {"@odata.id": MANAGER2}], "Members@odata.count": 2}),
        )
        .resource(
            MANAGER2,
            json!({"@odata.id": MANAGER2, "@odata.type": "#Manager.v1_14_0.Manager", "Id": "bmc2", "Name": "OpenBmc Manager",
                   "ManagerType": "BMC", "Links": {"ManagerForServers": if claims { json!([{"@odata.id": SYSTEM2}]) } else { json!([]) }},
                   "Actions": {"#Manager.Reset": {"target": format!("{MANAGER2}/Actions/Manager.Reset"),
                       "@Redfish.ActionInfo": format!("{MANAGER2}/ResetActionInfo")},
                       "#Manager.ResetToDefaults": {"target": format!("{MANAGER2}/Actions/Manager.ResetToDefaults"),
                       "ResetType@Redfish.AllowableValues": ["ResetAll"]}}}),
        )
        .resource(
            &format!("{MANAGER2}/ResetActionInfo"),
            json!({"@odata.type": "#ActionInfo.v1_1_2.ActionInfo", "Id": "ResetActionInfo",
                   "Parameters": [{"Name": "ResetType", "Required": true, "DataType": "String", "AllowableValues": allowed}]}),
        );
    b.start().await.unwrap()
}

async fn open_system(server: &MockupServer, id: &str) -> RedfishSession {
    let mut target = server.target();
    target.system_id = Some(id.into());
    connector().open(&ctx(10), &target, &server.credentials()).await.unwrap()
}

#[tokio::test]
async fn bmc_reset_goes_to_the_systems_manager_with_a_type_it_allows() {
    use bmcfleet_provider::BmcReset;
    use bmcfleet_schema::BmcResetKind;
    let server = two_hosts(&["ForceRestart"], true, true).await;
    // system2's manager allows ForceRestart only: a warm reset falls back to it.
    let mut s = open_system(&server, "system2").await;
    s.reset_bmc(&ctx(10), BmcResetKind::Warm).await.unwrap();
    let reset2 = format!("{MANAGER2}/Actions/Manager.Reset");
    assert_eq!(own_writes(&server), [format!("POST {reset2}")]);
    assert_eq!(server.requests_to("POST", &reset2)[0].json(), Some(json!({"ResetType": "ForceRestart"})));
    s.close().await;

    // The first host's BMC, for the first host: nothing of bmc2.
    server.clear_requests();
    let mut s = open_system(&server, "system").await;
    s.reset_bmc(&ctx(10), BmcResetKind::Warm).await.unwrap();
    let reset1 = format!("{}/Actions/Manager.Reset", bmcweb::MANAGER);
    assert_eq!(own_writes(&server), [format!("POST {reset1}")]);
    assert_eq!(server.requests_to("POST", &reset1)[0].json(), Some(json!({"ResetType": "GracefulRestart"})));
    assert!(server.requests().iter().all(|r| !r.path.starts_with(MANAGER2)), "bmc2 was read for system");
    s.close().await;
}

#[tokio::test]
async fn bmc_reset_sends_nothing_the_action_info_does_not_allow() {
    use bmcfleet_provider::BmcReset;
    use bmcfleet_schema::BmcResetKind;
    let server = two_hosts(&["ResetAll"], true, true).await;
    let mut s = open_system(&server, "system2").await;
    for kind in [BmcResetKind::Warm, BmcResetKind::Cold] {
        let e = s.reset_bmc(&ctx(10), kind).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
        assert!(e.message.contains("allows: ResetAll"), "{e}");
    }
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    s.close().await;
}

#[tokio::test]
async fn a_system_no_manager_claims_gets_no_bmc_reset() {
    use bmcfleet_provider::BmcReset;
    use bmcfleet_schema::BmcResetKind;
    // system2 names no manager and no manager names it: of two BMCs, the
    // one that manages it is not guessed.
    let server = two_hosts(&["GracefulRestart", "ForceRestart"], false, false).await;
    let mut s = open_system(&server, "system2").await;
    let e = s.reset_bmc(&ctx(10), BmcResetKind::Warm).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e:?}");
    assert!(own_writes(&server).is_empty(), "{:?}", own_writes(&server));
    s.close().await;
    // The manager that says it serves system2 is its manager.
    let server = two_hosts(&["GracefulRestart", "ForceRestart"], false, true).await;
    let mut s = open_system(&server, "system2").await;
    s.reset_bmc(&ctx(10), BmcResetKind::Warm).await.unwrap();
    assert_eq!(own_writes(&server), [format!("POST {MANAGER2}/Actions/Manager.Reset")]);
    s.close().await;
}
