#!/usr/bin/env python3
"""Runs cardinal's rollup engine, DuckDB and chDB on the same files in
interleaved rounds, checks that their answers agree and prints rates against
the goals. Called by run.sh, which makes the virtualenv and the inputs first.

Standard library only, except in the worker processes, which import the
virtualenv's duckdb or chdb. Every measurement is one fresh process:

- peers: `python harness.py --worker SYSTEM ...` loads the library outside
  the timed region, then times the queries with time.perf_counter and the
  process's own CPU time (resource.getrusage(RUSAGE_SELF), every thread);
- cardinal: `cardinal run SCHEMA INPUT --threads N --out DIR` (the template
  CARDINAL_CMD below), timed from the outside with its rusage (os.wait4), so
  its numbers include process start and writing its outputs.

Workloads (same SQL meaning on every system):

- W1 impressions CSV -> three summaries: reach (day, state: count, sum of
  revenue, approximate distinct users of impressions), providers (day,
  provider: count, approximate distinct users, revenue quantiles 0.5, 0.9,
  0.99) and top sites (day: the ten most frequent sites of impressions).
- W2 AMPLab Query 2A, SELECT substr(sourceIP, 1, 8), sum(adRevenue) ...
  GROUP BY 1, on the uservisits text, plain and gzip / zstd / lz4.
- W3 the same two from Parquet copies written by DuckDB.

Rows are the input's records; "GB" are bytes of the uncompressed text
holding those records, whatever the input's encoding, so rates compare
across plain, compressed and Parquet inputs. "Per core" rates are per
CPU-second. Results of every run go to results.jsonl (one JSON line per
measurement, re-reportable with --report); the answers of round 1 are
compared across systems and with exact answers (checks.txt; answers/ is kept
when something disagrees or with --keep-answers, and `--check ANSWERS_DIR
--impressions CSV` checks kept answers again): reach with the generator's
exact uniques and totals, providers with each group's exact distinct users
and with the exact ranks of every quantile value answered (counted by a
DuckDB worker over the input, untimed).
"""

import argparse
import csv
import glob
import io
import json
import math
import os
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import time

CARDINAL = "cardinal"
PEERS = ["duckdb", "chdb"]

# How the harness calls the engine. {bin}, {schema}, {input}, {threads} and
# {out} are filled in; the command must write each summary as CSV files with
# a header under {out}/<summary>/ (one file per day or a single file; every
# *.csv found there is read). Adjust here if the interface lands differently.
CARDINAL_CMD = "{bin} run {schema} {input} --threads {threads} --out {out}"

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = {"impressions": os.path.join(HERE, "schemas", "impressions.sql"),
           "uservisits": os.path.join(HERE, "schemas", "uservisits.sql")}

IMPRESSION_COLUMNS = [("ts", "TIMESTAMP", "DateTime('UTC')"), ("user_id", "BIGINT", "Int64"),
                      ("kind", "VARCHAR", "String"), ("state", "VARCHAR", "String"),
                      ("site", "VARCHAR", "String"), ("provider", "VARCHAR", "String"),
                      ("campaign", "VARCHAR", "String"), ("revenue", "DOUBLE", "Float64")]
USERVISIT_COLUMNS = [("sourceIP", "VARCHAR", "String"), ("destURL", "VARCHAR", "String"),
                     ("visitDate", "DATE", "Date"), ("adRevenue", "DOUBLE", "Float64"),
                     ("userAgent", "VARCHAR", "String"), ("countryCode", "VARCHAR", "String"),
                     ("languageCode", "VARCHAR", "String"), ("searchWord", "VARCHAR", "String"),
                     ("duration", "INTEGER", "Int32")]

# Goals of issue 3, "Speed". Ratios are cardinal's rate over the peer's, per
# CPU-second, at the same thread count.
W1_PER_CORE = 10e6      # events per CPU-second
W1_RATIO = 5.0          # against both peers
W2_PER_CORE = 1e9       # bytes per CPU-second, plain text
W2_RATIO = 3.0          # against DuckDB, plain text
W3_RATIO = 1.0          # against DuckDB, Parquet


# ---- cases -------------------------------------------------------------------


def cases(args):
    """(workload, input label, path, dataset) in run order."""
    imp, uv = args.impressions, args.uservisits
    out = [("W1", "csv", imp, "impressions"),
           ("W2", "text", uv, "uservisits"),
           ("W2", "gzip", uv + ".gz", "uservisits"),
           ("W2", "zstd", uv + ".zst", "uservisits"),
           ("W2", "lz4", uv + ".lz4", "uservisits"),
           ("W3", "parquet", parquet_path(imp), "impressions"),
           ("W3", "parquet", parquet_path(uv), "uservisits")]
    if args.only:
        wanted = set(args.only.split(","))
        out = [c for c in out if c[0] in wanted or f"{c[0]}-{c[1]}" in wanted]
    return out


def parquet_path(path):
    return os.path.splitext(path)[0] + ".parquet"


def workload_name(workload, dataset):
    if workload == "W3":
        return "W3 impressions" if dataset == "impressions" else "W3 q2a"
    return {"W1": "W1 impressions", "W2": "W2 q2a"}[workload]


