#!/usr/bin/env python3
"""SQL over summaries: query latency of `cardinal serve` beside DuckDB
(raw rows) and chDB (pre-aggregated states), in one run.

run.sh starts the server, loads it and calls this with its ports; this
loads the same CSV into DuckDB (an in-memory table of the raw rows) and
into chDB (AggregatingMergeTree tables of `uniqCombinedState` and
`quantilesState` per day and group, merged to one row per group; once at
uniqCombined's default precision, 17, and once at 12), works
out the exact answers, then asks every engine each question `--requests`
times after `--warmup` warm-ups, one engine after another, on one
kept-alive client each, and prints a Markdown table of p50 and p99 and
each engine's answers beside the exact ones.

A PostgreSQL wire column (psycopg 3) is measured when `--pg PORT` is
given; otherwise it reads "n/a".

    harness.py --csv IMP.csv --http PORT [--pg PORT] [--requests 300]
               [--warmup 10] [--out DIR] [--chdb-dir DIR] [--threads 2]
"""

import argparse
import csv
import http.client
import io
import json
import math
import os
import platform
import statistics
import sys
import time
import urllib.parse

# The questions, as cardinal's SQL over summaries reads them; the peers'
# SQL for the same questions is in `duckdb_queries` and `chdb_queries`.
# `ref` is today's GET route, the reference for (a).
QUESTIONS = [
    ("a", "reach by state, 30 days merged",
     "SELECT state, users, users_lower, users_upper FROM reach GROUP BY state"),
    ("b", "providers' p99 revenue by week",
     "SELECT date_trunc('week', day) AS week, provider, revenue_p99 FROM providers GROUP BY 1, 2"),
    ("c", "overlap of alpha and beta",
     "SELECT overlap(users, provider = 'alpha', provider = 'beta') FROM providers"),
]
REF_PATH = "/v1/summaries/reach?by=state&buckets=all&format=json"
FLOOR_PATH = "/healthz"
SQL_FLOOR = "SELECT 1 FROM providers LIMIT 1"

COLUMNS = {
    "ts": "TIMESTAMP", "user_id": "BIGINT", "kind": "VARCHAR", "state": "VARCHAR",
    "site": "VARCHAR", "provider": "VARCHAR", "campaign": "VARCHAR", "revenue": "DOUBLE",
}


def quantile(sorted_ms, q):
    """The nearest-rank quantile of sorted values (q in 0..1)."""
    if not sorted_ms:
        return float("nan")
    i = min(len(sorted_ms) - 1, max(0, math.ceil(q * len(sorted_ms)) - 1))
    return sorted_ms[i]


def measure(call, requests, warmup):
    """Calls `call` warmup + requests times; returns (p50, p99, last answer)."""
    answer = None
    times = []
    for i in range(warmup + requests):
        t = time.perf_counter()
        answer = call()
        took = (time.perf_counter() - t) * 1000.0
        if i >= warmup:
            times.append(took)
    times.sort()
    return quantile(times, 0.5), quantile(times, 0.99), answer


# ---- cardinal over HTTP -------------------------------------------------------

