#!/usr/bin/env python3
"""Runs cardinal's HyperLogLog and its peers in interleaved rounds and prints
ratios against the goals. Called by run.sh, which installs and builds
everything first; this file only runs and reports. Standard library only.

Every runner prints JSON lines of the form
    {"impl": ..., "op": ..., "ops": ..., "wall_s": ..., "cpu_s": ...}
optionally with "bytes" (bytes of register data the ops touched). The harness
adds "round" and keeps every line in results.jsonl next to the table, so a
table can be re-derived later with `harness.py --report results.jsonl`.

The machine these goals are judged on is a shared 2 vCPU VM, so a round runs
each implementation once, rounds alternate between implementations, and the
table keeps the best repetition of each (impl, op): the run least disturbed
by neighbours. CPU time (the thread's own, or the Redis server process's) is
the primary figure; wall time is shown beside it.
"""

import argparse
import csv
import io
import json
import os
import resource
import subprocess
import sys
import time

CARDINAL = "cardinal"

# Bytes of a FULL (log2m 11, regwidth 5) register array in the storage
# format: 2048 registers * 5 bits / 8.
REGISTER_BYTES_PACKED = 1280

# (peer impl, peer op, cardinal op it is compared with, goal ratio or None).
# The ratio is cardinal's rate over the peer's, both in ops per CPU-second.
PEER_ROWS = [
    ("java-hll", "insert_prehashed", "insert_prehashed", 2.0),
    ("datasketches-hll-4", "hash_insert", "insert_prehashed", None),
    ("datasketches-hll-6", "hash_insert", "insert_prehashed", None),
    ("datasketches-hll-8", "hash_insert", "insert_prehashed", None),
    ("datasketches-hll-4", "hash_insert", "hash_insert", None),
    ("datasketches-hll-6", "hash_insert", "hash_insert", None),
    ("datasketches-hll-8", "hash_insert", "hash_insert", None),
    ("redis", "pfadd", "hash_insert", None),
    ("redis", "pfadd_x100", "hash_insert", None),
    ("java-hll", "union", "union", None),
    ("java-hll", "cardinality", "cardinality", None),
    ("datasketches-hll-8", "estimate", "estimate", None),
]

# DataSketches is judged by its fastest target type, whichever that is.
DATASKETCHES_GOAL = 1.5


def thread_cpu_note():
    return "CPU = the timed thread's CPU time (Redis: server process CPU)"


# ---- runners ---------------------------------------------------------------


def run_lines(cmd, round_index, sink):
    """Runs a command that prints JSON lines; returns the parsed records."""
    proc = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    records = []
    for line in proc.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        record = json.loads(line)
        record["round"] = round_index
        records.append(record)
        sink.write(json.dumps(record) + "\n")
    sink.flush()
    return records


