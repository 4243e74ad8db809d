//! `ipmi_response`: see `bmcfleet_ipmi::fuzzing::ipmi_response` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bmcfleet_ipmi::fuzzing::ipmi_response(data));