class Http:
    """One kept-alive HTTP/1.1 connection to the server."""

    def __init__(self, port):
        self.port = port
        self.connect()

    def connect(self):
        """A new connection: each measurement starts on one (the server
        closes a connection left idle while the peers were measured)."""
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)

    def _ask(self, method, path, body=None):
        headers = {"Content-Type": "text/plain"} if body is not None else {}
        self.conn.request(method, path, body=body, headers=headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise SystemExit(f"{method} {path}: HTTP {r.status}: {data[:500]!r}")
        return data

    def sql(self, text):
        return self._ask("POST", "/v1/sql?format=csv", text.encode())

    def get(self, path):
        return self._ask("GET", path)


def csv_rows(data):
    """Rows of a CSV answer (bytes) as dicts."""
    return list(csv.DictReader(io.StringIO(data.decode())))


# ---- the peers ----------------------------------------------------------------

def duckdb_queries():
    where = "kind = 'impression'"
    return {
        "a": f"SELECT state, approx_count_distinct(user_id) AS users FROM imp WHERE {where} GROUP BY state",
        "b": (f"SELECT date_trunc('week', ts) AS week, provider, quantile_cont(revenue, 0.99) AS p99 "
              f"FROM imp WHERE {where} GROUP BY 1, 2"),
        "c": (f"SELECT count(*) FROM (SELECT user_id FROM imp WHERE {where} AND provider = 'alpha' "
              f"INTERSECT SELECT user_id FROM imp WHERE {where} AND provider = 'beta')"),
        "floor": "SELECT 1",
    }


def chdb_queries(suffix=""):
    """chDB's SQL; `suffix` "12" reads the tables of uniqCombined(12) states."""
    q = _chdb_queries()
    if suffix:
        q = {k: v.replace("uniqCombinedMerge(", f"uniqCombinedMerge({suffix})(")
             .replace("uniqCombinedMergeIf(", f"uniqCombinedMergeIf({suffix})(")
             .replace("reach_agg", "reach_agg" + suffix).replace("providers_agg", "providers_agg" + suffix)
             for k, v in q.items()}
    return q


def _chdb_queries():
    return {
        "a": "SELECT state, uniqCombinedMerge(users) AS users FROM reach_agg GROUP BY state",
        "b": ("SELECT toMonday(day) AS week, provider, quantilesMerge(0.5, 0.9, 0.99)(revenue)[3] AS p99 "
              "FROM providers_agg GROUP BY week, provider"),
        # Inclusion-exclusion: |A| + |B| - |A u B|, each a merge of states.
        "c": ("SELECT a + b - u FROM (SELECT "
              "uniqCombinedMergeIf(users, provider = 'alpha') AS a, "
              "uniqCombinedMergeIf(users, provider = 'beta') AS b, "
              "uniqCombinedMergeIf(users, provider IN ('alpha', 'beta')) AS u FROM providers_agg)"),
        "floor": "SELECT 1",
    }


def load_duckdb(path, threads):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    cols = ", ".join(f"'{k}': '{v}'" for k, v in COLUMNS.items())
    t = time.perf_counter()
    con.execute(f"CREATE TABLE imp AS SELECT * FROM read_csv('{path}', header = true, columns = {{{cols}}})")
    return con, time.perf_counter() - t, duckdb.__version__


def load_chdb(path, folder, threads):
    import chdb
    from chdb import session
    os.makedirs(folder, exist_ok=True)
    sess = session.Session(folder)
    schema = ", ".join(f"{k} {ch}" for k, ch in (
        ("ts", "DateTime64(6, ''UTC'')"), ("user_id", "Int64"), ("kind", "String"),
        ("state", "String"), ("site", "String"), ("provider", "String"),
        ("campaign", "String"), ("revenue", "Float64")))
    t = time.perf_counter()
    statements = [
        "DROP TABLE IF EXISTS reach_agg",
        "DROP TABLE IF EXISTS providers_agg",
        "CREATE TABLE reach_agg (day Date, state String, impressions SimpleAggregateFunction(sum, UInt64), "
        "revenue SimpleAggregateFunction(sum, Float64), users AggregateFunction(uniqCombined, Int64)) "
        "ENGINE = AggregatingMergeTree ORDER BY (day, state)",
        "CREATE TABLE providers_agg (day Date, provider String, impressions SimpleAggregateFunction(sum, UInt64), "
        "users AggregateFunction(uniqCombined, Int64), "
        "revenue AggregateFunction(quantiles(0.5, 0.9, 0.99), Float64)) "
        "ENGINE = AggregatingMergeTree ORDER BY (day, provider)",
        f"INSERT INTO reach_agg SELECT toDate(ts) AS day, state, count(), sum(revenue), uniqCombinedState(user_id) "
        f"FROM file('{path}', CSVWithNames, '{schema}') WHERE kind = 'impression' GROUP BY day, state "
        f"SETTINGS max_threads = {threads}, date_time_input_format = 'best_effort'",
        f"INSERT INTO providers_agg SELECT toDate(ts) AS day, provider, count(), uniqCombinedState(user_id), "
        f"quantilesState(0.5, 0.9, 0.99)(revenue) "
        f"FROM file('{path}', CSVWithNames, '{schema}') WHERE kind = 'impression' GROUP BY day, provider "
        f"SETTINGS max_threads = {threads}, date_time_input_format = 'best_effort'",
        "OPTIMIZE TABLE reach_agg FINAL",
        "OPTIMIZE TABLE providers_agg FINAL",
    ]
    # The same at uniqCombined(12): 2^12 six-bit cells, 3 KB a state
    # against the default's 96 KB, nearer cardinal's 1.3 KB.
    small = [x.replace("reach_agg", "reach_agg12").replace("providers_agg", "providers_agg12")
             .replace("AggregateFunction(uniqCombined, Int64)", "AggregateFunction(uniqCombined(12), Int64)")
             .replace("uniqCombinedState(user_id)", "uniqCombinedState(12)(user_id)") for x in statements]
    for stmt in statements + small:
        sess.query(stmt)
    took = time.perf_counter() - t
    groups = int(str(sess.query("SELECT count() FROM reach_agg", "CSV")).strip())
    return sess, took, groups, chdb.__version__


# ---- exact answers ------------------------------------------------------------

def truth(con):
    where = "kind = 'impression'"
    by_state = dict(con.execute(
        f"SELECT state, count(DISTINCT user_id) FROM imp WHERE {where} GROUP BY state").fetchall())
    p99 = {(str(w)[:10], p): v for w, p, v in con.execute(
        f"SELECT date_trunc('week', ts), provider, quantile_cont(revenue, 0.99) FROM imp "
        f"WHERE {where} GROUP BY 1, 2").fetchall()}
    overlap = con.execute(duckdb_queries()["c"]).fetchone()[0]
    return {"a": by_state, "b": p99, "c": overlap}


# ---- answers in one shape -----------------------------------------------------

def rel(x, t):
    return abs(x - t) / t if t else float("nan")


def check_a(answer, exact):
    """answer: {state: estimate} (and maybe bounds). Summary of errors."""
    est = {s: v[0] if isinstance(v, tuple) else v for s, v in answer.items()}
    if set(est) != set(exact):
        return {"error": f"states differ: {sorted(set(est) ^ set(exact))[:5]}"}
    errs = sorted(rel(est[s], exact[s]) for s in exact)
    out = {"CA": est["CA"], "CA_truth": exact["CA"], "mean_err": statistics.fmean(errs), "max_err": errs[-1]}
    if all(isinstance(v, tuple) for v in answer.values()):
        out["covered"] = sum(1 for s, v in answer.items() if v[1] <= exact[s] <= v[2])
        out["CA_interval"] = answer["CA"][1:]
    return out


def check_b(answer, exact):
    """answer: {(week, provider): p99}. Error of p99 against the exact p99."""
    if set(answer) != set(exact):
        return {"error": f"groups differ: {sorted(set(answer) ^ set(exact))[:5]}"}
    errs = sorted(rel(answer[k], exact[k]) for k in exact)
    return {"groups": len(errs), "mean_err": statistics.fmean(errs), "max_err": errs[-1]}


def cardinal_shape(key, data):
    rows = csv_rows(data)
    if key in ("a", "ref"):
        return {r["state"]: (float(r["users"]), float(r["users_lower"]), float(r["users_upper"]))
                for r in rows}
    if key == "b":
        return {(r["week"][:10], r["provider"]): float(r["revenue_p99"]) for r in rows}
    if key == "c":
        values = [float(v) for v in rows[0].values()]
        return tuple(values)  # estimate, lower, upper
    return None


def ref_shape(data):
    # JSON lines or an array of objects, whichever the route writes.
    text = data.decode().strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(line) for line in text.splitlines()]
    if isinstance(rows, dict):
        rows = rows.get("rows", [])
    out = {}
    for r in rows:
        users = r["users"]
        if isinstance(users, dict):
            out[r["state"]] = (float(users["value"]), float(users["lower"]), float(users["upper"]))
        else:
            out[r["state"]] = (float(users), float(r["users_lower"]), float(r["users_upper"]))
    return out


