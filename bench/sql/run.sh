#!/usr/bin/env bash
# SQL over summaries: the latency of `POST /v1/sql` on a loaded `cardinal
# serve`, beside DuckDB answering the same questions over the raw rows and
# chDB answering them from pre-aggregated states (uniqCombined at its
# default precision and at 12), in one run. See
# bench/README.md, "SQL over summaries".
#
#   bench/sql/run.sh                             # 5,000,000 events, 300 requests
#   bench/sql/run.sh --events 1000000 --requests 100
#
# What it does: generates W1-like impressions (`cardinal gen impressions`,
# 30 days, 1M users; kept in bench/.work/sql/data/), starts `cardinal serve`
# on loopback with the schema below (reach by day and state; providers by
# day with quantiles of revenue), loads the file with `cardinal send`
# (timed), then bench/sql/harness.py loads the same file into DuckDB and
# chDB and asks each engine each question --requests times after 10
# warm-ups on one kept-alive client, and prints the table.
#
# The PostgreSQL wire column is measured when `cardinal serve --help`
# lists `--pg` (with psycopg 3; CARDINAL_PG_DSN overrides the connection
# string); otherwise it reads "n/a (not built yet)".
#
# Flags (environment variables of the same name in capitals work too):
#   --events N     generated impressions                   (default 5000000)
#   --requests N   timed requests per query and engine     (default 300)
#   --warmup N     untimed requests before them            (default 10)
#   --duckdb-requests N  DuckDB's timed requests: it scans the raw
#                  rows each time, ~0.25 s for 5M here     (default 100)
#   --threads N    DuckDB's threads, chDB's max_threads,
#                  and the server's --threads              (default 2)
#
# Environment: CARDINAL=path/to/cardinal uses that build instead of
# building the release one; PYTHON_VENV (default ~/.cache/cardinal-bench-py)
# is where the peers are installed when missing. Each run writes
# machine.txt, load.txt, results.jsonl, table.md and the server's logs to
# bench/.work/sql/runs/<UTC time>/; the server is stopped and its data and
# chDB's tables are deleted on exit, however the script exits.
set -euo pipefail

EVENTS="${EVENTS:-5000000}"
REQUESTS="${REQUESTS:-300}"
WARMUP="${WARMUP:-10}"
DUCKDB_REQUESTS="${DUCKDB_REQUESTS:-100}"
THREADS="${THREADS:-2}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --requests) REQUESTS="$2"; shift 2 ;;
        --warmup) WARMUP="$2"; shift 2 ;;
        --duckdb-requests) DUCKDB_REQUESTS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
    esac
done
for flag in EVENTS REQUESTS DUCKDB_REQUESTS THREADS; do
    [[ "${!flag}" =~ ^[1-9][0-9]*$ ]] || { echo "--${flag,,} must be a positive integer" >&2; exit 2; }
done
[[ "$WARMUP" =~ ^[0-9]+$ ]] || { echo "--warmup must be a whole number" >&2; exit 2; }

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work="$root/bench/.work/sql"
data="$work/data"
stamp="$(date -u +%Y%m%dT%H%M%SZ)"
out="$work/runs/$stamp"
scratch="$work/scratch/$stamp"   # the server's data and chDB's tables: deleted on exit
mkdir -p "$data" "$out" "$scratch"
say() { printf '== %s\n' "$*" >&2; }

# ---- binaries and peers --------------------------------------------------------
if [[ -z "${CARDINAL:-}" ]]; then
    say "building cardinal (release)"
    (cd "$root" && cargo build -q --release -p cardinal --bin cardinal)
fi
cardinal="${CARDINAL:-${CARGO_TARGET_DIR:-$root/target}/release/cardinal}"
venv="${PYTHON_VENV:-$HOME/.cache/cardinal-bench-py}"
if ! "$venv/bin/python" -c 'import duckdb, chdb, datasketches, psycopg' 2>/dev/null; then
    say "installing the peers into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q -r "$here/requirements.txt"
fi
py="$venv/bin/python"

# ---- input ---------------------------------------------------------------------
records="$data/impressions-$EVENTS.csv"
if [[ ! -f "$records" ]]; then
    say "generating $EVENTS W1 events"
    "$cardinal" gen impressions --events "$EVENTS" -o "$records.tmp"
    mv "$records.tmp" "$records"
fi

cat > "$out/schema.sql" <<'SQL'
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT, state TEXT,
  site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS impressions, sum(revenue) AS revenue, hll(user_id) AS users
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, state;
CREATE SUMMARY providers AS
  SELECT date_trunc('day', ts) AS day, provider,
         count(*) AS impressions, hll(user_id) AS users,
         approx_quantile(revenue, 0.5, 0.9, 0.99) AS revenue
  FROM impressions WHERE kind = 'impression'
  GROUP BY day, provider;
SQL

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "cardinal: $cardinal"
    echo "events: $EVENTS requests: $REQUESTS (DuckDB $DUCKDB_REQUESTS) warmup: $WARMUP threads: $THREADS"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
    echo "memory: $(free -g | awk '/Mem:/ {print $2}') GiB"
    echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/machine.txt"

# ---- the server: stopped on exit -----------------------------------------------
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$scratch"
    rmdir "$work/scratch" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pg_args=()
pg_port=""
if "$cardinal" serve --help | grep -q -- '--pg '; then
    pg_port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    pg_args=(--pg "127.0.0.1:$pg_port")
fi

"$cardinal" serve "$out/schema.sql" --http 127.0.0.1:0 --listen 127.0.0.1:0 \
    --data "$scratch/data" --threads "$THREADS" "${pg_args[@]}" \
    > "$out/server.out" 2> "$out/server.err" &
server_pid=$!
# Ready: it prints its addresses once listening.
for _ in $(seq 300); do
    grep -q 'HTTP on' "$out/server.out" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$out/server.err" >&2; exit 1; }
    sleep 0.1
done
http_port="$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$out/server.out" | head -1 | sed 's/.*://')"
native_port="$(grep -oE 'native protocol on 127\.0\.0\.1:[0-9]+' "$out/server.out" | head -1 | sed 's/.*://')"
[[ -n "$http_port" && -n "$native_port" ]] || { say "no addresses in server.out:"; cat "$out/server.out" "$out/server.err" >&2; exit 1; }

say "loading $EVENTS events into cardinal serve (HTTP $http_port, native $native_port)"
start=$(date +%s.%N)
"$cardinal" send "$records" --to "127.0.0.1:$native_port" --stream impressions --client-id bench --quiet
end=$(date +%s.%N)
load_s="$(python3 -c "print(f'{$end - $start:.1f}')")"
echo "cardinal send of $EVENTS events: $load_s s" | tee "$out/load.txt" >&2

pg_note="n/a (not built yet)"
harness=(--csv "$records" --http "$http_port" --requests "$REQUESTS" --warmup "$WARMUP"
    --threads "$THREADS" --duckdb-requests "$DUCKDB_REQUESTS" --chdb-dir "$scratch/chdb" --out "$out" --pg-note "$pg_note")
[[ -n "$pg_port" ]] && harness+=(--pg "$pg_port")
"$py" "$here/harness.py" "${harness[@]}"
{
    echo
    echo "cardinal: loaded in $load_s s (\`cardinal send\`, $EVENTS events); $(cat "$out/machine.txt" | tr '\n' ';' | sed 's/;$//')"
} | tee -a "$out/table.md"
say "wrote $out"
