//! `batch_decode`: see `bmcfleet_schema::fuzzing::batch_decode` for what it drives and checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bmcfleet_schema::fuzzing::batch_decode(data));
