#!/usr/bin/env bash
# Peak RSS of `kennel run` while a hostile kernel floods it with N fs.write requests of
# SIZE bytes each, written back to back without waiting (the hardening issue, item 8),
# through the real fshost onto disk. Prints the peak (VmHWM) of each kennel binary given.
#
#   bench/flood-rss.sh [N [SIZE]] [KENNEL...]   # default 32 x 33554000, ./kennel built here
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
n=${1:-32}; size=${2:-33554000}; shift $(( $# > 2 ? 2 : $# )) || true
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/kennel" ./cmd/kennel
go test -c -o "$tmp/fake.test" ./cmd/kennel   # its TestMain plays the fake kernel
bins=("$@"); [ ${#bins[@]} -gt 0 ] || bins=("$tmp/kennel")
for bin in "${bins[@]}"; do
  hash=$("$bin" version | sed -n 's/.*stub bundle \([0-9a-f]*\).*/\1/p')
  work=$(mktemp -d -p "$tmp")
  argv=$(printf '["env","KENNEL_FAKE_KERNEL=flood","KENNEL_FAKE_BUNDLE=%s","KENNEL_FAKE_ARG=%d:%d","%s"]' "$hash" "$n" "$size" "$tmp/fake.test")
  ( cd "$work" && exec "$bin" run --debug --transport-argv "$argv" -c 'pass' ) 2>"$work/log" &
  pid=$!
  start=$(date +%s.%N)
  until grep -q 'replies ok=' "$work/log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "kennel ended early:"; cat "$work/log"; exit 1; }
    sleep 0.2
  done
  end=$(date +%s.%N)
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  pkill -KILL -f "$tmp/fake.test" 2>/dev/null || true
  echo "$bin: $(grep -o 'replies ok=[0-9]* of [0-9]*' "$work/log"); peak RSS $((hwm / 1024)) MiB; $(echo "$end - $start" | bc) s"
  rm -rf "$work"
done
