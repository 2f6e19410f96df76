#!/usr/bin/env bash
# Benchmarks `oi reconcile` on real local hypervisors (root, containerd, haproxy, images):
#   1. time from `oi reconcile` start to a 3-replica cluster ready, median of RUNS (default 5),
#      each on a fresh cluster that is deleted afterwards;
#   2. a no-op `oi reconcile` over 10 converged clusters (1 replica each), median of RUNS.
# Usage: cargo build --release -p oi-cli -p oi-local-hypervisor-set && benches/reconcile.sh [RUNS]
# BIN_DIR (default target/release) holds `oi` and `oi-local-hypervisor-set`.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
BIN_DIR=${BIN_DIR:-target/release}
OI="$BIN_DIR/oi"
LHS="$BIN_DIR/oi-local-hypervisor-set"
for b in "$OI" "$LHS"; do
  [ -x "$b" ] || { echo "missing binary $b (cargo build --release -p oi-cli -p oi-local-hypervisor-set, or set BIN_DIR)" >&2; exit 1; }
done
export OI_IMAGE_REPOSITORY=localhost/oneinfra
export OI_IMAGES_DIR=${OI_IMAGES_DIR:-target/oi-images}
SET="obench$$"
WORK=$(mktemp -d)
chmod 700 "$WORK"
cleanup() { "$LHS" destroy --name "$SET" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { printf '%.3f' "$(echo "$(now) - $1" | bc)"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
summary() { grep '^reconciled ' "$1" | tail -1; }

"$LHS" create --name "$SET" --size-private 3 --size-public 1 >"$WORK/world.yaml" 2>"$WORK/create.log"
echo "set $SET: 3 private + 1 public hypervisors"

# 1. cold: a new 3-replica cluster to ready.
: >"$WORK/cold"
for i in $(seq 1 "$RUNS"); do
  "$OI" cluster inject --name "b$i" --control-plane-replicas 3 <"$WORK/world.yaml" >"$WORK/in.yaml"
  start=$(now)
  if ! "$OI" reconcile <"$WORK/in.yaml" >"$WORK/out.yaml" 2>"$WORK/err"; then
    echo "run $i: not ready: $(summary "$WORK/err")" >&2; exit 1
  fi
  t=$(elapsed "$start")
  echo "$t" >>"$WORK/cold"
  echo "run $i: ${t}s  $(summary "$WORK/err")"
  "$OI" cluster delete --name "b$i" <"$WORK/out.yaml" >"$WORK/del.yaml"
  "$OI" reconcile <"$WORK/del.yaml" >"$WORK/world.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
done
echo "cold reconcile to a ready 3-replica cluster: median $(median <"$WORK/cold")s over $RUNS runs"

# 2. no-op over 10 converged clusters.
for i in $(seq 1 10); do
  "$OI" cluster inject --name "n$i" <"$WORK/world.yaml" >"$WORK/tmp.yaml"
  mv "$WORK/tmp.yaml" "$WORK/world.yaml"
done
start=$(now)
"$OI" reconcile <"$WORK/world.yaml" >"$WORK/ten.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
echo "10 clusters (1 replica) to ready: $(elapsed "$start")s  $(summary "$WORK/err")"
: >"$WORK/noop"
for i in $(seq 1 "$RUNS"); do
  start=$(now)
  "$OI" reconcile <"$WORK/ten.yaml" >"$WORK/again.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  t=$(elapsed "$start")
  echo "$t" >>"$WORK/noop"
  echo "no-op $i: ${t}s  $(summary "$WORK/err")"
done
echo "no-op reconcile over 10 converged clusters: median $(median <"$WORK/noop")s over $RUNS runs"
