#!/bin/bash
# install.sh — root only: what the Kubernetes test cluster (cluster.sh) needs on this machine.
# Installs the missing Debian packages (containerd and runc come from .ci/install), then builds
# the binaries when build.sh's cache has no dir for the current key (12-25 min cold on 2 cores;
# nothing on a hit). Idempotent. .ci/install runs it.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
if [ "$(id -u)" -ne 0 ]; then
  echo "kubetest install: root only: run 'sudo $HERE/install.sh'" >&2
  exit 1
fi
pkgs=(openssl curl bc containernetworking-plugins containerd runc iproute2 python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kubetest install: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null || export PATH=$PATH:${GOROOT:-/usr/local/go}/bin
if ! dir=$("$HERE/build.sh" check); then
  echo "kubetest install: building the test cluster's binaries into $dir (12-25 min, once per key)" >&2
  "$HERE/build.sh" build >/dev/null
fi
echo "kubetest install: binaries in $("$HERE/build.sh" check)" >&2
