//! What the provider logs on its own (before the worker scrubs the error it
//! returns) never carries a secret the BMC echoes back.
//!
//! A test binary of its own: tracing caches callsite interest process-wide,
//! so a subscriber installed by one test among parallel others may miss
//! events. Here the subscriber is the global default, set before any call.

use bmcfleet_provider::Offer;
use bmcfleet_redfish::{RedfishConfig, RedfishConnector};
use bmcfleet_schema::MediaKind;
use bmcfleet_testing::redfish::fixtures::redfish_mockup_or_skip;
use bmcfleet_testing::redfish::{Fault, MockupServer};
use bmcfleet_testing::LogCapture;
use serde_json::json;

#[tokio::test]
async fn a_refused_media_patch_echoing_the_image_url_is_not_logged_with_its_credentials() {
    let cap = LogCapture::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(cap.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this test binary");
    let Some(dir) = redfish_mockup_or_skip("lenovo", "a_refused_media_patch_echoing_the_image_url_is_not_logged_with_its_credentials") else { return };
    let server = MockupServer::builder().dir(dir.join("bmclib")).unwrap().start().await.unwrap();
    let ctx = || bmcfleet_provider::Ctx::with_timeout(std::time::Duration::from_secs(10));
    let mut s = RedfishConnector::new(RedfishConfig::default()).open(&ctx(), &server.target(), &server.credentials()).await.unwrap();
    let url = "https://media:S3cretMediaPw@192.0.2.10/isos/install.iso?sig=T0kenSig99";
    let cd = "/redfish/v1/Managers/1/VirtualMedia/CD";
    // The DSP0266 Base registry message for a refused value quotes the value.
    let echo = json!({"error": {"code": "Base.1.8.GeneralError", "message": "A general error has occurred.",
        "@Message.ExtendedInfo": [{"MessageId": "Base.1.8.PropertyValueFormatError",
            "Message": format!("The value '{url}' for the property Image is of a different format than the property can accept."),
            "MessageArgs": [url, "Image"]}]}});
    server.push_fault(Fault::status("PATCH", cd, 400).json(&echo).times(1));
    s.virtual_media().unwrap().insert_media(&ctx(), url, MediaKind::Cd).await.unwrap();
    assert_eq!(server.requests_to("PATCH", cd).len(), 2, "refused once, then sent with Image alone");

    let out = cap.text();
    assert!(out.contains("once more with Image alone"), "the retry is logged:\n{out}");
    for secret in ["S3cretMediaPw", "T0kenSig99"] {
        assert!(!out.contains(secret), "`{secret}` leaked into the log:\n{out}");
    }
}
