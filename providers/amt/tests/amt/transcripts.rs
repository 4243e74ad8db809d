//! The captured data itself, read by the provider's parsers: HTTP
//! transcripts (Digest challenges, chunked bodies, a chunked fault), every
//! WS-Man envelope, and the captured request bodies compared with what the
//! provider builds.

use bmcfleet_amt::digest::{Algorithm, Challenge};
use bmcfleet_amt::wsman::{ns, Envelope, Epr, Param, Request};
use bmcfleet_amt::xml::{self, Element};
use bmcfleet_schema::ErrorCode;
use bmcfleet_testing::amt::{fixtures_root, http::Transcript};
use std::path::PathBuf;
use std::time::Duration;

fn amt_dir() -> PathBuf {
    fixtures_root().unwrap_or_else(|e| panic!("{e}")).join("amt")
}

fn read(dir: &std::path::Path, rel: &str) -> Vec<u8> {
    std::fs::read(dir.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn digest_challenges_of_amt_11_and_15() {
    let dir = amt_dir();
    for (file, realm, nonce, server) in [
        (
            "http/amt11-401-digest-challenge.http",
            "Digest:A4070000000000000000000000000000",
            "wlbEK1EtAAAAAAAAWW5aUHFp+mQQ1j63",
            "11.8.50.3425",
        ),
        (
            "http/amt15-401-digest-challenge.http",
            "Digest:727734D63A1FC0423736E48DA554E462",
            "B9AX94iAAAAAAAAAx6rrSfPHGUrx/3uA",
            "15.0.23.1706",
        ),
    ] {
        let t = Transcript::parse(&read(&dir, file)).unwrap();
        assert_eq!(t.status, 401, "{file}");
        assert!(t.header("Server").unwrap().ends_with(server));
        let c = Challenge::select(t.header("WWW-Authenticate")).unwrap();
        assert_eq!((c.realm.as_str(), c.nonce.as_str()), (realm, nonce), "{file}");
        assert_eq!(c.algorithm, Algorithm::Md5);
        assert!(c.qop_auth && !c.stale && !c.algorithm_given);
        assert_eq!(t.body.len(), t.header("Content-Length").unwrap().parse::<usize>().unwrap());
    }
}

#[test]
fn chunked_general_settings_response() {
    let dir = amt_dir();
    let t = Transcript::parse(&read(&dir, "http/amt15-200-chunked-GetResponse-AMT_GeneralSettings.http")).unwrap();
    assert!(t.chunked);
    assert_eq!(t.status, 200);
    let env = Envelope::parse(std::str::from_utf8(&t.body).unwrap()).unwrap();
    assert!(env.fault().is_none());
    assert_eq!(env.action.as_deref(), Some("http://schemas.xmlsoap.org/ws/2004/09/transfer/GetResponse"));
    let gs = env.body_element("AMT_GeneralSettings").unwrap();
    assert_eq!(gs.ns.as_deref(), Some(ns::amt("AMT_GeneralSettings").as_str()));
    // Split across two chunks in the capture ("Dige" | "st:62FF…").
    assert_eq!(gs.child_text("DigestRealm"), Some("Digest:62FFAC181B3F3457C5B3894ED21F3E6E"));
    // …and "WsmanOnlyMode></g:" across the last two.
    assert_eq!(gs.child_text("WsmanOnlyMode"), Some("false"));
}

#[test]
fn chunked_fault_response() {
    let dir = amt_dir();
    let t = Transcript::parse(&read(&dir, "http/amt15-400-chunked-fault-AlreadyExists.http")).unwrap();
    assert_eq!((t.status, t.header("Connection")), (400, Some("close")));
    let env = Envelope::parse(std::str::from_utf8(&t.body).unwrap()).unwrap();
    let f = env.fault().unwrap();
    assert_eq!(f.name().local, "AlreadyExists");
    assert_eq!(f.name().ns.as_deref(), Some(ns::WSMAN));
    assert_eq!(f.code.local, "Sender");
    assert_eq!(f.reason, "The sender attempted to create a resource which already exists.");
    assert_eq!(f.classify(), (ErrorCode::BmcError, false));
}

#[test]
fn destination_unreachable_fault() {
    let dir = amt_dir();
    let env =
        Envelope::parse(std::str::from_utf8(&read(&dir, "wsman/faults/DestinationUnreachable.xml")).unwrap()).unwrap();
    let f = env.fault().unwrap();
    assert_eq!((f.name().ns.as_deref(), f.name().local.as_str()), (Some(ns::WSA), "DestinationUnreachable"));
    assert_eq!(f.classify().0, ErrorCode::Unreachable);
    assert!(f.to_string().starts_with("WS-Man fault wsa:DestinationUnreachable (s:Sender): No route"), "{f}");
}

/// Every captured envelope parses, namespace-aware, whatever its prefixes.
#[test]
fn every_captured_envelope_parses() {
    let dir = amt_dir();
    let mut n = 0;
    let mut stack = vec![dir.join("wsman")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "xml") && !p.ends_with("requests") {
                let text = std::fs::read_to_string(&p).unwrap();
                if p.parent().is_some_and(|pp| pp.ends_with("requests")) {
                    xml::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                } else {
                    Envelope::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                }
                n += 1;
            }
        }
    }
    assert!(n >= 20, "only {n} captured files found");
}

