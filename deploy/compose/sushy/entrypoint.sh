#!/bin/sh
# Make the emulator's certificate and password file, then run it.
set -eu
run=${SUSHY_RUN_DIR:-/run/sushy}
conf=${SUSHY_CONFIG:-/etc/sushy/emulator.conf}
: "${SUSHY_USERNAME:?set SUSHY_USERNAME}"
: "${SUSHY_PASSWORD:?set SUSHY_PASSWORD}"
mkdir -p "$run/state" "$run/tmp"
# The root file system is read-only: sushy-tools keeps its state under
# tempfile.gettempdir() and fails at import without a writable one.
export TMPDIR="$run/tmp"
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=sushy" \
    -addext "subjectAltName=DNS:sushy,DNS:localhost,IP:127.0.0.1" \
    -keyout "$run/key.pem" -out "$run/cert.pem" 2>/dev/null
python3 - "$run/htpasswd" <<'PY'
import bcrypt, os, sys
user, password = os.environ["SUSHY_USERNAME"], os.environ["SUSHY_PASSWORD"]
with open(sys.argv[1], "w") as f:
    f.write(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode()}\n")
PY
exec sushy-emulator --config "$conf"
