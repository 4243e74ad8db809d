//! `redfish_url_join`: see `bmcfleet_redfish::fuzzing::redfish_url_join` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bmcfleet_redfish::fuzzing::redfish_url_join(data));
