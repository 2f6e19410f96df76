#!/usr/bin/env bash
# Times `oi cluster inject` as a whole process (exec, parse, PKI, prepare, write), one
# cluster per run, and prints the median, minimum and maximum in milliseconds.
#
#   crates/oi/benches/inject.sh [RUNS] [OI]
#
# RUNS defaults to 50; OI to the release binary (built first with `cargo build --release -p
# oi-cli`, in $CARGO_TARGET_DIR or ./target). Two series:
#   fresh:   each run injects a cluster into the four fixture hypervisors alone;
#   growing: each run injects one more cluster into the previous run's output, so the last
#            run reads and writes a world of RUNS clusters.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
runs="${1:-50}"
oi="${2:-${CARGO_TARGET_DIR:-$root/target}/release/oi}"
fixture="$here/../tests/fixtures/hypervisors.yaml"

if [[ ! -x "$oi" ]]; then
    echo "no oi binary at $oi: run cargo build --release -p oi-cli" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# Prints "median min max" (ms, 2 decimals) of the nanosecond durations on stdin.
summarize() {
    sort -n | awk '{ d[NR] = $1 } END {
        m = (NR % 2) ? d[(NR + 1) / 2] : (d[NR / 2] + d[NR / 2 + 1]) / 2
        printf "median %.2f ms  min %.2f ms  max %.2f ms  (%d runs)\n", m / 1e6, d[1] / 1e6, d[NR] / 1e6, NR
    }'
}

# One timed run: `oi cluster inject --name NAME` from file IN to file OUT.
timed_inject() {
    local name="$1" in="$2" out="$3" start end
    start=$(date +%s%N)
    "$oi" cluster inject --name "$name" -f "$in" -o "$out"
    end=$(date +%s%N)
    echo $((end - start))
}

: > "$work/fresh"
for i in $(seq 1 "$runs"); do
    timed_inject "bench-$i" "$fixture" "$work/out.yaml" >> "$work/fresh"
done

: > "$work/growing"
cp "$fixture" "$work/world.yaml"
for i in $(seq 1 "$runs"); do
    timed_inject "bench-$i" "$work/world.yaml" "$work/world.yaml" >> "$work/growing"
done
clusters=$(grep -c '^kind: Cluster$' "$work/world.yaml")

echo "oi cluster inject, whole process, $(nproc) cpus, load $(cut -d' ' -f1 /proc/loadavg)"
printf 'fresh    (4 hypervisors):                    '; summarize < "$work/fresh"
printf 'growing  (up to %4d clusters, last world %s): ' "$clusters" "$(du -h "$work/world.yaml" | cut -f1)"
summarize < "$work/growing"
