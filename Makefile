# Entry points; see README.md. Everything but e2e-cluster runs on the host
# (no containers); e2e-cluster runs pods on a node it sets up (hack/cluster.sh).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: deps build test crds demo lint clean-local bench bench-dataplane bench-dpdk bench-fpga bench-fleet bench-rollout bench-batching bench-entry-path e2e-cluster

deps:
	hack/install-deps.sh

build:
	$(CARGO) build --workspace --all-targets

# Integration tests start their own etcd + kube-apiserver per test binary.
# The harness prints the kube-apiserver version and URL it runs against.
test: deps
	$(CARGO) test --workspace --no-fail-fast

# Regenerate the committed CRD manifests from the crds crate.
crds:
	$(CARGO) build --workspace --all-targets
	target/debug/p4fleet crds > charts/p4fleet/crds/crds.yaml.tmp
	mv charts/p4fleet/crds/crds.yaml.tmp charts/p4fleet/crds/crds.yaml
	cp charts/p4fleet/crds/crds.yaml config/crd/crds.yaml

demo: deps
	hack/demo.sh

# The cluster test (e2e/tests/cluster.rs) is only built with its feature;
# linting it adds nothing but the e2e crate's own recompile.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --workspace --all-targets --features p4fleet-e2e/cluster -- -D warnings

# Real pods: a one-node cluster on this machine (hack/cluster.sh; needs root),
# the chart installed by Helm with images built here, e2e/tests/cluster.rs,
# then `hack/cluster.sh down` and a check that nothing is left behind.
# KEEP_CLUSTER=1 keeps the cluster up. See docs/testing.md.
e2e-cluster:
	hack/e2e-cluster.sh

clean-local:
	-for p in .local/operator.pid .local/emulator.pid .local/fpga-emulator.pid .local/dpdk-agent.pid; do [[ -f $$p ]] && kill -9 "$$(cat $$p)" 2>/dev/null; done; true
	hack/controlplane.sh down
	rm -rf .local

# The rbfrt paper's insertion experiment, side by side with rbfrt and a Python
# P4Runtime client; regenerates docs/benchmarks.md and docs/benchmarks/.
# Quick smoke: make bench BENCH_ARGS="--entries 3000 --runs 1".
BENCH_ARGS ?=
bench: deps
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-bench --command "make bench $(BENCH_ARGS)" $(BENCH_ARGS)

# The T4P4S Figure 1 shape on this machine (docs/dpdk.md): no extern, empty,
# encrypt, encrypt+decrypt, Sync vs Async, per core count. Takes minutes.
# E.g. make bench-dataplane DATAPLANE_BENCH_ARGS="--size 1024 --only encrypt".
DATAPLANE_BENCH_ARGS ?=
bench-dataplane:
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-dataplane-bench $(DATAPLANE_BENCH_ARGS)

# T4P4S Figure 1 on the real DPDK pipeline (p4fleet-dpdk-agent) beside the
# emulator's, one run per frame size (docs/dpdk.md, "Measured").
# E.g. make bench-dpdk DPDK_BENCH_ARGS="--only empty --runs 5".
DPDK_BENCH_ARGS ?=
bench-dpdk: deps
	$(CARGO) build --release -p p4fleet-dpdk-agent -p p4fleet-emulator -p p4fleet-bench --bins
	target/release/p4fleet-dpdk-bench --size 64 $(DPDK_BENCH_ARGS)
	target/release/p4fleet-dpdk-bench --size 1024 $(DPDK_BENCH_ARGS)

# FPGA swaps (docs/fpga.md, "Swap benchmark"): the device side (load time
# vs bitstream size, JTAG and ICAP, packets lost on other slots), then the
# operator's overhead on top of the device's load time against a real
# kube-apiserver (release operator and emulator; the bench driver itself
# is an e2e example built with the workspace's debug profile).
# E.g. make bench-fpga FPGA_BENCH_ARGS="--runs 1 --skip-full" FPGA_SWAP_ARGS="--swaps 4".
bench-fpga: deps
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-emulator fpga-bench $(FPGA_BENCH_ARGS)
	$(CARGO) build --workspace --all-targets
	target/debug/examples/fpga_swap_bench --bin-dir target/release $(FPGA_SWAP_ARGS)

# The fleet benchmark (docs/fleet.md): a real etcd + kube-apiserver, emulator
# processes serving many devices, the operator as a release binary; time from
# `kubectl apply` to every object Ready at 10, 100 and 1,000 Switches, a
# 1,000,000-entry set, a 1 % change and an idle resync round. Writes
# docs/fleet/. Takes about half an hour; a quick look:
# make bench-fleet FLEET_BENCH_ARGS="--switches 10 --big-entries 100000 --no-docs"
FLEET_BENCH_ARGS ?=
bench-fleet: deps
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-fleet-bench --command "make bench-fleet $(FLEET_BENCH_ARGS)" $(FLEET_BENCH_ARGS)

# A Canary rollout over 1,000 emulated Switches in 10 % steps with a 10 s
# analysis window, then a failed gate rolled back (docs/rollouts.md,
# "Benchmark"; prints Markdown). A quick look:
# make bench-rollout ROLLOUT_BENCH_ARGS="--switches 20 --analysis-seconds 2"
ROLLOUT_BENCH_ARGS ?=
bench-rollout: deps
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-rollout-bench --command "make bench-rollout $(ROLLOUT_BENCH_ARGS)" $(ROLLOUT_BENCH_ARGS)

# Adaptive batching (docs/performance.md, docs/batching.md): batchSize/maxInFlight
# Auto against a grid of static settings through the operator's sync stages,
# against the emulator with and without its tofino profile. Writes
# docs/batching.md. A quick look:
# make bench-batching BATCHING_BENCH_ARGS="--entries 50000 --runs 1 --no-docs"
BATCHING_BENCH_ARGS ?=
bench-batching:
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-batching-bench --command "make bench-batching $(BATCHING_BENCH_ARGS)" $(BATCHING_BENCH_ARGS)

# Memory (live heap, exact) and time per stage of one 1,000,000-entry
# TableEntrySet sync from gzip ConfigMaps (docs/performance.md).
ENTRY_PATH_ARGS ?=
bench-entry-path:
	$(CARGO) build --release --workspace --bins
	target/release/p4fleet-entry-path $(ENTRY_PATH_ARGS)
