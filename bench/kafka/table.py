#!/usr/bin/env python3
"""table.md of a bench/kafka/run.sh run from its results.jsonl.
usage: table.py RESULTS EVENTS PARTITIONS RATE"""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
events, partitions, rate = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
readers = ["kafka-consumer-perf-test", "kafka_read_floor", "cardinal"]
best = {}
for r in rows:
    if r["system"] in readers and (r["system"] not in best or r["records_per_s"] > best[r["system"]]["records_per_s"]):
        best[r["system"]] = r


def every(system, field):
    vals = [r[field] for r in rows if r["system"] == system and r.get(field) is not None]
    return "-".join(f"{v / 1e6:.2f}" for v in (min(vals), max(vals))) if vals else ""


if best:
    print(f"W1, {events:,} records, one per message, {partitions} partitions; "
          "best of the rounds (range over the rounds in M/s after it).\n")
    print("| reader | records/s | rounds, M/s | whole run, records/s | CPU-s | records/CPU-s | RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for system in readers:
        r = best.get(system)
        if not r:
            continue
        whole = r.get("records_per_s")
        cpu = f"{r['cpu_s']:.2f}" if "cpu_s" in r else ""
        per_cpu = f"{r['records_per_cpu_s']:,.0f}" if "records_per_cpu_s" in r else ""
        rss = f"{r['rss_mb']:.0f}" if "rss_mb" in r else ""
        name = system
        rate_s = r["records_per_s"]
        if system == "kafka-consumer-perf-test":
            # Its own figure over its run includes joining the group; the
            # fetch-only one is the comparable "first message to last".
            rate_s = r["fetch_records_per_s"]
            name += " (while fetching)"
            print(f"| {name} | {rate_s:,.0f} | {every(system, 'fetch_records_per_s')} | {whole:,.0f} | | | |")
            continue
        whole_s = f"{r['whole_run_records_per_s']:,.0f}" if "whole_run_records_per_s" in r else ""
        print(f"| {name} | {rate_s:,.0f} | {every(system, 'records_per_s')} | {whole_s} | {cpu} | {per_cpu} | {rss} |")
    c, k = best.get("cardinal"), best.get("kafka-consumer-perf-test")
    if c and k:
        print(f"\ncardinal / ConsumerPerformance: {c['records_per_s'] / k['fetch_records_per_s']:.2f}x "
              f"against its fetch-only rate, {c['whole_run_records_per_s'] / k['records_per_s']:.2f}x "
              "whole run against whole run (goal: at least 0.8x and 1 M records/s per node)")
        per_round = []
        for r in rows:
            if r["system"] == "cardinal":
                k = [x for x in rows if x["system"] == "kafka-consumer-perf-test" and x["round"] == r["round"]]
                if k:
                    per_round.append(r["records_per_s"] / k[0]["fetch_records_per_s"])
        print("round by round, against the fetch-only rate: " + ", ".join(f"{x:.2f}x" for x in per_round))
    f = best.get("kafka_read_floor")
    if c and f:
        print(f"cardinal / the read floor: {c['records_per_s'] / f['records_per_s']:.2f}x")
    if c:
        print(f"answers: {c['check']}")

for r in rows:
    if r["system"] == "cardinal-growth":
        f, a = r["first_window_records_per_s"], r["after_first_window_records_per_s"]
        print(f"\nGrowth (a summary by user, RSS {r['rss_mb']:.0f} MB at the end): the first 1M records "
              f"at {f:,.0f} records/s, the other {(r['records'] - 1_000_000) / 1e6:.0f} M at {a:,.0f} "
              f"({a / f:.2f}x; goal: within 10%, at least 0.9x); each million, M/s: "
              + ", ".join(f"{w / 1e6:.2f}" for w in r["window_records_per_s"] if w)
              + f"; the last million against the second: {r['last_window_records_per_s'] / r['second_window_records_per_s']:.2f}x")
    if r["system"] == "engine-growth" and r["after_records_per_s"]:
        print(f"The engine alone (`cardinal run`, no Kafka, no views): the first 1M at "
              f"{r['first_million_records_per_s']:,.0f} records/s, the rest at {r['after_records_per_s']:,.0f} "
              f"({r['after_records_per_s'] / r['first_million_records_per_s']:.2f}x)")
    if r.get("part") == "restart":
        print(f"\nRestart after kill -9 ({r['records']:,} records by user, snapshot {r['snapshot_mb']:.0f} MB, "
              f"RSS {r['rss_mb_before_kill']:.0f} MB): /metrics answering after {r['restart_to_http_s']:.2f} s, "
              f"offsets at the topic's end after {r['restart_to_caught_up_s']:.2f} s, lag 0 reported after "
              f"{r['restart_to_lag0_s']:.2f} s; the snapshot loaded in {r['load_s']} s (the node's log); "
              f"{r['reread_records']:,} records read again")
    if r.get("part") == "freshness":
        print(f"\nFreshness at {rate:,} records/s ({r['records']:,} records, {r['batches']:,} batches, "
              f"--snapshot-every 2): p50 <= {r['p50_le_s']:g} s, p99 <= {r['p99_le_s']:g} s, every batch "
              f"<= {r['max_le_s']:g} s (upper bounds of the histogram's buckets), mean {r['mean_s']:.3f} s "
              "(goal: p99 <= 1 s)")
