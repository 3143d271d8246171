"""Summarizes one decode step from an Nsight Compute CSV (`ncu --metrics
gpu__time_duration.sum --csv --print-units base ...`, optionally xz'd): the
kernels between the last two argmax reductions (each step ends with one),
grouped by kernel, with their summed device time.

    python3 scripts/ncu_step_summary.py ncu.csv[.xz]
"""

import collections
import csv
import lzma
import re
import sys


def main():
    path = sys.argv[1]
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as fh:
        rows = [r for r in csv.reader(fh) if r and r[0].isdigit()]
    # Columns: ID, process, name, host, kernel name, ..., metric value last.
    kernels = [(r[4], float(r[-1].replace(",", ""))) for r in rows]
    ends = [i for i, (name, _) in enumerate(kernels) if "arg_reduce" in name]
    if len(ends) < 2:
        raise SystemExit(f"{path}: fewer than two steps (argmax reductions) profiled")
    step = kernels[ends[-2] + 1 : ends[-1] + 1]
    total = sum(d for _, d in step)
    print(f"{len(kernels)} kernels profiled; the last step: {len(step)} kernels, {total / 1e6:.3f} ms of device time")
    by = collections.defaultdict(lambda: [0, 0.0])
    for name, d in step:
        key = re.sub(r"<.*", "", name.replace("void ", ""))
        by[key][0] += 1
        by[key][1] += d
    for key, (n, d) in sorted(by.items(), key=lambda kv: -kv[1][1]):
        print(f"{d / 1e3:9.1f} us {n:5d}  {key}")


if __name__ == "__main__":
    main()
