#!/usr/bin/env bash
# The issue 4 chain-store benchmark: the big run of the store alone, then the
# store, hashbrown's HashMap<u64, Vec<u8>> and Redis APPEND (pipelined) on the
# same smaller workload, one after the other (two shared cores: running them
# at once would measure the contention).
#
#   bench/chains/run.sh [big_ids] [big_appends] [small_ids] [small_appends]
#
# Results go to bench/chains/out/ (not committed); bench/README.md has the
# numbers of a run.
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/cardinal-target-chains}"
BIG_IDS="${1:-300000000}"
BIG_APPENDS="${2:-400000000}"
SMALL_IDS="${3:-20000000}"
SMALL_APPENDS="${4:-30000000}"
OUT=bench/chains/out
mkdir -p "$OUT"
cargo build --profile release-lto -p cardinal-chains --example chains_bench
BIN="$CARGO_TARGET_DIR/release-lto/examples/chains_bench"
SNAP="${SNAPSHOT_DIR:-/tmp}/cardinal-chains-bench.snap"

echo "== big run: chains, wall clock, snapshot at the end"
"$BIN" --mode chains --ids "$BIG_IDS" --appends "$BIG_APPENDS" --snapshot "$SNAP" | tee "$OUT/big.txt"

echo "== small run: chains, thread CPU clock per operation"
"$BIN" --mode chains --ids "$SMALL_IDS" --appends "$SMALL_APPENDS" --clock cpu | tee "$OUT/small_chains_cpu.txt"
echo "== small run: chains, wall clock"
"$BIN" --mode chains --ids "$SMALL_IDS" --appends "$SMALL_APPENDS" | tee "$OUT/small_chains.txt"
echo "== small run: hashbrown, wall clock"
"$BIN" --mode hashbrown --ids "$SMALL_IDS" --appends "$SMALL_APPENDS" | tee "$OUT/small_hashbrown.txt"
echo "== small run: hashbrown, thread CPU clock per operation"
"$BIN" --mode hashbrown --ids "$SMALL_IDS" --appends "$SMALL_APPENDS" --clock cpu | tee "$OUT/small_hashbrown_cpu.txt"

if command -v redis-server >/dev/null; then
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    DIR=$(mktemp -d)
    redis-server --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no --dir "$DIR" --daemonize no >"$OUT/redis-server.log" 2>&1 &
    REDIS_PID=$!
    trap 'kill "$REDIS_PID" 2>/dev/null || true; rm -rf "$DIR"' EXIT
    for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "== small run: redis $(redis-server --version | awk '{print $3}') APPEND, pipelines of 1000"
    "$BIN" --mode redis --port "$PORT" --ids "$SMALL_IDS" --appends "$SMALL_APPENDS" | tee "$OUT/small_redis.txt"
    kill "$REDIS_PID"
    wait "$REDIS_PID" 2>/dev/null || true
fi
