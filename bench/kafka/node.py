#!/usr/bin/env python3
"""One `cardinal serve --kafka` node measured from outside, through /metrics.

bench/kafka/run.sh calls it; every subcommand prints one JSON line.

  node.py throughput ARGS   a fresh node reads a full topic: records/s from
                            its first message to all folded and over its
                            whole run, CPU-s, RSS, the rate of each window
                            of records; optionally the answers checked
  node.py freshness ARGS -- PRODUCER...
                            a fresh node while PRODUCER writes the topic at
                            a fixed rate: the percentiles of
                            cardinal_kafka_freshness_seconds
  node.py restart ARGS      a node reads the topic, snapshots it all, is
                            killed with SIGKILL and started again: seconds
                            from the restart to caught up

Every wait has a deadline (--timeout); the node is stopped however this
ends.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

# Between two reads of /metrics: short beside the ~0.4 s that a million
# records take at the measured rate, long enough that the reads cost the
# node well under 1% of a core.
POLL_S = 0.01
# A stopped node writes its final snapshot (a million groups: ~1 s on
# this machine) before it exits; past this it is killed.
STOP_TIMEOUT_S = 60
# Where a throughput run's "first window" ends (the first million
# records) and how wide the later windows are.
WINDOW = 1_000_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse(text):
    """Metric lines as {name: [(labels, value)]}."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m:
            out.setdefault(m.group(1), []).append((m.group(2) or "", float(m.group(3))))
    return out


def total(m, name):
    return sum(v for _, v in m.get(name, []))


