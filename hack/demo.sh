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
  # One build with the feature set `make test` uses: `--bins` alone (or a
  # `-p` build per binary) unifies features without the dev-dependencies'
  # and rebuilds kube, tonic and all above them (8 min here after a
  # `make test`); with `--all-targets` the two share every artifact.
  say "build p4fleet and p4fleet-emulator (cargo build --workspace --all-targets)"
  cargo build --workspace --all-targets
}

crds() {
  say "CRDs"
  "$OPERATOR" crds | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f -
  kubectl wait --for=condition=Established --timeout=60s crd \
    switches.p4fleet.dev p4programs.p4fleet.dev virtualswitches.p4fleet.dev \
    tableentrysets.p4fleet.dev asyncexternpolicies.p4fleet.dev
}

samples() {
  # The samples describe real hardware (DNS names and addresses this
  # machine does not have): created, they could only report Unreachable
  # and its Warnings. The API server checks them against the CRDs instead;
  # the emulated step below creates working objects of every kind.
  say "samples checked by the API server (server-side dry run, namespace $DEMO_NS)"
  kubectl create namespace "$DEMO_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo --dry-run=server \
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

warnings() {
  # A fully successful demo publishes none: waiting and syncing are Normal
  # Events, and each root cause is one Event (docs/troubleshooting.md).
  say "Warning events"
  local w
  # Except those the rollout step causes on purpose: the canary's entries
  # refused by the injected fault, and the rollback it brings.
  w="$(kubectl get events -A --field-selector type=Warning --no-headers 2>/dev/null |
    grep -vE "^$ROLL_NS +.* (RolledBack|EntriesFailed) " || true)"
  if [[ -z "$w" ]]; then echo "none"; else echo "$w"; fi
  # Nor does it log a warning: an expected race (a finalizer patch that
  # met another write) is a quiet retry (docs/resources.md).
  say "Warnings in the operator's log"
  w="$(grep -E '(^| )WARN ' "$LOCAL/operator.log" || true)"
  if [[ -z "$w" ]]; then echo "none"; else echo "$w"; fi
}

# --- emulated switches: the whole write path ---------------------------------
EMU_NS="${DEMO_EMU_NS:-p4fleet-emulated}"
EMU_ENTRIES="${DEMO_ENTRIES:-30000}"

