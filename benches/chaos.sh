#!/usr/bin/env bash
# Chaos on real local hypervisors (root, containerd, etcd, haproxy, the images): for SECONDS
# (default 600), faults injected at random under a 3-replica cluster while a client writes
# through the ingress every 100 ms: control plane pods removed, containerd killed, links
# down, `oi reconcile` killed mid-run, one hypervisor lost for good and removed. After each,
# `oi reconcile` brings the cluster back to full strength (ready, 3 voting members).
# Invariants, checked by the run: no acknowledged write lost, back to full strength after
# each fault, nothing leaked. The figures (faults by kind, time back to full strength,
# failed writes) go to stdout and benches/results/chaos-<date>.txt.
# It is the e2e test `chaos` (which CI runs for 60 s) run longer; SEED replays a run.
# Usage: benches/chaos.sh [SECONDS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export OI_CHAOS_SECONDS=${1:-600}
[ -n "${2:-}" ] && export OI_CHAOS_SEED=$2
export OI_REQUIRE_REAL=1 RUST_MIN_STACK=8388608
cargo build --locked --quiet --workspace --bins
out=$(mktemp)
trap 'rm -f "$out"' EXIT
cargo nextest run --locked -p oi-e2e --test e2e chaos:: --no-capture 2>&1 | tee "$out" | grep '^chaos'
mkdir -p benches/results
result="benches/results/chaos-$(date -u +%F).txt"
{
  echo "# benches/chaos.sh $OI_CHAOS_SECONDS, $(nproc) cores, $(date -u +%FT%TZ)"
  grep '^chaos figures' "$out"
} >"$result"
echo "figures: $result"