def supports(system, label):
    """Inputs a peer cannot read at all (reported as such, not hidden)."""
    if system == "duckdb" and label == "lz4":
        return "DuckDB's read_csv has no lz4 codec (gzip and zstd only)"
    return None


# ---- peers (worker processes) ---------------------------------------------------


def duckdb_source(dataset, path):
    if path.endswith(".parquet"):
        return f"read_parquet('{path}')"
    cols = IMPRESSION_COLUMNS if dataset == "impressions" else USERVISIT_COLUMNS
    spec = ", ".join(f"'{n}': '{t}'" for n, t, _ in cols)
    header = "true" if dataset == "impressions" else "false"
    compression = {".gz": "gzip", ".zst": "zstd"}.get(os.path.splitext(path)[1], "none")
    return (f"read_csv('{path}', header = {header}, delim = ',', quote = '', escape = '', "
            f"auto_detect = false, compression = '{compression}', columns = {{{spec}}})")


def chdb_source(dataset, path):
    if path.endswith(".parquet"):
        return f"file('{path}', 'Parquet')"
    cols = IMPRESSION_COLUMNS if dataset == "impressions" else USERVISIT_COLUMNS
    spec = ", ".join(f"{n} {t}" for n, _, t in cols).replace("'", "\\'")
    fmt = "CSVWithNames" if dataset == "impressions" else "CSV"
    # Compression follows the file's extension (.gz, .zst, .lz4).
    return f"file('{path}', '{fmt}', '{spec}')"


# The same three summaries and Query 2A in each peer's dialect. Each statement
# materialises its answer in a table inside the timed region (as cardinal
# writes its outputs); the answers are fetched afterwards, untimed.
DUCKDB_W1 = [
    "CREATE TEMP TABLE imp AS SELECT ts, user_id, kind, state, site, provider, revenue FROM {src}",
    """CREATE TEMP TABLE reach AS
       SELECT CAST(date_trunc('day', ts) AS DATE) AS day, state, count(*) AS events,
              sum(revenue) AS revenue, approx_count_distinct(user_id) AS users
       FROM imp WHERE kind = 'impression' GROUP BY ALL""",
    """CREATE TEMP TABLE providers AS
       SELECT CAST(date_trunc('day', ts) AS DATE) AS day, provider, count(*) AS events,
              approx_count_distinct(user_id) AS users,
              approx_quantile(revenue, [0.5, 0.9, 0.99]) AS q
       FROM imp WHERE kind = 'impression' GROUP BY ALL""",
    """CREATE TEMP TABLE top_sites AS
       SELECT CAST(date_trunc('day', ts) AS DATE) AS day, count(*) AS events,
              approx_top_k(site, 10) AS sites
       FROM imp WHERE kind = 'impression' GROUP BY ALL""",
]
DUCKDB_W1_FETCH = {
    "reach": "SELECT CAST(day AS VARCHAR), state, events, revenue, users FROM reach",
    "providers": "SELECT CAST(day AS VARCHAR), provider, events, users, q[1], q[2], q[3] FROM providers",
    "top_sites": "SELECT CAST(day AS VARCHAR), events, sites FROM top_sites",
}
DUCKDB_Q2A = ["""CREATE TEMP TABLE q2a AS
                 SELECT substr(sourceIP, 1, 8) AS prefix, sum(adRevenue) AS revenue
                 FROM {src} GROUP BY 1"""]
DUCKDB_Q2A_FETCH = {"q2a": "SELECT prefix, revenue FROM q2a"}

CHDB_W1 = [
    """CREATE TABLE imp ENGINE = Memory AS
       SELECT ts, user_id, kind, state, site, provider, revenue FROM {src}""",
    """CREATE TABLE reach ENGINE = Memory AS
       SELECT toDate(ts) AS day, state, count() AS events, sum(revenue) AS revenue,
              uniqCombined(user_id) AS users
       FROM imp WHERE kind = 'impression' GROUP BY day, state""",
    """CREATE TABLE providers ENGINE = Memory AS
       SELECT toDate(ts) AS day, provider, count() AS events, uniqCombined(user_id) AS users,
              quantilesTDigest(0.5, 0.9, 0.99)(revenue) AS q
       FROM imp WHERE kind = 'impression' GROUP BY day, provider""",
    """CREATE TABLE top_sites ENGINE = Memory AS
       SELECT toDate(ts) AS day, count() AS events, topK(10)(site) AS sites
       FROM imp WHERE kind = 'impression' GROUP BY day""",
]
CHDB_W1_FETCH = {
    "reach": "SELECT toString(day), state, events, revenue, users FROM reach",
    "providers": "SELECT toString(day), provider, events, users, q[1], q[2], q[3] FROM providers",
    "top_sites": "SELECT toString(day), events, sites FROM top_sites",
}
CHDB_Q2A = ["""CREATE TABLE q2a ENGINE = Memory AS
               SELECT substring(sourceIP, 1, 8) AS prefix, sum(adRevenue) AS revenue
               FROM {src} GROUP BY prefix"""]
CHDB_Q2A_FETCH = {"q2a": "SELECT prefix, revenue FROM q2a"}


