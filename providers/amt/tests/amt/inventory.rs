//! Inventory, including a general-settings answer replayed from the captured
//! chunked AMT 15 HTTP transcript.

use crate::common::{ctx, session, session_replaying};
use crate::fixture_server;
use bmcfleet_provider::Inventory;
use bmcfleet_provider::Offer;
use bmcfleet_schema::{ErrorCode, PowerState};
use bmcfleet_testing::amt::{Class, Injection, Op, CHASSIS_MANUFACTURER, CHASSIS_MODEL, CHASSIS_SERIAL, PLATFORM_GUID};

fn extra<'a>(inv: &'a bmcfleet_schema::Inventory, key: &str) -> Option<&'a str> {
    inv.extra.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

#[tokio::test]
async fn inventory_from_amt() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    let inv = Offer::inventory(&mut s).unwrap().inventory(&ctx()).await.unwrap();
    assert_eq!(inv.firmware_version.as_deref(), Some("15.0.23.1706"));
    assert_eq!(inv.manufacturer.as_deref(), Some(CHASSIS_MANUFACTURER));
    assert_eq!(inv.model.as_deref(), Some(CHASSIS_MODEL));
    assert_eq!(inv.serial.as_deref(), Some(CHASSIS_SERIAL));
    assert_eq!(inv.power_state, Some(PowerState::On));
    // From the captured AMT_GeneralSettings.
    assert_eq!(extra(&inv, "amt_hostname"), Some("Test Host Name"));
    assert_eq!(extra(&inv, "amt_domain"), Some("Test Domain Name"));
    assert_eq!(extra(&inv, "amt_digest_realm"), Some("Digest:F3EB554784E729164447A89F60B641C5"));
    assert_eq!(extra(&inv, "platform_guid"), Some(PLATFORM_GUID));
    assert_eq!(extra(&inv, "amt_sw_build_number"), Some("1706"));
    assert_eq!(extra(&inv, "amt_power_state"), Some("2 (On)"));
    let chassis = server.requests().into_iter().find(|r| r.op == Some(Op::Get(Class::Chassis))).unwrap();
    assert!(chassis.selectors.contains(&("Tag".into(), "CIM_Chassis".into())));
}

#[tokio::test]
async fn chunked_transcript_answer_parses() {
    let server = fixture_server!();
    let transcript = "http/amt15-200-chunked-GetResponse-AMT_GeneralSettings.http";
    let mut s = session_replaying(&server, Op::Get(Class::GeneralSettings), transcript).await;
    let inv = Inventory::inventory(&mut s, &ctx()).await.unwrap();
    // This realm exists only in the captured AMT 15 transcript (split across chunks).
    assert_eq!(extra(&inv, "amt_digest_realm"), Some("Digest:62FFAC181B3F3457C5B3894ED21F3E6E"));
    assert_eq!(extra(&inv, "amt_hostname"), None, "empty in that capture");
}

#[tokio::test]
async fn optional_classes_may_be_missing() {
    let server = fixture_server!();
    let mut s = session(&server).await;
    server.inject(Op::Get(Class::Chassis), Injection::DestinationUnreachable);
    server.inject(Op::Enumerate(Class::SoftwareIdentity), Injection::DestinationUnreachable);
    let inv = Inventory::inventory(&mut s, &ctx()).await.unwrap();
    assert_eq!(inv.manufacturer, None);
    assert_eq!(inv.firmware_version, None);
    assert_eq!(extra(&inv, "platform_guid"), Some(PLATFORM_GUID));
    // The required class is not optional.
    server.inject(Op::Get(Class::GeneralSettings), Injection::DestinationUnreachable);
    let e = Inventory::inventory(&mut s, &ctx()).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unreachable);
}

/// An AMT's text goes into the inventory bounded like every provider's
/// (`components::bound`): at most `MAX_EXTRA` extra entries of at most
/// `MAX_TEXT` characters, no control characters, whatever the AMT writes
/// (a megabyte-long host name with line breaks, thousands of software
/// identities).
#[tokio::test]
async fn what_an_amt_writes_is_bounded_in_the_inventory() {
    use bmcfleet_amt::wsman::ns;
    use bmcfleet_schema::components::{MAX_EXTRA, MAX_TEXT};
    let server = fixture_server!();
    let mut s = session(&server).await;
    let envelope = |body: String| {
        format!(
            r#"<s:Envelope xmlns:s="{}" xmlns:n="{}"><s:Header/><s:Body>{body}</s:Body></s:Envelope>"#,
            ns::SOAP,
            ns::WSEN
        )
    };
    let long = format!("evil&#10;2026-12-05T00:00:00Z INFO forged line&#27;[31m{}", "h".repeat(100_000));
    let general = format!(
        r#"<g:AMT_GeneralSettings xmlns:g="{}"><g:HostName>{long}</g:HostName><g:DomainName>d</g:DomainName></g:AMT_GeneralSettings>"#,
        ns::class_uri("AMT_GeneralSettings")
    );
    server.inject(Op::Get(Class::GeneralSettings), Injection::Document(envelope(general)));
    let items: String = (0..2_000)
        .map(|i| format!(r#"<c:CIM_SoftwareIdentity xmlns:c="{}"><c:InstanceID>sw{i}</c:InstanceID><c:VersionString>1.{i}</c:VersionString></c:CIM_SoftwareIdentity>"#, ns::class_uri("CIM_SoftwareIdentity")))
        .collect();
    server.inject(
        Op::Pull(Class::SoftwareIdentity),
        Injection::Document(envelope(format!(
            "<n:PullResponse><n:Items>{items}</n:Items><n:EndOfSequence/></n:PullResponse>"
        ))),
    );
    let inv = Inventory::inventory(&mut s, &ctx()).await.unwrap();
    assert!(inv.extra.len() <= MAX_EXTRA, "{} extra entries", inv.extra.len());
    for (k, v) in &inv.extra {
        assert!(
            v.chars().count() <= MAX_TEXT && !v.chars().any(char::is_control),
            "{k}: {} characters: {:?}",
            v.chars().count(),
            v.chars().take(60).collect::<String>()
        );
    }
    assert!(
        extra(&inv, "amt_hostname").is_some_and(|h| h.starts_with("evil 2026")),
        "{:?}",
        extra(&inv, "amt_hostname").map(|h| h.chars().take(60).collect::<String>())
    );
    assert_eq!(extra(&inv, "amt_power_state"), Some("2 (On)"), "what comes after the software identities is kept");
}