emulator() {
  say "emulated switches (p4fleet-emulator: devices 1-2 bmv2-like over P4Runtime, device 3 Tofino-like over BFRT; logs: .local/emulator.log)"
  if [[ -f "$LOCAL/emulator.pid" ]] && kill -0 "$(cat "$LOCAL/emulator.pid")" 2>/dev/null; then
    kill "$(cat "$LOCAL/emulator.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  local port stats bfrt
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  stats="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  bfrt="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  # One process serves both protocols on two ports (device ids are shared,
  # so the Tofino switch gets a device of its own). The DPDK switch is the
  # real thing: p4fleet-dpdk-agent (the `dpdk` step).
  nohup "$REPO/target/debug/p4fleet-emulator" --devices 3 \
    --p4runtime-addr "127.0.0.1:$port" --stats-addr "127.0.0.1:$stats" \
    --bfrt-addr "127.0.0.1:$bfrt" \
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

# $1 ConfigMap name, $2 first entry index, $3 count: firewall entries in the
# line format; $4 namespace (default $EMU_NS).
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
  kubectl create configmap "$1" -n "${4:-$EMU_NS}" --from-file=entries="$LOCAL/$1.entries" \
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

stop_dpdk_agent() {
  [[ -f "$LOCAL/dpdk-agent.pid" ]] || return 0
  kill "$(cat "$LOCAL/dpdk-agent.pid")" 2>/dev/null || true
  rm -f "$LOCAL/dpdk-agent.pid"
}

# A real DPDK software switch: p4fleet-dpdk-agent on DPDK 22.11's SWX
# pipeline, without hugepages or a NIC (docs/dpdk.md): a pcap of four
# 64-byte flows looped at 100,000 packets/s into the pipeline, counting
# sinks out, one extern core for Async.
dpdk_agent() {
  stop_dpdk_agent
  mkdir -p "$LOCAL/dpdk-agent"
  python3 - "$LOCAL/dpdk-agent/flows.pcap" <<'PY'
import struct, sys
frames = []
for i in range(4):
    dst, src = bytes([2, 0, 0, 0, 1, i]), bytes([2, 0, 0, 0, 2, i])
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 46, 0, 0, 64, 17, 0, bytes([10, 0, 0, i]), bytes([10, 0, 1, i]))
    frames.append(dst + src + b"\x08\x00" + ip + bytes(46 - 20))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
    for fr in frames:
        f.write(struct.pack("<IIII", 0, 0, len(fr), len(fr)) + fr)
PY
  nohup "$REPO/target/debug/p4fleet-dpdk-agent" --addr 127.0.0.1:0 --device-id 4 \
    --port-in "source:$LOCAL/dpdk-agent/flows.pcap" --rate-pps 100000 --extern-cores 1 \
    --workdir "$LOCAL/dpdk-agent/work" \
    >"$LOCAL/dpdk-agent.log" 2>&1 </dev/null &
  echo $! > "$LOCAL/dpdk-agent.pid"
  for _ in $(seq 100); do
    grep -q "p4runtime listening on" "$LOCAL/dpdk-agent.log" 2>/dev/null && break
    sleep 0.1
  done
  sed -n 's/^p4runtime listening on //p' "$LOCAL/dpdk-agent.log" > "$LOCAL/dpdk-agent.addr"
  [[ -s "$LOCAL/dpdk-agent.addr" ]] \
    || { echo "p4fleet-dpdk-agent did not start; its log:"; tail -20 "$LOCAL/dpdk-agent.log"; exit 1; }
  echo "  p4fleet-dpdk-agent listening on $(cat "$LOCAL/dpdk-agent.addr") (logs: .local/dpdk-agent.log)"
}

dpdk() {
  say "a DPDK switch (p4fleet-dpdk-agent on DPDK's SWX pipeline, device 4): l2crypt (L2 forwarding + async_encrypt, async_decrypt), its AsyncExternPolicy Sync -> Async -> Skip"
  dpdk_agent
  kubectl create configmap l2crypt -n "$EMU_NS" --from-file="$REPO/examples/l2crypt/" \
    --dry-run=client -o yaml | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f - >/dev/null
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo \
    -n "$EMU_NS" -f "$REPO/config/samples/p4program-l2crypt.yaml"
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$EMU_NS" -f - <<YAML
apiVersion: p4fleet.dev/v1alpha1
kind: Switch
metadata:
  name: dpdk-agent
spec:
  target: Dpdk
  endpoint: $(cat "$LOCAL/dpdk-agent.addr")
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
  switchRef: dpdk-agent
  slot: 0
YAML
  kubectl wait -n "$EMU_NS" --for=condition=Ready --timeout=120s virtualswitch/l2crypt
  for mode in Sync Async Skip; do aep_mode "$mode"; done
  echo
  echo "T4P4S launch options of the policy (ConfigMap $(kubectl get aep -n "$EMU_NS" l2crypt -o jsonpath='{.status.t4p4sConfigMap}')):"
  kubectl get configmap -n "$EMU_NS" l2crypt-t4p4s -o jsonpath='{.data.T4P4S_ARGS}'
  echo
}

# --- FPGA board: three virtual switches and one hot swap (docs/fpga.md) -------
FPGA_NS="${DEMO_FPGA_NS:-p4fleet-fpga}"

stop_fpga_emulator() {
  [[ -f "$LOCAL/fpga-emulator.pid" ]] || return 0
  kill "$(cat "$LOCAL/fpga-emulator.pid")" 2>/dev/null || true
  rm -f "$LOCAL/fpga-emulator.pid"
}

