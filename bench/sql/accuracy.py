#!/usr/bin/env python3
"""Unique-count error at equal bytes per group: cardinal's HyperLogLog
against Apache DataSketches HLL and CPC and chDB's uniqCombined.

For each seed, the distinct ids `seed * 2^40 + 1 .. seed * 2^40 + n` are
counted by every contestant at every checkpoint n (1, 3 x 10^2 .. 10^max),
and the table gives, per contestant and n, the mean absolute relative
error and its 95th percentile over the seeds. Contestants come in tiers
of about equal bytes per group (the serialized size at 10^6 ids is
printed beside each):

- cardinal: `cardinal hll build --log2m L --regwidth W` over the ids
  (`seq`), then `cardinal hll inspect` (the estimate SQL over summaries
  prints: Ertl's, the same before and after any merge);
- DataSketches (pip `datasketches`): HLL_4 / HLL_8 and CPC, updated
  incrementally and read at each checkpoint twice, as built (HIP
  estimator) and after a union (what a rollup's re-merge gives: the
  composite estimator for HLL, from the union of the odd and the even
  ids' sketches; ICON for CPC). HLL_8 at lg_k 11 (2,088 bytes) gives
  HLL_4 lg_k 11's estimates exactly (the same registers) and is not
  repeated;
- chDB: `uniqCombined(p)(number + base) FROM numbers(n)` (HLL with 2^p
  six-bit cells beyond its small exact set; 32-bit hash) and
  `uniqHLL12`.

    accuracy.py --cardinal BIN [--seeds 8] [--big-seeds 3] [--max-exp 7]
                [--huge-seeds 0] [--out DIR]
    accuracy.py --report DIR/accuracy.jsonl      # the pooled table again

Seeds above --big-seeds stop at 10^(max-exp - 1): DataSketches takes one
Python call per id (about 0.4 us here), which is what bounds the run.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

BASE = 1 << 40

# (tier, label, kind, parameters). kind: cardinal (log2m, regwidth),
# hll (lg_k, type), cpc (lg_k), chdb (SQL aggregate).
CONTESTANTS = [
    ("1.3 KB", "cardinal hll(11, 5) (default)", "cardinal", (11, 5)),
    ("1.3 KB", "DataSketches HLL_4 lg_k 11", "hll", (11, 4)),
    ("1.3 KB", "DataSketches HLL_8 lg_k 10", "hll", (10, 8)),
    ("1.3 KB", "DataSketches CPC lg_k 11", "cpc", (11,)),
    ("2-3 KB", "cardinal hll(12, 5)", "cardinal", (12, 5)),
    ("2-3 KB", "chDB uniqHLL12", "chdb", ("uniqHLL12", 2560)),
    ("2-3 KB", "chDB uniqCombined(12)", "chdb", ("uniqCombined(12)", 3072)),
    ("2-3 KB", "DataSketches CPC lg_k 12", "cpc", (12,)),
    ("33-49 KB", "cardinal hll(16, 5)", "cardinal", (16, 5)),
    ("33-49 KB", "chDB uniqCombined(16)", "chdb", ("uniqCombined(16)", 49152)),
    ("33-49 KB", "DataSketches HLL_4 lg_k 16", "hll", (16, 4)),
    ("33-49 KB", "DataSketches CPC lg_k 16", "cpc", (16,)),
    ("80-96 KB", "cardinal hll(17, 5)", "cardinal", (17, 5)),
    ("80-96 KB", "chDB uniqCombined (default, 17)", "chdb", ("uniqCombined", 98304)),
    ("80-96 KB", "DataSketches CPC lg_k 17", "cpc", (17,)),
]


def checkpoints(max_exp):
    out = []
    for e in range(2, max_exp + 1):
        out.append(10 ** e)
        if e < max_exp:
            out.append(3 * 10 ** e)
    return out


def cardinal_estimate(binary, n, seed, log2m, regwidth):
    base = seed * BASE
    seq = subprocess.Popen(["seq", str(base + 1), str(base + n)], stdout=subprocess.PIPE)
    built = subprocess.run([binary, "hll", "build", "--log2m", str(log2m), "--regwidth", str(regwidth),
                            "--java-hll"], stdin=seq.stdout, capture_output=True, check=True, text=True)
    seq.wait()
    hexed = built.stdout.strip()
    shown = subprocess.run([binary, "hll", "inspect", "-"], input=hexed + "\n", capture_output=True,
                           check=True, text=True).stdout
    est = next(line for line in shown.splitlines() if line.strip().startswith("estimate"))
    return float(est.split()[1]), (len(hexed) - 2) // 2


# The ranges the summary table pools: small sets (exact or nearly, for
# most), the HyperLogLog range, and 10^8 where it was run.
POOLS = [("10^2..3x10^3", 100, 3000), ("10^4..10^7", 10 ** 4, 10 ** 7), ("10^8", 10 ** 8, 10 ** 8)]


def pooled(rows):
    """Markdown: per sketch, mean / p95 |relative error| over every seed
    and checkpoint of each pool (rows: accuracy.jsonl's records)."""
    order, by = [], {}
    for r in rows:
        key = (r["tier"], r["sketch"])
        if key not in by:
            order.append(key)
            by[key] = {"bytes": r.get("bytes")}
        for name, lo, hi in POOLS:
            if lo <= r["n"] <= hi:
                by[key].setdefault(name, []).extend(abs(e) for e in r["signed"])
    lines = ["| tier | sketch | bytes | " + " | ".join(f"{name} mean / p95 %" for name, _, _ in POOLS) + " |",
             "|" + "---|" * (3 + len(POOLS))]
    for key in order:
        cells = []
        for name, _, _ in POOLS:
            a = sorted(by[key].get(name, []))
            cells.append("-" if not a else
                         f"{statistics.fmean(a) * 100:.2f} / {a[min(len(a) - 1, math.ceil(0.95 * len(a)) - 1)] * 100:.2f} ({len(a)})")
        b = by[key]["bytes"]
        lines.append(f"| {key[0]} | {key[1]} | {b:,} | " if isinstance(b, int) else f"| {key[0]} | {key[1]} | - | ")
        lines[-1] += " | ".join(cells) + " |"
    lines.append("")
    lines.append("Pooled over every seed and checkpoint of each range (samples in brackets).")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--report", help="print the pooled table of an accuracy.jsonl and stop")
    ap.add_argument("--cardinal", help="the cardinal binary")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--big-seeds", type=int, default=3, help="seeds that go on to 10^max-exp")
    ap.add_argument("--max-exp", type=int, default=7)
    ap.add_argument("--huge-seeds", type=int, default=0,
                    help="seeds at which cardinal and chDB (not DataSketches) also count 10^(max-exp + 1)")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    if args.report:
        print(pooled([json.loads(line) for line in open(args.report)]))
        return
    if not args.cardinal:
        ap.error("--cardinal is required (the binary whose `hll build` is measured)")
    import datasketches as ds
    import chdb
    say = lambda *a: print("==", *a, file=sys.stderr, flush=True)
    os.makedirs(args.out, exist_ok=True)
    results = open(os.path.join(args.out, "accuracy.jsonl"), "w")
    points = checkpoints(args.max_exp)
    huge = 10 ** (args.max_exp + 1)
    if args.huge_seeds:
        points.append(huge)
    # errors[label][n] = [relative error per seed], "after a union" rows apart.
    errors = {}
    size = {}

    def note(label, n, est, bytes_=None):
        errors.setdefault(label, {}).setdefault(n, []).append((est - n) / n)
        if bytes_ is not None and n == 10 ** 6:
            size[label] = bytes_

    started = time.perf_counter()
    for seed in range(1, args.seeds + 1):
        top = args.max_exp if seed <= args.big_seeds else args.max_exp - 1
        mine = [n for n in points if n <= 10 ** top and n != huge]
        base = seed * BASE
        say(f"seed {seed}: up to 10^{top} ({time.perf_counter() - started:.0f} s)")
        # DataSketches: one pass, read at each checkpoint.
        sketches = []
        for tier, label, kind, p in CONTESTANTS:
            if kind == "hll":
                t = ds.tgt_hll_type.HLL_4 if p[1] == 4 else ds.tgt_hll_type.HLL_8
                sketches.append((label, kind, p, ds.hll_sketch(p[0], t)))
            elif kind == "cpc":
                sketches.append((label, kind, p, ds.cpc_sketch(p[0])))
        # An HLL's "after a union" is the union of two sketches of the
        # odd and the even ids: DataSketches keeps the HIP estimator
        # through a union with one sketch of a subset, so only a real
        # merge shows what a rollup's re-merge reads.
        halves = {label: (ds.hll_sketch(p[0], sk.tgt_type), ds.hll_sketch(p[0], sk.tgt_type))
                  for label, kind, p, sk in sketches if kind == "hll"}
        updates = [s[3].update for s in sketches]
        odd = [h[1].update for h in halves.values()]
        even = [h[0].update for h in halves.values()]
        i = 0
        for n in mine:
            while i < n:
                i += 1
                v = base + i
                for u in updates:
                    u(v)
                for u in (odd if i & 1 else even):
                    u(v)
            for label, kind, p, sk in sketches:
                if kind == "hll":
                    un = ds.hll_union(p[0])
                    un.update(halves[label][0])
                    un.update(halves[label][1])
                    merged = un.get_result(sk.tgt_type).get_estimate()
                    nbytes = len(sk.serialize_compact())
                else:
                    # CPC: a union with a sketch of one id it holds gives
                    # the merged (ICON) estimate, the same value as a
                    # union of the two halves.
                    one = ds.cpc_sketch(p[0])
                    one.update(base + 1)
                    un = ds.cpc_union(p[0])
                    un.update(one)
                    un.update(sk)
                    merged = un.get_result().get_estimate()
                    nbytes = len(sk.serialize())
                note(label, n, sk.get_estimate(), nbytes)
                note(label + ", after a union", n, merged, nbytes)
        # cardinal and chDB: one sketch per checkpoint.
        for tier, label, kind, p in CONTESTANTS:
            for n in mine + ([huge] if seed <= args.huge_seeds else []):
                if kind == "cardinal":
                    est, nbytes = cardinal_estimate(args.cardinal, n, seed, *p)
                    note(label, n, est, nbytes)
                elif kind == "chdb":
                    est = float(str(chdb.query(
                        f"SELECT {p[0]}(number + {base + 1}) FROM numbers({n})", "CSV")).strip())
                    note(label, n, est, p[1])
    say(f"done in {time.perf_counter() - started:.0f} s")

    # ---- the table ----
    labels = []
    for tier, label, kind, p in CONTESTANTS:
        labels.append((tier, label))
        if kind in ("hll", "cpc"):
            labels.append((tier, label + ", after a union"))
    head = "| tier | sketch | bytes at 10^6 | " + " | ".join(
        f"10^{int(round(math.log10(n)))}" if str(n).startswith("1") else f"3x10^{int(math.log10(n / 3))}"
        for n in points) + " |"
    lines = [head, "|" + "---|" * (3 + len(points))]
    for tier, label in labels:
        cells = []
        for n in points:
            errs = errors.get(label, {}).get(n)
            if not errs:
                cells.append("-")
                continue
            a = sorted(abs(e) for e in errs)
            p95 = a[min(len(a) - 1, math.ceil(0.95 * len(a)) - 1)]
            cells.append(f"{statistics.fmean(a) * 100:.2f} / {p95 * 100:.2f}")
            results.write(json.dumps({"sketch": label, "tier": tier, "n": n, "seeds": len(errs),
                                      "bytes": size.get(label),
                                      "mean_abs_rel_err": statistics.fmean(a), "p95_abs_rel_err": p95,
                                      "signed": errs}) + "\n")
        lines.append(f"| {tier} | {label} | {size.get(label, '-'):,} | " + " | ".join(cells) + " |"
                     if isinstance(size.get(label), int) else
                     f"| {tier} | {label} | - | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(f"Cells: mean / 95th percentile of |relative error|, in %, over {args.seeds} seeds "
                 f"({args.big_seeds} at 10^{args.max_exp}"
                 + (f", {args.huge_seeds} at 10^{args.max_exp + 1}, DataSketches not" if args.huge_seeds else "")
                 + "); ids seed x 2^40 + 1..n. "
                 f"datasketches {getattr(ds, '__version__', '5.2.0')}, chDB {chdb.__version__}.")
    results.close()
    table = "\n".join(lines)
    table += "\n\n" + pooled([json.loads(line) for line in open(os.path.join(args.out, "accuracy.jsonl"))])
    print(table)
    with open(os.path.join(args.out, "accuracy.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
