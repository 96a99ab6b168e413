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
  # Every binary in one build with one feature set (a `-p` build per binary
  # unifies features differently and rebuilds tonic and all above it).
  say "build p4fleet and p4fleet-emulator (cargo build --workspace --bins)"
  cargo build --workspace --bins
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

stop_operator() {
  [[ -f "$LOCAL/operator.pid" ]] || return 0
  local pid
  pid="$(cat "$LOCAL/operator.pid")"
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$LOCAL/operator.pid"
}

operator() {
  say "operator (logs: .local/operator.log)"
  stop_operator
  local port
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # Stats of AsyncExternPolicies every 2 s (default 5) so the dpdk step's
  # packets/s follow its mode flips quickly.
  nohup "$OPERATOR" operator --listen-addr "127.0.0.1:$port" --extern-stats-seconds 2 \
    >"$LOCAL/operator.log" 2>&1 </dev/null &
  echo $! > "$LOCAL/operator.pid"
  echo "$port" > "$LOCAL/operator.port"
  sleep 3
  kill -0 "$(cat "$LOCAL/operator.pid")" 2>/dev/null \
    || { echo "operator exited; last log lines:"; tail -20 "$LOCAL/operator.log"; exit 1; }
  echo "operator running (pid $(cat "$LOCAL/operator.pid"), metrics http://127.0.0.1:$port/metrics)"
}

show() {
  say "p4fleet resources"
  kubectl get "$KINDS" -A -o wide
}

# --- emulated switches: the whole write path ---------------------------------
EMU_NS="${DEMO_EMU_NS:-p4fleet-emulated}"
EMU_ENTRIES="${DEMO_ENTRIES:-30000}"

emulator() {
  say "emulated switches (p4fleet-emulator: devices 1-2 bmv2-like over P4Runtime, device 3 Tofino-like over BFRT, device 4 a DPDK software switch; logs: .local/emulator.log)"
  if [[ -f "$LOCAL/emulator.pid" ]] && kill -0 "$(cat "$LOCAL/emulator.pid")" 2>/dev/null; then
    kill "$(cat "$LOCAL/emulator.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  local port stats bfrt
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  stats="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  bfrt="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # One process serves both protocols on two ports (device ids are shared,
  # so the Tofino switch gets a device of its own). Device 4 is a DPDK
  # target: its data plane is offered 100,000 packets/s (64 bytes), more
  # than this debug build encrypts and decrypts, so the extern mode shows
  # in packets/s.
  nohup "$REPO/target/debug/p4fleet-emulator" --devices 4 \
    --p4runtime-addr "127.0.0.1:$port" --stats-addr "127.0.0.1:$stats" \
    --bfrt-addr "127.0.0.1:$bfrt" --dpdk-device-ids 4 --dpdk-extern-cores 1 \
    >"$LOCAL/emulator.log" 2>&1 </dev/null &
  echo $! > "$LOCAL/emulator.pid"
  echo "127.0.0.1:$port" > "$LOCAL/emulator.addr"
  echo "127.0.0.1:$bfrt" > "$LOCAL/emulator.bfrt"
  echo "127.0.0.1:$stats" > "$LOCAL/emulator.stats"
  for _ in $(seq 50); do
    grep -q "bfrt listening" "$LOCAL/emulator.log" 2>/dev/null && break
    sleep 0.1
  done
  grep "listening" "$LOCAL/emulator.log" | sed 's/^/  /'
}

# $1 ConfigMap name, $2 first entry index, $3 count: firewall entries in the line format.
entries_configmap() {
  python3 - "$2" "$3" <<'PY' >"$LOCAL/$1.entries"
import sys
start, n = int(sys.argv[1]), int(sys.argv[2])
print("#! table MyIngress.firewall")
print("#! fields hdr.ipv4.srcAddr hdr.ipv4.dstAddr")
print("#! action allow")
for i in range(start, start + n):
    print("10.%d.%d.%d 192.168.0.1 %d" % ((i >> 16) & 255, (i >> 8) & 255, i & 255, i % 500))
PY
  kubectl create configmap "$1" -n "$EMU_NS" --from-file=entries="$LOCAL/$1.entries" \
    --dry-run=client -o yaml | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f - >/dev/null
}