def cpu_now():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worker(args):
    """One measurement of one peer, in this (fresh) process. Prints one JSON
    line; writes the answers to --answers if given."""
    dataset, path, threads = args.dataset, args.input, args.threads
    statements = {("duckdb", "impressions"): (DUCKDB_W1, DUCKDB_W1_FETCH),
                  ("duckdb", "uservisits"): (DUCKDB_Q2A, DUCKDB_Q2A_FETCH),
                  ("chdb", "impressions"): (CHDB_W1, CHDB_W1_FETCH),
                  ("chdb", "uservisits"): (CHDB_Q2A, CHDB_Q2A_FETCH)}[(args.worker, dataset)]
    timed, fetch = statements
    if (args.worker, dataset) == ("duckdb", "impressions") and path.endswith(".parquet"):
        # From Parquet, DuckDB is fastest querying the file once per summary
        # (it reads only the columns each needs): about half the CPU time of
        # loading the table first. chDB is about as fast either way.
        timed = [sql.replace("FROM imp ", "FROM {src} ") for sql in timed[1:]]
    if args.worker == "duckdb":
        import duckdb
        con = duckdb.connect()
        con.execute(f"SET threads = {threads}")
        con.execute("SET TimeZone = 'UTC'")
        con.execute("SET preserve_insertion_order = false")
        src = duckdb_source(dataset, path)

        def run(sql):
            con.execute(sql)

        def rows(sql):
            return con.execute(sql).fetchall()
        version = duckdb.__version__
    else:
        from chdb import session
        import chdb
        sess = session.Session()
        settings = (f" SETTINGS max_threads = {threads}, max_parsing_threads = {threads}, "
                    f"date_time_input_format = 'best_effort', session_timezone = 'UTC'")
        src = chdb_source(dataset, path)

        def run(sql):
            sess.query(sql + settings)

        def rows(sql):
            text = sess.query(sql + " FORMAT JSONCompact").bytes().decode()
            return json.loads(text)["data"] if text.strip() else []
        version = chdb.__version__
        # A first query starts the engine's thread pools outside the timing.
        sess.query("SELECT 1")

    wall0, cpu0 = time.perf_counter(), cpu_now()
    for sql in timed:
        run(sql.format(src=src))
    wall, cpu = time.perf_counter() - wall0, cpu_now() - cpu0

    if args.answers:
        answers = {name: normalise(name, rows(sql)) for name, sql in fetch.items()}
        with open(args.answers, "w") as f:
            json.dump(answers, f)
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "version": version,
                      "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def rank_worker(args):
    """Exact answers to check the providers summary against: for each
    (day, provider) group of impressions and value v in --ranks (JSON
    [[key, v], ...]), how many of the group's revenues are below v, at most
    v, and in all; and each group's distinct users. Writes {"ranks":
    {"key|v": [lt, le, n]}, "users": {key: n}} to --answers."""
    import duckdb
    with open(args.ranks) as f:
        candidates = json.load(f)
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("CREATE TABLE cand (key VARCHAR, v DOUBLE)")
    con.executemany("INSERT INTO cand VALUES (?, ?)", candidates)
    rows = con.execute(f"""
        WITH imp AS (
          SELECT strftime(CAST(date_trunc('day', ts) AS DATE), '%Y-%m-%d') || '|' || provider AS key,
                 revenue
          FROM {duckdb_source("impressions", args.input)} WHERE kind = 'impression')
        SELECT c.key, c.v, count(*) FILTER (WHERE i.revenue < c.v),
               count(*) FILTER (WHERE i.revenue <= c.v), count(*)
        FROM cand c JOIN imp i USING (key) GROUP BY c.key, c.v""").fetchall()
    users = con.execute(f"""
        SELECT strftime(CAST(date_trunc('day', ts) AS DATE), '%Y-%m-%d') || '|' || provider,
               count(DISTINCT user_id)
        FROM {duckdb_source("impressions", args.input)} WHERE kind = 'impression'
        GROUP BY ALL""").fetchall()
    with open(args.answers, "w") as f:
        json.dump({"ranks": {f"{k}|{v!r}": [lt, le, n] for k, v, lt, le, n in rows},
                   "users": dict(users)}, f)


def make_parquet(paths):
    """Parquet copies of the text inputs, written by DuckDB COPY with the
    same explicit schemas the benchmark reads the text with."""
    import duckdb
    for path in paths:
        target = parquet_path(path)
        if os.path.exists(target):
            continue
        dataset = "impressions" if "impressions" in os.path.basename(path) else "uservisits"
        print(f"== writing {os.path.basename(target)} with DuckDB COPY ... (FORMAT PARQUET)",
              file=sys.stderr, flush=True)
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"COPY (SELECT * FROM {duckdb_source(dataset, path)}) "
                    f"TO '{target}.tmp' (FORMAT PARQUET)")
        os.replace(target + ".tmp", target)


# ---- answers -------------------------------------------------------------------


