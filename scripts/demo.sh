#!/usr/bin/env bash
# The main job, locally: a NATS JetStream server, bmc-gateway, one bmc-worker
# and a simulated BMC; submits a batch (boot PXE, power on, read power state,
# inventory) and prints its result. Everything runs on 127.0.0.1 and stops at the end.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"
cargo build --release --bins -q
BIN="$ROOT/target/release"
WORK="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

wait_for_line() { # file pattern
  for _ in $(seq 150); do grep -q "$2" "$1" && return 0; sleep 0.1; done
  echo "demo: timed out waiting for '$2' in $1:" >&2; cat "$1" >&2; return 1
}

nats-server -js -a 127.0.0.1 -p -1 -m -1 -sd "$WORK/js" >"$WORK/nats.log" 2>&1 &
pids+=($!)
wait_for_line "$WORK/nats.log" "Server is ready"
PORT="$(sed -n 's/.*Listening for client connections on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/nats.log" | head -1)"
export BMCFLEET_NATS_URL="nats://127.0.0.1:$PORT"
echo "demo: nats-server with JetStream on $BMCFLEET_NATS_URL"

"$BIN/bmc-sim" --listen 127.0.0.1:0 >"$WORK/sim.log" 2>&1 &
pids+=($!)
wait_for_line "$WORK/sim.log" "listening on"
SIM="$(sed -n 's/.*listening on \(.*\)$/\1/p' "$WORK/sim.log" | head -1)"
echo "demo: simulated BMC fleet (bmc-sim) on $SIM"

# The workers' sealing key: the gateway seals the batch's inline password to
# its public half, so the job stream never holds the password in clear.
PUBLIC_KEY="$("$BIN/bmcctl" keygen --out "$WORK/workers.xkey" 2>/dev/null)"
echo "demo: workers' sealing key $PUBLIC_KEY (seed in $WORK/workers.xkey, mode 0600)"

"$BIN/bmc-gateway" --allow-sim true --inline-credentials sealed --workers-public-key "$PUBLIC_KEY" \
  --metrics-addr 127.0.0.1:0 >"$WORK/gateway.log" 2>&1 &
pids+=($!)
"$BIN/bmc-worker" --sim-endpoint "$SIM" --worker-id demo-worker --sealing-key-file "$WORK/workers.xkey" \
  --metrics-addr 127.0.0.1:0 >"$WORK/worker.log" 2>&1 &
pids+=($!)
wait_for_line "$WORK/gateway.log" "Gateway ready"
echo "demo: bmc-gateway and bmc-worker started"
for c in gateway worker; do
  echo "demo: $c metrics: http://$(sed -n 's/.*Metrics listening on \([0-9.:]*\)\..*/\1/p' "$WORK/$c.log" | head -1)/metrics"
done

# The operator registers the machine and its credential (sealed to the
# workers' key); producers then name the machine, nothing else.
echo "demo-password" | "$BIN/bmcctl" cred put demo-bmc --username admin --password-stdin --workers-public-key "$PUBLIC_KEY"
cat >"$WORK/machines.yaml" <<'YAML'
machines:
  - name: demo-node1
    address: 10.0.0.5
    protocol: sim
    credentials: demo-bmc
    labels: {rack: "1", role: demo}
YAML
"$BIN/bmcctl" machine apply -f "$WORK/machines.yaml"
"$BIN/bmcctl" machine ls

cat >"$WORK/batch.json" <<'JSON'
{
  "machine": "demo-node1",
  "actions": [
    {"boot_device": {"device": "pxe", "persistent": false, "efi": true}},
    {"power": "on"},
    {"power": "status"},
    "inventory"
  ],
  "deadline": "1m"
}
JSON
echo "demo: submitting this batch and waiting for its result:"
cat "$WORK/batch.json"
if ! "$BIN/bmcctl" submit "$WORK/batch.json" --wait --timeout 90s; then
  echo "--- gateway log"; tail -20 "$WORK/gateway.log"; echo "--- worker log"; tail -20 "$WORK/worker.log"; exit 1
fi
echo "demo: done (the worker log is in $WORK/worker.log until this script exits)"