emulated() {
  say "Switches (bmv2 and Tofino), P4Programs, VirtualSwitches and TableEntrySets on the emulator (namespace $EMU_NS)"
  kubectl create namespace "$EMU_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo \
    -n "$EMU_NS" -f "$REPO/config/samples/p4program-firewall.yaml" \
    -f "$REPO/config/samples/p4program-firewall-tofino.yaml"
  local half=$((EMU_ENTRIES / 2))
  entries_configmap firewall-bulk-1 0 "$half"
  entries_configmap firewall-bulk-2 "$half" "$((EMU_ENTRIES - half))"
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$EMU_NS" -f - <<YAML
apiVersion: p4fleet.dev/v1alpha1
kind: Switch
metadata:
  name: emulated-bmv2
  labels:
    p4fleet.dev/pool: emulated
spec:
  target: Bmv2
  endpoint: $(cat "$LOCAL/emulator.addr")
  deviceId: 1
  slots: 2
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: firewall-a
spec:
  programRef: firewall
  switchRef: emulated-bmv2
  slot: 0
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: firewall-b
spec:
  programRef: firewall
  switchRef: emulated-bmv2
  slot: 1
---
apiVersion: p4fleet.dev/v1alpha1
kind: TableEntrySet
metadata:
  name: firewall-bulk
spec:
  virtualSwitchRef: firewall-a
  table: MyIngress.firewall
  entriesFrom:
    - configMap: firewall-bulk-1
    - configMap: firewall-bulk-2
  write:
    batchSize: 1000
    maxInFlight: 4
  resyncSeconds: 30
---
apiVersion: p4fleet.dev/v1alpha1
kind: TableEntrySet
metadata:
  name: firewall-inline
spec:
  virtualSwitchRef: firewall-b
  table: firewall
  ownership: Exclusive
  entries:
    - match: {hdr.ipv4.srcAddr: 10.0.0.1, hdr.ipv4.dstAddr: 10.0.1.1}
      action: allow
      params: {port: "1"}
    - match: {srcAddr: 10.0.0.2, dstAddr: 10.0.1.1}
      action: drop
---
# The same firewall on a Tofino-kind switch over BFRT: only the P4Program
# differs (firewall-tofino carries bfrt.json, context.json and the binary).
apiVersion: p4fleet.dev/v1alpha1
kind: Switch
metadata:
  name: emulated-tofino
  labels:
    p4fleet.dev/pool: emulated
spec:
  target: Tofino
  endpoint: $(cat "$LOCAL/emulator.bfrt")
  deviceId: 3
  slots: 1
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: firewall-tofino
spec:
  programRef: firewall-tofino
  switchRef: emulated-tofino
  slot: 0
---
apiVersion: p4fleet.dev/v1alpha1
kind: TableEntrySet
metadata:
  name: firewall-tofino-bulk
spec:
  virtualSwitchRef: firewall-tofino
  table: MyIngress.firewall
  entriesFrom:
    - configMap: firewall-bulk-1
    - configMap: firewall-bulk-2
  write:
    batchSize: 1000
    maxInFlight: 4
  resyncSeconds: 30
YAML
  say "waiting for the TableEntrySets to be Ready"
  kubectl wait -n "$EMU_NS" --for=condition=Ready --timeout=180s \
    tableentrysets/firewall-bulk tableentrysets/firewall-inline tableentrysets/firewall-tofino-bulk || true
  say "emulated write path"
  kubectl get switches,p4programs,virtualswitches,tableentrysets -n "$EMU_NS" -o wide
  echo
  kubectl get tableentrysets -n "$EMU_NS" -o custom-columns='NAME:.metadata.name,DESIRED:.status.desired,APPLIED:.status.applied,FAILED:.status.failed,RATE:.status.rate,LATENCY_US:.status.meanRequestLatencyMicros,UPDATES:.status.lastSyncUpdates'
  echo
  echo "emulator counters (device 1 = firewall-a, device 2 = firewall-b over P4Runtime; device 3 = firewall-tofino over BFRT):"
  curl -s "http://$(cat "$LOCAL/emulator.stats")/stats" | python3 -c 'import json,sys
for d in json.load(sys.stdin)["devices"]:
    d["bfrt"] = ", BFRT programs %s" % ",".join(d["bfrt_programs"]) if d.get("bfrt_programs") else ""
    print("  device %(device_id)s: %(entries)s entries, %(write_rpcs)s Write RPCs, %(inserts)s inserts, %(deletes)s deletes%(bfrt)s" % d)'
}

