//! `redfish_path`: see `bmcfleet_schema::fuzzing::redfish_path` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bmcfleet_schema::fuzzing::redfish_path(data));
