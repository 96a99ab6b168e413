#!/usr/bin/env bash
# Installs what tests and the demo need on a Debian 12 machine (run as root;
# Rust, Go, Python and kubectl are expected to be present). Idempotent: each
# step is skipped when its result is already there and up to date.
#
#   etcd            apt package etcd-server (only when `etcd` is not in PATH)
#   kube-apiserver  bin/kube-apiserver, built from hack/kubernetes (rebuilt
#                   when go.mod/go.sum/its main.go change; stamp file in bin/)
#   helm            bin/helm, `go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION`
#   actionlint      bin/actionlint, `go install` (e2e/tests/workflows.rs lints
#                   .github/workflows with it)
#   ShellCheck      apt, package shellcheck (the same test checks hack/*.sh and e2e/kind/run.sh)
#   DPDK            apt: dpdk, libdpdk-dev, pkg-config, gcc (p4fleet-dpdk-agent
#                   links Debian's DPDK 22.11 and compiles pipelines at run
#                   time); two internal headers of the installed version from
#                   Debian's source package (`apt-get source`, deb-src added
#                   when missing) into .local/dpdk-src/<version>/
#   p4runtime-shell .local/p4runtime-shell-venv from e2e/python/requirements.txt
#                   (recreated when the requirements change; used by
#                   e2e/tests/p4runtime_shell.rs)
#
# `hack/install-deps.sh cluster` adds what hack/cluster.sh (a real node) needs:
#   apt             containerd, runc, containernetworking-plugins, umoci,
#                   iptables, nftables, conntrack
#   bin/kubelet, bin/kube-scheduler, bin/kube-controller-manager,
#   bin/kube-proxy  from hack/kubernetes, same module and version as kube-apiserver
#   bin/coredns     from hack/coredns (cluster DNS, only the plugins used)
#   bin/pause       from hack/pause (the pod sandbox image's one binary)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$REPO/bin"
HELM_VERSION="${HELM_VERSION:-v3.20.2}"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
mkdir -p "$BIN"

T0=$SECONDS
step_start=0
apt_updated=
# apt_install PKG...: installs from Debian (one `apt-get update` per run).
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  [[ -n "$apt_updated" ]] || { apt-get update -qq; apt_updated=1; }
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
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
  apt_install etcd-server
  # The package starts a system etcd on :2379; tests start their own.
  if command -v systemctl >/dev/null && systemctl is-active -q etcd 2>/dev/null; then
    systemctl disable --now etcd >/dev/null 2>&1 || true
  fi
  done_step "installed: $(etcd --version | head -1)"
fi

# --- Go binaries ------------------------------------------------------------
# go_bin NAME MODULE_DIR PKG LDFLAGS: builds bin/NAME from PKG (relative to
# MODULE_DIR) unless the stamp (module files, the package's sources, flags, Go
# version) is unchanged.
go_bin() {
  local name="$1" mod="$2" pkg="$3" ldflags="$4" stamp
  begin "$name"
  stamp="$(cat "$mod"/go.* "$mod/$pkg"/*.go <(echo "$ldflags") <(go env GOVERSION) | sha256sum | cut -d' ' -f1)"
  if [[ -x "$BIN/$name" && "$(cat "$BIN/.$name.stamp" 2>/dev/null)" == "$stamp" ]]; then
    done_step "up to date"
  else
    (cd "$mod" && CGO_ENABLED="${CGO:-1}" go build -trimpath -ldflags="$ldflags" -o "$BIN/$name.tmp" "./$pkg")
    mv "$BIN/$name.tmp" "$BIN/$name"
    echo "$stamp" > "$BIN/.$name.stamp"
    done_step "built"
  fi
}

K8S_SRC="$REPO/hack/kubernetes"
K8S_VERSION="$(cd "$K8S_SRC" && go list -m -f '{{.Version}}' k8s.io/kubernetes)"
# The -X flags give the binaries their real version (otherwise v0.0.0-master),
# which /version reports, tests print and kubelet registers the node with.
K8S_MINOR="$(echo "$K8S_VERSION" | cut -d. -f2)"
K8S_LDFLAGS="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$K8S_MINOR -X k8s.io/component-base/version.gitTreeState=clean"

go_bin kube-apiserver "$K8S_SRC" kube-apiserver "$K8S_LDFLAGS"

# --- helm ---------------------------------------------------------------
begin "helm"
if [[ -x "$BIN/helm" ]] && "$BIN/helm" version --template '{{.Version}}' 2>/dev/null | grep -qx "$HELM_VERSION"; then
  done_step "up to date ($HELM_VERSION)"
else
  GOBIN="$BIN" go install -trimpath -ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  done_step "built $HELM_VERSION"
fi

# --- actionlint, shellcheck ---------------------------------------------------
begin "actionlint"
if [[ -x "$BIN/actionlint" ]] && "$BIN/actionlint" -version 2>/dev/null | head -1 | grep -qx "$ACTIONLINT_VERSION"; then
  done_step "up to date ($ACTIONLINT_VERSION)"
