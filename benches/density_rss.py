#!/usr/bin/env python3
"""Memory of the processes in two network namespaces (a private and a public hypervisor),
by component, for benches/density.sh.

    density_rss.py CLUSTERS NEW UP_SECONDS NOOP_SECONDS NETNS_PRIVATE NETNS_PUBLIC
        prints one TSV row: clusters, new, up, noop, then `where:component=MiB` fields
    density_rss.py --report TSV PNG
        prints the table (Markdown) and draws the plot (matplotlib, when installed)
"""

import os
import sys

COMPONENTS = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "haproxy",
    "oi-vpn-endpoint",
    "containerd",
    "containerd-shim",
    "pause",
    "other",
]


def component(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return None
    name = os.path.basename(argv[0])
    if name in COMPONENTS:
        return name
    if name.startswith("containerd-shim"):
        return "containerd-shim"
    if "wireguard-go" in name:
        return "oi-vpn-endpoint"
    return "other"


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def sample(netns):
    totals = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") != netns:
                continue
        except OSError:
            continue
        c = component(entry)
        if c is None:
            continue
        totals[c] = totals.get(c, 0) + rss_kib(entry)
    return totals


def row(args):
    clusters, new, up, noop, ns_private, ns_public = args
    fields = [clusters, new, up, noop]
    for where, ns in (("private", ns_private), ("public", ns_public)):
        for c, kib in sorted(sample(ns).items()):
            fields.append(f"{where}:{c}={kib / 1024:.1f}")
    print("\t".join(fields))


def report(tsv, png):
    rows = []
    with open(tsv) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            mem = {}
            for p in parts[4:]:
                key, value = p.split("=")
                mem[key] = float(value)
            rows.append((int(parts[0]), int(parts[1]), float(parts[2]), float(parts[3]), mem))
    used = [c for c in COMPONENTS if any(f"private:{c}" in r[4] or f"public:{c}" in r[4] for r in rows)]
    print("| clusters | new ones ready in | no-op reconcile | private hypervisor RSS (MiB) | public hypervisor RSS (MiB) | per cluster (MiB) |")
    print("|---|---|---|---|---|---|")
    for clusters, new, up, noop, mem in rows:
        def side(where):
            parts = [f"{c} {mem[f'{where}:{c}']:.0f}" for c in used if f"{where}:{c}" in mem]
            total = sum(v for k, v in mem.items() if k.startswith(where + ":"))
            return f"{total:.0f}: " + ", ".join(parts)
        total = sum(mem.values())
        print(f"| {clusters} | {new} in {up:.1f} s | {noop:.2f} s | {side('private')} | {side('public')} | {total / clusters:.1f} |")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"(no plot: matplotlib is not installed; {png} not written)", file=sys.stderr)
        return
    xs = [r[0] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    bottom = [0.0] * len(rows)
    for where in ("private", "public"):
        for c in used:
            ys = [r[4].get(f"{where}:{c}", 0.0) for r in rows]
            if not any(ys):
                continue
            ax1.bar([str(x) for x in xs], ys, bottom=bottom, label=f"{where}: {c}")
            bottom = [b + y for b, y in zip(bottom, ys)]
    ax1.set_xlabel("single-replica clusters")
    ax1.set_ylabel("RSS (MiB)")
    ax1.set_title("memory by component (API server, controller-manager, scheduler: stand-in)")
    ax1.legend(fontsize=6)
    ax2.plot(xs, [r[2] for r in rows], marker="o", label="new clusters to ready (s)")
    ax2.plot(xs, [r[3] for r in rows], marker="o", label="no-op reconcile (s)")
    ax2.set_xlabel("single-replica clusters")
    ax2.set_ylabel("seconds")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    print(f"plot: {png}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        report(sys.argv[2], sys.argv[3])
    else:
        row(sys.argv[1:])
