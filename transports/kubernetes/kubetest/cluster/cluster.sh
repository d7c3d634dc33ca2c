#!/bin/bash
# cluster.sh up|down RUN — a throwaway single-node Kubernetes for kennel's tests, from the binaries
# build.sh made: an embedded etcd, kube-apiserver, kube-scheduler, kube-controller-manager, a
# private containerd (CRI) and a kubelet, with a host-only bridge pod network. Everything listens
# on loopback. Root only. Needs Debian's containerd + runc, containernetworking-plugins, openssl,
# curl, bc, iproute2 (install.sh installs them).
#
#   up RUN    RUN is a new or empty directory (a fresh one in /tmp per cluster) that gets all the
#             cluster's state: PKI, kubeconfigs, etcd data, containerd root/state/socket, kubelet
#             dirs, CNI state, logs ($RUN/logs/*.log). Prints timings; on a failure the processes
#             it started are left for `down` (read $RUN/logs first).
#   down RUN  stops it: pods deleted gracefully (so CNI DEL runs), every process ended, the
#             mounts, netns, bridge, kubepods cgroups and the sysctls kubelet rewrites put back,
#             and RUN removed. A RUN that holds no cluster is no error.
# Env: KUBETEST_BIN (binaries; default: build.sh check's dir), CNI_BIN (default /usr/lib/cni),
#      ETCD_PORT (23790), API_PORT (16443). Admin kubeconfig: $RUN/admin.kubeconfig.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CMD=${1:-}
[ $# -eq 2 ] && [ -n "$2" ] || { echo "usage: $0 up|down RUN" >&2; exit 2; }
RUN=$(realpath -m "$2")
CNI_BIN=${CNI_BIN:-/usr/lib/cni}
NODE=localhost            # node name == the hostname address the apiserver dials (loopback)
BRIDGE=kubetest0
POD_CIDR=10.244.0.0/24
ETCD_PORT=${ETCD_PORT:-23790}
API_PORT=${API_PORT:-16443}
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops)
# dirs at fixed paths that kubelet (device-plugin socket, container log links) and containerd's
# CNI library (its result cache) make whatever they are told: removed by down when up made them
HOST_DIRS=(/var/lib/kubelet /var/log/containers /var/lib/cni)
ts() { date +%s.%N; }
el() { printf '%.1fs' "$(echo "$(ts) - $1" | bc)"; }
wait_for() { # desc timeout cmd...
  local d=$1 t=$2 s; shift 2; s=$(ts)
  for _ in $(seq 1 $((t * 5))); do if "$@" >/dev/null 2>&1; then echo "  $d ready after $(el "$s")"; return 0; fi; sleep 0.2; done
  echo "  $d NOT ready after ${t}s (logs: $RUN/logs)" >&2; return 1
}
start() { # name cmd...   (background, own session, pid in $RUN/pids/name, log in $RUN/logs/name.log)
  local n=$1; shift
  setsid "$@" >"$RUN/logs/$n.log" 2>&1 < /dev/null &
  echo $! > "$RUN/pids/$n"
}

