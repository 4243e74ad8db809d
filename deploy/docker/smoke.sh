#!/usr/bin/env bash
# Build the bmcfleet image and prove that it works, with a running Docker
# engine:
#   1. every binary executes as the image's non-root user (uid 10001), is
#      mode 0755 and owned by root; tini is PID 1;
#   2. bmc-sim, bmc-gateway and bmc-worker run from the image as containers
#      and a batch submitted with the image's bmcctl succeeds end to end
#      (NATS: a nats-server started here on 127.0.0.1; the containers share
#      the host's network namespace and use loopback only);
#   3. `docker stop` (SIGTERM through tini) drains the worker, which exits 0
#      before the stop timeout instead of being killed.
#
# Usage: deploy/docker/smoke.sh [IMAGE]        (default bmcfleet:smoke)
#   BMCFLEET_SKIP_BUILD=1   test an existing IMAGE instead of building it
#   DOCKER_BUILD_ARGS="..." extra `docker build` arguments
#   DOCKERFILE=PATH         build from another Dockerfile (default
#                           deploy/docker/Dockerfile)
#   DOCKER=/usr/bin/docker  the Docker client to use (one with BuildKit: a
#                           20.10+ client, or a newer one with buildx)
# Needs: docker (engine running), nats-server on PATH (scripts/setup.sh puts
# one in .tools/bin).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
IMAGE="${1:-bmcfleet:smoke}"
export PATH="$ROOT/.tools/bin:$PATH"

DOCKER="${DOCKER:-docker}"
docker() { command "$DOCKER" "$@"; }
say() { echo "docker-smoke: $*"; }
fail() { echo "docker-smoke: FAIL: $*" >&2; exit 1; }

docker info >/dev/null 2>&1 || fail "no Docker engine answers (docker info)"
command -v nats-server >/dev/null || fail "nats-server is not on PATH (run scripts/setup.sh)"

if [ "${BMCFLEET_SKIP_BUILD:-0}" != 1 ]; then
  say "building $IMAGE"
  # shellcheck disable=SC2086
  DOCKER_BUILDKIT=1 docker build --network host -f "${DOCKERFILE:-$ROOT/deploy/docker/Dockerfile}" -t "$IMAGE" \
    ${DOCKER_BUILD_ARGS:-} "$ROOT"
fi

WORK="$(mktemp -d)"
containers=()
nats_pid=""
cleanup() {
  for c in "${containers[@]}"; do docker rm -f "$c" >/dev/null 2>&1 || true; done
  [ -n "$nats_pid" ] && kill "$nats_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- 1. the image itself ----------------------------------------------------
user="$(docker image inspect -f '{{.Config.User}}' "$IMAGE")"
[ "$user" = "10001:10001" ] || fail "image user is '$user', want 10001:10001"
uid="$(docker run --rm --entrypoint id "$IMAGE" -u)"
[ "$uid" = 10001 ] || fail "containers run as uid $uid, want 10001"
modes="$(docker run --rm --entrypoint stat "$IMAGE" -c '%n %a %U' \
  /usr/local/bin/bmc-gateway /usr/local/bin/bmc-worker /usr/local/bin/bmcctl /usr/local/bin/bmc-sim)"
while read -r name mode owner; do
  [ "$mode" = 755 ] && [ "$owner" = root ] || fail "$name is mode $mode owned by $owner, want 755 root"
done <<<"$modes"
for b in bmc-gateway bmc-worker bmcctl bmc-sim; do
  v="$(docker run --rm "$IMAGE" "$b" --version)" || fail "$b does not execute in the image"
  say "$v (runs as uid $uid)"
done
pid1="$(docker run --rm "$IMAGE" cat /proc/1/cmdline | tr '\0' ' ')"
# (A foreign-architecture image runs under QEMU: binfmt puts its interpreter first.)
case "$pid1" in /usr/bin/tini\ * | *qemu*\ /usr/bin/tini\ *) ;; *) fail "PID 1 is '$pid1', want tini" ;; esac
say "PID 1: $pid1"