# $1 program (examples/$1): a synthetic 2.8 Mb bitstream and the P4Info in
# ConfigMaps, and the P4Program with P4VBox's Table I resources.
fpga_program() {
  local name="$1"
  "$REPO/target/debug/p4fleet-emulator" fpga-bitstream --bits 2800000 --seed "$name" \
    >"$LOCAL/$name.bit" 2>/dev/null
  kubectl create configmap "$name-fpga" -n "$FPGA_NS" \
    --from-file=bitstream="$LOCAL/$name.bit" --from-file=p4info="$REPO/examples/$name/p4info.txt" \
    --dry-run=client -o yaml | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f - >/dev/null
  {
    printf 'apiVersion: p4fleet.dev/v1alpha1\nkind: P4Program\nmetadata:\n  name: %s\nspec:\n' "$name"
    printf '  p4info:\n    configMapKeyRef: {name: %s-fpga, key: p4info}\n  artifacts:\n    fpga:\n' "$name"
    grep -v '^#' "$REPO/examples/$name/fpga.yaml" | sed 's/^/      /'
  } | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$FPGA_NS" -f - >/dev/null
}

fpga_board() {
  say "FPGA board: an emulated NetFPGA-SUME (ICAP, 10k packets/s per slot; logs: .local/fpga-emulator.log), three VirtualSwitches, one hot swap (namespace $FPGA_NS)"
  stop_fpga_emulator
  local port stats
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  stats="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  nohup "$REPO/target/debug/p4fleet-emulator" --fpga netfpga-sume --fpga-port icap \
    --fpga-traffic-pps 10000 --p4runtime-addr "127.0.0.1:$port" --stats-addr "127.0.0.1:$stats" \
    >"$LOCAL/fpga-emulator.log" 2>&1 </dev/null &
  echo $! > "$LOCAL/fpga-emulator.pid"
  kubectl create namespace "$FPGA_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  for p in l2switch router firewall; do fpga_program "$p"; done
  kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$FPGA_NS" -f - <<YAML
apiVersion: p4fleet.dev/v1alpha1
kind: Switch
metadata:
  name: netfpga-sume
spec:
  target: Fpga
  endpoint: 127.0.0.1:$port
  deviceId: 1
  ports: [{id: 0}, {id: 1}, {id: 2}, {id: 3}]
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: vsw-l2
spec: {programRef: l2switch, switchRef: netfpga-sume, isolation: {vlan: 10}}
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: vsw-router
spec: {programRef: router, switchRef: netfpga-sume, isolation: {vlan: 20}}
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: vsw-edge
spec: {programRef: l2switch, switchRef: netfpga-sume, isolation: {vlan: 30}}
YAML
  kubectl wait -n "$FPGA_NS" --for=condition=Ready --timeout=120s \
    virtualswitches/vsw-l2 virtualswitches/vsw-router virtualswitches/vsw-edge || true
  say "hot swap: vsw-router router -> firewall (its slot only)"
  kubectl patch virtualswitch vsw-router -n "$FPGA_NS" --type merge -p '{"spec":{"programRef":"firewall"}}'
  for _ in $(seq 100); do
    [[ -n "$(kubectl get virtualswitch vsw-router -n "$FPGA_NS" -o jsonpath='{.status.lastSwap.at}')" ]] && break
    sleep 0.2
  done
  kubectl get switch netfpga-sume
  kubectl get virtualswitches -n "$FPGA_NS"
  kubectl get virtualswitch vsw-router -n "$FPGA_NS" \
    -o jsonpath='  last swap: {.status.lastSwap.fromDigest} -> {.status.lastSwap.toDigest}, {.status.lastSwap.durationMillis} ms on the device{"\n"}'
  echo "slot counters (emulator):"
  curl -s "http://127.0.0.1:$stats/fpga" | python3 -c 'import json,sys
try:
    b = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for s in b.get("slots", []):
    if s.get("program_digest"):
        c = s["counters"]
        print("  slot %s (vlan %s): rx %s, dropped %s" % (s["slot"], (s.get("isolation") or {}).get("vlan"), c["rx_packets"], c["dropped_packets"]))' || true
}

