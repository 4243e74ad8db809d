//! The identify light against the vendor mockups and sushy-emulator:
//! Supermicro X12 (bmclib fixture: `LocationIndicatorActive` and the
//! deprecated `IndicatorLED` both present: the former is acted on, with the
//! resource's ETag), the DMTF public-rackmount1 mockup (`IndicatorLED`
//! only) and sushy-emulator 2.2 (`IndicatorLED` on its fake driver). Every
//! change is read back; refusals send nothing.

mod common;

use bmcfleet_provider::Identify;
use bmcfleet_redfish::RedfishSession;
use bmcfleet_schema::{ErrorCode, IdentifyLight, IdentifySet};
use bmcfleet_testing::redfish::fixtures::mockup_dir;
use bmcfleet_testing::redfish::{FakeSystem, Fault, MockupServer, SushyEmulator};
use common::{connector, ctx, patches, supermicro};
use serde_json::json;

const SMC: &str = "/redfish/v1/Systems/1";
const DMTF: &str = "/redfish/v1/Systems/437XR1138R2";

fn set(light: IdentifyLight) -> IdentifySet {
    IdentifySet { light, seconds: None }
}

async fn open(server: &MockupServer) -> RedfishSession {
    connector().open(&ctx(10), &server.target(), &server.credentials()).await.expect("connect")
}

async fn supermicro_x12() -> MockupServer {
    supermicro().require_if_match(true).start().await.unwrap()
}

async fn dmtf() -> MockupServer {
    MockupServer::builder().dir(mockup_dir("dmtf-public-rackmount1")).unwrap().start().await.unwrap()
}

#[tokio::test]
async fn supermicro_location_indicator_is_set_with_its_etag_and_read_back() {
    let server = supermicro_x12().await;
    let mut s = open(&server).await;
    let c = ctx(10);
    let before = s.identify(&c).await.unwrap();
    assert_eq!((before.light, before.source.as_str()), (Some(IdentifyLight::Off), "LocationIndicatorActive"));

    let on = s.set_identify(&c, &set(IdentifyLight::On)).await.unwrap();
    assert_eq!(on.light, Some(IdentifyLight::On));
    assert_eq!(patches(&server, SMC), [json!({"LocationIndicatorActive": true})], "IndicatorLED untouched");
    assert!(server.requests_to("PATCH", SMC)[0].header("if-match").is_some());
    assert_eq!(server.resource(SMC).unwrap()["LocationIndicatorActive"], json!(true));
    assert_eq!(server.resource(SMC).unwrap()["IndicatorLED"], json!("Off"));

    // Already on: blink changes nothing and says why it looks the same.
    let blink = s.set_identify(&c, &set(IdentifyLight::Blink)).await.unwrap();
    assert_eq!(blink.light, Some(IdentifyLight::On));
    assert!(blink.note.unwrap().contains("no blink setting"));
    assert_eq!(patches(&server, SMC).len(), 1);

    s.set_identify(&c, &set(IdentifyLight::Off)).await.unwrap();
    assert_eq!(server.resource(SMC).unwrap()["LocationIndicatorActive"], json!(false));

    // Redfish has no timed identify: refused, nothing sent.
    server.clear_requests();
    let e = s.set_identify(&c, &IdentifySet { light: IdentifyLight::On, seconds: Some(30) }).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(server.requests().is_empty(), "nothing read or written");
}

#[tokio::test]
async fn a_patch_the_bmc_accepts_but_does_not_apply_is_an_error() {
    let server = supermicro_x12().await;
    let mut s = open(&server).await;
    // 204 without applying: only the read-back can tell.
    server.push_fault(Fault::status("PATCH", SMC, 204).times(1));
    let e = s.set_identify(&ctx(10), &set(IdentifyLight::On)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::BmcError, "{e}");
    assert!(e.message.contains("reads back false"), "{e}");
}

#[tokio::test]
async fn dmtf_indicator_led_takes_only_allowed_values() {
    let server = dmtf().await;
    let mut s = open(&server).await;
    let c = ctx(10);
    assert_eq!(s.identify(&c).await.unwrap().source, "IndicatorLED");
    let blink = s.set_identify(&c, &set(IdentifyLight::Blink)).await.unwrap();
    assert_eq!(blink.light, Some(IdentifyLight::Blink));
    assert_eq!(patches(&server, DMTF), [json!({"IndicatorLED": "Blinking"})]);
    s.set_identify(&c, &set(IdentifyLight::Off)).await.unwrap();
    assert_eq!(server.resource(DMTF).unwrap()["IndicatorLED"], json!("Off"));

    // A BMC that advertises Lit and Off only: blink is refused before any write.
    server.merge_resource(DMTF, &json!({"IndicatorLED@Redfish.AllowableValues": ["Lit", "Off"]}));
    server.clear_requests();
    let e = s.set_identify(&c, &set(IdentifyLight::Blink)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(server.writes().is_empty());

    // Neither property: unsupported, nothing written.
    server.merge_resource(DMTF, &json!({"IndicatorLED": null}));
    let e = s.set_identify(&c, &set(IdentifyLight::On)).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(server.writes().is_empty());
}

#[tokio::test]
async fn sushy_indicator_led_round_trips() {
    let builder = SushyEmulator::builder().systems(vec![FakeSystem::new(
        "9a1d0c6e-1111-4c3a-9d55-000000000037",
        "node37",
        "Off",
    )]);
    let Some(emu) = SushyEmulator::start_or_skip(builder, "sushy_indicator_led_round_trips").await else {
        return;
    };
    let mut s = connector().open(&ctx(20), &emu.target(), &emu.credentials()).await.expect("connect");
    let c = ctx(20);
    let before = s.identify(&c).await.unwrap();
    assert_eq!(before.source, "IndicatorLED", "{before:?}");
    for light in [IdentifyLight::Blink, IdentifyLight::On, IdentifyLight::Off] {
        let after = s.set_identify(&c, &set(light)).await.unwrap();
        assert_eq!(after.light, Some(light));
        // An independent read of the emulator agrees.
        let led = emu.get(&emu.system_path(0)).await.unwrap()["IndicatorLED"].clone();
        assert_eq!(led, json!(led_value(light)));
    }
}

fn led_value(light: IdentifyLight) -> &'static str {
    match light {
        IdentifyLight::Blink => "Blinking",
        IdentifyLight::On => "Lit",
        IdentifyLight::Off => "Off",
    }
}
