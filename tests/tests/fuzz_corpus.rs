//! Replays every committed fuzz input (`fuzz/corpus/<target>/*` and
//! `fuzz/regressions/<target>/*`) through the same entry points the
//! cargo-fuzz targets call, so `cargo test --workspace` catches a
//! regression deterministically, without cargo-fuzz or a nightly compiler.
//! A panic in an entry point names the file that caused it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

type Entry = fn(&[u8]);

const TARGETS: [(&str, Entry); 6] = [
    ("batch_decode", bmcfleet_schema::fuzzing::batch_decode),
    ("ipmi_response", bmcfleet_ipmi::fuzzing::ipmi_response),
    ("wsman_xml", bmcfleet_amt::fuzzing::wsman_xml),
    ("redfish_json", bmcfleet_redfish::fuzzing::redfish_json),
    ("redfish_path", bmcfleet_schema::fuzzing::redfish_path),
    ("redfish_url_join", bmcfleet_redfish::fuzzing::redfish_url_join),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

fn inputs(target: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for set in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(set).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        files.extend(entries.map(|e| e.expect("readable directory entry").path()).filter(|p| p.is_file()));
    }
    files.sort();
    files
}

fn replay(target: &str, entry: Entry) {
    let files = inputs(target);
    assert!(!files.is_empty(), "no seed corpus for {target} under {}", fuzz_dir().display());
    let failed: Vec<String> = files
        .iter()
        .filter(|f| {
            let data = std::fs::read(f).expect("readable corpus file");
            catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err()
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(failed.is_empty(), "{target}: {} of {} inputs panicked: {failed:#?}", failed.len(), files.len());
}

/// One test per target (named after it in the test output), each replaying
/// its entry of [`TARGETS`].
macro_rules! corpus_tests {
    ($($test:ident => $index:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                replay(TARGETS[$index].0, TARGETS[$index].1);
            }
        )*
    };
}

corpus_tests! {
    batch_decode_corpus => 0,
    ipmi_response_corpus => 1,
    wsman_xml_corpus => 2,
    redfish_json_corpus => 3,
    redfish_path_corpus => 4,
    redfish_url_join_corpus => 5,
}

/// The cargo-fuzz crate and this test agree on the target names.
#[test]
fn every_fuzz_target_is_replayed() {
    let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).expect("fuzz/Cargo.toml");
    for (name, _) in TARGETS {
        assert!(manifest.contains(&format!("name = \"{name}\"")), "fuzz/Cargo.toml has no target {name}");
    }
    let declared = manifest.matches("[[bin]]").count();
    assert_eq!(
        declared,
        TARGETS.len(),
        "fuzz/Cargo.toml declares {declared} targets; this test replays {}",
        TARGETS.len()
    );
}