# --- 2. end to end from the image -------------------------------------------
wait_for_log() { # container-or-file pattern
  for _ in $(seq 300); do
    if [ -f "$1" ]; then grep -q "$2" "$1" && return 0; else docker logs "$1" 2>&1 | grep -q "$2" && return 0; fi
    sleep 0.1
  done
  echo "docker-smoke: timed out waiting for '$2' in $1:" >&2
  if [ -f "$1" ]; then tail -30 "$1" >&2; else docker logs "$1" 2>&1 | tail -30 >&2; fi
  return 1
}
# Containers are named bmcfleet-smoke-NAME-PID (for cleanup and logs).
run() { # NAME args...
  local name="bmcfleet-smoke-$1-$$"; shift
  containers+=("$name")
  docker run -d --name "$name" --network host "$@" >/dev/null
}

nats-server -js -a 127.0.0.1 -p -1 -m -1 -sd "$WORK/js" >"$WORK/nats.log" 2>&1 &
nats_pid=$!
wait_for_log "$WORK/nats.log" "Server is ready"
port="$(sed -n 's/.*Listening for client connections on 127.0.0.1:\([0-9]*\).*/\1/p' "$WORK/nats.log" | head -1)"
NATS="nats://127.0.0.1:$port"
say "nats-server on $NATS"

mkdir -p "$WORK/keys"
chmod 0777 "$WORK/keys"
public="$(docker run --rm -v "$WORK/keys:/keys" "$IMAGE" bmcctl keygen --out /keys/workers.xkey 2>/dev/null)"
say "workers' sealing key $public (written by the image's bmcctl as uid 10001)"

sim="bmcfleet-smoke-sim-$$" gateway="bmcfleet-smoke-gateway-$$" worker="bmcfleet-smoke-worker-$$"
run sim "$IMAGE" bmc-sim --listen 127.0.0.1:0
wait_for_log "$sim" "listening on"
sim_addr="$(docker logs "$sim" 2>&1 | sed -n 's/.*listening on \(.*\)$/\1/p' | head -1)"
run gateway -e BMCFLEET_NATS_URL="$NATS" "$IMAGE" bmc-gateway --allow-sim true \
  --inline-credentials sealed --workers-public-key "$public" --metrics-addr 127.0.0.1:0
run worker -e BMCFLEET_NATS_URL="$NATS" -v "$WORK/keys:/keys:ro" "$IMAGE" bmc-worker \
  --sim-endpoint "$sim_addr" --worker-id docker-smoke --sealing-key-file /keys/workers.xkey --metrics-addr 127.0.0.1:0
wait_for_log "$gateway" "Gateway ready"

cat >"$WORK/batch.json" <<'JSON'
{
  "bmc": {"address": "10.0.0.5", "protocol": "sim",
          "credentials": {"inline": {"username": "admin", "password": "docker-smoke-password"}}},
  "actions": [
    {"boot_device": {"device": "pxe", "persistent": false, "efi": true}},
    {"power": "on"},
    {"power": "status"}
  ],
  "deadline": "1m"
}
JSON
chmod 0644 "$WORK/batch.json"
if ! out="$(docker run --rm --network host -e BMCFLEET_NATS_URL="$NATS" -v "$WORK/batch.json:/batch.json:ro" \
  "$IMAGE" bmcctl submit /batch.json --wait --timeout 60s 2>&1)"; then
  echo "$out" >&2
  docker logs "$gateway" 2>&1 | tail -20 >&2
  docker logs "$worker" 2>&1 | tail -20 >&2
  fail "the batch did not succeed"
fi
echo "$out"
grep -q "Succeeded" <<<"$out" || fail "bmcctl did not report the batch Succeeded"
grep -q "power=on" <<<"$out" || fail "power status did not read back on"
if docker logs "$worker" 2>&1 | grep -q "docker-smoke-password"; then fail "the password reached the worker's log"; fi

# --- 3. SIGTERM through tini ------------------------------------------------
start=$(date +%s)
docker stop -t 30 "$worker" >/dev/null
took=$(( $(date +%s) - start ))
code="$(docker inspect -f '{{.State.ExitCode}}' "$worker")"
[ "$code" = 0 ] || fail "the worker exited with $code after docker stop (137: killed, SIGTERM not forwarded)"
say "docker stop: the worker drained and exited 0 in ${took}s"
docker stop -t 30 "$gateway" >/dev/null
code="$(docker inspect -f '{{.State.ExitCode}}' "$gateway")"
[ "$code" = 0 ] || fail "the gateway exited with $code after docker stop"
docker stop -t 10 "$sim" >/dev/null
say "PASS: $IMAGE"
