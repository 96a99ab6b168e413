#!/usr/bin/env bash
# Local demo: control plane, CRDs, samples, operator in the background, then
# a look at every p4fleet kind. Re-runnable; `make clean-local` resets it.
#
# Steps are functions so later ones (emulated switches, ...) slot in below.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOCAL="$REPO/.local"
KUBECONFIG="$LOCAL/controlplane/kubeconfig"
export KUBECONFIG
OPERATOR="$REPO/target/debug/p4fleet"
DEMO_NS="${DEMO_NS:-p4fleet-demo}"
KINDS="switches,p4programs,virtualswitches,tableentrysets,asyncexternpolicies"

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

control_plane() {
  say "control plane"
  "$REPO/hack/controlplane.sh" up
}

build() {
  say "build operator"
  cargo build -q -p p4fleet --bin p4fleet
}

crds() {
  say "CRDs"
  "$OPERATOR" crds | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f -
  kubectl wait --for=condition=Established --timeout=60s crd \
    switches.p4fleet.dev p4programs.p4fleet.dev virtualswitches.p4fleet.dev \
    tableentrysets.p4fleet.dev asyncexternpolicies.p4fleet.dev
}

samples() {
  say "samples into namespace $DEMO_NS"
  kubectl create namespace "$DEMO_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo \
    -n "$DEMO_NS" -f "$REPO/config/samples/"
}

operator() {
  say "operator (logs: .local/operator.log)"
  if [[ -f "$LOCAL/operator.pid" ]] && kill -0 "$(cat "$LOCAL/operator.pid")" 2>/dev/null; then
    kill "$(cat "$LOCAL/operator.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  nohup "$OPERATOR" operator >"$LOCAL/operator.log" 2>&1 </dev/null &
  echo $! > "$LOCAL/operator.pid"
  sleep 3
  kill -0 "$(cat "$LOCAL/operator.pid")" 2>/dev/null \
    || { echo "operator exited; last log lines:"; tail -20 "$LOCAL/operator.log"; exit 1; }
  echo "operator running (pid $(cat "$LOCAL/operator.pid"))"
}

show() {
  say "p4fleet resources"
  kubectl get "$KINDS" -A -o wide
}

mkdir -p "$LOCAL"
control_plane
build
crds
samples
operator
show

cat <<MSG

Demo running. Use it with:
  export KUBECONFIG=$KUBECONFIG
  kubectl get $KINDS -A
Stop: kill \$(cat .local/operator.pid); hack/controlplane.sh down
MSG