else
  GOBIN="$BIN" go install -trimpath -ldflags="-s -w -X main.version=$ACTIONLINT_VERSION" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  done_step "built $ACTIONLINT_VERSION"
fi
begin "shellcheck"
if command -v shellcheck >/dev/null; then
  done_step "present: $(shellcheck --version | sed -n 's/^version: //p')"
else
  apt_install shellcheck
  done_step "installed"
fi

# --- DPDK (p4fleet-dpdk-agent) ----------------------------------------------
# Debian's DPDK 22.11 (libraries and headers, linked by dpdk-agent/build.rs),
# pkg-config, and the C compiler the agent runs at pipeline load time
# (a .spec becomes C through rte_swx_pipeline_codegen, then a shared object).
# That generated C includes rte_swx_pipeline_internal.h and
# rte_swx_pipeline_spec.h, which libdpdk-dev does not ship: they come from
# Debian's source package of the installed version (deb-src is added when
# the system has none), into .local/dpdk-src/<version>/. Nothing of DPDK is
# in the repository. docs/dpdk.md, "The DPDK host agent".
begin "dpdk"
DPDK_PKGS=(dpdk libdpdk-dev pkg-config gcc libc6-dev)
missing=()
for p in "${DPDK_PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if (( ${#missing[@]} > 0 )); then
  apt_install "${missing[@]}"
fi
DPDK_VERSION="$(pkg-config --modversion libdpdk)"
DPDK_DEB_VERSION="$(dpkg-query -W -f='${Version}' libdpdk-dev)"
DPDK_SRC="$REPO/.local/dpdk-src/$DPDK_VERSION"
if [[ -f "$DPDK_SRC/rte_swx_pipeline_internal.h" && "$(cat "$DPDK_SRC/.debian-version" 2>/dev/null)" == "$DPDK_DEB_VERSION" ]]; then
  done_step "present: libdpdk $DPDK_VERSION, internal headers in ${DPDK_SRC#"$REPO"/}${missing[*]:+ (installed ${missing[*]})}"
else
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get source --print-uris "dpdk=$DPDK_DEB_VERSION" >/dev/null 2>&1; then
    # No deb-src for it yet: Debian's own archive, the suites the binaries
    # come from.
    cat > /etc/apt/sources.list.d/p4fleet-deb-src.sources <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt-get update -qq
    apt_updated=1
  fi
  tmp="$(mktemp -d)"
  (cd "$tmp" && apt-get source --download-only -qq "dpdk=$DPDK_DEB_VERSION" >/dev/null 2>&1) ||
    { echo "install-deps: error: apt-get source dpdk=$DPDK_DEB_VERSION failed (deb-src for Debian 12?)" >&2; exit 1; }
  # Debian's patches do not touch lib/pipeline, so the upstream tarball's
  # copies are the source package's.
  tar -xf "$tmp"/dpdk_*.orig.tar.* -C "$tmp" --wildcards \
    '*/lib/pipeline/rte_swx_pipeline_internal.h' '*/lib/pipeline/rte_swx_pipeline_spec.h' '*/license/bsd-3-clause.txt'
  mkdir -p "$DPDK_SRC"
  cp "$tmp"/*/lib/pipeline/rte_swx_pipeline_internal.h "$tmp"/*/lib/pipeline/rte_swx_pipeline_spec.h "$DPDK_SRC/"
  cp "$tmp"/*/license/bsd-3-clause.txt "$DPDK_SRC/LICENSE"
  echo "$DPDK_DEB_VERSION" > "$DPDK_SRC/.debian-version"
  rm -rf "$tmp"
  done_step "libdpdk $DPDK_VERSION; internal headers from source package $DPDK_DEB_VERSION in ${DPDK_SRC#"$REPO"/}${missing[*]:+ (installed ${missing[*]})}"
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

# --- cluster (hack/cluster.sh) ----------------------------------------------
if [[ "${1:-}" == cluster ]]; then
  begin "cluster packages"
  CLUSTER_PKGS=(containerd runc containernetworking-plugins umoci iptables nftables conntrack)
  missing=()
  for p in "${CLUSTER_PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if (( ${#missing[@]} == 0 )); then
    done_step "present"
  else
    apt_install "${missing[@]}"
    done_step "installed ${missing[*]}"
  fi
  for c in kubelet kube-scheduler kube-controller-manager kube-proxy; do
    go_bin "$c" "$K8S_SRC" "$c" "$K8S_LDFLAGS"
  done
  CGO=0 go_bin coredns "$REPO/hack/coredns" . "-s -w"
  CGO=0 go_bin pause "$REPO/hack/pause" . "-s -w"
fi

echo "install-deps: done in $((SECONDS - T0))s" >&2
