#!/usr/bin/env bash
# Benchmarks day-two operations on real local hypervisors (root, containerd, haproxy, images),
# a 3-replica cluster:
#   1. `oi cluster upgrade --to 1.37` of a 1.36 cluster (one minor), each of RUNS runs on a
#      fresh cluster;
#   2. `oi cluster snapshot` and `oi cluster restore` (in place) with KEYS objects (default
#      10,000 ConfigMaps of 100 bytes, written through the API): time of each, the file's size;
#   3. `oi cluster rotate-ca` (every CA and the service-account key), when the binary has it.
# Usage: cargo build --release -p oi-cli -p oi-local-hypervisor-set -p oi-kube-standin &&
#        benches/daytwo.sh [RUNS] [KEYS]
# BIN_DIR (default target/release) holds `oi` and `oi-local-hypervisor-set`.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
KEYS=${2:-10000}
BIN_DIR=${BIN_DIR:-target/release}
OI="$BIN_DIR/oi"
LHS="$BIN_DIR/oi-local-hypervisor-set"
for b in "$OI" "$LHS"; do
  [ -x "$b" ] || { echo "missing binary $b (cargo build --release -p oi-cli -p oi-local-hypervisor-set, or set BIN_DIR)" >&2; exit 1; }
done
command -v kubectl >/dev/null || { echo "kubectl is needed to write the objects" >&2; exit 1; }
export OI_IMAGE_REPOSITORY=localhost/oneinfra
export OI_IMAGES_DIR=${OI_IMAGES_DIR:-target/oi-images}
SET="dbench$$"
WORK=$(mktemp -d)
chmod 700 "$WORK"
cleanup() { "$LHS" destroy --name "$SET" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { printf '%.3f' "$(echo "$(now) - $1" | bc)"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }

"$LHS" create --name "$SET" --size-private 3 --size-public 1 >"$WORK/hv.yaml" 2>"$WORK/create.log"
echo "set $SET: 3 private + 1 public hypervisors"

# 1. one-minor upgrades.
: >"$WORK/upgrade"
for i in $(seq 1 "$RUNS"); do
  "$OI" cluster inject --name "u$i" --control-plane-replicas 3 --kubernetes-version 1.36 <"$WORK/hv.yaml" >"$WORK/in.yaml"
  "$OI" reconcile -q <"$WORK/in.yaml" >"$WORK/up.yaml"
  start=$(now)
  "$OI" cluster upgrade -q --cluster "u$i" --to 1.37 <"$WORK/up.yaml" >"$WORK/upgraded.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  t=$(elapsed "$start")
  echo "$t" >>"$WORK/upgrade"
  echo "upgrade run $i: ${t}s"
  "$OI" cluster delete --name "u$i" <"$WORK/upgraded.yaml" >"$WORK/del.yaml"
  "$OI" reconcile -q <"$WORK/del.yaml" >"$WORK/hv.yaml"
done
echo "one-minor upgrade (1.36 -> 1.37) of a 3-replica cluster: median $(median <"$WORK/upgrade")s over $RUNS runs"

# 2. snapshot and restore with KEYS objects.
"$OI" cluster inject --name s1 --control-plane-replicas 3 <"$WORK/hv.yaml" >"$WORK/in.yaml"
"$OI" reconcile -q <"$WORK/in.yaml" >"$WORK/world.yaml"
"$OI" cluster admin-kubeconfig --cluster s1 -f "$WORK/world.yaml" -o "$WORK/admin.kubeconfig"
python3 - "$KEYS" >"$WORK/objects.json" <<'PY'
import json, sys
n = int(sys.argv[1])
items = [{"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": f"k{i}", "namespace": "default"},
          "data": {"v": "x" * 100}} for i in range(n)]
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
start=$(now)
kubectl --kubeconfig "$WORK/admin.kubeconfig" --request-timeout=600s create --validate=false -f "$WORK/objects.json" >/dev/null
echo "$KEYS objects written through the API in $(elapsed "$start")s"
: >"$WORK/snap" ; : >"$WORK/restore"
for i in $(seq 1 "$RUNS"); do
  start=$(now)
  "$OI" cluster snapshot --to "$WORK/s1-$i.oisnap" <"$WORK/world.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  t=$(elapsed "$start"); echo "$t" >>"$WORK/snap"
  size=$(stat -c %s "$WORK/s1-$i.oisnap")
  start=$(now)
  "$OI" cluster restore -q --from "$WORK/s1-$i.oisnap" <"$WORK/world.yaml" >"$WORK/restored.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  r=$(elapsed "$start"); echo "$r" >>"$WORK/restore"
  cp "$WORK/restored.yaml" "$WORK/world.yaml"
  echo "run $i: snapshot ${t}s ($size bytes), restore in place ${r}s"
done
count=$(kubectl --kubeconfig "$WORK/admin.kubeconfig" get configmaps -n default -o name | grep -c '^configmap/k[0-9]' || true)
echo "after the restores: $count of $KEYS objects"
echo "snapshot of $KEYS objects: median $(median <"$WORK/snap")s, $size bytes; restore in place: median $(median <"$WORK/restore")s over $RUNS runs"

# 3. CA rotation, when built.
if "$OI" cluster rotate-ca --help >/dev/null 2>&1; then
  : >"$WORK/rotate"
  for i in $(seq 1 "$RUNS"); do
    start=$(now)
    "$OI" cluster rotate-ca -q --cluster s1 --ca all <"$WORK/world.yaml" >"$WORK/rotated.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
    t=$(elapsed "$start"); echo "$t" >>"$WORK/rotate"
    cp "$WORK/rotated.yaml" "$WORK/world.yaml"
    echo "rotation run $i: ${t}s"
  done
  echo "full CA rotation (every CA and the service-account key) of a 3-replica cluster: median $(median <"$WORK/rotate")s over $RUNS runs"
fi
