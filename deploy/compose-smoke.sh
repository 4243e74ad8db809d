#!/usr/bin/env bash
# Start the compose demo stack and run its three example batches (bmc-sim,
# ipmi_sim over IPMI, sushy-emulator over Redfish) with the image's bmcctl;
# every batch must end Succeeded. Then stop the stack and delete its volumes.
#
# Usage: deploy/compose-smoke.sh [SERVICE...]
#   no SERVICE: the whole stack; e.g. `nats gateway worker bmc-sim sushy ipmi-sim`
#   starts the core only (when the telemetry images cannot be pulled).
#   BMCFLEET_IMAGE   the bmcfleet image (default bmcfleet:dev; deploy/docker/smoke.sh builds one)
# Uses `docker compose` (v2), else `docker-compose` 1.29 (Debian's), for which
# the top-level `name:` is dropped from a temporary copy (v1 does not know it).
set -euo pipefail

DEPLOY="$(cd "$(dirname "$0")" && pwd)"
WORK="$(mktemp -d)"
if docker compose version >/dev/null 2>&1; then
  compose=(docker compose -p bmcfleet -f "$DEPLOY/compose.yaml")
elif command -v docker-compose >/dev/null; then
  grep -v '^name: ' "$DEPLOY/compose.yaml" >"$WORK/compose.yaml"
  compose=(docker-compose --compatibility -p bmcfleet --project-directory "$DEPLOY" -f "$WORK/compose.yaml")
else
  echo "compose-smoke: neither 'docker compose' nor docker-compose is installed" >&2
  exit 1
fi
cleanup() {
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

export COMPOSE_DOCKER_CLI_BUILD=1 DOCKER_BUILDKIT=1
"${compose[@]}" build sushy ipmi-sim
"${compose[@]}" up -d --no-build "$@"

# The gateway and every worker report healthy (/readyz) before any batch.
for _ in $(seq 90); do
  ps="$("${compose[@]}" ps)"
  if grep -q 'gateway.*(healthy)' <<<"$ps" && [ "$(grep -c 'worker_[0-9].*(healthy)\|worker-[0-9].*(healthy)' <<<"$ps")" -ge 3 ]; then
    break
  fi
  sleep 2
done
"${compose[@]}" ps

failed=0
for example in sim-boot-pxe ipmi-power-cycle redfish-power-on; do
  echo "compose-smoke: $example"
  if out="$("${compose[@]}" run --rm -T bmcctl submit --wait --timeout 90s "/examples/$example.json" 2>&1)" &&
    grep -q ': Succeeded' <<<"$out"; then
    grep -v '^Creating\|^$' <<<"$out"
  else
    echo "$out"
    echo "compose-smoke: FAIL: $example" >&2
    failed=1
  fi
done
if [ "$failed" != 0 ]; then
  "${compose[@]}" logs --tail 30 >&2
  exit 1
fi
echo "compose-smoke: PASS"
