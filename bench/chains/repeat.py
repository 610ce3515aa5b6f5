#!/usr/bin/env python3
"""An operation's own work, told apart from time the machine took.

`chains_bench --timing op --clock cpu --slow-log FILE` (or `--mode index
--clock cpu --slow-log FILE`) writes every operation that took at least
`--slow-us` of thread CPU time, numbered in the run's order. The runs are
deterministic: the same seed gives the same operations on the same keys, so
an operation whose own work takes over 1 ms takes it in every run. Time the
machine takes from a running vCPU (the hypervisor, a page the kernel has to
find) lands on whichever operation happens to be running, and does not
repeat at the same one.

For each operation this takes the least time any run measured (an operation
absent from one run's log took under the threshold there) and reports, per
cause, how many passed 1 ms in each run and in every run, and the slowest
operations by that least time.

    bench/chains/repeat.py RUN1.tsv RUN2.tsv [RUN3.tsv ...]
"""

import sys
from collections import defaultdict

MS = 1_000_000


def read(path):
    ops = {}
    with open(path) as f:
        next(f)  # header
        for line in f:
            op, cause, ns = line.rstrip("\n").split("\t")
            ops[int(op)] = (cause, int(ns))
    return ops


def main(paths):
    if len(paths) < 2:
        sys.exit(__doc__)
    runs = [read(p) for p in paths]
    print(f"runs: {len(runs)}; operations logged per run: "
          + ", ".join(str(len(r)) for r in runs))
    over = [defaultdict(int) for _ in runs]
    for i, run in enumerate(runs):
        for cause, ns in run.values():
            if ns > MS:
                over[i][cause] += 1
    common = set(runs[0])
    for run in runs[1:]:
        common &= set(run)
    least = {}
    for op in common:
        causes = {run[op][0] for run in runs}
        if len(causes) != 1:
            sys.exit(f"operation {op} has causes {sorted(causes)}: the runs differ")
        least[op] = (runs[0][op][0], min(run[op][1] for run in runs))
    causes = sorted({c for run in runs for c, _ in run.values()})
    print("\n| cause | " + " | ".join(f"over 1 ms, run {i + 1}" for i in range(len(runs)))
          + " | over 1 ms in every run | slowest, least of the runs |")
    print("|---|" + "---|" * len(runs) + "---|---|")
    for cause in causes:
        mine = [ns for c, ns in least.values() if c == cause]
        repeat = sum(1 for ns in mine if ns > MS)
        worst = f"{max(mine) / 1000:.1f} us" if mine else "under the threshold"
        print(f"| {cause} | " + " | ".join(str(o[cause]) for o in over)
              + f" | {repeat} | {worst} |")
    print("\nslowest operations by their least time:")
    print("op\tcause\tleast us\t" + "\t".join(f"run {i + 1} us" for i in range(len(runs))))
    for op, (cause, ns) in sorted(least.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"{op}\t{cause}\t{ns / 1000:.1f}\t"
              + "\t".join(f"{run[op][1] / 1000:.1f}" for run in runs))


if __name__ == "__main__":
    main(sys.argv[1:])
