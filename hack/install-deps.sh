#!/usr/bin/env bash
# Installs what tests and the demo need on a Debian 12 machine (run as root;
# Rust, Go, Python and kubectl are expected to be present). Idempotent: each
# step is skipped when its result is already there and up to date.
#
#   etcd            apt package etcd-server (only when `etcd` is not in PATH)
#   kube-apiserver  bin/kube-apiserver, built from hack/kube-apiserver (rebuilt
#                   when its go.mod/go.sum/main.go change; stamp file in bin/)
#   helm            bin/helm, `go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION`
#   p4runtime-shell .local/p4runtime-shell-venv from e2e/python/requirements.txt
#                   (recreated when the requirements change; used by
#                   e2e/tests/p4runtime_shell.rs)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$REPO/bin"
HELM_VERSION="${HELM_VERSION:-v3.20.2}"
mkdir -p "$BIN"

T0=$SECONDS
step_start=0
begin() { step_start=$SECONDS; echo "install-deps: $*" >&2; }
done_step() { echo "install-deps:   $1 ($((SECONDS - step_start))s)" >&2; }

for tool in go cargo python3 kubectl openssl curl; do
  command -v "$tool" >/dev/null || { echo "install-deps: error: $tool not in PATH" >&2; exit 1; }
done

# --- etcd ---------------------------------------------------------------
begin "etcd"
if command -v etcd >/dev/null; then
  done_step "present: $(etcd --version | head -1)"
else
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq etcd-server >/dev/null
  # The package starts a system etcd on :2379; tests start their own.
  if command -v systemctl >/dev/null && systemctl is-active -q etcd 2>/dev/null; then
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
  done_step "installed: $(etcd --version | head -1)"
fi

# --- kube-apiserver -----------------------------------------------------
begin "kube-apiserver"
KAS_SRC="$REPO/hack/kube-apiserver"
K8S_VERSION="$(cd "$KAS_SRC" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
# The -X flags give the binary its real version (otherwise v0.0.0-master),
# which /version reports and tests print.
K8S_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR -X k8s.io/component-base/version.gitTreeState=clean"
KAS_STAMP="$(cat "$KAS_SRC/go.mod" "$KAS_SRC/go.sum" "$KAS_SRC/main.go" <(echo "$LDFLAGS") <(go env GOVERSION) | sha256sum | cut -d' ' -f1)"
if [[ -x "$BIN/kube-apiserver" && "$(cat "$BIN/.kube-apiserver.stamp" 2>/dev/null)" == "$KAS_STAMP" ]]; then
  done_step "up to date ($K8S_VERSION)"
else
  (cd "$KAS_SRC" && go build -trimpath -ldflags="$LDFLAGS" -o "$BIN/kube-apiserver.tmp" .)
  mv "$BIN/kube-apiserver.tmp" "$BIN/kube-apiserver"
  echo "$KAS_STAMP" > "$BIN/.kube-apiserver.stamp"
  done_step "built $K8S_VERSION"
fi

# --- helm ---------------------------------------------------------------
begin "helm"
if [[ -x "$BIN/helm" ]] && "$BIN/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  done_step "up to date ($HELM_VERSION)"
else
  GOBIN="$BIN" go install -trimpath -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  done_step "built $HELM_VERSION"
fi

# --- p4runtime-shell venv ---------------------------------------------------
begin "p4runtime-shell"
VENV="$REPO/.local/p4runtime-shell-venv"
REQ="$REPO/e2e/python/requirements.txt"
if [[ -x "$VENV/bin/python" ]] && cmp -s "$REQ" "$VENV/requirements.txt"; then
  done_step "up to date"
else
  python3 -m venv --clear "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$VENV/requirements.txt"
  done_step "installed $(grep -i '^p4runtime-shell==' "$REQ")"
fi

echo "install-deps: done in $((SECONDS - T0))s" >&2
