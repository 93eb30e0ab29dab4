#!/usr/bin/env python3
"""Compare two builds of the in-memory benchmark on the same cells, alternating in one run.

Each round runs both benchmarks once with `--json` (the order swapped every round: A B,
B A, ...), so drift of a shared, noisy machine falls on both alike. Per cell it prints
the median Mpps of each side over the rounds, their ratio after/before, and the median
of the per-round ratios (each round's two runs are neighbours in time, so this one is
less moved by load that changes slowly); the per-round figures follow, for judging the
spread.

Cells: NAT44 64 B 1 worker 8192 flows (the frame table's first row), NAT44 cores 1 and
2 (64 B, 8192 flows), NAT64 6->4 and 4->6 at 8192 flows on 1 and 2 workers.

    scripts/bench_compare.py --before '/tmp/quicknat-before bench' \\
        --after target/release/quicknat-bench --rounds 5 -- --quick --seconds 1

Arguments after `--` go to both benchmarks (default: --quick --seconds 1 --workers 2
--rounds 1). Exit status 1 when a cell's ratio is below --floor (default 0.95).
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys


def cells(report):
    """The compared figures of one `--json` report, by cell name."""
    out = {}
    frames = report.get("frames", [])
    if frames:
        out["NAT44 64 B, 1 worker, 8192 flows"] = frames[0]["mpps"]
    for i, mpps in enumerate(report.get("cores", [])[:2]):
        out[f"NAT44 cores, {i + 1} worker{'s' if i else ''}"] = mpps
    for row in report.get("nat64", []):
        if row["flows"] != 8192:
            continue
        w = row["workers"]
        out[f"NAT64 6->4, {w} worker{'s' if w > 1 else ''}, 8192 flows"] = row["v6_to_v4_mpps"]
        out[f"NAT64 4->6, {w} worker{'s' if w > 1 else ''}, 8192 flows"] = row["v4_to_v6_mpps"]
    return out


def run(cmd, args):
    """One benchmark run; its report."""
    p = subprocess.run(cmd + ["--json"] + args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return json.loads(p.stdout)


def median(v):
    """The upper middle value (the benchmark's own rule, bench::stats::median)."""
    v = sorted(v)
    return v[len(v) // 2] if v else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the before benchmark command")
    ap.add_argument("--after", required=True, help="the after benchmark command")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    ap.add_argument("--floor", type=float, default=0.95, help="lowest acceptable ratio")
    ap.add_argument("bench_args", nargs="*", help="arguments for both (after --)")
    a = ap.parse_args()
    args = a.bench_args or ["--quick", "--seconds", "1", "--workers", "2", "--rounds", "1"]
    sides = {"before": shlex.split(a.before), "after": shlex.split(a.after)}
    got = {"before": [], "after": []}
    for r in range(a.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        for side in order:
            rep = run(sides[side], args)
            got[side].append(cells(rep))
            print(f"round {r + 1}/{a.rounds} {side}: "
                  + ", ".join(f"{v:.2f}" for v in got[side][-1].values()), file=sys.stderr)
    names = list(got["after"][0].keys())
    print(f"before: {a.before}\nafter:  {a.after}\nargs:   {shlex.join(args)}; "
          f"{a.rounds} rounds, alternating")
    print("\n| cell | before Mpps (median) | after Mpps (median) | after/before "
          "| median of round ratios |")
    print("|---|---|---|---|---|")
    low = []
    for n in names:
        b = median([c.get(n, 0.0) for c in got["before"]])
        f = median([c.get(n, 0.0) for c in got["after"]])
        ratio = f / b if b > 0 else float("nan")
        paired = median([x.get(n, 0.0) / y[n] for x, y in zip(got["after"], got["before"])
                         if y.get(n, 0.0) > 0])
        if not ratio >= a.floor:
            low.append(n)
        print(f"| {n} | {b:.2f} | {f:.2f} | {ratio:.3f}x | {paired:.3f}x |")
    print("\nper round (Mpps):")
    for n in names:
        for side in ("before", "after"):
            vals = " ".join(f"{c.get(n, 0.0):6.2f}" for c in got[side])
            spread = statistics.pstdev([c.get(n, 0.0) for c in got[side]])
            print(f"  {n:38} {side:6} {vals}  (sd {spread:.2f})")
    if low:
        print(f"\nbelow {a.floor}x: {', '.join(low)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
