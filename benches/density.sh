#!/usr/bin/env bash
# Density: how many control planes fit on one hypervisor. Single-replica clusters on one
# private and one public local hypervisor (root, containerd, haproxy, images), grown to each
# of COUNTS (default 1 10 25 50); at each step:
#   - the time of the `oi reconcile` that brings the new clusters up, until the last is ready;
#   - the time of a no-op `oi reconcile` over all of them;
#   - the resident memory (RSS) of every process in each hypervisor's network namespace, by
#     component (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, haproxy, the
#     VPN endpoint, containerd and its shims, pause), summed.
# Writes a table on stdout, and OUT.tsv and OUT.png (default target/density) with the plot.
# The API server, controller-manager and scheduler are the stand-in (testing/kube-standin): their
# memory says nothing of the real binaries'. etcd, haproxy, containerd are real.
# Usage: cargo build --release -p oi-cli -p oi-local-hypervisor-set && benches/density.sh [COUNTS...]
# BIN_DIR (default target/release) holds `oi` and `oi-local-hypervisor-set`; OUT the output
# prefix. The plot needs matplotlib: installed on first use into .tools/venv (which
# scripts/setup.sh makes) from the Python package registry.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(1 10 25 50)
BIN_DIR=${BIN_DIR:-target/release}
OUT=${OUT:-target/density}
OI="$BIN_DIR/oi"
LHS="$BIN_DIR/oi-local-hypervisor-set"
for b in "$OI" "$LHS"; do
  [ -x "$b" ] || { echo "missing binary $b (cargo build --release -p oi-cli -p oi-local-hypervisor-set, or set BIN_DIR)" >&2; exit 1; }
done
PY=.tools/venv/bin/python
MATPLOTLIB_VERSION=3.11.2
if [ -x "$PY" ]; then
  if ! "$PY" -c 'import matplotlib' 2>/dev/null; then
    echo "installing matplotlib==$MATPLOTLIB_VERSION into .tools/venv for the plot" >&2
    .tools/venv/bin/pip install --quiet --disable-pip-version-check "matplotlib==$MATPLOTLIB_VERSION" >&2 ||
      echo "matplotlib could not be installed: the table only" >&2
  fi
else
  PY=python3
fi
export OI_IMAGE_REPOSITORY=localhost/oneinfra
export OI_IMAGES_DIR=${OI_IMAGES_DIR:-target/oi-images}
SET="dens$$"
WORK=$(mktemp -d)
chmod 700 "$WORK"
cleanup() { "$LHS" destroy --name "$SET" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { printf '%.3f' "$(echo "$(now) - $1" | bc)"; }

"$LHS" create --name "$SET" --size-private 1 --size-public 1 >"$WORK/world.yaml" 2>"$WORK/create.log"
PRIVATE="$SET-private-1"
PUBLIC="$SET-public-1"
netns() { "$LHS" exec --name "$SET" "$1" -- readlink /proc/self/ns/net; }
NS_PRIVATE=$(netns "$PRIVATE")
NS_PUBLIC=$(netns "$PUBLIC")
echo "set $SET: 1 private + 1 public hypervisor ($(nproc) cores, $(free -g | awk '/^Mem:/{print $2}') GiB)"

mkdir -p "$(dirname "$OUT")"
: >"$OUT.tsv"
have=0
for target in "${COUNTS[@]}"; do
  for i in $(seq $((have + 1)) "$target"); do
    "$OI" cluster inject --name "d$i" <"$WORK/world.yaml" >"$WORK/tmp.yaml"
    mv "$WORK/tmp.yaml" "$WORK/world.yaml"
  done
  start=$(now)
  "$OI" reconcile --max-wait 600s <"$WORK/world.yaml" >"$WORK/out.yaml" 2>"$WORK/err" || { tail -5 "$WORK/err" >&2; exit 1; }
  up=$(elapsed "$start")
  cp "$WORK/out.yaml" "$WORK/world.yaml"
  start=$(now)
  "$OI" reconcile -q <"$WORK/world.yaml" >"$WORK/out.yaml" 2>"$WORK/err" || { tail -5 "$WORK/err" >&2; exit 1; }
  noop=$(elapsed "$start")
  "$PY" benches/density_rss.py "$target" "$((target - have))" "$up" "$noop" "$NS_PRIVATE" "$NS_PUBLIC" >>"$OUT.tsv"
  have=$target
  tail -1 "$OUT.tsv" | awk -F'\t' '{printf "%s clusters: %s new ready in %ss, no-op %ss\n", $1, $2, $3, $4}'
done
"$PY" benches/density_rss.py --report "$OUT.tsv" "$OUT.png"
