#!/usr/bin/env bash
# The main job on local hypervisors: 3 private + 1 public real hypervisors (network namespaces,
# each with its own containerd behind a mutual-TLS front), a 3-replica cluster reconciled onto
# them (etcd, API servers, ingress running), its admin kubeconfig, and a first kubectl call
# through the ingress. Needs root and scripts/setup.sh done first (the offline images).
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

echo "demo: building oi and oi-local-hypervisor-set" >&2
cargo build --locked --quiet -p oi-cli -p oi-local-hypervisor-set
mkdir -p "$dir"

if "$bin/oi-local-hypervisor-set" list | awk 'NR > 1 { print $1 }' | grep -qx "$set_name"; then
  echo "demo: the local hypervisor set '$set_name' exists already;" \
    "destroy it with: $bin/oi-local-hypervisor-set destroy --name $set_name" >&2
  exit 1
fi

"$bin/oi-local-hypervisor-set" create --name "$set_name" --size-private 3 --size-public 1 --tcp \
  -o "$dir/hypervisors.yaml"
"$bin/oi" cluster inject --name "$set_name" --control-plane-replicas 3 \
  -f "$dir/hypervisors.yaml" -o "$dir/world.yaml"
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

cat >&2 <<EOT
demo: hypervisors   $dir/hypervisors.yaml
demo: world         $dir/world.yaml
demo: kubeconfig    $dir/admin.kubeconfig
demo: reach it      kubectl --kubeconfig $dir/admin.kubeconfig version
demo: tear down     $bin/oi-local-hypervisor-set destroy --name $set_name
EOT
