#!/usr/bin/env bash
# `make e2e-cluster`: p4fleet as real pods on a real node of this machine.
#   1. hack/install-deps.sh cluster   containerd/runc/CNI (apt), kubelet & co (Go)
#   2. cargo build --workspace --all-targets --features p4fleet-e2e/cluster
#                                     the test, and the dev-profile binaries
#                                     the images hold (after `make test`: the
#                                     e2e crate only)
#   3. hack/images.sh                 operator, emulator, pause OCI archives
#   4. hack/cluster.sh up + load      node Ready, images imported with ctr
#   5. e2e/tests/cluster.rs           helm install ... helm uninstall, removal
#   6. hack/cluster.sh down + verify-clean (always; KEEP_CLUSTER=1 skips)
# P4FLEET_IMAGE_PROFILE=release builds the images from a release build
# (`cargo build --release --workspace --bins`, thin LTO: 23 min wall, 25 min
# of CPU from nothing on 2 shared cores, docs/testing.md) instead; the
# default, debug, reuses what `make test` built (CI's time budget).
# Prints the time of each step. On failure the cluster's logs are copied to
# .local/e2e-cluster-logs/ before `down` removes them.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CARGO="${CARGO:-cargo}"
CLUSTER_DIR="${P4FLEET_CLUSTER_DIR:-$REPO/.local/cluster}"
export P4FLEET_CLUSTER_DIR="$CLUSTER_DIR"
IMAGES="$REPO/.local/images"
TAG="${P4FLEET_IMAGE_TAG:-e2e}"
PROFILE="${P4FLEET_IMAGE_PROFILE:-debug}"
[[ "$PROFILE" == debug || "$PROFILE" == release ]] \
  || { echo "e2e-cluster: P4FLEET_IMAGE_PROFILE=$PROFILE: want debug or release" >&2; exit 2; }

T0=$SECONDS
TIMINGS=()
step() { # name cmd...; a failed step is timed too
  local name="$1" start=$SECONDS rc=0
  shift
  echo "e2e-cluster: == $name" >&2
  "$@" || rc=$?
  TIMINGS+=("$(printf '%5ds  %s' $((SECONDS - start)) "$name")$( ((rc == 0)) || echo " (FAILED: exit $rc)")")
  return "$rc"
}

finish() {
  local rc=$?
  set +e
  if (( rc != 0 )) && [[ -d "$CLUSTER_DIR" ]]; then
    rm -rf "$REPO/.local/e2e-cluster-logs"
    mkdir -p "$REPO/.local/e2e-cluster-logs"
    cp "$CLUSTER_DIR"/*.log "$CLUSTER_DIR"/controlplane/*.log "$REPO/.local/e2e-cluster-logs/" 2>/dev/null
    echo "e2e-cluster: failed; component logs in .local/e2e-cluster-logs/" >&2
  fi
  if [[ -z "${KEEP_CLUSTER:-}" ]]; then
    local start=$SECONDS
    "$REPO/hack/cluster.sh" down
    "$REPO/hack/cluster.sh" verify-clean || rc=1
    TIMINGS+=("$(printf '%5ds  %s' $((SECONDS - start)) "cluster down + verify-clean")")
  else
    echo "e2e-cluster: KEEP_CLUSTER set; cluster left running ($("$REPO/hack/cluster.sh" env))" >&2
  fi
  echo "e2e-cluster: timings" >&2
  printf '  %s\n' "${TIMINGS[@]}" >&2
  echo "e2e-cluster: total $((SECONDS - T0))s ($( ((rc == 0)) && echo passed || echo FAILED))" >&2
  exit "$rc"
}
trap finish EXIT
# Interrupted: still tear down, and report the failure.
trap 'exit 130' INT
trap 'exit 143' TERM

step "install-deps cluster" hack/install-deps.sh cluster
# All test targets with `make test`'s feature set plus the e2e crate's
# `cluster` feature: after `make test` only the e2e crate (and bench, which
# depends on it) recompiles. (`--test cluster` alone would leave out the
# other members' dev-dependencies and rebuild shared crates with other
# features; `--bins` alone likewise.) This also builds target/debug/p4fleet
# and target/debug/p4fleet-emulator, which the images hold by default.
step "cargo build --workspace --all-targets --features p4fleet-e2e/cluster" \
  "$CARGO" build --workspace --all-targets --features p4fleet-e2e/cluster
if [[ "$PROFILE" == release ]]; then
  step "cargo build --release --workspace --bins" "$CARGO" build --release --workspace --bins
fi
step "images (umoci, $PROFILE binaries)" env P4FLEET_IMAGE_TAG="$TAG" P4FLEET_IMAGE_PROFILE="$PROFILE" hack/images.sh
step "cluster up" hack/cluster.sh up
step "load images (ctr import)" hack/cluster.sh load \
  "$IMAGES/p4fleet.tar" p4fleet.local/p4fleet \
  "$IMAGES/p4fleet-emulator.tar" p4fleet.local/p4fleet-emulator
# The same targets and features as the build step (nothing left to
# compile), and a filter running only the cluster test.
step "cluster e2e test" env \
  P4FLEET_KUBECONFIG="$CLUSTER_DIR/controlplane/kubeconfig" \
  P4FLEET_E2E_OPERATOR_IMAGE="p4fleet.local/p4fleet:$TAG" \
  P4FLEET_E2E_EMULATOR_IMAGE="p4fleet.local/p4fleet-emulator:$TAG" \
  P4FLEET_E2E_PULL_POLICY=Never \
  P4FLEET_E2E_NODE_LOCAL=1 \
  "$CARGO" test --workspace --features p4fleet-e2e/cluster \
    chart_installs_as_pods_and_drives_switches -- --exact --nocapture
