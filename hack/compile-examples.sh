#!/usr/bin/env bash
# Recompiles examples/*/NAME.p4 with p4c's BMv2 back end and rewrites the
# committed compiler output next to each source: p4info.txt (P4Info, text
# format) and NAME.json (bmv2 JSON). For maintainers after changing a .p4;
# never part of `make test` (no p4c where the project is built and tested).
#
# Needs p4c-bm2-ss on PATH (or P4C_BM2_SS=/path/to/p4c-bm2-ss). The version
# the committed files came from, and how it was built, is in
# examples/README.md; note a different version there when you regenerate.
#
# Usage: hack/compile-examples.sh [EXAMPLE...]   (default: all below)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
P4C="${P4C_BM2_SS:-p4c-bm2-ss}"
# l2crypt calls extern functions that v1model does not have (its target is
# the emulated DPDK SWX pipeline); p4c-bm2-ss cannot compile it.
EXAMPLES=("$@")
if ((${#EXAMPLES[@]} == 0)); then
  EXAMPLES=(firewall l2switch router fabric shared_ecmp)
fi

command -v "$P4C" >/dev/null || {
  echo "compile-examples: $P4C not found (set P4C_BM2_SS or put p4c-bm2-ss on PATH)" >&2
  exit 1
}
echo "compile-examples: $("$P4C" --version 2>&1 | tr "\n" " ")" >&2

for ex in "${EXAMPLES[@]}"; do
  dir="$REPO/examples/$ex"
  [[ -f "$dir/$ex.p4" ]] || { echo "compile-examples: no $dir/$ex.p4" >&2; exit 1; }
  echo "compile-examples: $ex" >&2
  (cd "$dir" && "$P4C" --arch v1model --std p4-16 \
    --p4runtime-files p4info.txt -o "$ex.json" "$ex.p4")
done
