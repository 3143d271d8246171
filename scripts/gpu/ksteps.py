"""Where a decode step's time goes, from a ktrace trace (scripts/gpu/ktrace.c):
the trace cut into steps at each end of the step's last kernel (by default
the argmax that picks the next tokens), and per step

  span     from one step's end to the next's
  kernels  time some kernel ran (the union of their intervals)
  idle     span - kernels: the device waiting on the host
  launches host time inside CUDA's launch calls (driver and runtime), and
           their count
  sync     host time inside CUDA's waits

then the median of those over the steps (the first SKIP steps dropped:
prefill, warm-up), and the kernels' time a step by kernel (median of the
per-step sums), largest first.

    python3 scripts/gpu/ksteps.py TRACE [--boundary REGEX] [--skip 3] [--top 20]

With --by-kernel it cuts nothing: each kernel's count and median duration
over the whole trace (for a benchmark of one kernel, run alone). With
--timeline REGEX it cuts nothing either: the kernels whose name REGEX
matches, and the device's busy time, by second since the trace's first
kernel (when a kernel's time was spent: loading, warm-up or serving).
"""

import argparse
import re
import statistics
import subprocess
from collections import defaultdict


def demangle(names):
    """Names through c++filt where it exists, as they were otherwise."""
    try:
        p = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
        out = p.stdout.splitlines()
        if len(out) == len(names):
            return out
    except (OSError, subprocess.CalledProcessError):
        pass
    return names


def short(name):
    """A kernel's name without template arguments, parameters or namespaces."""
    depth, s = 0, []
    for ch in name:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            s.append(ch)
    base = "".join(s).strip().split(" ")[-1]
    return base.split("::")[-1] or name[:60]


def union(intervals):
    total, end = 0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def timeline(kernels, short_of, pick):
    """Per second since the first kernel: the kernels pick matches (count and
    total time) and every kernel's total time."""
    t0 = kernels[0][0]
    n, picked, busy = defaultdict(int), defaultdict(int), defaultdict(int)
    for s, e, name in kernels:
        sec = (s - t0) // 10**9
        busy[sec] += e - s
        if pick.search(short_of[name]):
            n[sec] += 1
            picked[sec] += e - s
    print(f"second  matching  their ms  all kernels' ms  (matching: {pick.pattern})")
    for sec in sorted(busy):
        print(f"{sec:6d}  {n[sec]:8d}  {picked[sec] / 1e6:8.1f}  {busy[sec] / 1e6:15.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--boundary", default=r"arg_?reduce|ArgReduce|argmax", help="regex: a step's last kernel")
    ap.add_argument("--skip", type=int, default=3, help="steps dropped at the start")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--by-kernel", action="store_true", help="each kernel's count and median duration")
    ap.add_argument("--timeline", metavar="REGEX", help="matching kernels and busy time by second")
    args = ap.parse_args()
    kernels, driver = [], []
    with open(args.trace) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 4)
            if parts[0] == "K" and len(parts) == 5:
                kernels.append((int(parts[1]), int(parts[2]), parts[4]))
            elif parts[0] in ("D", "R") and len(parts) == 5:
                driver.append((int(parts[1]), int(parts[2]), parts[4]))
    kernels.sort()
    driver.sort()
    names = sorted({k[2] for k in kernels})
    short_of = dict(zip(names, (short(n) for n in demangle(names))))
    if args.by_kernel:
        durations = defaultdict(list)
        for s, e, n in kernels:
            durations[short_of[n]].append(e - s)
        print(f"{args.trace}: {len(kernels)} kernels; count, median and total by kernel:")
        for n, v in sorted(durations.items(), key=lambda kv: -sum(kv[1]))[: args.top]:
            print(f"  {len(v):7d}  {statistics.median(v) / 1e3:9.2f} us  {sum(v) / 1e6:9.3f} ms  {n}")
        return
    if args.timeline:
        timeline(kernels, short_of, re.compile(args.timeline, re.I))
        return
    boundary = re.compile(args.boundary, re.I)
    ends = [e for _, e, n in kernels if boundary.search(short_of[n]) or boundary.search(n)]
    if len(ends) < args.skip + 2:
        raise SystemExit(f"ksteps: {len(ends)} step ends in {args.trace} (boundary {args.boundary!r})")
    steps = list(zip(ends, ends[1:]))[args.skip:]
    rows = defaultdict(list)
    per_step = []  # per step, each kernel's time
    ki = di = 0
    for lo, hi in steps:
        while ki < len(kernels) and kernels[ki][1] <= lo:
            ki += 1
        while di < len(driver) and driver[di][1] <= lo:
            di += 1
        mine, per = [], defaultdict(int)
        j = ki
        while j < len(kernels) and kernels[j][0] < hi:
            s, e, n = kernels[j]
            s, e = max(s, lo), min(e, hi)
            if e > s:
                mine.append((s, e))
                per[short_of[n]] += e - s
            j += 1
        launch = sync = nlaunch = 0
        j = di
        while j < len(driver) and driver[j][0] < hi:
            s, e, n = driver[j]
            d = min(e, hi) - max(s, lo)
            if "Launch" in n:
                launch += d
                nlaunch += 1
            elif "Synchronize" in n or "Wait" in n or "Query" in n:
                sync += d
            j += 1
        busy = union(mine)
        rows["span"].append(hi - lo)
        rows["kernels"].append(busy)
        rows["idle"].append(hi - lo - busy)
        rows["launches"].append(launch)
        rows["sync"].append(sync)
        rows["kernel count"].append(len(mine))
        rows["launch count"].append(nlaunch)
        per_step.append(per)
    print(f"{args.trace}: {len(steps)} steps (first {args.skip} dropped), medians:")
    for k, v in rows.items():
        m = statistics.median(v)
        print(f"  {k:13s} {m:10.0f}" if "count" in k else f"  {k:13s} {m / 1e6:10.3f} ms")
    print("  kernels a step, by kernel (median ms, share of span):")
    span = statistics.median(rows["span"])
    names = {n for per in per_step for n in per}
    medians = {n: statistics.median(per.get(n, 0) for per in per_step) for n in names}
    for n, m in sorted(medians.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"    {m / 1e6:8.3f}  {100 * m / span:5.1f} %  {n}")


if __name__ == "__main__":
    main()