def number(value):
    """A number out of whatever a system printed: 12345, "12345",
    "12345 ± 1.2%", "1.2e-05"."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.search(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?", str(value))
    return float(m.group(0)) if m else float("nan")


def site_list(value):
    """Top-k sites, most frequent first, out of a list or its printed form
    (["site1", ...], "site1 (123), site2 (99)", "{site1: 123, ...}")."""
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value)
    try:
        parsed = json.loads(text)
        if isinstance(parsed, list):
            return [str(v if not isinstance(v, (list, dict)) else
                        (v[0] if isinstance(v, list) else v.get("value", v))) for v in parsed]
    except ValueError:
        pass
    return re.findall(r"[A-Za-z_][A-Za-z_0-9.]*", text)


def normalise(name, rows):
    """Answers as {key: values}, keys and values in a form every system
    shares: days as YYYY-MM-DD, numbers as floats."""
    out = {}
    for r in rows:
        r = list(r)
        if name == "reach":
            out[f"{str(r[0])[:10]}|{r[1]}"] = [number(r[2]), number(r[3]), number(r[4])]
        elif name == "providers":
            out[f"{str(r[0])[:10]}|{r[1]}"] = [number(x) for x in r[2:7]]
        elif name == "top_sites":
            out[str(r[0])[:10]] = [number(r[1]), site_list(r[2])]
        elif name == "q2a":
            out[str(r[0])] = number(r[1])
    return out


def cardinal_answers(outdir, dataset):
    """Reads the CSV files cardinal wrote under outdir/<summary>/."""
    names = ["reach", "providers", "top_sites"] if dataset == "impressions" else ["q2a"]
    columns = {"reach": ["day", "state", "events", "revenue", "users"],
               "providers": ["day", "provider", "events", "users",
                             "revenue_p50", "revenue_p90", "revenue_p99"],
               "top_sites": ["day", "events", "sites"],
               "q2a": ["prefix", "revenue"]}
    answers = {}
    for name in names:
        files = sorted(glob.glob(os.path.join(outdir, name, "**", "*.csv"), recursive=True))
        if not files:
            continue
        rows = []
        for path in files:
            with open(path, newline="") as f:
                for record in csv.DictReader(f):
                    rows.append([record.get(c, "") for c in columns[name]])
        answers[name] = normalise(name, rows)
    return answers


# ---- cardinal ------------------------------------------------------------------


def cardinal_available(binary):
    """None if `cardinal run` exists, else why not."""
    if not binary or not os.path.exists(binary):
        return "binary missing"
    proc = subprocess.run([binary, "run", "--help"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    return None if proc.returncode == 0 else "no `run` subcommand"


def schema_for(dataset, path, rundir):
    """The schema file for an input. Parquet inputs get a copy whose WITH
    clause says format = 'parquet' (header does not apply)."""
    schema = SCHEMAS[dataset]
    if not path.endswith(".parquet"):
        return schema
    with open(schema) as f:
        text = f.read()
    text = re.sub(r"format\s*=\s*'csv'\s*,\s*header\s*=\s*(true|false)",
                  "format = 'parquet'", text)
    target = os.path.join(rundir, f"{dataset}-parquet.sql")
    with open(target, "w") as f:
        f.write(text)
    return target


def warm(path):
    """Reads `path` through, untimed, so that the timed run finds it in the
    page cache. Some machines page out idle file cache within a minute
    (here: a DAMON `pageout` scheme), and a cold read costs about 2
    kernel CPU-seconds per GB, charged to whichever system meets it."""
    buffer = bytearray(16 << 20)
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buffer):
            pass


def run_cardinal(args, dataset, path, threads, keep_answers):
    outdir = tempfile.mkdtemp(prefix="cardinal-out-", dir=args.out)
    cmd = shlex.split(CARDINAL_CMD.format(
        bin=shlex.quote(args.cardinal), schema=shlex.quote(schema_for(dataset, path, args.out)),
        input=shlex.quote(path), threads=threads, out=shlex.quote(outdir)))
    wall0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    stderr = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - wall0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): "
                           f"{stderr.decode(errors='replace')[-2000:]}")
    answers = cardinal_answers(outdir, dataset) if keep_answers else None
    subprocess.run(["rm", "-rf", outdir], check=True)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "maxrss_mb": usage.ru_maxrss / 1024}, answers


def run_peer(args, system, dataset, path, threads, answers_path):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", system,
           "--dataset", dataset, "--input", path, "--threads", str(threads)]
    if answers_path:
        cmd += ["--answers", answers_path]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{system} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- measuring -------------------------------------------------------------------


def count_rows(dataset, path):
    """Records of a text input, and its bytes (the uncompressed size)."""
    cache = path + ".count.json"
    if os.path.exists(cache) and os.path.getmtime(cache) >= os.path.getmtime(path):
        with open(cache) as f:
            return tuple(json.load(f))
    lines = size = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 24)
            if not block:
                break
            lines += block.count(b"\n")
            size += len(block)
    rows = lines - 1 if dataset == "impressions" else lines
    with open(cache, "w") as f:
        json.dump([rows, size], f)
    return rows, size


def measure(args):
    os.makedirs(args.out, exist_ok=True)
    threads_list = [int(t) for t in args.threads.split(",")]
    systems = args.systems.split(",")
    why_not = cardinal_available(args.cardinal) if CARDINAL in systems else None
    if CARDINAL in systems and why_not:
        print(f"cardinal: not built yet ({why_not}); its rows are left empty", file=sys.stderr)
    sizes = {"impressions": count_rows("impressions", args.impressions),
             "uservisits": count_rows("uservisits", args.uservisits)}
    answers_dir = os.path.join(args.out, "answers")
    os.makedirs(answers_dir, exist_ok=True)
    records = []
    todo = cases(args)
    with open(os.path.join(args.out, "results.jsonl"), "w") as sink:
        for round_index in range(args.rounds):
            # Rotate the order of the systems each round, so that no system
            # always runs right after the same neighbour.
            order = systems[round_index % len(systems):] + systems[:round_index % len(systems)]
            for workload, label, path, dataset in todo:
                rows, text_bytes = sizes[dataset]
                for threads in threads_list:
                    for system in order:
                        base = {"system": system, "workload": workload_name(workload, dataset),
                                "input": label, "threads": threads, "rows": rows,
                                "bytes": text_bytes, "file_bytes": os.path.getsize(path),
                                "round": round_index}
                        if system == CARDINAL and why_not:
                            continue
                        if system != CARDINAL and supports(system, label):
                            continue
                        tag = f"{system}-{base['workload'].replace(' ', '_')}-{label}-t{threads}"
                        keep = round_index == 0
                        print(f"round {round_index + 1}/{args.rounds}: {tag}", file=sys.stderr,
                              flush=True)
                        if args.warm:
                            warm(path)
                        try:
                            if system == CARDINAL:
                                result, answers = run_cardinal(args, dataset, path, threads, keep)
                                if keep and answers is not None:
                                    with open(os.path.join(answers_dir, tag + ".json"), "w") as f:
                                        json.dump(answers, f)
                            else:
                                result = run_peer(args, system, dataset, path, threads,
                                                  os.path.join(answers_dir, tag + ".json")
                                                  if keep else None)
                        except RuntimeError as e:
                            print(f"  FAILED: {e}", file=sys.stderr)
                            result = {"error": str(e)[:500]}
                        record = {**base, **result}
                        records.append(record)
                        sink.write(json.dumps(record) + "\n")
                        sink.flush()
    checks = check_answers(answers_dir, args.impressions + ".truth.json"
                           if os.path.exists(args.impressions + ".truth.json") else None,
                           args.impressions)
    with open(os.path.join(args.out, "checks.txt"), "w") as f:
        f.write("\n".join(checks) + "\n")
    # The answers take ~0.6 GB per run at the default sizes (Query 2A has
    # ~1.5M groups per run kept): kept only when something disagrees.
    if args.keep_answers or any("DISAGREE" in c for c in checks):
        print(f"answers kept in {answers_dir}", file=sys.stderr)
    else:
        subprocess.run(["rm", "-rf", answers_dir], check=True)
    if why_not:
        with open(os.path.join(args.out, "cardinal.txt"), "w") as f:
            f.write(why_not + "\n")
    buffer = io.StringIO()
    report(records, buffer, cardinal_note=why_not, checks=checks)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(buffer.getvalue())
    sys.stdout.write(buffer.getvalue())


# ---- checking answers -------------------------------------------------------------


def rel(a, b):
    if a == b:
        return 0.0
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def check_answers(answers_dir, truth_path, impressions=None):
    """Compares every run's answers with a reference run and, for reach, with
    the generator's exact distinct counts, and every run's revenue quantiles
    with their exact ranks in the input (`impressions`). Returns lines of
    text; lines that start with "DISAGREE" are disagreements."""
    lines = []
    truth = None
    if truth_path:
        with open(truth_path) as f:
            truth = json.load(f)
    files = sorted(glob.glob(os.path.join(answers_dir, "*.json")))
    loaded = {}
    for path in files:
        with open(path) as f:
            loaded[os.path.basename(path)[:-5]] = json.load(f)

    def group(tag):
        # system-workload-input-tthreads -> workload family
        return "impressions" if "impressions" in tag else "q2a"

    for family in ("impressions", "q2a"):
        tags = sorted(t for t in loaded if group(t) == family)
        if not tags:
            continue
        ref_tag = next((t for t in tags if t.startswith("duckdb-") and "-t1" in t
                        and ("csv" in t or "text" in t)), tags[0])
        ref = loaded[ref_tag]
        lines.append(f"{family}: reference {ref_tag}")
        exact = (exact_providers(loaded, tags, impressions, answers_dir)
                 if family == "impressions" and impressions else None)
        for tag in tags:
            lines += [f"  {tag}: {msg}" for msg in compare(family, ref, loaded[tag], tag == ref_tag)]
            if family == "impressions" and truth and "reach" in loaded[tag]:
                lines += [f"  {tag}: {msg}" for msg in against_truth(loaded[tag], truth)]
            if exact is not None and "providers" in loaded[tag]:
                lines += [f"  {tag}: {msg}" for msg in providers_vs_exact(loaded[tag]["providers"],
                                                                           exact)]
    return lines


# Ranks asked of approx_quantile in the providers summary, in answer order.
PROVIDER_RANKS = (0.5, 0.9, 0.99)
# KLL's normalized rank error at k = 200, the bound cardinal prints as
# rank_error: values past it are counted.
KLL_RANK_BOUND = 0.0133
# Largest rank error accepted for an approximate quantile: a little over
# twice KLL_RANK_BOUND; t-digest (DuckDB, chDB) is tighter in the tails.
RANK_TOLERANCE = 0.03


def exact_providers(loaded, tags, impressions, answers_dir):
    """The exact answers of rank_worker for every quantile value any run
    answered, counted over the input by a DuckDB worker (untimed); None
    when it cannot run."""
    candidates = sorted({(key, values[2 + i])
                         for tag in tags for key, values in loaded[tag].get("providers", {}).items()
                         for i in range(len(PROVIDER_RANKS)) if math.isfinite(values[2 + i])})
    source = parquet_path(impressions) if os.path.exists(parquet_path(impressions)) else impressions
    cand_path = os.path.join(answers_dir, "rank-candidates.json.in")
    out_path = os.path.join(answers_dir, "ranks.json.out")
    with open(cand_path, "w") as f:
        json.dump([list(c) for c in candidates], f)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--rank-worker",
                           "--ranks", cand_path, "--input", source, "--threads", "2",
                           "--answers", out_path],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(f"exact quantile ranks not counted: {proc.stderr[-500:]}", file=sys.stderr)
        return None
    with open(out_path) as f:
        return json.load(f)


def providers_vs_exact(providers, exact):
    """providers.users against each group's exact distinct users, and each
    answered quantile value's rank error: how far the rank asked for is
    from the ranks the value holds in its group's exact revenues."""
    out = []
    errors = sorted(abs(values[1] - exact["users"][key]) / exact["users"][key]
                    for key, values in providers.items() if exact["users"].get(key))
    if errors:
        mean = sum(errors) / len(errors)
        ok = mean <= 0.03 and errors[-1] <= 0.15
        out.append(f"{'agree   ' if ok else 'DISAGREE'} providers.users vs exact: "
                   f"{len(errors)} groups, mean error {mean:.2%}, max {errors[-1]:.2%} "
                   f"(tolerance mean 3%, max 15%)")
    ranks = exact["ranks"]
    errors = [[] for _ in PROVIDER_RANKS]
    for key, values in providers.items():
        for i, q in enumerate(PROVIDER_RANKS):
            counted = ranks.get(f"{key}|{values[2 + i]!r}")
            if counted is None:
                errors[i].append(1.0)  # not a value the group holds: no rank
                continue
            lt, le, n = counted
            errors[i].append(max(lt / n - q, q - le / n, 0.0))
    worst = [max(e, default=0.0) for e in errors]
    over = sum(1 for e in errors for x in e if x > KLL_RANK_BOUND)
    ok = max(worst) <= RANK_TOLERANCE
    out.append(f"{'agree   ' if ok else 'DISAGREE'} providers quantile ranks vs exact: "
               f"{sum(map(len, errors))} values, worst rank error 0.5/0.9/0.99 "
               f"{worst[0]:.2%}/{worst[1]:.2%}/{worst[2]:.2%}, {over} above {KLL_RANK_BOUND:.2%} "
               f"(tolerance {RANK_TOLERANCE:.0%})")
    return out