def process_cpu_s(pid):
    """CPU time of every thread of a process, in seconds. schedstat counts
    nanoseconds; /proc/<pid>/stat only 10 ms ticks, too coarse for a run of
    half a second, so it is the fallback."""
    total_ns = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # After the command name: state is field 0, utime field 11, stime field 12.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def redis_round(args, round_index, sink):
    """PFADD through redis-benchmark, pipelined. One row with one element per
    command, one with 100 per command (less protocol work per element)."""
    records = []
    for op, elements, commands in (("pfadd", 1, args.redis_commands),
                                   ("pfadd_x100", 100, args.redis_commands // 20)):
        cmd = [
            "redis-benchmark", "-h", "127.0.0.1", "-p", str(args.redis_port),
            "-c", "4", "-P", "1000", "-n", str(commands), "-r", "1000000000",
            "--csv", "PFADD", "hll:bench", *(["__rand_int__"] * elements),
        ]
        server0 = process_cpu_s(args.redis_pid)
        client0 = children_cpu_s()
        wall0 = time.perf_counter()
        out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
        wall = time.perf_counter() - wall0
        client = children_cpu_s() - client0
        server = process_cpu_s(args.redis_pid) - server0
        rows = [r for r in csv.reader(io.StringIO(out)) if r and r[0] != "test"]
        rps = float(rows[-1][1]) if rows else 0.0
        record = {
            "impl": "redis",
            "op": op,
            "ops": commands * elements,
            # redis-benchmark's own clock excludes its start-up.
            "wall_s": commands / rps if rps > 0 else wall,
            "cpu_s": server,
            "client_cpu_s": round(client, 3),
            "round": round_index,
        }
        records.append(record)
        sink.write(json.dumps(record) + "\n")
    sink.flush()
    return records


# ---- report ----------------------------------------------------------------


def best(records):
    """Best repetition per (impl, op): highest ops per CPU-second and, chosen
    separately, highest ops per wall-second."""
    table = {}
    for r in records:
        if r["cpu_s"] <= 0 or r["wall_s"] <= 0:
            continue
        key = (r["impl"], r["op"])
        cpu_rate = r["ops"] / r["cpu_s"]
        wall_rate = r["ops"] / r["wall_s"]
        entry = table.setdefault(key, {"cpu": 0.0, "wall": 0.0, "bytes_per_op": {}, "n": 0})
        entry["cpu"] = max(entry["cpu"], cpu_rate)
        entry["wall"] = max(entry["wall"], wall_rate)
        entry["n"] += 1
        for field in ("bytes", "bytes_mem"):
            if field in r:
                entry["bytes_per_op"][field] = r[field] / r["ops"]
    return table


def fmt_rate(rate):
    return f"{rate / 1e6:.1f}"


def fmt_ratio(ratio):
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def fmt_ns(rate):
    ns = 1e9 / rate
    return f"{ns:.0f}" if ns >= 100 else f"{ns:.2f}"


def report(records, out=sys.stdout):
    table = best(records)
    card = {op: v for (impl, op), v in table.items() if impl == CARDINAL}
    header = ["impl", "op", "M ops/CPU-s", "M ops/wall-s", "ns/op CPU",
              "vs cardinal op", "ratio (CPU)", "ratio (wall)", "goal", "met?"]
    rows = []
    verdicts = []

    def peer_row(impl, op, card_op, goal):
        peer = table.get((impl, op))
        mine = card.get(card_op)
        if peer is None:
            return
        ratio_cpu = ratio_wall = None
        if mine is not None:
            ratio_cpu = mine["cpu"] / peer["cpu"]
            ratio_wall = mine["wall"] / peer["wall"]
        met = ""
        goal_text = ""
        if goal is not None:
            goal_text = f">= {goal:g}x"
            met = "n/a" if ratio_cpu is None else ("yes" if ratio_cpu >= goal else "NO")
            verdicts.append((f"cardinal {card_op} vs {impl} {op}", goal_text, met))
        rows.append([impl, op, fmt_rate(peer["cpu"]), fmt_rate(peer["wall"]),
                     fmt_ns(peer["cpu"]), card_op,
                     "" if ratio_cpu is None else fmt_ratio(ratio_cpu),
                     "" if ratio_wall is None else fmt_ratio(ratio_wall),
                     goal_text, met])

    # cardinal's own rows, with the absolute goals.
    absolute = {
        "hash_insert": (">= 150 M/s", lambda v: v["cpu"] >= 150e6, None),
        "union": (">= 5 GB/s packed", lambda v: v["cpu"] * v["bytes_per_op"].get("bytes", 0) >= 5e9,
                  lambda v: f"{v['cpu'] * v['bytes_per_op'].get('bytes', 0) / 1e9:.1f} GB/s packed"
                  + (f", {v['cpu'] * v['bytes_per_op']['bytes_mem'] / 1e9:.1f} GB/s in memory"
                     if "bytes_mem" in v["bytes_per_op"] else "")),
        "estimate": ("< 2 us", lambda v: 1e9 / v["cpu"] < 2000, None),
        "intersection": ("< 1 ms", lambda v: 1e9 / v["cpu"] < 1e6, None),
    }
    order = ["insert_prehashed", "hash_insert", "union", "estimate", "cardinality", "intersection"]
    extra = []
    for op in order + sorted(set(card) - set(order)):
        v = card.get(op)
        if v is None:
            continue
        goal_text, met = "", ""
        if op in absolute:
            goal_text, check, describe = absolute[op]
            met = "yes" if check(v) else "NO"
            verdicts.append((f"cardinal {op}", goal_text, met))
            if describe:
                extra.append(f"cardinal {op}: {describe(v)}")
        rows.append([CARDINAL, op, fmt_rate(v["cpu"]), fmt_rate(v["wall"]), fmt_ns(v["cpu"]),
                     "", "", "", goal_text, met])

    for impl, op, card_op, goal in PEER_ROWS:
        peer_row(impl, op, card_op, goal)

    # The DataSketches goal applies to its fastest type.
    ds = [(v["cpu"], impl) for (impl, op), v in table.items()
          if impl.startswith("datasketches-") and op == "hash_insert"]
    if ds and "insert_prehashed" in card:
        fastest_rate, fastest = max(ds)
        ratio = card["insert_prehashed"]["cpu"] / fastest_rate
        met = "yes" if ratio >= DATASKETCHES_GOAL else "NO"
        verdicts.append((f"cardinal insert_prehashed vs fastest DataSketches ({fastest} hash_insert)",
                         f">= {DATASKETCHES_GOAL:g}x (ratio {ratio:.2f})", met))
        for row in rows:
            if row[0] == fastest and row[1] == "hash_insert" and row[5] == "insert_prehashed":
                row[8], row[9] = f">= {DATASKETCHES_GOAL:g}x", met

    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    print(line(header), file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for r in rows:
        print(line(r), file=out)
    print(file=out)
    for e in extra:
        print(e, file=out)
    rounds = {r.get("round") for r in records}
    print(f"best repetition of {len(rounds)} round(s); {thread_cpu_note()}", file=out)
    print(file=out)
    for what, goal, met in verdicts:
        print(f"  {met:4} {what}: {goal}", file=out)


# ---- main ------------------------------------------------------------------


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cardinal", help="path of the hll_speed example binary")
    p.add_argument("--java-classpath", help="classpath of the Java peers")
    p.add_argument("--redis-port", type=int)
    p.add_argument("--redis-pid", type=int)
    p.add_argument("--redis-commands", type=int, default=2_000_000)
    p.add_argument("--out", help="directory for results.jsonl and table.md")
    p.add_argument("--report", help="print the table of an existing results.jsonl and exit")
    args = p.parse_args()

    if args.report:
        with open(args.report) as f:
            report([json.loads(line) for line in f if line.strip()])
        return

    os.makedirs(args.out, exist_ok=True)
    records = []
    with open(os.path.join(args.out, "results.jsonl"), "w") as sink:
        for round_index in range(args.rounds):
            print(f"round {round_index + 1}/{args.rounds}", file=sys.stderr, flush=True)
            if args.cardinal:
                records += run_lines([args.cardinal], round_index, sink)
            if args.java_classpath:
                records += run_lines(["java", "-cp", args.java_classpath,
                                      "cardinal.bench.HllPeers"], round_index, sink)
            if args.redis_port:
                records += redis_round(args, round_index, sink)

    buffer = io.StringIO()
    report(records, buffer)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(buffer.getvalue())
    sys.stdout.write(buffer.getvalue())


if __name__ == "__main__":
    main()
