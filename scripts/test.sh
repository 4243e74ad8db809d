#!/usr/bin/env bash
# The whole test suite: installs what the tests need, builds the binaries the
# end-to-end tests start, and runs every test against the real peers
# (nats-server, ipmi_sim + ipmitool, sushy-emulator, captured AMT/Redfish data).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
# The peers are installed above: a test that cannot find one fails instead of skipping.
export BMCFLEET_REQUIRE_PEERS=1
# Gates: formatting (rustfmt.toml) and lints, warnings as errors.
cargo fmt --all --check
(cd fuzz && cargo fmt --check)
cargo clippy --workspace --all-targets --all-features -- -D warnings
cargo build --workspace --bins --all-features
cargo test --workspace --all-features -- --test-threads="${BMCFLEET_TEST_THREADS:-4}"
# Container, compose and Kubernetes manifests (no Docker engine or cluster needed).
"$ROOT/deploy/validate.sh"
# A short real fuzzing run of every cargo-fuzz target (the committed corpora
# are also replayed by `cargo test` above, in tests/tests/fuzz_corpus.rs).
FUZZ_SECONDS="${FUZZ_SECONDS:-15}" "$ROOT/scripts/fuzz-smoke.sh"
