#!/usr/bin/env bash
# Local Kubernetes control plane (etcd + kube-apiserver, no kubelet, no
# controller-manager) for `make demo` and for developers.
#
#   hack/controlplane.sh up       start (or reuse a running instance)
#   hack/controlplane.sh down     stop both processes
#   hack/controlplane.sh status   print state, exit 1 when not running
#   hack/controlplane.sh env      print `export KUBECONFIG=...` (eval it)
#
# State lives in $P4FLEET_CONTROLPLANE_DIR (default .local/controlplane).
# Ports are picked free on 127.0.0.1 at each start.
#
# hack/cluster.sh runs this with its own directory and:
#   P4FLEET_APISERVER_ADDRESS  bind/advertise address (default 127.0.0.1)
#   P4FLEET_APISERVER_ARGS     extra kube-apiserver flags, one per line
#   P4FLEET_APISERVER_TOKENS   file of extra token-auth lines (components)
#   P4FLEET_ETCD_DIR           etcd data dir (default $DIR/etcd)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${P4FLEET_CONTROLPLANE_DIR:-$REPO/.local/controlplane}"
KAS="${KUBE_APISERVER:-$REPO/bin/kube-apiserver}"
ETCD="${ETCD:-$(command -v etcd || true)}"
KUBECONFIG_OUT="$DIR/kubeconfig"
ADDRESS="${P4FLEET_APISERVER_ADDRESS:-127.0.0.1}"
ETCD_DIR="${P4FLEET_ETCD_DIR:-$DIR/etcd}"

log() { echo "controlplane: $*" >&2; }
die() { log "error: $*"; exit 1; }

alive() { # pidfile
  [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

free_port() { # [address]
  python3 -c 'import socket,sys; s=socket.socket(); s.bind((sys.argv[1],0)); print(s.getsockname()[1])' "${1:-127.0.0.1}"
}

ready() {
  [[ -f "$DIR/server" ]] || return 1
  local code
  code="$(curl -sk -o /dev/null -w '%{http_code}' \
    -H "Authorization: Bearer $(cat "$DIR/admin-token")" \
    "$(cat "$DIR/server")/readyz" 2>/dev/null || true)"
  [[ "$code" == 200 ]]
}

stop_pid() { # pidfile name
  if alive "$1"; then
    local pid
    pid="$(cat "$1")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    log "stopped $2 (pid $pid)"
  fi
  rm -f "$1"
}

cmd_down() {
  stop_pid "$DIR/kube-apiserver.pid" kube-apiserver
  stop_pid "$DIR/etcd.pid" etcd
}

cmd_status() {
  if alive "$DIR/etcd.pid" && alive "$DIR/kube-apiserver.pid" && ready; then
    echo "running: $(cat "$DIR/server") (kubeconfig $KUBECONFIG_OUT)"
  else
    echo "not running"
    return 1
  fi
}

write_kubeconfig() { # server
  local ca
  ca="$(base64 -w0 < "$DIR/certs/apiserver.crt")"
  cat > "$KUBECONFIG_OUT.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: p4fleet-local
  cluster:
    server: $1
    certificate-authority-data: $ca
users:
- name: admin
  user:
    token: $(cat "$DIR/admin-token")
contexts:
- name: p4fleet-local
  context:
    cluster: p4fleet-local
    user: admin
current-context: p4fleet-local
EOF
  mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"
}

cmd_up() {
  if cmd_status >/dev/null 2>&1; then
    log "reusing running instance at $(cat "$DIR/server")"
    return 0
  fi
  [[ -x "$KAS" ]] || die "$KAS not found; run hack/install-deps.sh"
  [[ -n "$ETCD" && -x "$ETCD" ]] || die "etcd not found in PATH; run hack/install-deps.sh"
  cmd_down
  mkdir -p "$DIR/certs" "$ETCD_DIR"

  # Credentials are created once and kept, so kubeconfigs stay valid across restarts.
  [[ -f "$DIR/admin-token" ]] || head -c 24 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' > "$DIR/admin-token"
  printf '%s,admin,admin,"system:masters"\n' "$(cat "$DIR/admin-token")" > "$DIR/tokens.csv"
  if [[ -n "${P4FLEET_APISERVER_TOKENS:-}" ]]; then
    cat "$P4FLEET_APISERVER_TOKENS" >> "$DIR/tokens.csv"
  fi
  local extra_args=()
  if [[ -n "${P4FLEET_APISERVER_ARGS:-}" ]]; then
    mapfile -t extra_args <<< "$P4FLEET_APISERVER_ARGS"
  fi
  if [[ ! -f "$DIR/sa.key" ]]; then
    openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null
    openssl rsa -in "$DIR/sa.key" -pubout -out "$DIR/sa.pub" 2>/dev/null
  fi

  local etcd_port peer_port kas_port
  etcd_port="$(free_port)"; peer_port="$(free_port)"; kas_port="$(free_port "$ADDRESS")"
  while [[ "$peer_port" == "$etcd_port" ]]; do peer_port="$(free_port)"; done
  while [[ "$kas_port" == "$etcd_port" || "$kas_port" == "$peer_port" ]]; do kas_port="$(free_port "$ADDRESS")"; done

  # setsid: the processes outlive this script (and the terminal) until `down`.
  setsid "$ETCD" \
    --name p4fleet-local \
    --data-dir "$ETCD_DIR" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "p4fleet-local=http://127.0.0.1:$peer_port" \
    --logger zap --log-level warn \
    >"$DIR/etcd.log" 2>&1 < /dev/null &
  echo $! > "$DIR/etcd.pid"

  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$etcd_port/health" >/dev/null 2>&1 && break
    alive "$DIR/etcd.pid" || die "etcd exited; see $DIR/etcd.log"
    sleep 0.1
  done

  setsid "$KAS" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$ADDRESS" \
    --advertise-address "$ADDRESS" \
    --secure-port "$kas_port" \
    --cert-dir "$DIR/certs" \
    --token-auth-file "$DIR/tokens.csv" \
    --authorization-mode Node,RBAC \
    --service-account-issuer https://kubernetes.default.svc \
    --service-account-key-file "$DIR/sa.pub" \
    --service-account-signing-key-file "$DIR/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 \
    --allow-privileged=true \
    --v=1 \
    "${extra_args[@]}" \
    >"$DIR/kube-apiserver.log" 2>&1 < /dev/null &
  echo $! > "$DIR/kube-apiserver.pid"
  echo "https://$ADDRESS:$kas_port" > "$DIR/server"

  local start=$SECONDS
  until ready; do
    alive "$DIR/kube-apiserver.pid" || die "kube-apiserver exited; see $DIR/kube-apiserver.log"
    (( SECONDS - start < 120 )) || die "kube-apiserver not ready after 120s; see $DIR/kube-apiserver.log"
    sleep 0.2
  done
  write_kubeconfig "https://$ADDRESS:$kas_port"
  log "ready at https://$ADDRESS:$kas_port in $((SECONDS - start))s; kubeconfig $KUBECONFIG_OUT"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) echo "export KUBECONFIG=$KUBECONFIG_OUT" ;;
  *) echo "usage: $0 up|down|status|env" >&2; exit 2 ;;
esac