up() {
  local T0 s d
  T0=$(ts)
  [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: root only" >&2; exit 1; }
  if [ -n "${KUBETEST_BIN:-}" ]; then BIN=$KUBETEST_BIN; IMAGES=$(dirname "$BIN")/images
  else d=$("$HERE/build.sh" check) || { echo "cluster.sh: binaries not built in $d: run $HERE/install.sh as root" >&2; exit 3; }
       BIN=$d/bin; IMAGES=$d/images; fi
  [ ! -e "$RUN/pids" ] || { echo "cluster.sh: $RUN already holds a cluster: down it first" >&2; exit 1; }
  mkdir -p "$RUN"/{pids,logs,pki,cni/net.d,kubelet,pod-logs}
  echo "$BIN" > "$RUN/bin.path"
  # sysctls kubelet rewrites: saved so `down` can put them back
  sysctl -n "${SYSCTLS[@]}" > "$RUN/sysctl.saved"
  ls /run/netns 2>/dev/null > "$RUN/netns.before" || true
  for d in "${HOST_DIRS[@]}"; do [ -e "$d" ] || echo "$d"; done > "$RUN/dirs.made"

  echo "== pki"; s=$(ts)
  ( cd "$RUN/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 7 -subj /CN=kubetest-ca \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj /CN=kube-apiserver 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc,IP:10.96.0.1\nextendedKeyUsage=serverAuth\n' > ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out apiserver.crt -days 7 -extfile ext 2>/dev/null
    openssl genrsa -out sa.key 2048 2>/dev/null; openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    chmod 600 ./*.key )
  local ADMIN_TOKEN NODE_TOKEN k
  ADMIN_TOKEN=$(openssl rand -hex 16); NODE_TOKEN=$(openssl rand -hex 16)
  printf '%s,admin,admin,system:masters\n%s,system:node:%s,node-%s,system:nodes\n' "$ADMIN_TOKEN" "$NODE_TOKEN" $NODE $NODE > "$RUN/pki/tokens.csv"
  chmod 600 "$RUN/pki/tokens.csv"
  for k in admin:$ADMIN_TOKEN kubelet:$NODE_TOKEN; do
    ( umask 077; cat > "$RUN/${k%%:*}.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: kubetest, cluster: {server: "https://127.0.0.1:$API_PORT", certificate-authority: "$RUN/pki/ca.crt"}}]
users: [{name: ${k%%:*}, user: {token: "${k#*:}"}}]
contexts: [{name: kubetest, context: {cluster: kubetest, user: ${k%%:*}}}]
current-context: kubetest
KC
    )
  done
  echo "  pki $(el "$s")"

  echo "== etcd"
  start etcd "$BIN/etcd" --data-dir "$RUN/etcd" --listen-client-url http://127.0.0.1:$ETCD_PORT --listen-peer-url http://127.0.0.1:$((ETCD_PORT+10))
  wait_for etcd 30 curl -sf http://127.0.0.1:$ETCD_PORT/health

  echo "== kube-apiserver"
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:$ETCD_PORT \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT \
    --tls-cert-file="$RUN/pki/apiserver.crt" --tls-private-key-file="$RUN/pki/apiserver.key" \
    --token-auth-file="$RUN/pki/tokens.csv" --authorization-mode=Node,RBAC \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$RUN/pki/sa.pub" \
    --service-account-signing-key-file="$RUN/pki/sa.key" --service-cluster-ip-range=10.96.0.0/24 \
    --endpoint-reconciler-type=none --kubelet-preferred-address-types=Hostname --profiling=false
  wait_for kube-apiserver 120 curl -sf --cacert "$RUN/pki/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" https://127.0.0.1:$API_PORT/readyz

  echo "== kube-scheduler, kube-controller-manager"
  local K=$RUN/admin.kubeconfig
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$K" --authentication-kubeconfig "$K" \
    --authorization-kubeconfig "$K" --bind-address 127.0.0.1 --leader-elect=false
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$K" --authentication-kubeconfig "$K" \
    --authorization-kubeconfig "$K" --bind-address 127.0.0.1 --leader-elect=false \
    --service-account-private-key-file "$RUN/pki/sa.key" --root-ca-file "$RUN/pki/ca.crt" \
    --use-service-account-credentials=false --cluster-cidr 10.244.0.0/16 --service-cluster-ip-range 10.96.0.0/24

  echo "== containerd (private instance)"; s=$(ts)
  # The pod network: a host-only bridge (Debian's containernetworking-plugins) with no address on
  # the host side (isGateway false, IPv6 off) and no routes: a pod has its loopback and the
  # bridge's subnet, nothing beyond it (no default route, no masquerade). It enforces no
  # NetworkPolicy.
  cat > "$RUN/cni/net.d/10-kubetest.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "kubetest", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": false, "isDefaultGateway": false, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "dataDir": "$RUN/cni/ipam"}}]}
CNI
  # The bridge is made here, not by the plugin at the first pod, to turn IPv6 off on it: else
  # it has a link-local address a pod reaches as fe80::…%eth0 (a host service on [::] would
  # answer). The plugin takes a bridge that exists.
  [ -e /sys/class/net/$BRIDGE ] || ip link add $BRIDGE type bridge
  sysctl -q -w net.ipv6.conf.$BRIDGE.disable_ipv6=1
  ip link set $BRIDGE up
  sed -e "s|@RUN@|$RUN|g" -e "s|@CNI_BIN@|$CNI_BIN|g" "$HERE/etc/containerd.toml.in" > "$RUN/containerd.toml"
  start containerd containerd --config "$RUN/containerd.toml"
  wait_for containerd 30 ctr -a "$RUN/containerd/containerd.sock" version
  s=$(ts)
  ctr -a "$RUN/containerd/containerd.sock" -n k8s.io images import "$IMAGES/pause.tar" >/dev/null
  echo "  pause image imported in $(el "$s")"

  echo "== kubelet"
  cat > "$RUN/kubelet.yaml" <<KY
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$RUN/containerd/containerd.sock
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
# this host mounts cgroup v1 (hybrid): kubelet 1.37 refuses that unless told
failCgroupV1: false
podLogsDir: $RUN/pod-logs
podPidsLimit: 1024
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# no KUBE-FIREWALL / KUBE-IPTABLES-HINT / canary chains on the host (nothing here needs them)
makeIPTablesUtilChains: false
KY
  start kubelet "$BIN/kubelet" --config "$RUN/kubelet.yaml" --kubeconfig "$RUN/kubelet.kubeconfig" \
    --root-dir "$RUN/kubelet" --cert-dir "$RUN/kubelet/pki" --hostname-override $NODE --v=1
  wait_for "node $NODE Ready" 120 sh -c "'$BIN/kubectl' --kubeconfig '$K' --cache-dir '$RUN/kubectl-cache' get node $NODE -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
  wait_for kube-scheduler 60 curl -sfk https://127.0.0.1:10259/healthz
  wait_for kube-controller-manager 60 curl -sfk https://127.0.0.1:10257/healthz
  echo "== cluster up in $(el "$T0"); KUBECONFIG=$K"
}

# a process that has exited is gone even while a zombie (this VM's init reaps them late)
running() { local st; st=$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]; }
alive() { [ -f "$RUN/pids/$1" ] && running "$(cat "$RUN/pids/$1")"; }
stop() { # seconds name...: SIGTERM each, SIGKILL what is left after seconds, forget their pids
  local t=$1 n p left; shift
  for n in "$@"; do [ -f "$RUN/pids/$n" ] && kill "$(cat "$RUN/pids/$n")" 2>/dev/null || true; done
  for _ in $(seq $((t * 10))); do
    left=0; for n in "$@"; do alive "$n" && left=1; done
    [ $left = 0 ] && break; sleep 0.1
  done
  for n in "$@"; do
    [ -f "$RUN/pids/$n" ] || continue
    p=$(cat "$RUN/pids/$n")
    if running "$p"; then echo "  $n still running after ${t}s: SIGKILL"; kill -9 "$p" 2>/dev/null || true; fi
    rm -f "$RUN/pids/$n"
  done
  echo "  $* ended after $(el "$T0")"
}

down() {
  local T0 KC BIN n p c ns m
  T0=$(ts)
  [ "$(id -u)" -eq 0 ] || { echo "cluster.sh: root only" >&2; exit 1; }
  [ -d "$RUN/pids" ] || { rm -rf --one-file-system "$RUN"; return 0; }
  KC=$RUN/admin.kubeconfig
  BIN=$(cat "$RUN/bin.path" 2>/dev/null || true)
  # pods first, gracefully (not --force): kubelet must StopPodSandbox so containerd runs CNI DEL
  # and drops the pod's netns and veth
  if alive kubelet && alive kube-apiserver && [ -x "$BIN/kubectl" ]; then
    timeout 40 "$BIN/kubectl" --kubeconfig "$KC" --cache-dir "$RUN/kubectl-cache" delete pods --all -A --grace-period=1 --wait=true --timeout=35s >/dev/null 2>&1 || true
    echo "  pods deleted after $(el "$T0")"
  fi
  # the API server's clients, then the API server while etcd still answers (else it spends
  # its shutdown retrying etcd), then the CRI's leftovers, containerd and etcd
  stop 10 kube-controller-manager kube-scheduler kubelet
  stop 10 kube-apiserver
  if [ -f "$RUN/pids/containerd" ]; then
    local A=(-a "$RUN/containerd/containerd.sock" -n k8s.io)
    for c in $(ctr "${A[@]}" tasks ls -q 2>/dev/null); do ctr "${A[@]}" tasks kill -s SIGKILL "$c" 2>/dev/null || true; done
    for c in $(ctr "${A[@]}" tasks ls -q 2>/dev/null); do
      for _ in $(seq 25); do ctr "${A[@]}" tasks delete -f "$c" >/dev/null 2>&1 && break; sleep 0.2; done
    done
    for c in $(ctr "${A[@]}" containers ls -q 2>/dev/null); do ctr "${A[@]}" containers delete "$c" 2>/dev/null || true; done
  fi
  stop 10 containerd etcd
  echo "  processes ended after $(el "$T0")"
  # fallbacks, for a cluster whose owner died: our containerd's shims (named by our socket in
  # their argv), then whatever is still in the pods' cgroups
  local re; re=$(printf '%s' "$RUN/containerd/" | sed 's/[][\.*^$+?(){}|]/\\&/g')'[c]ontainerd\.sock' # [c]: not grep itself
  for p in $(grep -lsE -- "$re" /proc/[0-9]*/cmdline || true); do
    p=${p#/proc/}; p=${p%/cmdline}; [ "$p" = $$ ] || kill -9 "$p" 2>/dev/null || true
  done
  for c in /sys/fs/cgroup/*/kubepods; do
    [ -d "$c" ] || continue
    { find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | while read -r p; do kill -9 "$p" 2>/dev/null || true; done
  done
  # network namespaces this run's CRI made and did not remove
  if [ -f "$RUN/netns.before" ]; then
    for ns in $(ls /run/netns 2>/dev/null | grep '^cni-'); do grep -qx "$ns" "$RUN/netns.before" || ip netns delete "$ns" 2>/dev/null || true; done
  fi
  # kubelet's mounts under its root dir, containerd's under its state/root (deepest first)
  for _ in 1 2 3; do
    { grep -F " $RUN/" /proc/mounts || true; } | awk '{print $2}' | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  done
  if [ -f "$RUN/sysctl.saved" ]; then
    mapfile -t v < "$RUN/sysctl.saved"
    local i; for i in "${!SYSCTLS[@]}"; do sysctl -q -w "${SYSCTLS[$i]}=${v[$i]}" || true; done
  fi
  if [ -e /sys/class/net/$BRIDGE ]; then ip link del $BRIDGE || true; fi
  # empty pod cgroups kubelet made (cgroupfs driver; v1 hierarchies and the unified one)
  shopt -s nullglob
  for _ in 1 2 3 4 5; do
    for c in /sys/fs/cgroup/*/kubepods; do find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true; done
    c=(/sys/fs/cgroup/*/kubepods); [ ${#c[@]} -eq 0 ] && break; sleep 0.5
  done
  shopt -u nullglob
  if [ -f "$RUN/dirs.made" ]; then while read -r d; do rm -rf --one-file-system "$d"; done < "$RUN/dirs.made"; fi
  rm -rf --one-file-system "$RUN"
  echo "== down in $(el "$T0")"
}

case "$CMD" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down RUN" >&2; exit 2 ;;
esac
