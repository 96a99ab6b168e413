#!/usr/bin/env bash
# The cluster e2e test (e2e/tests/cluster.rs) on kind, for machines with
# docker (hosted CI: .github/workflows/e2e-kind.yml):
#   1. docker build the operator (Dockerfile) and emulator (emulator/Dockerfile)
#   2. the examples' committed p4c output (examples/*/p4info.txt and NAME.json,
#      see examples/README.md) turned into ConfigMaps and P4Programs
#   3. kind create cluster; kind load the two images and the bmv2 image
#   4. the test: helm install of charts/p4fleet with those images, a real
#      bmv2 (simple_switch_grpc --no-p4) and the emulator's Tofino, DPDK
#      target and FPGA board as Deployments + Services, the samples Ready
#      through them (the firewall P4Program replaced by one reading its
#      ConfigMap; the fabric samples left out: they take bmv2-1's second
#      device id, which a simple_switch_grpc does not serve), leader
#      failover, helm uninstall, removal without the operator
#   5. kind delete cluster (KEEP_CLUSTER=1 keeps it)
#
# Needs: docker, kind, kubectl, helm (bin/helm or PATH), cargo, python3 (with
# PyYAML, as on hosted runners), network access to Docker Hub.
# Images: BMV2_IMAGE (default below); KIND_NODE_IMAGE optional.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
CLUSTER="${KIND_CLUSTER_NAME:-p4fleet-e2e}"
OUT="$REPO/.local/kind"
TAG="${P4FLEET_IMAGE_TAG:-e2e}"
OPERATOR_IMAGE="p4fleet.local/p4fleet:$TAG"
EMULATOR_IMAGE="p4fleet.local/p4fleet-emulator:$TAG"
BMV2_IMAGE="${BMV2_IMAGE:-docker.io/p4lang/behavioral-model:latest}"
EXAMPLES=(firewall l2switch router)

log() { echo "kind-e2e: $*" >&2; }
die() { log "error: $*"; exit 1; }

for tool in docker kind kubectl cargo python3; do
  command -v "$tool" >/dev/null || die "$tool not in PATH"
done
command -v helm >/dev/null || [[ -x "$REPO/bin/helm" ]] || die "helm not in PATH or bin/"
mkdir -p "$OUT"

T0=$SECONDS
step() { log "== $1 ($((SECONDS - T0))s)"; }

step "images"
docker build -t "$OPERATOR_IMAGE" -f Dockerfile .
docker build -t "$EMULATOR_IMAGE" -f emulator/Dockerfile .
docker pull -q "$BMV2_IMAGE" >/dev/null

step "p4c output: ${EXAMPLES[*]}"
for ex in "${EXAMPLES[@]}"; do
  [[ -s "examples/$ex/$ex.json" && -s "examples/$ex/p4info.txt" ]] \
    || die "examples/$ex has no p4c output (hack/compile-examples.sh)"
done

# P4Programs with p4c's P4Info and bmv2 JSON from ConfigMaps; `firewall`
# replaces the sample of that name (its artifacts are inline).
python3 - "$OUT" "${EXAMPLES[@]}" > "$OUT/programs.yaml" <<'PY'
import sys, yaml
out, examples = sys.argv[1], sys.argv[2:]
docs = []
for ex in examples:
    p4info = open(f"examples/{ex}/p4info.txt").read()
    bmv2 = open(f"examples/{ex}/{ex}.json").read()
    docs.append({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"{ex}-p4c"},
                 "data": {"p4info.txt": p4info, f"{ex}.json": bmv2}})
    docs.append({"apiVersion": "p4fleet.dev/v1alpha1", "kind": "P4Program",
                 "metadata": {"name": ex if ex == "firewall" else f"{ex}-p4c"},
                 "spec": {"p4info": {"configMapKeyRef": {"name": f"{ex}-p4c", "key": "p4info.txt"}},
                          "artifacts": {"bmv2": {"json": {"configMapKeyRef": {"name": f"{ex}-p4c", "key": f"{ex}.json"}}}}}})
yaml.safe_dump_all(docs, sys.stdout, sort_keys=False)
PY

# Switches: the real bmv2 plus every other switch of config/emulator.
python3 - "$REPO" "$BMV2_IMAGE" > "$OUT/switches.yaml" <<'PY'
import sys, yaml
repo, bmv2_image = sys.argv[1], sys.argv[2]
emulated = [d for d in yaml.safe_load_all(open(f"{repo}/config/emulator/emulated-switches.yaml")) if d]
others = [d for d in emulated if d["metadata"]["name"] != "bmv2-1"]
assert len(others) == len(emulated) - 2, "config/emulator must define Deployment and Service bmv2-1"
bmv2 = [d for d in yaml.safe_load_all(open(f"{repo}/e2e/kind/bmv2.yaml").read().replace("BMV2_IMAGE", bmv2_image)) if d]
yaml.safe_dump_all(bmv2 + others, sys.stdout, sort_keys=False)
PY

step "kind cluster $CLUSTER"
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config e2e/kind/kind-config.yaml \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} --wait 3m
fi
cleanup() {
  local rc=$?
  if (( rc != 0 )); then
    kind export logs --name "$CLUSTER" "$OUT/logs" >/dev/null 2>&1 || true
    log "failed; kind logs in $OUT/logs"
  fi
  if [[ -z "${KEEP_CLUSTER:-}" ]]; then
    kind delete cluster --name "$CLUSTER"
  fi
  log "total $((SECONDS - T0))s"
  exit "$rc"
}
trap cleanup EXIT
kind get kubeconfig --name "$CLUSTER" > "$OUT/kubeconfig"
kind load docker-image --name "$CLUSTER" "$OPERATOR_IMAGE" "$EMULATOR_IMAGE" "$BMV2_IMAGE"

step "cluster e2e test"
# The fabric sits in bmv2-1's slot 1, device id 2; simple_switch_grpc
# serves one device id.
why="on bmv2-1 slot 1 (device id 2), which the real bmv2 (one device id) does not serve"
FABRIC_SKIP="p4program-fabric.yaml=$why;virtualswitch-fabric-replication.yaml=$why;tableentryset-fabric-counters.yaml=$why"
# The DPDK agent links Debian 12's DPDK 22.11 (hack/install-deps.sh), which
# a kind runner does not have; this test does not use it.
# The images are in the node already; nothing is pulled.
P4FLEET_KUBECONFIG="$OUT/kubeconfig" \
P4FLEET_E2E_OPERATOR_IMAGE="$OPERATOR_IMAGE" \
P4FLEET_E2E_EMULATOR_IMAGE="$EMULATOR_IMAGE" \
P4FLEET_E2E_PULL_POLICY=Never \
P4FLEET_E2E_SWITCHES="$OUT/switches.yaml" \
P4FLEET_E2E_PROGRAMS="$OUT/programs.yaml" \
P4FLEET_E2E_SKIP_SAMPLES="$FABRIC_SKIP" \
  cargo test --workspace --exclude p4fleet-dpdk-agent --features p4fleet-e2e/cluster \
    chart_installs_as_pods_and_drives_switches -- --exact --nocapture
