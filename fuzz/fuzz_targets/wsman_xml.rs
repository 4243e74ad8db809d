//! `wsman_xml`: see `bmcfleet_amt::fuzzing::wsman_xml` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bmcfleet_amt::fuzzing::wsman_xml(data));
