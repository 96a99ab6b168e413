#!/usr/bin/env bash
# A real one-node Kubernetes cluster on this machine, without a container
# engine package of Kubernetes' own and without any registry: the local
# control plane (hack/controlplane.sh: etcd + kube-apiserver) plus
# containerd + runc + CNI bridge (Debian packages), kubelet, kube-proxy
# (iptables), kube-scheduler, kube-controller-manager (bin/, built from
# hack/kubernetes at the kube-apiserver's version) and CoreDNS (bin/coredns)
# as host processes. Pods run as real containers on a bridge this script
# creates; images come from OCI archives (hack/images.sh), imported with ctr.
#
#   hack/cluster.sh up              start everything; waits for the node to be Ready
#   hack/cluster.sh down            stop everything and remove all it made
#   hack/cluster.sh status          print the components, exit 1 when not running
#   hack/cluster.sh env             print `export KUBECONFIG=...` (eval it)
#   hack/cluster.sh load TAR REF..  import OCI archives (made by hack/images.sh)
#   hack/cluster.sh verify-clean    exit 1 when anything `up` makes is still there
#
# Needs root and `hack/install-deps.sh cluster`. One cluster per machine: the
# bridge, cgroup root, iptables chains and /var/run/netns are machine-wide.
#
# Facts of the machines this was made for (Firecracker VM, cgroup v1 hybrid,
# no CAP_SYS_RESOURCE, open files capped at 20000) and what they need:
# containerd `restrict_oom_score_adj`; kubelet `failCgroupV1: false`,
# `cgroupDriver: cgroupfs`, a non-loopback node IP (the bridge's) and
# `--hostname-override`; kube-apiserver `--kubelet-preferred-address-types=
# InternalIP` (logs/exec never resolve a host name); the controller-manager
# runs without the CSR signing controller (no cluster signing key).
#
# Traffic stays on this machine: components talk over loopback or the node
# IP; pods live on the bridge, whose traffic is dropped when it would be
# forwarded anywhere else; CoreDNS answers cluster.local and NXDOMAIN for
# every other name (nothing is forwarded); images are never pulled.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$REPO/bin"
DIR="${P4FLEET_CLUSTER_DIR:-$REPO/.local/cluster}"
CP_DIR="$DIR/controlplane"
# etcd fsyncs on every write; on tmpfs a loaded 2-core machine keeps up.
ETCD_DIR=/dev/shm/p4fleet-cluster-etcd
KUBECONFIG_OUT="$CP_DIR/kubeconfig"

NODE_NAME=p4fleet-node
BRIDGE=p4fleet0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
CLUSTER_DOMAIN=cluster.local
CGROUP_ROOT=p4fleet-cluster
FW_CHAIN=P4FLEET-FORWARD
PAUSE_IMAGE=p4fleet.local/pause:3.10
# Sysctls that the bridge plugin, kubelet or this script change; saved at
# `up`, restored at `down`.
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables
  net.bridge.bridge-nf-call-ip6tables net.ipv4.conf.all.route_localnet
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
  kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# The machine-wide marker naming the state dir of the running cluster.
OWNER_FILE=/run/p4fleet-cluster.owner
# preflight refuses to bring a node up with less free disk than this (MB).
MIN_FREE_MB="${P4FLEET_CLUSTER_MIN_FREE_MB:-2048}"
# The CRI's network namespaces (/var/run/netns, which is /run/netns here;
# mountinfo names the resolved path).
NETNS_DIR="$(readlink -f /var/run)/netns"

log() { echo "cluster: $*" >&2; }
die() { log "error: $*"; exit 1; }

