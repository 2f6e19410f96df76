#!/usr/bin/env bash
# The main job on local hypervisors: 3 private + 1 public real hypervisors (network namespaces,
# each with its own containerd behind a mutual-TLS front) and a worker behind NAT, a 3-replica
# cluster with its VPN reconciled onto them (etcd, API servers, ingress and WireGuard endpoint
# running), its admin kubeconfig, kubectl through the ingress, and the worker joining with
# `oi node join` (its kubelet the stand-in), reached by the API servers through the VPN.
# Needs root and scripts/setup.sh done first (the offline images).
#
#   OI_DEMO_SET   name of the local hypervisor set   (default: demo)
#   OI_DEMO_DIR   where manifests and kubeconfig go  (default: target/demo)
set -euo pipefail
cd "$(dirname "$0")/.."
# Everything this script writes holds private keys (the hypervisors' CRI client keys, every
# CA of the cluster, the admin's key): files are private from their creation. oi and
# oi-local-hypervisor-set create theirs with mode 0600 through -o; the umask covers the rest.
umask 077

set_name=${OI_DEMO_SET:-demo}
dir=${OI_DEMO_DIR:-target/demo}
bin=target/debug

echo "demo: building oi, oi-local-hypervisor-set and the kube stand-in" >&2
cargo build --locked --quiet -p oi-cli -p oi-local-hypervisor-set -p oi-kube-standin
mkdir -p "$dir"

if "$bin/oi-local-hypervisor-set" list | awk 'NR > 1 { print $1 }' | grep -qx "$set_name"; then
  echo "demo: the local hypervisor set '$set_name' exists already;" \
    "destroy it with: $bin/oi-local-hypervisor-set destroy --name $set_name" >&2
  exit 1
fi

"$bin/oi-local-hypervisor-set" create --name "$set_name" --size-private 3 --size-public 1 --tcp \
  --workers 1 -o "$dir/hypervisors.yaml"
"$bin/oi" cluster inject --name "$set_name" --control-plane-replicas 3 --vpn-enabled \
  -f "$dir/hypervisors.yaml" -o "$dir/world.yaml"
# A join token (printed on stderr, kept out of the world's stdout) for the worker.
"$bin/oi" join-token inject --cluster "$set_name" -f "$dir/world.yaml" -o "$dir/world.yaml" \
  2>"$dir/join-token"
# The offline image set lives under localhost/oneinfra (see HACKING.md).
"$bin/oi" reconcile --image-repository localhost/oneinfra --max-wait 120s \
  -f "$dir/world.yaml" -o "$dir/world.yaml"
"$bin/oi" cluster admin-kubeconfig -f "$dir/world.yaml" -o "$dir/admin.kubeconfig"
echo "demo: kubectl --kubeconfig $dir/admin.kubeconfig version" >&2
kubectl --kubeconfig "$dir/admin.kubeconfig" version >&2
# The cluster's API (the kube stand-in's, objects in the cluster's etcd) through the ingress.
kubectl_demo() {
  echo "demo: kubectl $*" >&2
  kubectl --kubeconfig "$dir/admin.kubeconfig" --cache-dir "$dir/kube-cache" "$@" >&2
}
kubectl_demo get namespaces
kubectl_demo auth whoami

# The worker, behind NAT (no hypervisor can reach it), joins: oi node join asks, the next
# reconcile answers, the worker brings its WireGuard interface up and writes its kubelet's
# files under its root directory; the kubelet (the stand-in) registers with its VPN address.
worker="$set_name-worker-1"
root=$(realpath "$dir")/$worker
mkdir -p "$root"
"$bin/oi" cluster apiserver-ca -f "$dir/world.yaml" >"$dir/apiserver-ca.pem"
endpoint=$(awk '/apiServerEndpoint:/ { print $2; exit }' "$dir/world.yaml")
ln -sf "$(realpath "$bin/kube-standin")" "$dir/kubelet"
echo "demo: oi node join on $worker (behind NAT)" >&2
OI_JOIN_TOKEN=$(tail -n 1 "$dir/join-token") "$bin/oi-local-hypervisor-set" exec \
  --name "$set_name" "$worker" -- "$(realpath "$bin/oi")" node join --nodename worker-1 \
  --apiserver-endpoint "$endpoint" --apiserver-ca-cert-file "$(realpath "$dir/apiserver-ca.pem")" \
  --root-dir "$root" --kubelet-binary "$(realpath -s "$dir/kubelet")" \
  --container-runtime-endpoint "unix:///run/oi-local-hypervisor-set/$set_name/$worker/cri.sock" \
  --timeout 60s 2>"$dir/join.log" &
join=$!
# Answered by the next reconcile (oi-manager answers as requests come).
until ! kill -0 "$join" 2>/dev/null; do
  "$bin/oi" reconcile --image-repository localhost/oneinfra --quiet \
    -f "$dir/world.yaml" -o "$dir/world.yaml"
done
wait "$join" || { cat "$dir/join.log" >&2; exit 1; }
cat "$dir/join.log" >&2
kubelet_command=$(tail -n 1 "$dir/join.log")
# Detached: it keeps running after this script; destroying the set stops it.
KUBE_STANDIN_VERSION=v1.37.1 setsid "$bin/oi-local-hypervisor-set" exec --name "$set_name" \
  "$worker" -- $kubelet_command >"$dir/kubelet.log" 2>&1 </dev/null &
for _ in $(seq 1 60); do
  kubectl --kubeconfig "$dir/admin.kubeconfig" get node worker-1 >/dev/null 2>&1 && break
  sleep 0.5
done
kubectl_demo get nodes -o wide
kubectl_demo get --raw /api/v1/nodes/worker-1/proxy/healthz
echo >&2
# One more reconcile notes the worker's Node registered; then the fleet as the world file has
# it (oi get reads the world alone: nothing is contacted).
"$bin/oi" reconcile --image-repository localhost/oneinfra --quiet \
  -f "$dir/world.yaml" -o "$dir/world.yaml"
echo "demo: oi get clusters,nodes,hypervisors" >&2
"$bin/oi" get clusters -f "$dir/world.yaml" >&2
"$bin/oi" get nodes -f "$dir/world.yaml" >&2
"$bin/oi" get hypervisors -f "$dir/world.yaml" >&2
echo >&2

cat >&2 <<EOT
demo: hypervisors   $dir/hypervisors.yaml
demo: world         $dir/world.yaml
demo: kubeconfig    $dir/admin.kubeconfig
demo: worker        $worker (behind NAT): $root; run there with $bin/oi-local-hypervisor-set exec --name $set_name $worker -- COMMAND
demo: reach it      kubectl --kubeconfig $dir/admin.kubeconfig version
demo: tear down     $bin/oi-local-hypervisor-set destroy --name $set_name
EOT