def pg_shape(key, rows):
    """The pg front end's rows: the same columns as the HTTP answer's."""
    if key == "a":
        return {r[0]: (float(r[1]), float(r[2]), float(r[3])) for r in rows}
    if key == "b":
        return {(str(w)[:10], p): float(v) for w, p, v in rows}
    if key == "c":
        return tuple(float(v) for v in rows[0])
    return None


def peer_shape(key, rows):
    if key == "a":
        return {s: float(v) for s, v in rows}
    if key == "b":
        return {(str(w)[:10], p): float(v) for w, p, v in rows}
    if key == "c":
        return float(rows[0][0])
    return None


# ---- the run ------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--http", type=int, required=True)
    ap.add_argument("--pg", type=int, default=None)
    ap.add_argument("--pg-note", default="n/a (not built yet)")
    ap.add_argument("--pg-dsn", default=os.environ.get("CARDINAL_PG_DSN"),
                    help="libpq connection string for the pg column (default host=127.0.0.1 port=PG "
                         "dbname=cardinal user=cardinal; env CARDINAL_PG_DSN)")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--duckdb-requests", type=int, default=100,
                    help="DuckDB's timed requests: it scans the raw rows each time (~0.25 s here)")
    ap.add_argument("--threads", type=int, default=2, help="DuckDB's threads and chDB's max_threads")
    ap.add_argument("--chdb-dir", default="chdb")
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    path = os.path.abspath(args.csv)
    os.makedirs(args.out, exist_ok=True)
    results = open(os.path.join(args.out, "results.jsonl"), "w")

    def record(**kv):
        results.write(json.dumps(kv, default=str) + "\n")
        results.flush()

    say = lambda *a: print("==", *a, file=sys.stderr, flush=True)
    say("loading DuckDB")
    con, duck_load, duck_version = load_duckdb(path, args.threads)
    say(f"DuckDB {duck_version}: {duck_load:.1f} s; loading chDB")
    sess, chdb_load, chdb_groups, chdb_version = load_chdb(path, os.path.abspath(args.chdb_dir), args.threads)
    say(f"chDB {chdb_version}: {chdb_load:.1f} s, reach_agg {chdb_groups} rows; exact answers")
    exact = truth(con)
    record(kind="setup", duckdb=duck_version, duckdb_load_s=duck_load, chdb=chdb_version,
           chdb_load_s=chdb_load, chdb_reach_groups=chdb_groups, overlap_truth=exact["c"])

    web = Http(args.http)
    pg = None
    if args.pg:
        import psycopg
        # The front end's login is not settled yet: --pg-dsn overrides.
        pg = psycopg.connect(args.pg_dsn or f"host=127.0.0.1 port={args.pg} dbname=cardinal user=cardinal",
                             autocommit=True)

    def pg_call(text):
        def call():
            with pg.cursor() as cur:
                cur.execute(text)
                return cur.fetchall()
        return call

    dq, cq, cq12 = duckdb_queries(), chdb_queries(), chdb_queries("12")
    lat = {}  # (key, engine) -> (p50, p99)
    answers = {}  # (key, engine) -> shaped answer
    keys = [k for k, _, _ in QUESTIONS]
    for key, what, text in QUESTIONS:
        engines = [("cardinal", lambda text=text: web.sql(text))]
        if pg:
            engines.append(("pg", pg_call(text)))
        engines.append(("duckdb", lambda q=dq[key]: con.execute(q).fetchall()))
        engines.append(("chdb", lambda q=cq[key]: sess.query(q, "CSV").bytes()))
        if key != "b":  # (b) reads no uniqCombined state
            engines.append(("chdb12", lambda q=cq12[key]: sess.query(q, "CSV").bytes()))
        for name, call in engines:
            say(f"({key}) {name}")
            web.connect()
            n = args.duckdb_requests if name == "duckdb" else args.requests
            p50, p99, answer = measure(call, n, args.warmup)
            lat[(key, name)] = (p50, p99)
            if name == "cardinal":
                shaped = cardinal_shape(key, answer)
            elif name == "pg":
                shaped = pg_shape(key, answer)
            elif name in ("chdb", "chdb12"):
                rows = list(csv.reader(io.StringIO(answer.decode())))
                shaped = peer_shape(key, rows)
            else:
                shaped = peer_shape(key, answer)
            answers[(key, name)] = shaped
            record(kind="latency", query=key, engine=name, p50_ms=p50, p99_ms=p99,
                   requests=n, warmup=args.warmup)
    say("(ref) cardinal GET")
    web.connect()
    p50, p99, answer = measure(lambda: web.get(REF_PATH), args.requests, args.warmup)
    lat[("ref", "cardinal")] = (p50, p99)
    answers[("ref", "cardinal")] = ref_shape(answer)
    record(kind="latency", query="ref", engine="cardinal", p50_ms=p50, p99_ms=p99)
    # What any SQL answer costs before it merges anything: the parse,
    # the hop to a blocking thread and the live view the engine's
    # workers hand over (the floor a query's ratio cannot beat).
    say("SQL floor")
    for name, call in [("cardinal", lambda: web.sql(SQL_FLOOR))] + \
            ([("pg", pg_call(SQL_FLOOR))] if pg else []):
        web.connect()
        p50, p99, _ = measure(call, args.requests, args.warmup)
        lat[("sqlfloor", name)] = (p50, p99)
        record(kind="latency", query="sqlfloor", engine=name, p50_ms=p50, p99_ms=p99)
    say("floors")
    for name, call in [("cardinal", lambda: web.get(FLOOR_PATH)),
                       ("duckdb", lambda: con.execute(dq["floor"]).fetchall()),
                       ("chdb", lambda: sess.query(cq["floor"], "CSV").bytes())] + \
            ([("pg", pg_call("SELECT 1"))] if pg else []):
        web.connect()
        p50, p99, _ = measure(call, args.requests, args.warmup)
        lat[("floor", name)] = (p50, p99)
        record(kind="latency", query="floor", engine=name, p50_ms=p50, p99_ms=p99)

    # ---- tables ----
    out = []
    pgcol = "pg wire p50 / p99" if pg else "pg wire"

    def cell(key, engine):
        if (key, engine) not in lat:
            return "-"
        a, b = lat[(key, engine)]
        return f"{a:.2f} / {b:.2f}"

    out.append(f"| query | cardinal HTTP p50 / p99 ms | {pgcol} | DuckDB (raw rows) p50 / p99 | "
               f"chDB (states, uniqCombined) p50 / p99 | chDB (states, uniqCombined(12)) p50 / p99 | "
               f"fastest peer p50 / cardinal HTTP p50 |")
    out.append("|---|---|---|---|---|---|---|")
    titles = {k: f"({k}) {w}" for k, w, _ in QUESTIONS}
    titles["ref"] = "(a) by `GET /v1/summaries/reach?by=state&buckets=all`"
    titles["sqlfloor"] = f"SQL floor: `{SQL_FLOOR}` (the live view, no merge)"
    titles["floor"] = "floor: `GET /healthz`; `SELECT 1`"
    for key in keys + ["ref", "sqlfloor", "floor"]:
        pgcell = cell(key, "pg") if pg else (args.pg_note if key in keys + ["sqlfloor", "floor"] else "-")
        peers = [(lat[(key, e)][0], e) for e in ("duckdb", "chdb", "chdb12") if (key, e) in lat]
        ratio = "-"
        if key == "ref":
            peers = [(lat[("a", e)][0], e) for e in ("duckdb", "chdb", "chdb12")]
        if peers and key not in ("floor", "sqlfloor") and (key, "cardinal") in lat:
            best, who = min(peers)
            ratio = f"{best / lat[(key, 'cardinal')][0]:.2f}x ({who})"
        out.append(f"| {titles[key]} | {cell(key, 'cardinal')} | {pgcell} | {cell(key, 'duckdb')} | "
                   f"{cell(key, 'chdb')} | {cell(key, 'chdb12')} | {ratio} |")
    out.append("")
    out.append("Answers against the exact ones (DuckDB `count(DISTINCT)`, `quantile_cont` and "
               "`INTERSECT` over the raw rows):")
    out.append("")
    out.append("| engine | (a) CA users | (a) mean / max abs rel. error, 50 states | "
               "(a) truth inside the 95% interval | (b) p99 mean / max rel. error | (c) alpha and beta |")
    out.append("|---|---|---|---|---|---|")
    ca = exact["a"]["CA"]
    out.append(f"| exact | {ca:,} | 0 | - | 0 | {exact['c']:,} |")
    names = [("cardinal", "cardinal SQL"), ("ref", "cardinal GET")] + ([("pg", "cardinal pg")] if pg else []) + \
        [("duckdb", "DuckDB"), ("chdb", "chDB"), ("chdb12", "chDB uniqCombined(12)")]
    for engine, label in names:
        ka = ("ref", "cardinal") if engine == "ref" else ("a", engine)
        a = check_a(answers[ka], exact["a"]) if ka in answers else None
        b = check_b(answers[("b", engine)], exact["b"]) if ("b", engine) in answers else None
        c = answers.get(("c", engine))
        record(kind="answers", engine=engine, a=a, b=b, c=c)
        acell = "-" if a is None else (a.get("error") or
                                         f"{a['CA']:,.0f}" + (f" [{a['CA_interval'][0]:,.0f}, {a['CA_interval'][1]:,.0f}]"
                                                             if "CA_interval" in a else ""))
        ecell = "-" if a is None or "error" in a else f"{a['mean_err'] * 100:.2f}% / {a['max_err'] * 100:.2f}%"
        cov = "-" if a is None or "covered" not in a else f"{a['covered']} of 50"
        bcell = "-" if b is None else (b.get("error") or
                                       f"{b['mean_err'] * 100:.2f}% / {b['max_err'] * 100:.2f}% ({b['groups']} groups)")
        if c is None:
            ccell = "-"
        elif isinstance(c, tuple):
            ccell = f"{c[0]:,.0f} [{c[1]:,.0f}, {c[2]:,.0f}] ({(c[0] - exact['c']) / exact['c'] * 100:+.1f}%)"
        else:
            ccell = f"{c:,.0f} ({(c - exact['c']) / exact['c'] * 100:+.1f}%)"
        out.append(f"| {label} | {acell} | {ecell} | {cov} | {bcell} | {ccell} |")
    out.append("")
    out.append(f"DuckDB {duck_version} (raw rows in memory, loaded in {duck_load:.1f} s), "
               f"chDB {chdb_version} (AggregatingMergeTree, {chdb_groups} reach groups, built in "
               f"{chdb_load:.1f} s, both precisions), threads {args.threads}; {args.requests} requests "
               f"({args.duckdb_requests} for DuckDB) after {args.warmup} warm-ups, one client each, "
               f"a new connection for each query; Python {platform.python_version()}.")
    table = "\n".join(out)
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