# --- a staged rollout with a rollback (docs/rollouts.md) ---------------------
ROLL_NS="${DEMO_ROLLOUT_NS:-p4fleet-rollout}"

# This run's mark in the contents: a re-run's versions are new revisions.
# The same text as the last run's would be the content the fleet already
# runs, which is no rollout at all (nothing to move), and the waits below
# would wait for one.
ROLL_RUN="$(date +%s)"

# $1 version: the firewall's P4Info with a comment naming it (a new digest,
# the same program), applied to the ConfigMap firewall-fleet-src.
rollout_source() {
  { cat "$REPO/examples/firewall/p4info.txt"; echo "# $1, demo run $ROLL_RUN"; } >"$LOCAL/firewall-fleet.p4info.txt"
  kubectl create configmap firewall-fleet-src -n "$ROLL_NS" \
    --from-file=p4info.txt="$LOCAL/firewall-fleet.p4info.txt" --dry-run=client -o yaml |
    kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -f - >/dev/null
}

# The program's update revision (the newest content), empty before one.
rollout_revision() {
  kubectl get p4p firewall-fleet -n "$ROLL_NS" -o jsonpath='{.status.updateRevision.revision}'
}

# $1 phase, $2 the update revision before the change: waits (up to 120 s)
# until a newer revision's rollout is in that phase.
rollout_wait() {
  local now
  for _ in $(seq 600); do
    now="$(rollout_revision)"
    if [[ -n "$now" && "$now" != "$2" ]] &&
      [[ "$(kubectl get p4p firewall-fleet -n "$ROLL_NS" -o jsonpath='{.status.rollout.phase}/{.status.rollout.to.revision}')" == "$1/$now" ]]; then
      return 0
    fi
    sleep 0.2
  done
  echo "no rollout after revision $2 is $1 after 120 s:"
  kubectl get p4p firewall-fleet -n "$ROLL_NS" -o jsonpath='{.status.rollout}{"\n"}'
  return 1
}

# The pipeline cookie each of the fleet's four devices runs.
rollout_cookies() {
  local stats d
  stats="$(cat "$LOCAL/rollout-emulator.stats")"
  for d in 1 2 3 4; do
    printf '  device %s: cookie %s\n' "$d" "$(curl -s "http://$stats/stats/$d" | python3 -c 'import json,sys; c=json.load(sys.stdin).get("cookie"); print("%016x" % c if c is not None else "none")')"
  done
}