def compare(family, ref, got, is_ref):
    out = []
    if family == "q2a":
        a, b = ref.get("q2a", {}), got.get("q2a", {})
        if not b:
            return ["DISAGREE no q2a answer"]
        missing, extra = set(a) - set(b), set(b) - set(a)
        worst = max((rel(a[k], b[k]) for k in set(a) & set(b)), default=0.0)
        bad = sum(1 for k in set(a) & set(b) if rel(a[k], b[k]) > 1e-9)
        ok = not missing and not extra and bad == 0
        out.append(f"{'agree   ' if ok else 'DISAGREE'} q2a: {len(b)} groups "
                   f"({len(missing)} missing, {len(extra)} extra), sums: {bad} differ by "
                   f"> 1e-9 relative, worst {worst:.2g}")
        return out
    if is_ref:
        return ["(reference)"]
    for name in ("reach", "providers", "top_sites"):
        a, b = ref.get(name, {}), got.get(name, {})
        if not b:
            out.append(f"DISAGREE {name}: no answer")
            continue
        missing, extra = set(a) - set(b), set(b) - set(a)
        common = set(a) & set(b)
        notes = [f"{len(b)} groups ({len(missing)} missing, {len(extra)} extra)"]
        ok = not missing and not extra
        if name == "reach":
            counts = sum(1 for k in common if a[k][0] != b[k][0])
            sums = sum(1 for k in common if rel(a[k][1], b[k][1]) > 1e-9)
            users = max((rel(a[k][2], b[k][2]) for k in common), default=0.0)
            ok = ok and counts == 0 and sums == 0
            notes.append(f"counts differ in {counts}, sums in {sums}; "
                         f"distinct users differ by up to {users:.1%} (both approximate)")
        elif name == "providers":
            counts = sum(1 for k in common if a[k][0] != b[k][0])
            users = max((rel(a[k][1], b[k][1]) for k in common), default=0.0)
            # Quantile values are checked by their exact ranks
            # (quantile_ranks); their relative differences are shown for
            # information, in groups of at least 1000 events: a tail
            # quantile is a few sparse values, where a rank error well
            # inside the sketches' bounds moves the value by tens of %.
            big = [k for k in common if a[k][0] >= 1000]
            q = [max((rel(a[k][i], b[k][i]) for k in big), default=0.0) for i in (2, 3, 4)]
            # Distinct users and quantiles are checked against the exact
            # answers (providers_vs_exact); here only the counts decide.
            ok = ok and counts == 0
            notes.append(f"counts differ in {counts}; distinct users differ by up to {users:.1%} "
                         f"(both approximate); "
                         f"quantile values differ up to {q[0]:.1%}/{q[1]:.1%}/{q[2]:.1%} "
                         f"(0.5/0.9/0.99, {len(big)} groups of >= 1000 events; checked by rank)")
        else:
            counts = sum(1 for k in common if a[k][0] != b[k][0])
            top1 = sum(1 for k in common if a[k][1][:1] != b[k][1][:1])
            top3 = sum(1 for k in common if set(a[k][1][:3]) != set(b[k][1][:3]))
            ok = ok and counts == 0 and top1 == 0
            notes.append(f"counts differ in {counts}; top site differs on {top1} days, "
                         f"top-3 set on {top3}")
        out.append(f"{'agree   ' if ok else 'DISAGREE'} {name}: " + "; ".join(notes))
    return out


