#!/usr/bin/env bash
# Times `oi cluster inject` as a whole process (exec, parse, PKI, prepare, write), one
# cluster per run, and prints the median, minimum and maximum wall time in milliseconds, and
# the mean CPU time (user + sys, summed over the runs then divided: per-run CPU accounting
# is too coarse) which a loaded machine disturbs much less than wall time.
#
#   crates/oi/benches/inject.sh [RUNS] [OI]
#
# RUNS defaults to 50 (needs bash 5 for $EPOCHREALTIME); OI to the release binary (built first with `cargo build --release -p
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

# Saves the user and sys CPU times of this shell's finished children to FILE. `times` must
# run in this shell: a command substitution or pipeline subshell has no children.
save_children_times() {
    times > "$1"
}

# Prints the mean CPU ms per run between two files of save_children_times.
cpu_ms() {
    local before after
    before=$(tail -n 1 "$1")
    after=$(tail -n 1 "$2")
    awk -v before="$before" -v after="$after" -v runs="$runs" 'function secs(t,   m, s) {
        m = t; sub(/m.*/, "", m); s = t; sub(/^[0-9]+m/, "", s); sub(/s$/, "", s); return m * 60 + s
    } BEGIN {
        split(before, b, " "); split(after, a, " ")
        printf "%.2f", (secs(a[1]) + secs(a[2]) - secs(b[1]) - secs(b[2])) * 1000 / runs
    }'
}

# One timed run: `oi cluster inject --name NAME` from file IN to file OUT.
timed_inject() {
    local name="$1" in="$2" out="$3" start end
    # $EPOCHREALTIME (bash 5) rather than `date`: no extra process in the CPU figures.
    start=${EPOCHREALTIME/./}
    "$oi" cluster inject --name "$name" -f "$in" -o "$out"
    end=${EPOCHREALTIME/./}
    echo $(((end - start) * 1000))
}

: > "$work/fresh"
save_children_times "$work/t0"
for i in $(seq 1 "$runs"); do
    timed_inject "bench-$i" "$fixture" "$work/out.yaml" >> "$work/fresh"
done
save_children_times "$work/t1"
fresh_cpu=$(cpu_ms "$work/t0" "$work/t1")

: > "$work/growing"
cp "$fixture" "$work/world.yaml"
save_children_times "$work/t0"
for i in $(seq 1 "$runs"); do
    timed_inject "bench-$i" "$work/world.yaml" "$work/world.yaml" >> "$work/growing"
done
save_children_times "$work/t1"
growing_cpu=$(cpu_ms "$work/t0" "$work/t1")
clusters=$(grep -c '^kind: Cluster$' "$work/world.yaml")

echo "oi cluster inject, whole process, $(nproc) cpus, load $(cut -d' ' -f1 /proc/loadavg)"
printf 'fresh   (4 hypervisors):          wall '; summarize < "$work/fresh"
printf '                                  cpu  mean %s ms (user+sys)\n' "$fresh_cpu"
printf 'growing (to %d clusters, %s): wall ' "$clusters" "$(du -h "$work/world.yaml" | cut -f1)"
summarize < "$work/growing"
printf '                                  cpu  mean %s ms (user+sys)\n' "$growing_cpu"
