//! Secure boot against a real `sushy-emulator` 2.2 (fake driver): its
//! SecureBoot resource (no ResetKeys action: `unsupported`), read back
//! with an independent GET. Its fake driver implements no BIOS (the
//! libvirt driver does): BIOS is tested against the DMTF mockup
//! (bios_mockup.rs).

mod common;

use bmcfleet_provider::{Bios, SecureBoot};
use bmcfleet_schema::{ErrorCode, SecureBootResetKeys};
use bmcfleet_testing::redfish::{FakeSystem, SushyEmulator};
use common::{connector, ctx};
use serde_json::json;

#[tokio::test]
async fn secure_boot_and_no_bios_on_the_fake_driver() {
    let builder =
        SushyEmulator::builder().systems(vec![FakeSystem::new("9a1d0c6e-1111-4c3a-9d55-000000000004", "node4", "Off")]);
    let Some(emu) = SushyEmulator::start_or_skip(builder, "secure_boot_and_no_bios_on_the_fake_driver").await else {
        return;
    };
    let mut s = connector().open(&ctx(20), &emu.target(), &emu.credentials()).await.expect("connect");
    let c = ctx(20);

    // The fake driver implements no BIOS: the system links none.
    assert_eq!(s.bios(&c).await.unwrap_err().code, ErrorCode::Unsupported);

    let sb = s.secure_boot(&c).await.unwrap();
    assert!(!sb.enabled);
    let sb = s.set_secure_boot(&c, true).await.unwrap();
    assert!(sb.enabled && sb.current_boot.as_deref() == Some("Enabled"), "{sb:?}");
    assert_eq!(emu.get(&format!("{}/SecureBoot", emu.system_path(0))).await.unwrap()["SecureBootEnable"], json!(true));
    s.set_secure_boot(&c, false).await.unwrap();
    let e = s.reset_secure_boot_keys(&c, SecureBootResetKeys::ResetAllKeysToDefault).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "sushy's SecureBoot has no actions: {e}");
}