# --- a DPDK switch: the l2crypt program, its extern policy flipped ----------

# $1 mode: the AsyncExternPolicy l2crypt in that mode, once the device
# reports it in force and a packets/s sample was taken in it.
aep_mode() {
  local externs
  case "$1" in
    Async) externs='[{"name": "async_encrypt", "mode": "Async", "executor": "DedicatedCores", "cores": 1},
                     {"name": "async_decrypt", "mode": "Async", "executor": "DedicatedCores", "cores": 1}]' ;;
    *) externs="[{\"name\": \"async_encrypt\", \"mode\": \"$1\"}, {\"name\": \"async_decrypt\", \"mode\": \"$1\"}]" ;;
  esac
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$EMU_NS" -f - >/dev/null <<YAML
apiVersion: p4fleet.dev/v1alpha1
kind: AsyncExternPolicy
metadata:
  name: l2crypt
spec:
  virtualSwitchRef: l2crypt
  externs: $externs
YAML
  kubectl wait -n "$EMU_NS" --for=jsonpath='{.status.mode}'="$1" --timeout=60s aep/l2crypt >/dev/null
  kubectl wait -n "$EMU_NS" --for=condition=Ready --timeout=60s aep/l2crypt >/dev/null
  # The data plane's rate over its last second, read by the next two polls.
  sleep 5
  echo "-- $1 --"
  kubectl get aep -n "$EMU_NS" l2crypt
}

dpdk() {
  say "a DPDK switch (device 4): l2crypt (L2 forwarding + async_encrypt, async_decrypt), its AsyncExternPolicy Sync -> Async -> Skip"
  kubectl create configmap l2crypt -n "$EMU_NS" --from-file="$REPO/examples/l2crypt/" \
    --dry-run=client -o yaml | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f - >/dev/null
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo \
    -n "$EMU_NS" -f "$REPO/config/samples/p4program-l2crypt.yaml"
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$EMU_NS" -f - <<YAML
apiVersion: p4fleet.dev/v1alpha1
kind: Switch
metadata:
  name: emulated-dpdk
spec:
  target: Dpdk
  endpoint: $(cat "$LOCAL/emulator.addr")
  deviceId: 4
  slots: 1
  capacity: {cores: 2}
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: l2crypt
spec:
  programRef: l2crypt
  switchRef: emulated-dpdk
  slot: 0
YAML
  kubectl wait -n "$EMU_NS" --for=condition=Ready --timeout=120s virtualswitch/l2crypt
  for mode in Sync Async Skip; do aep_mode "$mode"; done
  echo
  echo "T4P4S launch options of the policy (ConfigMap $(kubectl get aep -n "$EMU_NS" l2crypt -o jsonpath='{.status.t4p4sConfigMap}')):"
  kubectl get configmap -n "$EMU_NS" l2crypt-t4p4s -o jsonpath='{.data.T4P4S_ARGS}'
  echo
}

if [[ "${1:-}" == stop ]]; then
  stop_operator
  if [[ -f "$LOCAL/emulator.pid" ]]; then
    kill "$(cat "$LOCAL/emulator.pid")" 2>/dev/null || true
    rm -f "$LOCAL/emulator.pid"
  fi
  "$REPO/hack/controlplane.sh" down
  exit 0
fi

mkdir -p "$LOCAL"
control_plane
build
crds
samples
emulator
operator
emulated
dpdk
show

cat <<MSG

Demo running. Use it with:
  export KUBECONFIG=$KUBECONFIG
  kubectl get $KINDS -A
Stop: hack/demo.sh stop
MSG
