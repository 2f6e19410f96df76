#!/usr/bin/env bash
# Benchmarks workers joining a VPN cluster on real local hypervisors (root, containerd,
# haproxy, wireguard-go, iptables, the images): workers behind a NAT router run
# `oi node join`, an `oi reconcile` loop answers (as oi-manager's join watch would), the
# kubelet stand-in starts with the printed command.
#   1. `oi node join` start to Node Ready, one worker at a time, median of RUNS (default 5);
#   2. AT_ONCE workers (default 20) joining at once: time to the last Node Ready;
#   3. a no-op `oi reconcile` over 10 converged VPN clusters with 5 joined workers each
#      (no writes expected), median of RUNS.
# Usage: cargo build --release -p oi-cli -p oi-local-hypervisor-set -p oi-kube-standin &&
#        benches/join.sh [RUNS] [AT_ONCE]
# BIN_DIR (default target/release) holds `oi`, `oi-local-hypervisor-set` and `kube-standin`.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
AT_ONCE=${2:-20}
BIN_DIR=$(realpath "${BIN_DIR:-target/release}")
OI="$BIN_DIR/oi"
LHS="$BIN_DIR/oi-local-hypervisor-set"
for b in "$OI" "$LHS" "$BIN_DIR/kube-standin"; do
  [ -x "$b" ] || { echo "missing binary $b (cargo build --release -p oi-cli -p oi-local-hypervisor-set -p oi-kube-standin, or set BIN_DIR)" >&2; exit 1; }
