#!/usr/bin/env bash
# Build LOCAL STAND-INS for the third-party base images that
# deploy/docker/Dockerfile and deploy/compose.yaml name, for a machine that
# reaches a Debian mirror and crates.io but no container registry (this is
# how the image and the compose stack were verified on the project's CI-like
# machines). Never push these: the tags are borrowed.
#
#   debian:bookworm-slim        debootstrap --variant=minbase bookworm from the Debian mirror
#   rust:1.95-slim-bookworm     the above + this machine's rustup toolchain, laid out like the official image
#   python:3.11-slim-bookworm   the above + Debian's python3.11 in a venv first on PATH
#   nats:2.12-alpine            the above + wget + the nats-server 2.x binary from .tools (scripts/setup.sh)
#
# CA certificates in /usr/local/share/ca-certificates (a TLS-inspecting proxy's,
# say) are copied into the Debian base, so apt, cargo and pip inside builds
# trust the same proxy this machine does.
#
# Usage: deploy/docker/offline-bases.sh      (root; needs debootstrap, docker)
#   DOCKER=/usr/bin/docker    a client with BuildKit   MIRROR=URL  Debian mirror
#   TARGET_ARCH=arm64         only replace debian:bookworm-slim with an arm64
#       build (debootstrap under qemu-user-static + binfmt-support), after a
#       plain run, for `docker build --platform linux/arm64`: the builder stage
#       stays on this machine's architecture (the rust stand-in) and
#       cross-compiles. A plain run restores the native base.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
DOCKER="${DOCKER:-docker}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
RUST_TAG="${RUST_TAG:-1.95-slim-bookworm}"
docker() { command "$DOCKER" "$@"; }
build() { DOCKER_BUILDKIT=1 docker build --network host -q -t "$1" "$2" >/dev/null && echo "offline-bases: built $1"; }

WORK="$(mktemp -d /var/tmp/bmcfleet-bases.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# debian:bookworm-slim for one architecture, as a FROM-scratch build (so the
# image records that architecture).
debian_base() { # ARCH
  local root="$WORK/rootfs-$1"
  echo "offline-bases: debootstrap bookworm ($1) from $MIRROR"
  debootstrap --arch="$1" --variant=minbase bookworm "$root" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
  rm -f "$root"/var/cache/apt/archives/*.deb
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
  mkdir -p "$WORK/base-$1"
  tar -C "$root" -cf "$WORK/base-$1/rootfs.tar" .
  rm -rf "$root"
  printf 'FROM scratch\nADD rootfs.tar /\nCMD ["bash"]\n' >"$WORK/base-$1/Dockerfile"
  DOCKER_BUILDKIT=1 docker build -q --platform "linux/$1" -t debian:bookworm-slim "$WORK/base-$1" >/dev/null
  rm -rf "$WORK/base-$1"
  echo "offline-bases: built debian:bookworm-slim ($1)"
}

native="$(dpkg --print-architecture)"
if [ -n "${TARGET_ARCH:-}" ] && [ "$TARGET_ARCH" != "$native" ]; then
  debian_base "$TARGET_ARCH"
  exit 0
fi
debian_base "$native"

toolchain="$(rustup show active-toolchain | cut -d' ' -f1)"
mkdir -p "$WORK/rust"
cp -a "$(rustup show home)/toolchains/$toolchain" "$WORK/rust/toolchain"
rm -rf "$WORK/rust/toolchain/share/doc"
cp "$(command -v rustup)" "$WORK/rust/rustup"
cat >"$WORK/rust/settings.toml" <<EOF
version = "12"
default_toolchain = "$toolchain"
profile = "minimal"
auto_self_update = "disable"
EOF
cat >"$WORK/rust/Dockerfile" <<EOF
FROM debian:bookworm-slim
ENV RUSTUP_HOME=/usr/local/rustup CARGO_HOME=/usr/local/cargo \\
    PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY toolchain /usr/local/rustup/toolchains/$toolchain
COPY settings.toml /usr/local/rustup/settings.toml
COPY rustup /usr/local/cargo/bin/rustup
RUN for p in cargo rustc rustdoc; do ln -s rustup /usr/local/cargo/bin/\$p; done; chmod -R a+w /usr/local/cargo
EOF
build "rust:$RUST_TAG" "$WORK/rust"

mkdir -p "$WORK/python"
cat >"$WORK/python/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* && python3 -m venv /usr/local/python
ENV PATH=/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt
CMD ["python3"]
EOF
build python:3.11-slim-bookworm "$WORK/python"

nats="$(command -v nats-server || echo "$ROOT/.tools/bin/nats-server")"
[ -x "$nats" ] || { echo "offline-bases: no nats-server (run scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$WORK/nats"
cp "$(readlink -f "$nats")" "$WORK/nats/nats-server"
cat >"$WORK/nats/Dockerfile" <<'EOF'
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends wget ca-certificates && rm -rf /var/lib/apt/lists/*
COPY nats-server /usr/local/bin/nats-server
EXPOSE 4222 8222
CMD ["nats-server"]
EOF
build nats:2.12-alpine "$WORK/nats"