rollout() {
  say "a fleet of four bmv2 Switches for a staged rollout (its own p4fleet-emulator, devices 1-4; logs: .local/rollout-emulator.log)"
  if [[ -f "$LOCAL/rollout-emulator.pid" ]] && kill -0 "$(cat "$LOCAL/rollout-emulator.pid")" 2>/dev/null; then
    kill "$(cat "$LOCAL/rollout-emulator.pid")" 2>/dev/null || true
    sleep 0.5
  fi
  local port stats
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  stats="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  nohup "$REPO/target/debug/p4fleet-emulator" --devices 4 \
    --p4runtime-addr "127.0.0.1:$port" --stats-addr "127.0.0.1:$stats" \
    >"$LOCAL/rollout-emulator.log" 2>&1 </dev/null &
  echo $! > "$LOCAL/rollout-emulator.pid"
  echo "127.0.0.1:$stats" > "$LOCAL/rollout-emulator.stats"
  for _ in $(seq 50); do
    grep -q "listening" "$LOCAL/rollout-emulator.log" 2>/dev/null && break
    sleep 0.1
  done
  kubectl create namespace "$ROLL_NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # A re-run goes on from the revisions of the last one (the waits below
  # follow the newest revision, whatever its number; ROLL_RUN makes each
  # run's contents new).
  rollout_source v1
  entries_configmap firewall-fleet-entries 0 20 "$ROLL_NS"
  {
    cat <<YAML
apiVersion: p4fleet.dev/v1alpha1
kind: P4Program
metadata:
  name: firewall-fleet
spec:
  p4info:
    configMapKeyRef: {name: firewall-fleet-src, key: p4info.txt}
  rollout:
    strategy: Canary
    steps: [{switches: 1}, {percent: 50}, {percent: 100}]
    analysis: {seconds: 3}
    progressDeadlineSeconds: 60
---
apiVersion: p4fleet.dev/v1alpha1
kind: TableEntrySet
metadata:
  name: firewall-fleet
spec:
  virtualSwitchSelector: {matchLabels: {app: firewall-fleet}}
  table: MyIngress.firewall
  entriesFrom: [{configMap: firewall-fleet-entries}]
YAML
    for d in 1 2 3 4; do
      cat <<YAML
---
apiVersion: p4fleet.dev/v1alpha1
kind: Switch
metadata:
  name: fleet-$d
spec:
  target: Bmv2
  endpoint: 127.0.0.1:$port
  deviceId: $d
  slots: 1
---
apiVersion: p4fleet.dev/v1alpha1
kind: VirtualSwitch
metadata:
  name: fleet-$d
  labels: {app: firewall-fleet, p4fleet.dev/rollout-order: "$d"}
spec:
  programRef: firewall-fleet
  switchRef: fleet-$d
  slot: 0
  updateStrategy: {type: Recreate}
YAML
    done
  } | kubectl apply --server-side --force-conflicts --field-manager=p4fleet-demo -n "$ROLL_NS" -f - >/dev/null
  kubectl wait --for=condition=Ready tableentryset/firewall-fleet -n "$ROLL_NS" --timeout=120s >/dev/null
  kubectl get p4p firewall-fleet -n "$ROLL_NS"
  rollout_cookies

  say "rollout: a new revision to the canary (fleet-1), then half, then all, each step gated for 3 s"
  local before
  before="$(rollout_revision)"
  rollout_source v2
  rollout_wait Completed "$before"
  kubectl get p4p firewall-fleet -n "$ROLL_NS" -o wide
  kubectl get p4p firewall-fleet -n "$ROLL_NS" \
    -o jsonpath='{range .status.rollout.moved[*]}  {.virtualSwitch}: moved at step {.step}, {.state}{"\n"}{end}'
  rollout_cookies

  say "rollout: another revision, whose entries the canary's device refuses (an injected fault): rolled back, the other three never see it"
  curl -s -X POST "http://127.0.0.1:$stats/devices/1/faults?kind=fail-updates&every=1&count=100000" |
    grep -q '"armed":true' || { echo "could not arm the fault on device 1"; return 1; }
  before="$(rollout_revision)"
  rollout_source v3
  rollout_wait RolledBack "$before"
  kubectl get p4p firewall-fleet -n "$ROLL_NS"
  "$OPERATOR" rollout status firewall-fleet -n "$ROLL_NS"
  # The canary back on the revision before (its entries re-applied once
  # the device takes them again).
  for _ in $(seq 300); do
    [[ "$(curl -s "http://127.0.0.1:$stats/stats/1" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("cookie"))')" == \
       "$(curl -s "http://127.0.0.1:$stats/stats/2" | python3 -c 'import json,sys; print(json.load(sys.stdin).get("cookie"))')" ]] && break
    sleep 0.2
  done
  rollout_cookies
  curl -s -X POST "http://127.0.0.1:$stats/devices/1/faults/clear" >/dev/null
  kubectl wait --for=condition=Ready tableentryset/firewall-fleet -n "$ROLL_NS" --timeout=120s >/dev/null
  echo "  (fault cleared; the set is Ready again on all four)"
}

if [[ "${1:-}" == stop ]]; then
  stop_operator
  stop_fpga_emulator
  stop_dpdk_agent
  if [[ -f "$LOCAL/rollout-emulator.pid" ]]; then
    kill "$(cat "$LOCAL/rollout-emulator.pid")" 2>/dev/null || true
    rm -f "$LOCAL/rollout-emulator.pid"
  fi
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
fpga_board
rollout
show
warnings

cat <<MSG

Demo running. Use it with:
  export KUBECONFIG=$KUBECONFIG
  kubectl get $KINDS -A
Stop: hack/demo.sh stop
MSG