done
export OI_IMAGE_REPOSITORY=localhost/oneinfra
export OI_IMAGES_DIR=${OI_IMAGES_DIR:-target/oi-images}
umask 077
SET="jbench$$"
WORK=$(mktemp -d)
WORKERS=$((RUNS + AT_ONCE))
cleanup() {
  rm -f "$WORK/looping"
  # KEEP=1 keeps the set and the files, to look at a failure.
  if [ "${KEEP:-}" = 1 ]; then echo "kept: set $SET, files in $WORK" >&2; return; fi
  "$LHS" destroy --name "$SET" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { printf '%.3f' "$(echo "$(now) - $1" | bc)"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ln -s "$BIN_DIR/kube-standin" "$WORK/kubelet"

start=$(now)
"$LHS" create --name "$SET" --size-private 1 --size-public 1 --workers "$WORKERS" \
  -o "$WORK/hv.yaml" 2>"$WORK/create.log"
echo "set $SET: 1 private + 1 public hypervisors, $WORKERS workers behind NAT, in $(elapsed "$start")s"

# Answers join requests while it runs, as oi-manager's watch would.
reconcile_loop() {
  touch "$WORK/looping"
  while [ -f "$WORK/looping" ]; do
    "$OI" reconcile -q -f "$WORK/world.yaml" -o "$WORK/world.yaml" 2>>"$WORK/loop.log" || true
  done
}
stop_loop() { rm -f "$WORK/looping"; wait "$LOOP" 2>/dev/null || true; }

# join CLUSTER NODE WORKER INTERFACE PORT: oi node join on WORKER, then its kubelet
# (kubelet ports PORT and PORT+1: several kubelets share a worker in part 3).
join() {
  local cluster=$1 node=$2 worker=$3 iface=$4 port=$5
  local root="$WORK/roots/$cluster-$node"
  mkdir -p "$root"
  local endpoint
  endpoint=$(awk -v c="$cluster" '/^  name:/ {n=$2} /apiServerEndpoint:/ && n==c {print $2; exit}' "$WORK/world.yaml")
  OI_JOIN_TOKEN=$(cat "$WORK/$cluster.token") "$LHS" exec --name "$SET" "$SET-worker-$worker" -- \
    "$OI" node join --nodename "$node" --apiserver-endpoint "$endpoint" \
    --apiserver-ca-cert-file "$WORK/$cluster.ca" --root-dir "$root" \
    --kubelet-binary "$WORK/kubelet" --vpn-interface "$iface" --timeout 120s \
    2>"$root/join.log" || { cat "$root/join.log" >&2; return 1; }
  KUBE_STANDIN_VERSION=v1.37.1 setsid "$LHS" exec --name "$SET" "$SET-worker-$worker" -- \
    $(tail -n 1 "$root/join.log") --port="$port" --healthz-port="$((port + 1))" \
    >"$root/kubelet.log" 2>&1 </dev/null &
  # Not a job of this shell: `wait` below waits for joins, not kubelets.
  disown $!
}

# ready CLUSTER NODE...: waits until every NODE is Ready.
ready() {
  local cluster=$1; shift
  local want=" $* "
  for _ in $(seq 1 1200); do
    local n
    n=$(kubectl --kubeconfig "$WORK/$cluster.kubeconfig" get nodes \
      -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null \
      | awk -v want="$want" '$2 == "True" && index(want, " " $1 " ") { n++ } END { print n + 0 }')
    [ "$n" -eq "$#" ] && return 0
    sleep 0.05
  done
  echo "nodes $* of $cluster not Ready" >&2; return 1
}

# cluster NAME: a VPN cluster with a join token, its CA and admin kubeconfig.
add_cluster() {
  "$OI" cluster inject --name "$1" --vpn-enabled -f "$WORK/world.yaml" -o "$WORK/world.yaml"
  "$OI" join-token inject --cluster "$1" -f "$WORK/world.yaml" -o "$WORK/world.yaml" 2>"$WORK/$1.token.log"
  tail -n 1 "$WORK/$1.token.log" >"$WORK/$1.token"
}
finish_cluster() {
  "$OI" cluster apiserver-ca --cluster "$1" -f "$WORK/world.yaml" >"$WORK/$1.ca"
  "$OI" cluster admin-kubeconfig --cluster "$1" -f "$WORK/world.yaml" -o "$WORK/$1.kubeconfig"
}

cp "$WORK/hv.yaml" "$WORK/world.yaml"
add_cluster c1
"$OI" reconcile -q -f "$WORK/world.yaml" -o "$WORK/world.yaml"
finish_cluster c1
reconcile_loop & LOOP=$!

# 1. one at a time.
: >"$WORK/one"
for i in $(seq 1 "$RUNS"); do
  start=$(now)
  join c1 "one$i" "$i" "jb$$o$i" 10250
  ready c1 "one$i"
  t=$(elapsed "$start")
  echo "$t" >>"$WORK/one"
  echo "join $i: ${t}s to Ready"
done
echo "oi node join to Node Ready: median $(median <"$WORK/one")s over $RUNS joins"

# 2. AT_ONCE at once.
nodes=()
start=$(now)
for i in $(seq 1 "$AT_ONCE"); do
  w=$((RUNS + i))
  nodes+=("many$i")
  join c1 "many$i" "$w" "jb$$m$i" 10250 &
done
wait $(jobs -p | grep -v "^$LOOP$") 2>/dev/null || true
ready c1 "${nodes[@]}"
echo "$AT_ONCE workers joining at once: the last Ready after $(elapsed "$start")s"
stop_loop
"$OI" cluster delete --name c1 -f "$WORK/world.yaml" -o "$WORK/world.yaml"
"$OI" reconcile -q -f "$WORK/world.yaml" -o "$WORK/world.yaml"

# 3. ten converged VPN clusters with five workers each.
for k in $(seq 1 10); do add_cluster "v$k"; done
"$OI" reconcile -q --max-wait 300s -f "$WORK/world.yaml" -o "$WORK/world.yaml"
for k in $(seq 1 10); do finish_cluster "v$k"; done
reconcile_loop & LOOP=$!
for k in $(seq 1 10); do
  for i in $(seq 1 5); do
    join "v$k" "w$i" "$i" "jb$$v${k}w$i" "$((11000 + 2 * k))" &
  done
done
wait $(jobs -p | grep -v "^$LOOP$") 2>/dev/null || true
for k in $(seq 1 10); do ready "v$k" w1 w2 w3 w4 w5; done
stop_loop
# Two passes note the Nodes registered; from then on nothing changes.
"$OI" reconcile -q -f "$WORK/world.yaml" -o "$WORK/world.yaml"
: >"$WORK/noop"
for i in $(seq 1 "$RUNS"); do
  start=$(now)
  "$OI" reconcile -f "$WORK/world.yaml" -o "$WORK/world.yaml" 2>"$WORK/err" || { cat "$WORK/err" >&2; exit 1; }
  t=$(elapsed "$start")
  echo "$t" >>"$WORK/noop"
  echo "no-op $i: ${t}s  $(grep '^reconciled ' "$WORK/err" | tail -1)"
done
echo "no-op reconcile over 10 converged VPN clusters with 5 workers each: median $(median <"$WORK/noop")s over $RUNS runs"
