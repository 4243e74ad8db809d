#!/usr/bin/env bash
# Refreshes docs/BENCHMARKS.md, the one command for it: installs the peers
# (scripts/setup.sh), the python `sushy` library used as the reference
# Redfish client, builds the release binaries, and runs `bmc-bench all`
# (about 15-20 minutes on a 2-CPU machine). Extra arguments go to
# `bmc-bench all` (e.g. `--reps 5`, or `--quick` for a smoke run).
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"

SUSHY_VERSION="5.14.0"
if ! "$TOOLS/bin/python3" -c 'import sushy' 2>/dev/null; then
  echo "bench: installing python sushy $SUSHY_VERSION (reference Redfish client) into $TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check "sushy==$SUSHY_VERSION"
fi
export BMCFLEET_PYTHON="$TOOLS/bin/python3"
export BMCFLEET_SUSHY_EMULATOR="$TOOLS/bin/sushy-emulator"

# The gateway, worker and bmc-ipmi-fleet responder the benchmarks start must
# come from the same build as bmc-bench: they are looked up next to it.
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
cargo build --release -p bmcfleet-bench -p bmcfleet-gateway -p bmcfleet-worker
cargo build --release -p bmcfleet-testing --bin bmc-ipmi-fleet
exec "$TARGET/release/bmc-bench" all --out docs/BENCHMARKS.md "$@"