#[test]
fn captured_return_values_and_pull_items() {
    let dir = amt_dir();
    let env = |rel: &str| Envelope::parse(std::str::from_utf8(&read(&dir, rel)).unwrap()).unwrap();
    for (rel, method) in [
        ("wsman/cim/power/managementservice/requestpowerstatechange.xml", "RequestPowerStateChange"),
        ("wsman/cim/boot/configsetting/changebootorder.xml", "ChangeBootOrder"),
        ("wsman/cim/boot/service/setbootconfigrole.xml", "SetBootConfigRole"),
    ] {
        assert_eq!(env(rel).return_value(method).map(Result::ok), Some(Some(0)), "{rel}");
    }
    let page = env("wsman/cim/boot/sourcesetting/pull.xml").pull_page().unwrap();
    assert!(page.end_of_sequence);
    let ids: Vec<_> = page.items.iter().map(|i| i.child_text("InstanceID").unwrap()).collect();
    assert!(ids.contains(&"Intel(r) AMT: Force PXE Boot"), "{ids:?}");
    let page = env("wsman/cim/associatedpower/managementservice/pull.xml").pull_page().unwrap();
    assert_eq!(page.items[0].child_text("PowerState"), Some("2"));
    assert_eq!(
        env("wsman/cim/associatedpower/managementservice/enumerate.xml").enumeration_context().as_deref(),
        Some("5E1A0000-0000-0000-0000-000000000000")
    );
}

/// Structure of an element tree, for namespace-aware comparison. EPR
/// `Address` values are left out: the captures send the addressing
/// namespace URI there, we send DSP0226's anonymous role, and AMT accepts both.
fn shape(e: &Element) -> String {
    let mut s = format!("{{{}}}{}", e.ns.as_deref().unwrap_or(""), e.name);
    let mut attrs: Vec<_> =
        e.attrs.iter().filter(|a| a.ns.is_none()).map(|a| format!("@{}={}", a.name, a.value)).collect();
    attrs.sort();
    s += &attrs.join("");
    if e.children.is_empty() && e.name != "Address" {
        s += &format!("={:?}", e.text_trim());
    }
    s += "[";
    for c in &e.children {
        s += &shape(c);
    }
    s + "]"
}

fn built_body(req: &Request) -> Element {
    let bytes = req.to_xml("uuid:x", Duration::from_secs(5));
    let env = xml::parse(std::str::from_utf8(&bytes).unwrap()).unwrap();
    env.child(ns::SOAP, "Body").unwrap().children[0].clone()
}

#[test]
fn built_request_bodies_match_the_captured_ones() {
    let dir = amt_dir();
    let captured = |rel: &str| xml::parse(std::str::from_utf8(&read(&dir, rel)).unwrap()).unwrap();
    let cs = Epr::new(
        ns::cim("CIM_ComputerSystem"),
        &[("CreationClassName", "CIM_ComputerSystem"), ("Name", "ManagedSystem")],
    );
    let cases = [
        (
            "wsman/requests/RequestPowerStateChange_INPUT.body.xml",
            Request::invoke(
                ns::cim("CIM_PowerManagementService"),
                &[],
                "RequestPowerStateChange",
                vec![
                    Param::Value { name: "PowerState", value: "8".into() },
                    Param::Ref { name: "ManagedElement", epr: cs },
                ],
            ),
        ),
        (
            "wsman/requests/ChangeBootOrder_INPUT.body.xml",
            Request::invoke(
                ns::cim("CIM_BootConfigSetting"),
                &[],
                "ChangeBootOrder",
                vec![Param::Ref {
                    name: "Source",
                    epr: Epr::new(
                        ns::cim("CIM_BootSourceSetting"),
                        &[("InstanceID", "Intel(r) AMT: Force Hard-drive Boot")],
                    ),
                }],
            ),
        ),
        (
            "wsman/requests/SetBootConfigRole_INPUT.body.xml",
            Request::invoke(
                ns::cim("CIM_BootService"),
                &[],
                "SetBootConfigRole",
                vec![
                    Param::Ref {
                        name: "BootConfigSetting",
                        epr: Epr::new(ns::cim("CIM_BootConfigSetting"), &[("InstanceID", "InstanceID")]),
                    },
                    Param::Value { name: "Role", value: "0".into() },
                ],
            ),
        ),
    ];
    for (rel, req) in cases {
        assert_eq!(shape(&built_body(&req)), shape(&captured(rel)), "{rel}");
    }
}

/// The captured Put (a request envelope from a WS-Man client) carries the
/// same properties, in the same order, as the captured Get answer: the
/// round trip our Put relies on.
#[test]
fn captured_put_round_trips_the_get() {
    let dir = amt_dir();
    let put = Envelope::parse(std::str::from_utf8(&read(&dir, "wsman/amt/boot/settingdata/put.xml")).unwrap()).unwrap();
    let get = Envelope::parse(std::str::from_utf8(&read(&dir, "wsman/amt/boot/settingdata/get.xml")).unwrap()).unwrap();
    let names = |e: &Envelope| -> Vec<String> {
        e.body_element("AMT_BootSettingData").unwrap().children.iter().map(|c| c.name.clone()).collect()
    };
    assert_eq!(names(&put), names(&get));
    assert_eq!(put.action.as_deref(), Some(ns::ACTION_PUT));
}