# A process that exists and is not a zombie (our daemons are reparented to
# PID 1, which may reap them late).
running() { [[ -r "/proc/$1/stat" ]] && [[ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
alive() { [[ -f "$1" ]] && running "$(cat "$1")"; }

free_port() { # [address]
  python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"
}

# wait_for DESC TIMEOUT_S PIDFILE CMD...: polls CMD until it succeeds; fails
# early when the component's process exited.
wait_for() {
  local desc="$1" timeout="$2" pidfile="$3" start=$SECONDS
  shift 3
  until "$@" >/dev/null 2>&1; do
    if [[ -n "$pidfile" ]] && ! alive "$pidfile"; then
      die "$desc exited; last log lines:
$(tail -n 20 "${pidfile%.pid}.log" 2>/dev/null)"
    fi
    (( SECONDS - start < timeout )) || die "$desc not ready after ${timeout}s; see ${pidfile%.pid}.log"
    sleep 0.3
  done
}

# start NAME CMD...: runs CMD in its own session with its log and pid file in $DIR.
start() {
  local name="$1"
  shift
  setsid "$@" >"$DIR/$name.log" 2>&1 </dev/null &
  echo $! > "$DIR/$name.pid"
}

stop_pid() { # pidfile name
  if alive "$1"; then
    local pid start=$SECONDS how=SIGTERM
    pid="$(cat "$1")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
    if running "$pid"; then
      kill -9 "$pid" 2>/dev/null || true
      how=SIGKILL
    fi
    log "stopped $2 (pid $pid, $how, $((SECONDS - start))s)"
  fi
  rm -f "$1"
}

kubectl_() { kubectl --kubeconfig "$KUBECONFIG_OUT" "$@"; }
ctr_() { ctr --address "$DIR/run/containerd.sock" --namespace k8s.io "$@"; }

# A kubeconfig for one component: bearer token, the API server's CA.
component_kubeconfig() { # out server token
  cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: p4fleet-cluster
  cluster:
    server: $2
    certificate-authority: $CP_DIR/certs/apiserver.crt
users:
- name: component
  user:
    token: $3
contexts:
- name: p4fleet-cluster
  context: {cluster: p4fleet-cluster, user: component}
current-context: p4fleet-cluster
EOF
}

token() { head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9'; }

# --- preflight ---------------------------------------------------------------
preflight() {
  [[ $EUID -eq 0 ]] || die "needs root (mounts, cgroups, bridge, iptables)"
  local b
  for b in kube-apiserver kubelet kube-proxy kube-scheduler kube-controller-manager coredns pause; do
    [[ -x "$BIN/$b" ]] || die "$BIN/$b missing; run hack/install-deps.sh cluster"
  done
  for b in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables iptables-save nft umoci; do
    command -v "$b" >/dev/null || die "$b not in PATH; run hack/install-deps.sh cluster"
  done
  [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] \
    || die "CNI plugins missing in /usr/lib/cni; run hack/install-deps.sh cluster"
  [[ -d /sys/fs/cgroup/memory ]] || die "cgroup v1 memory controller not mounted at /sys/fs/cgroup/memory (only cgroup v1/hybrid hosts are supported)"
  # Unix socket paths are limited to 108 bytes; containerd's are the longest.
  (( ${#DIR} <= 70 )) || die "state dir $DIR is too long for unix sockets; set P4FLEET_CLUSTER_DIR to a shorter path"
  # Pods, images and logs need room; below this the kubelet soon reports
  # DiskPressure and the scheduler places nothing (pods Pending, no error).
  local free_mb
  mkdir -p "$DIR"
  free_mb="$(df -Pm "$DIR" | awk 'NR == 2 { print $4 }')"
  (( free_mb >= MIN_FREE_MB )) \
    || die "only ${free_mb} MB free on the disk of $DIR (need ${MIN_FREE_MB} MB): free some (cargo clean in other checkouts) first"
  log "disk: ${free_mb} MB free under $DIR"
  if [[ -f "$OWNER_FILE" && "$(cat "$OWNER_FILE")" != "$DIR" ]]; then
    die "another cluster is up on this machine (state in $(cat "$OWNER_FILE")); run its hack/cluster.sh down first"
  fi
}

# --- host: bridge, sysctls, iptables, cgroup root ----------------------------
setup_host() {
  echo "$DIR" > "$OWNER_FILE"
  mkdir -p "$DIR/run"
  if [[ ! -f "$DIR/sysctl.saved" ]]; then
    local s
    for s in "${SYSCTLS[@]}"; do
      [[ -e "/proc/sys/${s//.//}" ]] && echo "$s=$(sysctl -n "$s")"
    done > "$DIR/sysctl.saved"
  fi
  [[ -d /var/log/containers ]] || touch "$DIR/created-var-log-containers"
  [[ -d "$NETNS_DIR" ]] || touch "$DIR/created-netns-dir"
  [[ -d /run/containerd ]] || touch "$DIR/created-run-containerd"
  [[ -f "$DIR/nft-tables.before" ]] || nft list tables > "$DIR/nft-tables.before"

  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge
    ip addr add "$NODE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  fi
  ip link set "$BRIDGE" up

  # Service traffic between pods on one bridge must pass iptables (kube-proxy's DNAT).
  sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
  # Forwarding is on for the bridge only: nothing from or to a pod is
  # forwarded to another interface.
  if ! iptables -S "$FW_CHAIN" >/dev/null 2>&1; then
    iptables -N "$FW_CHAIN"
    iptables -A "$FW_CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
    iptables -A "$FW_CHAIN" -i "$BRIDGE" -j DROP
    iptables -A "$FW_CHAIN" -o "$BRIDGE" -j DROP
    iptables -I FORWARD 1 -j "$FW_CHAIN"
  fi

  # kubelet's cgroupRoot: one tree per controller, removed at `down`.
  local c
  for c in /sys/fs/cgroup/*/; do
    [[ -e "$c/cgroup.procs" ]] || continue
    mkdir -p "$c$CGROUP_ROOT"
    if [[ -e "${c}cpuset.cpus" && -z "$(cat "$c$CGROUP_ROOT/cpuset.cpus")" ]]; then
      cat "${c}cpuset.cpus" > "$c$CGROUP_ROOT/cpuset.cpus"
      cat "${c}cpuset.mems" > "$c$CGROUP_ROOT/cpuset.mems"
    fi
  done
}

# --- certificates and tokens --------------------------------------------------
setup_credentials() {
  local pki="$DIR/pki"
  mkdir -p "$pki" "$CP_DIR"
  if [[ ! -f "$pki/ca.crt" ]]; then
    # The kubelet trusts this CA for client certificates; the API server
    # presents one (system:masters) when it calls the kubelet.
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=p4fleet-cluster-ca" \
      -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
      -keyout "$pki/apiserver-kubelet-client.key" -out "$pki/apiserver-kubelet-client.csr" 2>/dev/null
    openssl x509 -req -in "$pki/apiserver-kubelet-client.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
      -CAcreateserial -days 3650 -out "$pki/apiserver-kubelet-client.crt" 2>/dev/null
  fi
  if [[ ! -f "$DIR/tokens.csv" ]]; then
    {
      echo "$(token),system:node:$NODE_NAME,kubelet,\"system:nodes\""
      echo "$(token),system:kube-scheduler,kube-scheduler"
      echo "$(token),system:kube-controller-manager,kube-controller-manager"
      echo "$(token),system:kube-proxy,kube-proxy"
      echo "$(token),system:p4fleet:coredns,coredns"
    } > "$DIR/tokens.csv"
  fi
}

user_token() { # user
  awk -F, -v u="$1" '$2 == u { print $1 }' "$DIR/tokens.csv"
}

start_control_plane() {
  P4FLEET_CONTROLPLANE_DIR="$CP_DIR" \
  P4FLEET_APISERVER_ADDRESS="$NODE_IP" \
  P4FLEET_APISERVER_TOKENS="$DIR/tokens.csv" \
  P4FLEET_ETCD_DIR="$ETCD_DIR" \
  P4FLEET_APISERVER_ARGS="--kubelet-preferred-address-types=InternalIP
--kubelet-client-certificate=$DIR/pki/apiserver-kubelet-client.crt
--kubelet-client-key=$DIR/pki/apiserver-kubelet-client.key
--enable-admission-plugins=NodeRestriction" \
    "$REPO/hack/controlplane.sh" up
  local server
  server="$(cat "$CP_DIR/server")"
  local c
  for c in kubelet kube-scheduler kube-controller-manager kube-proxy coredns; do
    local user
    case "$c" in
      kubelet) user="system:node:$NODE_NAME" ;;
      coredns) user="system:p4fleet:coredns" ;;
      *) user="system:$c" ;;
    esac
    component_kubeconfig "$DIR/$c.kubeconfig" "$server" "$(user_token "$user")"
  done
  # CoreDNS reads Services, EndpointSlices and Namespaces.
  kubectl_ apply --server-side --field-manager=p4fleet-cluster -f - >/dev/null <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "p4fleet-cluster:coredns"}
rules:
  - apiGroups: [""]
    resources: [services, namespaces, endpoints, pods]
    verbs: [list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "p4fleet-cluster:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "p4fleet-cluster:coredns"}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:p4fleet:coredns"}
EOF
}

# --- containerd ----------------------------------------------------------------
start_containerd() {
  alive "$DIR/containerd.pid" && return 0
  mkdir -p "$DIR/containerd/root" "$DIR/containerd/state" "$DIR/cni/net.d" "$DIR/cni/ipam"
  # Pods get a route to the Service range only, no default route: nothing
  # off this machine is reachable from a pod.
  cat > "$DIR/cni/net.d/10-p4fleet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "p4fleet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$NODE_IP"}],
        "dataDir": "$DIR/cni/ipam"
      }
    }
  ]
}
EOF
  cat > "$DIR/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
# No CAP_SYS_RESOURCE here: containers may not get a lower oom_score_adj
# than containerd's own.
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$DIR/run/containerd.sock"
[ttrpc]
  address = "$DIR/run/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$DIR/run/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni/net.d"
EOF
  start containerd containerd --config "$DIR/containerd.toml"
  wait_for containerd 60 "$DIR/containerd.pid" ctr_ version
  log "containerd ready (pid $(cat "$DIR/containerd.pid"))"
}

# Imports OCI archives under the given names (the archive's index holds one
# image whose org.opencontainers.image.ref.name is its tag).
cmd_load() {
  (( $# % 2 == 0 && $# > 0 )) || die "usage: $0 load ARCHIVE REPOSITORY [ARCHIVE REPOSITORY ...]"
  while (( $# )); do
    ctr_ images import --base-name "$2" "$1" >/dev/null
    log "imported $1 as $2:$(python3 -c 'import json,sys,tarfile
t=tarfile.open(sys.argv[1]); i=json.load(t.extractfile("index.json"))
print(i["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"])' "$1")"
    shift 2
  done
}

load_pause() {
  "$REPO/hack/images.sh" pause >/dev/null
  cmd_load "$REPO/.local/images/pause.tar" "${PAUSE_IMAGE%:*}"
}

# --- CoreDNS ----------------------------------------------------------------------
start_coredns() {
  alive "$DIR/coredns.pid" && return 0
  local ready_port
  ready_port="$(free_port)"
  cat > "$DIR/Corefile" <<EOF
$CLUSTER_DOMAIN:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $NODE_IP
    ready 127.0.0.1:$ready_port
    errors
    cache 5
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $DIR/coredns.kubeconfig p4fleet-cluster
        pods insecure
        ttl 5
    }
}
# Every other name: NXDOMAIN here; nothing is forwarded off the machine.
.:53 {
    bind $NODE_IP
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
EOF
  printf 'nameserver %s\n' "$NODE_IP" > "$DIR/resolv.conf"
  start coredns "$BIN/coredns" -conf "$DIR/Corefile"
  wait_for coredns 60 "$DIR/coredns.pid" curl -sf "http://127.0.0.1:$ready_port/ready"
  log "coredns ready on $NODE_IP:53 (pid $(cat "$DIR/coredns.pid"))"
}

# --- kube-proxy -------------------------------------------------------------------
start_kube_proxy() {
  alive "$DIR/kube-proxy.pid" && return 0
  local healthz metrics
  healthz="$(free_port)"
  metrics="$(free_port)"
  cat > "$DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: $DIR/kube-proxy.kubeconfig
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $POD_CIDR
detectLocalMode: ClusterCIDR
# NodePorts on the node IP only (none on loopback, so route_localnet stays off).
nodePortAddresses: ["$NODE_IP/32"]
healthzBindAddress: 127.0.0.1:$healthz
metricsBindAddress: 127.0.0.1:$metrics
oomScoreAdj: 0
# 0: leave the host's conntrack settings alone.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
EOF
  start kube-proxy "$BIN/kube-proxy" --config "$DIR/kube-proxy.yaml" --v=1
  wait_for kube-proxy 60 "$DIR/kube-proxy.pid" curl -sf "http://127.0.0.1:$healthz/healthz"
  log "kube-proxy ready (pid $(cat "$DIR/kube-proxy.pid"))"
}

# --- kubelet ------------------------------------------------------------------------
start_kubelet() {
  alive "$DIR/kubelet.pid" && return 0
  local port healthz
  port="$(free_port "$NODE_IP")"
  healthz="$(free_port)"
  mkdir -p "$DIR/kubelet" "$DIR/pod-logs"
  cat > "$DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 hybrid host without systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP_ROOT
containerRuntimeEndpoint: unix://$DIR/run/containerd.sock
address: $NODE_IP
port: $port
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $DIR/pki/ca.crt}
authorization:
  mode: Webhook
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$NODE_IP]
resolvConf: $DIR/resolv.conf
podLogsDir: $DIR/pod-logs
staticPodPath: ""
failSwapOn: false
# No CAP_SYS_RESOURCE: a negative oom_score_adj cannot be set.
oomScoreAdj: 0
rotateCertificates: false
serverTLSBootstrap: false
# Images come from archives and cannot be pulled again: never collect them.
# Disk-pressure thresholds are absolute: a percentage of a large shared disk
# (1 % of 250 GB is 2.5 GB) tainted the node DiskPressure while cargo's
# target dirs still had room, and every pod stayed Pending. preflight
# refuses to start with less than MIN_FREE_MB free instead.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 256Mi
  imagefs.available: 256Mi
  nodefs.inodesFree: "1%"
maxPods: 50
EOF
  start kubelet "$BIN/kubelet" \
    --config "$DIR/kubelet.yaml" \
    --kubeconfig "$DIR/kubelet.kubeconfig" \
    --root-dir "$DIR/kubelet" \
    --cert-dir "$DIR/kubelet/pki" \
    --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" \
    --v=1
  wait_for kubelet 120 "$DIR/kubelet.pid" curl -sf "http://127.0.0.1:$healthz/healthz"
  log "kubelet up (pid $(cat "$DIR/kubelet.pid"))"
}

start_scheduler() {
  alive "$DIR/kube-scheduler.pid" && return 0
  local port
  port="$(free_port)"
  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$DIR/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$port" \
    --leader-elect=false --v=1
  wait_for kube-scheduler 60 "$DIR/kube-scheduler.pid" curl -sfk "https://127.0.0.1:$port/healthz"
  log "kube-scheduler ready (pid $(cat "$DIR/kube-scheduler.pid"))"
}

start_controller_manager() {
  alive "$DIR/kube-controller-manager.pid" && return 0
  local port
  port="$(free_port)"
  # Without the CSR signing controller: there is no cluster signing key, and
  # nothing here needs certificates signed.
  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$DIR/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$port" \
    --leader-elect=false \
    --controllers='*,-certificatesigningrequest-signing-controller' \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$CP_DIR/sa.key" \
    --root-ca-file "$CP_DIR/certs/apiserver.crt" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --v=1
  wait_for kube-controller-manager 60 "$DIR/kube-controller-manager.pid" curl -sfk "https://127.0.0.1:$port/healthz"
  log "kube-controller-manager ready (pid $(cat "$DIR/kube-controller-manager.pid"))"
}

cmd_up() {
  local t0=$SECONDS
  preflight
  mkdir -p "$DIR"
  setup_host
  setup_credentials
  start_control_plane
  start_containerd
  load_pause
  start_coredns
  start_kubelet
  # kube-proxy reads the node IP from the Node kubelet registers.
  wait_for "node $NODE_NAME registration" 60 "$DIR/kubelet.pid" kubectl_ get node "$NODE_NAME"
  start_kube_proxy
  start_scheduler
  start_controller_manager
  kubectl_ wait --for=condition=Ready "node/$NODE_NAME" --timeout=120s >/dev/null \
    || die "node $NODE_NAME not Ready; see $DIR/kubelet.log"
  # The controller-manager publishes kube-root-ca.crt and the default
  # ServiceAccount, which every pod mounts.
  local start=$SECONDS
  until kubectl_ -n default get serviceaccount default >/dev/null 2>&1 \
    && kubectl_ -n default get configmap kube-root-ca.crt >/dev/null 2>&1; do
    (( SECONDS - start < 60 )) || die "default ServiceAccount / kube-root-ca.crt not created; see $DIR/kube-controller-manager.log"
    sleep 0.5
  done
  log "node $NODE_NAME Ready ($NODE_IP) in $((SECONDS - t0))s; kubeconfig $KUBECONFIG_OUT"
}

# --- down ---------------------------------------------------------------------------
# Stops every container (the CRI way first, while kubelet is gone, then by
# PID from containerd's own records), so that nothing outlives containerd.
stop_containers() {
  alive "$DIR/containerd.pid" || return 0
  local ids id start=$SECONDS
  ids="$(ctr_ tasks list -q 2>/dev/null || true)"
  for id in $ids; do ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
  for id in $ids; do
    for _ in $(seq 1 50); do
      ctr_ tasks delete "$id" >/dev/null 2>&1 && break
      sleep 0.1
    done
  done
  ids="$(ctr_ containers list -q 2>/dev/null || true)"
  for id in $ids; do ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
  log "stopped $(wc -w <<< "$ids") containers ($((SECONDS - start))s)"
}

# Processes left behind under our state dir: shims (shim.pid) and container
# init processes (init.pid), killed by PID.
kill_recorded_pids() {
  local f pid
  [[ -d "$DIR/containerd/state" ]] || return 0
  while IFS= read -r -d '' f; do
    pid="$(cat "$f" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -9 "$pid" 2>/dev/null && log "killed leftover pid $pid ($(basename "$f"))"
  done < <(find "$DIR/containerd/state" -name '*.pid' -print0 2>/dev/null)
}

# Any process still in our cgroup tree was started by this cluster.
kill_cgroup_procs() {
  local f pid
  while IFS= read -r f; do
    while read -r pid; do
      [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null && log "killed leftover pid $pid (cgroup ${f%/cgroup.procs})"
    done < "$f"
  done < <(find /sys/fs/cgroup/*/"$CGROUP_ROOT" -name cgroup.procs 2>/dev/null)
}

remove_cgroups() {
  local c d
  for c in /sys/fs/cgroup/*/"$CGROUP_ROOT"; do
    [[ -d "$c" ]] || continue
    # Deepest first.
    while IFS= read -r d; do rmdir "$d" 2>/dev/null || true; done < <(find "$c" -mindepth 1 -depth -type d)
    rmdir "$c" 2>/dev/null || log "warning: could not remove cgroup $c"
  done
}

# Mounts made by kubelet, containerd and the CRI's network namespaces.
unmount_all() {
  local m
  for _ in 1 2 3; do
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done < <(awk -v d="$DIR" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r)
  done
  if [[ -d "$NETNS_DIR" ]]; then
    while IFS= read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
      rm -f "$m"
    done < <(awk -v d="$NETNS_DIR/cni-" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo)
    # CRI netns files of ours without a mount anymore.
    rm -f "$NETNS_DIR"/cni-* 2>/dev/null || true
  fi
}

# kube-proxy --cleanup leaves KUBE-FIREWALL (shared with kubelets of old);
# every KUBE-/CNI-/P4FLEET- chain on this machine is this cluster's, so all
# of them go, with the rules jumping to them; other rules are kept.
OUR_CHAINS='KUBE|CNI|P4FLEET'
cleanup_iptables() {
  if [[ -x "$BIN/kube-proxy" ]]; then
    "$BIN/kube-proxy" --cleanup --v=0 >"$DIR/kube-proxy-cleanup.log" 2>&1 || log "kube-proxy --cleanup failed; see $DIR/kube-proxy-cleanup.log"
  fi
  local ipt rules
  for ipt in iptables ip6tables; do
    rules="$("$ipt-save" 2>/dev/null)" || continue
    grep -qE -- "-j ($OUR_CHAINS)-|^:($OUR_CHAINS)-" <<< "$rules" || continue
    grep -vE -- "^:($OUR_CHAINS)-|^-A ($OUR_CHAINS)-|-j ($OUR_CHAINS)-" <<< "$rules" | "$ipt-restore"
  done
  # iptables-nft makes its tables on first use; drop the ones `up` brought
  # into being once nothing but their built-in chains is left.
  [[ -f "$DIR/nft-tables.before" ]] && command -v nft >/dev/null || return 0
  local fam t save
  while read -r _ fam t; do
    grep -qx "table $fam $t" "$DIR/nft-tables.before" && continue
    case "$fam" in ip) save=iptables-save ;; ip6) save=ip6tables-save ;; *) continue ;; esac
    "$save" -t "$t" 2>/dev/null | grep -qE '^-A |^:[^ ]+ - ' || nft delete table "$fam" "$t"
  done < <(nft list tables)
}

restore_sysctls() {
  [[ -f "$DIR/sysctl.saved" ]] || return 0
  local line
  while IFS= read -r line; do
    sysctl -qw "$line" 2>/dev/null || log "warning: could not restore $line"
  done < "$DIR/sysctl.saved"
}

cmd_down() {
  local t0=$SECONDS
  [[ $EUID -eq 0 ]] || die "needs root"
  if [[ ! -d "$DIR" ]]; then
    log "nothing to stop ($DIR does not exist)"
    return 0
  fi
  stop_pid "$DIR/kubelet.pid" kubelet
  stop_containers
  stop_pid "$DIR/kube-controller-manager.pid" kube-controller-manager
  stop_pid "$DIR/kube-scheduler.pid" kube-scheduler
  stop_pid "$DIR/kube-proxy.pid" kube-proxy
  stop_pid "$DIR/coredns.pid" coredns
  stop_pid "$DIR/containerd.pid" containerd
  kill_recorded_pids
  kill_cgroup_procs
  P4FLEET_CONTROLPLANE_DIR="$CP_DIR" "$REPO/hack/controlplane.sh" down
  unmount_all
  cleanup_iptables
  # Pod veths die with their network namespaces; any still on the bridge go too.
  local port
  for port in $(ip -o link show master "$BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$port" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  restore_sysctls
  remove_cgroups
  # kubelet links container logs into /var/log/containers (a fixed path).
  if [[ -d /var/log/containers ]]; then
    find /var/log/containers -maxdepth 1 -type l -lname "$DIR/*" -delete
    if [[ -f "$DIR/created-var-log-containers" ]]; then rmdir /var/log/containers 2>/dev/null || true; fi
  fi
  if [[ -f "$DIR/created-netns-dir" ]]; then rmdir "$NETNS_DIR" 2>/dev/null || true; fi
  # containerd keeps its shims' sockets under /run/containerd/s whatever its
  # state dir; all shims are gone by now.
  if [[ -f "$DIR/created-run-containerd" ]]; then
    rm -rf /run/containerd
  fi
  rm -rf "$DIR" "$ETCD_DIR"
  [[ -f "$OWNER_FILE" && "$(cat "$OWNER_FILE")" == "$DIR" ]] && rm -f "$OWNER_FILE"
  log "down: everything removed in $((SECONDS - t0))s"
}

# --- status / verify ----------------------------------------------------------------
COMPONENTS=(controlplane/etcd controlplane/kube-apiserver containerd coredns kube-proxy kubelet kube-scheduler kube-controller-manager)

cmd_status() {
  local c ok=0
  for c in "${COMPONENTS[@]}"; do
    if alive "$DIR/$c.pid"; then
      printf '%-28s running (pid %s)\n' "${c#controlplane/}" "$(cat "$DIR/$c.pid")"
    else
      printf '%-28s not running\n' "${c#controlplane/}"
      ok=1
    fi
  done
  if (( ok == 0 )); then
    kubectl_ get nodes -o wide || ok=1
  fi
  return "$ok"
}

# Lists whatever `up` makes that still exists; exit 1 when anything does.
cmd_verify_clean() {
  local left=()
  local p
  for p in kubelet kube-proxy kube-scheduler kube-controller-manager coredns; do
    pgrep -f "^$BIN/$p( |$)" >/dev/null && left+=("process $p: $(pgrep -f "^$BIN/$p( |$)" | tr '\n' ' ')")
  done
  pgrep -f "containerd --config $DIR/" >/dev/null && left+=("process containerd")
  pgrep -f "containerd-shim-runc-v2 .*-address $DIR/" >/dev/null && left+=("containerd shims: $(pgrep -f "containerd-shim-runc-v2 .*-address $DIR/" | tr '\n' ' ')")
  pgrep -f "$DIR/controlplane" >/dev/null && left+=("control plane processes: $(pgrep -f "$DIR/controlplane" | tr '\n' ' ')")
  awk -v d="$DIR" 'index($5, d) == 1' /proc/self/mountinfo | grep -q . && left+=("mounts under $DIR")
  awk -v d="$NETNS_DIR/cni-" 'index($5, d) == 1' /proc/self/mountinfo | grep -q . && left+=("network namespace mounts in $NETNS_DIR")
  ip link show "$BRIDGE" >/dev/null 2>&1 && left+=("bridge $BRIDGE")
  local rules
  rules="$( (iptables-save; ip6tables-save) 2>/dev/null | grep -E 'KUBE-|CNI-|P4FLEET-' || true)"
  [[ -n "$rules" ]] && left+=("iptables: $(echo "$rules" | wc -l) KUBE-/CNI-/P4FLEET- rules or chains")
  compgen -G "/sys/fs/cgroup/*/$CGROUP_ROOT" >/dev/null && left+=("cgroups /sys/fs/cgroup/*/$CGROUP_ROOT")
  [[ -e "$DIR" ]] && left+=("state dir $DIR")
  [[ -e "$ETCD_DIR" ]] && left+=("etcd data $ETCD_DIR")
  [[ -e "$OWNER_FILE" ]] && left+=("$OWNER_FILE")
  find /var/log/containers -maxdepth 1 -lname "$DIR/*" 2>/dev/null | grep -q . && left+=("log links in /var/log/containers")
  if (( ${#left[@]} )); then
    printf 'cluster: left behind: %s\n' "${left[@]}" >&2
    return 1
  fi
  echo "cluster: nothing left behind (processes, mounts, network namespaces, bridge, iptables, cgroups, state dirs)"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_OUT" ;;
  load) shift; cmd_load "$@" ;;
  verify-clean) cmd_verify_clean ;;
  *) echo "usage: $0 up|down|status|env|load ARCHIVE REPO...|verify-clean" >&2; exit 2 ;;
esac