def against_truth(answers, truth):
    """reach.users against the exact distinct users by day and state, and the
    totals against the generator's exact counts and revenue."""
    out = []
    reach = answers["reach"]
    exact = truth.get("users_by_day_by_state", {})
    errors = []
    for day, states in exact.items():
        for state, users in states.items():
            got = reach.get(f"{day}|{state}")
            if got is not None and users > 0:
                errors.append(abs(got[2] - users) / users)
    if errors:
        errors.sort()
        mean = sum(errors) / len(errors)
        p99 = errors[min(len(errors) - 1, int(0.99 * len(errors)))]
        ok = mean <= 0.03 and errors[-1] <= 0.15
        out.append(f"{'agree   ' if ok else 'DISAGREE'} reach.users vs exact: "
                   f"{len(errors)} groups, mean error {mean:.2%}, p99 {p99:.2%}, "
                   f"max {errors[-1]:.2%} (tolerance mean 3%, max 15%)")
    events = sum(v[0] for v in reach.values())
    revenue = sum(v[1] for v in reach.values())
    want_events = truth.get("events_by_kind", {}).get("impression")
    want_revenue = truth.get("revenue_by_kind", {}).get("impression")
    if want_events is not None:
        ok = events == want_events and abs(revenue - want_revenue) <= 1e-6 * max(1, want_revenue)
        out.append(f"{'agree   ' if ok else 'DISAGREE'} reach totals vs exact: "
                   f"{events:.0f} impressions (exact {want_events}), revenue {revenue:.6f} "
                   f"(exact {want_revenue})")
    return out


