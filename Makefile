# Entry points; see README.md. Everything runs on the host (no containers).
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
CARGO ?= cargo

.PHONY: deps build test crds demo lint clean-local bench

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
	$(CARGO) run -q -p p4fleet -- crds > charts/p4fleet/crds/crds.yaml.tmp
	mv charts/p4fleet/crds/crds.yaml.tmp charts/p4fleet/crds/crds.yaml
	cp charts/p4fleet/crds/crds.yaml config/crd/crds.yaml

demo: deps
	hack/demo.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean-local:
	-for p in .local/operator.pid .local/emulator.pid; do [[ -f $$p ]] && kill -9 "$$(cat $$p)" 2>/dev/null; done; true
	hack/controlplane.sh down
	rm -rf .local

# The rbfrt paper's insertion experiment, side by side with rbfrt and a Python
# P4Runtime client; regenerates docs/benchmarks.md and docs/benchmarks/.
# Quick smoke: make bench BENCH_ARGS="--entries 3000 --runs 1".
BENCH_ARGS ?=
bench: deps
	$(CARGO) build --release -p p4fleet-bench -p p4fleet-emulator
	target/release/p4fleet-bench --command "make bench $(BENCH_ARGS)" $(BENCH_ARGS)
