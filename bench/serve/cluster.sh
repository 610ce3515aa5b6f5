#!/usr/bin/env bash
# Cluster query latency: three `cardinal serve` nodes on loopback, each
# with --peers naming the other two and a third of one generated file,
# against one server holding the whole file. Each query is asked N times
# on one kept-alive connection (after 10 warm-up requests); p50, p90 and
# p99 are printed per server. See crates/server/src/net/cluster.rs,
# "Measured".
#
#   bench/serve/cluster.sh                     # 1,000,000 events, 300 requests
#   bench/serve/cluster.sh --events 200000 --requests 100
#
# Flags (environment variables of the same name in capitals work too):
#   --events N     generated impressions, split into thirds   (default 1000000)
#   --requests N   requests per query and server               (default 300)
#
# Environment: CARDINAL=path/to/cardinal uses that build instead of
# building the release one. Works in bench/.work/serve/cluster/ (removed
# first); every server it starts is stopped on exit.
set -euo pipefail

EVENTS="${EVENTS:-1000000}"
REQUESTS="${REQUESTS:-300}"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --events) EVENTS="$2"; shift 2 ;;
        --requests) REQUESTS="$2"; shift 2 ;;
        *) echo "unknown flag $1" >&2; exit 2 ;;
    esac
done

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
if [[ -z "${CARDINAL:-}" ]]; then
    cargo build --release -p cardinal --manifest-path "$ROOT/Cargo.toml" >&2
    CARDINAL="${CARGO_TARGET_DIR:-$ROOT/target}/release/cardinal"
fi
WORK="$ROOT/bench/.work/serve/cluster"
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

cat > schema.sql <<'SQL'
CREATE STREAM impressions (ts TIMESTAMP, user_id BIGINT, kind TEXT,
  state TEXT, site TEXT, provider TEXT, campaign TEXT, revenue DOUBLE)
  WITH (format = 'csv', header = true, time = 'ts');
CREATE SUMMARY reach AS
  SELECT date_trunc('day', ts) AS day, state,
         count(*) AS impressions, sum(revenue) AS revenue, hll(user_id) AS users
  FROM impressions WHERE kind = 'impression' GROUP BY day, state;
CREATE SUMMARY audiences AS
  SELECT date_trunc('day', ts) AS day, provider, hll(user_id) AS users
  FROM impressions GROUP BY day, provider;
SQL
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > token
chmod 600 token

"$CARDINAL" gen impressions --events "$EVENTS" --users $((EVENTS / 5)) --days 30 -o imp.csv >&2
head -1 imp.csv > header.csv
for i in 0 1 2; do
    { cat header.csv; tail -n +2 imp.csv | awk -v i="$i" 'NR % 3 == i'; } > "part$i.csv"
done

# Free ports, bound and released: each node's peers must know its address.
read -r -a PORTS <<< "$(python3 -c '
import socket
socks = [socket.socket() for _ in range(8)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"

PIDS=()
stop() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop EXIT

start() { # name http native [peers]
    mkdir -p "$1"
    local more=()
    [[ -n "${4:-}" ]] && more=(--peers "$4")
    (cd "$1" && exec "$CARDINAL" serve ../schema.sql --http "127.0.0.1:$2" \
        --listen "127.0.0.1:$3" --data data --threads 1 --token-file ../token \
        "${more[@]}" > out.log 2> err.log) &
    PIDS+=("$!")
}
for i in 0 1 2; do
    peers=""
    for j in 0 1 2; do
        [[ "$j" != "$i" ]] && peers="$peers${peers:+,}http://127.0.0.1:${PORTS[$j]}"
    done
    start "node$i" "${PORTS[$i]}" "${PORTS[$((i + 4))]}" "$peers"
done
start single "${PORTS[3]}" "${PORTS[7]}"

# Ready: each prints its addresses once listening.
for name in node0 node1 node2 single; do
    for _ in $(seq 100); do
        [[ -s "$name/out.log" ]] && break
        sleep 0.1
    done
    [[ -s "$name/out.log" ]] || { echo "$name did not start:" >&2; cat "$name/err.log" >&2; exit 1; }
done
for i in 0 1 2; do
    "$CARDINAL" send "part$i.csv" --to "127.0.0.1:${PORTS[$((i + 4))]}" --stream impressions \
        --token-file token --client-id "part$i" --quiet
done
"$CARDINAL" send imp.csv --to "127.0.0.1:${PORTS[7]}" --stream impressions \
    --token-file token --client-id all --quiet

python3 - "$REQUESTS" "${PORTS[3]}" "${PORTS[0]}" <<'PY'
import http.client, sys
requests, single, node = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
token = open("token").read().strip()
queries = [
    "/v1/summaries/reach?by=state&buckets=all&format=json",
    "/v1/overlap?summary=audiences&a=provider%3D'alpha'&b=provider%3D'beta'",
    "/v1/summaries/reach?format=csv",
]
import time
print("| query | server | p50 ms | p90 ms | p99 ms |")
print("|---|---|---|---|---|")
answers = {}
for path in queries:
    for name, port in (("single", single), ("cluster of 3", node)):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        times = []
        for i in range(requests + 10):
            t = time.perf_counter()
            c.request("GET", path, headers={"Authorization": "Bearer " + token})
            r = c.getresponse()
            body = r.read()
            took = (time.perf_counter() - t) * 1000
            assert r.status == 200, (r.status, body[:300])
            if i >= 10:
                times.append(took)
        times.sort()
        answers.setdefault(path, set()).add(body if "overlap" not in path else b"")
        q = lambda f: times[min(len(times) - 1, int(len(times) * f))]
        print(f"| `{path}` | {name} | {q(0.5):.2f} | {q(0.9):.2f} | {q(0.99):.2f} |")
for path, bodies in answers.items():
    assert len(bodies) == 1, f"{path}: the cluster's answer differs from the single server's"
PY
