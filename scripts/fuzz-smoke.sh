#!/usr/bin/env bash
# A short real fuzzing run of every cargo-fuzz target (see fuzz/README.md):
# installs cargo-fuzz if missing, builds the targets with AddressSanitizer and
# debug assertions (so integer overflow panics too)
# on the stable toolchain (RUSTC_BOOTSTRAP=1 unlocks the nightly flags
# cargo-fuzz passes), and fuzzes each target for FUZZ_SECONDS (default 20)
# from the committed seeds. Fails on the first crash, leak, timeout or OOM;
# the reproducer is left in fuzz/artifacts/<target>/.
#
# New inputs go to a throwaway directory: the committed corpus is not touched.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

targets=(batch_decode ipmi_response wsman_xml redfish_json redfish_path redfish_url_join)
# One build for all targets, so each run below starts fuzzing at once.
cargo fuzz build -O -a

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
    mkdir -p "$work/$t"
    echo "fuzz-smoke: $t for ${SECONDS_PER_TARGET}s"
    cargo fuzz run -O -a "$t" "$work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 2>"$work/$t.log" || {
        tail -n 60 "$work/$t.log"
        echo "fuzz-smoke: $t FAILED (reproducer in fuzz/artifacts/$t/)"
        exit 1
    }
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/$t.log" | sed "s/^/fuzz-smoke: $t /"
done
echo "fuzz-smoke: ${#targets[@]} passed, 0 failed"