# ---- report -------------------------------------------------------------------


def best(records):
    """Best repetition per (system, workload, input, threads), chosen
    separately for CPU time and wall time."""
    table = {}
    for r in records:
        key = (r["system"], r["workload"], r["input"], r["threads"])
        entry = table.setdefault(key, {"rows": r["rows"], "bytes": r["bytes"],
                                       "file_bytes": r["file_bytes"], "cpu": math.inf,
                                       "wall": math.inf, "n": 0, "errors": 0})
        if "error" in r:
            entry["errors"] += 1
            continue
        entry["cpu"] = min(entry["cpu"], r["cpu_s"])
        entry["wall"] = min(entry["wall"], r["wall_s"])
        entry["n"] += 1
    return table


def goal_for(workload, label, system):
    """(goal text, check(cardinal entry, peer entry or None)) or None."""
    if workload == "W1 impressions":
        if system == CARDINAL:
            return (">= 10 M/s per core", lambda c, p: c["rows"] / c["cpu"] >= W1_PER_CORE)
        return (f">= {W1_RATIO:g}x", lambda c, p: (c["rows"] / c["cpu"]) / (p["rows"] / p["cpu"])
                >= W1_RATIO)
    if workload == "W2 q2a" and label == "text":
        if system == CARDINAL:
            return (">= 1 GB/s per core", lambda c, p: c["bytes"] / c["cpu"] >= W2_PER_CORE)
        if system == "duckdb":
            return (f">= {W2_RATIO:g}x", lambda c, p: (c["rows"] / c["cpu"]) / (p["rows"] / p["cpu"])
                    >= W2_RATIO)
    if workload.startswith("W3") and system == "duckdb":
        return (f">= {W3_RATIO:g}x", lambda c, p: (c["rows"] / c["cpu"]) / (p["rows"] / p["cpu"])
                >= W3_RATIO)
    return None


