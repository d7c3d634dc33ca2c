#!/bin/bash
# build.sh [key|dir|check|build] — the Kubernetes test fixture's binaries, cached by their inputs.
#
# Builds kube-apiserver, kubelet, kubectl, kube-scheduler, kube-controller-manager (k8s.io/kubernetes
# from the Go module proxy, in src/'s own module) and an embedded etcd, stripped, plus an offline
# pause image, into $KUBETEST_CACHE/<key>/{bin,images} (default /var/cache/kennel/kubernetes).
# key = first 16 hex of sha256(src/go.mod, src/go.sum, src/'s .go and .py files, this script and
# `go version`). A cache hit builds nothing; a new key's build removes the older keys' dirs.
#   key    print the key
#   dir    print the key's dir (whether built or not)
#   check  print the key's dir and exit 0 when it is built, exit 3 when it is not
#   build  (default) build on a miss, then print the dir
# Env: KUBETEST_CACHE, BUILD_P (go build -p, default 2), BUILD_NICE (default 19).
set -euo pipefail
command -v go >/dev/null || export PATH=$PATH:${GOROOT:-/usr/local/go}/bin
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$HERE/src
CACHE=${KUBETEST_CACHE:-/var/cache/kennel/kubernetes}
export GOWORK=off GOFLAGS=-buildvcs=false

key() {
  { cat "$SRC/go.mod" "$SRC/go.sum"
    (cd "$SRC" && find . -type f \( -name '*.go' -o -name '*.py' \) | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done)
    cat "$HERE/build.sh"
    go version
  } | sha256sum | cut -c1-16
}
DIR=$CACHE/$(key)
built() { [ -f "$DIR/.done" ]; }

build() {
  if built; then echo "$DIR"; return 0; fi
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.build.lock"
  flock 9                                   # one build at a time; the winner's result is a hit for the rest
  if built; then echo "$DIR"; return 0; fi
  local T0 tmp v minor ldflags p
  T0=$(date +%s)
  tmp=$(mktemp -d "$CACHE/.build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  v=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$SRC/go.mod")   # e.g. v1.37.2
  minor=$(echo "$v" | cut -d. -f2)
  # without -X the binaries report v0.0.0-master+$Format:%H$
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  mkdir -p "$tmp/bin" "$tmp/images/pause-root"
  cd "$SRC"
  echo "build.sh: building k8s.io/kubernetes $v into $DIR (cold: 12-25 min on 2 cores)" >&2
  go mod download
  nice -n "${BUILD_NICE:-19}" go build -p "${BUILD_P:-2}" -ldflags "$ldflags" -o "$tmp/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager ./etcdmain
  mv "$tmp/bin/etcdmain" "$tmp/bin/etcd"
  # the sandbox (pause) image: a static Go pause binary in a docker-save tar made offline
  CGO_ENABLED=0 nice -n "${BUILD_NICE:-19}" go build -p "${BUILD_P:-2}" -ldflags "-s -w" -o "$tmp/images/pause-root/pause" ./pause
  python3 mkimage.py "$tmp/images/pause-root" localhost/kubetest/pause:1 "$tmp/images/pause.tar" /pause >&2
  rm -rf "$tmp/images/pause-root"
  chmod 755 "$tmp"
  date +%s > "$tmp/.done"
  rm -rf "$DIR"; mv "$tmp" "$DIR"; trap - EXIT
  # older keys' outputs
  for d in "$CACHE"/*/; do d=${d%/}; [ "$d" = "$DIR" ] || rm -rf "$d"; done
  echo "build.sh: built in $(( $(date +%s) - T0 ))s, $(du -sh "$DIR" | cut -f1)" >&2
  echo "$DIR"
}

case "${1:-build}" in
  key) basename "$DIR" ;;
  dir) echo "$DIR" ;;
  check) built && echo "$DIR" || { echo "$DIR"; exit 3; } ;;
  build) build ;;
  *) echo "usage: $0 [key|dir|check|build]" >&2; exit 2 ;;
esac