class Node:
    """A `cardinal serve` process with its own port and log."""

    def __init__(self, a, data, log, extra=()):
        self.port = free_port()
        self.args = [a.cardinal, "serve", a.schema, "--data", data,
                     "--http", f"127.0.0.1:{self.port}",
                     "--kafka", a.brokers, "--kafka-topic", f"impressions={a.topic}",
                     *extra]
        self.log = log
        self.started = time.monotonic()
        with open(log, "a") as f:
            f.write("$ " + " ".join(self.args) + "\n")
            f.flush()
            self.proc = subprocess.Popen(self.args, stdout=f, stderr=f)
        # For run.sh's exit trap, should this script be killed before it
        # stops the node itself.
        with open(data.rstrip("/") + ".pid", "w") as f:
            f.write(f"{self.proc.pid}\n")

    def metrics(self):
        if self.proc.poll() is not None:
            raise SystemExit(f"the node exited with {self.proc.returncode}; see {self.log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                return parse(r.read().decode())
        except OSError:
            return None

    def wait(self, deadline, cond, what):
        """Polls /metrics until cond(metrics) holds; returns (seconds since start, metrics)."""
        while time.monotonic() < deadline:
            m = self.metrics()
            if m is not None and cond(m):
                return time.monotonic() - self.started, m
            time.sleep(POLL_S)
        raise SystemExit(f"timed out waiting for {what}; see {self.log}")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def folded(m):
    return total(m, "cardinal_events_accepted_total") + total(m, "cardinal_events_rejected_total")


def crossing(samples, level):
    """The time at which the count reached level, linear between samples."""
    prev = (samples[0][0], 0.0)
    for t, n in samples:
        if n >= level:
            t0, n0 = prev
            return t0 + (t - t0) * (level - n0) / (n - n0) if n > n0 else t
        prev = (t, n)
    return None


def query_rows(a, port, summaries):
    rows = []
    for s in summaries:
        out = subprocess.run([a.cardinal, "query", s, "--server", f"http://127.0.0.1:{port}",
                              "--format", "json"], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise SystemExit(f"cardinal query {s} failed: {out.stderr.strip()}")
        rows += [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    return rows


def comparable(rows):
    """Rows keyed by summary and dimensions, with the fields that do not
    depend on the order records arrive in: counts, exact sums,
    HyperLogLog estimates (a union is the same in any order). Quantile
    sketches (`*_p50`) and top-k lists do depend on it and are left out."""
    out = {}
    for r in rows:
        key = tuple(sorted((k, v) for k, v in r.items() if isinstance(v, str)))
        vals = {}
        for k, v in r.items():
            if isinstance(v, str) or re.search(r"_p\d+$", k) or isinstance(v, list):
                continue
            vals[k] = v["value"] if isinstance(v, dict) else v
        out[key] = vals
    return out


def check(a, port):
    """The node's answers against `cardinal run` over the same lines and
    the generator's truth file. Returns a short verdict."""
    expect = comparable([json.loads(l) for l in open(a.expect) if l.strip()])
    summaries = sorted({dict(k)["summary"] for k in expect})
    got = comparable(query_rows(a, port, summaries))
    bad = []
    for key in sorted(set(expect) | set(got)):
        e, g = expect.get(key), got.get(key)
        if e is None or g is None:
            bad.append(f"{dict(key)}: {'only the node' if e is None else 'missing'}")
            continue
        for f in e:
            x, y = e[f], g.get(f)
            if y is None or abs(x - y) > 1e-9 * max(1.0, abs(x)):
                bad.append(f"{dict(key)} {f}: run {x}, node {y}")
    verdict = f"{len(got)} rows agree with cardinal run" if not bad else \
        f"DISAGREE in {len(bad)} places, e.g. {bad[:3]}"
    if a.truth:
        t = json.load(open(a.truth))
        events = sum(v["events"] for k, v in got.items() if dict(k)["summary"] == "reach")
        revenue = sum(v["revenue"] for k, v in got.items() if dict(k)["summary"] == "reach")
        want_e, want_r = t["events_by_kind"]["impression"], t["revenue_by_kind"]["impression"]
        ok = events == want_e and abs(revenue - want_r) < 1e-6 * max(1.0, want_r)
        verdict += f"; truth: {events} impressions, revenue {revenue:.2f} " + \
            ("match" if ok else f"DISAGREE (truth {want_e}, {want_r:.2f})")
        bad += [] if ok else ["truth"]
    return verdict, not bad


def throughput(a):
    data = os.path.join(a.scratch, f"node-{a.label}")
    shutil.rmtree(data, ignore_errors=True)
    node = Node(a, data, a.log, a.extra)
    deadline = node.started + a.timeout
    samples = []  # (seconds since start, records folded)
    polls = []  # every read of /metrics: asked, answered, records folded
    first = None
    try:
        while True:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {samples[-1:]} of {a.records}; see {a.log}")
            asked = time.monotonic() - node.started
            m = node.metrics()
            t = time.monotonic() - node.started
            polls.append((round(asked, 4), round(t, 4), folded(m) if m is not None else None))
            if m is not None:
                if first is None and total(m, "cardinal_kafka_messages_total") > 0:
                    # Between this read and the one before: the midpoint.
                    first = (samples[-1][0] + asked) / 2 if samples else asked
                n = folded(m)
                # The counters are read when the request arrives, before
                # /metrics takes its live view of the engine (which waits
                # for the queued batches and, with a million groups, takes
                # seconds): the count belongs to the time asked.
                samples.append((asked, n))
                if n >= a.records:
                    break
            # Every read while the first two windows fold (the view is
            # cheap while the state is small), then every --poll seconds.
            time.sleep(POLL_S if not samples or samples[-1][1] < 2 * WINDOW else a.poll)
        done = samples[-1][0]
        msgs = total(m, "cardinal_kafka_messages_total")
        cpu = total(m, "process_cpu_seconds_total")
        row = {
            "system": "cardinal", "round": a.round, "label": a.label, "records": int(msgs),
            "accepted": int(total(m, "cardinal_events_accepted_total")),
            "rejected": int(total(m, "cardinal_events_rejected_total")),
            "start_to_first_message_s": round(first, 3),
            "first_message_to_folded_s": round(done - first, 3),
            "records_per_s": msgs / (done - first),
            "whole_run_s": round(done, 3),
            "whole_run_records_per_s": msgs / done,
            "cpu_s": cpu, "records_per_cpu_s": msgs / cpu,
            "rss_mb": total(m, "process_resident_memory_bytes") / 1e6,
        }
        # The rate of each window of WINDOW records, from the first message.
        marks = [first] + [crossing(samples, k) for k in range(WINDOW, int(a.records) + 1, WINDOW)]
        if marks[-1] is not None and int(a.records) % WINDOW:
            marks.append(done)
        windows = [WINDOW / (t1 - t0) if t1 > t0 else None
                   for t0, t1 in zip(marks, marks[1:]) if t0 is not None and t1 is not None]
        row["window_records_per_s"] = [round(w) if w else None for w in windows]
        if len(windows) > 1:
            row["first_window_records_per_s"] = windows[0]
            rest = int(a.records) - WINDOW
            row["after_first_window_records_per_s"] = rest / (done - marks[1])
            # The first window also holds the start (the fetches ramping
            # up, the first allocations): the second against the last says
            # more about growing state alone.
            row["second_window_records_per_s"] = windows[1]
            row["last_window_records_per_s"] = windows[-1]
        if a.polls:
            with open(a.polls, "w") as f:
                f.writelines(f"{x}\t{y}\t{n}\n" for x, y, n in polls)
        # The longest wait for /metrics: a window's rate is only as sharp
        # as the reads around it.
        row["longest_poll_s"] = round(max(y - x for x, y, _ in polls), 3)
        if a.expect:
            row["check"], row["agree"] = check(a, node.port)
        return row
    finally:
        node.stop()
        if not a.keep:
            shutil.rmtree(data, ignore_errors=True)


def quantile_bound(buckets, q):
    """The smallest bucket upper bound holding at least q of the count."""
    count = buckets[-1][1]
    for le, c in buckets:
        if c >= q * count:
            return le
    return float("inf")


def freshness(a):
    data = os.path.join(a.scratch, "node-freshness")
    shutil.rmtree(data, ignore_errors=True)
    node = Node(a, data, a.log, a.extra)
    deadline = node.started + a.timeout
    try:
        # The watermarks known: the node has its partitions and reads.
        node.wait(deadline, lambda m: len(m.get("cardinal_kafka_lag_records", [])) > 0,
                  "the node reading its partitions")
        t0 = time.monotonic()
        with open(a.producer_log, "w") as f:
            producer = subprocess.run(a.producer, stdout=f, stderr=subprocess.STDOUT,
                                      timeout=max(1, deadline - time.monotonic()))
        produced_s = time.monotonic() - t0
        if producer.returncode != 0:
            raise SystemExit(f"the producer failed; see {a.producer_log}")
        _, m = node.wait(deadline, lambda m: folded(m) >= a.records, f"{a.records} records folded")
        buckets = []
        for labels, v in m.get("cardinal_kafka_freshness_seconds_bucket", []):
            le = re.search(r'le="([^"]+)"', labels).group(1)
            buckets.append((float("inf") if le == "+Inf" else float(le), v))
        buckets.sort()
        count = total(m, "cardinal_kafka_freshness_seconds_count")
        return {
            "system": "cardinal-freshness", "part": "freshness", "records": int(folded(m)),
            "produce_s": round(produced_s, 2), "batches": int(count),
            "mean_s": total(m, "cardinal_kafka_freshness_seconds_sum") / count if count else None,
            "p50_le_s": quantile_bound(buckets, 0.50), "p99_le_s": quantile_bound(buckets, 0.99),
            "max_le_s": quantile_bound(buckets, 1.0),
            "buckets": [(le, int(c)) for le, c in buckets],
            "rejected": int(total(m, "cardinal_events_rejected_total")),
        }
    finally:
        node.stop()
        shutil.rmtree(data, ignore_errors=True)


def offsets(m, name):
    return {labels: v for labels, v in m.get(name, [])}


def restart(a):
    data = os.path.join(a.scratch, "node-restart")
    shutil.rmtree(data, ignore_errors=True)
    extra = ["--snapshot-every", str(a.snapshot_every), *a.extra]
    node = Node(a, data, a.log, extra)
    deadline = node.started + a.timeout
    try:
        t_read, m = node.wait(deadline, lambda m: folded(m) >= a.records, "the first read")
        # Then a snapshot covering every record: a kill now loses nothing
        # the restart would have to read again.
        t_cov, m = node.wait(deadline, lambda m: total(m, "cardinal_kafka_offset_covered") >= a.records,
                             "a snapshot covering the topic")
        rss = total(m, "process_resident_memory_bytes") / 1e6
        snaps = [os.path.join(r, f) for r, _, fs in os.walk(data) for f in fs if "snap" in f]
        snapshot_mb = max((os.path.getsize(p) for p in snaps), default=0) / 1e6
        node.stop(signal.SIGKILL)
        mark = os.path.getsize(a.log)
        again = Node(a, data, a.log, extra)
        deadline = again.started + a.timeout
        t_http, _ = again.wait(deadline, lambda m: True, "the restarted node's /metrics")
        t_caught, m = again.wait(
            deadline, lambda m: total(m, "cardinal_kafka_offset_read") >= a.records,
            "the restarted node's offsets at the topic's end")
        t_lag, m = again.wait(
            deadline,
            lambda m: len(m.get("cardinal_kafka_lag_records", [])) > 0
            and total(m, "cardinal_kafka_lag_records") == 0,
            "lag 0 on every partition")
        with open(a.log) as f:
            f.seek(mark)
            said = re.search(r"recovered from (\S+) .* in ([0-9.]+) s", f.read())
        again.stop()
        return {
            "system": "cardinal-restart", "part": "restart", "records": a.records,
            "first_read_s": round(t_read, 2), "snapshot_covers_all_s": round(t_cov, 2),
            "rss_mb_before_kill": rss, "snapshot_mb": round(snapshot_mb, 1),
            "recovered_from": said.group(1) if said else None,
            "load_s": float(said.group(2)) if said else None,
            "restart_to_http_s": round(t_http, 3),
            "restart_to_caught_up_s": round(t_caught, 3),
            "restart_to_lag0_s": round(t_lag, 3),
            "reread_records": int(folded(m)),
        }
    finally:
        node.stop(signal.SIGKILL)
        shutil.rmtree(data, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", choices=["throughput", "freshness", "restart"])
    p.add_argument("--cardinal", required=True)
    p.add_argument("--schema", required=True)
    p.add_argument("--brokers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--records", type=int, required=True, help="records in the topic (or produced)")
    p.add_argument("--scratch", required=True, help="folder for the node's data")
    p.add_argument("--log", required=True, help="the node's output, appended")
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--round", type=int, default=1)
    p.add_argument("--label", default="cardinal")
    p.add_argument("--expect", help="`cardinal run --json` over the same lines")
    p.add_argument("--truth", help="the truth file of `cardinal gen`")
    p.add_argument("--snapshot-every", type=int, default=5)
    p.add_argument("--producer-log")
    p.add_argument("--keep", action="store_true")
    p.add_argument("--poll", type=float, default=POLL_S,
                   help="seconds between reads of /metrics (throughput)")
    p.add_argument("--polls", help="write every read of /metrics here (throughput)")
    p.add_argument("--extra", action="append", default=[], help="one more argument for `cardinal serve`")
    argv = sys.argv[1:]
    producer = []
    if "--" in argv:
        i = argv.index("--")
        argv, producer = argv[:i], argv[i + 1:]
    a = p.parse_args(argv)
    a.producer = producer
    a.records = int(a.records)
    row = {"throughput": throughput, "freshness": freshness, "restart": restart}[a.part](a)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