def report(records, out=sys.stdout, cardinal_note=None, checks=None):
    table = best(records)
    header = ["system", "workload", "input", "threads", "wall s", "CPU s", "M rows/s",
              "M rows/CPU-s", "GB/s", "GB/CPU-s", "ratio vs cardinal (CPU)", "goal", "met?"]
    rows = []
    verdicts = []
    keys = sorted({(k[1], k[2], k[3]) for k in table},
                  key=lambda k: (k[0], ["csv", "text", "gzip", "zstd", "lz4", "parquet"].index(k[1])
                                 if k[1] in ["csv", "text", "gzip", "zstd", "lz4", "parquet"] else 9,
                                 k[2]))
    # cardinal's rows appear when it ran, or with the reason it could not.
    with_cardinal = cardinal_note is not None or any(k[0] == CARDINAL for k in table)
    systems = ([CARDINAL] if with_cardinal else []) + PEERS
    for workload, label, threads in keys:
        card = table.get((CARDINAL, workload, label, threads))
        if card is not None and card["n"] == 0:
            card = None
        for system in systems:
            entry = table.get((system, workload, label, threads))
            goal = goal_for(workload, label, system)
            goal_text = goal[0] if goal else ""
            if entry is None or entry["n"] == 0:
                if system == CARDINAL:
                    why = "not built yet" if cardinal_note else "failed" if entry else "not run"
                    rows.append([system, workload, label, threads, why, "", "", "", "", "", "",
                                 goal_text, "n/a" if goal else ""])
                elif supports(system, label):
                    rows.append([system, workload, label, threads, "cannot read", "", "", "",
                                 "", "", "", "", ""])
                elif entry is not None:
                    rows.append([system, workload, label, threads, "failed", "", "", "", "", "",
                                 "", goal_text, ""])
                continue
            ratio = ""
            met = ""
            if card is not None and system != CARDINAL:
                ratio = f"{(card['rows'] / card['cpu']) / (entry['rows'] / entry['cpu']):.2f}"
            if goal:
                if system == CARDINAL:
                    met = "yes" if goal[1](entry, None) else "NO"
                elif card is not None:
                    met = "yes" if goal[1](card, entry) else "NO"
                else:
                    met = "n/a"
                verdicts.append((f"{workload} {label} t{threads} "
                                 f"{'cardinal' if system == CARDINAL else 'cardinal vs ' + system}",
                                 goal_text, met))
            rows.append([system, workload, label, threads, f"{entry['wall']:.2f}",
                         f"{entry['cpu']:.2f}", f"{entry['rows'] / entry['wall'] / 1e6:.2f}",
                         f"{entry['rows'] / entry['cpu'] / 1e6:.2f}",
                         f"{entry['bytes'] / entry['wall'] / 1e9:.3f}",
                         f"{entry['bytes'] / entry['cpu'] / 1e9:.3f}", ratio, goal_text, met])

    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"

    print(line(header), file=out)
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|", file=out)
    for r in rows:
        print(line(r), file=out)
    print(file=out)
    rounds = {r.get("round") for r in records}
    print(f"best of {len(rounds)} interleaved round(s), chosen separately for wall and CPU "
          f"time; CPU = user + system time of the whole process (every thread); GB = "
          f"uncompressed text bytes of the input's rows; ratio = cardinal's rows per CPU-second "
          f"over the peer's, same thread count", file=out)
    if cardinal_note:
        print(f"cardinal: not built yet ({cardinal_note})", file=out)
    if verdicts:
        print(file=out)
        for what, goal, met in verdicts:
            print(f"  {met:4} {what}: {goal}", file=out)
    if checks:
        print(file=out)
        print("answers:", file=out)
        for c in checks:
            print(c, file=out)


# ---- main ----------------------------------------------------------------------


def main():
    global CARDINAL_CMD
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--systems", default="cardinal,duckdb,chdb")
    p.add_argument("--only", help="comma-separated workloads or workload-input: W1,W2-text,W3")
    p.add_argument("--cardinal", help="path of the cardinal binary")
    p.add_argument("--cardinal-cmd", help=f"override the command template ({CARDINAL_CMD})")
    p.add_argument("--impressions", help="impressions CSV (with .truth.json beside it)")
    p.add_argument("--uservisits", help="uservisits text (with .gz/.zst/.lz4/.parquet beside it)")
    p.add_argument("--out", help="directory for results.jsonl, checks.txt, table.md (and answers/)")
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="do not read each input into the page cache before its timed run")
    p.add_argument("--keep-answers", action="store_true",
                   help="keep answers/ even when every check agrees")
    p.add_argument("--report", help="print the table of an existing results.jsonl and exit")
    p.add_argument("--make-parquet", nargs="+", metavar="TEXT",
                   help="write Parquet copies of these text inputs (needs duckdb) and exit")
    p.add_argument("--worker", choices=PEERS, help=argparse.SUPPRESS)
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    p.add_argument("--input", help=argparse.SUPPRESS)
    p.add_argument("--answers", help=argparse.SUPPRESS)
    p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ranks", help=argparse.SUPPRESS)
    p.add_argument("--check", metavar="ANSWERS_DIR",
                   help="check the answers kept in ANSWERS_DIR (with --impressions) and exit")
    args = p.parse_args()

    if args.worker:
        args.threads = int(args.threads)
        worker(args)
        return
    if args.rank_worker:
        rank_worker(args)
        return
    if args.check:
        truth = args.impressions + ".truth.json" if args.impressions else None
        print("\n".join(check_answers(args.check, truth if truth and os.path.exists(truth)
                                       else None, args.impressions)))
        return
    if args.make_parquet:
        make_parquet(args.make_parquet)
        return
    if args.report:
        with open(args.report) as f:
            records = [json.loads(line) for line in f if line.strip()]
        checks_path = os.path.join(os.path.dirname(args.report), "checks.txt")
        checks = open(checks_path).read().splitlines() if os.path.exists(checks_path) else None
        note_path = os.path.join(os.path.dirname(args.report), "cardinal.txt")
        note = open(note_path).read().strip() if os.path.exists(note_path) else None
        report(records, checks=checks, cardinal_note=note)
        return
    if args.cardinal_cmd:
        CARDINAL_CMD = args.cardinal_cmd
    measure(args)


if __name__ == "__main__":
    main()
